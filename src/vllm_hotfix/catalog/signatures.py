"""Manifest ``[[signatures]]``: the log lines that tell a known issue from every other crash.

One block, easy to move into manifest.py (or out of it): the ``Signature`` dataclass, its
``signature_from_table`` parser (called by ``manifest_from_dict``), ``literal_anchor``, which every pattern must
have so that ``hotfix doctor`` can prefilter gigabytes of log with a plain substring search, and
``compile_pattern``, the one place a signature becomes a matcher.

A signature is matched against a *normalised* log line (see ``vllm_hotfix.doctor.normalise``:
no ANSI colours, no ``(EngineCore_DP0 pid=…)`` prefix, no leading timestamp, long hex addresses
as ``0x…``, PCI ids as ``PCI:…``; at most its first 8 KB, ``doctor.normalise.MATCH_LIMIT``). Two independent
properties:

``role`` says *where* a line counts:

- ``first-error``: only inside the first error of a process and the lines right after it;
- ``context``: any line of the logs (echoes, kernel messages, debugger output, later errors);
- ``config``: a start-up or configuration line (``Mamba cache mode is set to 'align'``);
- ``noise``: an error-level line that is not an error (a debug print logged as ``[ERROR]``); it is
  skipped when looking for the first error and never counts.

``tier`` says *what a match proves* (the evidence tiers of `hotfix doctor`):

- ``specific``: discriminating evidence, a line only this mechanism writes (the faulting kernel's
  name, the file and line in a traceback, the operator, the slot index). Only a specific match,
  with an in-range version from the log or the target, makes doctor name the hotfix ("apply X");
- ``generic`` (the default): context every crash of the kind shares (an illegal memory access,
  507011, "a worker died", align mode on). However many match, they only raise "possible, check X";
- ``veto``: evidence against (MTP on hides the GLM bug). One veto match rules the hotfix out.

``weight`` (optional, in [-1, 1)) only orders candidates of the same tier; a negative weight
without a ``tier`` means ``veto`` (manifests written before the tiers). ``confirmed = false`` marks
a pattern written from a description (a symptom table) that no real log line has confirmed yet:
`hotfix show` and doctor's evidence lines say so.

Patterns are RE2 syntax (the common subset of Python ``re`` without lookarounds, back-references
and atomic groups) and are matched by ``google-re2`` in linear time, so no log line can hang doctor.
Where that library is missing, Python's ``re`` is used on those cut lines, and the load
time rule below refuses the patterns that backtrack exponentially there (nested unbounded
quantifiers such as ``(a+)+``), on every platform alike, so a catalog valid here is valid everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from vllm_hotfix.catalog.table import Table

ROLES = ("first-error", "context", "config", "noise")
TIERS = ("specific", "generic", "veto")
MIN_ANCHOR = 3  # characters of literal text every pattern must contain (the prefilter's needle)


try:  # the regex parser of the stdlib, to find a literal every match must contain
    from re import _parser as _sre_parse  # type: ignore[attr-defined]  # python >= 3.11
except ImportError:  # pragma: no cover - python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]


@dataclass(frozen=True, slots=True, kw_only=True)
class Signature:
    """A crash-log pattern of a manifest that points `hotfix doctor` at it."""

    pattern: str  # RE2 syntax, searched in the normalised line
    role: str  # one of ROLES: where the line counts
    explain: str  # one short sentence: why this line means this issue
    tier: str = "generic"  # one of TIERS: what a match proves
    weight: float = 0.0  # in [-1, 1): orders candidates inside a tier
    confirmed: bool = True  # False: written from a description, not yet seen in a real log
    anchor: str = ""  # the longest literal every match contains (derived, for the prefilter)


def engine() -> str:
    """The regular-expression engine doctor matches with: ``re2`` (linear time) or ``re`` (fallback)."""
    return "re2" if _re2_compile is not None else "re"


def compile_pattern(pattern: str) -> Callable[[str], Any]:
    """The ``search`` function of ``pattern`` (RE2 when installed, else Python's ``re``)."""
    if _re2_compile is not None:
        return _re2_compile(pattern).search
    return re.compile(pattern).search


def _load_re2() -> Callable[[str], Any] | None:
    try:
        import re2  # google-re2
    except ImportError:
        return None
    options = re2.Options()
    options.log_errors = False  # a refused pattern is our one-line error, not absl's stderr lines
    options.never_capture = True  # only "does it match"; groups cost time

    def compile_re2(pattern: str) -> Any:
        try:
            return re2.compile(pattern, options=options)
        except re2.error as exc:
            raise ValueError(str(exc.args[0].decode() if isinstance(exc.args[0], bytes) else exc)) from None

    return compile_re2


_re2_compile = _load_re2()


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


_UNBOUNDED = _sre_parse.MAXREPEAT
_NOT_LINEAR = {"ASSERT": "a lookahead / lookbehind", "ASSERT_NOT": "a negative lookahead / lookbehind",
               "GROUPREF": "a back-reference", "GROUPREF_EXISTS": "a conditional group",
               "ATOMIC_GROUP": "an atomic group", "POSSESSIVE_REPEAT": "a possessive quantifier"}


def linear_time_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be matched in linear time (by RE2), or None.

    Refused everywhere, whichever engine is installed: the constructs RE2 does not have (lookarounds,
    back-references, conditionals, atomic groups, possessive quantifiers) and a repeat inside a
    repeat that can both match without bound (``(a+)+``, ``(?:x*y?)*``): the shape that makes a
    backtracking engine take exponential time when RE2 is missing."""
    try:
        parsed = _sre_parse.parse(pattern)
    except (re.error, ValueError):
        return None  # the caller reports the syntax error

    def walk(items: Any, inside_unbounded: bool) -> str | None:
        for op, arg in items:
            name = str(op)
            if name in _NOT_LINEAR:
                return f"{_NOT_LINEAR[name]} is not allowed (RE2 syntax: doctor matches in linear time)"
            children: list[Any] = []
            unbounded = inside_unbounded
            if name in ("MAX_REPEAT", "MIN_REPEAT"):
                low, high, body = arg
                if high == _UNBOUNDED or high > 1000:
                    if inside_unbounded:
                        return ("nested unbounded quantifiers (like '(a+)+') are not allowed: they backtrack "
                                "exponentially; repeat the inner part once ('a+')")
                    unbounded = True
                children = [body]
            elif name == "SUBPATTERN":
                children = [arg[-1]]
            elif name == "BRANCH":
                children = list(arg[1])
            for child in children:
                problem = walk(child, unbounded)
                if problem:
                    return problem
        return None

    return walk(parsed, False)


def signature_from_table(path: str, raw: Any, source: str) -> Signature:
    """Validate one ``[[signatures]]`` table (manifest.py's strict style, errors name the key path)."""

    table = Table(raw, path, source, ("pattern", "role", "tier", "weight", "explain", "confirmed"))
    pattern = table.text("pattern", required=True)
    try:
        re.compile(pattern)
    except re.error as exc:
        raise table.error("pattern", f"invalid regular expression: {exc}") from None
    problem = linear_time_problem(pattern)
    if problem is None and _re2_compile is not None:
        try:
            _re2_compile(pattern)
        except ValueError as exc:
            problem = f"not RE2 syntax: {exc}"
    if problem:
        raise table.error("pattern", problem)
    anchor = literal_anchor(pattern)
    if len(anchor) < MIN_ANCHOR:
        raise table.error("pattern", f"needs a literal text of at least {MIN_ANCHOR} characters that every "
                                     f"match contains (case-sensitive; the fast prefilter searches for it)")
    role = table.text("role", required=True)
    if role not in ROLES:
        raise table.error("role", f"expected one of {', '.join(ROLES)}, got {role!r}")
    weight = table.value("weight", (int, float), default=0)
    if not -1 <= weight < 1:
        raise table.error("weight", f"must be at least -1 and below 1, got {weight}")
    tier = table.text("tier", default="veto" if weight < 0 else "generic")
    if tier not in TIERS:
        raise table.error("tier", f"expected one of {', '.join(TIERS)}, got {tier!r}")
    if weight < 0 and tier != "veto":
        raise table.error("weight", f"a negative weight is evidence against: use tier = \"veto\" (got tier {tier!r})")
    if role == "noise" and (weight != 0 or table.has("tier")):
        raise table.error("weight" if weight != 0 else "tier", "a noise signature does not count: leave weight and tier out")
    return Signature(pattern=pattern, role=role, tier=tier, weight=float(weight),
                     explain=table.text("explain", required=True),
                     confirmed=table.value("confirmed", (bool,), default=True), anchor=anchor)
