"""What the guard adds to a vLLM process start, under the real vLLM 0.30.0 loader (torch and all, the
cached ~9 GB venv of tests/realdata.py: built on first use, minutes).

    python benchmarks/guard.py [--rounds 9]

Each round starts a fresh process that imports vLLM's plugin module and calls vLLM's own
``load_general_plugins()`` with ``HOTFIX_LOCK`` set (tests/fixtures/vllmfull.py: a patched copy of the
mamba file on PYTHONPATH, vllm-hotfix installed from its wheel with bytecode); then the same with
``HOTFIX_REQUIRE`` and a real record of that copy in the state directory (the guard's verdict on a
record: txn/judgement, the seal instead of the re-derivation), and with a ``.pyc`` of the patched module
that Python wrote itself (the bytecode check then compiles the source to prove it, and hands the compile
to the import watch). Timed inside the process:
the loading of the guard's entry point (vLLM's ``EntryPoint.load()``: importing the guard) and its
``register()`` call (the check: read the lock, find vllm, hash the locked file, log one line), wall
and CPU. Their sum is what the guard adds to the process start (goal <= 5 ms); vLLM's own plugins
(loaded in the same call) are shown for scale. Last, the cost of creating one class inside that
process, a frozen dataclass against a ``values.Value`` (the reason for the guard's slotted classes).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fixtures.vllmfull import guard_setup, legit_pyc, record_setup, run  # noqa: E402

TIMER = r'''
import importlib.metadata, json, time
import vllm.plugins
from vllm.plugins import load_general_plugins

spent = {}  # entry point name -> [wall, cpu] of its load() and, for the guard, its call
real_load = importlib.metadata.EntryPoint.load


def timed_load(self):
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        return real_load(self)
    finally:
        spent.setdefault(self.name, [0.0, 0.0])
        spent[self.name][0] += time.perf_counter() - wall
        spent[self.name][1] += time.process_time() - cpu


importlib.metadata.EntryPoint.load = timed_load
real_group = vllm.plugins.load_plugins_by_group


def timed_group(group):
    plugins = real_group(group)
    if "vllm_hotfix_guard" in plugins:
        func = plugins["vllm_hotfix_guard"]

        def timed():
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                func()
            finally:
                spent["register"] = [time.perf_counter() - wall, time.process_time() - cpu]
        plugins["vllm_hotfix_guard"] = timed
    return plugins


vllm.plugins.load_plugins_by_group = timed_group
start = time.perf_counter()
load_general_plugins()
spent["load_general_plugins"] = [time.perf_counter() - start, 0.0]
import sys
spent["modules"] = sum(1 for name in sys.modules if name == "vllm_hotfix" or name.startswith("vllm_hotfix."))
print(json.dumps(spent))
'''


CLASS_COST = r'''
import dataclasses, json, os, statistics, time
from typing import Optional
import vllm.plugins  # noqa: F401 - the state of a vLLM process when the guard loads
from vllm_hotfix.values import Value

BODY = """
    path: str
    sha256: str
    baseline_sha256: Optional[str]
    export: str
    versions: Optional[str] = None
"""
SOURCES = {"frozen dataclass": "@dataclasses.dataclass(frozen=True)\nclass C{i}:" + BODY,
           "values.Value": "class C{i}(Value):" + BODY}
namespace = {"dataclasses": dataclasses, "Optional": Optional, "Value": Value}
cost = {}
for _ in range(3):
    for kind, source in SOURCES.items():
        codes = [compile(source.format(i=i), "<class>", "exec") for i in range(100)]
        start = time.perf_counter()
        for code in codes:
            exec(code, namespace)
        cost.setdefault(kind, []).append((time.perf_counter() - start) / len(codes))
found = {kind: statistics.median(values) for kind, values in cost.items()}

# The import system's own cost per module in this process: importing an empty module (bytecode cached)
import compileall, sys, tempfile  # noqa: E401
with tempfile.TemporaryDirectory() as scratch:
    for pkg in ("p0", "p1", "p2"):
        os.makedirs(os.path.join(scratch, pkg))
        for i in range(41):
            open(os.path.join(scratch, pkg, "__init__.py" if i == 40 else f"m{i}.py"), "w").close()
    compileall.compile_dir(scratch, quiet=1)
    sys.path.insert(0, scratch)
    per_module = []
    for pkg in ("p0", "p1", "p2"):
        __import__(pkg)
        start = time.perf_counter()
        for i in range(40):
            __import__(f"{pkg}.m{i}")
        per_module.append((time.perf_counter() - start) / 40)
found["empty module import"] = statistics.median(per_module)
print(json.dumps(found))
'''


def rounds(full, script: Path, count: int, **env) -> list[dict]:
    rows: list[dict] = []
    for round_no in range(count + 1):
        done = run(full, [str(full["venv"].python), str(script)], **env)
        report = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not report or "register" not in report[-1]:
            sys.exit(f"exit {done.returncode}: {done.stdout[-600:]} {done.stderr[-600:]}")
        if round_no:  # the first process warms caches and bytecode
            rows.append(report[-1])
    return rows


def report(name: str, rows: list[dict]) -> None:
    def median(key: str, index: int) -> float:
        return statistics.median(row[key][index] for row in rows) * 1e3

    total = statistics.median((row["vllm_hotfix_guard"][0] + row["register"][0]) for row in rows) * 1e3
    total_cpu = statistics.median((row["vllm_hotfix_guard"][1] + row["register"][1]) for row in rows) * 1e3
    print(f"{name}:")
    print(f"  importing the guard (vLLM's EntryPoint.load): median {median('vllm_hotfix_guard', 0):5.2f} ms   "
          f"cpu {median('vllm_hotfix_guard', 1):5.2f} ms")
    print(f"  register() (the check and its line):         median {median('register', 0):5.2f} ms   cpu {median('register', 1):5.2f} ms")
    print(f"  the guard adds {total:.2f} ms (cpu {total_cpu:.2f} ms) to a vLLM process start; goal <= 5 ms "
          f"({rows[-1].get('modules')} modules of vllm_hotfix)")
    print(f"  for scale: load_general_plugins() as a whole (vLLM's own plugins too): {median('load_general_plugins', 0):.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="guard-bench-") as scratch:
        full = guard_setup(Path(scratch) / "work")
        script = full["work"] / "timer.py"
        script.write_text(TIMER)
        (full["work"] / "class_cost.py").write_text(CLASS_COST)
        done = run(full, [str(full["venv"].python), str(full["work"] / "class_cost.py")])
        class_cost = json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 else None
        rows = rounds(full, script, args.rounds, HOTFIX_LOCK=str(full["lock"]))
        report("HOTFIX_LOCK (the lock: no record)", rows)
        record_setup(full)
        report("HOTFIX_REQUIRE (a sealed record)", rounds(full, script, args.rounds, HOTFIX_REQUIRE="mamba-align-block-size"))
        report("HOTFIX_LOCK + HOTFIX_REQUIRE", rounds(full, script, args.rounds, HOTFIX_LOCK=str(full["lock"]),
                                                     HOTFIX_REQUIRE="mamba-align-block-size"))
        legit_pyc(full)
        report("HOTFIX_REQUIRE with a .pyc Python would load (compiled to prove it; the import watch reuses it)",
               rounds(full, script, args.rounds, HOTFIX_REQUIRE="mamba-align-block-size"))
        modules = rows[-1].get("modules") if rows else None
    if class_cost:  # why the guard's model is values.Value, not frozen dataclasses (docs/design.md)
        empty = class_cost.pop("empty module import", None)
        print("creating one 5-field class inside the vLLM process: "
              + ", ".join(f"{kind} {seconds * 1e6:.0f} us" for kind, seconds in class_cost.items()))
        if empty is not None and modules:  # the floor the module count sets, before any line of ours runs
            print(f"the import system alone, per module, in that process: {empty * 1e6:.0f} us (an empty module, "
                  f"bytecode cached); the guard with the lock loads {modules} modules of vllm_hotfix: "
                  f"{empty * modules * 1e3:.2f} ms of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
