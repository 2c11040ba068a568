"""`hotfix doctor` on generated >= 1 GB vLLM logs, against `grep -E` in the same run.

    python benchmarks/doctor.py [--size-gb 1.0] [--rounds 5] [--shape traffic|info|both]

Two shapes of log (each written under a temporary directory, deleted at the end), with one incident of
seed 001 (its start-up lines, the crash and the real cuda-gdb lines of vllm#54173) near the end:

- ``traffic`` (today's): a long run's engine metrics, access-log lines and worker DEBUG lines from 8
  processes, many of which hold an error word or a needle;
- ``info`` (issue 23): mostly non-matching INFO lines as vLLM writes them in production (metrics, access
  log, "Received request ... prompt: ...", "Added request", "Finished request"), the shape of a real
  multi-day server log.

The peers: ``grep -E -n -f PATTERNS`` with every signature pattern of the catalog plus doctor's
error-line and version patterns (it prints every line doctor also looks at), and, on the ``info``
shape, ``grep -E 'ERROR|Error'`` (what an SRE types first). doctor runs end to end (`hotfix doctor LOG
--json`: interpreter start, catalog load, scan, verdict) with its default prefilter (SIMD Aho-Corasick
in-process, ``ahocorasick-rs``) and with ``HOTFIX_DOCTOR_PREFILTER=grep`` (``grep -F`` in a subprocess).
Each round runs every tool, the order rotated every round; the file is read once first so all read it
from the page cache, and doctor's bytecode is compiled first (as pip does when it installs the wheel). Medians of wall and CPU (user + system) time, and their ratios.
Goals (issue 23, info shape): doctor <= 1.5x grep -E with the catalog's patterns, <= 3x grep -E 'ERROR|Error'.

Then, on the ``info`` shape, where doctor's CPU time goes, measured in this process with the command's
own reader and the engine's own prefilter (medians, rotated; CPU seconds): reading the blocks,
counting their newlines, the Aho-Corasick automata, the prefilter's own Python, matching the candidate
lines (the engine's scan), and start-up + catalog + verdict (the command end to end on the log's first 64 KiB).
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
from vllm_hotfix.doctor.log_facts import VERSION_LINES
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


# Production INFO lines, shaped like the real ones in tests/doctor/corpus (vllm#36734, vllm-ascend#2349,
# Qwen3-VL#1756): none holds an error word or a catalog needle.
INFO = [
    "(APIServer pid=1) INFO 11-30 {t} [loggers.py:123] Engine 000: Avg prompt throughput: {a}.4 tokens/s, Avg generation "
    "throughput: {b}.6 tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: 1.{r}%, Prefix cache hit rate: 71.4%",
    "(APIServer pid=1) INFO:     10.0.3.{r}:5{a} - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
    "(APIServer pid=1) INFO 11-30 {t} [logger.py:41] Received request chatcmpl-{a}{b}f745bb35fc2b437c92035bf14a2a8c: prompt: "
    "'<|im_start|>user\\nsummarise the quarterly report in three short lines for the on-call team<|im_end|>\\n"
    "<|im_start|>assistant\\n', params: SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, "
    "repetition_penalty=1.0, temperature=0.6, top_p=0.95, top_k=20, min_p=0.0, seed=None, max_tokens={b}), "
    "prompt_token_ids: None, lora_request: None.",
    "(APIServer pid=1) INFO 11-30 {t} [async_llm.py:261] Added request chatcmpl-{a}{b}f745bb35fc2b437c92035bf14a2a8c.",
    "(APIServer pid=1) INFO 11-30 {t} [async_llm.py:420] Finished request chatcmpl-{a}{b}f745bb35fc2b437c92035bf14a2a8c.",
    "(EngineCore_DP0 pid=212) INFO 11-30 {t} [metrics.py:88] SpecDecoding metrics: Mean acceptance length: 2.{r}5, "
    "Accepted throughput: {b}.1 tokens/s, Drafted throughput: {a}.9 tokens/s, Accepted: {a} tokens, Drafted: {b}{a} tokens",
]
SHAPES = {"traffic": TRAFFIC, "info": INFO}


def generate(path: Path, size: int, templates: list[str]) -> None:
    rng = random.Random(1)
    block = "\n".join(
        rng.choice(templates).format(t=f"22:{rng.randrange(60):02d}:{rng.randrange(60):02d}", a=rng.randrange(1000, 9999),
                                     b=rng.randrange(10, 999), r=rng.randrange(8))
        for _ in range(40_000)).encode() + b"\n"
    head, tail = (LOGS / "001-mamba-align.log").read_bytes().split(b"(Worker_TP0 pid=276) ERROR", 1)
    with open(path, "wb") as out:
        out.write(head)
        while out.tell() < size:
            out.write(block)
        out.write(b"(Worker_TP0 pid=276) ERROR" + tail + (LOGS / "001-dmesg.txt").read_bytes()
                  + (LOGS / "001-cuda-gdb.txt").read_bytes())


def grep_patterns() -> list[str]:
    """The same set for grep -E: signatures, error lines, version banners (Python syntax -> POSIX ERE)."""
    pythonic = [s.pattern for m in Catalog.load(env={}).latest() for s in m.signatures]
    pythonic += [ERROR_LINE.pattern] + [p.pattern for p, _, _ in VERSION_LINES]
    return [re.sub(r"\(\?<!\[[^]]*\]\)", "", re.sub(r"\(\?:", "(", p)).replace(r"\d", "[0-9]") for p in pythonic]


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


def measure(shape: str, size: int, rounds: int, work: Path, patterns: Path) -> None:
    log = work / f"{shape}.log"
    generate(log, size, SHAPES[shape])
    doctor = [sys.executable, "-m", "vllm_hotfix", "doctor", str(log), "--json"]
    tools = {
        "grep -E catalog": (["grep", "-E", "-n", "-f", str(patterns), str(log)], (0, 1), {}),
        "hotfix doctor": (doctor, (1,), {}),  # exit 1: it finds the seed 001 incident
        "doctor, grep -F": (doctor, (1,), {"HOTFIX_DOCTOR_PREFILTER": "grep"}),
    }
    if shape == "info":
        tools["grep -E ERROR|Error"] = (["grep", "-E", "ERROR|Error", str(log)], (0, 1), {})
    with open(log, "rb") as warm:  # page cache
        while warm.read(64 << 20):
            pass
    print(f"\n[{shape}] log: {log.stat().st_size / (1 << 30):.2f} GiB, {sum(1 for _ in open(log, 'rb')):,} lines; "
          f"{len(grep_patterns())} patterns; {os.cpu_count()} cores; {rounds} rounds, order rotated")
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in tools}
    names = list(tools)
    for round_ in range(rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            times[name].append(timed(*tools[name], work / "out.txt"))
    wall = {n: statistics.median(w for w, _ in t) for n, t in times.items()}
    cpu = {n: statistics.median(c for _, c in t) for n, t in times.items()}
    for name in names:
        print(f"{name:<20} wall {wall[name]:6.2f} s (best {min(w for w, _ in times[name]):.2f})  cpu {cpu[name]:6.2f} s  "
              f"{log.stat().st_size / wall[name] / 1e9:.2f} GB/s")
    peers = [("grep -E catalog", "1.5x" if shape == "info" else "2x")] + ([("grep -E ERROR|Error", "3x")] if shape == "info" else [])
    for name in ("hotfix doctor", "doctor, grep -F"):
        for peer, goal in peers:
            print(f"{name} / {peer}: wall {wall[name] / wall[peer]:.2f}x, cpu {cpu[name] / cpu[peer]:.2f}x (goal: <= {goal})")
    if shape == "info":
        phases(log, rounds, work, cpu["hotfix doctor"], cpu["grep -E ERROR|Error"])
    log.unlink()


def phases(log: Path, rounds: int, work: Path, doctor_cpu: float, grep_cpu: float) -> None:
    """doctor's CPU time on ``log`` by phase (see the module docstring), next to grep's."""
    from vllm_hotfix.commands.doctor_logs import blocks
    from vllm_hotfix.doctor import scan
    from vllm_hotfix.doctor.engine import Prefilter, needles_for

    manifests = [m for m in Catalog.load(env={}).latest() if m.signatures]
    needles = needles_for(manifests)
    prefilter = Prefilter(needles)

    def read():
        with open(log, "rb") as stream:
            yield from blocks(stream, reuse=True)

    def each(work) -> None:
        for block in read():
            work(block)

    runs = {
        "read": lambda: each(lambda block: None),
        "read + count": lambda: each(lambda block: block.count(b"\n")),
        "read + automata": lambda: each(prefilter.starts),
        "read + prefilter": lambda: sum(1 for _ in prefilter.stream(read())),
        "engine scan": lambda: scan([(log.name, read())], manifests, prefilter_=prefilter),
        "start-up": lambda: timed([sys.executable, "-m", "vllm_hotfix", "doctor", str(tiny), "--json"], (1,), {}, out),
    }
    tiny, out = work / "tiny.log", work / "out.txt"  # the log's first 64 KiB: the seed 001 start-up lines
    with open(log, "rb") as stream:
        tiny.write_bytes(stream.read(1 << 16).rsplit(b"\n", 1)[0] + b"\n" + (LOGS / "001-cuda-gdb.txt").read_bytes())
    spent: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for round_ in range(rounds):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            start = time.process_time()
            result = runs[name]()
            spent[name].append(result[1] if name == "start-up" else time.process_time() - start)
    m = {name: statistics.median(times) for name, times in spent.items()}
    gib = log.stat().st_size / (1 << 30)
    parts = [("read the blocks", m["read"]), ("count newlines", m["read + count"] - m["read"]),
             (f"Aho-Corasick ({len(needles)} needles, {len(prefilter.groups)} automata)", m["read + automata"] - m["read"]),
             ("prefilter's Python (line starts, copies)", m["read + prefilter"] - m["read + automata"] - (m["read + count"] - m["read"])),
             ("matching candidate lines", m["engine scan"] - m["read + prefilter"]),
             ("start-up, catalog, verdict (doctor on 64 KiB)", m["start-up"])]
    print(f"where doctor's CPU time goes on this {gib:.2f} GiB log (medians of {rounds}); grep -E 'ERROR|Error' "
          f"{grep_cpu:.2f} s, 3x that {3 * grep_cpu:.2f} s:")
    for name, seconds in parts:
        print(f"  {name:<48} {seconds:6.3f} s  {seconds / doctor_cpu * 100:5.1f}%")
    print(f"  {'sum of the phases':<48} {sum(s for _, s in parts):6.3f} s")
    print(f"  {'hotfix doctor end to end (the rounds above)':<48} {doctor_cpu:6.3f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shape", choices=("traffic", "info", "both"), default="both")
    args = parser.parse_args()
    # doctor runs as installed: pip compiles a wheel's bytecode at install, so compile it here too (an
    # environment with PYTHONDONTWRITEBYTECODE=1 would otherwise compile the package on every run)
    import vllm_hotfix

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(vllm_hotfix.__file__).parent)], check=True)
    work = Path(tempfile.mkdtemp(prefix="doctor-bench-"))
    try:
        patterns = work / "patterns.txt"
        patterns.write_text("\n".join(grep_patterns()) + "\n")
        for shape in (("traffic", "info") if args.shape == "both" else (args.shape,)):
            measure(shape, int(args.size_gb * (1 << 30)), args.rounds, work, patterns)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
