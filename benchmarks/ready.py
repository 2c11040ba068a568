"""What readiness costs (docs/readiness.md), each figure against a peer in the same run, the order alternating.

    python benchmarks/ready.py [--rounds 15] [--part all|guard|probe]

guard: the guard under the real vLLM 0.30.0 loader (tests/fixtures/vllmfull.py; the cached full venv, the
guard installed from this tree's wheel with bytecode), HOTFIX_LOCK set, with and without HOTFIX_READY_DIR:
the entry point's import + register() (benchmarks/guard.py's TIMER), i.e. the check plus, with the
directory, the record of this process. Budget: <= 5 ms per vLLM process.

probe: `ready` as a readiness probe runs it, a fresh interpreter each time (``python -c`` calling
``ready_probe.main``, the body of ``python -m vllm_hotfix_guard ready``), on a directory holding the records of
10 live processes (1 API server, 1 engine core, 8 workers), against ``python -c pass``; wall time of
the whole process. Budget: <= 2x ``python -c pass``. Then ``-X importtime``: what it imports.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
from fixtures.vllmfull import guard_setup, run  # noqa: E402

PROBE = "import sys; from vllm_hotfix_guard import ready_probe; sys.exit(ready_probe.main(sys.argv[1:]))"
RECORDER = r"""
import sys
from vllm_hotfix_guard import ready
ready.record([], role=sys.argv[1])
print("recorded", flush=True)
sys.stdin.read()
"""
ROLES = ["main (vllm serve)", "EngineCore"] + [f"VllmWorker-{i}" for i in range(8)]


def guard_part(rounds: int) -> None:
    from guard import TIMER  # benchmarks/guard.py: the entry point's import and register(), timed in the process

    with tempfile.TemporaryDirectory(prefix="ready-bench-") as scratch:
        full = guard_setup(Path(scratch) / "work")
        script = full["work"] / "timer.py"
        script.write_text(TIMER)
        where = Path(scratch) / "ready"
        where.mkdir(mode=0o700)
        runs = {"HOTFIX_LOCK": {}, "HOTFIX_LOCK + HOTFIX_READY_DIR": {"HOTFIX_READY_DIR": str(where)}}
        found: dict[str, list[list[float]]] = {name: [] for name in runs}  # [wall, cpu] per round
        for round_no in range(rounds + 1):
            for name in (list(runs) if round_no % 2 else list(runs)[::-1]):
                done = run(full, [str(full["venv"].python), str(script)], HOTFIX_LOCK=str(full["lock"]), **runs[name])
                rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
                if done.returncode != 0 or not rows or "register" not in rows[-1]:
                    sys.exit(f"{name}: exit {done.returncode}: {done.stdout[-600:]} {done.stderr[-600:]}")
                if round_no:  # the first round warms caches and bytecode
                    found[name].append([rows[-1]["vllm_hotfix_guard"][i] + rows[-1]["register"][i] for i in (0, 1)])
        records = len(list(where.iterdir()))
    base, with_ready = (statistics.median(w for w, _ in found[name]) * 1e3 for name in runs)
    base_cpu, ready_cpu = (statistics.median(c for _, c in found[name]) * 1e3 for name in runs)
    print(f"the guard under vLLM's loader ({rounds} rounds, medians of import + register(), wall):")
    print(f"  HOTFIX_LOCK                    {base:6.2f} ms")
    print(f"  HOTFIX_LOCK + HOTFIX_READY_DIR {with_ready:6.2f} ms  ({with_ready / base:.2f}x; the record: "
          f"{with_ready - base:+.2f} ms; {records} records written)")
    print(f"  cpu: {base_cpu:.2f} ms without, {ready_cpu:.2f} ms with ({ready_cpu - base_cpu:+.2f} ms)")
    print(f"  budget: <= 5 ms per vLLM process: {'met' if with_ready <= 5 else 'NOT met'}")


def with_bytecode(scratch: Path, env: dict) -> dict:
    """This tree's vllm_hotfix_guard copied and compiled (as an image has the guard: installed with bytecode), first on
    PYTHONPATH; bytecode writing allowed (a probe compiling its modules every time is not what runs)."""
    import compileall
    import shutil

    shutil.copytree(HERE.parent / "src" / "vllm_hotfix_guard", scratch / "lib" / "vllm_hotfix_guard",
                    ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(scratch / "lib", quiet=1)
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(scratch / "lib")
    return env


def probe_part(rounds: int) -> None:
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="ready-probe-") as scratch:
        where = Path(scratch) / "ready"
        where.mkdir(mode=0o700)
        env = with_bytecode(Path(scratch), dict(os.environ, HOTFIX_READY_DIR=str(where)))
        live = []
        try:
            for role in ROLES:
                proc = subprocess.Popen([python, "-c", RECORDER, role], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=env)
                assert proc.stdout.readline() == "recorded\n"
                live.append(proc)
            commands = {"python -c pass": [python, "-c", "pass"],
                        "ready (python -c ready.main)": [python, "-c", PROBE, "--expect", "api=1,engine=1,worker=8"]}
            check = subprocess.run(commands["ready (python -c ready.main)"], env=env, capture_output=True, text=True)
            assert check.returncode == 0, check.stdout + check.stderr
            times: dict[str, list[float]] = {name: [] for name in commands}
            for round_no in range(rounds + 1):
                for name in (list(commands) if round_no % 2 else list(commands)[::-1]):
                    start = time.perf_counter()
                    subprocess.run(commands[name], env=env, check=name == "python -c pass", capture_output=True)
                    if round_no:
                        times[name].append(time.perf_counter() - start)
            imports = [subprocess.run([python, "-X", "importtime", *commands["ready (python -c ready.main)"][1:]],
                                      env=env, capture_output=True, text=True).stderr for _ in range(7)]
            baseline = subprocess.run([python, "-X", "importtime", "-c", "pass"], env=env, capture_output=True,
                                      text=True).stderr
        finally:
            for proc in live:
                proc.stdin.close()
                proc.wait()
    base, probe = (statistics.median(times[name]) * 1e3 for name in times)
    print(f"`ready` as a probe runs it ({rounds} rounds, medians of the whole process, wall; {len(ROLES)} live records):")
    print(f"  python -c pass                 {base:6.2f} ms")
    print(f"  ready                          {probe:6.2f} ms  ({probe / base:.2f}x python -c pass; budget <= 2x: "
          f"{'met' if probe <= 2 * base else 'NOT met'})")
    print("  -X importtime: what ready imports beyond python -c pass (self us, median of 7 runs, module):")
    seen = {line.rsplit("|", 1)[-1].strip() for line in baseline.splitlines() if "|" in line}
    found: dict[str, list[int]] = {}
    for text in imports:
        for line in text.splitlines():
            parts = [p.strip() for p in line.split(":", 1)[-1].split("|")]
            if line.startswith("import time:") and len(parts) == 3 and parts[0].isdigit() and parts[2] not in seen:
                found.setdefault(parts[2], []).append(int(parts[0]))
    for module, selfs in found.items():
        print(f"    {statistics.median(selfs):6.0f}  {module}")
    print(f"    {sum(statistics.median(v) for v in found.values()):6.0f}  in all")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--part", choices=("all", "guard", "probe"), default="all")
    args = parser.parse_args()
    if args.part in ("all", "probe"):
        probe_part(args.rounds)
    if args.part in ("all", "guard"):
        guard_part(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
