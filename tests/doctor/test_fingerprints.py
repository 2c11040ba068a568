"""doctor and the guard's fingerprint: logs of a two-node deployment (seed 004: Node0 and Node1) whose
nodes or ranks report different fingerprints, or none, are flagged."""

from __future__ import annotations

import json

from vllm_hotfix.doctor.engine import scan_text, scan

A, B = "hf1-0123456789abcdef", "hf1-fedcba9876543210"


def guard(pid: int, role: str, fingerprint: str | None) -> str:
    fp = f" fingerprint={fingerprint}" if fingerprint else ""
    return f"INFO 12-01 00:00:01 [guard.py:1] vllm-hotfix guard pid={pid} role={role}{fp}: qwen38-flash-next in effect\n"


def node(name: str, fingerprint: str | None, ranks=("EngineCore_DP0", "VllmWorker-0", "VllmWorker-1")) -> str:
    return f"INFO starting {name}\n" + "".join(guard(100 + i, r, fingerprint) for i, r in enumerate(ranks))


def test_same_fingerprint_everywhere_is_fine():
    findings = scan([("node0.log", [node("node0", A).encode()]), ("node1.log", [node("node1", A).encode()])], [])
    assert len(findings.fingerprints) == 6 and {f for _, f, _ in findings.fingerprints} == {A}
    assert findings.fingerprints[1][0] == "VllmWorker-0"
    assert findings.fingerprint_problem() is None


def test_a_node_with_another_patch_is_flagged():
    findings = scan([("node0.log", [node("node0", A).encode()]), ("node1.log", [node("node1", B).encode()])], [])
    assert findings.fingerprint_problem() == "2 different fingerprints"


def test_no_fingerprint_or_no_guard_line_is_flagged():
    assert scan_text(node("n", A) + guard(7, "main (vllm serve)", "hf1-none"), []).fingerprint_problem() \
        == "some processes report no fingerprint"
    assert scan_text(node("n", None), []).fingerprint_problem() == "some processes report no fingerprint"
    findings = scan([("node0.log", [node("node0", A).encode()]), ("node1.log", [b"INFO starting node1\n"])], [])
    assert findings.fingerprint_problem() == "no guard line in node1.log"
    assert scan_text("INFO nothing guarded here\n", []).fingerprint_problem() is None


def test_doctor_command_reports_and_exits_1(tmp_path, run_hotfix):
    (tmp_path / "node0.log").write_text(node("node0", A))
    (tmp_path / "node1.log").write_text(node("node1", B))
    done = run_hotfix("doctor", tmp_path / "node0.log", tmp_path / "node1.log")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "hotfix fingerprints differ across nodes / ranks: 2 different fingerprints" in done.stdout
    assert f"{B}" in done.stdout and "node1.log:2 [EngineCore_DP0]" in done.stdout
    report = json.loads(run_hotfix("doctor", tmp_path / "node0.log", tmp_path / "node1.log", "--json").stdout)
    assert report["fingerprints"]["problem"] == "2 different fingerprints"
    assert len(report["fingerprints"]["processes"]) == 6
