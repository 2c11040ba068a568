"""One state per hotfix and target, decided from the files (core.verdict's words and rule): ``Status``,
from a record (``status_from_record``), from the files alone (``status_from_files``), from a catalog
entry (``catalog_status``) or a lock (``lock_status``).

A record says what *should* be there; the files decide what is. `status`, `verify`, `apply` (through
``plan.propose``), `export` and `check-catalog` all take their answer from here or from core.verdict;
flow/survey.py gathers these over the targets asked about.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix.catalog.model import Manifest, TargetSpec
from vllm_hotfix.core.presence import APPLICABLE, CONTAINED, presence
from vllm_hotfix_guard.core.diff import Patch
from vllm_hotfix_guard.core.pep440 import same_version
from vllm_hotfix_guard.core.verdict import (APPLIED, BASELINE, CHANGED, DRIFTED, FIXED_UPSTREAM, IN_EFFECT,
                                            INTERRUPTED, LOST, MISSING, NOT_APPLICABLE, NOT_APPLIED, STALE, STALE_BYTECODE,
                                            UNKNOWN, State, bytecode_advice, stale_advice)
from vllm_hotfix_guard.errors import HotfixError, Refused
from vllm_hotfix.flow.applicability import applicability
from vllm_hotfix.flow.hotfix import Hotfix, catalog_hotfix, pin_problem, sha256
from vllm_hotfix.flow.plan import flatten
from vllm_hotfix.flow.series import judge_recorded, level, steps_by_path
from vllm_hotfix.flow.resolve import target_option
from vllm_hotfix.flow.restore import not_pristine, record_differences, restore_advice, restore_command
from vllm_hotfix.install.in_target import in_interpreter
from vllm_hotfix.install.locate import Target
from vllm_hotfix_guard.install.mounts import MountedFile
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.output import quote_path
from vllm_hotfix_guard.paths import LOCK_ENV, TargetDir
from vllm_hotfix_guard.txn.state import RecordedHotfix, TargetState


@dataclass(frozen=True)
class Status:
    """One hotfix on one target: its state word, why, and what to do."""

    id: str
    version: int | str | None
    state: State
    target: str  # root, for people
    detail: str = ""
    advice: str | None = None
    files: tuple[dict, ...] = ()
    recorded: bool = False
    distribution: str | None = None  # of the target (for the fingerprint)
    installed_version: str | None = None
    position: int | None = None  # its place in the target's series (1 = applied first); None: not recorded
    mounts: tuple[MountedFile, ...] = ()  # its files whose bytes come through a mount (install/mounts.py)

    @property
    def in_effect(self) -> bool:
        return self.state in IN_EFFECT

    @property
    def to_do(self) -> str | None:
        """What to do, for people: the advice of a hotfix not in effect, or of one in effect only through
        a mount that nothing hotfix wrote declares (a rebuild without it loses the fix)."""
        return self.advice if not self.in_effect or self.mounts else None

    def to_json(self) -> dict:
        return {"id": self.id, "version": self.version, "state": self.state, "target": self.target,
                "recorded": self.recorded, "series": self.position, "detail": self.detail, "advice": self.advice,
                "files": list(self.files), "mounts": [m.to_json() for m in self.mounts]}


def _apply_command(view: "SeriesView", recorded: RecordedHotfix, option: str) -> str:
    """The command that applies this recorded hotfix again, as pasted: a catalog id, or an ad-hoc diff from
    the copy of its patch the record keeps (its own bytes)."""
    if recorded.source == "catalog":
        return f"hotfix apply {recorded.id} {option}"
    import shlex

    kept = shlex.quote(str(view.state.directory / recorded.patches[0])) if len(recorded.patches) == 1 else "PATCH"
    strip = recorded.strip[0] if recorded.strip else 1
    more = "" if strip == 1 else f" -p {strip}"
    if view.target.python is None:
        return f"hotfix apply --patch {kept}{more} --id {recorded.id} {option}"
    return f"hotfix apply --patch {kept}{more} --id {recorded.id} {option} --package {recorded.package or 'PACKAGE'}"


@dataclass(frozen=True)
class SeriesView:
    """One target's record and the one verdict on every recorded hotfix (txn/judgement, through
    flow/series.judge_recorded: one read of each file), with what the command knows of the catalog."""

    target: Target
    state: TargetState
    judged: dict
    catalog: Catalog | None = None

    @classmethod
    def of(cls, target: Target, state: TargetState | None = None, catalog: Catalog | None = None) -> "SeriesView":
        state = state if state is not None else TargetState.for_root(target.root)
        return cls(target, state, judge_recorded(state, target, catalog=catalog), catalog)

    def option(self, recorded: RecordedHotfix | None = None) -> str:
        """``--python``/``--root`` and ``--catalog`` for this target's next steps (flow/resolve.target_option)."""
        return target_option(self.target, self.catalog, (recorded.catalog,) if recorded is not None else ())

    def covers(self, recorded: RecordedHotfix, release: str | None) -> bool | None:
        """Whether `apply` can plan this hotfix for ``release`` (the catalog has a patch for it, and it does
        not have the fix): None when this command has no manifest for it."""
        if recorded.source != "catalog":
            return False
        if self.catalog is None or recorded.id not in self.catalog.ids():
            return None
        manifest = self.catalog.get(recorded.id)
        spec = manifest.spec_for(self.target)
        if release is None or spec is None or not spec.contains(release) or manifest.is_fixed_in(release):
            return False
        try:
            manifest.patches_for(release)
        except Refused:
            return False
        return True


def status_from_record(view: SeriesView, recorded: RecordedHotfix) -> Status:
    """A recorded hotfix in its series, as txn/judgement judged it (the verdict `apply` acts on)."""
    target, option = view.target, view.option(recorded)
    j = view.judged[recorded.id]
    files = tuple(c.to_json() for c in j.files)
    common = dict(id=recorded.id, version=recorded.version, target=str(target.root), files=files, recorded=True,
                  installed_version=j.installed)
    redo = _apply_command(view, recorded, option)
    forget = stale_advice(recorded.id, option, release=None, covered=False)
    if j.state == APPLIED:
        return Status(state=APPLIED, detail=j.detail, **common)
    if j.state == INTERRUPTED:
        return replace(interrupted(recorded.id, recorded.version, target.root, option), files=files,
                       installed_version=j.installed)
    if j.state == FIXED_UPSTREAM:
        advice = f"nothing to do; {forget}" if j.release_change else "nothing to do"
        return Status(state=FIXED_UPSTREAM, detail=j.detail, advice=advice, **common)
    if j.state == STALE:
        release = f"{target.distribution or target.package} {j.installed}" if j.installed else None
        advice = stale_advice(recorded.id, option, release=release, covered=view.covers(recorded, j.installed))
        return Status(state=STALE, detail=j.detail, advice=_restore_first(view, recorded, release) + advice, **common)
    if j.state == STALE_BYTECODE:
        return Status(state=STALE_BYTECODE, detail=j.detail, advice=bytecode_advice(recorded.id, option), **common)
    if j.state == NOT_APPLICABLE:
        return Status(state=NOT_APPLICABLE, detail=j.detail, advice=forget, **common)
    if j.state == LOST:
        return Status(state=LOST, detail=f"recorded as applied, but {j.detail}", advice=f"re-run `{redo}`", **common)
    if j.state == UNKNOWN:
        return Status(state=UNKNOWN, detail=j.detail, advice="the record does not describe what hotfix apply wrote: "
                      "restore the files (reinstall the package / git checkout) and move the state folder aside "
                      f"({view.state.directory})" if j.detail.startswith("the record") else
                      "see `hotfix where` and the record; restore the files, then apply again", **common)
    return Status(state=DRIFTED, detail=j.detail, advice=drifted_advice(view, recorded, j.files), **common)


def drifted_advice(view: SeriesView, recorded: RecordedHotfix, checks) -> str:
    """What puts a drifted record back in effect, as it runs: a file missing or neither baseline nor patched
    comes back from the release (flow/restore: rollback refuses it), then the applies; a hotfix only partly
    back to its baseline is rolled back, then applied again."""
    odd = [c.path for c in checks if c.state in (CHANGED, MISSING)]
    if odd:
        return _restore_then(view, odd, [], view.option(recorded), recorded.id)
    option = view.option(recorded)
    return (f"`hotfix rollback {recorded.id} {option}` takes out what is left of it, then "
            f"`{_apply_command(view, recorded, option)}`")


def _restore_first(view: SeriesView, recorded: RecordedHotfix, release: str | None) -> str:
    """For a STALE record whose files are not the installed release's own (an older release's patched file
    left in place: RECORD says otherwise), the step that puts them back first, as it runs: apply would be
    refused (baseline not pristine) and rollback only forgets the record (issue 45). '' otherwise."""
    target = view.target
    if not target.distribution or not target.version:
        return ""
    try:
        foreign = [d.path for d in record_differences(target, [f.path for f in recorded.files])]
    except HotfixError:
        return ""
    command = restore_command(target, foreign) if foreign else None
    if command is None:
        return ""
    return (f"{quote_path(foreign[0])} is not {release or 'the installed release'}'s own file: first "
            f"`{command}` puts its files back; then ")


def status_from_files(hotfix: Hotfix, target: Target, view: SeriesView | None = None, option: str | None = None) -> Status:
    """An unrecorded hotfix: does its series plan forward (not applied) or in reverse (applied) on the
    files as they are -- on top of what the target's recorded series put there?"""
    common = dict(id=hotfix.id, version=hotfix.version, target=str(target.root))
    option = option if option is not None else target_option(target)
    chains = steps_by_path(view.state) if view is not None else {}
    found = presence(hotfix.series, Tree(target.root).read)  # the content rule `hotfix contains` answers with
    touched = [p for p, _, _ in flatten(found.plan)] if found.plan is not None else []
    owners = tuple(dict.fromkeys(s[0] for p in touched for s in chains.get(p, ())))
    if found.state == APPLICABLE:
        dirty = not_pristine(target, [p for p in touched if p not in chains])  # the series' own changes are no dirt
        return Status(state=NOT_APPLIED, advice=f"`hotfix apply {hotfix.id} {option}`",
                      detail=f"applies on top of {', '.join(owners)}" if owners else "",
                      files=tuple({"path": p, "state": CHANGED if p in dirty else BASELINE} for p in touched), **common)
    if found.state != CONTAINED:  # partly / conflicts
        return _does_not_apply(hotfix, target, view, option, found, common)
    files = tuple({"path": p, "state": "patched"} for p in touched)
    if owners:
        return Status(state=APPLIED, detail=f"its change is in effect as part of what the recorded series "
                                            f"({', '.join(owners)}) put there; it is not recorded itself",
                      files=files, **common)
    return Status(state=APPLIED, detail="the files hold the patch, but it is not recorded here (applied by hand?); "
                                        f"`hotfix apply {hotfix.id} {option}` records it without changing a file",
                  files=files, **common)


def _does_not_apply(hotfix: Hotfix, target: Target, view: SeriesView | None, option: str, found, common: dict
                    ) -> Status:
    """An unrecorded hotfix whose series does not apply to the files as they are: the hotfix it waits for, or
    the file that stops it, with a next step that runs as printed. Only what the files say: a file deleted
    under a series is `drifted` (missing), not `not-applied` with an apply that exits 4 (issue 45)."""
    below = _missing_below(hotfix, view)
    stacked = _with_below(hotfix, view, below) if below else None
    if below and (stacked is None or stacked.state == APPLICABLE):  # on top of a hotfix not applied here
        return Status(state=NOT_APPLIED, detail=f"goes on top of {', '.join(below)} (its manifest's `after`), "
                      "which is not applied here", advice=f"`hotfix apply {below[0]} {option}` first", **common)
    looked = stacked if stacked is not None and stacked.state != CONTAINED else found
    chains = steps_by_path(view.state) if view is not None else {}
    tree, odd = Tree(target.root), {}
    for f in (f for f in looked.files if f.state not in (APPLICABLE, CONTAINED)):
        try:
            read = tree.read(f.path)
        except HotfixError:  # a link, a special file: not the release's file either
            odd[f.path] = CHANGED
            continue
        at = level(chains[f.path], sha256(read.data if read else None)) if f.path in chains else None
        if at is not None and at == len(chains[f.path]):  # the top of the recorded series: a real conflict with it
            names = ", ".join(s[0] for s in chains[f.path])
            return Status(state=NOT_APPLIED, detail=f"does not apply on top of {names} (recorded): {found.detail}",
                          advice=f"it conflicts with {names}: roll back {names} first, or make one hotfix of both",
                          **common)
        if at is not None:  # an earlier state of the recorded series: what is not in effect goes back first
            lost = status_from_record(view, view.state.hotfixes[chains[f.path][at][0]])
            return Status(state=NOT_APPLIED, detail=f"goes on top of {lost.id}, which is recorded but {lost.state} "
                          f"in {quote_path(f.path)}", advice=f"first {lost.id}: {lost.advice}", **common)
        odd[f.path] = CHANGED if read is not None else MISSING
    files = tuple({"path": p, "state": word} for p, word in odd.items())
    if _fits_not(target, odd):  # as for a release the catalog has no patch for: unknown, never ruled out
        return Status(state=UNKNOWN, files=files, detail=f"its patch does not apply to {_release(target)}'s own "
                      f"{', '.join(quote_path(p) for p in odd)}: {looked.detail}",
                      advice=f"no step here makes it apply (its patch does not fit this release's file): "
                             f"`hotfix contains {hotfix.id} {option}` shows its hunks", **common)
    missing = [p for p, word in odd.items() if word == MISSING]
    detail = f"{', '.join(quote_path(p) for p in missing)}: missing" if missing else looked.detail
    advice = _restore_then(view, sorted(odd), [*below, hotfix.id], option, hotfix.id) if view is not None and odd else \
        "the file is neither baseline nor patched: restore it, then apply"
    return Status(state=DRIFTED, detail=detail, advice=advice, files=files, **common)


def _release(target: Target) -> str:
    return f"{target.distribution or target.package} {target.version}" if target.version else str(target.root)


def _fits_not(target: Target, odd: dict) -> bool:
    """Every file that stops the patch is present and the release's own (RECORD / git): no restore helps."""
    if not odd or MISSING in odd.values() or not ((target.kind == "wheel" and target.dist_info) or target.git):
        return False
    return not not_pristine(target, odd)


def _with_below(hotfix: Hotfix, view: SeriesView | None, below: list[str]):
    """The presence of the hotfixes ``hotfix`` goes on top of (not applied here) and its own series, in that
    order, on the files as they are (core/presence); None when the catalog does not give their series."""
    if view is None or view.catalog is None:
        return None
    try:
        series = [catalog_hotfix(view.catalog.get(ref), view.target).series for ref in below]
    except HotfixError:
        return None
    stack = Patch(tuple(f for s in series for f in s.files) + hotfix.series.files, hotfix.ref)
    return presence(stack, Tree(view.target.root).read)


def _restore_then(view: SeriesView, paths: list[str], applies: list[str], option: str, subject: str) -> str:
    """The restore of ``paths`` (flow/restore), then what brings back the recorded hotfixes it undoes, in series
    order, then ``applies`` (catalog ids): each step as it runs. A checkout's restore takes every file of the
    recorded hotfixes it touches, so each is whole `lost` and applies again; where the series created a file
    (no restore removes it), the steps after the restore are `hotfix status`'s."""
    target, chains = view.target, steps_by_path(view.state)
    reinstall = (restore_command(target, paths) or "").startswith("python3 -m pip")
    package = os.path.relpath(target.package_dir, target.root).rstrip("/") + "/"
    touched, undone = set(paths), []
    while True:
        undone = [r for r in view.state.hotfixes.values() if any(
            f.path.startswith(package) if reinstall else f.path in touched for f in r.files)]
        more = {f.path for r in undone for f in r.files} - touched
        if reinstall or not more:
            break
        touched |= more
    created = any(chains[f.path][0][1] is None for r in undone for f in r.files if f.path in chains)
    then = [_apply_command(view, r, view.option(r)) for r in undone]
    then += [f"hotfix apply {ref} {option}" for ref in applies if ref not in view.state.hotfixes]
    if created:
        then = [f"hotfix status {option}"]
    return restore_advice(target, paths if reinstall else sorted(touched), then,
                          undoes=[r.id for r in undone if r.id != subject])


def _missing_below(hotfix: Hotfix, view: SeriesView | None) -> list[str]:
    """The hotfixes ``hotfix`` is written on top of (its manifest's ``after``) that this target has no record of."""
    after = hotfix.manifest.after if hotfix.manifest is not None else ()
    recorded = set(view.state.hotfixes) if view is not None else set()
    return [ref for ref in after if ref not in recorded]


def interrupted(hotfix_id: str, version, root: Path, option: str, *, recorded: bool = True) -> Status:
    return Status(hotfix_id, version, INTERRUPTED, str(root),
                  "an apply or rollback on this target was interrupted (kill -9, power loss) and is not recovered",
                  f"run `hotfix recover {option}` (it puts every file and the record back as before)", recorded=recorded)


def catalog_status(manifest: Manifest, target: Target, spec: TargetSpec | None, view: SeriesView,
                   *, patch_files: Sequence[Path] = ()) -> Status:
    """The state of a catalog hotfix on a target: its record (if any) judged in the series, else its files
    (or, in a container, the lock HOTFIX_LOCK names: `verify --lock`'s words)."""
    recorded = view.state.hotfixes.get(manifest.id)
    option = view.option(recorded)
    if recorded is not None:
        found = status_from_record(view, recorded)
        if not same_version(recorded.version, manifest.version) and found.state == APPLIED:
            return replace(found, detail=f"version {recorded.version} is applied; the catalog has {manifest.version}",
                           advice=f"upgrade: `hotfix apply {manifest.id} {option}`")
        return found
    if TargetDir.of(target.root).pending():  # not recorded (a catalog extra): it says so, but counts for nothing
        return interrupted(manifest.id, manifest.version, target.root, option, recorded=False)
    locked = lock_status(manifest.id, target)
    if locked is not None:
        return locked
    why_not = applicability(manifest, spec, target)
    if why_not is not None:
        return Status(manifest.id, manifest.version, why_not.state, str(target.root), why_not.message, why_not.advice)
    try:
        hotfix = catalog_hotfix(manifest, target, patch_files=patch_files)
    except HotfixError as exc:
        return Status(manifest.id, manifest.version, UNKNOWN, str(target.root), exc.message, exc.hint)
    found = status_from_files(hotfix, target, view, option)
    if found.state == DRIFTED and manifest.supersedes and view.catalog is not None:
        return _superseded_in_files(manifest, target, view.catalog, option, patch_files) or found
    return found


def _superseded_in_files(manifest: Manifest, target: Target, catalog: Catalog, option: str,
                         patch_files: Sequence[Path]) -> Status | None:
    """The files hold an older version this one supersedes (applied by hand, e.g. `git apply` of v5): that
    version, and the way up -- `apply ID@V` records it without changing a file, then `apply ID` upgrades it
    in one transaction (issue 45). None when no superseded version's change is what the files hold."""
    for version in sorted(manifest.supersedes, key=str, reverse=True):
        try:
            older = catalog.get(manifest.id, version)
            series = catalog_hotfix(older, target, patch_files=patch_files).series
        except HotfixError:  # that version is gone, or needs a file not given
            continue
        if presence(series, Tree(target.root).read).state == CONTAINED:
            return Status(manifest.id, manifest.version, DRIFTED, str(target.root),
                          f"the files hold {manifest.id}@{version}, which {manifest.ref} supersedes (applied by hand?)",
                          f"`hotfix apply {manifest.id}@{version} {option}` records it without changing a file, then "
                          f"`hotfix apply {manifest.id} {option}` upgrades it in one transaction")
    return None


def lock_status(hotfix_id: str, target: Target) -> Status | None:
    """In a container (HOTFIX_LOCK names a lock that holds ``hotfix_id``, and nothing is recorded here):
    the lock's own verdict and advice, the words `hotfix verify` (which reads HOTFIX_LOCK) prints -- the
    fix comes from the mounts the lock declares, never from `hotfix apply` on the image. None otherwise."""
    import os

    from vllm_hotfix_guard.txn import hotfix_lock, lock_check

    named = os.environ.get(LOCK_ENV, "").strip()
    if not named:
        return None
    try:
        lock = hotfix_lock.load_lock(Path(named))
    except HotfixError:
        return None
    if hotfix_id not in {h.id for h in lock.hotfixes}:
        return None

    def installed(package: str) -> lock_check.Installed | None:
        if package != target.package:
            return None
        return lock_check.Installed(Path(target.package_dir), target.version, TargetDir.of(target.root).pending(),
                                  target.distribution)

    (check,) = lock_check.check_lock(lock, installed, (hotfix_id,), bytecode=lambda s: in_interpreter(target.python, s))
    files = tuple(f.to_json() for f in check.files)
    return Status(hotfix_id, check.hotfix.version, check.state, str(target.root), f"{check.detail} (the lock {named})",
                  lock_check.advice(check, lock_check.mount_line_for(Path(named)), target_option(target)),
                  files=files)
