"""``benchmarks/guard.py --part phases`` (issue 43): where the guard's per-process time goes, as k8s --trust deploys
it (HOTFIX_LOCK, HOTFIX_STRICT, HOTFIX_READY_DIR, HOTFIX_TRUST with its verdict cached by an earlier process,
HOTFIX_EXPECT_FINGERPRINT: benchmarks/guard_ready.py's arm), under the real vLLM 0.30.0 loader.

Each round is a fresh process that runs vLLM's ``load_general_plugins()`` with the guard's ``register()`` held
back, then calls it with the import system instrumented: per guard module the path finder's search, the read
and unmarshal of its bytecode (``get_code``), and the first run of its body (exclusive of the modules it
imports); the rest of ``register()`` is the check itself (the lock, the trust cache, finding the install, the
hash, the import watch, the readiness record, the log line). Printed: medians of each phase, the modules with
the largest bodies and bytecode, and -- from one more process that records every function the hot path calls
-- the bytecode of each hot module that the hot path never runs (what splitting it would save). The
instrumentation adds its own cost: the phases are shares, the total is ``--part ready``'s to quote.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

PHASES = r'''
import json, sys, time
import vllm.plugins
from vllm.plugins import load_general_plugins

held = {}
real_group = vllm.plugins.load_plugins_by_group


def group(group):
    plugins = real_group(group)
    held["register"] = plugins.pop("vllm_hotfix_guard", None)
    return plugins


vllm.plugins.load_plugins_by_group = group
load_general_plugins()
import importlib._bootstrap_external as external

seen, stack = {}, []
find_spec = external.PathFinder.find_spec.__func__
get_code = external.SourceLoader.get_code
exec_module = external._LoaderBasics.exec_module


def timed_find(cls, name, path=None, target=None):
    start = time.perf_counter()
    try:
        return find_spec(cls, name, path, target)
    finally:
        if name.startswith("vllm_hotfix_guard"):
            seen.setdefault(name, {})["find"] = time.perf_counter() - start


def timed_code(self, name):
    start = time.perf_counter()
    code = get_code(self, name)
    seen.setdefault(name, {})["code"] = time.perf_counter() - start
    seen[name]["bytes"] = len(__import__("marshal").dumps(code))
    return code


def timed_exec(self, module):
    name = module.__name__
    code = self.get_code(name)
    start = time.perf_counter()
    stack.append(0.0)
    try:
        exec(code, module.__dict__)
    finally:
        spent, inner = time.perf_counter() - start, stack.pop()
        seen.setdefault(name, {})["body"] = spent - inner
        if stack:
            stack[-1] += spent + seen[name].get("code", 0.0) + seen[name].get("find", 0.0)


called = {}


def profile(frame, event, arg):
    if event == "call" and "vllm_hotfix_guard" in frame.f_code.co_filename:
        called.setdefault(frame.f_code.co_filename, set()).add(frame.f_code.co_qualname)


external.PathFinder.find_spec = classmethod(timed_find)
external.SourceLoader.get_code = timed_code
external._LoaderBasics.exec_module = timed_exec
if sys.argv[1:] == ["calls"]:
    sys.setprofile(profile)
start = time.perf_counter()
held["register"]()
whole = time.perf_counter() - start
sys.setprofile(None)
print(json.dumps({"whole": whole, "modules": seen, "called": {k: sorted(v) for k, v in called.items()}}))
'''


def cold_bytes(called: dict) -> list[tuple[int, int, str]]:
    """(bytecode of the functions the hot path never called, the module's bytecode, its file) per hot module."""
    import marshal
    import types

    rows = []
    for filename, names in called.items():
        code = compile(Path(filename).read_text(), filename, "exec")
        cold = 0

        def walk(parent: types.CodeType) -> None:
            nonlocal cold
            for const in parent.co_consts:
                if isinstance(const, types.CodeType):
                    if const.co_qualname in names or const.co_name.startswith("<"):
                        walk(const)
                    else:
                        cold += len(marshal.dumps(const))
        walk(code)
        rows.append((cold, len(marshal.dumps(code)), filename.split("vllm_hotfix_guard/")[-1]))
    return sorted(rows, reverse=True)


def phases_part(scratch: Path, count: int) -> None:
    from fixtures.vllmfull import run
    from guard_ready import K8S, setup

    full, arms = setup(scratch, None, None)
    path, env, _ = arms[K8S]
    script = full["work"] / "phases.py"
    script.write_text(PHASES)
    rows = []
    for round_no in range(count + 2):  # the first warms the trust cache and bytecode; the last records calls
        done = run(full, [str(full["venv"].python), str(script), *(["calls"] if round_no == count + 1 else [])],
                   pythonpath=path, **env)
        found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not found:
            sys.exit(f"exit {done.returncode}: {done.stdout[-600:]} {done.stderr[-600:]}")
        if round_no:
            rows.append(found[-1])
    calls, rows = rows[-1]["called"], rows[:-1]

    def median(pick) -> float:
        return statistics.median(pick(r) for r in rows) * 1e3

    def total(key: str):
        return lambda r: sum(m.get(key, 0.0) for m in r["modules"].values())

    imports = median(lambda r: total("find")(r) + total("code")(r) + total("body")(r))
    whole = median(lambda r: r["whole"])
    last = rows[-1]["modules"]
    print(f"{count} rounds, medians, instrumented (shares; --part ready gives the figure to quote): register() "
          f"{whole:.2f} ms for {len(last)} modules of {sum(m.get('bytes', 0) for m in last.values()) / 1024:.0f} KiB")
    print(f"  the import system's search {median(total('find')):.2f} ms, reading + unmarshalling bytecode "
          f"{median(total('code')):.2f} ms, module bodies {median(total('body')):.2f} ms; the check itself "
          f"{median(lambda r: r['whole']) - imports:.2f} ms")
    for key, label in (("body", "bodies"), ("code", "bytecode read + unmarshal")):
        top = sorted(last, key=lambda m: -statistics.median(r["modules"].get(m, {}).get(key, 0.0) for r in rows))[:6]
        print(f"  largest {label}: " + ", ".join(
            f"{m.removeprefix('vllm_hotfix_guard.')} {statistics.median(r['modules'][m].get(key, 0.0) for r in rows) * 1e3:.2f}"
            for m in top))
    cold = cold_bytes(calls)
    print(f"  bytecode the hot path never runs: {sum(c for c, _, _ in cold) / 1024:.0f} of "
          f"{sum(t for _, t, _ in cold) / 1024:.0f} KiB; most in " + ", ".join(
              f"{name} {c / 1024:.1f}/{t / 1024:.1f}" for c, t, name in cold[:8]))
