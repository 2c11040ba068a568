"""What a log says about the process that crashed: releases, engine, platform, model, flags, kernel.

Pure: one normalised line in, ``(kind, name, value, how)`` tuples out. Every line kind that carries
a fact is read, because a crash log is often only an excerpt:

- releases (``kind="version"``, ``name`` = distribution) from vLLM's banners (``vLLM API server
  version``, ``Initializing a V1 LLM engine (v…)``), the ``Dumping input data for V1 LLM engine (v…)``
  line of a crashed step, ``vllm_ascend version``, ``collect_env`` output (``vLLM Version : …``),
  ``pip freeze`` (``vllm==…``) and image tags (``vllm/vllm-openai:v…``, ``…/vllm-ascend:v…``). ``how``
  ranks them (``RANK``): what the process printed about itself beats an environment dump, which beats
  an image tag;
- the engine (``vllm``, ``vllm-ascend``, ``sglang``, ``tensorrt-llm``) and the platform (``cuda``, ``rocm``,
  ``ascend``, and CUDA-compatible vendors such as ``metax``), each from the lines that engine or platform
  writes itself (the real line of each rule is in tests/doctor/test_facts.py, with its source);
- the model architecture, and flags (``enable_prefix_caching``, ``cudagraph_mode``,
  ``num_speculative_tokens``, ``speculative_method``, ``async_scheduling``, ``data_parallel_size``);
- the faulting kernel a debugger or runtime names (a ``void`` return type before it is skipped) (cuda-gdb ``The exception was triggered at PC … NAME``,
  ``#0  NAME<<<…>>>``, a core dump's ``Kernel: NAME``, a MetaX runtime trap's ``kernelName: NAME``).
"""

from __future__ import annotations

import re
from typing import Iterator

from packaging.version import InvalidVersion, Version

_V = r"v?(\d+\.\d+[0-9A-Za-z.+-]*)"
VERSION_LINES = (  # (pattern, distribution, how)
    (re.compile(r"vLLM API server version " + _V), "vllm", "banner"),
    (re.compile(r"[█▀▄] +version " + _V), "vllm", "banner"),  # the ASCII-art banner of newer releases
    (re.compile(r"Initializing a V\d LLM engine \(" + _V + r"\)"), "vllm", "banner"),
    (re.compile(r"Dumping input data for V\d LLM engine \(" + _V + r"\)"), "vllm", "dump"),
    (re.compile(r"vllm_ascend version:? " + _V), "vllm-ascend", "banner"),
    (re.compile(r"vLLM Ascend Version\s*:\s*" + _V), "vllm-ascend", "collect_env"),
    (re.compile(r"vLLM Version\s*:\s*" + _V), "vllm", "collect_env"),
    (re.compile(r"(?<![\w-])vllm==" + _V), "vllm", "pip"),
    (re.compile(r"(?<![\w-])vllm[-_]ascend==" + _V), "vllm-ascend", "pip"),
    (re.compile(r"vllm/vllm-openai:" + _V), "vllm", "image"),
    (re.compile(r"/vllm-ascend:" + _V), "vllm-ascend", "image"),
)
RANK = {"banner": 0, "dump": 1, "collect_env": 2, "pip": 3, "image": 4}  # lower wins
ENGINES = (  # (needle, engine, how): the serving engine whose log this is, from lines it writes itself
    ("vLLM API server version", "vllm", "server"), ("LLM engine (v", "vllm", "server"),
    ("[multiproc_executor.py:", "vllm", "server"), ("[core.py:", "vllm", "server"),
    ("vllm_ascend", "vllm-ascend", "frame"), ("Platform plugin ascend is activated", "vllm-ascend", "server"),
    ("sglang/srt/", "sglang", "frame"), ("sglang.launch_server", "sglang", "server"),
    ("Scheduler hit an exception", "sglang", "server"), ("#running-req: ", "sglang", "server"),
    ("tensorrt_llm/", "tensorrt-llm", "frame"), ("[TRT-LLM]", "tensorrt-llm", "server"),
    ("[TensorRT-LLM][", "tensorrt-llm", "server"), ("TensorRT-LLM version", "tensorrt-llm", "server"),
)
VLLM_ENGINES = ("vllm", "vllm-ascend")  # vllm-ascend is vLLM with the Ascend platform plugin
PLATFORMS = (  # (needle, platform): the accelerator the crashed process ran on
    ("vllm_ascend", "ascend"), ("Platform plugin ascend is activated", "ascend"), ("device_config=npu", "ascend"),
    ("torch_npu", "ascend"), ("[ERROR] RUNTIME", "ascend"), ("NPU function error", "ascend"),
    ("CUDA error", "cuda"), ("CUDA_ERROR_", "cuda"), ("cudaError", "cuda"), ("NVRM: Xid", "cuda"),
    ("CUDA Exception: ", "cuda"), ("GPU KV cache size", "cuda"), ("device_config=cuda", "cuda"),
    ("detected platform cuda", "cuda"),
    ("detected platform rocm", "rocm"), ("hipError", "rocm"), ("HIP error", "rocm"), ("Triton Error [HIP]", "rocm"),
    ("vllm_metax", "metax"), ("+metax", "metax"), ("[MCR][", "metax"), ("/_metax/", "metax"), ("mcError", "metax"),
)
# CUDA-compatible vendors and ROCm print CUDA's words too (torch.AcceleratorError: CUDA error: ..., cudaError...):
# their own lines decide (Findings.platform), in this order; CUDA is what is left
VENDOR_PLATFORMS = ("metax", "rocm", "ascend")
FLAGS = (  # (pattern, flag)
    (re.compile(r"enable_prefix_caching['\"]?\s*[=:]\s*(True|False)"), "enable_prefix_caching"),
    (re.compile(r"cudagraph_mode['\"]?\s*[=:]\s*['\"]?(?:<CUDAGraphMode\.)?([A-Z_]+)"), "cudagraph_mode"),
    (re.compile(r"num_spec(?:ulative)?_tokens['\"]?\s*[=:]\s*(\d+)"), "num_speculative_tokens"),
    (re.compile(r"speculative_config=(?:SpeculativeConfig\(method='(\w+)'|(None))"), "speculative_method"),
    (re.compile(r"async_scheduling['\"]?\s*[=:]\s*(True|False)"), "async_scheduling"),
    (re.compile(r"data_parallel_size['\"]?\s*[=:]\s*(\d+)"), "data_parallel_size"),
)
ARCHITECTURE = re.compile(r"(?:Resolved architecture: |architectures?['\"]?\s*[=:]\s*\[?['\"]?)([A-Z]\w+(?:For\w+|Model))")
KERNEL = re.compile(r"The exception was triggered at PC 0x\S* +(?:void )?([A-Za-z_][\w:]*)"
                    r"|^#0 +(?:0x\S+ in )?(?:void )?([A-Za-z_][\w:]*)(?:<|\s*\()"
                    r"|^Kernel: ([A-Za-z_]\w*)|\[MCR\]\[E\].*\bkernelName: ([A-Za-z_]\w*)")
# literals one of which every fact line holds (the prefilter's needles for facts)
FACT_NEEDLES = ("ersion", "vllm==", "vllm-ascend==", "vllm_ascend", "vllm-openai:", "/vllm-ascend:", "LLM engine (",
                "Dumping input data", "architecture", "enable_prefix_caching", "cudagraph_mode", "num_spec",
                "speculative_config=", "async_scheduling", "data_parallel_size", "sglang", "tensorrt_llm", "TRT-LLM",
                "TensorRT-LLM", "exception was triggered at PC", "#0 ", "Kernel: ", "Platform plugin ascend",
                "device_config=", "torch_npu", "NPU function error", "GPU KV cache size", "[core.py:",
                "[multiproc_executor.py:", "Scheduler hit an exception", "#running-req: ", "detected platform ",
                "hipError", "HIP error", "Triton Error [HIP]", "metax", "[MCR][", "mcError")


def usable_version(text: str) -> str | None:
    """``text`` as a PEP 440 version a range can be checked against, else None: not a version, or a
    source build without a release (``0.1.dev20073+g8e685d198``: vLLM built from an untagged tree)."""
    try:
        version = Version(text.rstrip(".,;:)"))
    except InvalidVersion:
        return None
    if version.is_devrelease and version.release[:2] <= (0, 1):
        return None
    return str(version)


def read_facts(text: str) -> Iterator[tuple[str, str, str, str]]:
    """The facts one normalised line states: ``(kind, name, value, how)``."""
    for pattern, distribution, how in VERSION_LINES:
        found = pattern.search(text)
        if found:
            version = usable_version(found.group(1))
            if version is not None:
                yield "version", distribution, version, how
    for needle, engine, how in ENGINES:
        if needle in text:
            yield "engine", engine, engine, how
    for needle, platform in PLATFORMS:
        if needle in text:
            yield "platform", platform, platform, "line"
    for pattern, flag in FLAGS:
        found = pattern.search(text)
        if found:
            yield "flag", flag, next(g for g in found.groups() if g is not None), "line"
    found = ARCHITECTURE.search(text)
    if found:
        yield "architecture", "architecture", found.group(1), "line"
    found = KERNEL.search(text)
    if found:
        yield "kernel", "kernel", next(g for g in found.groups() if g is not None), "debugger"
