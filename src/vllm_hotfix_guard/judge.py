"""How one fixed name is bound in this process (code.py asks; watch.py asks about a binding
as it happens). Stdlib only; looks at objects without calling them (no descriptor, no ``__getattr__``).
"""

from __future__ import annotations

import sys

from vllm_hotfix_guard.verdicts import (
    CHECKPOINT, IN_EFFECT, SHADOWED, STALE_ALIAS, WRAPPED, Found, Locked)

from vllm_hotfix_guard.codestate import (  # noqa: F401 - the process's state (codestate.py), judge's API too
    EARLIER, FIXED, LOCK_PRINTS, PLUGIN_PACKAGES, PRINTS, attr)


class Missing:
    __slots__ = ()


MISSING = Missing()


def resolve(module, qualname: str):
    """What ``module``'s ``qualname`` is bound to: a module global, then attributes looked up through
    each class's MRO (what an instance finds), without running descriptors or ``__getattr__``."""
    first, _, rest = qualname.partition(".")
    value = attr(module, "__dict__", {}).get(first, MISSING)
    for part in rest.split(".") if rest else ():
        if not isinstance(value, type):
            return MISSING
        for klass in value.__mro__:
            if part in klass.__dict__:
                value = klass.__dict__[part]
                break
        else:
            return MISSING
    return value


def _functions(binding) -> tuple:
    """The plain functions a binding runs: itself, a static/class method's function, a property's
    accessors; () for anything else (a class, a C callable, an object)."""
    kind = type(binding)
    if kind is _FUNCTION:
        return (binding,)
    if kind is staticmethod or kind is classmethod:
        inner = binding.__func__
        return (inner,) if type(inner) is _FUNCTION else ()
    if kind is property:
        return tuple(f for f in (binding.fget, binding.fset, binding.fdel) if type(f) is _FUNCTION)
    return ()


def codes_of(binding) -> tuple:
    return tuple(f.__code__ for f in _functions(binding))


_FUNCTION = type(_functions)


def judge(locked: Locked, module) -> Found:
    return judge_binding(locked, resolve(module, locked.qualname))


def judge_binding(locked: Locked, live) -> Found:
    """The state of ``locked`` when its qualified name resolves to ``live`` (MISSING: to nothing)."""
    fixed = FIXED.get((locked.module, locked.qualname))
    if fixed is not None and live is fixed[0]:
        codes = codes_of(live)
        if len(codes) == len(fixed[1]) and all(a is b for a, b in zip(codes, fixed[1])):
            return Found(locked, IN_EFFECT)  # the fast path: the very objects the watch compiled
    if live is MISSING:
        return Found(locked, SHADOWED, f"nothing: {locked.module} no longer defines {locked.qualname}")
    live = _unwrap_checkpoint(live)
    if locked.kind == "class":
        return _judge_class(locked, live, fixed)
    if _runs_fixed(locked, live, fixed):
        return Found(locked, IN_EFFECT)
    if fixed is not None and live is fixed[0]:  # the same function object, other code: __code__ swapped
        return Found(locked, SHADOWED, "its __code__ replaced by " + _code_where(codes_of(live)))
    wrapper = _reaching(locked, live, fixed)
    if wrapper is not None:
        return Found(locked, WRAPPED, _where(live) + wrapper)
    return Found(locked, SHADOWED, _where(live))


def _unwrap_checkpoint(binding):
    """The guard's own checkpoint wrapper (points.py) is transparent: judge what it wraps."""
    funcs = _functions(binding)
    if funcs and attr(funcs[0], CHECKPOINT, False):
        return attr(funcs[0], "__wrapped__", binding)
    return binding


def _runs_fixed(locked: Locked, binding, fixed) -> bool:
    codes = codes_of(binding)
    if not codes:
        return False
    if fixed is not None and len(codes) == len(fixed[1]) and all(a is b for a, b in zip(codes, fixed[1])):
        return True
    expected = _expected_print(locked, fixed)
    if expected is None:
        return False
    from vllm_hotfix_guard.core.codeprint import combined, fingerprint

    return combined(fingerprint(c) for c in codes) == expected


def _expected_print(locked: Locked, fixed):
    """The fingerprint the fixed code has in this interpreter: of what the watch compiled, else the
    lock's (same interpreter), else compiled here from the verified file (once per module)."""
    from vllm_hotfix_guard.core.codeprint import combined, fingerprint

    if fixed is not None and fixed[1]:
        return combined(fingerprint(c) for c in fixed[1])
    if LOCK_PRINTS["usable"] and locked.fingerprint is not None:
        return locked.fingerprint
    return _compiled(locked).get(locked.qualname)


def _compiled(locked: Locked) -> dict:
    """qualname -> fingerprint of the locked file compiled here (its bytes read once, checked against the
    lock's sha256 first: a file that changed proves nothing)."""
    prints = PRINTS.get(locked.module)
    if prints is None:
        import hashlib

        from vllm_hotfix_guard.core.codeprint import code_objects, combined, fingerprint
        from vllm_hotfix_guard.inputs import TARGET_FILE_LIMIT
        from vllm_hotfix_guard.inputs import read_bounded

        prints = {}
        try:
            data = read_bounded(locked.path, cap=TARGET_FILE_LIMIT, what="locked file", follow_symlinks=False)
            if hashlib.sha256(data).hexdigest() == locked.sha256:
                codes = code_objects(compile(data, locked.path, "exec", dont_inherit=True))
                prints = {name: combined(fingerprint(c) for c in found) for name, found in codes.items()}
        except Exception:  # noqa: BLE001 - unreadable or not compiling here: nothing is proven
            prints = {}
        PRINTS[locked.module] = prints
    return prints


def _judge_class(locked: Locked, live, fixed) -> Found:
    if fixed is not None and live is fixed[0]:
        return Found(locked, IN_EFFECT)
    if isinstance(live, type) and fixed is not None and isinstance(fixed[0], type) and issubclass(live, fixed[0]):
        return Found(locked, WRAPPED, f"{_where(live)}, a subclass of the fixed class")
    if fixed is None and isinstance(live, type) and _class_code_matches(locked, live):
        return Found(locked, IN_EFFECT)
    return Found(locked, SHADOWED, _where(live))


def _class_code_matches(locked: Locked, live) -> bool:
    """A class the watch did not compile (imported before the guard): each function its body defines
    has the code the fixed source gives in this interpreter."""
    from vllm_hotfix_guard.core.codeprint import fingerprint

    prints = _compiled(locked)
    if locked.qualname not in prints:
        return False
    prefix = locked.qualname + "."
    for attr, value in vars(live).items():
        expected = prints.get(prefix + attr)
        codes = codes_of(value)
        if expected is not None and codes:
            from vllm_hotfix_guard.core.codeprint import combined

            if combined(fingerprint(c) for c in codes) != expected:
                return False
    return True


def _reaching(locked: Locked, binding, fixed, depth: int = 3) -> str | None:
    """How the fixed code is reachable from ``binding`` (a wrapper), or None: through ``__wrapped__``, a
    bound or static method's function, functools.partial, a closure cell, or a global its code reads."""
    seen = set()
    todo = [(binding, "")]
    for _ in range(depth):
        nxt = []
        for obj, how in todo:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            for child, step in _children(obj):
                if _runs_fixed(locked, child, fixed):
                    return f", which calls the fixed code through {how}{step}"
                nxt.append((child, f"{how}{step} -> "))
        todo = nxt
    return None


def _children(obj):
    try:
        space = attr(obj, "__dict__")
        wrapped = space.get("__wrapped__") if type(space) is dict else None
    except Exception:  # noqa: BLE001 - an object with a strange __dict__
        wrapped = None
    if wrapped is not None:
        yield wrapped, "__wrapped__"
    for func in _functions(obj) or ((obj,) if type(obj) is _FUNCTION else ()):
        for cell in func.__closure__ or ():
            try:
                yield cell.cell_contents, "a closure cell"
            except ValueError:  # an empty cell
                pass
        globals_ = func.__globals__
        for name in func.__code__.co_names:
            value = globals_.get(name, MISSING)
            if value is not MISSING and (type(value) is _FUNCTION or type(value) in (staticmethod, classmethod)):
                yield value, f"the global {name}"
    inner = attr(type(obj), "__func__", None) and attr(obj, "__func__", None)
    if inner is not None:
        yield inner, "__func__"
    func = attr(obj, "func", None) if type(obj).__name__ == "partial" else None
    if func is not None:
        yield func, "functools.partial"


def _where(binding) -> str:
    """The replacement's module, name and line: ``plugin.mod.fake (/x/plugin/mod.py:12)``. For a function
    from what it really is (the module whose globals it runs with, its code's name), not from the
    ``__module__`` / ``__qualname__`` a wrapper copies from what it wraps (functools.wraps)."""
    funcs = _functions(binding)
    target = funcs[0] if funcs else binding
    code = attr(target, "__code__", None)
    if type(target) is _FUNCTION:
        module = target.__globals__.get("__name__") or "?"
        return f"{module}.{_code_name(target)} ({code.co_filename}:{code.co_firstlineno})"
    module = attr(target, "__module__", None) or "?"
    name = attr(target, "__qualname__", None) or attr(target, "__name__", None) or type(target).__name__
    if code is None and isinstance(binding, type):
        line = attr(binding, "__firstlineno__", None)  # 3.13
        own = [f for f in vars(binding).values() if type(f) is _FUNCTION]
        code_line = f"{own[0].__code__.co_filename}:{line or own[0].__code__.co_firstlineno}" if own else None
        return f"{module}.{name}" + (f" ({code_line})" if code_line else "")
    if code is None:
        return f"{module}.{name} (a {type(binding).__name__})"
    return f"{module}.{name} ({code.co_filename}:{code.co_firstlineno})"


def _code_name(func) -> str:
    """A function's qualified name from its code (3.11+), else its ``__qualname__`` when that names its
    code (functools.wraps copies another function's names onto a wrapper; the code keeps its own)."""
    code = func.__code__
    qualname = getattr(code, "co_qualname", None)
    if qualname is not None:
        return qualname
    own = attr(func, "__qualname__", None)
    return own if isinstance(own, str) and own.rpartition(".")[2] == code.co_name else code.co_name


def _code_where(codes) -> str:
    if not codes:
        return "other code"
    code = codes[0]
    module = _module_of_file(code.co_filename)
    name = getattr(code, "co_qualname", code.co_name)
    return f"{module + '.' if module else ''}{name} ({code.co_filename}:{code.co_firstlineno})"


def _module_of_file(path: str) -> str:
    for name, module in list(sys.modules.items()):
        if attr(module, "__file__", None) == path:
            return name
    return ""


# -- stale aliases -------------------------------------------------------------------------------


def stale_aliases(loaded_modules) -> list:
    """Modules other than the fixed one that bind a fixed name's first part to an object of the fixed
    module that is not its live one, holding other code for the name: scanned in the plugins' packages,
    and everywhere once an earlier copy of that module is known."""
    everywhere = any(module in EARLIER for module, _, _ in loaded_modules)
    if not everywhere and not PLUGIN_PACKAGES:
        return []
    found = []
    holders = list(sys.modules.items()) if everywhere else plugin_modules()
    for module, live, names in loaded_modules:
        tops = {}
        for n in names:
            tops.setdefault(n.qualname.partition(".")[0], []).append(n)
        own = attr(live, "__dict__", {})
        for holder_name, holder in holders if module in EARLIER else plugin_modules():
            space = attr(holder, "__dict__", None)
            if holder is live or type(space) is not dict:
                continue
            for top, locked_names in tops.items():
                alias = space.get(top, MISSING)
                if alias is MISSING or alias is own.get(top, MISSING):
                    continue
                if attr(alias, "__module__", None) != module and not _same_origin(alias, module):
                    continue
                for n in locked_names:
                    rest = n.qualname[len(top) + 1:]
                    held = alias if not rest else resolve(Namespace({top: alias}), n.qualname)
                    if held is MISSING or _runs_fixed(n, held, FIXED.get((module, n.qualname))):
                        continue
                    found.append(Found(n, STALE_ALIAS, _where(held),
                                       f"{holder_name} ({_binding_line(holder, top)})"))
    return found


_PLUGIN_MODULES: dict = {}  # "count": len(sys.modules) when "modules" was listed


def plugin_modules() -> list:
    """(name, module) of every loaded module of the plugins' packages; listed again only when sys.modules
    has grown or shrunk since (one pass over it: the cost of the scan)."""
    if _PLUGIN_MODULES.get("count") != len(sys.modules) or _PLUGIN_MODULES.get("packages") != len(PLUGIN_PACKAGES):
        prefixes = tuple(p + "." for p in PLUGIN_PACKAGES)
        _PLUGIN_MODULES["modules"] = [(name, module) for name, module in list(sys.modules.items())
                                      if name in PLUGIN_PACKAGES or name.startswith(prefixes)]
        _PLUGIN_MODULES["count"], _PLUGIN_MODULES["packages"] = len(sys.modules), len(PLUGIN_PACKAGES)
    return _PLUGIN_MODULES["modules"]


class Namespace:
    """A stand-in module holding one binding, to resolve a qualified name from it (watch.py)."""

    __slots__ = ("__dict__",)

    def __init__(self, values: dict) -> None:
        self.__dict__ = values


def _same_origin(alias, module: str) -> bool:
    funcs = _functions(alias)
    return bool(funcs) and funcs[0].__module__ == module


def _binding_line(holder, name: str) -> str:
    """Where ``holder``'s source binds ``name`` (its first ``import`` line naming it), as FILE:LINE."""
    path = attr(holder, "__file__", None) or "?"
    try:
        with open(path, "rb") as fh:
            for number, line in enumerate(fh.read(4 << 20).splitlines(), 1):
                words = line.replace(b",", b" ").replace(b"(", b" ").replace(b")", b" ").split()
                if b"import" in words and name.encode() in words:
                    return f"{path}:{number}"
    except OSError:
        pass
    return path


