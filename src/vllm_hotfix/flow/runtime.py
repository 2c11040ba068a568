"""`hotfix status --runtime`: every rebinding of a vLLM function by a plugin or a platform patch in the
interpreter that runs vLLM, the ones that touch a hotfix, and the guard's own verdicts there after them.

install/rebinds.py runs there (vLLM's own ``load_general_plugins()`` and the platform's
``pre_register_and_update()``, with that environment minus HOTFIX_*: the guard stays out of it). The
fixed names are the lock's (``--lock``: txn/hotfix_lock.py) or, for a recorded target, those flow/codenames.py
derives from the record: the same rule `hotfix export` writes into a lock. A rebinding touches a hotfix
when it binds a fixed name (or the class or module global above it), or replaces what was bound to it.

The verdicts are the guard's (vllm_hotfix_guard.plugin.judge_process, this install's guard package run
there): the lock's -- or the records' (HOTFIX_REQUIRE's rule, with the state directory `status` reads) --
files and their bytecode (a stale ``.pyc`` Python would load), and the code check of the fixed names
(shadowed, a stale alias a plugin holds); a record's names reach it as a lock of names only
(``names_lock``), since a record has no lock. One answer: the guard's checks, called, not re-implemented.
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
    verdicts: tuple = ()  # the guard's verdicts there ({hotfix_id, in_effect, detail, remedy, source})
    fingerprint: str | None = None  # the guard's fingerprint of what it checked

    @property
    def failing(self) -> tuple:
        return tuple(v for v in self.verdicts if not v["in_effect"])

    def to_json(self) -> dict:
        return {"python": self.python, "vllm_plugins": self.plugins, "plugin_packages": list(self.packages),
                "platform": self.platform, "rebinds": [r.to_json() for r in self.rebinds],
                "fixed_names": {h: [f"{m}:{q}" for m, q in names] for h, names in self.names.items()},
                "verdicts": list(self.verdicts), "fingerprint": self.fingerprint}


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


def names_lock(target, state, ids) -> bytes | None:
    """A lock of the recorded hotfixes ``ids`` holding only what the guard's code check reads: each file's
    sha256 at its step of the series and the names its hunks touch (flow/codenames, `hotfix export`'s rule,
    fingerprints left to the guard: it compiles the verified file); None when no name is recorded."""
    from vllm_hotfix.flow.codenames import recorded_names
    from vllm_hotfix_guard.txn import hotfix_lock
    from vllm_hotfix_guard.txn.lockcode import LockedCode, LockedName

    found = recorded_names(Path(target.root), ids)
    if not found:
        return None
    hotfixes = []
    for hotfix_id in ids:
        recorded = state.hotfixes[hotfix_id]
        files = tuple(hotfix_lock.LockedFile(
            f.path, f.after_sha256, f.before_sha256, f"{hotfix_id}/{f.path}",
            LockedCode("record", tuple(LockedName(n, k, None) for n, k in found[hotfix_id][f.path]))
            if f.path in found.get(hotfix_id, {}) else None) for f in recorded.files if f.after_sha256)
        hotfixes.append(hotfix_lock.LockedHotfix(hotfix_id, recorded.version, target.distribution or "vllm",
                                                 recorded.package or target.package, target.version or "0", None, files))
    return hotfix_lock.dump_lock(hotfix_lock.Lock(str(target.root), tuple(hotfixes), "hotfix status --runtime"))


def survey(python: str, names: dict, *, lock: Path | None = None, require: tuple = (),
           names_file: Path | None = None) -> Runtime:
    """install/rebinds.py in ``python``, and the guard's verdicts there on ``lock`` or the records ``require``
    names (``names_file``: their names_lock)."""
    import vllm_hotfix_guard
    from vllm_hotfix_guard.paths import state_dir

    request = {"guard": str(Path(vllm_hotfix_guard.__file__).parent), "lock": str(lock) if lock else None,
               "require": list(require), "names": str(names_file) if names_file else None,
               "state_dir": str(state_dir())}
    answer = _run(python, request)
    rebinds = []
    for r in answer["rebinds"]:
        touches = tuple(h for h, fixed in names.items() if any(_touches(r, module, qualname) for module, qualname in fixed))
        rebinds.append(Rebind(r["module"], r["name"], r["phase"], r["now"], r["was"], touches))
    return Runtime(answer["python"], answer["plugins"], tuple(answer["packages"]), answer["platform"],
                   tuple(rebinds), names, tuple(answer.get("verdicts", ())), answer.get("fingerprint"))


def _touches(r: dict, module: str, qualname: str) -> bool:
    if r["module"] == module and (r["name"] == qualname or qualname.startswith(r["name"] + ".")):
        return True
    was = r.get("was") or {}
    return was.get("module") == module and was.get("qualname") == qualname  # an alias of it replaced elsewhere


def _run(python: str, request: dict) -> dict:
    import ast
    import subprocess

    from vllm_hotfix.install import rebinds

    source = Path(rebinds.__file__).read_text(encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTFIX_")}
    try:
        done = subprocess.run([python, "-c", source, repr(request)], capture_output=True, text=True, env=env, timeout=TIMEOUT,
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
