"""`python -m vllm_hotfix_guard verify`: `hotfix verify --lock` inside the container, with nothing installed but
the guard. The lock comes from --lock or HOTFIX_LOCK; the install is the one *this* interpreter imports,
found as the guard finds it (vllm_hotfix_guard/installed.py); the verdicts, words, fingerprint and exit codes are
vllm_hotfix_guard/lockreport.py's, the very code `hotfix verify --lock` runs on the host. Stdlib only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional


def verify(lock: Optional[str], *, as_json: bool = False) -> int:
    from vllm_hotfix_guard.errors import UsageError
    from vllm_hotfix_guard import lockreport
    from vllm_hotfix_guard.settings import LOCK_ENV

    lock = lock if lock is not None else os.environ.get(LOCK_ENV, "").strip() or None
    if not lock:
        raise UsageError(f"no lock to verify: give --lock FILE or set {LOCK_ENV}",
                         hint=f"the pod / service of `hotfix k8s` / `hotfix compose` sets {LOCK_ENV}")
    checker = lockreport.Checker(resolve=_resolve, bytecode=_bytecode, option=_option, mount=_mounts,
                                 interpreter_note=_interpreter_note, guard_environment=_guard_environment)
    return lockreport.verify_lock(Path(lock), checker, as_json=as_json)


def _resolve(package: str):
    from vllm_hotfix_guard.installed import installed

    return installed(package)


def _bytecode(sources: list[str]) -> dict:
    from vllm_hotfix_guard.install import bytecode

    return bytecode.stale_by_source(sources)  # this interpreter's cache tag and hash-check mode


def _option() -> str:
    import shlex

    return " ".join(shlex.quote(w) for w in ("--python", sys.executable))


def _mounts():
    from vllm_hotfix_guard.install.mounts import mount_table, mounted_files

    table = mount_table()

    def mount(package: str, path: str) -> Optional[dict]:
        found = _resolve(package)
        if found is None:
            return None
        hit = mounted_files(Path(found.package_dir).parent, [path], table).get(path)
        return hit.to_json() if hit is not None else None

    return mount


def _interpreter_note(hotfix, code) -> str:
    from vllm_hotfix_guard.lockreport import interpreter_note

    return interpreter_note("%d.%d.%d" % sys.version_info[:3], code)


def _guard_environment(as_json: bool) -> bool:
    """What `verify --lock` says about the guard, of this interpreter: its entry points on sys.path, the
    first one loaded here (it is the guard's own code: cheap in this process)."""
    from vllm_hotfix_guard.env import environment_problems
    from vllm_hotfix_guard.lockreport import guard_lines, guard_wanted
    from vllm_hotfix_guard.install.probe import guard_facts

    facts = guard_facts(list(sys.path), load=True)
    problems = environment_problems(entry_points=facts["entry_points"], load_error=facts["load_error"],
                                    python=sys.executable)
    return guard_lines(problems, wanted=guard_wanted(), as_json=as_json)
