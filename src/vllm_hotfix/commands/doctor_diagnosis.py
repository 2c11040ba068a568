"""What `hotfix doctor` concludes for one matching hotfix (``Diagnosis``) and the words its states print as.

Decided in commands/doctor.py, printed by commands/doctor_report.py: both import from here, neither from
the other.
"""

from __future__ import annotations

from dataclasses import dataclass


IN_EFFECT = ("applied", "fixed-upstream")  # core.verdict.IN_EFFECT; every other state of a confident match: needed
OUT_OF_RANGE = ("not-applicable", "fixed-upstream")
HEADLINE = {"not-applied": "needed, not applied", "lost": "needed, lost (recorded, but the files are back to baseline)",
            "stale": "needed, stale (recorded on another release than the one installed)",
            "stale-bytecode": "needed, stale bytecode (the files hold it, a __pycache__ entry does not)",
            "drifted": "needed, drifted (a touched file was changed)", "unknown": "needed? state unknown",
            "interrupted": "needed? an apply or rollback was interrupted (run hotfix recover)",
            "applied": "already applied", "fixed-upstream": "fixed upstream", "not-applicable": "not applicable"}


@dataclass(frozen=True)
class Diagnosis:
    """What doctor concludes for one matching hotfix on this target."""

    id: str
    version: int | str
    kind: str
    title: str
    level: str  # confident | possible | shared (no candidate: a generic error alone) | ruled-out
    score: float
    state: str  # the state word of _target_state ("" when none was asked)
    detail: str
    next: str | None
    evidence: tuple  # of engine Evidence
    vetoes: tuple = ()  # of engine Veto
    check: tuple[str, ...] = ()  # possible: what would confirm it
    upgrade: str | None = None  # "vllm 0.32.0": the release with the fix, the alternative to a patch
    confirm: tuple = ()  # possible: the manifest's ConfirmSteps (how to make the confirming evidence appear)
    then: str | None = None  # possible: the command to run once confirmed (hotfix apply ID --dry-run ...)
    tell_apart: tuple[str, ...] = ()  # shared: what would make it a candidate (its conditions, its specific evidence)

    @property
    def named(self) -> bool:
        return self.level == "confident"

    def to_json(self) -> dict:
        return {"id": self.id, "version": self.version, "kind": self.kind, "title": self.title, "level": self.level,
                "named": self.named, "score": self.score, "state": self.state, "detail": self.detail,
                "next": self.next, "upgrade": self.upgrade, "check": list(self.check),
                "confirm": [{"step": c.step, "shows": c.shows} for c in self.confirm], "then": self.then,
                "tell_apart": list(self.tell_apart),
                "vetoes": [{"reason": v.reason, "source": v.line.source, "line": v.line.lineno, "text": v.line.raw}
                           for v in self.vetoes],
                "evidence": [
                    {"source": e.line.source, "line": e.line.lineno, "process": e.line.process, "tier": e.signature.tier,
                     "role": e.role or e.signature.role, "weight": e.signature.weight, "confirmed": e.signature.confirmed,
                     "text": e.line.raw, "normalised": e.line.text, "explain": e.signature.explain}
                    for e in self.evidence]}
