"""The in-process guard: a ``vllm.general_plugins`` entry point.

vLLM calls ``register()`` in every process it starts (API server, engine core, each worker), each
of which imports vLLM on its own, possibly from another copy (PYTHONPATH, another node). When
``HOTFIX_LOCK`` and/or ``HOTFIX_REQUIRE`` is set, the guard checks that the files the required
hotfixes touch, as *this* process resolves them, have the expected sha256, and logs one line.
With ``HOTFIX_STRICT=1`` a hotfix not in effect raises ``HotfixNotInEffect``, which stops the
process before it serves. Stdlib only; never imports vLLM submodules or torch.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("vllm.vllm_hotfix")

STRICT_VALUES = ("1", "true", "yes", "on")


class HotfixNotInEffect(RuntimeError):
    """Raised in strict mode so that vLLM stops this process before it serves."""


@dataclass(frozen=True)
class Verdict:
    hotfix_id: str
    in_effect: bool
    detail: str = ""  # what is wrong, naming the file (or why it needs nothing: fixed upstream)
    remedy: str = ""  # what to do


_last_check: tuple[tuple, tuple[Verdict, ...]] | None = None


def register() -> None:
    """Entry point called by vLLM's plugin loader; cheap and idempotent within one process."""
    global _last_check
    lock = os.environ.get("HOTFIX_LOCK", "").strip()
    require = os.environ.get("HOTFIX_REQUIRE", "").strip()
    if not lock and not require:
        return
    key = (os.getpid(), lock, require, os.environ.get("HOTFIX_STATE_DIR"))
    if _last_check is not None and _last_check[0] == key:
        verdicts = _last_check[1]
    else:
        try:
            verdicts = check(lock=lock or None, require=_split_ids(require))
        except Exception as exc:  # noqa: BLE001 - a bug here must not take vLLM down unless strict
            verdicts = (Verdict("(guard)", False, f"internal error: {type(exc).__name__}: {exc}",
                                "report it to vllm-hotfix; unset HOTFIX_LOCK / HOTFIX_REQUIRE to turn the guard off"),)
        _last_check = (key, verdicts)
        _log(verdicts)
    failing = [v for v in verdicts if not v.in_effect]
    if failing and os.environ.get("HOTFIX_STRICT", "").strip().lower() in STRICT_VALUES:
        raise HotfixNotInEffect(strict_message(failing))


def check(*, lock: str | None, require: tuple[str, ...]) -> tuple[Verdict, ...]:
    """Verdicts for every hotfix the lock file and/or the required ids name, in this process."""
    verdicts: list[Verdict] = []
    if lock:
        verdicts.extend(_check_lock(Path(lock)))
    if require:
        verdicts.extend(_check_required_ids(require))
    return tuple(verdicts)


def _check_lock(path: Path) -> list[Verdict]:
    from vllm_hotfix.errors import InvalidInput
    from vllm_hotfix.containers.lockfile import check_lock, load_lock

    try:
        lock = load_lock(path)
    except InvalidInput as exc:
        return [Verdict("(lock)", False, f"cannot use HOTFIX_LOCK: {exc.message}",
                        exc.hint or "mount the hotfix.lock written by `hotfix export` there, or fix HOTFIX_LOCK")]
    return [_verdict(c, "lock") for c in check_lock(lock, _installed)]


def _check_required_ids(ids: tuple[str, ...]) -> list[Verdict]:
    from vllm_hotfix.containers.lockfile import check_hotfix
    from vllm_hotfix.paths import TargetDir, state_dir

    records = _recorded_states(state_dir())
    verdicts = []
    for hotfix_id in ids:
        recorded = [(target, hotfixes[hotfix_id]) for target, hotfixes in records if hotfix_id in hotfixes]
        package = recorded[0][0].get("package") if recorded else None
        installed = _installed(package or "vllm")
        if installed is not None and installed.pending:  # the record may be mid-transaction: no verdict but this
            verdicts.append(Verdict(hotfix_id, False, f"interrupted: an apply on {installed.package_dir.parent} was "
                                                      f"interrupted and is not recovered", "run `hotfix recover`"))
            continue
        if not recorded:
            verdicts.append(Verdict(hotfix_id, False, f"no record of applying it in {state_dir()}",
                                    f"apply it (`hotfix apply {hotfix_id}`) or point HOTFIX_STATE_DIR at the state of the install"))
            continue
        package = package or "vllm"
        if installed is None:
            verdicts.append(_not_importable(hotfix_id, package))
            continue
        root = installed.package_dir.parent
        here = next(((t, e) for t, e in recorded if Path(t["state_dir"]) == TargetDir.of(root).directory), None)
        if here is None:
            elsewhere = ", ".join(sorted({str(t.get("root")) for t, _ in recorded}))
            verdicts.append(Verdict(
                hotfix_id, False,
                f"this process imports {package} from {installed.package_dir}, which has no record of it (recorded for {elsewhere})",
                f"remove the PYTHONPATH entry that shadows the patched install, or apply it to this copy "
                f"(`hotfix apply {hotfix_id} --root {root}`)"))
            continue
        target, entry = here
        deleted = [f["path"] for f in entry.get("files", ()) if f.get("after_sha256") is None]
        still_there = next((root / p for p in deleted if (root / p).exists()), None)
        if still_there:
            verdicts.append(Verdict(hotfix_id, False, f"{still_there} should have been deleted by the hotfix but exists",
                                    f"run `hotfix status {hotfix_id}`"))
            continue
        verdicts.append(_verdict(check_hotfix(_as_locked(hotfix_id, package, entry, target.get("version")), installed),
                                 "state"))
    return verdicts


def _as_locked(hotfix_id: str, package: str, entry: dict, version: str | None):
    """A recorded hotfix in the lock's model, so both sources are checked by lockfile.check_hotfix."""
    from vllm_hotfix.containers.lockfile import LockedFile, LockedHotfix

    files = tuple(LockedFile(f["path"], f["after_sha256"], f.get("before_sha256"), "")
                  for f in entry.get("files", ()) if f.get("after_sha256") is not None)
    return LockedHotfix(hotfix_id, entry.get("version"), package, package, version or "", None, files)


def _recorded_states(root: Path) -> list[tuple[dict, dict]]:
    """(target info + its state dir, hotfixes) of every readable state.json under ``root``."""
    import json

    found = []
    for state_file in sorted((root / "targets").glob("*/state.json")):
        try:
            data = json.loads(state_file.read_text(encoding="utf-8"))
            target = dict(data.get("target") or {}, state_dir=str(state_file.parent))
            found.append((target, dict(data.get("hotfixes") or {})))
        except (OSError, ValueError, AttributeError, TypeError):
            logger.debug("vllm-hotfix guard: skipping unreadable %s", state_file)
    return found


def _verdict(result, origin: str) -> Verdict:
    """A lockfile.HotfixCheck (core.verdict's state) as one guard line: the state, the first file not in
    effect, and what to do."""
    from vllm_hotfix.core import verdict

    hotfix_id = result.hotfix.id
    if result.state == verdict.FIXED_UPSTREAM:
        return Verdict(hotfix_id, True, f"fixed-upstream: {result.detail}")
    if result.in_effect:
        return Verdict(hotfix_id, True)
    if result.installed_version is None and all(f.where is None for f in result.files):
        return _not_importable(hotfix_id, result.hotfix.package)
    file = next((f for f in result.files if f.state != verdict.PATCHED), None)
    if file is None:
        return Verdict(hotfix_id, False, f"{result.state}: {result.detail}", f"run `hotfix status {hotfix_id}`")
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
    return Verdict(hotfix_id, False, problem, remedy)


def _not_importable(hotfix_id: str, package: str) -> Verdict:
    return Verdict(hotfix_id, False, f"package {package} is not importable in this process ({sys.executable})",
                   "run vLLM with the interpreter the hotfix was applied to")


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
    for dist_info in package_dir.parent.glob(f"{prefix}*.dist-info"):
        return dist_info.name[len(prefix):-len(".dist-info")]
    return None


def process_role() -> str:
    """Best guess of what this vLLM process is: EngineCore_DP0, VllmWorker-1, ApiServer_0, main."""
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is not None:
        name = multiprocessing.current_process().name
        if name != "MainProcess":
            return name
    if os.environ.get("RANK"):
        return f"rank {os.environ['RANK']}"
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:2]]) if sys.argv and sys.argv[0] else "python"
    return f"main ({command})"


def summary_line(verdicts: tuple[Verdict, ...]) -> str:
    parts = [f"{v.hotfix_id} NOT IN EFFECT: {v.detail}" if not v.in_effect
             else f"{v.hotfix_id} in effect ({v.detail})" if v.detail else f"{v.hotfix_id} in effect" for v in verdicts]
    from vllm_hotfix.containers.lockfile import lock_fingerprint

    fingerprint = lock_fingerprint(os.environ.get("HOTFIX_LOCK", "").strip(), _installed)
    return (f"vllm-hotfix guard pid={os.getpid()} role={process_role()} fingerprint={fingerprint}: "
            + "; ".join(parts))


def strict_message(failing: list[Verdict]) -> str:
    details = "; ".join(f"{v.hotfix_id}: {v.detail} -> {v.remedy}" for v in failing)
    return (f"vllm-hotfix: {len(failing)} required hotfix(es) not in effect in this process "
            f"(pid {os.getpid()}, {process_role()}), refusing to serve (HOTFIX_STRICT=1; unset it to only log): {details}")


def _log(verdicts: tuple[Verdict, ...]) -> None:
    ok = all(v.in_effect for v in verdicts)
    logger.log(logging.INFO if ok else logging.ERROR, "%s", summary_line(verdicts))


def _split_ids(value: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
