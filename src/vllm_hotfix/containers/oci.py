"""OCI image layouts (image-spec 1.1, image-layout 1.0.0), made and read with the standard library.

Pure: entries in, the layout's files (name -> bytes) out (``build``); a layout's files in, through a
reader, its checked descriptors out (``read``; the layer's members: containers/oci_layer.py). commands/pack.py
and commands/admission.py do the I/O.

What ``build`` makes is a runnable image, not an OCI-1.1 artifact: each manifest's config is a real
image config (``application/vnd.oci.image.config.v1+json`` with ``os``, ``architecture`` and
``rootfs.diff_ids``), because containerd mounts only such images as image volumes (an artifact with an
empty config is refused), and its unpacker unpacks only an image whose config platform matches the
node's (another platform is fetched, never unpacked). So one platform gives one manifest; several give
one image index whose manifests differ only in their config's platform and share the one layer.

Byte-reproducible: entries sorted by path (a directory before what it holds, every parent listed),
mtime 0, uid/gid 0 without names, modes given (0644 files, 0755 directories), no xattrs, pax headers
only for names longer than ustar holds (a ``path`` record, nothing else), gzip with mtime 0, no file
name and a fixed level, JSON with sorted keys and no spaces. The same entries give the same bytes and
so the same digests with the same zlib (the tar and its diff_id whatever the zlib).
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zlib
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from vllm_hotfix_guard.core.docfields import Fields, is_hex64, relpath_problem
from vllm_hotfix_guard.errors import InvalidInput, UsageError

MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"  # the tag a layout's index.json gives a manifest
LAYOUT_FILE = "oci-layout"
INDEX_FILE = "index.json"
BLOBS = "blobs/sha256"
LAYOUT_VERSION = "1.0.0"
GZIP_LEVEL = 6  # gzip's and `tar -z`'s default
FILE_MODE, DIR_MODE = 0o644, 0o755
INDEX_LIMIT = 1 << 20  # index.json, a manifest, a config: small JSON documents
MAX_IMAGES = 64  # manifests an image index may list (a bundle has one per platform: 2 by default)
PLATFORMS = ("linux/amd64", "linux/arm64")  # where vLLM runs (CUDA and ROCm on amd64; GH200, Ascend on arm64)


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One member of a layer: a regular file (``data``) or a directory (``data`` None)."""

    path: str  # relative posix path inside the image
    data: Optional[bytes] = None
    mode: int = FILE_MODE


@dataclass(frozen=True, slots=True, kw_only=True)
class Platform:
    """An image's platform as the config and the index name it."""

    os: str
    architecture: str
    variant: Optional[str] = None

    @classmethod
    def parse(cls, text: str) -> "Platform":
        parts = text.split("/")
        if len(parts) not in (2, 3) or not all(p and p.isascii() and p.replace("_", "").isalnum() for p in parts):
            raise UsageError(f"not a platform: {text!r}", hint="OS/ARCH[/VARIANT], e.g. linux/amd64 or linux/arm64")
        return cls(os=parts[0], architecture=parts[1], variant=parts[2] if len(parts) == 3 else None)

    def to_json(self) -> dict:
        found = {"architecture": self.architecture, "os": self.os}
        return {**found, "variant": self.variant} if self.variant else found

    def __str__(self) -> str:
        return "/".join(p for p in (self.os, self.architecture, self.variant) if p)


@dataclass(frozen=True, slots=True, kw_only=True)
class Descriptor:
    """What points at a blob: its media type, digest and size (and, in an index, its platform)."""

    media_type: str
    digest: str  # "sha256:<hex>"
    size: int
    annotations: tuple[tuple[str, str], ...] = ()
    platform: Optional[Platform] = None

    def to_json(self) -> dict:
        found: dict = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.platform is not None:
            found["platform"] = self.platform.to_json()
        if self.annotations:
            found["annotations"] = dict(self.annotations)
        return found

    @property
    def hex(self) -> str:
        return self.digest.partition(":")[2]


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """An OCI image layout: its files by relative name, and what they hold."""

    files: dict  # "oci-layout", "index.json", "blobs/sha256/<hex>" -> bytes
    top: Descriptor  # what index.json names: the image index (several platforms) or the manifest
    manifests: tuple[Descriptor, ...]  # one per platform (``platform`` set)
    layer: Descriptor
    diff_id: str  # sha256 of the uncompressed layer (the config's rootfs.diff_ids)
    tar_size: int
    members: int


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical_json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def tar_layer(entries: list[Entry]) -> tuple[bytes, int]:
    """The layer's tar (reproducible; see the module docstring) and its member count. Parents are
    added as directories; a path given twice, or both as a file and a directory, is refused."""
    members: dict[str, Entry] = {}
    for entry in entries:
        problem = relpath_problem(entry.path)
        if problem:
            raise InvalidInput(f"layer member {entry.path!r}: unsafe path ({problem})")
        parts = entry.path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            known = members.setdefault(parent, Entry(path=parent, mode=DIR_MODE))
            if known.data is not None:
                raise InvalidInput(f"layer member {parent!r} is both a file and a directory")
        if entry.path in members and (members[entry.path].data is not None or entry.data is not None):
            raise InvalidInput(f"layer member {entry.path!r} is given twice")
        members[entry.path] = entry
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        for path in sorted(members, key=lambda p: p.split("/")):
            entry = members[path]
            info = tarfile.TarInfo(path)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = entry.mode
            if entry.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
    return out.getvalue(), len(members)


def gzip_bytes(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    """RFC 1952 gzip of ``data`` with a fixed header: no name, mtime 0, OS 255 (unknown)."""
    xfl = 2 if level == 9 else 4 if level == 1 else 0
    header = b"\x1f\x8b\x08\x00" + b"\x00\x00\x00\x00" + bytes((xfl, 255))
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = compressor.compress(data) + compressor.flush()
    trailer = (zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "little") + (len(data) & 0xFFFFFFFF).to_bytes(4, "little")
    return header + body + trailer


def build(entries: list[Entry], *, platforms: tuple[Platform, ...], ref_name: str, labels: dict,
          annotations: dict, created_by: str) -> Layout:
    """The layout of one image of one layer: a config per platform (``labels`` in config.Labels), a
    manifest per platform (``annotations``), an image index over them when there are several (the same
    annotations), and index.json naming the top one as ``ref_name`` (plus ``annotations``' keys)."""
    if not platforms:
        raise UsageError("name at least one --platform")
    check_tag(ref_name)
    tar, count = tar_layer(entries)
    compressed = gzip_bytes(tar)
    blobs: dict[str, bytes] = {}

    def blob(data: bytes, media_type: str, **extra) -> Descriptor:
        descriptor = Descriptor(media_type=media_type, digest=digest_of(data), size=len(data), **extra)
        blobs[f"{BLOBS}/{descriptor.hex}"] = data
        return descriptor

    diff_id = digest_of(tar)
    layer = blob(compressed, MEDIA_LAYER)
    notes = tuple(sorted(annotations.items()))
    manifests = []
    for platform in dict.fromkeys(platforms):
        config = blob(canonical_json({
            **platform.to_json(), "config": {"Labels": dict(sorted(labels.items()))},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]}, "history": [{"created_by": created_by}]}),
            MEDIA_CONFIG)
        manifest = canonical_json({"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": config.to_json(),
                                   "layers": [layer.to_json()], "annotations": dict(notes)})
        manifests.append(blob(manifest, MEDIA_MANIFEST, platform=platform))
    if len(manifests) == 1:
        top = Descriptor(media_type=MEDIA_MANIFEST, digest=manifests[0].digest, size=manifests[0].size)
    else:
        top = blob(canonical_json({"schemaVersion": 2, "mediaType": MEDIA_INDEX,
                                   "manifests": [m.to_json() for m in manifests], "annotations": dict(notes)}),
                   MEDIA_INDEX)
    named = Descriptor(media_type=top.media_type, digest=top.digest, size=top.size,
                       annotations=tuple(sorted({**annotations, REF_NAME: ref_name}.items())))
    files = {LAYOUT_FILE: canonical_json({"imageLayoutVersion": LAYOUT_VERSION}),
             INDEX_FILE: canonical_json({"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [named.to_json()]}),
             **dict(sorted(blobs.items()))}
    return Layout(files=files, top=named, manifests=tuple(manifests), layer=layer, diff_id=diff_id,
                  tar_size=len(tar), members=count)


def check_tag(tag: str) -> str:
    """A tag as registries take it (distribution spec: [A-Za-z0-9_][A-Za-z0-9._-]{0,127})."""
    if not (0 < len(tag) <= 128 and tag.isascii() and (tag[0].isalnum() or tag[0] == "_")
            and all(c.isalnum() or c in "._-" for c in tag)):
        raise UsageError(f"not an image tag: {tag!r}", hint="letters, digits, '_', '.', '-' (at most 128; not first: '.', '-')")
    return tag


# -- reading a layout (every blob checked against its digest and size) ------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Image:
    """One platform's image of a layout read back: its manifest, config and layers, checked."""

    manifest: Descriptor
    platform: Optional[Platform]
    annotations: dict
    labels: dict
    layers: tuple[Descriptor, ...]
    diff_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadLayout:
    """A layout read back: what index.json names, and the images under it."""

    top: Descriptor
    annotations: dict  # of the top manifest or image index
    images: tuple[Image, ...]


Reader = Callable[[str, int], bytes]  # (relative name, size cap) -> bytes; OSError / InvalidInput as read_bounded


def read(source: str, read_file: Reader) -> ReadLayout:
    """The layout's one image (index.json must name exactly one), every document checked (key paths in
    errors) and every blob against its descriptor's digest and size, except the layers' content, which
    ``oci_layer.layer_members`` checks."""
    f = Fields(f"{source}/{INDEX_FILE}")
    index = f.mapping(_json(read_file, INDEX_FILE, INDEX_LIMIT, f.source), "")
    named = f.items(f.get(index, "", "manifests", list), "manifests")
    if len(named) != 1:
        raise f.fail("manifests", f"expected one image, found {len(named)}")
    top = _descriptor(f, named[0], "manifests[0]")
    blob = blob_reader(source, read_file)
    data = blob(top, INDEX_LIMIT)
    if top.media_type == MEDIA_INDEX:
        g = Fields(f"{source}: {top.digest}")
        doc = g.mapping(_load(data, g.source), "")
        listed = g.items(g.get(doc, "", "manifests", list), "manifests")
        if not listed or len(listed) > MAX_IMAGES:
            raise g.fail("manifests", f"the image index lists {len(listed)} manifests; a hotfix bundle has 1 to "
                                      f"{MAX_IMAGES} (one per platform)")
        descriptors = [_descriptor(g, m, f"manifests[{i}]") for i, m in enumerate(listed)]
        images = tuple(_image(source, blob, d) for d in descriptors)
        annotations = _annotations(g, doc, "")
    elif top.media_type == MEDIA_MANIFEST:
        image = _image(source, blob, top, data)
        images, annotations = (image,), image.annotations
    else:
        raise f.fail("manifests[0].mediaType", f"not an image manifest or index: {top.media_type!r}")
    return ReadLayout(top=top, annotations=annotations, images=images)


def blob_reader(source: str, read_file: Reader) -> Callable[[Descriptor, int], bytes]:
    def blob(descriptor: Descriptor, cap: int) -> bytes:
        if descriptor.size > cap:
            raise InvalidInput(f"{source}: blob {descriptor.digest} is {descriptor.size} bytes, over the {cap} "
                               "a hotfix bundle's may be")
        data = read_file(f"{BLOBS}/{descriptor.hex}", cap)
        if len(data) != descriptor.size or digest_of(data) != descriptor.digest:
            raise InvalidInput(f"{source}: blob {descriptor.digest} does not hold what its descriptor says "
                               f"({len(data)} bytes, {digest_of(data)})", hint="the layout was changed after it was written: pack it again")
        return data
    return blob


def _image(source: str, blob, descriptor: Descriptor, data: Optional[bytes] = None) -> Image:
    f = Fields(f"{source}: {descriptor.digest}")
    if descriptor.media_type != MEDIA_MANIFEST:
        raise f.fail("mediaType", f"not an image manifest: {descriptor.media_type!r}")
    doc = f.mapping(_load(blob(descriptor, INDEX_LIMIT) if data is None else data, f.source), "")
    if f.get(doc, "", "schemaVersion", int) != 2:
        raise f.fail("schemaVersion", "expected 2")
    config = _descriptor(f, f.get(doc, "", "config", dict), "config")
    if config.media_type != MEDIA_CONFIG:
        raise f.fail("config.mediaType", f"not an image config: {config.media_type!r} (containerd mounts only images)")
    layers = tuple(_descriptor(f, d, f"layers[{i}]") for i, d in enumerate(f.items(f.get(doc, "", "layers", list), "layers")))
    c = Fields(f"{source}: config {config.digest}")
    body = c.mapping(_load(blob(config, INDEX_LIMIT), c.source), "")
    rootfs = c.get(body, "", "rootfs", dict)
    diff_ids = tuple(c.items(c.get(rootfs, "rootfs", "diff_ids", list), "rootfs.diff_ids"))
    if len(diff_ids) != len(layers) or not all(isinstance(d, str) and _is_digest(d) for d in diff_ids):
        raise c.fail("rootfs.diff_ids", f"expected {len(layers)} sha256 digest(s), one per layer")
    labels = c.get(c.get(body, "", "config", dict, required=False, default={}), "config", "Labels", dict,
                   required=False, default={})
    return Image(manifest=descriptor, platform=descriptor.platform, annotations=_annotations(f, doc, ""),
                 labels=labels, layers=layers, diff_ids=diff_ids)


def _json(read_file: Reader, name: str, cap: int, source: str):
    return _load(read_file(name, cap), source)


def _load(data: bytes, source: str):
    from vllm_hotfix_guard.core.data import load_json

    return load_json(data, source)


def _is_digest(value: str) -> bool:
    algorithm, _, hexdigest = value.partition(":")
    return algorithm == "sha256" and is_hex64(hexdigest)


def _descriptor(f: Fields, doc, where: str) -> Descriptor:
    doc = f.mapping(doc, where)
    digest = f.text(doc, where, "digest", limit=80)
    if not _is_digest(digest):
        raise f.fail(f.at(where, "digest"), f"expected sha256:<64 hex digits>, got {digest!r}")
    size = f.get(doc, where, "size", int)
    if size < 0:
        raise f.fail(f.at(where, "size"), f"negative size {size}")
    platform = None
    found = f.get(doc, where, "platform", dict, required=False)
    if found is not None:
        at = f.at(where, "platform")
        platform = Platform(os=f.text(found, at, "os", limit=64), architecture=f.text(found, at, "architecture", limit=64),
                            variant=f.text(found, at, "variant", required=False, limit=64))
    return Descriptor(media_type=f.text(doc, where, "mediaType", limit=256), digest=digest, size=size,
                      annotations=tuple(sorted(_annotations(f, doc, where).items())), platform=platform)


def _annotations(f: Fields, doc: dict, where: str) -> dict:
    found = f.get(doc, where, "annotations", dict, required=False, default={})
    bad = next((k for k, v in found.items() if not isinstance(v, str)), None)
    if bad is not None:
        raise f.fail(f.at(f.at(where, "annotations"), bad), "expected a string")
    return found
