"""A hotfix whose files come through a bind mount below the target root (seed 001: a patched file mounted
over site-packages): how its status and apply's refusals say so."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from vllm_hotfix_guard.errors import HotfixError
from vllm_hotfix.install.locate import Target
from vllm_hotfix_guard.install.mounts import MountedFile, mounted_files
from vllm_hotfix_guard.output import quote_path
from vllm_hotfix_guard.paths import LOCK_ENV

if TYPE_CHECKING:
    from vllm_hotfix.catalog.index import Catalog
    from vllm_hotfix.flow.hotfix_status import Status


def declared_by_lock(hotfix_id: str, paths: Sequence[str]) -> str | None:
    """The lock that ``HOTFIX_LOCK`` names when it locks ``hotfix_id`` with each of ``paths``: the mounts
    were declared by `hotfix export` + `hotfix compose` / `k8s` / `bake` (and `verify --lock` checks them at
    every start). None when it is unset, unreadable, or says nothing of them."""
    import os

    from vllm_hotfix_guard.txn.hotfix_lock import load_lock

    named = os.environ.get(LOCK_ENV, "").strip()
    if not named:
        return None
    try:
        lock = load_lock(Path(named))
    except HotfixError:
        return None
    locked = {f.path for h in lock.hotfixes if h.id == hotfix_id for f in h.files}
    return named if locked and set(paths) <= locked else None


def mount_sources(mounts: Sequence[MountedFile]) -> str:
    """Where mounted files come from, for a line: ``/srv/hotfix-pr77/mamba_hybrid.py`` (one), else each
    with the file it is mounted over."""
    return ", ".join(m.source + (f" (for {quote_path(m.path)})" if len(mounts) > 1 else "") for m in mounts)


def hotfix_refusal(exc: HotfixError, hotfix, target: Target) -> HotfixError:
    """``refusal_through_mount`` for the files of ``hotfix`` (flow/hotfix.Hotfix): apply's, a group's member's."""
    return refusal_through_mount(exc, target, [f.path for f in hotfix.series.files], hotfix.id)


def refusal_through_mount(exc: HotfixError, target: Target, paths: Iterable[str], hotfix_id: str) -> HotfixError:
    """A refusal to apply (not pristine, does not apply) about a file whose bytes come through a mount:
    the same error, naming the mount, with the one hint that can work (neither `pip install
    --force-reinstall` nor apply can change a mounted file)."""
    mounted = mounted_files(target.root, [p for p in paths if p])
    if not mounted:
        return exc
    first = next(iter(mounted.values()))
    return type(exc)(f"{exc.message}; {quote_path(first.path)} is a bind mount from {first.source}",
                     hint=mount_remedy(hotfix_id, target))


def mount_remedy(hotfix_id: str, target: Target, catalog: Catalog | None = None) -> str:
    """The way out of vendor bytes in a mount, in the order it runs: the mount goes first (export reads the
    installed file, which a mount hides), then the patched file is exported and mounted instead."""
    return ("remove the mount (and its line in the compose file) to get the installed file back; to mount the "
            f"patched file instead, then run {export_step(hotfix_id, target, catalog)}, then {compose_step([hotfix_id])}")


def export_step(hotfix_id: str, target: Target, catalog: Catalog | None = None) -> str:
    """`hotfix export` of this hotfix for this target, as pasted: its --python and --catalog
    (flow/resolve.target_option); a --root checkout has no interpreter hotfix knows, so it is named in words."""
    from vllm_hotfix.flow.resolve import target_option

    step = f"`hotfix export {hotfix_id} --to hotfix-export"
    if target.python is None:
        return step + " --python` followed by the interpreter that runs vLLM"
    return f"{step} {target_option(target, catalog)}`"


def compose_step(hotfix_ids: Sequence[str], export_dir: str | Path = "hotfix-export") -> str:
    """`hotfix compose` of an export, as pasted: the service name is the user's, so it is said in words after
    the command, never a placeholder inside it (one wording: status's to-do and export's next step)."""
    import shlex

    words = " ".join(shlex.quote(str(w)) for w in (*hotfix_ids, "--export-dir", export_dir))
    return f"`hotfix compose {words} --service` followed by the name of the compose service that runs vLLM"


def through_mounts(status: Status, target: Target, catalog: Catalog | None = None) -> Status:
    """A status whose files come through a mount below the target root (seed 001: a patched file
    bind-mounted over site-packages) says so: in effect only while the mount is, which a rebuild from a
    compose file without it undoes; not in effect, the bytes to fix are the mount's source's, and no
    reinstall or apply can change them."""
    mounted = mounted_files(target.root, [f["path"] for f in status.files])
    if not mounted:
        return status
    mounts = tuple(mounted.values())
    files = tuple(dict(f, mount=mounted[f["path"]].to_json()) if f["path"] in mounted else f for f in status.files)
    sources = mount_sources(mounts)
    declared = declared_by_lock(status.id, [m.path for m in mounts])
    if status.in_effect and declared:
        detail = f"in effect through a bind mount from {sources}, declared by the lock {declared} ({LOCK_ENV})"
        advice = None
    elif status.in_effect:
        detail = f"in effect through a bind mount from {sources}: a rebuild or a compose file without the mount loses it"
        advice = (f"declare the mount where the container is defined: {export_step(status.id, target, catalog)}, "
                  f"then {compose_step([status.id])} (or `hotfix k8s`), and check it at start with "
                  "`hotfix verify --lock`")
    else:
        first = mounts[0]
        detail = f"{status.detail}; {quote_path(first.path)} is a bind mount from {first.source}".lstrip("; ")
        advice = (f"{quote_path(first.path)} comes from the bind mount of {first.source}, which neither a reinstall nor "
                  f"`hotfix apply` can change: {mount_remedy(status.id, target, catalog)}")
    return replace(status, files=files, detail=detail, advice=advice, mounts=mounts)
