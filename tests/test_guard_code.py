"""The guard's code check without vLLM (fast): each state, the watch each Python version offers, the
checkpoint after the plugins, strict stops. Every scenario runs in a fresh interpreter (the guard keeps
per-process state and puts a finder on sys.meta_path), on each supported Python that is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import realdata

SRC = str(Path(__file__).resolve().parents[1] / "src")

FIXED = textwrap.dedent('''\
    def f(x):
        return x + 1


    def g(x):
        return x * 2


    class C:
        def m(self):
            return 2

        @property
        def p(self):
            return 3
    ''')
PRISTINE = FIXED.replace("x + 1", "x + 0").replace("return 2", "return 0")

# Builds a lock check for fixedmod.py (names f, g, C.m, C.p) and starts the guard's code check as
# guard.py does; SCENARIO then runs; every code line the guard logs is collected.
PRELUDE = r'''
import functools, hashlib, io, json, logging, os, sys, types
sys.path.insert(0, os.environ["WHERE"])
from vllm_hotfix_guard import code as guard_code, imports as guard_imports, points as guard_points, watch as guard_watch
from vllm_hotfix_guard.verdicts import HotfixNotInEffect, Watched
from vllm_hotfix_guard.core import codeprint
from vllm_hotfix_guard.core.verdict import FileCheck
from vllm_hotfix_guard.txn.lockcode import LockedCode, LockedName
from vllm_hotfix_guard.txn.hotfix_lock import LockedFile, LockedHotfix
from vllm_hotfix_guard.txn.lock_check import HotfixCheck

lines = []
class Collect(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
if not os.environ.get("NO_COLLECT"):  # else the guard writes its lines to stderr itself
    logging.getLogger("vllm").addHandler(Collect())
logging.getLogger("vllm").setLevel(logging.INFO)
path = os.path.join(os.environ["WHERE"], "fixedmod.py")
data = open(path, "rb").read()
sha = hashlib.sha256(data).hexdigest()
kinds = [("f", "function"), ("g", "function"), ("C.m", "method"), ("C.p", "method")]
prints = codeprint.fingerprints(data, [n for n, _ in kinds])
code = LockedCode(sys.implementation.cache_tag, tuple(LockedName(n, k, prints[n]) for n, k in kinds))
check = HotfixCheck(LockedHotfix("hx", 1, "vllm", "vllm", "0.30.0", None,
                                 (LockedFile("fixedmod.py", sha, None, "hx/fixedmod.py", code),)),
                    "applied", "0.30.0", (FileCheck("fixedmod.py", "patched", sha, sha, None, path),))


def start():
    verdicts, proven = guard_points.start([check])
    verdicts += guard_imports.watch((Watched("fixedmod", "hx", path, sha),), proven)
    return verdicts


def states(point):
    guard_code.checkpoint(point)
    return {f.locked.qualname + ("@" + f.holder.split(" ")[0] if f.holder else ""): [f.state, f.culprit]
            for f in guard_code.judge_all()}


def report(**values):
    print("@@" + json.dumps(dict(values, lines=lines, mode=guard_watch.mode())))
'''

SCENARIOS = {
    "states": r'''
start()
import fixedmod
out = {"loaded": states("T0")}
fixedmod.C.m = lambda self: 9
out["class"] = states("T1")
fixedmod.C.m = fixedmod.C.__dict__["m"] if False else None
del fixedmod.C.m
exec(compile(open(path).read(), path, "exec"), {})  # compiled again elsewhere: not bound, changes nothing
def m(self):
    return 2
fixedmod.C.m = m
out["same code, other object"] = states("T2")
fixedmod.C.m = guard_code.codestate.FIXED[("fixedmod", "C.m")][0]
fixed_f = fixedmod.f
fixedmod.f = lambda x: x
out["module"] = states("T3")
fixedmod.f = functools.wraps(fixed_f)(lambda x: fixed_f(x))
out["wrapped"] = states("T4")
def closure(fixed):
    def call(x):
        return fixed(x)
    return call
fixedmod.f = closure(fixed_f)
out["closure"] = states("T5")
fixedmod.f = fixed_f
old = fixed_f.__code__
fixed_f.__code__ = (lambda x: x + 5).__code__
out["code swap"] = states("T6")
fixed_f.__code__ = old
fixedmod.g2 = None  # unrelated
out["unrelated"] = states("T7")
states("T8")  # nothing changed since T7: not said again
report(**out)
''',
    "watch": r'''
start()
import fixedmod
def rebind_module(): fixedmod.g = lambda x: 0
def rebind_dict(): fixedmod.__dict__["g"] = lambda x: 0
def rebind_class(): fixedmod.C.m = lambda self: 0
seen = {}
for rebind in (rebind_module, rebind_dict, rebind_class):
    before = len(lines)
    g, m = fixedmod.__dict__["g"], fixedmod.C.__dict__["m"]
    rebind()
    seen[rebind.__name__] = [l for l in lines[before:] if " rebound " in l]
    fixedmod.__dict__["g"] = g
    type.__setattr__(fixedmod.C, "m", m)
report(seen=seen)
''',
    "strict watch": r'''
os.environ["HOTFIX_STRICT"] = "1"
start()
import fixedmod
try:
    fixedmod.g = lambda x: 0
    report(refused=False, g=fixedmod.g(1))
except HotfixNotInEffect as exc:
    report(refused=True, message=str(exc), g=fixedmod.g(1))
''',
    "strict checkpoint": r'''
os.environ["HOTFIX_STRICT"] = "1"
start()
import fixedmod
fixedmod.C.m = lambda self: 0
try:
    guard_code.checkpoint("T")
    report(stopped=False)
except HotfixNotInEffect as exc:
    report(stopped=True, message=str(exc))
''',
    "early import": r'''
import fixedmod                       # before the guard (a plugin imported it): proven by fingerprints
fixedmod.C.m = lambda self: 0         # ... and rebound before the guard ran
verdicts = start()
report(verdicts=[[v.hotfix_id, v.source, v.detail] for v in verdicts], states=states("T"))
''',
    "stale alias": r'''
# a module that took `from fixedmod import f` from a copy before the fix, then the fixed one imported
old = types.ModuleType("fixedmod")
exec(compile(open(os.environ["PRISTINE"]).read(), os.environ["PRISTINE"], "exec"), old.__dict__)
sys.modules["fixedmod"] = old
holder = types.ModuleType("holder_of_f")
holder.__file__ = os.path.join(os.environ["WHERE"], "holder_of_f.py")
open(holder.__file__, "w").write("import os\nfrom fixedmod import f, C\n")
exec("from fixedmod import f, C", holder.__dict__)
sys.modules["holder_of_f"] = holder
start()                               # sees the earlier copy
del sys.modules["fixedmod"]
import fixedmod                       # the fixed module, through the import watch
report(states=states("T"))
''',
    "plugins loop": r'''
# vLLM's loop: for func in plugins.values(): func() -- the guard, then a plugin that rebinds
order = []
def guard_plugin():
    start()
    order.append("guard")
def later_plugin():
    import fixedmod
    fixedmod.C.m = lambda self: 0
    order.append("later")
space = {"__name__": "vllm.plugins"}
exec("def load_general_plugins(plugins):\n    for func in plugins.values():\n        func()\n", space)
space["load_general_plugins"]({"vllm_hotfix_guard": guard_plugin, "later": later_plugin})
report(order=order)
''',
    "compile cache": r'''
# vLLM's VllmBackend.__call__, reduced to what the guard reads: its locals self (prefix, vllm_config) and
# code_hash when it clears compilation_config.traced_files (tests/test_guard_runtime_vllm.py runs vLLM's own)
import pickle
from vllm_hotfix_guard import compiled as guard_compile
start()
class NS:
    def __init__(self, **kw):
        self.__dict__.update(kw)
pinned = os.path.join(os.environ["WHERE"], "pinned")
os.makedirs(os.path.join(pinned, "rank_0_0", "backbone"))
with open(os.path.join(pinned, "rank_0_0", "backbone", "cache_key_factors.json"), "w") as fh:
    json.dump({"code_hash": "b" * 64}, fh)
results = {}
for name, cache_dir, files in (("keyed", "", {path}), ("pinned", pinned, {path}), ("untraced", "", {"/x/other.py"})):
    config = NS(compilation_config=NS(traced_files=set(files), cache_dir=cache_dir),
                parallel_config=NS(rank=0, data_parallel_index=0))
    results[name + " watched"] = guard_compile.watch(config)
    def __call__(self, code_hash):
        self.vllm_config.compilation_config.traced_files.clear()
    try:
        __call__(NS(prefix="backbone", vllm_config=config), "c" * 64)
        results[name] = "compiled"
    except HotfixNotInEffect as exc:
        results[name] = "stopped: " + str(exc)
    results[name + " pickled"] = type(pickle.loads(pickle.dumps(config.compilation_config.traced_files))).__name__
report(**results)
''',
}


def run(scenario: str, python: str, tmp_path: Path, **env_extra) -> dict:
    where = tmp_path / scenario.replace(" ", "_")
    where.mkdir()
    (where / "fixedmod.py").write_text(FIXED)
    (where / "pristine.py").write_text(PRISTINE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOTFIX_", "VLLM_"))}
    env.update(PYTHONPATH=SRC, WHERE=str(where), PRISTINE=str(where / "pristine.py"), PYTHONDONTWRITEBYTECODE="1",
               **env_extra)
    done = subprocess.run([python, "-c", PRELUDE + SCENARIOS[scenario]], capture_output=True, text=True, env=env,
                          cwd=where, timeout=120)
    found = [line[2:] for line in done.stdout.splitlines() if line.startswith("@@")]
    assert done.returncode == 0 and found, done.stdout + done.stderr
    return json.loads(found[-1])


PYTHONS = ["3.10", "3.11", "3.12", "3.13"]


def python_for(version: str) -> str:
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    python = realdata.find_python(version)
    if python is None:
        pytest.skip(f"python{version} is not installed here")
    return python


def test_each_state_of_a_fixed_name_at_a_checkpoint(tmp_path):
    out = run("states", sys.executable, tmp_path)
    assert {k: v[0] for k, v in out["loaded"].items()} == {"f": "in effect", "g": "in effect", "C.m": "in effect",
                                                            "C.p": "in effect"}
    state, culprit = out["class"]["C.m"]
    assert state == "shadowed" and culprit.startswith("__main__.<lambda> (<string>:")
    assert out["same code, other object"]["C.m"][0] == "in effect"  # the fixed code, compiled again: it runs
    assert out["module"]["f"][0] == "shadowed"
    assert out["wrapped"]["f"] == ["wrapped", out["wrapped"]["f"][1]] and "through __wrapped__" in out["wrapped"]["f"][1]
    assert out["closure"]["f"][0] == "wrapped" and "a closure cell" in out["closure"]["f"][1]
    state, culprit = out["code swap"]["f"]
    assert state == "shadowed" and culprit.startswith("its __code__ replaced by <lambda> (<string>:")
    assert {k: v[0] for k, v in out["unrelated"].items()} == {k: "in effect" for k in ("f", "g", "C.m", "C.p")}
    code_lines = [line for line in out["lines"] if ": code " in line]
    assert any(": code T1: hx fixedmod:f in effect; " in line and "hx fixedmod:C.m SHADOWED by __main__.<lambda>" in line
               for line in code_lines), code_lines
    assert any(": code T7:" in line for line in code_lines) and not any(": code T8:" in line for line in code_lines)


@pytest.mark.parametrize("version", PYTHONS)
def test_the_watch_each_python_version_offers(version, tmp_path):
    """3.12+: dict watchers see every write, with the caller; 3.10/3.11: the module's __setattr__ sees
    ``m.f = g`` only (a __dict__ write and a class attribute wait for the next checkpoint)."""
    out = run("watch", python_for(version), tmp_path)
    seen = out["seen"]
    assert len(seen["rebind_module"]) == 1 and "code when __main__ (<string>:" in seen["rebind_module"][0]
    assert "rebound g: hx fixedmod:g SHADOWED by __main__.rebind_module.<locals>.<lambda>" in seen["rebind_module"][0]
    if version in ("3.12", "3.13"):
        assert out["mode"] == "dict watchers"
        assert len(seen["rebind_dict"]) == 1 and len(seen["rebind_class"]) == 1
        assert "rebound m: hx fixedmod:C.m SHADOWED" in seen["rebind_class"][0]
    else:
        assert out["mode"] == "module __setattr__"
        assert seen["rebind_dict"] == [] and seen["rebind_class"] == []


@pytest.mark.parametrize("version", PYTHONS)
def test_strict_refuses_a_rebinding_as_it_happens_or_ends_the_process(version, tmp_path):
    python = python_for(version)
    if version in ("3.12", "3.13"):  # a dict watcher cannot refuse the write: the process ends, after its line
        where = tmp_path / "exit"
        where.mkdir()
        (where / "fixedmod.py").write_text(FIXED)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HOTFIX_", "VLLM_"))}
        env.update(PYTHONPATH=SRC, WHERE=str(where), PYTHONDONTWRITEBYTECODE="1", NO_COLLECT="1")
        done = subprocess.run([python, "-c", PRELUDE + SCENARIOS["strict watch"]], capture_output=True, text=True,
                              env=env, cwd=where, timeout=120)
        assert done.returncode == 1 and "@@" not in done.stdout
        assert "refusing to serve (HOTFIX_STRICT=1" in done.stderr and "rebound g" in done.stderr
        return
    out = run("strict watch", python, tmp_path)
    assert out["refused"] and out["g"] == 2  # the fixed g is still bound
    assert "when __main__ (<string>:" in out["message"] and "hx fixedmod:g SHADOWED" in out["message"]


def test_strict_stops_at_a_checkpoint(tmp_path):
    out = run("strict checkpoint", sys.executable, tmp_path)
    assert out["stopped"] and "fixed function(s) not the one running" in out["message"]
    assert "hx fixedmod:C.m SHADOWED by __main__.<lambda>" in out["message"]


def test_a_module_imported_before_the_guard_is_proven_by_the_lock_fingerprints(tmp_path):
    out = run("early import", sys.executable, tmp_path)
    assert [v[:2] for v in out["verdicts"]] == [["hx", "code"], ["hx", "import"]]
    assert out["verdicts"][0][2].startswith("shadowed: C.m by __main__.<lambda> (<string>:")
    assert {k: v[0] for k, v in out["states"].items()} == {"f": "in effect", "g": "in effect", "C.m": "shadowed",
                                                           "C.p": "in effect"}


def test_an_alias_taken_from_a_copy_before_the_fix_is_a_stale_alias(tmp_path):
    out = run("stale alias", sys.executable, tmp_path)
    states = out["states"]
    assert states["f"][0] == "in effect" and states["C.m"][0] == "in effect"
    assert states["f@holder_of_f"][0] == "stale-alias" and states["C.m@holder_of_f"][0] == "stale-alias"
    assert states["f@holder_of_f"][1].endswith("pristine.py:1)")
    line = next(line for line in out["lines"] if ": code T:" in line)
    assert "hx fixedmod:f STALE-ALIAS: holder_of_f (" in line and "holder_of_f.py:2) holds " in line
    assert "g@holder_of_f" not in states  # it never took g


@pytest.mark.parametrize("version", PYTHONS)
def test_the_check_runs_after_the_last_plugin_of_vllms_loop(version, tmp_path):
    """The loop's dict gets its last value replaced (no key added) while vLLM iterates it: on every version."""
    out = run("plugins loop", python_for(version), tmp_path)
    assert out["order"] == ["guard", "later"]
    after = [line for line in out["lines"] if ": code after load_general_plugins():" in line]
    assert len(after) == 1 and "hx fixedmod:C.m SHADOWED by __main__.later_plugin.<locals>.<lambda>" in after[0]


def test_the_compile_cache_check_when_the_backend_decides_it(tmp_path):
    out = run("compile cache", sys.executable, tmp_path, HOTFIX_STRICT="1")
    assert out["keyed watched"] and out["pinned watched"] and out["untraced watched"]
    assert out["keyed"] == "compiled" and out["untraced"] == "compiled"
    assert out["pinned"].startswith("stopped: vllm-hotfix: the pinned compilation_config.cache_dir ")
    assert "holds graphs compiled from other code (code hash bbbbbbbbbbbb in " in out["pinned"]
    assert {out[k] for k in ("keyed pickled", "pinned pickled", "untraced pickled")} == {"set"}
    lines = [line for line in out["lines"] if ": compile cache" in line]
    assert "compile cache (backbone): hx " in lines[0] and "traced; the cache directory is keyed by the traced code " \
        "(code hash cccccccccccc)" in lines[0]
    assert "no locked file is traced: the fixed code runs in Python" in lines[2]
