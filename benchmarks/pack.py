"""`hotfix pack` of a 1,160-file export against `tar -czf` of the same files, side by side; prints
medians and the ratio (budget: <= 2x).

    python benchmarks/pack.py [--rounds 7] [--files 1160]

The export is real code: every file the real vLLM 0.29.0 -> 0.30.0 diff changes or creates, as 0.30.0
has it (1,0xx files), then further 0.30.0 files in path order up to ``--files`` (the size of the
patch-release backport the budget names), written as `hotfix export` writes them (one hotfix, files at
``<id>/<path>``, a lock with each file's sha256 and its 0.29.0 baseline).

The peer is GNU ``tar -czf OUT -C EXPORT .`` (gzip level 6, as pack's layer): the same bytes read and
compressed. hotfix does more -- Python start-up, reading the lock and checking each file's sha256,
hashing the layer twice (tar and gzip), the configs and manifests of two platforms, every blob
fsynced -- and runs as `python -m vllm_hotfix pack` with its bytecode cached. Both are subprocesses,
the order rotating each round, outputs removed between rounds. Wall and CPU (user + system) time.
"""

from __future__ import annotations

import argparse
import hashlib
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

from vllm_hotfix_guard.core.diff import parse_patch  # noqa: E402
from vllm_hotfix_guard.txn.hotfix_lock import Lock, LockedFile, LockedHotfix, dump_lock  # noqa: E402

HOTFIX = "patch-release-backport"


def make_export(directory: Path, count: int) -> int:
    """The export of ``count`` real files; returns how many came from the diff itself."""
    old, new = realdata.vllm_source_tree("0.29.0"), realdata.vllm_source_tree("0.30.0")
    patch = parse_patch(realdata.vllm_source_diff("0.29.0", "0.30.0").read_bytes())
    changed = sorted({fp.new_path for fp in patch.files if fp.new_path and (new / fp.new_path).is_file()})
    rest = sorted(p.relative_to(new).as_posix() for p in (new / "vllm").rglob("*") if p.is_file())
    paths = (changed + [p for p in rest if p not in set(changed)])[:count]
    files = []
    for path in paths:
        data = (new / path).read_bytes()
        target = directory / HOTFIX / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        before = old / path
        files.append(LockedFile(path, hashlib.sha256(data).hexdigest(),
                                hashlib.sha256(before.read_bytes()).hexdigest() if before.is_file() else None,
                                f"{HOTFIX}/{path}"))
    lock = Lock("/usr/local/lib/python3.12/dist-packages",
                (LockedHotfix(HOTFIX, 1, "vllm", "vllm", "0.29.0", None, tuple(files)),), generator="benchmark")
    (directory / "hotfix.lock").write_bytes(dump_lock(lock))
    return min(len(changed), count)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--files", type=int, default=1160)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pack-bench-") as scratch:
        scratch = Path(scratch)
        export = scratch / "export"
        from_diff = make_export(export, args.files)
        size = sum(p.stat().st_size for p in export.rglob("*") if p.is_file())
        print(f"export: {args.files} files ({from_diff} changed or created by 0.29.0 -> 0.30.0), "
              f"{size / 1e6:.1f} MB; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        commands = {
            "hotfix pack": lambda out: [sys.executable, "-m", "vllm_hotfix", "pack", "--export-dir", str(export),
                                        "--to", str(out)],
            "tar -czf": lambda out: ["tar", "-czf", str(out), "-C", str(export), "."],
        }
        subprocess.run(commands["hotfix pack"](scratch / "warm"), env=env, check=True, capture_output=True)
        times: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        sizes: dict[str, int] = {}
        names = list(commands)
        for round_no in range(args.rounds):
            for name in names[round_no % 2:] + names[:round_no % 2]:
                out = scratch / f"out-{round_no}-{name.split()[0]}"
                used = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                done = subprocess.run(commands[name](out), env=env, capture_output=True)
                elapsed = time.perf_counter() - start
                now = resource.getrusage(resource.RUSAGE_CHILDREN)
                if done.returncode != 0:
                    print(f"{name} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
                    return 1
                times.setdefault(name, []).append(elapsed)
                cpu.setdefault(name, []).append(now.ru_utime - used.ru_utime + now.ru_stime - used.ru_stime)
                sizes[name] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) if out.is_dir() else out.stat().st_size
                shutil.rmtree(out) if out.is_dir() else out.unlink()
    medians = {name: statistics.median(values) for name, values in times.items()}
    cpus = {name: statistics.median(values) for name, values in cpu.items()}
    for name, median in medians.items():
        runs = ", ".join(f"{t:.3f}" for t in times[name])
        print(f"{name:12s} median {median:.3f} s   cpu {cpus[name]:.3f} s   output {sizes[name] / 1e6:.2f} MB   ({runs})")
    print(f"hotfix pack / tar -czf = {medians['hotfix pack'] / medians['tar -czf']:.2f}x wall, "
          f"{cpus['hotfix pack'] / cpus['tar -czf']:.2f}x cpu (budget: <= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
