"""Where a name faults (issue 34): a specific signature counts in a fault report, a traceback or one of
the log's own error lines, never in a profiler table, a markdown table, prose or a config dump. The
same kernel name, precopy_mamba_align_fused_kernel, in each context; every line is real (its source
beside it) or a real line's shape with that name in it (said so)."""

from __future__ import annotations

import pytest

from test_manifest import manifest_data, write_manifest
from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix.doctor import scan_text
from vllm_hotfix.doctor.contexts import is_error_report, is_mention

CATALOG = [m for m in Catalog.load(env={}).latest() if m.signatures]
KERNEL = "precopy_mamba_align_fused_kernel"
CRASH = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"  # vllm#54173's worker


def mamba_specific(log: str):
    """The roles mamba's specific evidence counted in (a generic error first, so there is a match)."""
    found = scan_text(CRASH + log, CATALOG)
    mamba = next(m for m in found.matches if m.manifest.id == "mamba-align-block-size")
    return [e.role for e in mamba.evidence if e.signature.tier == "specific"], mamba


COUNTS = [
    # cuda-gdb on vllm#54173's core dump: the exception's PC, frame #0
    ("The exception was triggered at PC 0xe259ff9429e0  precopy_mamba_align_fused_kernel  (mamba_utils.py:93)\n",
     "fault-report"),
    ("#0  precopy_mamba_align_fused_kernel<<<(1,73,16),(128,1,1)>>> ()\n", "fault-report"),
    # the CUDA Exception block: cuda-gdb's `info cuda kernels` row ten lines after the exception (vllm#54173)
    ("CUDA Exception: Warp Illegal Address\n" + "\n" * 9 +
     "*      0      -   0 464205 Active 0x000000000010 (1,73,16) (128,1,1) precopy_mamba_align_fused_kernel()\n",
     "fault-report"),
    # the shape of cuda-gdb's focus frame in kysucix/gipuma#18 ("0x… in void gipuma_init_cu2<float>(…)<<<…>>> ()")
    ("0x0000000000c8c6a0 in void precopy_mamba_align_fused_kernel(long*)<<<(1,73,16),(128,1,1)>>> ()\n", "fault-report"),
    # the shape of MetaX's runtime trap (flagos-ai/FlagGems#6112: "kernelName: mm_kernel")
    ("[16:21:04.331][MCR][E]mx_device.cpp :10106: trapping: kernelName: precopy_mamba_align_fused_kernel ,commandIndex: "
     "2555 , trapType: Memory Violation(0x4)\n", "fault-report"),
    # a Triton launch in a traceback with CUDA_LAUNCH_BLOCKING=1: the shape of vllm#9532's frame and source line
    ('(VllmWorkerProcess pid=14578) ERROR 10-17 12:17:31 multiproc_worker_utils.py:231]   File "/usr/local/lib/python3.12/'
     'dist-packages/vllm/v1/worker/mamba_utils.py", line 246, in preprocess_mamba\n'
     "(VllmWorkerProcess pid=14578) ERROR 10-17 12:17:31 multiproc_worker_utils.py:231]     "
     "precopy_mamba_align_fused_kernel[grid](\n", "traceback"),
    # a plain Python frame of the kernel (the Triton interpreter), vllm#54173's mamba_utils.py:94
    ('  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/mamba_utils.py", line 94, in '
     "precopy_mamba_align_fused_kernel\n", "traceback"),
]

NEVER = [
    # a ROCm profiler table (README of Terrydaktal/vllm-coherence), both of its row formats
    "| Other GPU bookkeeping / `precopy_mamba_align_fused_kernel.kd` | 1122 | 0.004024 |\n",
    "| unattributed / Other GPU bookkeeping<br><code>precopy_mamba_align_fused_kernel.kd</code> | 7 / 7 | 0.003099 | 0.002992 |\n",
    # prose: a markdown list item of a deployment note (vektorprime/qwen38-flash-next-pp2)
    "   - At token 1,568, `preprocess_mamba_align_fused_kernel` advances `state_idx` from 0 to 1 and launches "
    "`precopy_mamba_align_fused_kernel` to migrate recurrent SSM/conv state from Block 0 to Block 1.\n",
    # a heading and a quote of an issue's text naming it
    "## The IMA in precopy_mamba_align_fused_kernel\n",
    "> IMA in precopy_mamba_align_fused_kernel under prefix caching\n",
    # a sentence that mentions an error and the kernel (the error word does not open the line)
    "The crash (CUDA error: an illegal memory access) happens in precopy_mamba_align_fused_kernel after a resume\n",
]


@pytest.mark.parametrize("log, role", COUNTS, ids=[f"{r}-{i}" for i, (_, r) in enumerate(COUNTS)])
def test_the_kernel_named_where_it_faults_is_specific_evidence(log, role):
    roles, mamba = mamba_specific(log)
    assert roles == [role]
    if "[MCR][E]" in log:  # MetaX's own runtime line: the log is of MetaX, where this fix does not belong
        assert mamba.tier == "veto" and "the log is of metax" in mamba.vetoes[0].reason
    else:
        assert mamba.tier == "specific"


@pytest.mark.parametrize("log", NEVER, ids=[f"mention-{i}" for i in range(len(NEVER))])
def test_the_kernel_named_in_a_table_or_prose_names_nothing(log):
    roles, mamba = mamba_specific(log)
    assert roles == [] and mamba.tier == "generic"  # no candidate: the crash alone, shared with others
    found = scan_text(CRASH + log, CATALOG)
    assert not [f for f in found.facts if f.kind == "kernel"]  # nor is it "the kernel that faulted" (no veto of others)


def test_a_name_in_a_config_dump_names_nothing(tmp_path):
    """vLLM logs its configuration at ERROR level when a step fails (vllm-ascend#4082's dump lists
    'vllm.mamba_mixer2' among the splitting ops): a specific signature on that op counts in a traceback
    of it, not in the dump."""
    write_manifest(tmp_path, manifest_data(id="mixer-fix", signatures=[
        {"pattern": r"mamba_mixer2", "role": ["fault-report", "traceback", "error-line"], "tier": "specific", "explain": "x"},
        {"pattern": r"RuntimeError: Worker failed", "role": "first-error", "explain": "y"}]), name="mixer-fix")
    catalog = [m for m in Catalog.load([tmp_path], env={}).latest() if m.id == "mixer-fix"]
    dump = ("(EngineCore_DP0 pid=413) ERROR 11-10 12:30:57 [dump_input.py:69] Dumping input data for V1 LLM engine (v0.11.0) "
            'with config: model=\'/root/.cache/Qwen3-VL-32B-Instruct\', compilation_config={"level":3,"splitting_ops":'
            '["vllm.unified_attention","vllm.mamba_mixer2","vllm.mamba_mixer"]}\n'
            "(EngineCore_DP0 pid=413) ERROR 11-10 12:30:57 [core.py:710] RuntimeError: Worker failed with error 'NPU out of "
            "memory. Tried to allocate 326.00 MiB'\n")
    (match,) = scan_text(dump, catalog).matches
    assert not match.specific
    frame = ('(EngineCore_DP0 pid=413) ERROR 11-10 12:30:57 [core.py:710]   File "/vllm-workspace/vllm/vllm/model_executor/'
             'layers/mamba/mamba_mixer2.py", line 530, in forward\n')
    (match,) = scan_text(dump + frame, catalog).matches
    assert [e.role for e in match.evidence if e.signature.tier == "specific"] == ["traceback"]


def test_the_issues_profiler_table_next_to_another_bugs_crash_with_an_in_range_release_is_not_confident(run_hotfix, tmp_path):
    """The confident wrong "needed" of issue 34: the profiler row beside a crash, vLLM 0.30.0 in range."""
    from pathlib import Path

    logs = Path(__file__).parent / "logs"
    log = tmp_path / "server.log"
    log.write_text((logs / "001-mamba-align.log").read_text() + NEVER[0])
    done = run_hotfix("doctor", log)
    assert done.returncode == 9, done.stdout
    assert "needed" not in done.stdout and "possible (a generic error and a condition" in done.stdout


@pytest.mark.parametrize("text, own", [
    ("ERROR [multiproc_executor.py:702] WorkerProc hit an exception.", True),
    ("torch.AcceleratorError: CUDA error: an illegal memory access was encountered", True),  # vllm#54173
    ("[ERROR] RUNTIME [device_error_proc.cc:1548] device id=N, MTE error, retCode=0x91", True),  # seed 000's plog
    ("09:14:37 TimeoutError: RPC call to sample_tokens timed out.", True),  # vllm-ascend#827
    ("[2025-09-13 19:05:03 TP3] Scheduler hit an exception: Traceback (most recent call last):", True),  # sglang#10407
    ("[16:21:04.331][MCR][E]mx_device.cpp :10106: trapping: kernelName: mm_kernel", True),  # FlagGems#6112
    ("The crash (CUDA error: an illegal memory access) happens in precopy_mamba_align_fused_kernel", False),
])
def test_the_logs_own_error_lines(text, own):
    assert is_error_report(text) is own


@pytest.mark.parametrize("text, mention", [
    ("| Other GPU bookkeeping / `precopy_mamba_align_fused_kernel.kd` | 1122 | 0.004024 |", True),
    ("- `#50409` (2026-08-31, PR, open): when the prompt length is an exact multiple of the block size", True),
    ("ERROR [core.py:868] RuntimeError: RPC call to sample_tokens aborted: a worker process died before responding", False),
    ("ValueError: Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.", False),
    ("#0  precopy_mamba_align_fused_kernel<<<(1,73,16),(128,1,1)>>> ()", False),
])
def test_tables_and_prose_are_mentions_and_log_lines_are_not(text, mention):
    assert is_mention(text) is mention
