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
    # real lines (tests/doctor/corpus): CUDA / Triton variants, cuda-gdb, Ascend runtime and plog, timeouts
    ("CUDA error (/workspace/.deps/vllm-flash-attn-src/hopper/flash_fwd_combine_launch_template.h:60): an illegal memory "
     "access was encountered", True),
    ("RuntimeError: Triton Error [CUDA]: misaligned address", True),
    ("Triton Error [CUDA]: an illegal memory access was encountered", True),
    ("cudaErrorIllegalAddress: an illegal memory access was encountered", True),
    ("CUDA Exception: Warp Illegal Address", True),
    ("[ERROR] RUNTIME [device_error_core_proc.cc:333]133843 ProcessStarsCoreErrorInfo:report error module_type=5, module_name=EZ9999", True),
    ("[rank0]:[W904 09:50:12.024496247 compiler_depend.ts:57] Warning: EZ9999: Inner Error!", True),
    ("AIV Kernel happen error, retCode=0x31.[FUNC:GetError][FILE:stream.cc][LINE:1183]", True),
    ("09:14:37 TimeoutError: RPC call to sample_tokens timed out.", True),
    ("WARNING [shm_broadcast.py:466] No available shared memory broadcast block found in 60 seconds.", True),
    ("  [2025-09-13 19:05:03 TP3] Scheduler hit an exception: Traceback (most recent call last):", True),
    ("zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.27.91.102:13345')", True),
    ("Traceback (most recent call last):", False),
    ("Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html", False),
    ("INFO [loggers.py:123] Engine 000: Avg generation throughput: 253.6 tokens/s", False),
    ("INFO [config.py:310] Mamba cache mode is set to 'align'", False),
])
def test_error_lines(text, error):
    assert is_error(text) is error


def test_001_the_align_resume_crash_is_specific_evidence():
    """The seed-001-shaped whole log: start-up lines, the crash, the release, and the faulting kernel
    cuda-gdb names (the real lines of vllm#54173)."""
    found = findings("001-mamba-align.log", "001-dmesg.txt", "001-cuda-gdb.txt")
    assert [v for d, v, _ in found.versions if d == "vllm"] == ["0.30.0"]
    best = found.matches[0]
    assert best.manifest.id == "mamba-align-block-size" and best.tier == "specific" and not best.vetoes
    assert best.evidence[0].signature.tier == "specific" and best.evidence[0].line.where == "001-cuda-gdb.txt:3"
    where = {e.signature.role + ":" + e.line.where for e in best.evidence}
    assert "first-error:001-mamba-align.log:22" in where  # the exception line, inside the worker's first error
    assert {"config:001-mamba-align.log:4", "config:001-mamba-align.log:5", "context:001-dmesg.txt:1"} <= where
    worker = next(line for line in found.first_errors if line.process == "Worker_TP0 pid=276")
    assert worker.lineno == 16 and "WorkerProc hit an exception" in worker.text


def test_001_start_up_lines_and_a_generic_crash_are_only_possible():
    """The false "apply" of issue 22: align mode + block size + an illegal memory access, nothing that
    names the mechanism. However high the weights add up, that is a generic error with the bug's
    conditions: "possible", never specific."""
    mamba = match(findings("001-mamba-align.log", "001-dmesg.txt"), "mamba-align-block-size")
    assert mamba.tier == "condition" and mamba.score >= 1.5 and not mamba.specific
    assert [e.line.lineno for e in mamba.conditions] == [4, 5]
    assert {s.pattern for s in mamba.missing} == {"precopy_mamba_align_fused_kernel", "_copy_mamba_state_block"}


def test_an_illegal_memory_access_without_a_condition_of_the_bug_is_generic_only():
    found = findings("001-no-align.log", "001-dmesg.txt")
    mamba = match(found, "mamba-align-block-size")
    assert mamba.tier == "generic" and not mamba.conditions  # no candidate: the command lists it as shared
    assert not [m for m in found.matches if m.tier in ("specific", "condition")]


def test_prefix_caching_off_vetoes_mamba_even_with_its_kernel():
    found = findings("001-mamba-align.log", "001-cuda-gdb.txt",
                     replace=("'enable_prefix_caching': True", "'enable_prefix_caching': False"))
    mamba = match(found, "mamba-align-block-size")
    assert mamba.tier == "veto" and "prefix caching is off" in mamba.vetoes[0].reason


def test_a_debugger_naming_another_kernel_vetoes_mamba():
    gdb = (LOGS / "001-cuda-gdb.txt").read_text().replace("precopy_mamba_align_fused_kernel", "flash_fwd_splitkv_kernel")
    found = scan_text((LOGS / "001-mamba-align.log").read_text() + gdb, CATALOG)
    mamba = match(found, "mamba-align-block-size")
    assert mamba.tier == "veto" and "flash_fwd_splitkv_kernel" in mamba.vetoes[0].reason


def test_000_the_seed_lines_are_generic_and_the_faulting_kernel_makes_them_specific():
    found = findings("000-server.log", "000-plog-5493.log")
    glm = match(found, "glm-conv-null-slot")
    assert glm.tier == "condition" and glm.conditions[0].line.where == "000-server.log:2"  # FULL_DECODE_ONLY in the args
    assert glm.errors[0].line.where == "000-plog-5493.log:14"
    plog_first = next(line for line in found.first_errors if line.source == "000-plog-5493.log")
    assert "Task run failed" in plog_first.text  # not one of the 11 '[ERROR] ... tiling入口' debug prints
    kernel = ("[ERROR] RUNTIME(5493,python3):2026-11-30-09:55:33.588.300 [task_info.cc:1010]5493 Aicore kernel execute "
              "failed, device_id=15, stream_id=80, task_id=202, fault kernel_name=causal_conv1d_update_kernel_0, program id=3\n")
    found = scan_text((LOGS / "000-server.log").read_text() + (LOGS / "000-plog-5493.log").read_text() + kernel, CATALOG)
    glm = match(found, "glm-conv-null-slot")
    assert glm.tier == "specific" and not glm.evidence[0].signature.confirmed


def test_000_a_507011_whose_first_error_is_something_else_names_nothing():
    found = findings("000-server.log", "000-plog-other-first-error.log")
    assert match(found, "glm-conv-null-slot") is None  # 507011 and FULL_DECODE_ONLY count, but no first-error
    assert not found.matches


def test_000_with_mtp_on_is_ruled_out():
    found = findings("000-server.log", "000-plog-5493.log",
                     replace=("speculative_config=None", "speculative_config=SpeculativeConfig(method='deepseek_mtp', num_spec_tokens=5)"))
    glm = match(found, "glm-conv-null-slot")
    assert glm.tier == "veto" and glm.vetoes[0].line.where == "000-server.log:3"


def test_a_first_error_signature_far_after_the_first_error_does_not_count():
    plog = (LOGS / "000-plog-other-first-error.log").read_text()
    filler = "".join(f"[INFO] RUNTIME(5493,python3):2026-11-30-09:55:31.000.{i:03d} [x.cc:1]5493 step {i}\n" for i in range(EPISODE + 5))
    late = "[ERROR] RUNTIME(5493,python3):2026-11-30-09:56:00.000.000 [p.cc:1548]5493 device id=15, MTE error, retCode=0x91\n"
    found = scan_text((LOGS / "000-server.log").read_text() + plog + filler + late, CATALOG)
    assert match(found, "glm-conv-null-slot") is None


def test_003_flashinfer_advisory_and_004_qwen_placeholder_advisory():
    found = findings("003-flashinfer-mnnvl.log")
    assert found.matches[0].manifest.id == "flashinfer-mnnvl-allreduce" and found.matches[0].tier == "specific"
    assert found.matches[0].manifest.kind == "advisory"
    found = findings("004-qwen-ple-placeholder.log")
    assert [m.manifest.id for m in found.matches if m.tier == "specific"] == ["qwen38-ple-placeholder"]
    assert dict((d, v) for d, v, _ in found.versions) == {"vllm-ascend": "0.26.0rc1", "vllm": "0.26.0"}


@pytest.mark.parametrize("chunk_lines", [1, 3, 7])
def test_chunking_does_not_change_the_result(chunk_lines):
    whole = findings("001-mamba-align.log", "001-dmesg.txt")
    split = findings("001-mamba-align.log", "001-dmesg.txt", chunk_lines=chunk_lines)
    assert split == whole and split.lines == 34


def test_a_last_line_without_newline_is_read_and_counted():
    found = scan_text(b"INFO x\nERROR [a.py:1] boom", CATALOG)
    assert found.lines == 2 and found.first_errors[0].lineno == 2


CORPUS = Path(__file__).parent / "corpus"


def corpus_log(name: str) -> str:
    return "".join(l for l in (CORPUS / name).read_text().splitlines(keepends=True) if not l.startswith("# "))


def test_the_root_error_of_each_process_comes_first_then_its_wrappers():
    """vllm-ascend#5748's whole start-up log: "WorkerProc failed to start.", "EngineCore failed to start."
    and "... See root cause above." are wrappers; each process's innermost exception is shown first,
    the worker's (the cause) before the echoes of the engine core and the API server."""
    found = scan_text(corpus_log("ascend-5748-hccl-workerproc-failed-to-start.log"), CATALOG)
    roots = [(r.line.process, r.line.text.split("] ", 1)[-1][:40], r.echo) for r in found.root_errors]
    assert roots == [("Worker_DP0_TP0_EP0 pid=8457", "RuntimeError: create_config:build/CMakeF", False),
                     ("EngineCore_DP0 pid=8041", "Exception: WorkerProc initialization fai", True),
                     ("APIServer pid=7658", "RuntimeError: Engine core initialization", True)]
    worker = found.root_errors[0]
    assert [w.text.split("] ", 1)[-1] for w in worker.wrappers] == ["WorkerProc failed to start."]
    assert found.first_errors[0].text.endswith("WorkerProc failed to start.")  # the first error line is still the first


def test_an_out_of_memory_start_up_shows_the_out_of_memory_error_first():
    """The same start-up failing on memory: the worker's root is torch.OutOfMemoryError (its message is
    club-3090#16's real one), ahead of the three wrapper lines."""
    log = corpus_log("ascend-5748-hccl-workerproc-failed-to-start.log").replace(
        "RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:148 HCCL function error: "
        "hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 1",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 50.00 MiB. GPU 0 has a total capacity of 23.56 GiB of "
        "which 21.75 MiB is free.")
    found = scan_text(log, CATALOG)
    assert "torch.OutOfMemoryError: CUDA out of memory" in found.root_errors[0].line.text
    assert all(r.echo for r in found.root_errors[1:])
