"""`hotfix status --runtime`: every rebinding of a vLLM function by a plugin or a platform patch in the
interpreter that runs vLLM, and the ones that touch a hotfix.

install/rebinds.py runs there (vLLM's own ``load_general_plugins()`` and the platform's
``pre_register_and_update()``, with that environment minus HOTFIX_*: the guard stays out of it). The
fixed names are the lock's (``--lock``: txn/hotfix_lock.py) or, for a recorded target, those flow/codenames.py
derives from the record: the same rule `hotfix export` writes into a lock. A rebinding touches a hotfix
when it binds a fixed name (or the class or module global above it), or replaces what was bound to it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from vllm_hotfix_guard.errors import Refused

TIMEOUT = 900.0  # importing vLLM with torch and its plugins: minutes on a busy machine


@dataclass(frozen=True)
class Rebind:
    """One vLLM binding that a plugin or platform patch changed, and the hotfixes it touches."""

    module: str
    name: str            # qualified name in the module: "Cls.meth"
    phase: str           # "general plugins" | "platform pre_register_and_update"
    now: dict            # {module, qualname, file, line} of what is bound now
    was: dict | None
    touches: tuple[str, ...] = ()  # ids of the hotfixes whose fixed names it touches

    def to_json(self) -> dict:
        return {"module": self.module, "name": self.name, "phase": self.phase, "now": self.now, "was": self.was,
                "touches": list(self.touches)}


@dataclass(frozen=True)
class Runtime:
    """What install/rebinds.py found in one interpreter: its plugins, platform and rebindings."""

    python: str
    plugins: str | None  # VLLM_PLUGINS as set (None: every installed plugin loads)
    packages: tuple[str, ...]
    platform: str | None
    rebinds: tuple[Rebind, ...]
    names: dict = field(default_factory=dict)  # hotfix id -> ((module, qualname), ...): what was matched

    def to_json(self) -> dict:
        return {"python": self.python, "vllm_plugins": self.plugins, "plugin_packages": list(self.packages),
                "platform": self.platform, "rebinds": [r.to_json() for r in self.rebinds],
                "fixed_names": {h: [f"{m}:{q}" for m, q in names] for h, names in self.names.items()}}


def fixed_names_of_lock(lock) -> dict:
    """hotfix id -> ((module, qualname), ...) of a txn/hotfix_lock.Lock's code names."""
    from vllm_hotfix_guard.core.codeprint import module_name

    return {h.id: tuple((module_name(f.path), n.name) for f in h.files if f.code is not None for n in f.code.names)
            for h in lock.hotfixes}


def fixed_names_of_record(root: Path, ids) -> dict:
    from vllm_hotfix_guard.core.codeprint import module_name
    from vllm_hotfix.flow.codenames import recorded_names

    return {hotfix_id: tuple((module_name(path), name) for path, names in paths.items() for name, _ in names)
            for hotfix_id, paths in recorded_names(root, ids).items()}


def survey(python: str, names: dict) -> Runtime:
    answer = _run(python)
    rebinds = []
    for r in answer["rebinds"]:
        touches = tuple(h for h, fixed in names.items() if any(_touches(r, module, qualname) for module, qualname in fixed))
        rebinds.append(Rebind(r["module"], r["name"], r["phase"], r["now"], r["was"], touches))
    return Runtime(answer["python"], answer["plugins"], tuple(answer["packages"]), answer["platform"],
                   tuple(rebinds), names)


def _touches(r: dict, module: str, qualname: str) -> bool:
    if r["module"] == module and (r["name"] == qualname or qualname.startswith(r["name"] + ".")):
        return True
    was = r.get("was") or {}
    return was.get("module") == module and was.get("qualname") == qualname  # an alias of it replaced elsewhere


def _run(python: str) -> dict:
    import ast
    import subprocess

    from vllm_hotfix.install import rebinds

    source = Path(rebinds.__file__).read_text(encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTFIX_")}
    try:
        done = subprocess.run([python, "-c", source], capture_output=True, text=True, env=env, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise Refused(f"--python {python}: loading vLLM's plugins took over {TIMEOUT:.0f}s") from None
    except OSError as exc:
        raise Refused(f"--python {python}: cannot be started ({exc.strerror or exc})") from None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(rebinds.MARKER):
            try:
                answer = ast.literal_eval(line[len(rebinds.MARKER):])
            except (ValueError, SyntaxError):
                break
            if isinstance(answer, dict) and "error" in answer:
                raise Refused(f"--python {python}: loading vLLM's plugins failed: {answer['error']}",
                              hint="run `vllm --version` with that interpreter to see the failure")
            if isinstance(answer, dict) and isinstance(answer.get("rebinds"), list):
                return answer
            break
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    raise Refused(f"--python {python}: could not load vLLM's plugins (exit {done.returncode}): {last}",
                  hint="it must be the interpreter that runs vLLM, with vLLM installed")
