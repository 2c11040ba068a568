"""What would keep vLLM from loading the guard at all (the guard cannot report that it never ran).

Stdlib only; used by `hotfix guard --check-env` and `hotfix verify --lock`.
"""

from __future__ import annotations

import os
import sys

PLUGIN_NAME = "vllm_hotfix_guard"
PLUGIN_GROUP = "vllm.general_plugins"


def environment_problems(environ=None) -> list[str]:
    """Why the guard would not run in a vLLM process started with this environment and interpreter:
    a ``VLLM_PLUGINS`` that leaves it out, or an entry point that is missing or fails to import. The
    guard cannot report these itself (it never runs), so `hotfix guard --check-env` and `hotfix verify
    --lock` do."""
    from importlib.metadata import entry_points

    environ = os.environ if environ is None else environ
    problems = []
    plugins = environ.get("VLLM_PLUGINS")
    if plugins is not None and PLUGIN_NAME not in plugins.split(","):  # vLLM's own test, spaces and all
        near = [p for p in plugins.split(",") if p.strip() == PLUGIN_NAME]
        why = f" (vLLM does not strip spaces: {near[0]!r} is not {PLUGIN_NAME!r})" if near else ""
        problems.append(f"VLLM_PLUGINS={plugins!r} leaves out {PLUGIN_NAME}{why}: vLLM will not load the guard; "
                        f"add {PLUGIN_NAME} to it (comma-separated, no spaces) or unset it")
    found = [ep for ep in entry_points(group=PLUGIN_GROUP) if ep.name == PLUGIN_NAME]
    if not found:
        problems.append(f"no {PLUGIN_GROUP} entry point {PLUGIN_NAME} in {sys.executable}: "
                        f"install vllm-hotfix into the interpreter that runs vLLM")
    else:
        try:
            found[0].load()
        except Exception as exc:  # noqa: BLE001 - exactly what vLLM's loader would hit
            problems.append(f"the guard fails to import ({found[0].value}): {type(exc).__name__}: {exc}; "
                            f"vLLM logs that and runs without it: reinstall vllm-hotfix")
    return problems
