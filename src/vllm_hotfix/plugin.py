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
class ExpectedFile:
    path: str  # relative to the directory that contains the package (site-packages for wheels)
    sha256: str | None  # None: the hotfix deletes the file
    original_sha256: str | None  # the unpatched file, to say "back to the original"


@dataclass(frozen=True)
class Requirement:
    hotfix_id: str
    package: str
    files: tuple[ExpectedFile, ...]
    origin: str  # 'lock' | 'state'


@dataclass(frozen=True)
class Verdict:
    hotfix_id: str
    in_effect: bool
    problem: str = ""  # what is wrong, naming the file
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
        verdicts = check(lock=lock or None, require=_split_ids(require))
        _last_check = (key, verdicts)
        _log(verdicts)
    failing = [v for v in verdicts if not v.in_effect]
    if failing and os.environ.get("HOTFIX_STRICT", "").strip().lower() in STRICT_VALUES:
        raise HotfixNotInEffect(strict_message(failing))


def check(*, lock: str | None, require: tuple[str, ...]) -> tuple[Verdict, ...]:
    """Verdicts for every hotfix the lock file and/or the required ids name, in this process."""
    verdicts: list[Verdict] = []
    if lock:
        try:
            requirements = requirements_from_lock(Path(lock))
        except (OSError, ValueError) as exc:
            verdicts.append(Verdict("(lock)", False, f"cannot use HOTFIX_LOCK={lock}: {exc}",
                                    "mount the lock written by `hotfix export` there, or fix HOTFIX_LOCK"))
        else:
            verdicts.extend(_check_requirement(r) for r in requirements)
    if require:
        verdicts.extend(_check_required_ids(require))
    return tuple(verdicts)


def requirements_from_lock(path: Path) -> tuple[Requirement, ...]:
    """Read a hotfix.lock (docs/design.md) with the stdlib; ValueError names the bad key."""
    import json

    data = json.loads(path.read_text(encoding="utf-8"))
    hotfixes = _field(data, "hotfixes", list, "")
    requirements = []
    for index, entry in enumerate(hotfixes):
        where = f"hotfixes[{index}]"
        files = []
        for findex, item in enumerate(_field(entry, "files", list, where)):
            fwhere = f"{where}.files[{findex}]"
            files.append(ExpectedFile(_field(item, "path", str, fwhere), _field(item, "sha256", (str, type(None)), fwhere),
                                      item.get("baseline_sha256")))
        hotfix_id = _field(entry, "id", str, where)
        package = entry.get("package") or _field(entry, "distribution", str, where).replace("-", "_")
        requirements.append(Requirement(hotfix_id, package, tuple(files), "lock"))
    return tuple(requirements)


def _field(mapping: object, key: str, kind: type | tuple, where: str):
    if not isinstance(mapping, dict):
        raise ValueError(f"{where or 'top level'} is not an object")
    if key not in mapping or not isinstance(mapping[key], kind):
        raise ValueError(f"missing or wrong type: {where + '.' if where else ''}{key}")
    return mapping[key]


def _check_required_ids(ids: tuple[str, ...]) -> list[Verdict]:
    from vllm_hotfix.paths import state_dir, target_state_dir

    records = _recorded_states(state_dir())
    verdicts = []
    for hotfix_id in ids:
        recorded = [(target, hotfixes[hotfix_id]) for target, hotfixes in records if hotfix_id in hotfixes]
        if not recorded:
            verdicts.append(Verdict(hotfix_id, False, f"no record of applying it in {state_dir()}",
                                    f"apply it (`hotfix apply {hotfix_id}`) or point HOTFIX_STATE_DIR at the state of the install"))
            continue
        package = recorded[0][0].get("package") or "vllm"
        package_dir = loaded_package_dir(package)
        if package_dir is None:
            verdicts.append(_not_importable(hotfix_id, package))
            continue
        state_here = target_state_dir(_root_of(package_dir))
        entry = next((e for t, e in recorded if Path(t["state_dir"]) == state_here), None)
        if entry is None:
            elsewhere = ", ".join(sorted({str(t.get("root")) for t, _ in recorded}))
            verdicts.append(Verdict(
                hotfix_id, False,
                f"this process imports {package} from {package_dir}, which has no record of it (recorded for {elsewhere})",
                f"remove the PYTHONPATH entry that shadows the patched install, or apply it to this copy "
                f"(`hotfix apply {hotfix_id} --root {_root_of(package_dir)}`)"))
            continue
        files = tuple(ExpectedFile(f["path"], f.get("after_sha256"), f.get("before_sha256")) for f in entry.get("files", ()))
        verdicts.append(_check_requirement(Requirement(hotfix_id, package, files, "state")))
    return verdicts


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


def _check_requirement(requirement: Requirement) -> Verdict:
    package_dir = loaded_package_dir(requirement.package)
    if package_dir is None:
        return _not_importable(requirement.hotfix_id, requirement.package)
    root = _root_of(package_dir)
    for expected in requirement.files:
        problem = _file_problem(root, expected)
        if problem:
            return Verdict(requirement.hotfix_id, False, problem, _remedy(requirement, problem, package_dir))
    return Verdict(requirement.hotfix_id, True)


def _file_problem(root: Path, expected: ExpectedFile) -> str:
    path = _loaded_file(expected.path) or root / expected.path
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "" if expected.sha256 is None else f"{path} is missing"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror}"
    if expected.sha256 is None:
        return f"{path} should have been deleted by the hotfix but exists"
    import hashlib

    found = hashlib.sha256(data).hexdigest()
    if found == expected.sha256:
        return ""
    what = " (the unpatched original)" if found == expected.original_sha256 else ""
    return f"{path} has sha256 {found[:12]}{what}, expected {expected.sha256[:12]}"


def _remedy(requirement: Requirement, problem: str, package_dir: Path) -> str:
    if requirement.origin == "lock":
        return (f"this process imports {requirement.package} from {package_dir}: bind-mount the files from "
                f"`hotfix export` over that copy (`hotfix compose`), or check with `hotfix verify --lock`")
    if "unpatched original" in problem or "missing" in problem:
        return f"the install was replaced (rebuild/reinstall?): re-apply with `hotfix apply {requirement.hotfix_id}`"
    return f"the file changed after the hotfix was applied: run `hotfix status {requirement.hotfix_id}`"


def _not_importable(hotfix_id: str, package: str) -> Verdict:
    return Verdict(hotfix_id, False, f"package {package} is not importable in this process ({sys.executable})",
                   "run vLLM with the interpreter the hotfix was applied to")


def loaded_package_dir(package: str) -> Path | None:
    """Directory ``import package`` uses in this process, found without executing the package."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _root_of(package_dir: Path) -> Path:
    """The directory patch paths are relative to: site-packages, or a checkout's root."""
    return package_dir.parent


def _loaded_file(relpath: str) -> Path | None:
    """The file an already imported module really came from, when ``relpath`` is one."""
    if not relpath.endswith(".py"):
        return None
    name = relpath[:-3].replace("/", ".")
    if name.endswith(".__init__"):
        name = name[: -len(".__init__")]
    module = sys.modules.get(name)
    filename = getattr(module, "__file__", None)
    return Path(filename) if filename else None


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
    parts = [f"{v.hotfix_id} in effect" if v.in_effect else f"{v.hotfix_id} NOT IN EFFECT: {v.problem}" for v in verdicts]
    return f"vllm-hotfix guard pid={os.getpid()} role={process_role()}: " + "; ".join(parts)


def strict_message(failing: list[Verdict]) -> str:
    details = "; ".join(f"{v.hotfix_id}: {v.problem} -> {v.remedy}" for v in failing)
    return (f"vllm-hotfix: {len(failing)} required hotfix(es) not in effect in this process "
            f"(pid {os.getpid()}, {process_role()}), refusing to serve (HOTFIX_STRICT=1; unset it to only log): {details}")


def _log(verdicts: tuple[Verdict, ...]) -> None:
    ok = all(v.in_effect for v in verdicts)
    logger.log(logging.INFO if ok else logging.ERROR, "%s", summary_line(verdicts))


def _split_ids(value: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
