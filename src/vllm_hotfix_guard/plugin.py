"""The in-process guard: a ``vllm.general_plugins`` entry point.

vLLM calls ``register()`` in every process it starts (API server, engine core, each worker), each of which
imports vLLM on its own, possibly from another copy (PYTHONPATH, another node). When ``HOTFIX_LOCK`` and/or
``HOTFIX_REQUIRE`` is set, the guard checks that the files the required hotfixes touch, as *this* process
resolves them, have the expected sha256, and logs one line. With ``HOTFIX_STRICT=1`` a hotfix not in effect
raises ``HotfixNotInEffect``, which stops a serving process before it serves (``vllm --version`` only warns).

vLLM calls the plugins once per process and a *forked* child inherits that, so the guard also checks
in every forked child (``os.register_at_fork``). And it watches the imports of exactly the modules
the hotfixes patch (imports.py): the code a process runs must be compiled from the patched bytes
at the checked path. Stdlib only; never imports vLLM submodules or torch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from vllm_hotfix_guard.verdicts import HotfixNotInEffect, Verdict, Watched  # noqa: F401 - the API
from vllm_hotfix_guard.process import (  # noqa: F401
    command_line, emit, flush, forked_process_name, LOGGER_NAME, process_role, serving_process, set_fork_role, strict)
from vllm_hotfix_guard.settings import LOCK_ENV, READY_DIR_ENV, REQUIRE_ENV, STATE_DIR_ENV, required_ids

_last_check: tuple[tuple, tuple[Verdict, ...], str] | None = None  # (settings, verdicts, fingerprint)
_code_checks: list = []  # the lock's checks and the required records' of this process: their code names (points.py)
_fork_hook_installed = False
_derived: dict = {}  # the last derivation's lock and installs, by package (for lock_inputs.offer)
_lock_sha256: list = [None]  # of the lock bytes this process judged: its readiness record names them (read once)


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
        emit("WARNING", f"vllm-hotfix guard pid={os.getpid()} role={process_role()}: "
                        f"not stopping `{command_line()}` (HOTFIX_STRICT=1): it serves nothing")


def _settings() -> tuple[str, str]:
    return os.environ.get(LOCK_ENV, "").strip(), os.environ.get(REQUIRE_ENV, "").strip()


def _check_here(lock: str, require: str) -> list[Verdict]:
    """Check once per process (and settings); log one line; watch the patched modules' imports."""
    global _last_check
    key = (os.getpid(), lock, require, os.environ.get(STATE_DIR_ENV))
    if _last_check is not None and _last_check[0] == key:
        verdicts = _last_check[1]
    else:
        fingerprint = "hf1-none"  # core.fingerprint.NONE (a test holds them equal): not imported on a cache hit
        try:
            verdicts, watched, fingerprint, names, usable = _derive(lock, require)
            from vllm_hotfix_guard import imports as guard_imports
            code, proven = (), frozenset()
            if names:  # else points.py is not imported
                from vllm_hotfix_guard import points as guard_points
                code, proven = guard_points.start_names(names, usable)  # the fixed function is the one running
            verdicts += code + guard_imports.watch(watched, proven)
        except Exception as exc:  # noqa: BLE001 - a bug here must not take vLLM down unless strict
            verdicts = (Verdict("(guard)", False, f"internal error: {type(exc).__name__}: {exc}",
                                "report it to vllm-hotfix; unset HOTFIX_LOCK / HOTFIX_REQUIRE to turn the guard off"),)
        _last_check = (key, verdicts, fingerprint)
        _log(verdicts, fingerprint)
        if os.environ.get(READY_DIR_ENV):
            __import__("vllm_hotfix_guard.ready", fromlist=["record"]).record(verdicts, lock_sha256=_lock_sha256[0] if lock else None)
    return [v for v in verdicts if not v.in_effect]


def _derive(lock: str, require: str) -> tuple:
    """(verdicts, watched modules, fingerprint, locked code names, whether their fingerprints hold here) of this
    process: from the container's lock verdict cache when it holds (lock_cache.py: HOTFIX_LOCK alone, with
    HOTFIX_READY_DIR), else derived -- and then offered to that cache."""
    hit = None
    if lock and not require and os.environ.get(READY_DIR_ENV):
        from vllm_hotfix_guard import lock_cache

        hit = lock_cache.lookup(lock)
        if hit.verdicts is not None:
            hit.close()
            _lock_sha256[0], _code_checks[:] = hit.sha256, ()
            return hit.verdicts, hit.watched, hit.fingerprint, hit.names, hit.usable
    _derived.clear()
    derived = _check_all(lock=lock or None, require=required_ids(require), data=hit.data if hit else None)
    names, usable = [], False
    if any(f.code is not None for check in _code_checks for f in check.hotfix.files):
        from vllm_hotfix_guard.code import locked_of

        names, usable = locked_of(_code_checks)
    if hit is not None and hit.key is not None and _derived.get("lock") is not None:
        _offer(hit, lock, derived, names, usable)
    if hit is not None:
        hit.close()
    return (*derived, names, usable)


def _offer(hit, lock: str, derived: tuple, names: list, usable: bool) -> None:
    """Leave this derivation for the container's later processes (lock_inputs.offer decides whether it may)."""
    try:
        from vllm_hotfix_guard.lock_inputs import offer
        from vllm_hotfix_guard.trust import CACHED, TRUST_ID

        checks, installed, sha256 = list(_code_checks), dict(_derived["installed"]), _lock_sha256[0]

        def again() -> tuple:
            try:
                return _check_all(lock=lock, require=(), data=hit.data)
            finally:
                _code_checks[:], _lock_sha256[0] = checks, sha256

        trust = [v for v in derived[0] if v.hotfix_id == TRUST_ID]
        offer(hit, lock_path=lock, lock=_derived["lock"], installed=installed, checks=checks, derived=derived,
              names=names, usable=usable, trust_cached=all(v.detail.startswith(CACHED) for v in trust), again=again)
    except Exception:  # noqa: BLE001 - the cache only saves time: a failure to keep it costs the next process a derivation
        pass


def judge_process(*, lock: str | None, require: tuple, names: str | None = None, plugins=()) -> tuple:
    """``register()``'s verdicts here and now (the lock's and the records' files with their bytecode, then the
    code check of the lock's names) and the fingerprint, not logged: `hotfix status --runtime` asks it after
    vLLM's plugins ran. ``names``: a lock read for its code names only (a record's); ``plugins``: vLLM's
    plugin callables (their packages are scanned for stale aliases, as from its loader)."""
    verdicts, _, fingerprint = _check_all(lock=lock, require=require)
    checks = _code_checks if lock or not names else (_check_lock(Path(names))[1] or [])
    if any(f.code is not None for check in checks for f in check.hotfix.files):
        verdicts += __import__("vllm_hotfix_guard.points", fromlist=["start"]).start(checks, plugins)[0]
    return verdicts, fingerprint


def _install_fork_hook() -> None:
    """vLLM loads plugins once per process (its ``plugins_loaded`` flag), and a forked child inherits
    the flag: forked EngineCores and workers never call ``register()``, so check them here."""
    global _fork_hook_installed
    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _fork_hook_installed = True


def _after_fork_in_child() -> None:
    lock, require = _settings()
    if not lock and not require:
        return
    # The child's multiprocessing name is still the parent's here: the Process being started names it
    # (or, for a bare os.fork, the parent's role does).
    set_fork_role(forked_process_name() or f"fork of {process_role()}")
    failing = _check_here(lock, require)
    if failing and strict() and serving_process():
        # An exception raised in a fork hook is printed and ignored: stop the child ourselves.
        emit("ERROR", strict_message(failing))
        flush()
        os._exit(1)


def check(*, lock: str | None, require: tuple[str, ...]) -> tuple[Verdict, ...]:
    """Verdicts for every hotfix the lock file and/or the required ids name, in this process."""
    return check_with_modules(lock=lock, require=require)[0]


def check_with_modules(*, lock: str | None, require: tuple[str, ...]) -> tuple[tuple[Verdict, ...], tuple[Watched, ...]]:
    """Verdicts (one per hotfix id, naming where each requirement came from) and the patched modules."""
    return _check_all(lock=lock, require=require)[:2]


def _check_all(*, lock: str | None, require: tuple[str, ...], data: bytes | None = None
               ) -> tuple[tuple[Verdict, ...], tuple[Watched, ...], str]:
    """check_with_modules, plus the fingerprint (core/fingerprint.py) of every hotfix checked, computed from
    the same checks (each file is found and hashed once per process): a hotfix both locked and required
    counts once, as the lock has it -- the fingerprint `verify --lock` and `status` print for those bytes."""
    from vllm_hotfix_guard.core.fingerprint import NONE, fingerprint as digest

    results: list[tuple[Verdict, tuple]] = []  # (verdict, (hotfix id, its FileChecks) or None)
    entries: dict = {}  # hotfix id -> core.fingerprint.Entry
    locked, checks = _check_lock(Path(lock), data) if lock else ([], None)
    results.extend(locked)
    _code_checks[:] = checks or ()
    if checks is not None:  # a lock that loaded
        from vllm_hotfix_guard.txn.lock_check import fingerprint_entries

        entries.update((e.id, e) for e in fingerprint_entries(checks))
    if require:
        from vllm_hotfix_guard.required import check_required_ids

        required, judged = check_required_ids(require)
        results.extend(required)
        from vllm_hotfix_guard.recorded import CHECKS  # the required records' code names (recorded.py)
        locked_ids = {c.hotfix.id for c in _code_checks if any(f.code is not None for f in c.hotfix.files)}
        _code_checks.extend(c for c in CHECKS if c.hotfix.id not in locked_ids)
        from vllm_hotfix_guard.txn.judgement import fingerprint_entries as record_entries

        for entry in record_entries(judged):
            entries.setdefault(entry.id, entry)
    fingerprint = digest(entries.values()) if entries else NONE
    verdicts: dict[str, Verdict] = {}
    for v, _ in results:
        seen = verdicts.get(v.hotfix_id)
        if seen is None:
            verdicts[v.hotfix_id] = v
        else:  # in both HOTFIX_LOCK and HOTFIX_REQUIRE: one line, the failing verdict if any, both sources
            kept = seen if (not seen.in_effect or v.in_effect) else v
            verdicts[v.hotfix_id] = Verdict(kept.hotfix_id, kept.in_effect, kept.detail, kept.remedy,
                                            f"{seen.source}+{v.source}")
    return tuple(verdicts.values()), _watched([f for _, f in results if f is not None]), fingerprint


def _watched(checked) -> tuple[Watched, ...]:
    """The Python modules among the files the hotfixes patched, at the path this process resolves."""
    from vllm_hotfix_guard.core.distname import module_name

    found: dict[str, Watched] = {}
    for hotfix_id, files in checked:
        for file in files:
            if file.where and file.expected and file.path.endswith(".py"):
                module = module_name(file.path)
                found.setdefault(module, Watched(module, hotfix_id, file.where, file.expected))
    return tuple(found.values())


def _check_lock(path: Path, data: bytes | None = None) -> tuple[list[tuple[Verdict, tuple]], list | None]:
    import shlex

    from vllm_hotfix_guard.installed import installed
    from vllm_hotfix_guard.trust import read_lock_here
    from vllm_hotfix_guard.txn.lock_check import check_lock
    from vllm_hotfix_guard.wording import python_option, verdict_of

    lock, lines, _lock_sha256[0] = read_lock_here(path, data)  # None: unusable; lines: its (lock) / (trust) verdicts
    usable = lock is not None and all(v.in_effect for v, _ in lines)  # a refused lock is not checked further
    seen: dict = {}

    def resolve(package: str):
        seen[package] = installed(package)
        return seen[package]

    # install/bytecode.py's rule in this very process (its cache tag, its hash-check mode): a stat per level, a
    # compile only when an entry would be loaded, and that compile is what the import watch then uses
    from vllm_hotfix_guard.install.bytecode import stale_by_source

    checks = check_lock(lock, resolve, bytecode=stale_by_source) if usable else None
    _derived.update(lock=lock if usable else None, installed=seen)
    option = f"--lock {shlex.quote(str(path))} {python_option()}"
    return lines + [(verdict_of(c.hotfix.id, c.hotfix.package, c.state, c.detail, c.files, c.installed_version, "lock",
                              option, c.unnamed), (c.hotfix.id, c.files)) for c in checks or ()], checks


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
    from vllm_hotfix_guard.output import visible  # the one sanitiser: this text ends up in vLLM's traceback

    details = "; ".join(f"{v.hotfix_id}: {v.detail} -> {v.remedy}" for v in failing)
    return visible(f"vllm-hotfix: {len(failing)} required hotfix(es) not in effect in this process "
                   f"(pid {os.getpid()}, {process_role()}), refusing to serve (HOTFIX_STRICT=1; unset it to only log): "
                   f"{details}")


def _log(verdicts: tuple[Verdict, ...], fingerprint: str) -> None:
    ok = all(v.in_effect for v in verdicts)
    if serving_process():
        emit("INFO" if ok else "ERROR", summary_line(verdicts, fingerprint))
    elif not ok:  # `vllm --version` & co.: no INFO noise before their output, problems as a warning
        emit("WARNING", summary_line(verdicts, fingerprint))
