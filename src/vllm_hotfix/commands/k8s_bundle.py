"""`hotfix k8s --bundle REF@sha256:...`: the part of the overlay command that reads the bundle.

The reference is checked first (pinned by digest, no tag: containers/k8s_image_volume.parse_reference).
What the image volume holds -- the files to mount one by one, the lock, its signature files -- comes
from the bundle on disk (``--bundle-dir DIR``, the layout `hotfix pack` wrote, read as untrusted input
by containers/bundle_read.read_bundle: confined names, no link followed, capped, every blob and file
checked; the REF's digest must be the layout's or one of its platforms' manifests), or else from the
export it was packed from (``--export-dir``, read by commands/pack.exported_content as `hotfix pack`
reads it: the lock, its files checked against the lock, the signature files beside the lock).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from vllm_hotfix.containers.k8s_image_volume import ImageVolume, image_volume, parse_reference
from vllm_hotfix_guard.errors import Refused, UsageError
from vllm_hotfix_guard.output import quote_path


def from_options(reference: Optional[str], bundle_dir: Optional[Path], export_dir: Path) -> ImageVolume:
    """The image volume --bundle (and --bundle-dir, else --export-dir) describe."""
    if reference is None:
        raise UsageError("--bundle-dir needs --bundle REF@sha256:<digest>: the digest is what the pods pin",
                         hint="pass the reference `hotfix pack` printed (REPOSITORY@sha256:...)")
    pinned = parse_reference(reference)
    if bundle_dir is not None:
        from vllm_hotfix.containers.bundle_read import digests, read_bundle

        source = quote_path(str(bundle_dir))
        layout, content = read_bundle(bundle_dir)
        held = digests(layout)
        if pinned.digest not in held:
            raise Refused(f"--bundle {pinned}: {source} is sha256:{layout.top.hex}"
                          f"{' (or a platform of it: ' + ', '.join(held[1:]) + ')' if held[1:] else ''}, not that digest; "
                          "nothing was written", hint="pass the digest `hotfix pack` printed for this bundle, or the "
                                                      "--bundle-dir it was pushed from")
        return image_volume(pinned, content, source=f"the bundle {source}")
    from vllm_hotfix.commands.pack import exported_content

    return image_volume(pinned, exported_content(export_dir), source=f"the export {quote_path(str(export_dir))}")

