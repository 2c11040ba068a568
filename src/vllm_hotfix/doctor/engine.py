"""The log engine: chunks of whole lines in, first errors and scored signature matches out. No I/O.

``scan(sources, manifests)`` takes ``(name, chunks)`` pairs, each chunk a ``bytes`` of complete lines
(one line is a chunk too), so a caller can stream gigabytes in blocks. Only the lines that contain one of
a few literal needles (the signatures' anchors, the words of an error line, the version banners) are
decoded and looked at; finding them is ``bytes.find``, which is what keeps this near ``grep -E``.

Per process (``(EngineCore_DP0 pid=…)``, a plog's pid, or the file itself) the first error line that is
not known noise is that process's *first error*; a ``first-error`` signature counts only on it and the
``EPISODE`` lines after it in the same file (the traceback, the device error after the stream error).
``context`` and ``config`` signatures count anywhere. Each signature counts once; a manifest's score is
the sum of its matched weights, and it is *named* at ``NAME_AT`` with at least one first-error match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from vllm_hotfix.doctor.normalise import ERROR_NEEDLES, is_error, normalise
from vllm_hotfix.catalog.model import Manifest
from vllm_hotfix.catalog.signatures import Signature, literal_runs

EPISODE = 200  # lines after a process's first error that still belong to it
NAME_AT = 1.0  # score at which a hotfix is named
HIGH_AT = 1.5  # score from which the confidence is "high"
VERSION_BANNERS = (  # (needle, pattern, distribution): the release a log was written by
    ("API server version", re.compile(r"vLLM API server version v?(\d[\w.+-]*)"), "vllm"),
    ("LLM engine (v", re.compile(r"Initializing a V\d LLM engine \(v(\d[\w.+-]*)\)"), "vllm"),
    ("vllm_ascend version", re.compile(r"vllm_ascend version:? v?(\d[\w.+-]*)"), "vllm-ascend"),
)
TEXT_LIMIT = 240
GUARD_NEEDLE = "vllm-hotfix guard pid="  # the guard's one line per process (containers/guard.py summary_line)
GUARD_LINE = re.compile(r"vllm-hotfix guard pid=(\d+) role=(.*?)(?: fingerprint=(\S+))?: ")


@dataclass(frozen=True)
class Line:
    """A log line after normalising, with where it came from."""

    source: str
    lineno: int  # 1-based
    process: str
    text: str  # normalised
    raw: str  # as logged (ANSI colours removed), cut at TEXT_LIMIT characters

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"


@dataclass(frozen=True)
class Evidence:
    """A log line that matched a signature, and the signature's role."""

    signature: Signature
    line: Line


@dataclass(frozen=True)
class Match:
    """A hotfix or advisory the log points at, and the evidence for it."""

    manifest: Manifest
    score: float
    evidence: tuple[Evidence, ...]  # first-error first, then by file and line

    @property
    def named(self) -> bool:
        return self.score >= NAME_AT - 1e-9 and any(e.signature.role == "first-error" for e in self.evidence)

    @property
    def confidence(self) -> str:
        if not self.named:
            return "low"
        return "high" if self.score >= HIGH_AT - 1e-9 else "medium"


@dataclass(frozen=True)
class Findings:
    """Everything doctor read in a log: matches, first errors, guard lines."""

    lines: int  # lines read, all sources
    sources: tuple[str, ...]
    first_errors: tuple[Line, ...]  # one per process, in file order
    versions: tuple[tuple[str, str, Line], ...]  # (distribution, version, where) as the log says, first seen
    matches: tuple[Match, ...]  # every manifest with a first-error match, best first
    fingerprints: tuple[tuple[str, str, Line], ...] = ()  # (role, fingerprint or "none", line) per guard line

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


@dataclass(frozen=True)
class _Rule:
    """A compiled signature with the manifest it belongs to."""

    index: int  # into the manifest list
    signature: Signature
    regex: re.Pattern


@dataclass(frozen=True)
class Prefiltered:
    """The lines of a chunk worth looking at: (0-based index of the line in the chunk, its bytes)."""

    lines: tuple[tuple[int, bytes], ...]
    count: int  # lines in the chunk (a last line without a newline counts)


def needles_for(manifests: Sequence[Manifest]) -> tuple[bytes, ...]:
    """Few literals such that every line that can matter contains one: an error line, a version banner,
    a line a signature matches. A signature whose literal text already contains a needle adds none
    (each needle costs one ``bytes.find`` pass over the log)."""
    needles = list(ERROR_NEEDLES) + [needle for needle, _, _ in VERSION_BANNERS] + [GUARD_NEEDLE]
    for signature in sorted((s for m in manifests for s in m.signatures), key=lambda s: -len(s.anchor)):
        runs = literal_runs(signature.pattern)
        if not any(n in run for run in runs for n in needles):
            needles.append(signature.anchor)
    minimal = {n for n in needles if not any(o != n and o in n for o in needles)}
    return tuple(sorted(n.encode() for n in minimal))


def prefilter(chunk: bytes, needles: Iterable[bytes]) -> Prefiltered:
    """The lines of ``chunk`` (whole lines) that contain one of ``needles``; pure, any process can run it."""
    starts: set[int] = set()
    find, rfind = chunk.find, chunk.rfind
    for needle in needles:
        at = find(needle)
        while at != -1:
            starts.add(rfind(b"\n", 0, at) + 1)
            end = find(b"\n", at)
            if end == -1:
                break
            at = find(needle, end + 1)
    lines, counted, index = [], 0, 0
    for start in sorted(starts):
        index += chunk.count(b"\n", counted, start)
        counted = start
        end = find(b"\n", start)
        lines.append((index, chunk[start:] if end == -1 else chunk[start:end]))
    return Prefiltered(tuple(lines), chunk.count(b"\n") + (0 if not chunk or chunk.endswith(b"\n") else 1))


class _Scan:
    """The mutable part of one scan; ``scan`` returns only frozen results."""

    def __init__(self, manifests: Sequence[Manifest]):
        self.manifests = tuple(manifests)
        rules = [_Rule(i, s, re.compile(s.pattern)) for i, m in enumerate(self.manifests) for s in m.signatures]
        self.noise = [r for r in rules if r.signature.role == "noise"]
        self.first = [r for r in rules if r.signature.role == "first-error"]
        self.anywhere = [r for r in rules if r.signature.role in ("context", "config")]
        self.needles = needles_for(self.manifests)
        self.first_errors: dict[tuple[str, str], Line] = {}
        self.hits: dict[int, Evidence] = {}  # id(rule) -> its first evidence
        self.versions: dict[str, tuple[str, Line]] = {}
        self.fingerprints: list[tuple[str, str, Line]] = []
        self.lines = 0

    def feed(self, source: str, chunks: Iterable[bytes | Prefiltered]) -> None:
        base = 0  # lines of this source before the current chunk
        for chunk in chunks:
            part = chunk if isinstance(chunk, Prefiltered) else prefilter(chunk, self.needles)
            for index, raw in part.lines:
                self.line(source, base + index + 1, raw.decode("utf-8", "replace"))
            base += part.count
        self.lines += base

    def line(self, source: str, lineno: int, raw: str) -> None:
        process, text = normalise(raw)
        line = None

        def make() -> Line:
            return Line(source, lineno, process, text, raw.rstrip("\r\n")[:TEXT_LIMIT])

        for needle, pattern, distribution in VERSION_BANNERS:
            if needle in text and distribution not in self.versions:
                found = pattern.search(text)
                if found:
                    line = line or make()
                    self.versions[distribution] = (found.group(1), line)
        if GUARD_NEEDLE in raw:
            guard = GUARD_LINE.search(raw)
            if guard:
                line = line or make()
                fingerprint = guard.group(3) or "none"
                self.fingerprints.append((guard.group(2), "none" if fingerprint.endswith("-none") else fingerprint, line))
        noise = any(r.signature.anchor in text and r.regex.search(text) for r in self.noise)
        key = (source, process)
        if not noise and key not in self.first_errors and is_error(text):
            line = line or make()
            self.first_errors[key] = line
        first = self.first_errors.get(key)
        rules = list(self.anywhere)
        if first is not None and lineno - first.lineno <= EPISODE and not noise:
            rules += self.first
        for rule in rules:
            if id(rule) in self.hits or rule.signature.anchor not in text or not rule.regex.search(text):
                continue
            line = line or make()
            self.hits[id(rule)] = Evidence(rule.signature, line)

    def findings(self, sources: Sequence[str]) -> Findings:
        by_manifest: dict[int, list[Evidence]] = {}
        for rule in self.first + self.anywhere:
            if id(rule) in self.hits:
                by_manifest.setdefault(rule.index, []).append(self.hits[id(rule)])
        matches = [score(self.manifests[i], evidence) for i, evidence in by_manifest.items()]
        matches = [m for m in matches if any(e.signature.role == "first-error" for e in m.evidence)]
        matches.sort(key=lambda m: (not m.named, -m.score, m.manifest.id))
        order = {s: i for i, s in enumerate(sources)}
        firsts = sorted(self.first_errors.values(), key=lambda l: (order.get(l.source, 0), l.lineno))
        versions = tuple((d, v, line) for d, (v, line) in self.versions.items())
        return Findings(self.lines, tuple(sources), tuple(firsts), versions, tuple(matches), tuple(self.fingerprints))


def score(manifest: Manifest, evidence: Iterable[Evidence]) -> Match:
    """Sum the weights of the matched signatures (each once); first-error evidence first."""
    ordered = sorted(evidence, key=lambda e: (e.signature.role != "first-error", e.line.source, e.line.lineno))
    return Match(manifest, round(sum(e.signature.weight for e in ordered), 3), tuple(ordered))


def scan(sources: Iterable[tuple[str, Iterable[bytes | Prefiltered]]], manifests: Sequence[Manifest]) -> Findings:
    """Read every source (name, chunks of whole lines) once, in order; match ``manifests``' signatures.

    A chunk may also come prefiltered (``prefilter(chunk, needles_for(manifests))``, e.g. computed in
    another process): the result is the same."""
    state = _Scan(manifests)
    names = []
    for name, chunks in sources:
        names.append(name)
        state.feed(name, chunks)
    return state.findings(names)


def scan_text(text: str | bytes, manifests: Sequence[Manifest], source: str = "<log>") -> Findings:
    """``scan`` of one in-memory log (tests, small inputs)."""
    data = text.encode() if isinstance(text, str) else text
    return scan([(source, [data])], manifests)
