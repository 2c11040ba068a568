"""Where the guard checks the live code: the points at which vLLM's plugins and platform patches have run
in each kind of process (vLLM 0.30.0; shown with its real loader in tests/test_guard_runtime_vllm.py).
Stdlib only; imports no vLLM module (it looks at the ones already loaded).

- **After ``load_general_plugins()`` returns** (every process that loads plugins: the API server, a
  spawned engine core or worker). vLLM imports every plugin's module, then calls each plugin in turn
  (``for func in plugins.values(): func()``), so a plugin after the guard runs after ``register()``.
  ``register()`` finds that loop's frame (``vllm.plugins.load_general_plugins``) and puts a wrapper
  around the *last* plugin's callable in the loop's own dict (its value is replaced, no key added: the
  iteration is unchanged); the check runs when that callable returns. When the guard is the last, the
  check runs at the end of ``register()``. Without that frame (another loader) it checks there.
- **After the platform's ``pre_register_and_update``**: vllm-ascend applies its platform patches there;
  vLLM calls it at the start of ``EngineArgs.create_engine_config`` (and at the end of
  ``AsyncEngineArgs.add_cli_args``, which is running when the guard registers: its patches are seen by
  ``create_engine_config``, called later in the same process). The guard wraps
  ``EngineArgs.create_engine_config`` (transparent: ``__wrapped__``) and checks when it returns.
- **After a worker's init**: vllm-ascend applies its worker patches in ``NPUWorker.__init__``, which
  ``WorkerWrapperBase.init_worker`` calls; both executors call ``init_device()`` right after
  ``init_worker()``. The guard wraps ``WorkerWrapperBase.init_device`` and checks when it starts. A
  forked worker inherits the wrapper from its engine core; a spawned one installs it in ``register()``
  (``init_worker`` is running then).
- **At a fork** (os.register_at_fork, guard.py): the child inherits its parent's objects; they are
  checked in the child too.

The wrappers are the guard's own rebindings of two vLLM methods: they carry ``__wrapped__`` and
verdicts.CHECKPOINT, and the code check treats them as transparent.
"""

from __future__ import annotations

import sys

from vllm_hotfix_guard import code as guard_code
from vllm_hotfix_guard.verdicts import CHECKPOINT, IN_EFFECT, NOT_LOADED, WRAPPED

AFTER_PLUGINS = "after load_general_plugins()"
AFTER_PLATFORM = "after the platform's pre_register_and_update (EngineArgs.create_engine_config)"
AFTER_WORKER = "after the worker's init (WorkerWrapperBase.init_device)"
AT_START = "at the guard's start"
AT_FORK = "at fork"

# (module, class, method, point, check after the call returns (else before it runs))
CHECKPOINTS = (
    ("vllm.engine.arg_utils", "EngineArgs", "create_engine_config", AFTER_PLATFORM, True),
    ("vllm.v1.worker.worker_base", "WorkerWrapperBase", "init_device", AFTER_WORKER, False),
)
_LOADER = ("vllm.plugins", "load_general_plugins")


def plugin_loop():
    """(the plugins dict vLLM's loader iterates, the callable it is calling now) or None: found from
    ``register()``'s callers (a few frames up: vLLM calls it directly, a test may wrap it)."""
    frame = sys._getframe(1)
    for _ in range(8):
        frame = frame.f_back
        if frame is None:
            return None
        if frame.f_code.co_name == _LOADER[1] and frame.f_globals.get("__name__") == _LOADER[0]:
            local = frame.f_locals
            plugins = local.get("plugins")
            if isinstance(plugins, dict) and plugins:
                return plugins, local.get("func")
            return None
    return None


def schedule(loop) -> bool:
    """Arrange the check after the plugins that follow the guard; True when the guard is the last one
    (the check is due now)."""
    if loop is None:
        return True
    plugins, current = loop
    last = next(reversed(plugins))
    func = plugins[last]
    if func is current:
        return True
    plugins[last] = _after(func, AFTER_PLUGINS)
    return False


def install() -> None:
    """Wrap the vLLM methods whose call marks a checkpoint: now in the modules loaded already, else once
    they are imported (guard_imports.after_import). Idempotent."""
    from vllm_hotfix_guard import imports as guard_imports

    for module_name, class_name, method, point, after in CHECKPOINTS:
        module = sys.modules.get(module_name)
        if module is None:
            guard_imports.after_import(module_name, install)
            continue
        owner = getattr(module, "__dict__", {}).get(class_name) if module is not None else None
        if not isinstance(owner, type):
            continue
        func = owner.__dict__.get(method)
        if func is None or not callable(func) or getattr(func, CHECKPOINT, False):
            continue
        setattr(owner, method, _after(func, point) if after else _before(func, point))


def _after(func, point: str):
    def checkpoint(*args, **kwargs):
        result = func(*args, **kwargs)
        guard_code.checkpoint(point)
        return result

    return _like(checkpoint, func)


def _before(func, point: str):
    def checkpoint(*args, **kwargs):
        if point == AFTER_WORKER and args:  # the worker's config: watch its compile cache (compiled.py)
            _watch_compile(args[0])
        guard_code.checkpoint(point)
        return func(*args, **kwargs)

    return _like(checkpoint, func)


def _like(wrapper, func):
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(wrapper, attr, getattr(func, attr))
        except (AttributeError, TypeError):
            pass
    wrapper.__wrapped__ = func
    setattr(wrapper, CHECKPOINT, True)
    return wrapper


_started = {}  # "pid": the process that took the names (a forked child inherits it: its first check is at fork)


def start(checks, plugins=()) -> tuple[tuple, frozenset]:
    """From ``register()`` (or the fork hook): take the lock's names (guard_code.start), arrange the
    checkpoints, and judge what is loaded now. Returns verdicts.Verdicts of the names not in effect
    (they join the summary line; strict mode stops there as for a file) and the modules already
    imported whose every locked name is proven (the import watch need not call them unchecked).
    ``plugins``: vLLM's plugin callables when not called from its loader (plugin.judge_process)."""
    if not any(f.code is not None for check in checks for f in check.hotfix.files):
        return (), frozenset()  # a lock without code names (guard.py does not call then): nothing to judge
    return start_names(*guard_code.locked_of(checks), plugins=plugins)


def start_names(names, usable: bool, plugins=()) -> tuple[tuple, frozenset]:
    """``start`` on the names guard_code.locked_of gives (or lock_cache.py kept for this container)."""
    import os

    forked = _started.get("pid") not in (None, os.getpid())
    _started["pid"] = os.getpid()
    loop = None if forked else plugin_loop()
    guard_code.take(names, usable, plugins=loop[0].values() if loop else plugins)
    if not guard_code.active():
        return (), frozenset()
    install()
    due = forked or schedule(loop)
    found = guard_code.judge_all()
    failing = guard_code.verdicts(found)
    if due:
        guard_code.say(AT_FORK if forked else AFTER_PLUGINS, found)
    proven = frozenset(module for module in {f.locked.module for f in found if f.state != NOT_LOADED}
                       if all(f.state in (IN_EFFECT, WRAPPED)
                              for f in found if f.locked.module == module))
    return failing, proven


def _watch_compile(worker) -> None:
    if not guard_code.active():
        return
    from vllm_hotfix_guard import compiled as guard_compile

    try:
        guard_compile.watch(getattr(worker, "vllm_config", None))
    except Exception:  # noqa: BLE001 - the compile cache check is extra: never break a worker's start
        pass
