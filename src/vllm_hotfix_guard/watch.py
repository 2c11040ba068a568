"""Watch instead of look: a rebinding of a fixed module's or class's name is caught when it happens, with
the caller, so a rebinding after the last checkpoint is seen too. Stdlib only.

What each interpreter offers (tested on CPython 3.10.13, 3.11.7, 3.12.1, 3.13.0; docs: README, "The fixed
function is the one running"):

- CPython 3.12+: dict watchers (``PyDict_AddWatcher`` / ``PyDict_Watch``, a C API reached through
  ``ctypes.pythonapi``) on the fixed module's ``__dict__`` and on the dict of each class that holds a
  fixed method: every write -- ``m.f = g``, ``setattr``, ``m.__dict__["f"] = g``, ``Cls.meth = g``,
  ``exec`` in the module's namespace -- calls back before it happens, with the caller's frame. A
  callback cannot refuse the write: strict mode logs the line and ends the process (``os._exit(1)``).
  The watchers are removed at exit (atexit): a callback into a half-finalised interpreter crashes it.
- CPython 3.10 / 3.11 (and 3.12+ where the watchers cannot be added): the fixed module's ``__class__``
  is set to a ``ModuleType`` subclass whose ``__setattr__`` / ``__delattr__`` see ``m.f = g`` and
  ``setattr(m, ...)`` (strict mode refuses the rebinding by raising HotfixNotInEffect in the caller);
  a write through ``m.__dict__`` and class attributes are seen only at the checkpoints.

Audit hooks are not used: they see ``__code__`` (and ``__defaults__``) assignments but no module or
class attribute, and a Python hook is called for every audit event -- about 100,000 while a vLLM worker
imports its model code -- and cannot be removed. ``__code__`` swaps are caught at the checkpoints (the
code object is compared, not only the function).
"""

from __future__ import annotations

import os
import sys
import types

from vllm_hotfix_guard import code as guard_code, judge as judging
from vllm_hotfix_guard.verdicts import STOPS, HotfixNotInEffect
from vllm_hotfix_guard.process import emit, flush, process_role, serving_process, strict

_ADDED, _MODIFIED, _DELETED = 0, 1, 2  # PyDict_WatchEvent values read here
_watcher: dict = {}  # "id": the dict watcher's id (or None: none could be added), "callback", "dicts"
_targets: dict = {}  # id(watched dict) -> (what it is: "module" | "class", its owner, {key: [Locked]})


def mode() -> str:
    """How rebindings are watched in this interpreter (for docs/guard-code.md's table and the tests)."""
    return "dict watchers" if _dict_watcher() is not None else "module __setattr__"


def watch(module, names) -> None:
    """Watch ``module`` (just executed by the import watch) for rebindings of these verdicts.Locked."""
    tops: dict = {}
    classes: dict = {}
    for locked in names:
        first, _, rest = locked.qualname.partition(".")
        tops.setdefault(first, []).append(locked)
        if rest:  # Cls.meth (or Outer.Inner.meth): the class that holds the attribute
            owner_name, _, attr = locked.qualname.rpartition(".")
            owner = judging.resolve(module, owner_name)
            if isinstance(owner, type):
                classes.setdefault(id(owner), (owner, {}))[1].setdefault(attr, []).append(locked)
    if _dict_watcher() is not None:
        _watch_dict(module.__dict__, ("module", module, tops))
        for owner, attrs in classes.values():
            real = _class_dict(owner)
            if real is not None:
                _watch_dict(real, ("class", owner, attrs))
        return
    if type(module) is types.ModuleType:
        _WatchedModule.tops[module.__name__] = tops
        module.__class__ = _WatchedModule


class _WatchedModule(types.ModuleType):
    """A fixed module's class while the guard watches it (3.10/3.11): sees ``m.f = g`` as it happens."""

    tops: dict = {}  # module name -> {first part of a qualname: [Locked]}

    def __setattr__(self, name, value):
        names = _WatchedModule.tops.get(types.ModuleType.__getattribute__(self, "__name__"), {}).get(name)
        if names:
            _seen(names, name, value, sys._getframe(1), refuse=True)
        types.ModuleType.__setattr__(self, name, value)

    def __delattr__(self, name):
        names = _WatchedModule.tops.get(types.ModuleType.__getattribute__(self, "__name__"), {}).get(name)
        if names:
            _seen(names, name, judging.MISSING, sys._getframe(1), refuse=True)
        types.ModuleType.__delattr__(self, name)


def _seen(names, key: str, value, frame, *, refuse: bool, owner=None) -> None:
    """``key`` is being bound to ``value`` by ``frame``'s code: judge each name under it with the new
    binding, say it, and in strict mode stop the serving process (``refuse``: by raising in the caller)."""
    found = []
    for locked in names:
        if owner is not None:  # a class attribute: the name's last part is the key
            live = value
        else:
            rest = locked.qualname[len(key) + 1:]
            live = value if not rest or value is judging.MISSING else judging.resolve(
                judging.Namespace({key: value}), locked.qualname)
        found.append(judging.judge_binding(locked, live))
    failing = [f for f in found if f.state in STOPS]
    if not failing:
        return
    caller = f"{frame.f_globals.get('__name__', '?')} ({frame.f_code.co_filename}:{frame.f_lineno})"
    from vllm_hotfix_guard.output import quote_path

    point = f"when {quote_path(caller)} rebound {key}"
    guard_code.say(point, found, again=True)
    if strict() and serving_process():
        message = guard_code.stop_message(point, failing)
        if refuse:
            raise HotfixNotInEffect(message)
        emit("ERROR", message)
        flush()
        os._exit(1)


# -- CPython 3.12+: dict watchers through ctypes ----------------------------------------------------------


def _dict_watcher():
    """The dict watcher's id, added on first use; None where the interpreter has none (before 3.12, not
    CPython, no ctypes) or it cannot be added (all watcher slots taken)."""
    if "id" in _watcher:
        return _watcher["id"]
    _watcher["id"] = None
    if sys.implementation.name != "cpython" or sys.version_info < (3, 12):
        return None
    try:
        import ctypes

        api = ctypes.pythonapi
        callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        callback = callback_type(_on_dict_event)
        add, watch_dict, unwatch = api.PyDict_AddWatcher, api.PyDict_Watch, api.PyDict_Unwatch
        add.restype, add.argtypes = ctypes.c_int, [callback_type]
        watch_dict.restype, watch_dict.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.py_object]
        unwatch.restype, unwatch.argtypes = ctypes.c_int, [ctypes.c_int, ctypes.py_object]
        api.PyDict_ClearWatcher.restype, api.PyDict_ClearWatcher.argtypes = ctypes.c_int, [ctypes.c_int]
        watcher = add(callback)
    except Exception:  # noqa: BLE001 - AttributeError (no such symbol), OSError, the C call's own error
        return None
    _watcher.update(id=watcher, callback=callback, dicts=[], ctypes=ctypes, api=api, pid=os.getpid())
    import atexit

    atexit.register(_unwatch_all)
    return watcher


def _watch_dict(d: dict, target: tuple) -> None:
    if id(d) in _targets:
        return
    try:
        _watcher["api"].PyDict_Watch(_watcher["id"], d)
    except Exception:  # noqa: BLE001
        return
    _targets[id(d)] = target
    _watcher["dicts"].append(d)


def _class_dict(owner: type):
    """The dict behind a class's mappingproxy (what ``Cls.x = v`` writes)."""
    import gc

    found = [r for r in gc.get_referents(owner.__dict__) if type(r) is dict]
    return found[0] if len(found) == 1 else None


def _on_dict_event(event: int, dict_ptr, key_ptr, value_ptr) -> int:
    """Called by CPython before a watched dict changes (GIL held). Must not change the dict."""
    if event > _DELETED or not key_ptr:
        return 0
    try:
        ctypes = _watcher["ctypes"]
        target = _targets.get(dict_ptr)
        if target is None:
            return 0
        key = ctypes.cast(key_ptr, ctypes.py_object).value
        kind, owner, names_by_key = target
        names = names_by_key.get(key) if isinstance(key, str) else None
        if not names:
            return 0
        value = ctypes.cast(value_ptr, ctypes.py_object).value if value_ptr and event != _DELETED \
            else judging.MISSING
        _seen(names, key, value, sys._getframe(1), refuse=False, owner=owner if kind == "class" else None)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - never break the write
        try:
            emit("ERROR", f"vllm-hotfix guard pid={os.getpid()} role={process_role()}: watch: internal error: "
                          f"{type(exc).__name__}: {exc} (report it to vllm-hotfix)")
        except Exception:  # noqa: BLE001
            pass
    return 0


def _unwatch_all() -> None:
    api, watcher = _watcher.get("api"), _watcher.get("id")
    if api is None or watcher is None:
        return
    for d in _watcher.get("dicts", ()):
        try:
            api.PyDict_Unwatch(watcher, d)
        except Exception:  # noqa: BLE001
            pass
    try:
        api.PyDict_ClearWatcher(watcher)
    except Exception:  # noqa: BLE001
        pass
    _watcher["id"] = None
    _targets.clear()
