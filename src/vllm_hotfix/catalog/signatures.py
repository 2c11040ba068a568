"""Manifest ``[[signatures]]``: the log lines that tell a known issue from every other crash.

One block, easy to move into manifest.py (or out of it): the ``Signature`` dataclass, its
``_signature`` parser (called by ``manifest_from_dict``) and ``literal_anchor``, which every pattern
must have so that ``hotfix doctor`` can prefilter gigabytes of log with a plain substring search.

A signature is matched against a *normalised* log line (see ``vllm_hotfix.doctor.normalise``:
no ANSI colours, no ``(EngineCore_DP0 pid=…)`` prefix, no leading timestamp, long hex addresses
as ``0x…``, PCI ids as ``PCI:…``). Roles:

- ``first-error``: counts only inside the first error of a process and the lines right after it;
- ``context``: any line of the logs (echoes, kernel messages, later errors);
- ``config``: a start-up or configuration line (``Mamba cache mode is set to 'align'``);
- ``noise``: an error-level line that is not an error (a debug print logged as ``[ERROR]``); it is
  skipped when looking for the first error and never scores.

Weights are in [-1, 1): a hotfix is named only at a total of 1.0, so one line alone (507011,
"worker died") can never name it; a negative weight is evidence against (MTP on hides a bug).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vllm_hotfix.catalog.table import _Table

ROLES = ("first-error", "context", "config", "noise")
MIN_ANCHOR = 3  # characters of literal text every pattern must contain (the prefilter's needle)

try:  # the regex parser of the stdlib, to find a literal every match must contain
    from re import _parser as _sre_parse  # type: ignore[attr-defined]  # python >= 3.11
except ImportError:  # pragma: no cover - python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]


@dataclass(frozen=True)
class Signature:
    """A crash-log pattern of a manifest that points `hotfix doctor` at it."""

    pattern: str  # a Python regular expression, searched in the normalised line
    role: str  # one of ROLES
    weight: float  # in [-1, 1)
    explain: str  # one short sentence: why this line means this issue
    anchor: str = ""  # the longest literal every match contains (derived, for the prefilter)


def literal_runs(pattern: str) -> tuple[str, ...]:
    """Runs of literal characters that every match of ``pattern`` must contain, longest first.

    Only the top-level sequence counts (and groups that are a plain sequence); alternatives,
    optional and repeated parts end a run, so each run is a safe prefilter needle.
    """
    runs: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            runs.append("".join(current))
        current.clear()

    def walk(items: Any) -> None:
        for op, arg in items:
            name = str(op)
            if name == "LITERAL":
                current.append(chr(arg))
            elif name == "SUBPATTERN" and not _has_branch(arg[-1]):
                walk(arg[-1])
            elif name in ("MAX_REPEAT", "MIN_REPEAT") and arg[0] >= 1 and len(arg[2]) == 1 and str(arg[2][0][0]) == "LITERAL":
                current.append(chr(arg[2][0][1]))  # 'x+' / 'x{2,}': at least one x, then a gap
                flush()
            elif name != "AT":  # ^, $, \b take no characters
                flush()

    try:
        parsed = _sre_parse.parse(pattern)
    except (re.error, ValueError):
        return ()
    if parsed.state.flags & re.IGNORECASE:
        return ()
    walk(parsed)
    flush()
    return tuple(sorted(runs, key=len, reverse=True))


def literal_anchor(pattern: str) -> str:
    """The longest literal text every match of ``pattern`` contains ('' if none)."""
    runs = literal_runs(pattern)
    return runs[0] if runs else ""


def _has_branch(items: Any) -> bool:
    return any(str(op) == "BRANCH" for op, _ in items)


def _signature(path: str, raw: Any, source: str) -> Signature:
    """Validate one ``[[signatures]]`` table (manifest.py's strict style, errors name the key path)."""

    table = _Table(raw, path, source, ("pattern", "role", "weight", "explain"))
    pattern = table.text("pattern", required=True)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise table.error("pattern", f"invalid regular expression: {exc}") from None
    anchor = literal_anchor(pattern)
    if len(anchor) < MIN_ANCHOR:
        raise table.error("pattern", f"needs a literal text of at least {MIN_ANCHOR} characters that every "
                                     f"match contains (case-sensitive; the fast prefilter searches for it)")
    role = table.text("role", required=True)
    if role not in ROLES:
        raise table.error("role", f"expected one of {', '.join(ROLES)}, got {role!r}")
    weight = table.value("weight", (int, float), required=role != "noise", default=0)
    if not -1 <= weight < 1:
        raise table.error("weight", f"must be at least -1 and below 1 (one line alone never names a hotfix), got {weight}")
    if role == "noise" and weight != 0:
        raise table.error("weight", "a noise signature does not score: leave weight out")
    return Signature(pattern=pattern, role=role, weight=float(weight), explain=table.text("explain", required=True),
                     anchor=anchor)
