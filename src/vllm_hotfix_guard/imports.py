"""The guard's import watch: the modules a hotfix patched must run the patched code.

Right files on disk do not prove the process runs them: a stale ``.pyc`` beside a read-only bind
mount (same size and mtime), another copy earlier on ``sys.path``, a module imported before the
mount appeared. For exactly the module names a locked or required hotfix patched, a ``sys.meta_path``
finder lets the normal finders locate the module, then loads it with a loader that reads the source,
checks its sha256 and path, and compiles *those* bytes (never a ``.pyc``). Any other import costs two
dict lookups (the watched modules, then the checkpoint modules of points.py: ``after_import``).
One log line per watched module; strict mode stops a serving process on a mismatch. Stdlib only.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import sys

from vllm_hotfix_guard.verdicts import HotfixNotInEffect, Verdict
from vllm_hotfix_guard.process import emit, module_line, serving_process, strict
from vllm_hotfix_guard.settings import READY_DIR_ENV

_verified: dict[str, str] = {}  # module -> path it was loaded from, checked (inherited by forked children)
_finder: "_WatchFinder | None" = None


def watch(watched, proven=frozenset()) -> tuple:
    """Watch these verdicts.Watched modules from now on; return verdicts.Verdicts for those this process
    already imported without the check (their code cannot be proven any more), but the ``proven`` ones:
    every function, method and class its hotfixes lock runs the fixed code (code.py)."""
    modules = {w.module: w for w in watched}
    _the_finder().modules = modules
    early = []
    for name, w in modules.items():
        if name in sys.modules and name not in _verified and name not in proven:
            where = getattr(sys.modules[name], "__file__", None)
            early.append(Verdict(w.hotfix_id, False,
                                 f"unknown: module {name} was imported before the guard ran (from {where}): "
                                 f"the code it runs was not checked",
                                 "find what imports it before vLLM loads its plugins", "import"))
    return tuple(early)


def after_import(module: str, callback) -> None:
    """Call ``callback()`` once ``module`` has been executed by a later import (points.py: a vLLM
    module whose methods mark a checkpoint). Its loader is a SourceFileLoader like the one it would have
    had (bytecode cached as usual), which calls back after ``exec_module``."""
    _the_finder().after[module] = callback


def _the_finder() -> "_WatchFinder":
    global _finder
    if _finder is None:
        _finder = _WatchFinder({})
        sys.meta_path.insert(0, _finder)
    return _finder


class _WatchFinder:
    def __init__(self, modules: dict) -> None:
        self.modules = modules
        self.after: dict = {}  # module -> callback (after_import)

    def find_spec(self, fullname, path=None, target=None):
        w = self.modules.get(fullname)
        if w is None:
            callback = self.after.get(fullname)
            return None if callback is None else self._then(fullname, path, target, callback)
        spec = self._others(fullname, path, target)
        if spec is None:
            return None
        if spec.origin and spec.origin.endswith(".py") and spec.has_location:
            spec.loader = _CheckedLoader(fullname, spec.origin, w)
        else:
            _mismatch(w, spec.origin, f"not loaded from source ({type(spec.loader).__name__}), "
                                      f"not the patched {w.path}")
        return spec


    def _then(self, fullname, path, target, callback):
        spec = self._others(fullname, path, target)
        if spec is not None and type(spec.loader) is importlib.machinery.SourceFileLoader:
            spec.loader = _ThenLoader(fullname, spec.origin, callback)
        return spec

    def _others(self, fullname, path, target):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                return spec
        return None


class _ThenLoader(importlib.machinery.SourceFileLoader):
    """SourceFileLoader, then a call back (after_import)."""

    def __init__(self, fullname: str, path: str, callback) -> None:
        super().__init__(fullname, path)
        self.callback = callback

    def exec_module(self, module) -> None:
        super().exec_module(module)
        self.callback()


class _CheckedLoader(importlib.machinery.SourceFileLoader):
    """Reads the source, checks it, and compiles exactly those bytes (no .pyc read or written)."""

    def __init__(self, fullname: str, path: str, w) -> None:
        super().__init__(fullname, path)
        self.watched = w

    def get_code(self, fullname):
        data = self.get_data(self.path)
        sha = hashlib.sha256(data).hexdigest()
        w = self.watched
        same_place = os.path.normpath(self.path) == os.path.normpath(w.path) or _same_file(self.path, w.path)
        if sha == w.sha256 and same_place:
            _verified[fullname] = self.path
            emit("INFO", module_line(fullname, self.path, f"the patched source of {w.hotfix_id} "
                                                          f"(sha256 {sha[:12]}), compiled from source"))
        else:
            problems = []
            if not same_place:
                problems.append(f"not the checked file {w.path}")
            if sha != w.sha256:
                problems.append(f"sha256 {sha[:12]}, expected the patched {w.sha256[:12]}")
            _mismatch(w, self.path, ", ".join(problems))
        from vllm_hotfix_guard.install.bytecode import compiled  # the check of a pyc compiled these very bytes already?

        code = compiled(self.path, data, sys.flags.optimize)
        return code if code is not None else self.source_to_code(data, self.path)

    def exec_module(self, module) -> None:
        super().exec_module(module)
        code = sys.modules.get(f"{__package__}.code")  # imported only for a lock with code names
        if code is not None and _verified.get(self.name) == self.path:  # the objects just compiled from the checked source are the fixed ones
            names = code.loaded(self.name, module)
            if names:  # watch its locked names' rebindings from now on (code.py records, watch.py watches)
                from vllm_hotfix_guard import watch as guard_watch

                guard_watch.watch(module, names)
        callback = _finder.after.get(self.name) if _finder is not None else None
        if callback is not None:  # a patched module whose methods also mark a checkpoint (after_import)
            callback()

    def set_data(self, path, data, *, _mode=0o666):  # never write a .pyc of what we compiled
        return None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _mismatch(w, path: str | None, text: str) -> None:
    emit("ERROR", module_line(w.module, path, f"{w.hotfix_id} NOT IN EFFECT: {text}"))
    if os.environ.get(READY_DIR_ENV, "").strip():  # the readiness record follows the latest verdict
        from vllm_hotfix_guard.ready import failed

        failed([w.hotfix_id])
    if strict() and serving_process():
        raise HotfixNotInEffect(f"vllm-hotfix: {w.hotfix_id} not in effect in this process (pid {os.getpid()}): "
                                f"module {w.module} from {path}: {text}; refusing to serve (HOTFIX_STRICT=1; unset it to only log)")
