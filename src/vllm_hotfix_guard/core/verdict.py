"""One vocabulary for "is this hotfix in effect?", and one rule from file hashes to a state word.

status, verify, ``verify --lock``, apply, export, check-catalog and the in-process guard all call
this module, so the same bytes on disk get the same word and the same exit code everywhere.
Pure and stdlib only: the guard imports it inside every vLLM process. States are a closed type
(``State``, a ``typing.Literal``: no class is built at import, which an Enum would cost the guard).
"""

from __future__ import annotations

from typing import Callable, Iterable, Literal, Optional, Sequence

from vllm_hotfix_guard.core.pep440 import fixed_by, same_release, version_in
from vllm_hotfix_guard.values import Value

# -- hotfix states ----------------------------------------------------------------------------------
State = Literal["applied", "fixed-upstream", "not-applied", "lost", "stale", "stale-bytecode", "drifted",
                "not-applicable", "unknown", "interrupted"]
APPLIED: State = "applied"                # every file holds the bytes the hotfix writes
FIXED_UPSTREAM: State = "fixed-upstream"  # the installed release / checkout already has the fix
NOT_APPLIED: State = "not-applied"        # nothing recorded, and the series applies forward
LOST: State = "lost"                      # recorded, but every file is back to its baseline (rebuilt, reinstalled)
STALE: State = "stale"                    # recorded on another release or commit than the one installed now
STALE_BYTECODE: State = "stale-bytecode"  # the files hold the fix, but Python would load a __pycache__ entry instead
DRIFTED: State = "drifted"                # some file is neither baseline nor patched, or only part of the files is patched
NOT_APPLICABLE: State = "not-applicable"  # distribution, version or checkout outside the hotfix's targets
UNKNOWN: State = "unknown"                # cannot be decided here (the record does not describe the files, ...)
INTERRUPTED: State = "interrupted"        # an apply was killed mid-way: `hotfix recover` first

STATES: tuple[State, ...] = (APPLIED, FIXED_UPSTREAM, NOT_APPLIED, LOST, STALE, STALE_BYTECODE, DRIFTED,
                             NOT_APPLICABLE, UNKNOWN, INTERRUPTED)
IN_EFFECT: frozenset[State] = frozenset({APPLIED, FIXED_UPSTREAM})

# -- file states ------------------------------------------------------------------------------------
FileWord = Literal["patched", "baseline", "changed", "missing"]
PATCHED: FileWord = "patched"    # holds the bytes the hotfix writes (or is absent, as the hotfix deletes it)
BASELINE: FileWord = "baseline"  # holds the bytes from before the hotfix
CHANGED: FileWord = "changed"    # neither
MISSING: FileWord = "missing"    # absent, while the hotfix (and the baseline) have the file


def in_effect(state: State) -> bool:
    return state in IN_EFFECT


def exit_code(states: Iterable[State]) -> int:
    """0 when every state is in effect, else 1 (the `verify` / `status` / guard rule)."""
    return 0 if all(s in IN_EFFECT for s in states) else 1


class FileCheck(Value):
    """One file of a hotfix against the bytes its series should have put there (the input of the verdict)."""

    path: str                 # as recorded / locked (relative to the target root or site-packages)
    state: FileWord           # PATCHED | BASELINE | CHANGED | MISSING
    sha256: Optional[str]     # what is there now (None: absent)
    expected: Optional[str]   # what must be there now: the top of the file's series (None: deleted)
    baseline: Optional[str]   # what was there before this hotfix (None: the hotfix creates the file)
    where: Optional[str] = None  # the real path that was read, for messages
    above: tuple = ()         # ids of the hotfixes applied on top of this one to the same file, in order

    def to_json(self) -> dict:
        return {"path": self.path, "state": self.state, "sha256": self.sha256,
                "after_sha256": self.expected, "before_sha256": self.baseline, "real_path": self.where,
                "under": list(self.above)}


class BrokenSeries(ValueError):
    """Two hotfixes recorded one after the other on a file disagree on the bytes between them."""


def chain_checks(path: str, steps: Sequence, current: Optional[str], where: Optional[str] = None
                 ) -> tuple[FileCheck, ...]:
    """One FileCheck per step of a file's series: ``steps`` are (hotfix id, sha256 before, sha256 after)
    in the order the hotfixes were applied, each one's "before" the previous one's "after".

    The file may hold any state of the series: the bytes before the first hotfix (every step BASELINE),
    after the last (every step PATCHED), or in between (the steps up to there PATCHED, the rest BASELINE:
    the upper hotfixes' changes are lost). Anything else is CHANGED (MISSING when absent). When the
    file is at no state, every step gets that word. BrokenSeries when the steps do not chain."""
    states = [steps[0][1]]
    for index, (hotfix_id, before, after) in enumerate(steps):
        if index and before != states[-1]:
            raise BrokenSeries(f"{path}: {hotfix_id} was applied on bytes {_short(before)}, but "
                               f"{steps[index - 1][0]} left {_short(states[-1])}")
        states.append(after)
    reached = next((j for j in range(len(states) - 1, -1, -1) if states[j] == current), None)
    top = states[-1]
    checks = []
    for index, (hotfix_id, before, after) in enumerate(steps):
        if reached is None:
            state = MISSING if current is None else CHANGED
        else:
            state = PATCHED if reached > index else BASELINE
        above = tuple(s[0] for s in steps[index + 1:] if s[0] is not None)
        checks.append(FileCheck(path, state, current, top, before, where, above))
    return tuple(checks)


def chain_checks_each(steps: Sequence, current: Callable) -> tuple[FileCheck, ...]:
    """One hotfix's files, each as a series of one step (``steps``: (path, before, after); ``current(path)``:
    (sha256 now, real path)): their sha256 now when the record's series does not chain."""
    return tuple(chain_checks(path, ((None, before, after),), *current(path))[0] for path, before, after in steps)


def _short(sha: Optional[str]) -> str:
    return "(absent)" if sha is None else sha[:12]


def series_checks(series: Sequence, current: Callable) -> dict:
    """The FileChecks of every hotfix of a series: ``series`` is [(hotfix id, [(path, before, after), ...])]
    in the order applied; ``current(path)`` gives (sha256 now or None, real path) and is asked once
    per path. Returns {hotfix id: (FileCheck, ...)} in each hotfix's own file order. The one rule for
    records (status, apply, the guard's HOTFIX_REQUIRE) and for locks (`verify --lock`, the guard)."""
    steps: dict = {}
    for hotfix_id, files in series:
        for path, before, after in files:
            steps.setdefault(path, []).append((hotfix_id, before, after))
    by_step: dict = {}
    for path, chain in steps.items():
        sha, where = current(path)
        for (hotfix_id, _, _), check in zip(chain, chain_checks(path, chain, sha, where)):
            by_step[(hotfix_id, path)] = check
    return {hotfix_id: tuple(by_step[(hotfix_id, path)] for path, _, _ in files) for hotfix_id, files in series}


def origin_problem(series: Sequence, pristine: dict) -> Optional[str]:
    """Why the series of a record does not start from the install's own files: for each path with a known
    pristine sha256 (``pristine``: path -> RECORD's sha256, or None when RECORD does not list it), the
    first hotfix touching it must have been applied on exactly those bytes. A forged record that calls the
    pristine file "patched" fails here, without reading a patch. None when every known path starts right."""
    first: dict = {}
    for hotfix_id, files in series:
        for path, before, _after in files:
            first.setdefault(path, (hotfix_id, before))
    for path, (hotfix_id, before) in first.items():
        if path in pristine and pristine[path] != before:
            what = "a file it does not list" if pristine[path] is None else f"sha256 {pristine[path][:12]}"
            return (f"{hotfix_id}'s record says {path} had sha256 {_short(before)} before it, but pip's RECORD "
                    f"gives {what}: the record does not describe this install")
    return None


def files_verdict(files: Sequence[FileCheck]) -> tuple[State, str]:
    """(state, detail) of a hotfix from its files: APPLIED, LOST or DRIFTED."""
    states = [f.state for f in files]
    under = sorted({h for f in files for h in f.above})
    if all(s == PATCHED for s in states):
        if under:
            return APPLIED, f"{len(files)} file(s) hold its change, under {', '.join(under)}"
        return APPLIED, f"{len(files)} file(s) hold the patched bytes"
    if all(s == BASELINE for s in states):
        return LOST, "every file is back to its baseline (reinstalled, rebuilt, or the mount is gone)"
    from vllm_hotfix_guard.output import quote_path  # here: the guard's common case prints no file name

    odd = [f for f in files if f.state in (CHANGED, MISSING)]
    if odd:
        names = ", ".join(f"{quote_path(f.path)} ({'missing' if f.state == MISSING else 'neither baseline nor patched'})"
                          for f in odd)
        return DRIFTED, names
    back = ", ".join(quote_path(f.path) for f in files if f.state == BASELINE)
    return DRIFTED, f"{back}: back to baseline while the other file(s) are patched (partly lost)"


def release_rule(installed: Optional[str], *, fixed_in: Optional[str], versions: Optional[str],
                 distribution: str) -> Optional[tuple[State, str]]:
    """(FIXED_UPSTREAM | NOT_APPLICABLE, detail) from a release alone (a lock's or a record's ``fixed_in`` /
    ``versions``), or None; ``fixed_in`` is decided by core/pep440.fixed_by (a version or a union of specifier
    sets). The catalog's rule (flow/applicability) also knows commits and checkouts; both
    feed ``hotfix_state``."""
    if installed is None:
        return None
    if fixed_in and fixed_by(installed, fixed_in):
        bare = not any(mark in fixed_in for mark in "<>=!~|,")
        return FIXED_UPSTREAM, f"{distribution} {installed} {'>=' if bare else 'is in'} {fixed_in}"
    if versions and not version_in(installed, versions):
        return NOT_APPLICABLE, f"{distribution} {installed} is outside {versions}"
    return None


def hotfix_state(files: Sequence[FileCheck], *, pending: bool = False, missing_package: Optional[str] = None,
                 inapplicable: Optional[tuple[State, str]] = None, recorded_release: Optional[str] = None,
                 installed_release: Optional[str] = None, distribution: str = "the package",
                 broken: Optional[str] = None, moved: Optional[str] = None,
                 stale_bytecode: Optional[str] = None) -> tuple[State, str]:
    """THE verdict on one hotfix that a record or a lock says must be in effect, in this order:

    1. INTERRUPTED: a transaction on the target is pending (its files may be half-written);
    2. UNKNOWN: the package is not importable here (``missing_package``: why), or the record / lock does
       not describe the files (``broken``: its series does not chain, its seal, kept patch, origin, pin or
       re-derivation fails -- txn/judgement.py);
    3. FIXED_UPSTREAM: the installed release or checkout has the fix (``inapplicable``);
    4. STALE: the package is another release than the one the record / lock was made on, whatever the
       files hold (their bytes belong to the other release): a checkout's HEAD ``moved`` (from
       ``release_seen``), or ``installed_release`` is not ``recorded_release``;
    5. NOT_APPLICABLE (``inapplicable``), on the recorded release itself;
    6. UNKNOWN when there is no file to check, else ``files_verdict``: APPLIED, LOST or DRIFTED;
    7. STALE_BYTECODE instead of APPLIED when Python would load a ``__pycache__`` entry of a patched
       module that does not hold its code (``stale_bytecode``: which, install/bytecode.py).

    Every reader calls this: status and apply (txn/judgement.judge_record), `verify --lock` and the guard
    (txn/lock_check), the guard's HOTFIX_REQUIRE, export, check-catalog and doctor. The guard's HOTFIX_REQUIRE
    words three cases before it has a record to give here (vllm_hotfix_guard/plugin.py): interrupted (a pending
    journal), not-applied (no record), unknown (a record it cannot read, a package it cannot import)."""
    if pending:
        return INTERRUPTED, "an apply or rollback on this target was interrupted and is not recovered"
    if missing_package is not None:
        return UNKNOWN, missing_package
    if broken is not None:
        return UNKNOWN, f"the record does not describe the files: {broken}"
    if inapplicable is not None and inapplicable[0] == FIXED_UPSTREAM:
        return inapplicable
    changed = release_change(recorded_release, installed_release, moved, distribution)
    if changed is not None:
        return STALE, changed
    if inapplicable is not None:
        return inapplicable
    if not files:
        return UNKNOWN, "no file is recorded for this hotfix"
    state, detail = files_verdict(files)
    if state == APPLIED and stale_bytecode:
        return STALE_BYTECODE, f"the files hold the fix, but {stale_bytecode}"
    return state, detail


def release_change(recorded_release: Optional[str], installed_release: Optional[str], moved: Optional[str],
                   distribution: str = "the package") -> Optional[str]:
    """THE rule of ``hotfix_state``'s step 4 (STALE), for it and for the readers that only ask whether the
    release changed under a record (rollback forgets such a record, apply starts a new series): why the
    package is another release than the recorded one (a checkout's HEAD ``moved``, or another version
    installed), or None."""
    if moved is not None:
        return (f"{distribution}'s checkout moved from {moved} under the record: the hotfix applied "
                f"at the recorded commit is not in effect")
    if recorded_release and installed_release and not same_release(recorded_release, installed_release):
        return (f"{distribution} was changed from {recorded_release} to {installed_release} under the record: "
                f"the hotfix applied to {recorded_release} is not in effect")
    return None


def stale_advice(hotfix_id: str, options: str, *, release: Optional[str], covered: Optional[bool]) -> str:
    """THE advice for a STALE record, everywhere (status, verify, doctor, the guard): `apply` re-plans the
    hotfix for the release installed now where the catalog covers it (``covered``), else `rollback`
    forgets the record and writes nothing (its backups are the other release's files). ``covered`` None:
    the reader has no catalog (the guard) and names both. ``options``: how to name the target again."""
    opts = f" {options}" if options else ""
    apply = f"`hotfix apply {hotfix_id}{opts}` re-plans it for {release or 'the release installed now'}"
    forget = f"`hotfix rollback {hotfix_id}{opts}` forgets the record (it writes no file)"
    if covered is True:
        return apply
    if covered is False:
        return forget
    return f"{apply} where the catalog covers that release; else {forget}"


def bytecode_advice(hotfix_id: str, options: str) -> str:
    """THE advice for STALE_BYTECODE: `apply` again drops the entries Python would load (and nothing else)."""
    opts = f" {options}" if options else ""
    return f"`hotfix apply {hotfix_id}{opts}` removes the stale __pycache__ entries (no source file changes)"


def release_seen(*, recorded: Optional[str], installed: Callable[[], Optional[str]],
                 recorded_commit: Optional[str] = None, commit: Optional[str] = None,
                 own_version_file: "bool | Callable[[], bool]" = False) -> tuple[Optional[str], Optional[str]]:
    """THE rule for the release a record or a lock is judged against: (the installed release, ``moved``
    for ``hotfix_state``: "commit A to commit B" when a checkout's HEAD is not the recorded one, else None).

    - A checkout whose record names HEAD's commit (``recorded_commit``) and whose HEAD is read now
      (``commit``, install/facts.read_head): the same commit is the recorded release, whatever the version
      derived from it says now or the stale metadata of an editable install says; another commit is
      another release (the files belong to it).
    - Otherwise the version decides: ``installed()`` (asked only here: a checkout's derives from git),
      except when the version is read from a file the series itself changes (``own_version_file``: a
      diff that bumps ``vllm/_version.py``): that release is the series' own doing, the recorded one stands.

    status, apply, export and doctor (flow/series) and the guard and `verify --lock` (txn/hotfix_lock, the
    guard's HOTFIX_REQUIRE) all ask this, so they cannot disagree on a checkout whose HEAD moved."""
    if recorded_commit and commit:
        if recorded_commit == commit:
            return recorded, None
        return installed(), f"commit {recorded_commit[:12]} to commit {commit[:12]}"
    if own_version_file() if callable(own_version_file) else own_version_file:
        return recorded, None
    return installed(), None
