"""What doctor found in a log, as frozen results: lines, evidence, facts, vetoes, matches, root errors.

The model of ``doctor.engine`` (which builds these and nothing else writes them); pure, no I/O.
``Findings`` answers the questions the command and the report ask of a scan: the log's releases,
engine and platform, the guard fingerprints' agreement.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_hotfix.catalog.model import Manifest
from vllm_hotfix.catalog.signatures import Signature
from vllm_hotfix.doctor.log_facts import RANK, VENDOR_PLATFORMS

OTHER_ENGINES = ("sglang", "tensorrt-llm")


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
    """A log line that matched a signature, the signature (its tier), and the role it counted in."""

    signature: Signature
    line: Line
    role: str = ""  # the one of the signature's roles whose context the line is in


@dataclass(frozen=True)
class RootError:
    """A process's root error: its innermost exception (else its first error line), and the wrappers
    after it (the first error line, the outer exceptions of the chain)."""

    line: Line
    wrappers: tuple[Line, ...] = ()
    echo: bool = False  # it only points at another error (see root cause above, a worker died)


@dataclass(frozen=True)
class Fact:
    """Something the log states about the crashed process (doctor.log_facts)."""

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
    def conditions(self) -> tuple[Evidence, ...]:
        """The evidence that the bug's trigger condition holds (align mode on, the backend, ...)."""
        return tuple(e for e in self.evidence if e.signature.tier == "condition")

    @property
    def errors(self) -> tuple[Evidence, ...]:
        """The generic error lines matched (what other crashes of the kind share)."""
        return tuple(e for e in self.evidence if e.signature.tier == "generic")

    @property
    def tier(self) -> str:
        """``veto`` (ruled out), ``specific``, ``condition`` (a generic error and a fact of the bug's
        trigger: "possible") or ``generic`` (a shared error alone: no candidate), vetoes first."""
        return "veto" if self.vetoes else "specific" if self.specific else "condition" if self.conditions else "generic"

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
    matches: tuple[Match, ...]  # best first: specific, condition, generic, ruled out
    fingerprints: tuple[tuple[str, str, Line], ...] = ()  # (role, fingerprint or "none", line) per guard line
    long_lines: int = 0  # lines longer than MATCH_LIMIT (matched on their beginning)
    root_errors: tuple[RootError, ...] = ()  # one per process: causes first, echoes after, each in file order

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
        """The serving engine whose log this is: vllm-ascend or vLLM when they printed their own lines,
        else another engine seen (SGLang, TensorRT-LLM), else None (an excerpt without a tell)."""
        engines = self.values("engine")
        for name in ("vllm-ascend", "vllm", *OTHER_ENGINES):
            if name in engines:
                return engines[name]
        return None

    @property
    def platform(self) -> Fact | None:
        """The accelerator the log is of: a CUDA-compatible vendor's or ROCm's or Ascend's own lines
        decide (they print CUDA's words too), else CUDA when its lines are there, else None."""
        platforms = self.values("platform")
        for name in (*VENDOR_PLATFORMS, "cuda"):
            if name in platforms:
                return platforms[name]
        return next(iter(platforms.values()), None)

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
