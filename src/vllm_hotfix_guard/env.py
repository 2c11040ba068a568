"""What would keep vLLM from loading the guard at all (the guard cannot report that it never ran).

Stdlib only; used by `hotfix guard --check-env` and `hotfix verify --lock`. The entry points and whether
the first one loads are facts of the interpreter that runs vLLM: the probe gathers them there
(install/probe.guard_facts, ``Resolver(guard=...)``), never in the interpreter running hotfix.
"""

from __future__ import annotations

import os

from vllm_hotfix_guard.install.probe import GUARD_GROUP as PLUGIN_GROUP, GUARD_PLUGIN as PLUGIN_NAME
from vllm_hotfix_guard.install.probe import guard_entry_points  # noqa: F401 - the one reader of entry_points.txt
from vllm_hotfix_guard.output import quoted
from vllm_hotfix_guard.settings import REQUIRE_ENV, required_ids


def environment_problems(environ=None, *, entry_points=None, load_error: str | None = None,
                         python: str | None = None) -> list[str]:
    """Why the guard would not run in a vLLM process started with this environment by ``python``: a
    ``VLLM_PLUGINS`` that leaves it out, or an entry point that is missing or fails to import
    (``entry_points`` / ``load_error``: the probe's facts of that interpreter, ``Target.guard``;
    ``entry_points=None``: not known, VLLM_PLUGINS only)."""
    environ = os.environ if environ is None else environ
    problems = []
    plugins = environ.get("VLLM_PLUGINS")
    if plugins is not None and PLUGIN_NAME not in plugins.split(","):  # vLLM's own test, spaces and all
        near = [p for p in plugins.split(",") if p.strip() == PLUGIN_NAME]
        why = f" (vLLM does not strip spaces: {near[0]!r} is not {PLUGIN_NAME!r})" if near else ""
        problems.append(f"VLLM_PLUGINS={plugins!r} leaves out {PLUGIN_NAME}{why}: vLLM will not load the guard; "
                        f"add {PLUGIN_NAME} to it (comma-separated, no spaces) or unset it")
    require = environ.get(REQUIRE_ENV)
    if require is not None:
        from vllm_hotfix_guard.core.docfields import is_record_id

        bad = [i for i in required_ids(require) or ("",) if not is_record_id(i)]
        if bad:
            problems.append(f"{REQUIRE_ENV}={quoted(require)} names {'no hotfix id' if bad == [''] else 'an invalid id ' + quoted(bad[0])}: "
                            f"the guard would check nothing and say so in every process; list the hotfix ids "
                            f"(comma-separated) or unset it")
    if entry_points is None:
        return problems
    found = list(entry_points)
    if not found:
        problems.append(f"no {PLUGIN_GROUP} entry point {PLUGIN_NAME} in {python}: "
                        f"give that interpreter the guard: mount the guard `hotfix export` writes (EXPORT/guard/site-packages, "
                        f"as `hotfix compose` and `hotfix k8s` do) into its site-packages, or install the guard's wheel "
                        f"(`hotfix guard --build-dist DIR`, then `{python} -m pip install --no-index --no-deps "
                        f"DIR/vllm_hotfix_guard-*.whl`)")
    elif load_error is not None:
        problems.append(f"the guard fails to import in {python} ({found[0]}): {load_error}; "
                        f"vLLM logs that and runs without it: mount or install the guard there again "
                        f"(`hotfix export` writes it; `hotfix guard --build-dist DIR` builds its wheel)")
    return problems
