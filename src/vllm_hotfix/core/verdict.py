"""One vocabulary for "is this hotfix in effect?", and one rule from file hashes to a state word.

status, verify, ``verify --lock``, apply, export, check-catalog and the in-process guard all call
this module, so the same bytes on disk get the same word and the same exit code everywhere.
Pure and stdlib only: the guard imports it inside every vLLM process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

# -- hotfix states ----------------------------------------------------------------------------------
APPLIED = "applied"                # every file holds the bytes the hotfix writes
FIXED_UPSTREAM = "fixed-upstream"  # the installed release / checkout already has the fix
NOT_APPLIED = "not-applied"        # nothing recorded, and the series applies forward
LOST = "lost"                      # recorded, but every file is back to its baseline (rebuilt, reinstalled, upgraded)
DRIFTED = "drifted"                # some file is neither baseline nor patched, or only part of the files is patched
NOT_APPLICABLE = "not-applicable"  # distribution, version or checkout outside the hotfix's targets
UNKNOWN = "unknown"                # cannot be decided here (a separately distributed patch file was not given, ...)
INTERRUPTED = "interrupted"        # an apply was killed mid-way: `hotfix recover` first

STATES = (APPLIED, FIXED_UPSTREAM, NOT_APPLIED, LOST, DRIFTED, NOT_APPLICABLE, UNKNOWN, INTERRUPTED)
IN_EFFECT = frozenset({APPLIED, FIXED_UPSTREAM})

# -- file states ------------------------------------------------------------------------------------
PATCHED = "patched"    # holds the bytes the hotfix writes (or is absent, as the hotfix deletes it)
BASELINE = "baseline"  # holds the bytes from before the hotfix
CHANGED = "changed"    # neither
MISSING = "missing"    # absent, while the hotfix (and the baseline) have the file


def in_effect(state: str) -> bool:
    return state in IN_EFFECT


def exit_code(states: Iterable[str]) -> int:
    """0 when every state is in effect, else 1 (the `verify` / `status` / guard rule)."""
    return 0 if all(s in IN_EFFECT for s in states) else 1


@dataclass(frozen=True)
class FileCheck:
    path: str                 # as recorded / locked (relative to the target root or site-packages)
    state: str                # PATCHED | BASELINE | CHANGED | MISSING
    sha256: Optional[str]     # what is there now (None: absent)
    expected: Optional[str]   # what the hotfix writes (None: it deletes the file)
    baseline: Optional[str]   # what was there before (None: the hotfix creates the file)
    where: Optional[str] = None  # the real path that was read, for messages

    def to_json(self) -> dict:
        return {"path": self.path, "state": self.state, "sha256": self.sha256,
                "after_sha256": self.expected, "before_sha256": self.baseline, "real_path": self.where}


def check_file(path: str, current: Optional[str], expected: Optional[str], baseline: Optional[str],
               where: Optional[str] = None) -> FileCheck:
    """The state of one file from its current sha256 and the two it may legitimately have."""
    if current == expected:
        state = PATCHED
    elif current == baseline:
        state = BASELINE
    elif current is None:
        state = MISSING
    else:
        state = CHANGED
    return FileCheck(path, state, current, expected, baseline, where)


def files_verdict(files: Sequence[FileCheck]) -> tuple[str, str]:
    """(state, detail) of a hotfix from its files: APPLIED, LOST or DRIFTED. The one rule for every caller."""
    states = [f.state for f in files]
    if all(s == PATCHED for s in states):
        return APPLIED, f"{len(files)} file(s) hold the patched bytes"
    if all(s == BASELINE for s in states):
        return LOST, "every file is back to its baseline (reinstalled, rebuilt, or the mount is gone)"
    odd = [f for f in files if f.state in (CHANGED, MISSING)]
    if odd:
        names = ", ".join(f"{f.path} ({'missing' if f.state == MISSING else 'neither baseline nor patched'})"
                          for f in odd)
        return DRIFTED, names
    back = ", ".join(f.path for f in files if f.state == BASELINE)
    return DRIFTED, f"{back}: back to baseline while the other file(s) are patched (partly lost)"


# -- PEP 440 ordering without `packaging` (the guard runs on the stdlib only) -----------------------

_VERSION = re.compile(
    r"v?(?:(\d+)!)?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?(\d*))?"
    r"(?:[-_.]?(?:post|rev|r)[-_.]?(\d*))?(?:[-_.]?dev[-_.]?(\d*))?(?:\+.*)?",
    re.IGNORECASE,
)
_PRE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}


def version_key(text: str) -> tuple:
    m = _VERSION.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not a PEP 440 version: {text!r}")
    epoch, release, pre, pre_n, post, dev = m.groups()
    numbers = [int(x) for x in release.split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    if pre:
        pre_key = (_PRE[pre.lower()], int(pre_n or 0))
    elif dev is not None and post is None:
        pre_key = (-1, 0)  # 1.0.dev1 sorts before 1.0a1
    else:
        pre_key = (3, 0)
    post_key = int(post or 0) if post is not None else -1
    dev_key = int(dev or 0) if dev is not None else float("inf")
    return (int(epoch or 0), tuple(numbers), pre_key, post_key, dev_key)


def version_at_least(version: str, minimum: str) -> bool:
    """PEP 440 ``version >= minimum`` (local labels ignored); False when either cannot be parsed."""
    try:
        return version_key(version) >= version_key(minimum)
    except ValueError:
        return False


def same_release(a: Optional[str], b: Optional[str]) -> bool:
    """Whether two recorded versions name the same release (None matches nothing but None)."""
    if a is None or b is None:
        return a == b
    try:
        return version_key(a) == version_key(b)
    except ValueError:
        return a == b


_CLAUSE = re.compile(r"\s*(===|==|!=|~=|<=|>=|<|>)\s*([^\s,]+)\s*")


def version_in(version: str, specifier: str) -> bool:
    """PEP 440 ``version in specifier`` for the clauses manifests use (pre-releases match, as in
    manifests); an unparsable clause does not exclude (the catalog validated it with `packaging`)."""
    for clause in filter(None, (c.strip() for c in specifier.split(","))):
        m = _CLAUSE.fullmatch(clause)
        if not m:
            continue
        op, wanted = m.groups()
        try:
            if wanted.endswith(".*"):
                prefix = version_key(wanted[:-2])[1]
                ok = version_key(version)[1][: len(prefix)] == prefix
                ok = ok if op == "==" else not ok
            else:
                have, want = version_key(version), version_key(wanted)
                if op == "~=":
                    upper = version_key(".".join(wanted.split(".")[:-1]))[1]
                    ok = have >= want and have[1][: len(upper)] == upper
                else:
                    ok = {"==": have == want, "===": have == want, "!=": have != want, "<=": have <= want,
                          ">=": have >= want, "<": have < want, ">": have > want}[op]
        except ValueError:
            continue
        if not ok:
            return False
    return True
