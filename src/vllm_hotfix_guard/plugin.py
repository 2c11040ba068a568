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

from vllm_hotfix_guard.verdicts import HotfixNotInEffect, Verdict, Watched  # noqa: F401 - the API
from vllm_hotfix_guard.process import (  # noqa: F401
    command_line, emit, flush, forked_process_name, LOGGER_NAME, process_role, serving_process, set_fork_role, strict)
from vllm_hotfix_guard.settings import LOCK_ENV, READY_DIR_ENV, REQUIRE_ENV, STATE_DIR_ENV

_last_check: tuple[tuple, tuple[Verdict, ...], str] | None = None  # (settings, verdicts, fingerprint)
_fork_hook_installed = False
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
            _lock_sha256[0] = hit.sha256
            return hit.verdicts, hit.watched, hit.fingerprint, hit.names, hit.usable
    from vllm_hotfix_guard import derive

    try:
        derived = derive.derive(lock, require, hit)
    finally:
        if hit is not None:
            hit.close()
    _lock_sha256[0] = derive.LOCK_SHA256[0]
    return derived


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
    """Verdicts for every hotfix the lock file and/or the required ids name, in this process (derive.py)."""
    return check_with_modules(lock=lock, require=require)[0]


def check_with_modules(*, lock: str | None, require: tuple[str, ...]) -> tuple[tuple[Verdict, ...], tuple[Watched, ...]]:
    """Verdicts (one per hotfix id, naming where each requirement came from) and the patched modules."""
    from vllm_hotfix_guard.derive import check_all

    return check_all(lock=lock, require=require)[:2]


def judge_process(*, lock: str | None, require: tuple, names: str | None = None, plugins=()) -> tuple:
    """``register()``'s verdicts here and now, not logged (derive.judge_process): `hotfix status --runtime`."""
    from vllm_hotfix_guard.derive import judge_process as judge

    return judge(lock=lock, require=require, names=names, plugins=plugins)


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
