"""The pure log engine on log excerpts written from the incident reports (tests/doctor/logs/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix.doctor import EPISODE, scan, scan_text
from vllm_hotfix.doctor.normalise import is_error, normalise

LOGS = Path(__file__).parent / "logs"
CATALOG = [m for m in Catalog.load(env={}).latest() if m.signatures]


def findings(*names: str, chunk_lines: int | None = None, replace: tuple[str, str] | None = None):
    sources = []
    for name in names:
        data = (LOGS / name).read_bytes()
        if replace:
            data = data.replace(replace[0].encode(), replace[1].encode())
        lines = data.splitlines(keepends=True)
        step = chunk_lines or len(lines)
        sources.append((name, [b"".join(lines[i:i + step]) for i in range(0, len(lines), step)]))
    return scan(sources, CATALOG)


def match(found, hotfix_id):
    return next((m for m in found.matches if m.manifest.id == hotfix_id), None)


@pytest.mark.parametrize("raw, process, text", [
    ("(EngineCore_DP0 pid=212) ERROR 11-30 22:51:38 [core.py:868] EngineCore encountered a fatal error.",
     "EngineCore_DP0 pid=212", "ERROR [core.py:868] EngineCore encountered a fatal error."),
    ("2026-11-28T03:18:51.004812004Z (Worker_TP3 pid=9) \x1b[1;31mERROR\x1b[0m 11-28 03:18:51 [x.py:1] boom",
     "Worker_TP3 pid=9", "ERROR [x.py:1] boom"),
    ("(RayWorkerWrapper pid=77, ip=10.0.0.2) INFO 11-30 10:00:00 [w.py:3] ready", "RayWorkerWrapper pid=77", "INFO [w.py:3] ready"),
    ("[ERROR] RUNTIME(5493,python3):2026-11-30-09:55:33.588.201 [device_error_proc.cc:1548]5493 device id=15, MTE error, retCode=0x91",
     "pid=5493", "[ERROR] RUNTIME [device_error_proc.cc:1548] device id=N, MTE error, retCode=0x91"),
    ("[Mon Nov 30 22:51:37 2026] NVRM: Xid (PCI:0000:07:00): 31, pid=276, MMU Fault @ 0x7f2d3a000000",
     "main", "NVRM: Xid (PCI:…): 31, pid=N, MMU Fault @ 0x…"),
    ("[ 8812.118202] NVRM: Xid (PCI:0000:07:00): 13, Out Of Range Address", "main", "NVRM: Xid (PCI:…): 13, Out Of Range Address"),
])
def test_normalise_drops_what_changes_between_runs(raw, process, text):
    assert normalise(raw) == (process, text)


@pytest.mark.parametrize("text, error", [
    ("ERROR [core.py:868] EngineCore encountered a fatal error.", True),
    ("torch.AcceleratorError: CUDA error: an illegal memory access was encountered", True),
    ("NVRM: Xid (PCI:…): 13, Out Of Range Address", True),
    ("INFO [loggers.py:123] Engine 000: Avg generation throughput: 253.6 tokens/s", False),
    ("INFO [config.py:310] Mamba cache mode is set to 'align'", False),
])
def test_error_lines(text, error):
    assert is_error(text) is error


def test_001_mamba_align_is_named_with_its_evidence():
    found = findings("001-mamba-align.log", "001-dmesg.txt")
    assert [v for d, v, _ in found.versions if d == "vllm"] == ["0.30.0"]
    best = found.matches[0]
    assert best.manifest.id == "mamba-align-block-size" and best.named and best.confidence == "high"
    where = {e.signature.role + ":" + e.line.where for e in best.evidence}
    assert "first-error:001-mamba-align.log:22" in where  # the exception line, inside the worker's first error
    assert {"config:001-mamba-align.log:4", "config:001-mamba-align.log:5", "context:001-dmesg.txt:1"} <= where
    worker = next(line for line in found.first_errors if line.process == "Worker_TP0 pid=276")
    assert worker.lineno == 16 and "WorkerProc hit an exception" in worker.text


def test_an_illegal_memory_access_without_align_mode_names_nothing():
    found = findings("001-no-align.log", "001-dmesg.txt")
    mamba = match(found, "mamba-align-block-size")
    assert mamba is not None and not mamba.named and mamba.score < 1.0  # crash lines alone: 0.9
    assert not any(m.named for m in found.matches)


def test_000_the_first_device_error_names_glm_and_the_tiling_prints_are_noise():
    found = findings("000-server.log", "000-plog-5493.log")
    glm = match(found, "glm-conv-null-slot")
    assert glm.named and glm.evidence[0].line.where == "000-plog-5493.log:14"
    plog_first = next(line for line in found.first_errors if line.source == "000-plog-5493.log")
    assert "Task run failed" in plog_first.text  # not one of the 11 '[ERROR] ... tiling入口' debug prints


def test_000_a_507011_whose_first_error_is_something_else_names_nothing():
    found = findings("000-server.log", "000-plog-other-first-error.log")
    assert match(found, "glm-conv-null-slot") is None  # 507011 and FULL_DECODE_ONLY score, but no first-error
    assert not found.matches


def test_000_with_mtp_on_is_not_glm():
    found = findings("000-server.log", "000-plog-5493.log",
                     replace=("speculative_config=None", "speculative_config=SpeculativeConfig(method='deepseek_mtp', num_spec_tokens=5)"))
    glm = match(found, "glm-conv-null-slot")
    assert glm is not None and not glm.named and glm.score == pytest.approx(0.7)


def test_a_first_error_signature_far_after_the_first_error_does_not_count():
    plog = (LOGS / "000-plog-other-first-error.log").read_text()
    filler = "".join(f"[INFO] RUNTIME(5493,python3):2026-11-30-09:55:31.000.{i:03d} [x.cc:1]5493 step {i}\n" for i in range(EPISODE + 5))
    late = "[ERROR] RUNTIME(5493,python3):2026-11-30-09:56:00.000.000 [p.cc:1548]5493 device id=15, MTE error, retCode=0x91\n"
    found = scan_text((LOGS / "000-server.log").read_text() + plog + filler + late, CATALOG)
    assert match(found, "glm-conv-null-slot") is None


def test_003_flashinfer_advisory_and_004_qwen_placeholder_advisory():
    found = findings("003-flashinfer-mnnvl.log")
    assert found.matches[0].manifest.id == "flashinfer-mnnvl-allreduce" and found.matches[0].named
    assert found.matches[0].manifest.kind == "advisory"
    found = findings("004-qwen-ple-placeholder.log")
    assert [m.manifest.id for m in found.matches if m.named] == ["qwen38-ple-placeholder"]
    assert dict((d, v) for d, v, _ in found.versions) == {"vllm-ascend": "0.26.0rc1", "vllm": "0.26.0"}


@pytest.mark.parametrize("chunk_lines", [1, 3, 7])
def test_chunking_does_not_change_the_result(chunk_lines):
    whole = findings("001-mamba-align.log", "001-dmesg.txt")
    split = findings("001-mamba-align.log", "001-dmesg.txt", chunk_lines=chunk_lines)
    assert split == whole and split.lines == 34


def test_a_last_line_without_newline_is_read_and_counted():
    found = scan_text(b"INFO x\nERROR [a.py:1] boom", CATALOG)
    assert found.lines == 2 and found.first_errors[0].lineno == 2
