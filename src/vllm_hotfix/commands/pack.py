"""`hotfix pack`: an export becomes a hotfix bundle, an OCI image layout on disk that Kubernetes mounts
as an image volume pinned by digest (past the 1 MiB a ConfigMap holds).

The export is what `hotfix export --to DIR` wrote (read as input: no symlink followed, regular files,
capped, each file checked against the lock's sha256 before it goes into the layer), or hotfix ids
exported on the fly from --python, as `hotfix export` takes them (nothing is written but the layout).
containers/bundle.py decides what the layer holds and its annotations, containers/oci.py makes the
layout (byte-reproducible), txn/staged.py writes it whole. Pushing is left to skopeo (or oras, crane):
the command prints the line.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Optional

from vllm_hotfix.containers import bundle, oci
from vllm_hotfix_guard.errors import UsageError
from vllm_hotfix_guard.output import emit_json, quote_path, say

STAGE_SUFFIX = ".hotfix-pack"
DEFAULT_EXPORT = Path("hotfix-export")


def run(*, hotfix_ids=(), export_dir: Optional[Path] = None, python: Optional[str] = None, catalogs=(),
        out_dir: Path, tag: Optional[str] = None, platforms=(), repository: Optional[str] = None,
        dry_run: bool = False, as_json: bool = False) -> int:
    if hotfix_ids and export_dir is not None:
        raise UsageError("give hotfix IDs (exported from --python) or --export-dir, not both")
    if repository is not None:
        check_repository(repository)
    chosen = tuple(oci.Platform.parse(p) for p in (platforms or oci.PLATFORMS))
    out = Path(os.path.realpath(out_dir))  # a symlinked --to is written where it points
    if ":" in str(out):
        raise UsageError(f"{quote_path(str(out))}: skopeo's oci: transport cannot name a directory whose path holds ':'",
                         hint="pass --to a path without ':'")
    if tag is not None:
        oci.check_tag(tag)
    refuse_foreign(out)
    content = _content(hotfix_ids, export_dir, python, catalogs)
    tag = oci.check_tag(tag or content.fingerprint)
    notes = bundle.annotations(content)
    layout = oci.build(bundle.entries(content), platforms=chosen, ref_name=tag, labels=notes, annotations=notes,
                       created_by=bundle.CREATED_BY)
    if not dry_run:
        from vllm_hotfix.txn.staged import write_directory

        write_directory(out, layout.files, suffix=STAGE_SUFFIX, what="the bundle")
    push = push_command(out, tag, repository)
    pinned = f"{repository}@{layout.top.digest}" if repository else None
    signatures = [e.path for e in content.extra if bundle.is_extra(e.path) and "/" not in e.path]
    if as_json:
        emit_json({
            "layout": str(out), "dry_run": dry_run, "tag": tag, "digest": layout.top.digest,
            "media_type": layout.top.media_type, "fingerprint": content.fingerprint,
            "hotfixes": [{"id": h.id, "version": h.version} for h in content.lock.hotfixes],
            "platforms": [{"platform": str(m.platform), "manifest": m.digest} for m in layout.manifests],
            "layer": {"digest": layout.layer.digest, "size": layout.layer.size, "diff_id": layout.diff_id,
                      "tar_size": layout.tar_size, "members": layout.members, "files": len(content.files)},
            "annotations": notes, "push": push, "reference": pinned, "signatures": signatures,
            "guard": sorted(content.guard or ()),
        })
        return 0
    verb = "would write" if dry_run else "wrote"
    signed = f" + {len(signatures)} signature file(s)" if signatures else ""
    signed += f" + the guard ({len(content.guard)} file(s))" if content.guard else ""
    say(f"{verb} {quote_path(str(out))}: OCI image {tag} ({', '.join(str(p) for p in dict.fromkeys(chosen))}), "
        f"{len(content.files)} file(s) + {bundle.LOCK_PATH}{signed} in one layer of {layout.layer.size:,} bytes")
    say(f"digest: {layout.top.digest}   fingerprint: {content.fingerprint}   hotfixes: {notes[bundle.HOTFIXES]}")
    if dry_run:
        say("dry run: nothing was written")
        return 0
    if repository:
        say(f"next: {push}")
        say(f"then mount it by digest only: {pinned}")
    else:
        say("next, with REPOSITORY set to where the cluster pulls from (e.g. registry.example/team/vllm-hotfix):")
        say(f"  {push}")
        say(f"then mount it by digest only: $REPOSITORY@{layout.top.digest}")
    return 0


def _content(hotfix_ids, export_dir: Optional[Path], python: Optional[str], catalogs) -> bundle.Content:
    from vllm_hotfix_guard.txn.hotfix_lock import dump_lock

    if hotfix_ids:
        from vllm_hotfix.catalog.index import Catalog, parse_ref
        from vllm_hotfix.flow.export_plan import plan_export

        catalog = Catalog.load(catalogs)
        from vllm_hotfix.containers.guard_dist import current, locked_files

        dist = current()
        export = plan_export([catalog.get(*parse_ref(ref)) for ref in hotfix_ids], python=python, out_dir=None,
                             guard=locked_files(dist), catalog=catalog)
        guard = bundle.guard_entries(dict(dist.files))  # what `hotfix export` would write into EXPORT/guard
        return bundle.content(export.lock, dump_lock(export.lock), export.outputs, source="the export", extra=guard)
    return exported_content(export_dir if export_dir is not None else DEFAULT_EXPORT)


def exported_content(directory: Path) -> bundle.Content:
    """What a bundle of the export in ``directory`` holds: the lock, its files (each checked against the
    lock's sha256, no link followed) and the lock's signature files beside it (core.minisign's names, no
    link followed, each capped), which go into the layer beside the lock, and the guard's tree (checked
    against its RECORD: txn/exported.read_guard) under bundle.GUARD_DIR."""
    from vllm_hotfix.flow.export_plan import read_exported
    from vllm_hotfix_guard.settings import LOCK_NAME
    from vllm_hotfix.txn.exported import read_guard
    from vllm_hotfix_guard.txn.signed import signature_files

    lock, lock_bytes, exported = read_exported(directory)
    signatures = signature_files(Path(directory) / LOCK_NAME, follow_symlinks=False)
    extra = tuple(oci.Entry(path=name, data=data) for name, data in signatures) + bundle.guard_entries(read_guard(directory, lock))
    return bundle.content(lock, lock_bytes, exported, source=quote_path(str(directory)), extra=extra)


def push_command(out: Path, tag: str, repository: Optional[str]) -> str:
    """The skopeo line (quoted to run as pasted) that pushes the layout with its digests as they are:
    every platform, and skopeo fails rather than change a digest. Without ``repository`` its last word
    expands $REPOSITORY, and the shell stops with a message when that is unset."""
    target = shlex.quote(f"docker://{repository}:{tag}") if repository else \
        f'"docker://${{REPOSITORY:?set REPOSITORY=registry/repository}}:{tag}"'
    return f"skopeo copy --multi-arch=all --preserve-digests {shlex.quote(f'oci:{out}:{tag}')} {target}"


def check_repository(repository: str) -> str:
    """REGISTRY[:PORT]/PATH without a tag or digest (--tag names the tag; the digest is the pack's)."""
    name = repository.rsplit("/", 1)[-1]
    if (not repository.isascii() or not repository.isprintable() or any(c.isspace() for c in repository)
            or "@" in repository or ":" in name or "/" not in repository or repository.endswith("/")
            or name != name.lower()):
        raise UsageError(f"not an image repository: {repository!r}",
                         hint="REGISTRY/PATH, lowercase, without a tag or digest, e.g. registry.example/team/vllm-hotfix")
    return repository


def refuse_foreign(out: Path) -> None:
    """--to may be new, empty, or a bundle `hotfix pack` wrote (replaced whole): never anything else."""
    from vllm_hotfix.txn.staged import check_replaceable

    check_replaceable(out, is_bundle, what="a bundle written by `hotfix pack`", hint="pass --to a new directory")


def is_bundle(out: Path) -> bool:
    """index.json names one image, annotated as a bundle of ours."""
    from vllm_hotfix_guard.core.data import load_json
    from vllm_hotfix_guard.inputs import read_bounded

    index = load_json(read_bounded(out / oci.INDEX_FILE, cap=oci.INDEX_LIMIT, what="OCI index", follow_symlinks=False),
                      oci.INDEX_FILE)
    listed = index.get("manifests") if isinstance(index, dict) else None
    return isinstance(listed, list) and len(listed) == 1 and isinstance(listed[0], dict) \
        and (listed[0].get("annotations") or {}).get(bundle.FORMAT) == bundle.FORMAT_VERSION
