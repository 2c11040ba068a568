"""A catalog release as an OCI artifact (image-spec 1.1) in an OCI image layout, beside `pack`'s bundles.

`hotfix catalog publish --oci DIR` writes the layout; `hotfix catalog add NAME oci:DIR[:TAG]` reads it.
One manifest, ``artifactType`` ARTIFACT_TYPE, the empty config, one layer per release file (release.json,
its signature files, the archive), each titled with its file name (``org.opencontainers.image.title``,
as ORAS names files); index.json names the manifest by TAG (default ``latest``). Byte-reproducible (JSON
with sorted keys, no spaces). Push it with `skopeo copy oci:DIR:latest docker://REGISTRY/PATH:latest` (or
`oras cp --from-oci-layout`). The wrapper carries no trust: the release inside is checked as from any
URL, and every blob read here is checked against its descriptor's digest and size first.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

from vllm_hotfix_guard.core.docfields import Fields
from vllm_hotfix_guard.errors import InvalidInput, UsageError
from vllm_hotfix_guard.inputs import read_bounded

ARTIFACT_TYPE = "application/vnd.vllm-hotfix.catalog-release.v1"
EMPTY = "application/vnd.oci.empty.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
TITLE = "org.opencontainers.image.title"
REF_NAME = "org.opencontainers.image.ref.name"
JSON_LIMIT = 1 << 20
DEFAULT_TAG = "latest"


def _media(name: str) -> str:
    if name.endswith(".minisig"):
        return "application/vnd.vllm-hotfix.minisign-signature.v1"
    if name.endswith(".tar.gz"):
        return "application/vnd.vllm-hotfix.catalog-release.archive.v1.tar+gzip"
    return "application/vnd.vllm-hotfix.catalog-release.metadata.v1+json"


def _json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layout_files(release: dict[str, bytes], tag: str = DEFAULT_TAG) -> dict[str, bytes]:
    """The layout's files (relative path -> bytes) holding ``release`` (file name -> bytes)."""
    files: dict[str, bytes] = {"oci-layout": _json({"imageLayoutVersion": "1.0.0"})}

    def blob(data: bytes) -> str:
        digest = _digest(data)
        files[f"blobs/sha256/{digest[7:]}"] = data
        return digest

    empty = b"{}"
    layers = [{"mediaType": _media(name), "digest": blob(release[name]), "size": len(release[name]),
               "annotations": {TITLE: name}} for name in sorted(release)]
    manifest = _json({"schemaVersion": 2, "mediaType": MANIFEST, "artifactType": ARTIFACT_TYPE,
                      "config": {"mediaType": EMPTY, "digest": blob(empty), "size": len(empty), "data": "e30="},
                      "layers": layers})
    files["index.json"] = _json({"schemaVersion": 2, "mediaType": INDEX, "manifests": [
        {"mediaType": MANIFEST, "artifactType": ARTIFACT_TYPE, "digest": blob(manifest), "size": len(manifest),
         "annotations": {REF_NAME: tag}}]})
    return files


def split_reference(url: str) -> tuple[Path, str]:
    """``oci:/srv/layout:v3`` -> (/srv/layout, 'v3'); no tag: 'latest' (skopeo's form of an oci: reference)."""
    rest = url[len("oci:"):]
    path, sep, tag = rest.rpartition(":")
    if not sep or "/" in tag or not tag:
        path, tag = rest, DEFAULT_TAG
    if not path.startswith("/"):
        raise UsageError(f"{url!r}: an oci: URL names an absolute layout directory (oci:/PATH[:TAG])")
    return Path(path), tag


def fetch_blob(url: str, name: str, *, cap: int) -> Optional[bytes]:
    """The bytes of the layer titled ``name`` in the layout ``url`` names (None: no such layer)."""
    layout, tag = split_reference(url)
    source = f"oci:{layout}:{tag}"
    index = _read_json(layout, "index.json", source)
    f = Fields(f"{source} index.json")
    chosen = [m for m in f.items(f.mapping(index, "").get("manifests"), "manifests")
              if isinstance(m, dict) and (m.get("annotations") or {}).get(REF_NAME) == tag]
    if len(chosen) != 1:
        raise InvalidInput(f"{source}: {len(chosen)} manifests tagged {tag!r} in index.json (expected one)")
    manifest = _json_blob(layout, chosen[0], source, JSON_LIMIT)
    f = Fields(f"{source} manifest")
    if f.mapping(manifest, "").get("artifactType") != ARTIFACT_TYPE:
        raise InvalidInput(f"{source}: not a catalog release (artifactType {manifest.get('artifactType')!r})")
    layers = [d for d in f.items(manifest.get("layers"), "layers")
              if isinstance(d, dict) and (d.get("annotations") or {}).get(TITLE) == name]
    if not layers:
        return None
    return _blob(layout, layers[0], source, cap)


def _read_json(layout: Path, name: str, source: str):
    from vllm_hotfix_guard.core.data import load_json

    try:
        return load_json(read_bounded(layout / name, cap=JSON_LIMIT, what="OCI layout file"), f"{source} {name}")
    except FileNotFoundError:
        from vllm_hotfix_guard.errors import Unavailable

        raise Unavailable(f"{source}: no {name}: not an OCI image layout") from None


def _json_blob(layout: Path, descriptor: dict, source: str, cap: int):
    from vllm_hotfix_guard.core.data import load_json

    return load_json(_blob(layout, descriptor, source, cap), f"{source} manifest")


def _blob(layout: Path, descriptor: dict, source: str, cap: int) -> bytes:
    f = Fields(f"{source} descriptor")
    digest = f.text(descriptor, "", "digest", limit=80)
    size = f.get(descriptor, "", "size", int)
    if not digest.startswith("sha256:") or len(digest) != 71 or any(c not in "0123456789abcdef" for c in digest[7:]):
        raise InvalidInput(f"{source}: descriptor digest {digest!r} is not a sha256 digest")
    if not 0 <= size <= cap:
        raise InvalidInput(f"{source}: blob {digest} is {size} bytes, more than the cap of {cap}")
    data = read_bounded(layout / "blobs" / "sha256" / digest[7:], cap=cap, what="OCI blob", follow_symlinks=False)
    if len(data) != size or _digest(data) != digest:
        raise InvalidInput(f"{source}: blob {digest} does not hold the bytes its descriptor names")
    return data
