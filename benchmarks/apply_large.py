"""Apply the real vLLM 0.29.0 -> 0.30.0 source diff (1,106 files, 206,678 lines) with hotfix, git apply
and GNU patch, on fresh copies of the 0.29.0 tree, several interleaved rounds (the order rotating each
round); print medians and ratios.

    python benchmarks/apply_large.py [--rounds 5]

hotfix keeps its full all-or-nothing guarantee here (lock, journal, hard-link backups, fsync).
Every tool runs as a subprocess, so interpreter / process start-up is counted for all of them; hotfix
runs with its bytecode cached (as from an installed wheel), after one untimed dry run. Each copy is
synced to disk before its tool is timed (as in production, where the tree has long been written).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import realdata  # noqa: E402


def tools(diff: Path) -> dict[str, list[str]]:
    return {
        "hotfix": [sys.executable, "-m", "vllm_hotfix", "apply", "--patch", str(diff), "--root", "."],
        "git apply": ["git", "apply", "--whitespace=nowarn", str(diff)],
        "patch -p1": ["patch", "-p1", "-s", "-i", str(diff)],
    }


def same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    stack = [cmp]
    while stack:
        c = stack.pop()
        if c.left_only or c.right_only or c.funny_files:
            return False
        _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
        if mismatch or errors:
            return False
        stack.extend(c.subdirs.values())
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    base = realdata.vllm_source_tree("0.29.0")
    diff = realdata.vllm_source_diff("0.29.0", "0.30.0")
    lines = sum(1 for _ in open(diff, "rb"))
    print(f"diff: {diff} ({lines:,} lines, {diff.stat().st_size / 1e6:.1f} MB); tree: {base}")
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}  # user + system seconds
    with tempfile.TemporaryDirectory(prefix="apply-large-") as scratch:
        scratch = Path(scratch)
        env = dict(os.environ, HOTFIX_STATE_DIR=str(scratch / "state"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        commands = tools(diff)
        subprocess.run([*commands["hotfix"][:-2], "--root", str(base), "--dry-run"], env=env,
                       check=True, capture_output=True)
        results: dict[str, Path] = {}
        names = list(commands)
        for round_no in range(args.rounds):
            # Rotate who goes first, and delete the round's copies only after all tools ran, so that
            # no tool systematically inherits another's deferred file system work.
            order = names[round_no % len(names):] + names[:round_no % len(names)]
            copies = {}
            for name in order:
                copies[name] = scratch / f"{name.split()[0]}-{round_no}"
                shutil.copytree(base, copies[name], symlinks=True)
            os.sync()  # the copies' writeback must not land inside a tool's timing
            for name in order:
                used = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                done = subprocess.run(commands[name], cwd=copies[name], env=env, capture_output=True)
                elapsed = time.perf_counter() - start
                now = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu.setdefault(name, []).append(now.ru_utime - used.ru_utime + now.ru_stime - used.ru_stime)
                if done.returncode != 0:
                    print(f"{name} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
                    return 1
                times.setdefault(name, []).append(elapsed)
                os.sync()  # nor the previous tool's writes
            for name, copy in copies.items():
                if round_no == 0:
                    results[name] = copy
                else:
                    shutil.rmtree(copy)
            os.sync()
        identical = same_tree(results["hotfix"], results["git apply"])
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        runs = ", ".join(f"{t:.3f}" for t in times[name])
        print(f"{name:10s} median {median:.3f} s   cpu {statistics.median(cpu[name]):.3f} s   ({runs})")
    print(f"hotfix / git apply = {medians['hotfix'] / medians['git apply']:.2f}x")
    print(f"hotfix / patch -p1 = {medians['hotfix'] / medians['patch -p1']:.2f}x")
    print(f"hotfix tree identical to git apply tree: {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
