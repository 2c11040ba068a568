"""torch.compile and CUDA graphs: a graph vLLM compiled, and replays, never re-enters Python, so the code
check (code.py) cannot see what it runs. Stdlib only.

vLLM 0.30.0's compile cache (``vllm/compilation/backends.py``, ``VllmBackend.__call__``): Dynamo records
every file it traces into ``compilation_config.traced_files``; the backend hashes those files' paths and
contents into ``code_hash``, then clears the set. Unless ``compilation_config.cache_dir`` is set, the
cache directory is named by a hash of (environment, config, ``code_hash``, compiler), so a fixed traced
file gets fresh graphs; a *pinned* ``cache_dir`` is used as it is, and graphs compiled there from the
old code are loaded again (each rank's ``cache_key_factors.json`` records the ``code_hash`` they were
compiled from).

At the worker's init (guard_points.AFTER_WORKER) the guard notes whether ``cache_dir`` is pinned and puts
a ``set`` subclass in place of ``traced_files`` whose ``clear()`` -- the moment the backend has decided
the cache -- checks, with the backend's own ``code_hash``: is each locked file among the traced files
(then the graphs hold its code, and the hash covers its bytes, which the file check proved are the
locked ones), and does a pinned directory's recorded ``code_hash`` match? A mismatch is reported and, in
strict mode, stops the serving process (the exception leaves the compile). It pickles as a plain set.
"""

from __future__ import annotations

import os
import sys

from vllm_hotfix_guard import code as guard_code
from vllm_hotfix_guard.verdicts import HotfixNotInEffect
from vllm_hotfix_guard.process import emit, process_role, serving_process, strict

FACTORS = "cache_key_factors.json"  # vLLM's record of what a rank's cached graphs were compiled from
FACTORS_LIMIT = 1 << 20


def watch(vllm_config) -> bool:
    """Watch the compile cache decisions of this vLLM config; False when it cannot be (no config, or a
    ``traced_files`` that is not a plain set: another vLLM, or watched already)."""
    config = getattr(vllm_config, "compilation_config", None)
    traced = getattr(config, "traced_files", None)
    if type(traced) is not set:
        return False
    files = guard_code.locked_files()
    if not files:
        return False
    watched = TracedFiles(traced)
    watched.pinned, watched.files = str(getattr(config, "cache_dir", "") or ""), files
    try:
        object.__setattr__(config, "traced_files", watched)  # not through pydantic: it would copy a plain set
    except (AttributeError, TypeError):
        return False
    return True


class TracedFiles(set):
    """compilation_config.traced_files, checked when vLLM's backend clears it (see the module docstring)."""

    __slots__ = ("pinned", "files")

    def clear(self) -> None:
        try:
            decided(self, sys._getframe(1))
        finally:
            set.clear(self)

    def __reduce__(self):  # another process gets a plain set
        return (set, (list(self),))


def decided(traced, frame) -> None:
    """The backend's frame has just computed ``code_hash`` from ``traced``: judge and say it."""
    try:
        local = frame.f_locals
        backend, code_hash = local.get("self"), local.get("code_hash")
        real = {os.path.realpath(p) for p in traced}
        inside = [(hotfix_id, path) for path, hotfix_id in traced.files.items() if os.path.realpath(path) in real]
        prefix = str(getattr(backend, "prefix", "") or "")
        problem = None
        if not inside:
            text = "no locked file is traced: the fixed code runs in Python (the code check covers it)"
        elif traced.pinned:
            problem, text = _pinned(traced.pinned, backend, code_hash, inside)
        else:
            text = (f"{_files(inside)} traced; the cache directory is keyed by the traced code "
                    f"(code hash {str(code_hash)[:12]}), which holds the locked bytes")
    except Exception as exc:  # noqa: BLE001 - never break a compile over our own bug
        emit("ERROR", f"vllm-hotfix guard pid={os.getpid()} role={process_role()}: compile cache: internal error: "
                      f"{type(exc).__name__}: {exc} (report it to vllm-hotfix)")
        return
    line = f"vllm-hotfix guard pid={os.getpid()} role={process_role()}: compile cache" + \
        (f" ({prefix})" if prefix else "") + f": {text}"
    emit("ERROR" if problem else "INFO", line)
    if problem and strict() and serving_process():
        raise HotfixNotInEffect(f"vllm-hotfix: {problem}; refusing to serve (pid {os.getpid()}, {process_role()}, "
                                f"HOTFIX_STRICT=1; unset it to only log)")


def _pinned(cache_dir: str, backend, code_hash, inside) -> tuple:
    from vllm_hotfix_guard.output import quote_path

    config = getattr(backend, "vllm_config", None)
    parallel = getattr(config, "parallel_config", None)
    rank, dp_rank = getattr(parallel, "rank", 0), getattr(parallel, "data_parallel_index", 0)
    prefix = str(getattr(backend, "prefix", "") or "")
    factors = os.path.join(cache_dir, f"rank_{rank}_{dp_rank}", prefix, FACTORS)
    recorded = _recorded_hash(factors)
    if recorded is None:
        return None, (f"{_files(inside)} traced; compilation_config.cache_dir is pinned to {quote_path(cache_dir)}, "
                      f"which holds no graphs for rank {rank}/{dp_rank} yet: they are compiled from this code "
                      f"(code hash {str(code_hash)[:12]})")
    if recorded == code_hash:
        return None, (f"{_files(inside)} traced; the graphs in the pinned cache_dir {quote_path(cache_dir)} were "
                      f"compiled from this code (code hash {recorded[:12]})")
    problem = (f"the pinned compilation_config.cache_dir {quote_path(cache_dir)} holds graphs compiled from other "
               f"code (code hash {recorded[:12]} in {quote_path(factors)}, {str(code_hash)[:12]} now) and vLLM loads "
               f"them as they are: {_files(inside)} would not run in them")
    return problem, problem + " -> empty that directory (or unpin cache_dir) so that the graphs are compiled again"


def _recorded_hash(path: str):
    from vllm_hotfix_guard.errors import InvalidInput
    from vllm_hotfix_guard.inputs import read_bounded

    try:
        data = read_bounded(path, cap=FACTORS_LIMIT, what="compile cache factors", follow_symlinks=False)
    except (InvalidInput, OSError):
        return None
    if data is None:
        return None
    import json

    try:
        value = json.loads(data).get("code_hash")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _files(inside) -> str:
    from vllm_hotfix_guard.output import quote_path

    return ", ".join(f"{hotfix_id} {quote_path(path)}" for hotfix_id, path in inside)
