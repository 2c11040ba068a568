"""The in-process guard: a ``vllm.general_plugins`` entry point.

vLLM calls ``register()`` in every process it starts (API server, engine core, each worker), each
of which imports vLLM on its own, possibly from another copy (PYTHONPATH, another node). When
``HOTFIX_LOCK`` and/or ``HOTFIX_REQUIRE`` is set, the guard checks that the files the required
hotfixes touch, as *this* process resolves them, have the expected sha256, and logs one line.
With ``HOTFIX_STRICT=1`` a hotfix not in effect raises ``HotfixNotInEffect``, which stops a serving
process before it serves (commands that serve nothing, ``vllm --version``, only warn).

vLLM calls the plugins once per process and a *forked* child inherits that, so the guard also checks
in every forked child (``os.register_at_fork``). And it watches the imports of exactly the modules
the hotfixes patch (guard_imports.py): the code a process runs must be compiled from the patched bytes
at the checked path. Stdlib only; never imports vLLM submodules or torch.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from vllm_hotfix.containers.guard_process import (  # noqa: F401
    _command, _emit, _flush, _forked_process_name, logger, serving_process)

STRICT_VALUES = ("1", "true", "yes", "on")


class HotfixNotInEffect(RuntimeError):
    """Raised in strict mode so that vLLM stops this process before it serves."""


@dataclass(frozen=True)
class Verdict:
    """The guard's answer for one hotfix id in this process (one part of its one line)."""

    hotfix_id: str
    in_effect: bool
    detail: str = ""  # the state and what is wrong, naming the file (or why it needs nothing: fixed upstream)
    remedy: str = ""  # what to do
    source: str = ""  # where the requirement comes from: "lock", "require", "lock+require"


class Watched:
    """A module a hotfix patched: its import must compile ``sha256`` read from ``path``. (A plain class:
    a dataclass costs ~1 ms to define, in every vLLM process.)"""

    __slots__ = ("module", "hotfix_id", "path", "sha256")

    def __init__(self, module: str, hotfix_id: str, path: str, sha256: str) -> None:
        self.module, self.hotfix_id, self.path, self.sha256 = module, hotfix_id, path, sha256


_last_check: tuple[tuple, tuple[Verdict, ...], str] | None = None  # (settings, verdicts, fingerprint)
_fork_hook_installed = False
_fork_role: str | None = None  # set in a forked child: the multiprocessing.Process it is about to become


def register() -> None:
    """Entry point called by vLLM's plugin loader; cheap and idempotent within one process."""
    lock, require = _settings()
    if not lock and not require:
        return
    _install_fork_hook()
    failing = _check_here(lock, require)
    if failing and strict():
        if serving_process():
            raise HotfixNotInEffect(strict_message(failing))
        _emit(logging.WARNING, f"vllm-hotfix guard pid={os.getpid()} role={process_role()}: "
                               f"not stopping `{_command()}` (HOTFIX_STRICT=1): it serves nothing")


def _settings() -> tuple[str, str]:
    return os.environ.get("HOTFIX_LOCK", "").strip(), os.environ.get("HOTFIX_REQUIRE", "").strip()


def strict() -> bool:
    return os.environ.get("HOTFIX_STRICT", "").strip().lower() in STRICT_VALUES


def _check_here(lock: str, require: str) -> list[Verdict]:
    """Check once per process (and settings); log one line; watch the patched modules' imports."""
    global _last_check
    key = (os.getpid(), lock, require, os.environ.get("HOTFIX_STATE_DIR"))
    if _last_check is not None and _last_check[0] == key:
        verdicts = _last_check[1]
    else:
        from vllm_hotfix.core.fingerprint import NONE

        fingerprint = NONE
        try:
            verdicts, watched, fingerprint = _check_all(lock=lock or None, require=_split_ids(require))
            from vllm_hotfix.containers import guard_imports

            verdicts += guard_imports.watch(watched)
        except Exception as exc:  # noqa: BLE001 - a bug here must not take vLLM down unless strict
            verdicts = (Verdict("(guard)", False, f"internal error: {type(exc).__name__}: {exc}",
                                "report it to vllm-hotfix; unset HOTFIX_LOCK / HOTFIX_REQUIRE to turn the guard off"),)
        _last_check = (key, verdicts, fingerprint)
        _log(verdicts, fingerprint)
    return [v for v in verdicts if not v.in_effect]


def _install_fork_hook() -> None:
    """vLLM loads plugins once per process (its ``plugins_loaded`` flag), and a forked child inherits
    the flag: forked EngineCores and workers never call ``register()``, so check them here."""
    global _fork_hook_installed
    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_hook_installed = True


def _after_fork_in_child() -> None:
    global _fork_role
    lock, require = _settings()
    if not lock and not require:
        return
    # The child's multiprocessing name is still the parent's here: the Process being started names it
    # (or, for a bare os.fork, the parent's role does).
    _fork_role = _forked_process_name() or f"fork of {process_role()}"
    failing = _check_here(lock, require)
    if failing and strict() and serving_process():
        # An exception raised in a fork hook is printed and ignored: stop the child ourselves.
        _emit(logging.ERROR, strict_message(failing))
        _flush()
        os._exit(1)


def check(*, lock: str | None, require: tuple[str, ...]) -> tuple[Verdict, ...]:
    """Verdicts for every hotfix the lock file and/or the required ids name, in this process."""
    return check_with_modules(lock=lock, require=require)[0]


def check_with_modules(*, lock: str | None, require: tuple[str, ...]) -> tuple[tuple[Verdict, ...], tuple[Watched, ...]]:
    """Verdicts (one per hotfix id, naming where each requirement came from) and the patched modules."""
    return _check_all(lock=lock, require=require)[:2]


def _check_all(*, lock: str | None, require: tuple[str, ...]) -> tuple[tuple[Verdict, ...], tuple[Watched, ...], str]:
    """check_with_modules, plus the fingerprint of HOTFIX_LOCK (core/fingerprint.py) computed from the
    same checks: each locked file is found and hashed once per process."""
    from vllm_hotfix.core.fingerprint import NONE

    results: list[tuple[Verdict, object]] = []  # (verdict, lockfile.HotfixCheck or None)
    fingerprint = NONE
    if lock:
        locked = _check_lock(Path(lock))
        results.extend(locked)
        if not any(check is None for _, check in locked):  # a lock that loaded (an empty one too)
            from vllm_hotfix.containers.lockfile import fingerprint as lock_fingerprint

            fingerprint = lock_fingerprint([check for _, check in locked])
    if require:
        results.extend(_check_required_ids(require))
    verdicts: dict[str, Verdict] = {}
    for v, _ in results:
        seen = verdicts.get(v.hotfix_id)
        if seen is None:
            verdicts[v.hotfix_id] = v
        else:  # in both HOTFIX_LOCK and HOTFIX_REQUIRE: one line, the failing verdict if any, both sources
            kept = seen if (not seen.in_effect or v.in_effect) else v
            verdicts[v.hotfix_id] = Verdict(kept.hotfix_id, kept.in_effect, kept.detail, kept.remedy,
                                            f"{seen.source}+{v.source}")
    return tuple(verdicts.values()), _watched([c for _, c in results if c is not None]), fingerprint


def _watched(checks) -> tuple[Watched, ...]:
    """The Python modules among the files the hotfixes patched, at the path this process resolves."""
    found: dict[str, Watched] = {}
    for result in checks:
        for file in result.files:
            if file.where and file.expected and file.path.endswith(".py"):
                module = file.path[:-3].replace("/", ".")
                module = module[:-len(".__init__")] if module.endswith(".__init__") else module
                found.setdefault(module, Watched(module, result.hotfix.id, file.where, file.expected))
    return tuple(found.values())


def _check_lock(path: Path) -> list[tuple[Verdict, object]]:
    from vllm_hotfix.errors import InvalidInput
    from vllm_hotfix.containers.lockfile import check_lock, load_lock

    try:
        lock = load_lock(path)
    except InvalidInput as exc:
        return [(Verdict("(lock)", False, f"cannot use HOTFIX_LOCK: {exc.message}",
                         exc.hint or "mount the hotfix.lock written by `hotfix export` there, or fix HOTFIX_LOCK", "lock"), None)]
    return [(_verdict(c, "lock"), c) for c in check_lock(lock, _installed)]


def _check_required_ids(ids: tuple[str, ...]) -> list[tuple[Verdict, object]]:
    from vllm_hotfix.containers.lockfile import check_hotfix
    from vllm_hotfix.paths import TargetDir, state_dir

    records, unreadable = _recorded_states(state_dir())
    results: list[tuple[Verdict, object]] = []
    for hotfix_id in ids:
        recorded = [(target, hotfixes[hotfix_id]) for target, hotfixes in records if hotfix_id in hotfixes]
        package = recorded[0][0].get("package") if recorded else None
        try:
            installed = _installed(package or "vllm")
        except OSError as exc:  # e.g. the state folder's journal cannot be read
            results.append((_unreadable(hotfix_id, [f"{exc.filename}: {exc.strerror}"]), None))
            continue
        if installed is not None and installed.pending:  # the record may be mid-transaction: no verdict but this
            results.append((Verdict(hotfix_id, False, f"interrupted: an apply on {installed.package_dir.parent} was "
                                                      f"interrupted and is not recovered", "run `hotfix recover`", "require"), None))
            continue
        if not recorded:
            if unreadable:  # the record may be in the state we cannot read: say that, not "apply it"
                results.append((_unreadable(hotfix_id, unreadable), None))
                continue
            results.append((Verdict(hotfix_id, False, f"not-applied: no record of applying it in {state_dir()}",
                                    f"apply it (`hotfix apply {hotfix_id}`) or point HOTFIX_STATE_DIR at the state of the install",
                                    "require"), None))
            continue
        package = package or "vllm"
        if installed is None:
            results.append((_not_importable(hotfix_id, package, "require"), None))
            continue
        root = installed.package_dir.parent
        here = next(((t, e) for t, e in recorded if Path(t["state_dir"]) == TargetDir.of(root).directory), None)
        if here is None:
            elsewhere = ", ".join(sorted({str(t.get("root")) for t, _ in recorded}))
            results.append((Verdict(
                hotfix_id, False,
                f"lost: this process imports {package} from {installed.package_dir}, which has no record of it (recorded for {elsewhere})",
                f"remove the PYTHONPATH entry that shadows the patched install, or apply it to this copy "
                f"(`hotfix apply {hotfix_id} --root {root}`)", "require"), None))
            continue
        target, entry = here
        deleted = [f["path"] for f in entry.get("files", ()) if f.get("after_sha256") is None]
        still_there = next((root / p for p in deleted if (root / p).exists()), None)
        if still_there:
            results.append((Verdict(hotfix_id, False, f"drifted: {still_there} should have been deleted by the hotfix but exists",
                                    f"run `hotfix status {hotfix_id}`", "require"), None))
            continue
        result = check_hotfix(_as_locked(hotfix_id, package, entry, target.get("version")), installed)
        results.append((_verdict(result, "require"), result))
    return results


def _unreadable(hotfix_id: str, problems: list[str]) -> Verdict:
    return Verdict(hotfix_id, False, f"unknown: cannot read the recorded state: {'; '.join(problems)}",
                   "fix the permissions of these files (the user running vLLM must read them) or restore them "
                   "from a backup; `hotfix status` then says more", "require")


def _as_locked(hotfix_id: str, package: str, entry: dict, version: str | None):
    """A recorded hotfix in the lock's model, so both sources are checked by lockfile.check_hotfix."""
    from vllm_hotfix.containers.lockfile import LockedFile, LockedHotfix

    files = tuple(LockedFile(f["path"], f["after_sha256"], f.get("before_sha256"), "")
                  for f in entry.get("files", ()) if f.get("after_sha256") is not None)
    return LockedHotfix(hotfix_id, entry.get("version"), package, package, version or "", None, files)


def _recorded_states(root: Path) -> tuple[list[tuple[dict, dict]], list[str]]:
    """(target info + its state dir, hotfixes) of every state.json under ``root``, and what could not
    be read (each naming the file or folder and why)."""
    import json

    found: list[tuple[dict, dict]] = []
    problems: list[str] = []
    targets = root / "targets"
    try:
        names = sorted(os.listdir(targets))
    except FileNotFoundError:
        return found, problems
    except OSError as exc:
        return found, [f"state folder {targets}: {exc.strerror}"]
    for name in names:
        state_file = targets / name / "state.json"
        try:
            raw = state_file.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"{state_file}: {exc.strerror}")
            continue
        try:
            data = json.loads(raw.decode("utf-8"))
            target = dict(data.get("target") or {}, state_dir=str(state_file.parent))
            found.append((target, dict(data.get("hotfixes") or {})))
        except (ValueError, AttributeError, TypeError) as exc:
            problems.append(f"{state_file} is corrupt ({type(exc).__name__}: {exc})")
    return found, problems


def _verdict(result, origin: str) -> Verdict:
    """A lockfile.HotfixCheck (core.verdict's state) as one guard line: the state, the first file not in
    effect, and what to do."""
    from vllm_hotfix.core import verdict

    hotfix_id = result.hotfix.id
    if result.state == verdict.FIXED_UPSTREAM:
        return Verdict(hotfix_id, True, f"fixed-upstream: {result.detail}", source=origin)
    if result.in_effect:
        return Verdict(hotfix_id, True, source=origin)
    if result.installed_version is None and all(f.where is None for f in result.files):
        return _not_importable(hotfix_id, result.hotfix.package, origin)
    file = next((f for f in result.files if f.state != verdict.PATCHED), None)
    if file is None:
        return Verdict(hotfix_id, False, f"{result.state}: {result.detail}", f"run `hotfix status {hotfix_id}`", origin)
    if file.sha256 is None:
        problem = f"{result.state}: {file.where} is missing"
    else:
        what = " (the unpatched original)" if file.state == verdict.BASELINE else ""
        problem = f"{result.state}: {file.where} has sha256 {file.sha256[:12]}{what}, expected {(file.expected or '')[:12]}"
    if origin == "lock":
        remedy = ("bind-mount the files from `hotfix export` over the copy this process imports (`hotfix compose`), "
                  "then check with `hotfix verify --lock`")
    elif result.state == verdict.LOST:
        remedy = f"the install was replaced (rebuild/reinstall?): re-apply with `hotfix apply {hotfix_id}`"
    else:
        remedy = f"the file changed after the hotfix was applied: run `hotfix status {hotfix_id}`"
    return Verdict(hotfix_id, False, problem, remedy, origin)


def _not_importable(hotfix_id: str, package: str, origin: str) -> Verdict:
    return Verdict(hotfix_id, False, f"unknown: package {package} is not importable in this process ({sys.executable})",
                   "run vLLM with the interpreter the hotfix was applied to", origin)


def _installed(package: str):
    """lockfile.Installed for the copy of ``package`` this process imports, found without executing it."""
    import importlib.util

    from vllm_hotfix.containers.lockfile import Installed

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    from vllm_hotfix.paths import TargetDir

    package_dir = Path(next(iter(spec.submodule_search_locations)))
    return Installed(package_dir, _version_beside(package_dir), TargetDir.of(package_dir.parent).pending())


def _version_beside(package_dir: Path) -> str | None:
    """Version from the dist-info next to this copy (an overlay on PYTHONPATH has none)."""
    prefix = package_dir.name + "-"
    try:
        names = os.listdir(package_dir.parent)  # no glob: its fnmatch compiles a regex in every process
    except OSError:
        return None
    for name in names:
        if name.startswith(prefix) and name.endswith(".dist-info"):
            return name[len(prefix):-len(".dist-info")]
    return None


def process_role() -> str:
    """Best guess of what this vLLM process is: EngineCore_DP0, VllmWorker-1, ApiServer_0, main."""
    if _fork_role:  # first: in the fork hook, multiprocessing's name is still the parent's
        return _fork_role
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None:
        name = multiprocessing.current_process().name
        if name != "MainProcess":
            return name
    if os.environ.get("RANK"):
        return f"rank {os.environ['RANK']}"
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:2]]) if sys.argv and sys.argv[0] else "python"
    return f"main ({command})"


def summary_line(verdicts: tuple[Verdict, ...], fingerprint: str) -> str:
    """The guard's one line per process (the only place it is built), with the fingerprint of what is
    in effect (core/fingerprint.py, of HOTFIX_LOCK; hf1-none without one)."""

    def part(v: Verdict) -> str:
        name = f"{v.hotfix_id} [{v.source}]" if v.source else v.hotfix_id
        if not v.in_effect:
            return f"{name} NOT IN EFFECT: {v.detail}" + (f" -> {v.remedy}" if v.remedy else "")
        return f"{name} in effect ({v.detail})" if v.detail else f"{name} in effect"
    return (f"vllm-hotfix guard pid={os.getpid()} role={process_role()} fingerprint={fingerprint}: "
            + "; ".join(part(v) for v in verdicts))


def strict_message(failing: list[Verdict]) -> str:
    details = "; ".join(f"{v.hotfix_id}: {v.detail} -> {v.remedy}" for v in failing)
    return (f"vllm-hotfix: {len(failing)} required hotfix(es) not in effect in this process "
            f"(pid {os.getpid()}, {process_role()}), refusing to serve (HOTFIX_STRICT=1; unset it to only log): {details}")


def _log(verdicts: tuple[Verdict, ...], fingerprint: str) -> None:
    ok = all(v.in_effect for v in verdicts)
    if serving_process():
        _emit(logging.INFO if ok else logging.ERROR, summary_line(verdicts, fingerprint))
    elif not ok:  # `vllm --version` & co.: no INFO noise before their output, problems as a warning
        _emit(logging.WARNING, summary_line(verdicts, fingerprint))


def _split_ids(value: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))


def module_line(module: str, path: str | None, text: str) -> str:
    """One line per watched module import (guard_imports.py)."""
    where = f" from {path}" if path else ""
    return f"vllm-hotfix guard pid={os.getpid()} role={process_role()}: module {module}{where}: {text}"
