"""Whether an install still carries a hotfix.lock: each locked hotfix checked against what this
interpreter resolves (``check_lock``), its fingerprint, and the advice that puts it back.

Standard library only: the in-process guard (vllm_hotfix_guard/plugin.py) runs ``check_lock`` inside every vLLM
process. States and the rule from hashes to a state are core.verdict's, the same as `hotfix status`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from vllm_hotfix_guard.core import verdict
from vllm_hotfix_guard.core.distname import canonical_name
from vllm_hotfix_guard.core.verdict import APPLIED, FIXED_UPSTREAM, FileCheck
from vllm_hotfix_guard.txn.hotfix_lock import Lock, LockedFile, LockedHotfix, lock_series_checks
from vllm_hotfix_guard.values import Value


class Installed(Value):
    """What the package really resolves to in the interpreter being checked."""

    package_dir: Path  # directory of the imported package
    version: Optional[str]  # version of its distribution (None if unknown)
    pending: bool = False  # an interrupted apply on this install waits for `hotfix recover`
    distribution: Optional[str] = None  # the distribution the loaded copy belongs to (None: unknown)


class HotfixCheck(Value):
    """One locked hotfix checked against what this interpreter resolves: core.verdict's state."""

    hotfix: LockedHotfix
    state: str  # a core.verdict state
    installed_version: Optional[str]
    files: tuple[FileCheck, ...]  # core.verdict.FileCheck, ``where`` = the real path read (None: not importable)
    detail: str = ""
    unnamed: bool = False  # unknown: a Python file of it has no code names in the lock (``unnamed_code``)

    @property
    def in_effect(self) -> bool:
        return verdict.in_effect(self.state)


def sha256_file(path: Path) -> Optional[str]:
    """Hex sha256 of a regular file's bytes; None when there is none at ``path`` (filehash.target_sha256, the rule
    a hit of the guard's lock verdict cache hashes by too)."""
    from vllm_hotfix_guard.filehash import target_sha256

    return target_sha256(path)


def real_file(installed: Installed, package: str, path: str) -> Path:
    """The file a site-packages-relative ``path`` of ``package`` really is in this install."""
    head, _, rest = path.partition("/")
    if head == package and rest:
        return installed.package_dir / rest
    return installed.package_dir.parent / path


def check_lock(
    lock: Lock, resolve: Callable[[str], Optional[Installed]], ids=(), bytecode: Optional[Callable] = None
) -> list[HotfixCheck]:
    """Check every (or each named) locked hotfix in the lock's series; ``resolve(package)`` is asked
    once per package and every locked file is read once. ``bytecode(sources)``: {real source path:
    [(pyc, why)]} (install/bytecode.py, in the interpreter checked) for the modules of applied hotfixes."""
    resolved: dict[str, Optional[Installed]] = {}

    def installed(package: str) -> Optional[Installed]:
        if package not in resolved:
            resolved[package] = resolve(package)
        return resolved[package]

    package_of = {f.path: h.package for h in lock.hotfixes for f in h.files}

    def current(path: str) -> tuple:
        here = installed(package_of[path])
        if here is None:
            return None, None
        where = real_file(here, package_of[path], path)
        return sha256_file(where), str(where)

    checks = lock_series_checks(lock, current)
    judged = [_check_hotfix(hotfix, installed(hotfix.package), checks[hotfix.id]) for hotfix in lock.select(ids)]
    sources = sorted({f.where for c in judged if c.state == APPLIED for f in c.files
                      if f.where and f.path.endswith(".py") and f.sha256 is not None})
    stale = bytecode(sources) if bytecode is not None and sources else {}
    return [_stale_bytecode(c, stale) if c.state == APPLIED and stale else c for c in judged]


def _stale_bytecode(check: HotfixCheck, stale: dict) -> HotfixCheck:
    entries = [(f.where, pyc, why) for f in check.files if f.where in stale for pyc, why in stale[f.where]]
    if not entries:
        return check
    from vllm_hotfix_guard.output import quote_path

    source, pyc, why = entries[0]
    more = f" (+{len(entries) - 1} more)" if len(entries) > 1 else ""
    state, detail = verdict.hotfix_state(check.files, stale_bytecode=f"Python would load {quote_path(pyc)} instead of "
                                                              f"{quote_path(source)}: {why}{more}")
    return HotfixCheck(check.hotfix, state, check.installed_version, check.files, detail)


def _check_hotfix(hotfix: LockedHotfix, installed: Optional[Installed], files: tuple) -> HotfixCheck:
    """core.verdict.hotfix_state for one locked hotfix, as it is here."""
    # a lock is exported from a wheel (flow/export_plan): no commit to compare, the version decides
    version, moved = verdict.release_seen(recorded=hotfix.baseline_version,
                                          installed=lambda: installed.version if installed else None)
    missing = None if installed is not None else f"package {hotfix.package!r} is not importable here"
    other = getattr(installed, "distribution", None)
    if other and canonical_name(other) != canonical_name(hotfix.distribution):
        missing = (f"package {hotfix.package!r} is loaded from the distribution {other}, the lock is for "
                   f"{hotfix.distribution}")
    state, detail = verdict.hotfix_state(
        files, pending=bool(installed and installed.pending), missing_package=missing,
        inapplicable=verdict.release_rule(version, fixed_in=hotfix.fixed_in, versions=hotfix.versions,
                                          distribution=hotfix.distribution),
        recorded_release=hotfix.baseline_version, installed_release=version, moved=moved,
        distribution=hotfix.distribution)
    if state == verdict.STALE:
        detail = (f"{hotfix.distribution} is {version} here, the lock was exported from {hotfix.baseline_version}: "
                  f"re-export against this image")
    unnamed = unnamed_code(hotfix) if state == APPLIED else None
    if unnamed is not None:  # the files hold the fix, but whether it runs cannot be checked: never "in effect"
        state, detail = verdict.UNKNOWN, unnamed
    return HotfixCheck(hotfix, state, version, files, detail, unnamed=unnamed is not None)


def unnamed_code(hotfix: LockedHotfix) -> Optional[str]:
    """Why a locked hotfix cannot be judged in effect however its files look: a Python file of it whose lock
    entry keeps no code names (``code``: written by `hotfix export` since issue 35, always, even empty), so
    the guard's code check cannot tell whether the fixed functions are the ones running -- the lock's
    analogue of a record without them (vllm_hotfix_guard/recorded.py). None when every one has them (a file
    that is not Python has none to keep). The one rule of every reader of a lock: the guard, `verify --lock`,
    `status` in a container, `status --runtime --lock`."""
    unnamed = [f.path for f in hotfix.files if f.code is None and f.path.endswith(".py")]
    if not unnamed:
        return None
    from vllm_hotfix_guard.output import quote_path  # here: a lock whose files keep their names never needs it

    more = f" (+{len(unnamed) - 1} more)" if len(unnamed) > 1 else ""
    return (f"its lock keeps no code names for {quote_path(unnamed[0])}{more} (written by an older vllm-hotfix or by "
            f"hand): whether the fixed functions are the ones running cannot be checked")


def unnamed_advice(export: str) -> str:
    """What to do about a lock without code names (``unnamed_code``), ``export`` the command that re-exports
    the hotfix (the guard's and `verify --lock`'s wording of it)."""
    return (f"re-export it ({export}: the new lock names the fixed code), sign the new lock if a trust policy "
            f"asks for it (`hotfix sign hotfix-export/hotfix.lock --key KEY`) and deploy it with its files")


def mount_line_for(lock_file: Path) -> Callable[[LockedFile, FileCheck], str]:
    """The compose volume line that puts a locked file back: the exported copy beside the lock when it is
    there, else where `hotfix compose` expects the export (``./hotfix-export``)."""
    def mount_line(locked: LockedFile, check: FileCheck) -> str:
        beside_lock = Path(lock_file).absolute().parent / locked.export
        source = str(beside_lock) if beside_lock.is_file() else f"{DEFAULT_EXPORT_SOURCE}/{locked.export}"
        return f"{source}:{check.where}:ro"
    return mount_line


DEFAULT_EXPORT_SOURCE = "./hotfix-export"  # `hotfix compose --export-dir` default


def fingerprint(checks) -> str:
    """core.fingerprint of these checks: each hotfix's id and version, the distribution and the version
    installed, and the sha256 each file has *now* (what this interpreter really loads)."""
    from vllm_hotfix_guard.core.fingerprint import fingerprint as digest

    return digest(fingerprint_entries(checks))


def expected_fingerprint(lock: Lock) -> str:
    """The fingerprint of ``lock`` in effect: what ``fingerprint`` gives for the checks of an install on
    the locked baseline whose every file holds the top of its series (what the guard and `verify --lock`
    print there). What a bundle is labelled with, and what admission approves."""
    from vllm_hotfix_guard.core.fingerprint import Entry, fingerprint as digest

    top = {f.path: f.sha256 for f in lock.mounted_files()}
    return digest(Entry(h.id, h.version, h.distribution, h.baseline_version, tuple((f.path, top[f.path]) for f in h.files))
                  for h in lock.hotfixes)


def fingerprint_entries(checks) -> list:
    """The core.fingerprint entries of these checks (the guard merges them with its records' entries)."""
    from vllm_hotfix_guard.core.fingerprint import Entry

    return [Entry(c.hotfix.id, c.hotfix.version, c.hotfix.distribution, c.installed_version,
                  tuple((f.path, f.sha256) for f in c.files)) for c in checks]


def advice(check: HotfixCheck, mount_line: Callable[[LockedFile, FileCheck], str],
           option: str = "--python PY") -> Optional[str]:
    """What to do about one hotfix check; ``mount_line`` renders the compose volume to restore, ``option``
    names the interpreter checked (and the catalogs given) for the commands it prints."""
    h = check.hotfix
    if check.state == APPLIED:
        return None
    if check.unnamed:
        return unnamed_advice(f"`hotfix export {h.id} --to hotfix-export {option}`")
    if check.state == FIXED_UPSTREAM:
        return (f"{h.distribution} {check.installed_version} already contains the fix (fixed in {h.fixed_in}): "
                f"drop the {h.id} bind mounts from the compose service and the lock")
    if check.installed_version is None and all(f.where is None for f in check.files):
        return f"package {h.package!r} not found in this interpreter: check --python / the image"
    if check.state == verdict.STALE:
        return (f"{h.distribution} is {check.installed_version} here, the lock was exported from "
                f"{h.baseline_version}: re-export {h.id} against this image (`hotfix export {h.id} --to "
                f"hotfix-export {option}`) and mount what it writes")
    if check.state == verdict.STALE_BYTECODE:
        return (f"{check.detail}: remove those __pycache__ entries from the image (or build it with "
                f"`PYTHONDONTWRITEBYTECODE=1`); the mounted files themselves are right")
    lines = []
    by_path = {f.path: f for f in h.files}
    for f in check.files:
        locked = by_path[f.path]
        if f.state == verdict.BASELINE:
            lines.append(f"lost: {f.path} is the pristine {h.baseline_version} file: the bind mount is missing; "
                         f"restore this line in the compose service volumes: - {mount_line(locked, f)}")
        elif f.state == verdict.CHANGED:
            lines.append(f"drifted: {f.path} is neither the patched nor the pristine {h.baseline_version} file "
                         f"(installed {h.distribution} {check.installed_version or '?'}): re-export the hotfix "
                         f"against this image, then mount - {mount_line(locked, f)}")
        elif f.state == verdict.MISSING:
            lines.append(f"missing: {f.path} does not exist in this install ({f.where}): "
                         f"the image no longer matches the lock; re-export against it")
    return "\n".join(lines) or None
