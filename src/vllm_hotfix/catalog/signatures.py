"""Manifest ``[[signatures]]``: the log lines that tell a known issue from every other crash.

One block, easy to move into manifest.py (or out of it): the ``Signature`` dataclass, its
``signature_from_table`` parser (called by ``manifest_from_dict``), ``literal_anchor``, which every pattern must
have so that ``hotfix doctor`` can prefilter gigabytes of log with a plain substring search, and
``compile_pattern``, the one place a signature becomes a matcher.

A signature is matched against a *normalised* log line (see ``vllm_hotfix.doctor.normalise``:
no ANSI colours, no ``(EngineCore_DP0 pid=…)`` prefix, no leading timestamp, long hex addresses
as ``0x…``, PCI ids as ``PCI:…``; at most its first 8 KB, ``doctor.normalise.MATCH_LIMIT``). Two independent
properties:

``role`` says *where* a line counts (one role, or an array of them: a match in any counts):

- ``first-error``: only inside the first error of a process and the lines right after it;
- ``error-line``: one of the log's own error lines, anywhere (an ERROR / CRITICAL line, an exception, a
  CUDA / NPU runtime error, an Xid), never a table row, a config dump or prose quoting one;
- ``fault-report``: a debugger or sanitizer fault report: cuda-gdb (``CUDA Exception: …`` and the block
  after it: ``The exception was triggered at PC … KERNEL``, ``#0 KERNEL<<<…>>>``, ``0x… in KERNEL<<<…>>>``),
  compute-sanitizer (``========= …``), a CUDA core dump (``Kernel: …``), an Ascend plog
  (``fault kernel_name=…``), a MetaX trap (``kernelName: …``);
- ``traceback``: a traceback frame (``File "…", line N, in …``, ``frame #N: …``) or the source line
  under a Python frame;
- ``context``: any line of the logs (echoes, kernel messages, later errors);
- ``config``: a start-up or configuration line (``Mamba cache mode is set to 'align'``), also a dump of
  the configuration;
- ``noise``: an error-level line that is not an error (a debug print logged as ``[ERROR]``); it is
  skipped when looking for the first error and never counts.

A markdown or profiler table row and prose (a markdown list item, quote or heading, a line with
inline code) count for no role but ``context``: a kernel name there is a mention, not a fault.

``tier`` says *what a match proves* (the evidence tiers of `hotfix doctor`):

- ``specific``: discriminating evidence, a line only this mechanism writes (the faulting kernel's
  name, the file and line in a traceback, the operator, the slot index). It counts only where a name
  faults: its roles must be among ``fault-report``, ``traceback``, ``error-line``. Only a specific
  match, with an in-range version from the log or the target, makes doctor name the hotfix ("apply X");
- ``condition``: a fact about the bug's trigger condition (align mode on, a hybrid model, the backend,
  the setting the bug needs). A generic error is a candidate ("possible") only with one of these;
- ``generic`` (the default): context every crash of the kind shares (an illegal memory access,
  507011, "a worker died"). Alone they give no candidate: doctor says which catalog entries share them
  and what would tell those apart;
- ``veto``: evidence against (MTP on hides the GLM bug). One veto match rules the hotfix out.

``weight`` (optional, in [-1, 1)) only orders candidates of the same tier; a negative weight
without a ``tier`` means ``veto`` (manifests written before the tiers). ``confirmed = false`` marks
a pattern written from a description (a symptom table) that no real log line has confirmed yet:
`hotfix show` and doctor's evidence lines say so.

A manifest's ``[[confirm]]`` tables (``step``: what to do, ``shows``: what then confirms it) tell a
user holding a "possible" verdict how to make the specific evidence appear; ``platforms`` names
the platforms the bug occurs on (a log of another one rules it out). ``naming_problem`` is the rule
`hotfix check-catalog` refuses a manifest by: signatures that can never name it.

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

from vllm_hotfix.catalog.linear import linear_time_problem
from vllm_hotfix.catalog.table import Table

ROLES = ("first-error", "error-line", "fault-report", "traceback", "context", "config", "noise")
TIERS = ("specific", "condition", "generic", "veto")
FAULT_ROLES = ("fault-report", "traceback", "error-line")  # where a specific signature may count: where a name faults
# the platforms a log names (doctor.log_facts) and a manifest's ``platforms`` may list; metax is a CUDA-compatible vendor
PLATFORMS = ("cuda", "rocm", "ascend", "metax", "xpu", "tpu", "cpu")
MIN_ANCHOR = 3  # characters of literal text every pattern must contain (the prefilter's needle)


try:  # the regex parser of the stdlib, to find a literal every match must contain
    from re import _parser as _sre_parse  # type: ignore[attr-defined]  # python >= 3.11
except ImportError:  # pragma: no cover - python 3.10
    import sre_parse as _sre_parse  # type: ignore[no-redef]


@dataclass(frozen=True, slots=True, kw_only=True)
class Signature:
    """A crash-log pattern of a manifest that points `hotfix doctor` at it."""

    pattern: str  # RE2 syntax, searched in the normalised line
    roles: tuple[str, ...]  # of ROLES: where the line counts (any of them)
    explain: str  # one short sentence: why this line means this issue
    tier: str = "generic"  # one of TIERS: what a match proves
    weight: float = 0.0  # in [-1, 1): orders candidates inside a tier
    confirmed: bool = True  # False: written from a description, not yet seen in a real log
    anchor: str = ""  # the longest literal every match contains (derived, for the prefilter)

    @property
    def role(self) -> str:
        """The roles as written in a manifest: ``fault-report`` or ``fault-report|traceback``."""
        return "|".join(self.roles)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfirmStep:
    """One way to get the evidence that confirms a "possible" verdict (a manifest's ``[[confirm]]``)."""

    step: str  # what to do (a setting, a tool, a request to send again)
    shows: str  # what then confirms it (the line that appears, the counter that moves)


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


def _roles(table: Table) -> tuple[str, ...]:
    raw = table.value("role", (str, list), required=True)
    items = [raw] if isinstance(raw, str) else raw
    if not items:
        raise table.error("role", "needs at least one role")
    roles = []
    for index, role in enumerate(items):
        key = "role" if isinstance(raw, str) else f"role[{index}]"
        if not isinstance(role, str) or role not in ROLES:
            raise table.error(key, f"expected one of {', '.join(ROLES)}, got {role!r}")
        if role in roles:
            raise table.error(key, f"{role!r} is listed twice")
        roles.append(role)
    if "noise" in roles and len(roles) > 1:
        raise table.error("role", "a noise signature has the one role 'noise'")
    return tuple(roles)


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
    roles = _roles(table)
    weight = table.value("weight", (int, float), default=0)
    if not -1 <= weight < 1:
        raise table.error("weight", f"must be at least -1 and below 1, got {weight}")
    tier = table.text("tier", default="veto" if weight < 0 else "generic")
    if tier not in TIERS:
        raise table.error("tier", f"expected one of {', '.join(TIERS)}, got {tier!r}")
    if weight < 0 and tier != "veto":
        raise table.error("weight", f"a negative weight is evidence against: use tier = \"veto\" (got tier {tier!r})")
    if roles == ("noise",) and (weight != 0 or table.has("tier")):
        raise table.error("weight" if weight != 0 else "tier", "a noise signature does not count: leave weight and tier out")
    if tier == "specific" and not set(roles) <= set(FAULT_ROLES):
        wrong = next(r for r in roles if r not in FAULT_ROLES)
        raise table.error("role", f"a specific signature counts only where a name faults ({', '.join(FAULT_ROLES)}), "
                                  f"not {wrong!r}: a name in a profiler table, a config dump or prose would name the fix")
    return Signature(pattern=pattern, roles=roles, tier=tier, weight=float(weight),
                     explain=table.text("explain", required=True),
                     confirmed=table.value("confirmed", (bool,), default=True), anchor=anchor)


def confirm_from_table(path: str, raw: Any, source: str) -> ConfirmStep:
    """Validate one ``[[confirm]]`` table: ``step`` and ``shows``, both required, both text."""
    table = Table(raw, path, source, ("step", "shows"))
    return ConfirmStep(step=table.text("step", required=True), shows=table.text("shows", required=True))


def platforms_from(table: Table) -> tuple[str, ...]:
    """A manifest's ``platforms``: the platforms its bug occurs on (of PLATFORMS, each once)."""
    values = table.strings("platforms")
    if table.has("platforms") and not values:
        raise table.error("platforms", "needs at least one platform (leave the key out for any platform)")
    for index, value in enumerate(values):
        if value not in PLATFORMS:
            raise table.error(f"platforms[{index}]", f"expected one of {', '.join(PLATFORMS)}, got {value!r}")
        if value in values[:index]:
            raise table.error(f"platforms[{index}]", f"{value!r} is listed twice")
    return tuple(values)


def naming_problem(signatures: tuple[Signature, ...]) -> str | None:
    """Why doctor can never name a manifest with these signatures (None when it can, or has none).

    Naming needs a specific signature (it counts where a name faults); a manifest that has only
    generic ones -- the form ``hotfix new`` wrote before the tiers (``weight = 0.5``, no ``tier``) --
    is at most ever listed as "possible", and only with a condition."""
    if not signatures:
        return None
    if not any(s.tier == "specific" for s in signatures):
        return ("doctor can never name it: no [[signatures]] entry has tier = \"specific\" (a line only this bug "
                "writes, with role fault-report, traceback or error-line); weights alone never name a fix")
    return None
