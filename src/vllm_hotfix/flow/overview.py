"""Everything this state directory records, target by target (`hotfix status --all`): what is applied on
this machine, each target's series in order with its words, and the targets that are gone.

Which targets exist and which are gone is gc's judgement (flow/gone_targets.survey: the one answer); each live
target is judged as `hotfix status` judges it, through the interpreter its record names (the one
resolution), else as the checkout it is (``--root``). A target whose recorded interpreter no longer
loads it is listed, not judged (said why).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix_guard.errors import HotfixError
from vllm_hotfix.flow import gone_targets
from vllm_hotfix.flow.survey import Survey
from vllm_hotfix.flow.hotfix_status import Status
from vllm_hotfix_guard.txn.state import TargetState

NOT_JUDGED = "not-judged"  # a live target no interpreter or checkout resolution reaches from here


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetReport:
    """One target of the state directory: where, what gc would call it, its recorded series and words."""

    directory: Path
    root: str | None
    state: str                       # gc's words: live | gone | empty | unnamed | foreign
    reason: str
    recorded: tuple[str, ...]        # the series, in order
    target: dict = field(default_factory=dict)   # state.json's target (package, distribution, version, kind, python)
    statuses: tuple[Status, ...] = ()
    not_judged: str | None = None    # why a live target's hotfixes were not judged
    pending: bool = False

    @property
    def stale(self) -> bool:
        return self.state != gone_targets.LIVE

    def to_json(self) -> dict:
        return {"directory": str(self.directory), "root": self.root, "state": self.state, "stale": self.stale,
                "reason": self.reason, "target": self.target, "series": list(self.recorded), "pending": self.pending,
                "not_judged": self.not_judged, "hotfixes": [s.to_json() for s in self.statuses]}


def overview(catalog: Catalog) -> list[TargetReport]:
    """Every target state directory (gc's survey, read only), each live one judged."""
    out = []
    for entry in gone_targets.survey():
        try:
            state = TargetState.load(entry.directory)
        except HotfixError as exc:
            out.append(TargetReport(directory=entry.directory, root=entry.root, state=entry.state,
                                    reason=entry.reason, recorded=(), not_judged=exc.message, pending=entry.pending))
            continue
        common = dict(directory=entry.directory, root=entry.root, state=entry.state, reason=entry.reason,
                      recorded=tuple(state.hotfixes), target=dict(state.target), pending=entry.pending)
        if entry.state != gone_targets.LIVE or entry.root is None:
            out.append(TargetReport(**common))
            continue
        statuses, why = _statuses(entry.root, state, catalog)
        out.append(TargetReport(**common, statuses=tuple(statuses), not_judged=why))
    return out


def _statuses(root: str, state: TargetState, catalog: Catalog) -> tuple[list[Status], str | None]:
    """The recorded series of the target at ``root``, judged through its recorded interpreter, else as a
    checkout; (statuses, None) or ([], why not)."""
    python, package, kind = (state.target.get(k) for k in ("python", "package", "kind"))
    tried = []
    if isinstance(python, str) and os.access(python, os.X_OK):
        survey = Survey(python, None, catalog)
        try:
            target = survey.resolver.package(package)
        except HotfixError as exc:
            tried.append(f"{python}: {exc.message}")
        else:
            if os.path.realpath(target.root) == os.path.realpath(root):
                return survey.recorded(target, state), None
            tried.append(f"{python} now loads {package} from {target.root}")
    elif python:
        tried.append(f"its interpreter {python} is gone")
    if kind != "wheel":
        survey = Survey(None, Path(root), catalog)
        try:
            return survey.recorded(survey.resolver.package(package), state), None
        except HotfixError as exc:
            tried.append(exc.message)
    return [], "; ".join(tried) or "no interpreter recorded for this install"
