"""The prefilter never drops a line that matters (issue 23, doctor-speed).

Two independent checks: a proof on the patterns themselves (``prefilter.covers``: every match of every
pattern the engine reads a line with holds a needle), and a differential one on real lines (every file
of the corpus and of tests/doctor/logs scanned through the prefilter gives exactly what a scan of every
line gives). Then the prefilter's own mechanics: automata of at most GROUP needles, the bytes.find
fallback finding the same lines, blocks cut anywhere (a line over a block's end)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from test_manifest import manifest_data, write_manifest
from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix.doctor import contexts, engine, log_facts, normalise
from vllm_hotfix.doctor.engine import needles_for, scan
from vllm_hotfix.doctor.prefilter import GROUP, Prefilter, Prefiltered, covers, groups

HERE = Path(__file__).parent
CATALOG = [m for m in Catalog.load(env={}).latest() if m.signatures]
NEEDLES = [n.decode() for n in needles_for(CATALOG)]
LOGS = sorted((HERE / "corpus").glob("*.log")) + sorted((HERE / "logs").iterdir())


def engine_patterns() -> list[tuple[str, str]]:
    """(what, pattern): every regular expression and literal with which the engine reads a line and
    finds something in it (an error line, a fact, a guard line, an Xid continuation, a signature).
    Not here: the noise rules (NOT_AN_ERROR, role = "noise"): they only silence a line that is
    already an error line or already carries a first-error signature, and both hold their needles;
    the context tests a signature's match is checked against (doctor.contexts: a fault-report line, a
    table, a dump): they only run on a line a signature matched, which holds a needle already."""
    found = [("normalise.ERROR_LINE", normalise.ERROR_LINE.pattern), ("engine.GUARD_LINE", engine.GUARD_LINE.pattern),
             ("log_facts.ARCHITECTURE", log_facts.ARCHITECTURE.pattern), ("log_facts.KERNEL", log_facts.KERNEL.pattern),
             ("engine.EXCEPTION (a root error)", engine.EXCEPTION.pattern),
             # lines whose context a later line depends on: a fault report's first line, a Python frame (the
             # line under it is its source line); every other context is decided on a line a signature matches
             ("contexts.FAULT_START", contexts.FAULT_START.pattern), ("contexts.PY_FRAME", contexts.PY_FRAME.pattern)]
    found += [(f"log_facts.VERSION_LINES[{i}]", p.pattern) for i, (p, _, _) in enumerate(log_facts.VERSION_LINES)]
    found += [(f"log_facts.FLAGS {flag}", p.pattern) for p, flag in log_facts.FLAGS]
    found += [(f"log_facts.ENGINES {needle!r}", re.escape(needle)) for needle, _, _ in log_facts.ENGINES]
    found += [(f"log_facts.PLATFORMS {needle!r}", re.escape(needle)) for needle, _ in log_facts.PLATFORMS]
    found += [(f"Xid continuation {needle!r}", re.escape(needle)) for needle in ("NVRM:", *engine.XID_NEEDLES)]
    found += [(f"{m.id} signatures[{i}]", s.pattern) for m in CATALOG for i, s in enumerate(m.signatures)
              if s.roles not in (("noise",), ("error-line",))]  # error-line ones count only where ERROR_LINE matches
    return found


@pytest.mark.parametrize("what, pattern", engine_patterns(), ids=[w for w, _ in engine_patterns()])
def test_every_match_of_every_pattern_the_engine_reads_holds_a_needle(what, pattern):
    assert covers(pattern, NEEDLES), f"{what}: /{pattern}/ can match a line without any of the prefilter's needles"


def test_a_signature_counted_only_on_error_lines_needs_no_needle_of_its_own():
    """It is matched only on a line ERROR_LINE matches (proved covered above): the error needles find it."""
    from vllm_hotfix.catalog.index import Catalog as _Catalog

    rpc = next(s for m in CATALOG for s in m.signatures if s.pattern == "RPC call to sample_tokens aborted")
    assert rpc.roles == ("error-line",) and rpc.anchor.encode() not in needles_for(CATALOG)
    log = (b"INFO 12-01 00:00:00 [x.py:1] RPC call to sample_tokens aborted (a mention, no error word)\n"
           b"(EngineCore_DP0 pid=1) ERROR 12-01 00:00:01 [core.py:868] RuntimeError: RPC call to sample_tokens aborted: "
           b"a worker process died before responding\n")
    found = scan([("x.log", [log])], [m for m in _Catalog.load(env={}).latest() if m.signatures])
    mamba = next(m for m in found.matches if m.manifest.id == "mamba-align-block-size")
    assert [(e.line.lineno, e.role) for e in mamba.evidence if e.signature.pattern == rpc.pattern] == [(2, "error-line")]
    assert found == scan([("x.log", [every_line(log)])], CATALOG)


def test_a_user_catalog_signature_brings_its_own_needle(tmp_path):
    write_manifest(tmp_path, manifest_data(id="user", signatures=[
        {"pattern": r"frobnicate_kernel\(\d+\)", "role": "context", "explain": "x"},
        {"pattern": r"(?:ERROR|WARNING) in widget_[a-z]+", "role": "first-error", "explain": "x"}]), name="user")
    manifests = [m for m in Catalog.load([tmp_path], env={}).latest() if m.signatures]
    needles = [n.decode() for n in needles_for(manifests)]
    assert "frobnicate_kernel(" in needles and " in widget_" in needles
    assert all(covers(s.pattern, needles) for m in manifests for s in m.signatures
               if s.roles not in (("noise",), ("error-line",)))


@pytest.mark.parametrize("pattern, needles, proved", [
    ("ERROR", ["ERROR"], True),
    (r"\bERROR\b", ["ERROR"], True),
    ("CUDA error: an illegal", ["rror"], True),
    (r"(?:ERROR|Error)", ["ERROR", "rror"], True),
    (r"(?:ERROR|Warning)", ["ERROR"], False),  # an alternative without a needle
    (r"vllm[-_]ascend==", ["vllm-ascend==", "vllm_ascend=="], True),
    (r"vllm[-_]ascend==", ["vllm-ascend=="], False),
    (r"num_spec(?:ulative)?_tokens", ["num_spec"], True),
    (r"architectures?['\"]?\s*=", ["architecture"], True),
    (r"#0 +\w+", ["#0 "], True),  # ' +': at least one space
    (r"\w+Error", ["rror"], True),
    (r"\w+", ["x"], False),
    (r"(?i)error", ["error"], False),  # the needles are searched case-sensitively
    (r"Initializing a V\d LLM engine \(v?", ["LLM engine (v"], False),  # 'v?' may be absent
    (r"(?<![\w-])vllm==", ["vllm=="], True),
    (r"(", ["x"], False),
])
def test_covers_proves_only_what_holds(pattern, needles, proved):
    assert covers(pattern, needles) is proved


def every_line(data: bytes) -> Prefiltered:
    """No prefilter at all: every line of ``data`` handed to the engine."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return Prefiltered(tuple(enumerate(lines)), len(lines))


@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_on_real_lines_the_prefilter_keeps_everything_a_scan_of_every_line_finds(path):
    data = path.read_bytes()
    assert scan([(path.name, [data])], CATALOG) == scan([(path.name, [every_line(data)])], CATALOG)


def test_lines_that_only_a_fact_reader_needs_are_kept():
    """A banner line without any flag in it, and a vllm_ascend frame (the platform): lines no error
    rule and no signature needs, only log_facts.read_facts."""
    log = (b"(EngineCore_DP0 pid=1) INFO 11-30 22:40:01 [core.py:93] Initializing a V1 LLM engine (v0.30.0) with "
           b"config: model='Qwen/Qwen3-Next-80B-A3B'\n"
           b'  File "/vllm-workspace/vllm-ascend/vllm_ascend/worker/model_runner_v1.py", line 1580, in execute_model\n'
           b"INFO 11-30 22:40:02 [w.py:1] plain line\n")
    found = scan([("x.log", [log])], CATALOG)
    assert found == scan([("x.log", [every_line(log)])], CATALOG)
    assert {(f.kind, f.value) for f in found.facts} >= {("version", "0.30.0"), ("engine", "vllm"), ("platform", "ascend")}


def test_needles_are_split_into_automata_of_at_most_GROUP_shortest_together():
    needles = needles_for(CATALOG)
    parts = groups(needles)
    assert sorted(n for g in parts for n in g) == sorted(needles)
    assert all(len(g) <= GROUP for g in parts) and len(parts) == -(-len(needles) // GROUP)
    assert max(len(n) for n in parts[0]) <= min(len(n) for n in parts[-1])
    assert max(len(g) for g in parts) - min(len(g) for g in parts) <= 1


def test_aho_corasick_and_bytes_find_find_the_same_lines():
    rng = random.Random(23)
    needles = needles_for(CATALOG)
    words = [b"INFO", b"request", b"tokens/s", b"(APIServer pid=1)", b"\xe2\x96\x88", b"x" * 300] + list(needles)
    data = b"".join(b" ".join(rng.choice(words) for _ in range(rng.randrange(0, 6))) + b"\n" for _ in range(20_000))
    data += b"ERROR last line without a newline"
    fast, slow = Prefilter(needles), Prefilter(needles, python=True)
    assert fast.kind == "aho-corasick" and slow.kind == "python"
    assert fast(data) == slow(data) and fast(data).count == 20_001
    for start, end in ((0, len(data)), (data.index(b"\n") + 1, data.rindex(b"\n") + 1)):
        assert fast(data, start, end) == slow(data, start, end)


@pytest.mark.parametrize("size", [1, 2, 7, 64, 4096])
def test_blocks_cut_anywhere_give_the_result_of_one_block(size):
    """A line over a block's end (the command reads fixed-size blocks): the same findings, line numbers
    and line count, whatever the block size, also with a last line without a newline."""
    data = b"".join((HERE / "logs" / name).read_bytes() for name in ("001-mamba-align.log", "001-dmesg.txt", "001-cuda-gdb.txt"))
    data += b"ERROR 12-01 00:00:00 [x.py:1] no newline at the end"
    whole = scan([("x.log", [data])], CATALOG)
    assert scan([("x.log", [data[i:i + size] for i in range(0, len(data), size)])], CATALOG) == whole
    assert whole.lines == data.count(b"\n") + 1


def test_random_cuts_and_empty_blocks_change_nothing():
    rng = random.Random(7)
    data = (HERE / "logs" / "000-server.log").read_bytes() + (HERE / "logs" / "001-mamba-align.log").read_bytes()
    whole = scan([("x.log", [data])], CATALOG)
    for _ in range(20):
        cuts = sorted(rng.sample(range(len(data)), 12))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
        pieces.insert(rng.randrange(len(pieces)), b"")
        assert scan([("x.log", pieces)], CATALOG) == whole


@pytest.mark.parametrize("reuse", [False, True], ids=["new blocks", "one reused buffer"])
def test_the_commands_reader_gives_the_result_of_one_block(reuse):
    """commands.doctor.blocks: fixed-size reads (a bytearray refilled in place with ``reuse``, as the
    command reads files) scanned as they come give what one block gives."""
    import io

    from vllm_hotfix.commands.doctor_logs import blocks

    data = b"".join((HERE / "logs" / name).read_bytes() for name in ("000-server.log", "001-mamba-align.log", "001-dmesg.txt"))
    whole = scan([("x.log", [data])], CATALOG)
    for size in (5, 333, 4096):
        assert scan([("x.log", blocks(io.BytesIO(data), size, reuse=reuse))], CATALOG) == whole


def test_the_grep_prefilter_counts_a_last_line_without_a_newline():
    import io
    import shutil

    from vllm_hotfix.commands.doctor_logs import parts as _parts

    if not shutil.which("grep"):
        pytest.skip("no grep")
    data = (HERE / "logs" / "001-mamba-align.log").read_bytes() + b"ERROR 12-01 00:00:00 [x.py:1] the end, no newline"
    parts = _parts(io.BytesIO(data), needles_for(CATALOG), grep=shutil.which("grep"))
    found = scan([("x.log", parts)], CATALOG)
    assert found == scan([("x.log", [data])], CATALOG) and found.lines == data.count(b"\n") + 1
