"""Apply the real vLLM 0.29.0 -> 0.30.0 source diff (1,106 files, 206,678 lines) with hotfix, git apply
and GNU patch, on fresh copies of the 0.29.0 tree, several interleaved rounds (the order rotating each
round); print medians and ratios.

    python benchmarks/apply_large.py [--rounds 5] [--phase-rounds 3] [--before OTHER_VENV_PYTHON]

The peers: ``git apply`` and ``patch -p1`` (no fsync at all), and ``git apply+sync``: git apply, then an
fsync of every file it gave new contents and every directory it changed (coreutils ``sync FILE...``,
4 processes), i.e. git apply made as durable as hotfix's commit. ``--before`` times a second
vllm-hotfix (e.g. main's venv) in the same rounds.

hotfix keeps its full all-or-nothing guarantee here (lock, journal, hard-link backups, fsync).
Every tool runs as a subprocess, so interpreter / process start-up is counted for all of them; hotfix
runs with its bytecode cached (as from an installed wheel), after one untimed dry run. Each copy is
synced to disk before its tool is timed (as in production, where the tree has long been written).
Wall time on this shared machine is mostly the file system's (creating, renaming and fsyncing 1,106
files), so CPU time (user + system, all threads) is compared too.

Then the phases: hotfix's own apply run in this process on fresh copies (``--phase-rounds``), each
phase's wall time taken by wrapping the function that does it -- parse (the diff, the forked half
included), plan (every hunk placed, every file read), prepare's rest (the record: sha256 of every
before / after), keep (backups and patch bytes into the state dir), commit (journal.commit: check,
journal, temps, renames, fsyncs; its steps below it), post-check and prune -- and the start-up
(a process that starts and imports what the command runs, timed on its own).
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


def tools(diff: Path, durable: Path, before: str | None = None) -> dict[str, list[str]]:
    per_sync = -(-len(durable.read_text().splitlines()) // 4)
    found = {
        "hotfix": [sys.executable, "-m", "vllm_hotfix", "apply", "--patch", str(diff), "--root", "."],
        "git apply": ["git", "apply", "--whitespace=nowarn", str(diff)],
        "patch -p1": ["patch", "-p1", "-s", "-i", str(diff)],
        # git apply made as durable as hotfix's commit: an fsync of every new content and changed directory,
        # from 4 processes at once as hotfix's 4 threads do (txn.fsops.WORKERS)
        "git apply+sync": ["sh", "-c", 'git apply --whitespace=nowarn "$1" && '
                           'xargs -d "\\n" -a "$2" -P 4 -n "$3" sync --', "sh", str(diff), str(durable), str(per_sync)],
    }
    if before:  # another version of vllm-hotfix (an interpreter that imports it), timed in the same rounds
        found["hotfix before"] = [before, *found["hotfix"][1:]]
    return found


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


def written_by(base: Path, diff: Path, probe: Path) -> list[str]:
    """The files the diff gives new contents and the directories it changes (what hotfix fsyncs), from
    one untimed git apply on a copy."""
    shutil.copytree(base, probe, symlinks=True)
    subprocess.run(["git", "apply", "--whitespace=nowarn", str(diff)], cwd=probe, check=True)
    paths: set[str] = set()
    for tree, other in ((probe, base), (base, probe)):
        for dirpath, _, filenames in os.walk(tree):
            for name in filenames:
                rel = os.path.relpath(os.path.join(dirpath, name), tree)
                there = other / rel
                if tree == probe and (not there.exists() or not filecmp.cmp(tree / rel, there, shallow=False)):
                    paths.add(rel)
                if not there.exists() or rel in paths:
                    parent = os.path.dirname(rel)
                    if (probe / parent).is_dir():
                        paths.add(parent or ".")
    shutil.rmtree(probe)
    return sorted(paths)


PHASES = [  # (label, module, attribute): the function whose calls make the phase
    ("parse", "vllm_hotfix.flow.apply_hotfix", "_parse_raw"),
    ("plan", "vllm_hotfix.flow.apply_hotfix", "_plan_raw"),
    ("prepare (plan + record)", "vllm_hotfix.flow.transaction", "_prepare"),
    ("keep (backups, patch bytes)", "vllm_hotfix.flow.transaction", "_keep"),
    ("commit (journal.commit)", "vllm_hotfix.flow.transaction", "commit"),
    ("  check (paths, unchanged)", "vllm_hotfix.txn.journal", "_check_current"),
    ("  journal (backups, json)", "vllm_hotfix.txn.journal", "_write_journal"),
    ("  new contents (temps, fsync)", "vllm_hotfix.txn.journal", "_write_temps"),
    ("  switch (renames)", "vllm_hotfix.txn.journal", "_switch"),
    ("  fsync directories", "vllm_hotfix.txn.journal", "_fsync_dirs"),
    ("post-check (catalog applies)", "vllm_hotfix.flow.plan", "check_after"),
    ("prune (the state dir, after the commit)", "vllm_hotfix_guard.txn.state", "TargetState.prune"),
]


def phases(base: Path, diff: Path, scratch: Path, rounds: int) -> tuple[dict[str, float], float]:
    """Median wall seconds of each phase of hotfix's apply, run in this process (see the module doc)."""
    import importlib

    from vllm_hotfix.flow.apply_hotfix import apply_raw

    spent: dict[str, list[float]] = {}
    wrapped = []
    for label, module_name, attribute in PHASES:
        module = importlib.import_module(module_name)
        *owner, attribute = attribute.split(".")
        for name in owner:  # a method: wrap it on its class
            module = getattr(module, name)
        original = getattr(module, attribute, None)
        if original is None:  # a phase this version does not have as one function
            continue

        def timed(*args, _original=original, _label=label, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_label][-1] += time.perf_counter() - start

        setattr(module, attribute, timed)
        wrapped.append((module, attribute, original))
    totals = []
    try:
        for round_no in range(rounds):
            for label, *_ in PHASES:
                spent.setdefault(label, []).append(0.0)
            copy = scratch / f"phases-{round_no}"
            shutil.copytree(base, copy, symlinks=True)
            os.sync()
            os.environ["HOTFIX_STATE_DIR"] = str(scratch / f"phases-state-{round_no}")
            start = time.perf_counter()
            apply_raw(diff, copy, strip=None, reverse=False, dry_run=False, hotfix_id=None)
            totals.append(time.perf_counter() - start)
            shutil.rmtree(copy)
            os.sync()
    finally:
        for module, attribute, original in wrapped:
            setattr(module, attribute, original)
    return {label: statistics.median(values) for label, values in spent.items() if any(values)}, statistics.median(totals)


def start_up(env: dict, rounds: int) -> float:
    """Median wall seconds of a process that starts and imports what `hotfix apply --patch` runs."""
    argv = [sys.executable, "-c", "import vllm_hotfix.cli, vllm_hotfix.commands.apply, vllm_hotfix.flow.apply_hotfix, "
                                  "vllm_hotfix.flow.transaction, vllm_hotfix.flow.parallel_plan"]
    subprocess.run(argv, env=env, check=True)  # bytecode
    times = []
    for _ in range(max(rounds, 3)):
        start = time.perf_counter()
        subprocess.run(argv, env=env, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--phase-rounds", type=int, default=3)
    parser.add_argument("--before", metavar="PYTHON", help="also time the vllm-hotfix this interpreter imports "
                        "(e.g. main's venv), in the same rounds, for a before/after")
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
        durable = scratch / "durable.txt"
        durable.write_text("".join(f"{path}\n" for path in written_by(base, diff, scratch / "probe")))
        commands = tools(diff, durable, args.before)
        for name in ("hotfix", "hotfix before"):
            if name in commands:  # bytecode written, as from an installed wheel
                subprocess.run([*commands[name][:-2], "--root", str(base), "--dry-run"], env=env,
                               check=True, capture_output=True)
        results: dict[str, Path] = {}
        names = list(commands)
        for round_no in range(args.rounds):
            # Rotate who goes first, and delete the round's copies only after all tools ran, so that
            # no tool systematically inherits another's deferred file system work.
            order = names[round_no % len(names):] + names[:round_no % len(names)]
            copies = {}
            for name in order:
                copies[name] = scratch / f"{name.replace(' ', '-')}-{round_no}"
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
        identical = all(same_tree(results[name], results["git apply"]) for name in ("hotfix", "hotfix before") if name in results)
        spent, in_process = phases(base, diff, scratch, args.phase_rounds)
        startup = start_up(env, args.phase_rounds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    cpus = {name: statistics.median(values) for name, values in cpu.items()}
    for name, median in medians.items():
        runs = ", ".join(f"{t:.3f}" for t in times[name])
        print(f"{name:13s} median {median:.3f} s   cpu {cpus[name]:.3f} s   ({runs})")
    for ours in [name for name in ("hotfix", "hotfix before") if name in medians]:
        for peer in ("git apply", "git apply+sync", "patch -p1"):
            print(f"{ours} / {peer:14s} = {medians[ours] / medians[peer]:.2f}x wall, "
                  f"{cpus[ours] / cpus[peer]:.2f}x cpu")
    print(f"hotfix tree{'s' if args.before else ''} identical to git apply tree: {identical}")
    print(f"phases of hotfix's apply (in this process, median of {args.phase_rounds}; wall):")
    print(f"  {'start-up (interpreter + the imports)':40s} {startup * 1e3:7.1f} ms")
    for label, seconds in spent.items():
        print(f"  {label:40s} {seconds * 1e3:7.1f} ms")
    print(f"  {'apply_raw in this process, in all':40s} {in_process * 1e3:7.1f} ms")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
