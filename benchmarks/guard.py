"""What the guard adds to a vLLM process start, under the real vLLM 0.30.0 loader (torch and all, the
cached ~9 GB venv of tests/realdata.py: built on first use, minutes).

    python benchmarks/guard.py [--rounds 9] [--vs main] [--part all|code|record|ready|phases]

``--part phases`` (benchmarks/guard_phases.py): where the k8s --trust arm's time goes -- the import system's search,
reading and unmarshalling bytecode, module bodies, the check itself -- and the bytecode the hot path loads but never runs.

``--part ready`` (issue 43; benchmarks/guard_ready.py): the guard as compose and k8s deploy it (HOTFIX_LOCK +
HOTFIX_READY_DIR; with k8s --trust also HOTFIX_TRUST, HOTFIX_STRICT and HOTFIX_EXPECT_FINGERPRINT), side by side
with no guard at all and with ``--vs REF``'s guard, in alternating processes: the guard's own import +
register() per process, ``load_general_plugins()`` as a whole against the no-guard baseline and their ratio,
and the modules that hot path imports. ``--vs ''``: no REF arm.

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

Three guards in the same rounds, the order rotating: ``--vs REF``'s vllm-hotfix (built from that git
ref: the code before a change) and this tree's, with a lock whose files carry code names (issue 35:
the code check at the guard's start) and with one without them (since issue 43 the guard judges such a
lock unknown, NOT IN EFFECT: that arm times a lock written before names were locked, which the guard
refuses; `hotfix export` always writes them, and so does tests/fixtures/vllmfull.guard_setup's lock,
which ``--part ready`` times: its code check runs at the guard's start). The lock names every function and
method of the two locked files of tests/fixtures/rebinding.py (about thirty: more than the catalog's
hotfixes touch together), and one plugin distribution is installed so that its modules are scanned for
stale aliases. Last, the check at a checkpoint itself (guard_code.judge_all: each name resolved and
judged, the plugin modules scanned) in that process, both fixed modules imported through the watch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fixtures.rebinding import rebinding_setup  # noqa: E402
from fixtures.vllmfull import legit_pyc, record_setup, run  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

TIMER = r'''
import importlib.metadata, json, sys, time
import vllm.plugins
from vllm.plugins import load_general_plugins

spent = {}  # entry point name -> [wall, cpu] of its load() and, for the guard, its call
real_load = importlib.metadata.EntryPoint.load


other_imports = set()  # modules (not the guard's) first loaded while the guard was imported or registered


def timed_load(self):
    before = set(sys.modules)
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        return real_load(self)
    finally:
        spent.setdefault(self.name, [0.0, 0.0])
        spent[self.name][0] += time.perf_counter() - wall
        spent[self.name][1] += time.process_time() - cpu
        if self.name == "vllm_hotfix_guard":
            other_imports.update(set(sys.modules) - before)


importlib.metadata.EntryPoint.load = timed_load
real_group = vllm.plugins.load_plugins_by_group


def timed_group(group):
    plugins = real_group(group)
    if "vllm_hotfix_guard" in plugins:
        func = plugins["vllm_hotfix_guard"]

        def timed():
            before = set(sys.modules)
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                func()
            finally:
                spent["register"] = [time.perf_counter() - wall, time.process_time() - cpu]
                other_imports.update(set(sys.modules) - before)
        plugins["vllm_hotfix_guard"] = timed
    return plugins


vllm.plugins.load_plugins_by_group = timed_group
start = time.perf_counter()
load_general_plugins()
spent["load_general_plugins"] = [time.perf_counter() - start, 0.0]
import os, statistics, sys
spent["modules"] = sum(1 for name in sys.modules if name.split(".")[0] in ("vllm_hotfix", "vllm_hotfix_guard"))
spent["module_names"] = sorted(name for name in sys.modules if name.split(".")[0] in ("vllm_hotfix", "vllm_hotfix_guard"))
spent["other_imports"] = sorted(name for name in other_imports if name.split(".")[0] not in ("vllm_hotfix", "vllm_hotfix_guard"))
if os.environ.get("CHECKPOINT"):  # the check at a checkpoint, once the fixed modules are imported (through the watch)
    import vllm.v1.worker.gpu.model_states.mamba_hybrid  # noqa: F401 - imports mamba_utils too
    from vllm_hotfix_guard import code as guard_code
    found = guard_code.judge_all()
    times = []
    for _ in range(25):
        start = time.perf_counter()
        guard_code.judge_all()
        times.append(time.perf_counter() - start)
    spent["checkpoint"] = [statistics.median(times), len(found), sorted({f.state for f in found}),
                           len(sys.modules), len(guard_code.judging.plugin_modules())]
print(json.dumps(spent))
'''


CLASS_COST = r'''
import dataclasses, json, os, statistics, time
from typing import Optional
import vllm.plugins  # noqa: F401 - the state of a vLLM process when the guard loads
from vllm_hotfix_guard.values import Value

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


def everything_named(lock_path: Path, patched: Path) -> Path:
    """A copy of the fixture's lock whose files name every function and method they define."""
    from vllm_hotfix_guard.core.codeprint import code_objects, fingerprints

    lock = json.loads(lock_path.read_text())
    for hotfix in lock["hotfixes"]:
        for f in hotfix["files"]:
            data = (patched / f["path"]).read_bytes()
            names = [n for n in code_objects(compile(data, f["path"], "exec")) if "<" not in n and n.count(".") <= 1]
            prints = fingerprints(data, names)
            kinds = {n: ("method" if "." in n else "function") for n in names}
            classes = {n.partition(".")[0] for n in names if "." in n}
            f["code"]["names"] = [{"name": n, "kind": "class" if n in classes else kinds[n], "fingerprint": prints[n]}
                                  for n in names]
    out = lock_path.with_name("hotfix-named.lock")
    out.write_text(json.dumps(lock))
    return out


def without_names(lock_path: Path) -> Path:
    lock = json.loads(lock_path.read_text())
    for hotfix in lock["hotfixes"]:
        for f in hotfix["files"]:
            f.pop("code", None)
    out = lock_path.with_name("hotfix-plain.lock")
    out.write_text(json.dumps(lock))
    return out


def install_ref(ref: str, work: Path) -> Path:
    """vllm-hotfix as it is at git ``ref``, installed (with bytecode) into a folder for PYTHONPATH."""
    import io
    import subprocess
    import tarfile

    source = work / f"src-{ref.replace('/', '_')}"
    data = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", ref, "src", "manifests", "patches",
                           "pyproject.toml", "README.md"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(source)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q", str(source),
                    "-w", str(work / "dist-ref")], check=True)
    (wheel,) = (work / "dist-ref").glob("vllm_hotfix-*.whl")
    target = work / "hotfix-ref"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q",
                    "--target", str(target), str(wheel)], check=True)
    return target


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


def code_rounds(full, script: Path, guards: dict, plugin: Path, count: int) -> tuple[dict, list]:
    """The three guards of the code check in the same rounds, the order rotating."""
    rows: dict[str, list[dict]] = {name: [] for name in guards}
    checkpoint = []
    for round_no in range(count + 1):
        order = list(guards)[round_no % 3:] + list(guards)[:round_no % 3]
        for name in order:
            hotfix, lock = guards[name]
            done = run(full, [str(full["venv"].python), str(script)], pythonpath=[hotfix, plugin, full["patched"]],
                       HOTFIX_LOCK=str(lock), VLLM_PLUGINS="vllm_hotfix_guard,hotfix_test_unrelated",
                       **({"CHECKPOINT": "1"} if name.endswith("with names") else {}))
            found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode != 0 or not found or "register" not in found[-1]:
                sys.exit(f"{name}: exit {done.returncode}: {done.stdout[-600:]} {done.stderr[-600:]}")
            if round_no:  # the first process warms caches and bytecode
                rows[name].append(found[-1])
                if "checkpoint" in found[-1]:
                    checkpoint.append(found[-1]["checkpoint"])
    return rows, checkpoint


def code_report(rows: dict, checkpoint: list, vs: str, count: int) -> None:
    def total(found: list[dict], index: int = 0) -> float:
        return statistics.median(r["vllm_hotfix_guard"][index] + r["register"][index] for r in found) * 1e3

    def median(name: str, key: str) -> float:
        return statistics.median(row[key][0] for row in rows[name]) * 1e3

    print(f"{count} rounds, the three guards in rotating order, medians (wall / cpu, ms):")
    for name, found in rows.items():
        print(f"  {name:32} import {median(name, 'vllm_hotfix_guard'):5.2f}  register {median(name, 'register'):5.2f}"
              f"  = {total(found):5.2f} (cpu {total(found, 1):5.2f}); {found[-1].get('modules')} vllm_hotfix modules")
    base = total(rows[f"{vs} (names ignored)"])
    for name in list(rows)[1:]:
        print(f"  {name} / {vs}: {total(rows[name]) / base:.2f}x")
    print("the guard adds the 'import + register' figure to a vLLM process start; goal <= 5 ms")
    if checkpoint:
        _, names, states, loaded, scanned = checkpoint[-1]
        print(f"the check at a checkpoint (judge_all, {names} names, states {', '.join(states)}; {loaded} modules "
              f"loaded, {scanned} plugin modules scanned): median {statistics.median(c[0] for c in checkpoint) * 1e3:.3f} ms; "
              "goal <= 1 ms")
    any_rows = rows["this tree, lock with names"]
    print(f"for scale: load_general_plugins() as a whole: {statistics.median(r['load_general_plugins'][0] for r in any_rows) * 1e3:.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--vs", default="main", help="git ref of the vllm-hotfix to compare with (default main)")
    parser.add_argument("--part", choices=("all", "code", "record", "ready", "phases"), default="all",
                        help="code: the three guards of the code check only; record: HOTFIX_REQUIRE and .pyc only; "
                             "ready: a lock and readiness on, against no guard; phases: where ready's k8s time goes")
    args = parser.parse_args()
    modules = None
    if args.part == "phases":
        from guard_phases import phases_part

        with tempfile.TemporaryDirectory(prefix="guard-bench-") as scratch:
            phases_part(Path(scratch), args.rounds)
        return 0
    if args.part == "ready":
        from guard_ready import ready_part

        with tempfile.TemporaryDirectory(prefix="guard-bench-") as scratch:
            ready_part(Path(scratch), args.rounds, args.vs or None, TIMER, install_ref)
        return 0
    with tempfile.TemporaryDirectory(prefix="guard-bench-") as scratch:
        full = rebinding_setup(Path(scratch) / "work")
        named, plain = everything_named(full["lock"], full["patched"]), without_names(full["lock"])
        script = full["work"] / "timer.py"
        script.write_text(TIMER)
        (full["work"] / "class_cost.py").write_text(CLASS_COST)
        done = run(full, [str(full["venv"].python), str(full["work"] / "class_cost.py")])
        class_cost = json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 else None
        if args.part in ("all", "code"):
            before = install_ref(args.vs, Path(scratch))
            plugin = full["plugins"]["hotfix_test_unrelated"]  # a plugin package to scan (its rebinding is of no fixed name)
            guards = {f"{args.vs} (names ignored)": (before, named), "this tree, lock without names": (full["hotfix"], plain),
                      "this tree, lock with names": (full["hotfix"], named)}
            code_report(*code_rounds(full, script, guards, plugin, args.rounds), args.vs, args.rounds)
        if args.part in ("all", "record"):
            lock_rows = rounds(full, script, args.rounds, HOTFIX_LOCK=str(plain))
            report("HOTFIX_LOCK (the lock without code names, judged unknown: no record)", lock_rows)
            modules = lock_rows[-1].get("modules") if lock_rows else None
            record_setup(full)
            report("HOTFIX_REQUIRE (a sealed record)", rounds(full, script, args.rounds, HOTFIX_REQUIRE="mamba-align-block-size"))
            report("HOTFIX_LOCK + HOTFIX_REQUIRE", rounds(full, script, args.rounds, HOTFIX_LOCK=str(plain),
                                                         HOTFIX_REQUIRE="mamba-align-block-size"))
            legit_pyc(full)
            report("HOTFIX_REQUIRE with a .pyc Python would load (compiled to prove it; the import watch reuses it)",
                   rounds(full, script, args.rounds, HOTFIX_REQUIRE="mamba-align-block-size"))
    if class_cost:  # why the guard's model is values.Value, not frozen dataclasses (docs/design.md)
        empty = class_cost.pop("empty module import", None)
        print("creating one 5-field class inside the vLLM process: "
              + ", ".join(f"{kind} {seconds * 1e6:.0f} us" for kind, seconds in class_cost.items()))
        if empty is not None:
            tail = (f"; the guard with the lock loads {modules} modules of vllm_hotfix: {empty * modules * 1e3:.2f} ms of it"
                    if modules else "")
            print(f"the import system alone, per module, in that process: {empty * 1e6:.0f} us (an empty module, "
                  f"bytecode cached){tail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
