"""The log engine: blocks of log bytes in, first errors, the log's facts and tiered matches out. No I/O.

``scan(sources, manifests)`` takes ``(name, chunks)`` pairs, each chunk a ``bytes`` block cut anywhere
(a line may run over into the next block; a block that ends in a newline ends its line), so a caller
can stream gigabytes as it reads them. Only the lines that contain one of a few literal needles
(``needles_for``: the words of an error line, the facts' words, the signatures' anchors) are decoded and
looked at; finding them is the prefilter's job (``doctor.prefilter``: SIMD Aho-Corasick when
``ahocorasick-rs`` is installed, else ``bytes.find`` per needle), which keeps doctor near ``grep``. A
line is normalised and matched on its first ``MATCH_LIMIT`` characters only (the rest is counted), and
signatures are compiled by RE2 (``catalog.signatures.compile_pattern``): no line hangs it.

Per process (``(EngineCore_DP0 pid=…)``, a plog's pid, or the file itself) the first error line that is
not known noise is that process's *first error*; a ``first-error`` signature counts only on it and the
``EPISODE`` lines after it in the same file (the traceback, the device error after the stream error).
The process's *root error* is the innermost exception of that episode (the first ``…Error:`` line
Python prints in a chain: the one that caused the wrappers), shown before the wrappers.
Where else a signature counts is its roles' context (``doctor.contexts``): a fault report, a traceback
frame, one of the log's own error lines, a config line, anywhere; a table row or prose counts for
``context`` only. Each signature counts once.

The verdict is by evidence tier, not by a sum: a ``Match`` with a ``specific`` signature is a
candidate for naming the hotfix (the command still needs an in-range version from the log or the
target); one with a ``condition`` (the bug's trigger: align mode on, the backend) besides its
generic error is at most "possible"; one with only ``generic`` evidence is no candidate at all (the
command says which entries share the error). A ``veto`` signature, another engine (SGLang,
TensorRT-LLM), a platform the manifest's bug does not occur on, or a debugger naming another kernel
as the faulting one rules it out. ``score`` (the weights) only orders matches of one tier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from vllm_hotfix.catalog.model import Manifest
from vllm_hotfix.catalog.signatures import Signature, compile_pattern
from vllm_hotfix.doctor import contexts
from vllm_hotfix.doctor.log_facts import FACT_NEEDLES, VLLM_ENGINES, read_facts
from vllm_hotfix.doctor.findings import Evidence, Fact, Findings, Line, Match, RootError, Veto
from vllm_hotfix.doctor.normalise import ERROR_NEEDLES, MATCH_LIMIT, NOT_AN_ERROR, is_error, normalise
from vllm_hotfix.doctor.prefilter import Prefilter, Prefiltered, covers

__all__ = ["EPISODE", "Evidence", "Fact", "Findings", "Line", "Match", "Prefilter", "Prefiltered", "RootError", "Veto",
           "match_manifest", "manifest_platforms", "needles_for", "scan", "scan_text"]

EPISODE = 200  # lines after a process's first error that still belong to it
TEXT_LIMIT = 240
GUARD_NEEDLE = "vllm-hotfix guard pid="  # the guard's one line per process (vllm_hotfix_guard/plugin.py summary_line)
GUARD_LINE = re.compile(r"vllm-hotfix guard pid=(\d+) role=(.*?)(?: fingerprint=(\S+))?: ")
XID_NEEDLES = ("MMU Fault", "Fault is of type")  # a dmesg Xid message continued on the next line(s)
XID_CONTINUATION = 3  # lines after an Xid line that may continue it
# an exception line (normalised: vLLM's level and [file:line] may come first): what a traceback ends with
EXCEPTION = re.compile(r"^(?:(?:ERROR|CRITICAL)\s+(?:\[[^\]]*\]\s*)?)?(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception)(?::\s|$)")
# an error that only points at another one (a wrapper, an echo): shown after the errors that caused it
ECHO = re.compile(r"See (?:root cause|stack trace)|root cause above|stack trace above|died (?:before responding|unexpectedly)"
                  r"|EngineDeadError|in a background process|failed to start|initialization failed|\bRPC call to \w+ "
                  r"(?:aborted|timed out)|hit an exception\.?$|encountered a fatal error|Error: cancelled$")
WRAPPERS = 3  # wrapper lines kept per root error
LEVEL_PREFIX = re.compile(r"^(?:ERROR|CRITICAL)\s+(?:\[[^\]]*\]\s*)?")


def _message(text: str) -> str:
    """An error line's message without vLLM's level and [file:line] (the same exception printed twice)."""
    return LEVEL_PREFIX.sub("", text, count=1)
# Shorter needles that stand for longer ones of ERROR_NEEDLES, FACT_NEEDLES and XID_NEEDLES (each is part
# of them, so the lines found are a superset). One for several keeps the prefilter to fewer automata;
# "_scheduling" and "he size" do not begin like vLLM's every-request "async_llm.py" and every-metrics-line
# "GPU KV cache usage" (Teddy fingerprints a needle on its first 4 bytes; each false hit costs a check).
SHORTER = ("xception", "RT-LLM", "_config=", "Fault", "vllm-ascend", "_scheduling", "he size")


@dataclass(frozen=True)
class _Rule:
    """A compiled signature with the manifest it belongs to."""

    index: int  # into the manifest list
    signature: Signature
    search: Callable[[str], Any] = field(compare=False)


def needles_for(manifests: Sequence[Manifest]) -> tuple[bytes, ...]:
    """Few literals such that every line that can matter contains one: an error line, a fact, a
    continued Xid message, a guard line, a Python traceback frame (the line under it is its source
    line), a line a signature matches. A signature that an existing needle already covers
    (``prefilter.covers``: every match of it holds one) adds none; a noise signature adds none either
    (it only matters on a line that is an error line or that a first-error signature matches, which
    hold their own needles), nor does one that counts only on error lines (role ``error-line``: every
    error line holds an error needle)."""
    needles = list(ERROR_NEEDLES) + list(FACT_NEEDLES) + list(XID_NEEDLES) + [GUARD_NEEDLE, contexts.FRAME_NEEDLE] \
        + list(SHORTER)
    signatures = (s for m in manifests for s in m.signatures if s.roles not in (("noise",), ("error-line",)))
    for signature in sorted(signatures, key=lambda s: -len(s.anchor)):
        if not covers(signature.pattern, needles):
            needles.append(signature.anchor)
    minimal = {n for n in needles if not any(o != n and o in n for o in needles)}
    return tuple(sorted(n.encode() for n in minimal))


def manifest_platforms(manifest: Manifest) -> tuple[str, ...]:
    """The platforms a manifest's bug occurs on: its ``platforms``, else Ascend for a manifest whose
    every target is vllm-ascend, else () (any)."""
    if manifest.platforms:
        return manifest.platforms
    if manifest.targets and all(t.distribution == "vllm-ascend" for t in manifest.targets):
        return ("ascend",)
    return ()


class _Scan:
    """The mutable part of one scan; ``scan`` returns only frozen results."""

    def __init__(self, manifests: Sequence[Manifest], prefilter_: Prefilter | None = None):
        self.manifests = tuple(manifests)
        rules = [_Rule(i, s, compile_pattern(s.pattern)) for i, m in enumerate(self.manifests) for s in m.signatures]
        self.noise = [r for r in rules if r.signature.roles == ("noise",)]
        self.rules = [r for r in rules if r.signature.roles != ("noise",)]
        self.prefilter = prefilter_ or Prefilter(needles_for(self.manifests))
        self.first_errors: dict[tuple[str, str], Line] = {}
        self.exceptions: dict[tuple[str, str], list[Line]] = {}  # per process: exception lines of its first error's episode
        self.hits: dict[int, Evidence] = {}  # id(rule) -> its first evidence
        self.facts: dict[tuple[str, str, str], Fact] = {}
        self.fingerprints: list[tuple[str, str, Line]] = []
        self.last_xid: dict[str, tuple[int, str]] = {}  # source -> (lineno, text) of its last Xid line
        self.fault_start: dict[str, int] = {}  # source -> line number of the last fault report's first line
        self.frame_at: dict[tuple[str, str], int] = {}  # (source, process) -> line number of its last Python frame
        self.lines = 0
        self.long_lines = 0

    def feed(self, source: str, chunks: Iterable[bytes | Prefiltered]) -> None:
        base = 0  # lines of this source before the current part
        for part in self.prefilter.stream(chunks):
            beyond = dict(part.cut) if part.cut else None
            for index, raw in part.lines:
                self.line(source, base + index + 1, raw, beyond.get(index, 0) if beyond else 0)
            base += part.count
        self.lines += base

    def line(self, source: str, lineno: int, data: bytes, beyond: int = 0) -> None:
        """One candidate line: ``data`` its first bytes (prefilter.LINE_HEAD at most), ``beyond`` the bytes
        of it that were counted and not kept (a line is never held whole)."""
        raw = data[:MATCH_LIMIT * 4].decode("utf-8", "replace").rstrip("\r\n")
        cut = len(raw) - MATCH_LIMIT if len(raw) > MATCH_LIMIT else 0
        if cut or len(data) > MATCH_LIMIT * 4 or beyond:
            self.long_lines += 1
            cut += max(0, len(data) - MATCH_LIMIT * 4) + beyond
            raw = raw[:MATCH_LIMIT]
        process, text = normalise(raw)
        made: list[Line] = []

        def make() -> Line:
            if not made:
                made.append(Line(source, lineno, process, text, raw[:TEXT_LIMIT], cut))
            return made[0]

        mention = contexts.is_mention(text)
        for kind, name, value, how in read_facts(text):
            if kind == "kernel" and mention:
                continue  # a kernel named in a table or in prose did not fault
            self.facts.setdefault((kind, name, value), Fact(kind, name, value, how, make()))
        if GUARD_NEEDLE in raw:
            guard = GUARD_LINE.search(raw)
            if guard:
                fingerprint = guard.group(3) or "none"
                self.fingerprints.append((guard.group(2), "none" if fingerprint.endswith("-none") else fingerprint, make()))
        matched = text
        if "NVRM: Xid" in text:
            self.last_xid[source] = (lineno, text)
        elif source in self.last_xid and lineno - self.last_xid[source][0] <= XID_CONTINUATION \
                and ("NVRM:" in text or any(n in text for n in XID_NEEDLES)):
            matched = f"{self.last_xid[source][1]} {text}"  # the message the kernel split over lines
        noise = NOT_AN_ERROR.search(text) is not None or \
            any(r.signature.anchor in text and r.search(text) for r in self.noise)
        key = (source, process)
        error = not noise and not mention and is_error(text)
        if error and key not in self.first_errors:
            self.first_errors[key] = make()
        first = self.first_errors.get(key)
        episode = first is not None and lineno - first.lineno <= EPISODE and not noise and not mention
        if episode and EXCEPTION.search(text):
            self.exceptions.setdefault(key, []).append(make())
        if not mention and contexts.starts_fault_report(text):
            self.fault_start[source] = lineno
        after_frame = self.frame_at.get(key) == lineno - 1
        if contexts.is_python_frame(text):
            self.frame_at[key] = lineno
        where: dict[str, bool] = {}

        in_report = source in self.fault_start and 0 <= lineno - self.fault_start[source] <= contexts.FAULT_BLOCK

        def counts(role: str) -> bool:  # is this line in the context ``role`` names? (doctor.contexts)
            if role == "context":
                return True
            if role == "fault-report" and in_report and not contexts.is_table(text):
                return True  # inside a debugger's report: its `info cuda kernels` row starts with '*', no list item
            if mention:
                return False
            if role == "config":
                return True
            if role == "first-error":
                return episode
            if role not in where:
                dump = contexts.is_dump(text)
                where["error-line"] = error and not dump and contexts.is_error_report(text)
                where["fault-report"] = not dump and contexts.is_fault_line(text)
                where["traceback"] = not dump and (after_frame or contexts.is_frame(text))
            return where[role]

        for rule in self.rules:
            if id(rule) in self.hits or rule.signature.anchor not in matched or not rule.search(matched):
                continue
            role = next((r for r in rule.signature.roles if counts(r)), None)
            if role is None:
                continue
            line = make() if matched is text else Line(source, lineno, process, matched, raw[:TEXT_LIMIT], cut)
            self.hits[id(rule)] = Evidence(rule.signature, line, role)

    def root_errors(self, order: dict[str, int]) -> tuple[RootError, ...]:
        roots = []
        for key, first in self.first_errors.items():
            chain = self.exceptions.get(key, [])
            root = chain[0] if chain else first
            message = _message(root.text)
            wrappers = ([first] if first is not root else []) + [line for line in chain[1:] if _message(line.text) != message]
            roots.append(RootError(root, tuple(wrappers[:WRAPPERS]), ECHO.search(root.text) is not None))
        return tuple(sorted(roots, key=lambda r: (r.echo, order.get(r.line.source, 0), r.line.lineno)))

    def findings(self, sources: Sequence[str]) -> Findings:
        order = {s: i for i, s in enumerate(sources)}
        facts = tuple(sorted(self.facts.values(), key=lambda f: (order.get(f.line.source, 0), f.line.lineno)))
        firsts = sorted(self.first_errors.values(), key=lambda l: (order.get(l.source, 0), l.lineno))
        base = Findings(self.lines, tuple(sources), tuple(firsts), facts, (), tuple(self.fingerprints), self.long_lines,
                        self.root_errors(order))
        by_manifest: dict[int, list[Evidence]] = {}
        for rule in self.rules:
            if id(rule) in self.hits:
                by_manifest.setdefault(rule.index, []).append(self.hits[id(rule)])
        matches = []
        for index, evidence in by_manifest.items():
            match = match_manifest(self.manifests[index], evidence, base)
            if any(e.role in ("first-error", "error-line") or e.signature.tier == "specific" for e in match.evidence):
                matches.append(match)
        matches.sort(key=lambda m: ({"specific": 0, "condition": 1, "generic": 2, "veto": 3}[m.tier], -m.score, m.manifest.id))
        return Findings(base.lines, base.sources, base.first_errors, facts, tuple(matches), base.fingerprints,
                        base.long_lines, base.root_errors)


def match_manifest(manifest: Manifest, evidence: Iterable[Evidence], findings: Findings) -> Match:
    """One manifest's match: its evidence (each signature once), ordered specific, condition, error, then
    by place; the vetoes (veto signatures, and facts of the log that contradict the manifest: another
    engine, a platform its bug does not occur on, a debugger naming another kernel as the faulting one)."""
    found = [e for e in evidence if e.signature.tier != "veto"]
    rank = {"specific": 0, "condition": 1, "generic": 2}
    found.sort(key=lambda e: (rank[e.signature.tier], e.role != "first-error", e.line.source, e.line.lineno))
    vetoes = [Veto(e.signature.explain, e.line, e.signature) for e in evidence if e.signature.tier == "veto"]
    engine = findings.engine
    if engine is not None and engine.name not in VLLM_ENGINES:
        vetoes.append(Veto(f"the log is of {engine.value}, not vLLM", engine.line))
    platform = findings.platform
    wanted = manifest_platforms(manifest)
    if platform is not None and wanted and platform.name not in wanted:
        vetoes.append(Veto(f"the log is of {platform.name} ({PLATFORM_WORDS.get(platform.name, platform.name)}); this "
                           f"issue occurs on {', '.join(PLATFORM_WORDS.get(p, p) for p in wanted)}", platform.line))
    kernels = [f for f in findings.facts if f.kind == "kernel"]
    specific = [compile_pattern(s.pattern) for s in manifest.signatures if s.tier == "specific"]
    if kernels and specific and not any(search(k.line.text) for k in kernels for search in specific):
        vetoes.append(Veto(f"the fault report names {kernels[0].value} as the faulting kernel, not this issue's",
                           kernels[0].line))
    return Match(manifest, round(sum(e.signature.weight for e in found), 3), tuple(found), tuple(vetoes))


PLATFORM_WORDS = {"cuda": "NVIDIA CUDA GPUs", "rocm": "AMD ROCm GPUs", "ascend": "Ascend NPUs",
                  "metax": "MetaX GPUs, CUDA-compatible", "xpu": "Intel XPUs", "tpu": "TPUs", "cpu": "CPUs"}


def scan(sources: Iterable[tuple[str, Iterable[bytes | Prefiltered]]], manifests: Sequence[Manifest], *,
         prefilter_: Prefilter | None = None) -> Findings:
    """Read every source (name, blocks of its bytes) once, in order; match ``manifests``' signatures.

    A chunk may also come prefiltered (``Prefilter(needles_for(manifests))(chunk)`` of whole lines, e.g.
    ``grep -F`` in another process): the result is the same."""
    state = _Scan(manifests, prefilter_)
    names = []
    for name, chunks in sources:
        names.append(name)
        state.feed(name, chunks)
    return state.findings(names)


def scan_text(text: str | bytes, manifests: Sequence[Manifest], source: str = "<log>") -> Findings:
    """``scan`` of one in-memory log (tests, small inputs)."""
    data = text.encode() if isinstance(text, str) else text
    return scan([(source, [data])], manifests)
