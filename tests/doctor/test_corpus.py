"""doctor on real log lines from public issues (tests/doctor/corpus/, each file names its source).

Hard negatives share generic lines with a catalog case (an illegal memory access, 507011, an MTE
error, CUDA_ERROR_ILLEGAL_ADDRESS, an RPC timeout, an AssertionError) but are other bugs; whole-log
negatives are real start-up lines of a hybrid model with prefix caching plus another bug's real crash;
real whole logs are one public log as posted, whole (engine core deaths, worker start-up failures,
RPC aborts, a cuda-gdb session, an illegal memory access alone). None may give a confident verdict,
and none may even hold unvetoed specific evidence (so no in-range release could make it confident);
``no-candidate`` files may not even be "possible" (a generic error alone names nothing); every
positive is at least "possible"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix.doctor import scan_text

CORPUS = Path(__file__).parent / "corpus"
FILES = sorted(CORPUS.glob("*.log"))
CATALOG = [m for m in Catalog.load(env={}).latest() if m.signatures]


def header(path: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# ") and ":" in line:
            key, _, value = line[2:].partition(":")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def log_lines(path: Path) -> str:
    return "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                   if not (line.startswith("# ") and line[2:].split(":", 1)[0] in ("source", "kind", "shares", "expect", "note")))


def test_the_corpus_is_what_the_issue_asks_for():
    kinds = [header(p)["kind"][0] for p in FILES]
    assert all(header(p).get("source") and all(s.startswith("https://github.com/") for s in header(p)["source"]) for p in FILES)
    assert kinds.count("hard-negative") >= 30 and kinds.count("whole-log-negative") >= 3
    assert kinds.count("real-whole-log-negative") >= 10
    shares = [s for p in FILES if header(p)["kind"][0] != "positive" for s in header(p)["shares"][0].split()]
    assert shares.count("mamba-align-block-size") >= 10 and shares.count("glm-conv-null-slot") >= 10
    assert shares.count("qwen38-flash-next") + shares.count("qwen38-draft-rejected-assert") >= 5


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_corpus_file(path):
    expect = header(path)["expect"][0].split()
    found = scan_text(log_lines(path), CATALOG, source=path.name)
    by_id = {m.manifest.id: m for m in found.matches}
    if expect[0] == "none":
        assert not [m.manifest.id for m in found.matches if m.tier == "specific"], "specific evidence in a negative"
    elif expect[0] == "no-candidate":
        assert not [m.manifest.id for m in found.matches if m.tier in ("specific", "condition")], "a candidate in a negative"
    elif expect[0] == "possible":
        assert expect[1] in by_id and by_id[expect[1]].tier in ("specific", "generic"), [m.manifest.id for m in found.matches]
    elif expect[0] == "confident":
        assert by_id[expect[1]].tier == "specific"
    else:
        assert by_id[expect[1]].tier == "veto"


def test_no_confident_verdict_on_any_negative_through_the_cli(run_hotfix, tmp_path):
    negatives = [p for p in FILES if header(p)["expect"][0] in ("none", "no-candidate")]
    logs = []
    for path in negatives:
        logs.append(tmp_path / path.name)
        logs[-1].write_text(log_lines(path), encoding="utf-8")
    for log in logs:  # one at a time: the first errors of different bugs must not meet
        done = run_hotfix("doctor", log, "--json")
        assert done.returncode == 9, (log.name, done.stdout[-2000:], done.stderr)
        report = json.loads(done.stdout)
        assert not [v["id"] for v in report["verdicts"] if v["level"] == "confident"], log.name
        if header(CORPUS / log.name)["expect"][0] == "no-candidate":
            assert not [v["id"] for v in report["verdicts"] if v["level"] == "possible"], log.name
