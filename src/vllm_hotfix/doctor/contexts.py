"""Where a log line's evidence counts: the line shapes behind a signature's roles. Pure, str in, bool out.

A signature says in which context its match counts (``catalog.signatures``: ``fault-report``,
``traceback``, ``error-line``, ``first-error``, ``config``, ``context``). The engine asks this module what a
normalised line is:

- a *fault report* line: what a debugger or sanitizer prints about the faulting kernel -- cuda-gdb
  (``CUDA Exception: Warp Illegal Address``, ``The exception was triggered at PC 0x… KERNEL``,
  ``#0  KERNEL<<<(…)>>> ()``, ``0x… in KERNEL<<<…>>> ()``), compute-sanitizer (``========= …``), a CUDA
  core dump (``Kernel: KERNEL``), an Ascend plog (``fault kernel_name=KERNEL``), a MetaX runtime trap
  (``[MCR][E]… kernelName: KERNEL``); and the lines right after a report starts (``FAULT_BLOCK``: cuda-gdb's
  focus line, its frames, its kernel table);
- a *traceback frame*: ``File "…", line N, in NAME`` (Python), ``frame #N: NAME`` (torch's C++ trace);
  the source line printed under a Python frame belongs to it;
- one of the log's *own error lines*: an error line (``normalise.is_error``) whose error word opens the
  message (``ERROR …``, ``[ERROR] RUNTIME …``, ``torch.AcceleratorError: …``, ``CUDA error: …``,
  ``NVRM: Xid …``, after a bracketed timestamp or rank), not a sentence that mentions an error;
- a *mention*: a markdown or profiler table row (``| … | … |``), markdown prose (a list item, quote or
  heading). A name there is written about, not faulting: no role but ``context`` counts it;
- a *dump*: vLLM's dump of the configuration or of the failing step (``non-default args: {…}``,
  ``Initializing a V1 LLM engine … with config: …``, ``Dumping input data …``). Settings live there
  (``config`` counts it), a kernel or file name in it names nothing.

Every pattern here that starts a context a later line depends on (a report's first line, a Python
frame) holds one of the prefilter's needles (tests/doctor/test_prefilter.py proves it), so the engine
sees it whatever else the prefilter drops.
"""

from __future__ import annotations

import re

from vllm_hotfix.doctor.normalise import ERROR_LINE

FAULT_LINE = re.compile(
    r"^CUDA Exception: |\bThe exception was triggered at PC |\breceived signal CUDA_EXCEPTION_\d+"  # cuda-gdb
    r"|^#\d+ +(?:0x\S+ in )?[A-Za-z_][^<]*<<<|^0x\S+ in [A-Za-z_][^<]*<<<"  # cuda-gdb frames of a kernel
    r"|^=+ "  # compute-sanitizer: every line of its report starts with '========= '
    r"|^Kernel: [A-Za-z_]|\bfault kernel_name=|\[MCR\]\[E\].*\bkernelName: "  # core dump, Ascend plog, MetaX trap
)
FAULT_START = re.compile(r"^CUDA Exception: |\breceived signal CUDA_EXCEPTION_\d+|^=+ Invalid __global__ ")
FAULT_BLOCK = 16  # lines after a report's first line that belong to it (cuda-gdb: focus, frames, `info cuda kernels`)
PY_FRAME = re.compile(r'\bFile "[^"]*", line \d+, in ')
FRAME = re.compile(r'\bFile "[^"]*", line \d+, in |^frame #\d+: ')
FRAME_NEEDLE = '", line '  # every Python frame line holds it (the prefilter's needle for PY_FRAME)
TABLE = re.compile(r"^\s*\|.*\|\s*$|\S\s*\|\s.*\s\|\s*\S")
PROSE = re.compile(r"^\s*(?:[-*+>] |#{1,6} |\d+\. )")
LEADING = re.compile(r"^(?:\[[^\]]*\]:?\s*|\d\d:\d\d:\d\d(?:[.,]\d+)?\s+)+")  # timestamps, ranks: [2025-09-13 TP3] [rank0]:
LEVEL_BRACKET = re.compile(r"\[(?:ERROR|CRITICAL|FATAL)\]|\[E\d{3,4}\b|\[MCR\]\[E\]")  # [ERROR] (plog), [E227 …] (torch's c10 log)
DOTTED = re.compile(r"(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w* )?")  # torch.AcceleratorError: / Scheduler hit an exception
DUMP = re.compile(r"\bnon-default args: |\bwith config: |\bDumping (?:input data|scheduler output|scheduler stats)\b")


def is_mention(text: str) -> bool:
    """A table row or prose: a name in it is written about, not reported by the process that crashed."""
    return is_table(text) or PROSE.search(text) is not None


def is_table(text: str) -> bool:
    """A markdown or profiler table row (``| … | … |``)."""
    return TABLE.search(text) is not None


def is_error_report(text: str) -> bool:
    """One of the log's own error lines: the error word opens the message (after bracketed timestamps
    or ranks, or a module path before an exception's name), not a sentence that mentions an error."""
    head = LEADING.match(text)
    if head and LEVEL_BRACKET.search(head.group()):
        return True
    rest = text[head.end():] if head else text
    found = ERROR_LINE.search(rest)
    return found is not None and DOTTED.fullmatch(rest, 0, found.start()) is not None


def is_dump(text: str) -> bool:
    """vLLM's dump of its configuration or of the failing step."""
    return DUMP.search(text) is not None


def is_fault_line(text: str) -> bool:
    """A line a debugger or sanitizer writes about the faulting kernel (see the module docstring)."""
    return FAULT_LINE.search(text) is not None


def starts_fault_report(text: str) -> bool:
    """The first line of a fault report whose next ``FAULT_BLOCK`` lines belong to it."""
    return FAULT_START.search(text) is not None


def is_frame(text: str) -> bool:
    """A traceback frame (Python or torch's C++ trace)."""
    return FRAME.search(text) is not None


def is_python_frame(text: str) -> bool:
    """A Python frame: the line after it is the frame's source line."""
    return FRAME_NEEDLE in text and PY_FRAME.search(text) is not None
