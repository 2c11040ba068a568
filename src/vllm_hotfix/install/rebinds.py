"""What vLLM's plugins and its platform's patches rebind, in the interpreter that runs vLLM.

Self-contained and stdlib only: `hotfix status --runtime` runs this file's source there (``PY -c
SOURCE``, the request literal as its argument, one answer literal after a marker), with that environment
(``VLLM_PLUGINS``, ``VLLM_TARGET_DEVICE``, the installed plugins) minus hotfix's own variables. It imports
vLLM's plugin module, notes what every loaded ``vllm`` module binds (module globals, and the attributes of
the classes each defines), calls vLLM's own ``load_general_plugins()``, then the current platform's
``pre_register_and_update()`` (vllm-ascend applies its platform patches there), and compares after each
step: a binding that now holds another function, class or method is a rebinding, named with the module
and line of what is bound now. In modules those steps imported, a function defined by a plugin's package
bound under a vLLM name counts too. Worker patches (applied in a worker's ``__init__``) need a worker and
are not run here: the guard reports them in the worker (its ``code after the worker's init`` line).

Then, when the request (a literal in ``argv[1]``) names hotfix's guard package, the guard's own verdicts
at that point (``vllm_hotfix_guard.plugin.judge_process``: the lock's or the records' files with their
bytecode, the code check of the fixed names, stale aliases in the plugins' modules): that package is
imported from the folder named, under its own name, before vLLM's plugins load (so a guard installed as a
plugin there is the same code, and does nothing: no HOTFIX_LOCK / HOTFIX_REQUIRE in this environment).
"""

import os
import sys

MARKER = "@@vllm-hotfix-rebinds@@"
GROUPS = ("vllm.general_plugins", "vllm.platform_plugins")


def _attr(obj, name, default=None):
    """getattr that no object can break (vLLM's PlaceholderModule raises ModuleNotFoundError for any name)."""
    try:
        return getattr(obj, name, default)
    except Exception:
        return default


def _is_vllm(name):
    return name == "vllm" or name.startswith("vllm.")


def _callables(value):
    kind = type(value)
    if kind in (staticmethod, classmethod):
        value = value.__func__
    elif kind is property:
        value = value.fget
    try:
        return value if isinstance(value, type) or callable(value) else None
    except Exception:
        return None


def snapshot():
    """(module, qualname) -> the object bound there, for every loaded vLLM module and each class it defines."""
    found = {}
    for name, module in list(sys.modules.items()):
        space = _attr(module, "__dict__") if _is_vllm(name) else None
        if type(space) is not dict:
            continue
        for key, value in list(space.items()):
            if _callables(value) is None or key.startswith("__"):
                continue
            found[(name, key)] = value
            if isinstance(value, type) and _attr(value, "__module__") == name:
                for attr, inner in list(vars(value).items()):
                    if _callables(inner) is not None and not (attr.startswith("__") and attr.endswith("__")):
                        found[(name, f"{key}.{attr}")] = inner
    return found


def where(value):
    """{module, qualname, file, line} of what a binding runs (a function by its globals and code)."""
    value = _callables(value)
    code = _attr(value, "__code__")
    space = _attr(value, "__globals__")
    if code is not None and type(space) is dict:
        return {"module": space.get("__name__"), "qualname": getattr(code, "co_qualname", code.co_name),
                "file": code.co_filename, "line": code.co_firstlineno}
    return {"module": _attr(value, "__module__"),
            "qualname": _attr(value, "__qualname__") or type(value).__name__, "file": None, "line": None}


def plugin_packages():
    """The top-level packages of the modules vLLM's plugin entry points name."""
    from importlib.metadata import entry_points

    found = set()
    for group in GROUPS:
        for ep in entry_points(group=group):
            top = ep.value.split(":")[0].strip().split(".")[0]
            if top and top not in ("vllm", "vllm_hotfix"):
                found.add(top)
    return found


def changes(before, after, phase, packages):
    modules = {module for module, _ in before}
    out = []
    for key, value in after.items():
        old = before.get(key)
        if key in before:
            if old is value:
                continue
            out.append((key, value, old, phase))
            continue
        if key[0] in modules:  # a module seen before: a new name there is an addition, not ours
            continue
        owner = where(value).get("module") or ""
        if owner.split(".")[0] in packages:  # a module imported meanwhile binding a plugin's function
            out.append((key, value, None, phase))
    return out


def load_guard(folder):
    """hotfix's guard package from ``folder`` (its vllm_hotfix_guard directory), as ``vllm_hotfix_guard``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("vllm_hotfix_guard", os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules["vllm_hotfix_guard"] = module
    spec.loader.exec_module(module)


def guard_verdicts(request):
    """The guard's verdicts here and now, and its fingerprint (plugin.judge_process)."""
    import vllm.plugins
    from vllm_hotfix_guard import plugin

    if request.get("state_dir"):
        os.environ["HOTFIX_STATE_DIR"] = request["state_dir"]  # the records `hotfix status` reads
    try:
        plugins = list(vllm.plugins.load_plugins_by_group(vllm.plugins.DEFAULT_PLUGINS_GROUP).values())
    except Exception:  # another vLLM: the entry points themselves
        from importlib.metadata import entry_points

        plugins = [ep.load() for ep in entry_points(group=GROUPS[0])]
    verdicts, fingerprint = plugin.judge_process(lock=request.get("lock"), require=tuple(request.get("require", ())),
                                                 names=request.get("names"), plugins=plugins)
    return [v.as_dict() for v in verdicts], fingerprint


def survey(request=None):
    """Run vLLM's plugin loading and the platform's pre_register_and_update here; the rebindings each did
    (and, asked for, the guard's verdicts after them)."""
    request = request or {}
    if request.get("guard"):
        load_guard(request["guard"])
    packages = plugin_packages()
    import vllm.plugins

    first = snapshot()
    vllm.plugins.load_general_plugins()
    second = snapshot()
    found = changes(first, second, "general plugins", packages)
    platform = None
    try:
        from vllm.platforms import current_platform

        platform = type(current_platform).__module__ + "." + type(current_platform).__qualname__
        current_platform.pre_register_and_update()
        third = snapshot()
        found += changes(second, third, "platform pre_register_and_update", packages)
    except Exception as exc:  # the platform's own failure is a fact to report, not ours
        platform = f"{platform or '?'} (pre_register_and_update failed: {type(exc).__name__}: {exc})"
    out = []
    for key, value, old, phase in found:
        out.append({"module": key[0], "name": key[1], "phase": phase, "now": where(value),
                    "was": where(old) if old is not None else None})
    answer = {"python": sys.executable, "plugins": os.environ.get("VLLM_PLUGINS"), "packages": sorted(packages),
              "platform": platform, "rebinds": out}
    if request.get("guard"):
        answer["verdicts"], answer["fingerprint"] = guard_verdicts(request)
    return answer


def _main():
    import ast

    try:
        answer = survey(ast.literal_eval(sys.argv[1]) if len(sys.argv) > 1 else None)
    except Exception as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.flush()
    sys.stdout.write("\n" + MARKER + repr(answer) + "\n")


if __name__ == "__main__":
    _main()
