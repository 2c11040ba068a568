"""The log's facts from every line kind, and the formats whose first error doctor must find (real lines)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix.doctor import scan_text
from vllm_hotfix.doctor.log_facts import usable_version

LOGS = Path(__file__).parent / "logs"
CATALOG = [m for m in Catalog.load(env={}).latest() if m.signatures]


def versions(text: str) -> dict[str, str]:
    return {d: v for d, v, _ in scan_text(text, CATALOG).versions}


def test_releases_from_every_line_kind_the_process_itself_first():
    # vllm#27571: the dumped step of a crash names the release, and is not a first error
    dump = ("(EngineCore_DP0 pid=1537238) ERROR 10-27 20:05:10 [dump_input.py:72] Dumping input data for V1 LLM engine "
            "(v0.11.1rc4.dev17+g361a7463d.d20251027) with config: model='Qwen/Qwen3-Next-80B-A3B-Instruct'\n")
    found = scan_text(dump, CATALOG)
    assert [v for _, v, _ in found.versions] == ["0.11.1rc4.dev17+g361a7463d.d20251027"] and not found.first_errors
    assert versions("vLLM Version                 : 0.16.0rc2.dev294+g6a7b85d94 (git sha: 6a7b85d94)\n") == {"vllm": "0.16.0rc2.dev294+g6a7b85d94"}
    assert versions("vLLM Version: 0.6.4.post1\n") == {"vllm": "0.6.4.post1"}  # collect_env, vllm#10895
    assert versions("          image: quay.io/ascend/vllm-ascend:v0.10.0rc1\n") == {"vllm-ascend": "0.10.0rc1"}  # vllm-ascend#2349
    assert versions("Container : vllm/vllm-openai:qwen3_5-cu130\n") == {}  # a tag that is no release
    assert versions("pip freeze: vllm==0.30.0\nvllm-ascend==0.26.0rc1\n") == {"vllm": "0.30.0", "vllm-ascend": "0.26.0rc1"}
    banner = "(APIServer pid=140954) INFO 03-17 11:29:48 [utils.py:302]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.17.1\n"  # vllm#36734
    assert versions(banner + "vllm==0.30.0\n") == {"vllm": "0.17.1"}  # what the process printed wins over a pip freeze
    found = scan_text(banner + "vllm==0.30.0\n", CATALOG)
    assert [(d, v) for d, v, _ in found.version_conflicts()] == [("vllm", "0.30.0")]
    assert usable_version("0.1.dev20073+g8e685d198") is None  # vllm#54199: a build from an untagged tree


def test_engine_platform_architecture_and_flags():
    found = scan_text((LOGS / "001-mamba-align.log").read_text(), CATALOG)
    assert found.engine.name == "vllm" and set(found.values("platform")) == {"cuda"}
    assert found.values("architecture")["architecture"].value == "Glm5NextForConditionalGeneration"
    flags = {name: fact.value for name, fact in found.values("flag").items()}
    assert flags == {"enable_prefix_caching": "True", "cudagraph_mode": "FULL_AND_PIECEWISE", "num_speculative_tokens": "3",
                     "speculative_method": "mtp"}
    ascend = scan_text((LOGS / "004-qwen-ple-placeholder.log").read_text(), CATALOG)
    assert set(ascend.values("platform")) == {"ascend"} and ascend.values("flag")["async_scheduling"].value == "True"


def test_another_engine_rules_every_vllm_hotfix_out():
    sglang = ("[2025-09-13 19:05:03 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"  # sglang#10407
              '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 2610, in run_scheduler_process\n'
              "RuntimeError: CUDA error: an illegal memory access was encountered\n"
              "The exception was triggered at PC 0xe259ff9429e0  precopy_mamba_align_fused_kernel  (mamba_utils.py:93)\n")
    found = scan_text(sglang, CATALOG)
    assert found.engine.name == "sglang"
    assert found.matches and all(m.tier == "veto" and "the log is of sglang" in m.vetoes[0].reason for m in found.matches)


def test_an_ascend_only_hotfix_is_ruled_out_on_a_cuda_log():
    log = ("torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
           "[ERROR] fault kernel_name=causal_conv1d_update_0, MTE error, retCode=0x91\n")
    glm = next(m for m in scan_text(log, CATALOG).matches if m.manifest.id == "glm-conv-null-slot")
    assert glm.tier == "veto" and glm.vetoes[0].reason == ("the log is of cuda (NVIDIA CUDA GPUs); this issue occurs on "
                                                           "Ascend NPUs")


def test_a_split_xid_31_message_counts_and_a_write_fault_does_not():
    crash = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
    split = ("[14328.198504] NVRM: Xid (PCI:0000:0a:00): 31, pid=13332, name=python3, Ch 00000010, intr 00000000.\n"
             "[14328.198510] NVRM: MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f29_5b8c9000. "
             "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n")
    mamba = next(m for m in scan_text(crash + split, CATALOG).matches if m.manifest.id == "mamba-align-block-size")
    xid = [e for e in mamba.evidence if "Xid" in e.signature.pattern]
    assert len(xid) == 1 and xid[0].line.lineno == 3 and "NVRM: Xid (PCI:…): 31" in xid[0].line.text
    write = split.replace("VIRT_READ", "VIRT_WRITE")  # club-3090#1061: a wild write is another bug
    mamba = next(m for m in scan_text(crash + write, CATALOG).matches if m.manifest.id == "mamba-align-block-size")
    assert not [e for e in mamba.evidence if "Xid" in e.signature.pattern]
    one_line = split.replace("intr 00000000.\n[14328.198510] NVRM: MMU", "intr 00000000. MMU")
    mamba = next(m for m in scan_text(crash + one_line, CATALOG).matches if m.manifest.id == "mamba-align-block-size")
    assert [e.line.lineno for e in mamba.evidence if "Xid" in e.signature.pattern] == [2]


def test_first_errors_of_every_format():
    lines = [
        "CUDA Exception: Warp Illegal Address",  # cuda-gdb, vllm#54173
        "[ERROR] RUNTIME(129510,all__):2026-01-20-09:48:14.622.900 [stars_engine.cc:1502]133843 ProcLogicCqReport:Task run failed",
        "[rank0]:[W904 09:50:12.024496247 compiler_depend.ts:57] Warning: EZ9999: Inner Error!",
        "CUDA error (/workspace/.deps/vllm-flash-attn-src/hopper/flash_fwd_combine_launch_template.h:60): an illegal memory access was encountered",
        "RuntimeError: Triton Error [CUDA]: misaligned address ",
        "cudaErrorIllegalAddress: an illegal memory access was encountered",
        "[14328.198504] NVRM: Xid (PCI:0000:0a:00): 31, pid=13332, name=cuda_plot_k32_v, Ch 00000010",
        "zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.27.91.102:13345')",  # no level prefix
        "(Worker_TP0 pid=9) WARNING 09-19 09:10:37 [shm_broadcast.py:466] No available shared memory broadcast block found in 60 seconds.",
    ]
    for line in lines:
        found = scan_text("INFO 12-01 00:00:00 [x.py:1] starting\n" + line + "\n", CATALOG)
        assert [l.lineno for l in found.first_errors] == [2], line


# Engines and platforms from their own lines (issue 34): each rule with the real line it was written from.
ENGINE_LINES = [
    ("sglang", "[16:43:29 TP0] Prefill batch. #new-seq: 1, #new-token: 2062, #cached-token: 0, cache hit rate: 0.00%, "
               "token usage: 0.00, #running-req: 0, #queue-req: 0"),  # sgl-project/sglang#1612
    ("sglang", "[2026-08-23 09:05:37 TP0 EP0] Decode batch, #running-req: 1, #full token: 165376, full token usage: 0.02, "
               "#swa token: 768, swa token usage: 0.00, accept len: 5.30"),  # sgl-project/sglang#36081
    ("sglang", '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 2610, in '
               "run_scheduler_process"),  # sgl-project/sglang#10407
    ("tensorrt-llm", "[TensorRT-LLM][ERROR] tensorrt_llm::common::TllmException: [TensorRT-LLM][ERROR] CUDA runtime error in "
                     "::cudaFreeAsync(ptr, mCudaStream->get()): an illegal memory access was encountered "
                     "(/mnt/workspace/TensorRT-LLM/cpp/tensorrt_llm/runtime/tllmBuffers.h:131)"),  # NVIDIA/TensorRT-LLM#2868
    ("tensorrt-llm", "1       0xef067b76188c /usr/local/lib/python3.12/dist-packages/tensorrt_llm/libs/libtensorrt_llm.so"
                     "(+0xc7188c) [0xef067b76188c]"),  # NVIDIA/TensorRT-LLM#2868
    ("vllm-ascend", '(EngineCore_0 pid=38549) ERROR 08-25 08:44:40 [core.py:702]   File "/vllm-workspace/vllm-ascend/vllm_ascend/'
                    'worker/worker_v1.py", line 205, in execute_model'),  # vllm-project/vllm-ascend#2544
    ("vllm", "(APIServer pid=1) INFO 11-30 22:31:02 [api_server.py:1839] vLLM API server version 0.30.0"),  # seed 001's shape
    (None, "#0  0x00007f42b0431c70 in void tensorrt_llm::kernels::quantize_with_block_size_tma<(tensorrt_llm::"
           "BlockScaleQuantizationType)0, __nv_bfloat16, 16, false>"),  # flashinfer-ai/flashinfer#2704: a kernel namespace
]
PLATFORM_LINES = [
    ("rocm", "INFO 08-25 14:50:19 [__init__.py:244] Automatically detected platform rocm."),  # nlzy/vllm-gfx906#30
    ("rocm", "(EngineCore_DP0 pid=555309) ERROR 03-05 22:09:18 [core.py:1100] torch.AcceleratorError: HIP error: an illegal "
             "memory access was encountered"),  # vllm-project/vllm#36180
    ("rocm", "Search for `hipErrorIllegalAddress' in https://rocm.docs.amd.com/projects/HIP/en/latest/index.html for more "
             "information."),  # ROCm/vllm#959 (torch prints CUDA's words on ROCm: "CUDA error: an illegal memory access")
    ("rocm", "RuntimeError: Triton Error [HIP]: Code: 700, Message: an illegal memory access was encountered"),  # vllm#50347
    ("metax", "[16:21:04.331][MCR][E]mx_device.cpp :10106: trapping: kernelName: mm_kernel ,commandIndex: 2555 , trapType: "
              "Memory Violation(0x4)"),  # flagos-ai/FlagGems#6112
    ("metax", "vllm current_platform = vllm_metax.platform.MxsmlMacaPlatform"),  # verl-project/verl-omni#191
    ("metax", "[conda] flash-attn                           2.6.3+metax3.1.0.4torch2.6        pypi_0              pypi"),  # MetaX-MACA/vLLM-metax#142
    ("cuda", "INFO 05-07 02:57:53 [__init__.py:239] Automatically detected platform cuda."),  # vllm-project/vllm#17756
    ("ascend", "INFO 11-28 03:10:01 [__init__.py:217] Platform plugin ascend is activated"),  # tests/doctor/logs/004 (seed 004)
]


@pytest.mark.parametrize("engine, line", ENGINE_LINES, ids=[f"{e}-{i}" for i, (e, _) in enumerate(ENGINE_LINES)])
def test_engines_from_their_own_lines(engine, line):
    found = scan_text(line + "\n", CATALOG)
    assert (found.engine.name if found.engine else None) == engine


@pytest.mark.parametrize("platform, line", PLATFORM_LINES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(PLATFORM_LINES)])
def test_platforms_from_their_own_lines_a_vendor_over_cudas_words(platform, line):
    cuda_words = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"  # what ROCm / MetaX torch print
    found = scan_text(cuda_words + line + "\n", CATALOG)
    assert found.platform.name == platform


@pytest.mark.parametrize("line, reason", [
    (PLATFORM_LINES[4][1], "the log is of metax (MetaX GPUs, CUDA-compatible); this issue occurs on NVIDIA CUDA GPUs, AMD ROCm GPUs"),
    (PLATFORM_LINES[0][1], None),  # ROCm: the align-mode pre-copy runs there too (a ROCm profile lists it)
    (ENGINE_LINES[0][1], "the log is of sglang, not vLLM"),
    (ENGINE_LINES[3][1], "the log is of tensorrt-llm, not vLLM"),
    ("(EngineCore_DP0 pid=931761) ERROR 09-19 07:42:16 [dump_input.py:69] Dumping input data for V1 LLM engine (v0.9.1) with "
     "config: model='Qwen/Qwen3-Next-80B-A3B-Instruct', device_config=npu", "the log is of ascend (Ascend NPUs)"),  # vllm-ascend
])
def test_a_hotfix_for_another_engine_or_platform_is_ruled_out_saying_why(line, reason):
    crash = "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
    gdb = "The exception was triggered at PC 0xe259ff9429e0  precopy_mamba_align_fused_kernel  (mamba_utils.py:93)\n"  # vllm#54173
    mamba = next(m for m in scan_text(crash + line + "\n" + gdb, CATALOG).matches if m.manifest.id == "mamba-align-block-size")
    if reason is None:
        assert mamba.tier == "specific"
    else:
        assert mamba.tier == "veto" and mamba.vetoes[0].reason.startswith(reason)
