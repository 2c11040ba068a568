"""What would keep vLLM from loading the guard at all (the guard cannot report that it never ran).

Stdlib only; used by `hotfix guard --check-env` and `hotfix verify --lock`.
"""

from __future__ import annotations

import importlib
import os
import sys

from vllm_hotfix.install.probe import metadata_dirs, read_bytes

PLUGIN_NAME = "vllm_hotfix_guard"
PLUGIN_GROUP = "vllm.general_plugins"


def guard_entry_points(path_entries=None) -> list[str]:
    """The values of the ``vllm.general_plugins`` entry points named vllm_hotfix_guard on sys.path, first
    first (what ``importlib.metadata.entry_points(group=...)`` gives vLLM's loader), read straight from
    each entry_points.txt that mentions the name: importing importlib.metadata and scanning every
    distribution costs ~30 ms in a vLLM venv, paid at every container start."""
    found = []
    for info_dir in metadata_dirs(sys.path if path_entries is None else path_entries):
        data = read_bytes(os.path.join(info_dir, "entry_points.txt"))
        if data is None or PLUGIN_NAME.encode() not in data:
            continue
        section = None
        for line in data.decode("utf-8", "replace").splitlines():
            line = line.strip()
            if line.startswith("[") and line.endswith("]"):
                section = line.strip("[]")  # importlib.metadata's reading: spaces inside are kept
            elif section == PLUGIN_GROUP and "=" in line:
                name, _, value = line.partition("=")
                if name.strip() == PLUGIN_NAME:
                    found.append(value.strip())
    return found


def _load(value: str):
    module, _, attr = value.partition(":")
    obj = importlib.import_module(module.strip())
    for part in filter(None, attr.strip().split(".")):
        obj = getattr(obj, part)
    return obj


def environment_problems(environ=None, entry_points=True) -> list[str]:
    """Why the guard would not run in a vLLM process started with this environment and interpreter:
    a ``VLLM_PLUGINS`` that leaves it out, or an entry point that is missing or fails to import. The
    guard cannot report these itself (it never runs), so `hotfix guard --check-env` and `hotfix verify
    --lock` do. ENTRY_POINTS=False checks VLLM_PLUGINS only (the entry points of *this* interpreter say
    nothing about another one's)."""
    environ = os.environ if environ is None else environ
    problems = []
    plugins = environ.get("VLLM_PLUGINS")
    if plugins is not None and PLUGIN_NAME not in plugins.split(","):  # vLLM's own test, spaces and all
        near = [p for p in plugins.split(",") if p.strip() == PLUGIN_NAME]
        why = f" (vLLM does not strip spaces: {near[0]!r} is not {PLUGIN_NAME!r})" if near else ""
        problems.append(f"VLLM_PLUGINS={plugins!r} leaves out {PLUGIN_NAME}{why}: vLLM will not load the guard; "
                        f"add {PLUGIN_NAME} to it (comma-separated, no spaces) or unset it")
    if not entry_points:
        return problems
    found = guard_entry_points()
    if not found:
        problems.append(f"no {PLUGIN_GROUP} entry point {PLUGIN_NAME} in {sys.executable}: "
                        f"install vllm-hotfix into the interpreter that runs vLLM")
    else:
        try:
            _load(found[0])
        except Exception as exc:  # noqa: BLE001 - exactly what vLLM's loader would hit
            problems.append(f"the guard fails to import ({found[0]}): {type(exc).__name__}: {exc}; "
                            f"vLLM logs that and runs without it: reinstall vllm-hotfix")
    return problems
