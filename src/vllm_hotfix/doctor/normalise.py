"""One log line -> (process, normalised text, is it an error?). Pure, str in, str out.

Handles the shapes the incident reports show: vLLM's ``(EngineCore_DP0 pid=4242) ERROR 11-30 22:49:06
[core.py:710] ...`` (and ``Worker_TP3``, Ray's ``(RayWorkerWrapper pid=1, ip=...)``), CANN plog lines
``[ERROR] RUNTIME(5493,python3):2026-11-30-09:55:33.588.123 [proc.cc:1548]5493 ...``, ``docker logs -t`` /
``kubectl logs --timestamps`` ISO prefixes, ``docker compose logs`` service prefixes, ``dmesg`` / ``dmesg -T`` / journal kernel lines, ANSI colours.
"""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# leading timestamps added by the collector, not by the process (may repeat: docker -t over dmesg -T)
COLLECTOR_PREFIX = re.compile(
    r"^(?:\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s+"  # ISO (docker -t, kubectl)
    r"|\[[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ [\d:]+ \d{4}\]\s*"  # dmesg -T
    r"|\[\s*\d+\.\d+\]\s*"  # dmesg
    r"|[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d \S+ kernel: )"  # journal / syslog
)
# `docker compose logs`: the service name padded and a bar ("qwen3-vl-32b  | (EngineCore_DP0 pid=413) ERROR …",
# vllm-ascend#4082); never a table row (no other bar follows)
COMPOSE_PREFIX = re.compile(r"^[A-Za-z0-9][\w.-]*\s+\| (?!.*\|)")
VLLM_PROCESS = re.compile(r"^\(([^()]*?)\s*pid=(\d+)[^()]*\)\s*")
# vLLM's level and date: "ERROR 11-30 22:49:06", newer releases "ERROR 2026-01-12 16:28:02.921" (vllm-ascend#5805)
VLLM_LEVEL_TIME = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) (?:\d{4}-)?\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? ")
PLOG = re.compile(r"^\[(ERROR|WARNING|INFO|DEBUG|EVENT|TRACE)\] ([A-Za-z_][\w-]*)\((\d+),[^)]*\):\S+ (?:\[([^\]]+)\]\d*\s*)?")
HEX = re.compile(r"0x[0-9a-fA-F]{8,}")
PCI = re.compile(r"PCI:[0-9a-fA-F]{4}:[0-9a-fA-F:.]+")
PID = re.compile(r"\bpid[=: ]\s?\d+")
DEVICE = re.compile(r"\b(device id|device_id|Device|RankID|rank)([=:]\s?)-?\d+")

ERROR_LINE = re.compile(  # a bare "Traceback (most recent call last):" is not one: its exception line is
    r"\b(?:ERROR|CRITICAL|FATAL)\b|\b[A-Z]\w*(?:Error|Exception)\b(?::|$)"
    r"|NVRM: Xid|Segmentation fault|\bhit an exception\b|\berror code is\b|CUDA error|CUDA_ERROR_\w+|\bcudaError[A-Z]\w+:"
    r"|Triton Error \[|CUDA Exception: |received signal CUDA_EXCEPTION_|Invalid __global__ (?:read|write)"  # Triton, cuda-gdb, compute-sanitizer
    r"|\bE[A-Z]\d{4}: Inner Error|\bretCode=0x[0-9a-f]+"  # CANN (EZ9999: Inner Error!), device-side retCode
    r"|\[MCR\]\[E\]"  # MetaX's runtime ([16:21:04.331][MCR][E]mx_device.cpp :10106: trapping: kernelName: ..., FlagGems#6112)
    r"|^WARNING .*(?:\btimed out\b|No available shared memory broadcast block found)"  # warning-level RPC timeouts
)
# substrings one of which every ERROR_LINE match contains (the prefilter's needles for error lines)
ERROR_NEEDLES = ("ERROR", "rror", "Exception", "CRITICAL", "FATAL", "NVRM:", "Segmentation fault", "hit an exception", "CUDA_EXCEPTION_",
                 "Invalid __global__", "retCode=", "[MCR][", "timed out", "No available shared memory broadcast block")
# error-level lines that are not an error: vLLM's dump of the failing step (logged at ERROR before the
# traceback; the version in its first line is a fact, not a first error)
NOT_AN_ERROR = re.compile(r"\bDumping (?:input data for V\d LLM engine|scheduler output for model execution|scheduler stats)\b")
MATCH_LIMIT = 8192  # characters of a line that are normalised and matched; the rest is counted, never searched

MAIN = "main"  # the process of lines without a process prefix (kernel log, plain output)


def normalise(raw: str) -> tuple[str, str]:
    """``(process, text)``: the process the line belongs to and the line without the volatile parts.

    ``text`` keeps the level word and the message; it loses ANSI colours, collector timestamps, the
    ``(Name pid=N)`` prefix (it becomes ``process``), vLLM's date, plog's pid and time, and numbers that
    differ from run to run: hex addresses (``0x…``), PCI ids (``PCI:…``), pids (``pid=N``), device and
    rank ids (``device id=N``).
    """
    text = ANSI.sub("", raw).rstrip("\r\n")
    while True:
        found = COLLECTOR_PREFIX.match(text)
        if not found or not found.end():
            break
        text = text[found.end():]
    if "| " in text:
        found = COMPOSE_PREFIX.match(text)
        if found:
            text = text[found.end():]
    process = MAIN
    found = VLLM_PROCESS.match(text)
    if found:
        process = f"{found.group(1) or 'pid'} pid={found.group(2)}"
        text = text[found.end():]
    found = VLLM_LEVEL_TIME.match(text)
    if found:
        text = f"{found.group(1)} {text[found.end():]}"
    else:
        found = PLOG.match(text)
        if found:
            if process == MAIN:
                process = f"pid={found.group(3)}"
            where = f" [{found.group(4)}]" if found.group(4) else ""
            text = f"[{found.group(1)}] {found.group(2)}{where} {text[found.end():]}"
    if "0x" in text:
        text = HEX.sub("0x…", text)
    if "PCI:" in text:
        text = PCI.sub("PCI:…", text)
    if "pid" in text:
        text = PID.sub("pid=N", text)
    text = DEVICE.sub(r"\1\2N", text)
    return process, text.strip()


def is_error(text: str) -> bool:
    """Does a normalised line report an error (level ERROR/CRITICAL, an exception, a CUDA/NPU error, an Xid)?"""
    return ERROR_LINE.search(text) is not None
