"""Full `hotfix audit` of the real vLLM 0.30.0 install (5,101 files, 771 MB) against the hashing limit.

    python benchmarks/audit.py [--rounds 5] [--before OTHER_VENV_PYTHON]

limit = bytes / single-core sha256 speed (hashlib on a 256 MiB buffer, measured right before each
audit round) / cores. Other processes share these cores, so a load-aware limit is printed too:
bytes / the throughput of `cores` threads hashing 256 MiB each at the same moment. The audit is timed in-process (record.audit) and end to end
(`hotfix audit vllm --python VENV_PYTHON`: interpreter start, probe, RECORD, hashing). Medians.
Files are read once first so every round hashes from the page cache, like the hashlib buffer.
The peer run in the same rounds (order rotating): ``openssl dgst -sha256`` reading and hashing the
same files (OpenSSL's sha256, as hashlib's), ``cores`` processes at once (xargs -P); ``--before PYTHON`` also times another vllm-hotfix's audit.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import realdata  # noqa: E402

from vllm_hotfix.install import record  # noqa: E402


def sha256_speed(buffer: bytes) -> float:
    start = time.perf_counter()
    hashlib.sha256(buffer).digest()
    return len(buffer) / (time.perf_counter() - start)


def parallel_sha256_speed(buffer: bytes, threads: int) -> float:
    """Bytes/s of ``threads`` threads hashing at once: what the shared cores really give right now."""
    workers = [threading.Thread(target=lambda: hashlib.sha256(buffer).digest()) for _ in range(threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return threads * len(buffer) / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", metavar="PYTHON", help="also time `hotfix audit` of the vllm-hotfix this "
                        "interpreter imports (e.g. main's venv), in the same rounds, for a before/after")
    args = parser.parse_args()

    venv = realdata.vllm_template("0.30.0")  # only read
    dist_info = venv.site_packages / "vllm-0.30.0.dist-info"
    entries = record.read_record(dist_info)
    cores = len(os.sched_getaffinity(0))
    buffer = os.urandom(1 << 20) * 256
    record.audit(venv.site_packages, entries)  # warm the page cache
    listing = "".join(f"{venv.site_packages / path}\0" for path, e in entries.items() if e.size).encode()
    per_process = -(-listing.count(b"\0") // cores)
    # read + hash the same files with OpenSSL's sha256 (hashlib's), `cores` processes at once
    peer = ["xargs", "-0", "-P", str(cores), "-n", str(per_process), "openssl", "dgst", "-sha256", "-r"]
    commands = {"hotfix audit": [sys.executable, "-m", "vllm_hotfix", "audit", "vllm", "--python", str(venv.python)]}
    if args.before:
        commands["hotfix audit before"] = [args.before, *commands["hotfix audit"][1:]]
    timed: dict[str, list[float]] = {name: [] for name in [*commands, "openssl dgst"]}
    timed_cpu: dict[str, list[float]] = {name: [] for name in timed}

    in_process, end_to_end, limits, shared_limits = [], [], [], []
    cpu_in_process, cpu_end_to_end = [], []  # user + system seconds: this process's threads / the child
    total = sum(e.size or 0 for e in entries.values())
    report = None
    for _ in range(args.rounds):
        limits.append(total / sha256_speed(buffer) / cores)
        shared_limits.append(total / parallel_sha256_speed(buffer, cores))
        start, cpu_start = time.perf_counter(), time.process_time()
        report = record.audit(venv.site_packages, entries)
        in_process.append(time.perf_counter() - start)
        cpu_in_process.append(time.process_time() - cpu_start)
        names = list(timed)
        names = names[len(in_process) % len(names):] + names[:len(in_process) % len(names)]  # rotate the order
        for name in names:
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            if name == "openssl dgst":
                done = subprocess.run(peer, input=listing, capture_output=True)
            else:
                done = subprocess.run(commands[name], capture_output=True, text=True)
            timed[name].append(time.perf_counter() - start)
            now = resource.getrusage(resource.RUSAGE_CHILDREN)
            timed_cpu[name].append(now.ru_utime - children.ru_utime + now.ru_stime - children.ru_stime)
            if done.returncode != 0:
                sys.exit(f"{name} failed ({done.returncode}): {done.stdout[-500:]}{done.stderr[-500:]}")
        end_to_end.append(timed["hotfix audit"][-1])
        cpu_end_to_end.append(timed_cpu["hotfix audit"][-1])
    assert report is not None and report.pristine

    # Other processes share these cores: each round is compared with the limit measured just before it.
    ratios = [t / limit for t, limit in zip(in_process, limits)]
    cli_ratios = [t / limit for t, limit in zip(end_to_end, limits)]
    limit = statistics.median(limits)
    print(f"install: {report.files_checked} files, {report.bytes / 1e6:.0f} MB; cores: {cores}; rounds: {args.rounds}; "
          f"load average: {os.getloadavg()[0]:.2f}")
    print(f"sha256 single core (hashlib, 256 MiB): {report.bytes / limit / cores / 1e9:.2f} GB/s -> limit {limit:.3f} s")
    print(f"audit in-process (record.audit): {statistics.median(in_process):.3f} s  "
          f"cpu {statistics.median(cpu_in_process):.3f} s  "
          f"ratio median {statistics.median(ratios):.2f}x, best {min(ratios):.2f}x  (goal <= 1.5x)")
    print(f"audit end to end (hotfix audit): {statistics.median(end_to_end):.3f} s  "
          f"cpu {statistics.median(cpu_end_to_end):.3f} s  "
          f"ratio median {statistics.median(cli_ratios):.2f}x, best {min(cli_ratios):.2f}x")
    for name in timed:
        print(f"{name:22s} end to end {statistics.median(timed[name]):.3f} s  cpu {statistics.median(timed_cpu[name]):.3f} s"
              + ("" if name == "openssl dgst" else
                 f"  / openssl dgst ({cores} processes) = {statistics.median(a / b for a, b in zip(timed[name], timed['openssl dgst'])):.2f}x"
                 f"  / limit = {statistics.median(a / b for a, b in zip(timed[name], limits)):.2f}x"))
    shared = [t / limit for t, limit in zip(in_process, shared_limits)]
    print(f"load-aware limit ({cores} threads hashing at once, same rounds): {statistics.median(shared_limits):.3f} s  "
          f"-> in-process ratio median {statistics.median(shared):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
