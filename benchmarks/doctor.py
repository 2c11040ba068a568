"""`hotfix doctor` on a generated >= 1 GB multi-process vLLM log, against `grep -E` with the same signatures.

    python benchmarks/doctor.py [--size-gb 1.0] [--rounds 5]

The log (written under a temporary directory, deleted at the end) is the traffic of a long run: engine
metrics, access-log lines, worker debug lines from 8 processes, one incident of seed 001 near the end.
grep gets every signature pattern of the catalog plus doctor's error-line and version patterns
(`grep -E -n -f PATTERNS LOG > FILE`: it prints every matching line, which doctor also looks at).
doctor runs end to end (`hotfix doctor LOG --json`: interpreter start, catalog load, scan, verdict), once
with its default prefilter (`grep -F` over the needles, this process copying the log into its pipe and
counting lines; its CPU time includes grep's) and once with HOTFIX_DOCTOR_GREP= (Python `bytes.find`).
Each round runs both tools, the order rotated every round; the file is read once first so both read
it from the page cache. Medians of wall and CPU (user + system) time, and their ratios.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix.doctor.engine import VERSION_BANNERS
from vllm_hotfix.doctor.normalise import ERROR_LINE

LOGS = Path(__file__).resolve().parent.parent / "tests" / "doctor" / "logs"
TRAFFIC = [
    "(APIServer pid=1) INFO 11-30 {t} [loggers.py:123] Engine 000: Avg prompt throughput: {a}.4 tokens/s, Avg generation "
    "throughput: {b}.6 tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: 1.{r}%, Prefix cache hit rate: 71.4%",
    "(APIServer pid=1) INFO:     10.0.3.{r}:5{a} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
    "(APIServer pid=1) INFO 11-30 {t} [logger.py:71] Received request chatcmpl-{a}{b}: prompt: '<|user|>summarise the "
    "report in three lines', params: SamplingParams(n=1, temperature=0.0, max_tokens=512)",
    "(Worker_TP{r} pid=27{r}) DEBUG 11-30 {t} [gpu_model_runner.py:2211] step done in {b}.3 ms, batch 16, tokens 64",
    "(EngineCore_DP0 pid=212) DEBUG 11-30 {t} [scheduler.py:402] scheduled {r} requests, {a} tokens, preempted 0",
    "(EngineCore_DP0 pid=212) INFO 11-30 {t} [metrics.py:88] SpecDecoding metrics: Mean acceptance length: 2.{r}5, "
    "Accepted throughput: {b}.1 tokens/s, Drafted throughput: {a}.9 tokens/s",
]


def generate(path: Path, size: int) -> None:
    rng = random.Random(1)
    block = "\n".join(
        rng.choice(TRAFFIC).format(t=f"22:{rng.randrange(60):02d}:{rng.randrange(60):02d}", a=rng.randrange(1000, 9999),
                                   b=rng.randrange(10, 999), r=rng.randrange(8))
        for _ in range(40_000)).encode() + b"\n"
    head, tail = (LOGS / "001-mamba-align.log").read_bytes().split(b"(Worker_TP0 pid=276) ERROR", 1)
    with open(path, "wb") as out:
        out.write(head)
        while out.tell() < size:
            out.write(block)
        out.write(b"(Worker_TP0 pid=276) ERROR" + tail + (LOGS / "001-dmesg.txt").read_bytes())


def grep_patterns() -> list[str]:
    """The same set for grep -E: signatures, error lines, version banners (Python syntax -> POSIX ERE)."""
    pythonic = [s.pattern for m in Catalog.load(env={}).latest() for s in m.signatures]
    pythonic += [ERROR_LINE.pattern] + [p.pattern for _, p, _ in VERSION_BANNERS]
    return [re.sub(r"\(\?:", "(", p).replace(r"\d", "[0-9]") for p in pythonic]


def timed(argv: list[str], expect: tuple[int, ...], env: dict, out: Path) -> tuple[float, float]:
    """Wall and CPU seconds; stdout goes to a file (GNU grep stops at the first match when it is /dev/null)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with open(out, "wb") as sink:
        done = subprocess.run(argv, stdout=sink, stderr=subprocess.PIPE, env={**os.environ, **env})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in expect:
        raise SystemExit(f"{argv[0]} failed ({done.returncode}): {done.stderr.decode()[:400]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="doctor-bench-"))
    try:
        log = work / "vllm.log"
        generate(log, int(args.size_gb * (1 << 30)))
        patterns = work / "patterns.txt"
        patterns.write_text("\n".join(grep_patterns()) + "\n")
        doctor = [sys.executable, "-m", "vllm_hotfix", "doctor", str(log), "--json"]
        tools = {
            "grep -E": (["grep", "-E", "-n", "-f", str(patterns), str(log)], (0, 1), {}),
            "hotfix doctor": (doctor, (1,), {}),  # exit 1: it finds the seed 001 incident
            "doctor, no grep": (doctor, (1,), {"HOTFIX_DOCTOR_GREP": ""}),  # the pure-Python prefilter
        }
        with open(log, "rb") as warm:  # page cache
            while warm.read(64 << 20):
                pass
        size = log.stat().st_size
        print(f"log: {size / (1 << 30):.2f} GiB, {sum(1 for _ in open(log, 'rb')):,} lines; "
              f"{len(grep_patterns())} patterns; {os.cpu_count()} cores; {args.rounds} rounds, order rotated")
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in tools}
        names = list(tools)
        for round_ in range(args.rounds):
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                times[name].append(timed(*tools[name], work / "out.txt"))
        wall = {n: statistics.median(w for w, _ in t) for n, t in times.items()}
        cpu = {n: statistics.median(c for _, c in t) for n, t in times.items()}
        for name in names:
            print(f"{name:<16} wall {wall[name]:6.2f} s (best {min(w for w, _ in times[name]):.2f})  cpu {cpu[name]:6.2f} s  "
                  f"{size / wall[name] / 1e9:.2f} GB/s")
        for name in names[1:]:
            print(f"{name} / grep -E: wall {wall[name] / wall['grep -E']:.2f}x, cpu {cpu[name] / cpu['grep -E']:.2f}x"
                  " (goal: <= 2x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
