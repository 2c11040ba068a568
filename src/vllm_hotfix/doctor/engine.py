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
``context`` and ``config`` signatures count anywhere. Each signature counts once.

The verdict is by evidence tier, not by a sum: a ``Match`` with a ``specific`` signature is a
candidate for naming the hotfix (the command still needs an in-range version from the log or the
target); one with only ``generic`` evidence is at most "possible"; a ``veto`` signature, another
engine (SGLang, TensorRT-LLM), an Ascend-only hotfix on a CUDA log, or a debugger naming another
kernel as the faulting one rules it out. ``score`` (the weights) only orders matches of one tier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from vllm_hotfix.catalog.model import Manifest
from vllm_hotfix.catalog.signatures import Signature, compile_pattern
from vllm_hotfix.doctor.facts import FACT_NEEDLES, RANK, read_facts
from vllm_hotfix.doctor.normalise import ERROR_NEEDLES, MATCH_LIMIT, NOT_AN_ERROR, is_error, normalise
from vllm_hotfix.doctor.prefilter import Prefilter, Prefiltered, covers

__all__ = ["EPISODE", "Evidence", "Fact", "Findings", "Line", "Match", "Prefilter", "Prefiltered", "Veto", "judge",
           "needles_for", "scan", "scan_text"]

EPISODE = 200  # lines after a process's first error that still belong to it
TEXT_LIMIT = 240
GUARD_NEEDLE = "vllm-hotfix guard pid="  # the guard's one line per process (containers/guard.py summary_line)
GUARD_LINE = re.compile(r"vllm-hotfix guard pid=(\d+) role=(.*?)(?: fingerprint=(\S+))?: ")
XID_NEEDLES = ("MMU Fault", "Fault is of type")  # a dmesg Xid message continued on the next line(s)
XID_CONTINUATION = 3  # lines after an Xid line that may continue it
OTHER_ENGINES = ("sglang", "tensorrt-llm")
# Shorter needles that stand for longer ones of ERROR_NEEDLES, FACT_NEEDLES and XID_NEEDLES (each is part
# of them, so the lines found are a superset). One for several keeps the prefilter to fewer automata;
# "_scheduling" and "he size" do not begin like vLLM's every-request "async_llm.py" and every-metrics-line
# "GPU KV cache usage" (Teddy fingerprints a needle on its first 4 bytes; each false hit costs a check).
SHORTER = ("xception", "RT-LLM", "_config=", "Fault", "vllm-ascend", "_scheduling", "he size")


@dataclass(frozen=True)
class Line:
    """A log line after normalising, with where it came from."""

    source: str
    lineno: int  # 1-based
    process: str
    text: str  # normalised (its first MATCH_LIMIT characters; a continued Xid message joined)
    raw: str  # as logged (ANSI colours removed), cut at TEXT_LIMIT characters
    cut: int = 0  # characters beyond MATCH_LIMIT that were counted, not matched

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"


@dataclass(frozen=True)
class Evidence:
    """A log line that matched a signature, and the signature's role and tier."""

    signature: Signature
    line: Line


@dataclass(frozen=True)
class Fact:
    """Something the log states about the crashed process (doctor.facts)."""

    kind: str  # version | engine | platform | flag | architecture | kernel
    name: str  # the distribution, engine, platform or flag
    value: str
    how: str  # which kind of line said it: banner, dump, collect_env, pip, image, server, frame, line, debugger
    line: Line


@dataclass(frozen=True)
class Veto:
    """Why a hotfix is ruled out: a veto signature's line, or a fact of the log."""

    reason: str
    line: Line
    signature: Signature | None = None


@dataclass(frozen=True)
class Match:
    """A hotfix or advisory the log points at, the evidence for it and what rules it out."""

    manifest: Manifest
    score: float  # sum of the matched weights: orders matches of the same tier
    evidence: tuple[Evidence, ...]  # specific first, then first-error, then by file and line
    vetoes: tuple[Veto, ...] = ()

    @property
    def specific(self) -> bool:
        """Discriminating evidence matched: a candidate for naming the hotfix."""
        return any(e.signature.tier == "specific" for e in self.evidence)

    @property
    def tier(self) -> str:
        """``veto`` (ruled out), ``specific`` or ``generic``: the strongest evidence, vetoes first."""
        return "veto" if self.vetoes else "specific" if self.specific else "generic"

    @property
    def missing(self) -> tuple[Signature, ...]:
        """The specific signatures of the manifest that did not match: what would confirm it."""
        seen = {id(e.signature) for e in self.evidence}
        return tuple(s for s in self.manifest.signatures if s.tier == "specific" and id(s) not in seen)


@dataclass(frozen=True)
class Findings:
    """Everything doctor read in a log: facts, first errors, matches, guard lines."""

    lines: int  # lines read, all sources
    sources: tuple[str, ...]
    first_errors: tuple[Line, ...]  # one per process, in file order
    facts: tuple[Fact, ...]  # first of each (kind, name, value), in file order
    matches: tuple[Match, ...]  # best first: specific, generic, ruled out
    fingerprints: tuple[tuple[str, str, Line], ...] = ()  # (role, fingerprint or "none", line) per guard line
    long_lines: int = 0  # lines longer than MATCH_LIMIT (matched on their beginning)

    @property
    def versions(self) -> tuple[tuple[str, str, Line], ...]:
        """(distribution, version, line): per distribution the release the process itself printed
        (banner, dumped step) before collect_env, pip freeze and image tags; first seen of that rank."""
        best: dict[str, Fact] = {}
        for fact in self.facts:
            if fact.kind == "version":
                held = best.get(fact.name)
                if held is None or RANK[fact.how] < RANK[held.how]:
                    best[fact.name] = fact
        return tuple((d, f.value, f.line) for d, f in best.items())

    def version_conflicts(self) -> tuple[tuple[str, str, Line], ...]:
        """Other releases the log names for a distribution than ``versions`` chose (a pip freeze of
        another install, an image tag): (distribution, version, line)."""
        chosen = {d: v for d, v, _ in self.versions}
        return tuple((f.name, f.value, f.line) for f in self.facts
                     if f.kind == "version" and chosen.get(f.name) not in (None, f.value))

    def values(self, kind: str) -> dict[str, Fact]:
        """The first fact of ``kind`` per name (flags, engines, platforms, architecture, kernel)."""
        found: dict[str, Fact] = {}
        for fact in self.facts:
            if fact.kind == kind:
                found.setdefault(fact.name, fact)
        return found

    @property
    def engine(self) -> Fact | None:
        """The serving engine whose log this is: vLLM when it printed its own lines, else another
        engine seen (SGLang, TensorRT-LLM), else None (an excerpt without a tell)."""
        engines = [f for f in self.facts if f.kind == "engine"]
        server = next((f for f in engines if f.name == "vllm"), None)
        return server or next((f for f in engines if f.name in OTHER_ENGINES), None)

    def fingerprint_problem(self) -> str | None:
        """Why the guard lines show a fleet that does not run the same code: different fingerprints,
        processes reporting none, or logs (nodes) without any guard line while others have one."""
        if not self.fingerprints:
            return None
        seen = {f for _, f, _ in self.fingerprints}
        silent = [s for s in self.sources if s not in {line.source for _, _, line in self.fingerprints}]
        problems = []
        if len(seen - {"none"}) > 1:
            problems.append(f"{len(seen - {'none'})} different fingerprints")
        if "none" in seen:
            problems.append("some processes report no fingerprint")
        if silent:
            problems.append(f"no guard line in {', '.join(silent)}")
        return "; ".join(problems) or None

    def fingerprint_agreement(self) -> tuple[str, int] | None:
        """(fingerprint, number of logs) when every log (node) has guard lines and all carry one
        fingerprint, else None."""
        if not self.fingerprints or self.fingerprint_problem() is not None:
            return None
        return self.fingerprints[0][1], len({line.source for _, _, line in self.fingerprints})


@dataclass(frozen=True)
class _Rule:
    """A compiled signature with the manifest it belongs to."""

    index: int  # into the manifest list
    signature: Signature
    search: Callable[[str], Any] = field(compare=False)


def needles_for(manifests: Sequence[Manifest]) -> tuple[bytes, ...]:
    """Few literals such that every line that can matter contains one: an error line, a fact, a
    continued Xid message, a guard line, a line a signature matches. A signature that an existing
    needle already covers (``prefilter.covers``: every match of it holds one) adds none; a noise
    signature adds none either (it only matters on a line that is an error line or that a
    first-error signature matches, which hold their own needles)."""
    needles = list(ERROR_NEEDLES) + list(FACT_NEEDLES) + list(XID_NEEDLES) + [GUARD_NEEDLE] + list(SHORTER)
    signatures = (s for m in manifests for s in m.signatures if s.role != "noise")
    for signature in sorted(signatures, key=lambda s: -len(s.anchor)):
        if not covers(signature.pattern, needles):
            needles.append(signature.anchor)
    minimal = {n for n in needles if not any(o != n and o in n for o in needles)}
    return tuple(sorted(n.encode() for n in minimal))


class _Scan:
    """The mutable part of one scan; ``scan`` returns only frozen results."""

    def __init__(self, manifests: Sequence[Manifest], prefilter_: Prefilter | None = None):
        self.manifests = tuple(manifests)
        rules = [_Rule(i, s, compile_pattern(s.pattern)) for i, m in enumerate(self.manifests) for s in m.signatures]
        self.noise = [r for r in rules if r.signature.role == "noise"]
        self.first = [r for r in rules if r.signature.role == "first-error"]
        self.anywhere = [r for r in rules if r.signature.role in ("context", "config")]
        self.prefilter = prefilter_ or Prefilter(needles_for(self.manifests))
        self.first_errors: dict[tuple[str, str], Line] = {}
        self.hits: dict[int, Evidence] = {}  # id(rule) -> its first evidence
        self.facts: dict[tuple[str, str, str], Fact] = {}
        self.fingerprints: list[tuple[str, str, Line]] = []
        self.last_xid: dict[str, tuple[int, str]] = {}  # source -> (lineno, text) of its last Xid line
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

        for kind, name, value, how in read_facts(text):
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
        if not noise and key not in self.first_errors and is_error(text):
            self.first_errors[key] = make()
        first = self.first_errors.get(key)
        rules = list(self.anywhere)
        if first is not None and lineno - first.lineno <= EPISODE and not noise:
            rules += self.first
        for rule in rules:
            if id(rule) in self.hits or rule.signature.anchor not in matched or not rule.search(matched):
                continue
            line = make() if matched is text else Line(source, lineno, process, matched, raw[:TEXT_LIMIT], cut)
            self.hits[id(rule)] = Evidence(rule.signature, line)

    def findings(self, sources: Sequence[str]) -> Findings:
        order = {s: i for i, s in enumerate(sources)}
        facts = tuple(sorted(self.facts.values(), key=lambda f: (order.get(f.line.source, 0), f.line.lineno)))
        firsts = sorted(self.first_errors.values(), key=lambda l: (order.get(l.source, 0), l.lineno))
        base = Findings(self.lines, tuple(sources), tuple(firsts), facts, (), tuple(self.fingerprints), self.long_lines)
        by_manifest: dict[int, list[Evidence]] = {}
        for rule in self.first + self.anywhere:
            if id(rule) in self.hits:
                by_manifest.setdefault(rule.index, []).append(self.hits[id(rule)])
        matches = []
        for index, evidence in by_manifest.items():
            match = judge(self.manifests[index], evidence, base)
            if any(e.signature.role == "first-error" or e.signature.tier == "specific" for e in match.evidence):
                matches.append(match)
        matches.sort(key=lambda m: ({"specific": 0, "generic": 1, "veto": 2}[m.tier], -m.score, m.manifest.id))
        return Findings(base.lines, base.sources, base.first_errors, facts, tuple(matches), base.fingerprints,
                        base.long_lines)


def judge(manifest: Manifest, evidence: Iterable[Evidence], findings: Findings) -> Match:
    """One manifest's match: its evidence (each signature once), ordered specific, first-error, then by
    place; the vetoes (veto signatures, and facts of the log that contradict the manifest)."""
    found = [e for e in evidence if e.signature.tier != "veto"]
    found.sort(key=lambda e: (e.signature.tier != "specific", e.signature.role != "first-error", e.line.source, e.line.lineno))
    vetoes = [Veto(e.signature.explain, e.line, e.signature) for e in evidence if e.signature.tier == "veto"]
    engine = findings.engine
    if engine is not None and engine.name != "vllm":
        vetoes.append(Veto(f"the log is of {engine.value}, not vLLM", engine.line))
    platforms = findings.values("platform")
    if set(platforms) == {"cuda"} and all(t.distribution == "vllm-ascend" for t in manifest.targets):
        vetoes.append(Veto("the log is of vLLM on CUDA GPUs; this is a vllm-ascend (NPU) issue", platforms["cuda"].line))
    kernels = [f for f in findings.facts if f.kind == "kernel"]
    specific = [compile_pattern(s.pattern) for s in manifest.signatures if s.tier == "specific"]
    if kernels and specific and not any(search(k.line.text) for k in kernels for search in specific):
        vetoes.append(Veto(f"the debugger names {kernels[0].value} as the faulting kernel, not this issue's", kernels[0].line))
    return Match(manifest, round(sum(e.signature.weight for e in found), 3), tuple(found), tuple(vetoes))


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
