"""A hotfix bundle's OCI layout read back as untrusted input (`k8s --admission --bundle-dir`, `k8s --bundle
--bundle-dir`): shared by commands/admission.py and commands/k8s_bundle.py, so neither command imports the
other for it."""

from __future__ import annotations

import os
from pathlib import Path

from vllm_hotfix.containers import bundle, oci
from vllm_hotfix.containers.oci_layer import layer_members
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.output import quote_path

LAYER_LIMIT = 512 << 20  # a bundle's compressed layer; the 1,160-file backport is ~10 MB
CONTENT_LIMIT = 1 << 30  # what it may unpack to (a gzip bomb stops here)


def digests(layout: oci.ReadLayout) -> list[str]:
    """The hex digests a pod may pin a bundle by: what index.json names, and each platform's manifest."""
    return [layout.top.hex] + [image.manifest.hex for image in layout.images if image.manifest.hex != layout.top.hex]


def read_bundle(directory: Path) -> tuple[oci.ReadLayout, bundle.Content]:
    """A layout `hotfix pack` wrote, read as untrusted input: only index.json and blobs/sha256/<hex> are
    read (names built here, confined), each a regular file opened without following a link, below real
    directories (blobs/, blobs/sha256/ lstat'ed), capped; every blob against its digest and size, the
    layer against the config's diff_id (unpacked at most CONTENT_LIMIT), every file against the bundle's
    own lock, the annotations of each image and of the index against that lock (InvalidInput otherwise)."""
    import stat

    from vllm_hotfix_guard.inputs import read_bounded

    source = quote_path(str(directory))
    for inner in ("blobs", oci.BLOBS):
        try:
            if not stat.S_ISDIR(os.lstat(directory / inner).st_mode):
                raise InvalidInput(f"{source}: {inner} is not a directory (a link is not followed)",
                                   hint="is it a layout `hotfix pack` wrote?")
        except FileNotFoundError:
            break  # read_file names the missing file
        except OSError as exc:
            raise InvalidInput(f"{source}: {inner}: {exc.strerror}") from None

    def read_file(name: str, cap: int) -> bytes:
        try:
            return read_bounded(directory / name, cap=cap, what="OCI layout file", follow_symlinks=False)
        except OSError as exc:
            raise InvalidInput(f"{source}: {name}: {exc.strerror}", hint="is it a layout `hotfix pack` wrote?") from None

    layout = oci.read(source, read_file)
    blob = oci.blob_reader(source, read_file)
    checked: dict = {}  # (layer digest, size, diff_id) -> its content: platforms share one layer, unpacked once
    for image in layout.images:
        if len(image.layers) != 1:
            raise InvalidInput(f"{source}: {image.manifest.digest} has {len(image.layers)} layers; a hotfix bundle has one")
        layer = image.layers[0]
        key = (layer.digest, layer.size, image.diff_ids[0])
        if key not in checked:
            members = layer_members(source, blob, layer, image.diff_ids[0], cap=LAYER_LIMIT, content_cap=CONTENT_LIMIT)
            checked[key] = bundle.check(members, source=source, annotated=image.annotations)
        bundle.check_annotations(checked[key], image.annotations, source=source)
    locks = {c.lock_bytes for c in checked.values()}
    if len(locks) != 1:
        raise InvalidInput(f"{source}: its platforms carry different locks; a hotfix bundle carries one")
    found = next(iter(checked.values()))
    bundle.check_annotations(found, layout.annotations, source=source)
    return layout, found
