"""One state per hotfix and target, decided from the files (core.verdict's words and rule).

A record says what *should* be there; the files decide what is. `status`, `verify`, `apply` (through
``plan.propose``), `export` and `check-catalog` all take their answer from here or from core.verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

from vllm_hotfix.catalog.index import Catalog, same_version
from vllm_hotfix.catalog.model import Manifest, TargetSpec
from vllm_hotfix.core.presence import APPLICABLE, CONTAINED, presence
from vllm_hotfix.core.verdict import APPLIED, DRIFTED, IN_EFFECT, INTERRUPTED, LOST, NOT_APPLIED, UNKNOWN
from vllm_hotfix.errors import HotfixError, Refused, UsageError
from vllm_hotfix.flow.applicability import Inapplicable, applicability
from vllm_hotfix.flow.hotfix import Hotfix, catalog_hotfix, pin_problem
from vllm_hotfix.flow.plan import flatten
from vllm_hotfix.flow.series import file_checks, judge_recorded, release_changed, steps_by_path
from vllm_hotfix.flow.resolve import Resolver, target_option
from vllm_hotfix.install.locate import Target
from vllm_hotfix.install.mounts import MountedFile, mounted_files
from vllm_hotfix.install.tree import Tree
from vllm_hotfix.output import quote_path
from vllm_hotfix.paths import LOCK_ENV, TargetDir
from vllm_hotfix.txn.state import RecordedHotfix, TargetState


@dataclass(frozen=True)
class Status:
    """One hotfix on one target: its state word, why, and what to do."""

    id: str
    version: int | str | None
    state: str
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


def _apply_command(recorded: RecordedHotfix, option: str) -> str:
    if recorded.source == "catalog":
        return f"hotfix apply {recorded.id} {option}"
    if option.startswith("--root"):
        return f"hotfix apply --patch PATCH --id {recorded.id} {option}"
    return f"hotfix apply --patch PATCH --id {recorded.id} {option} --package {recorded.package or 'PACKAGE'}"


@dataclass(frozen=True)
class SeriesView:
    """One target's record and what its files say about every recorded hotfix (one read of each file)."""

    target: Target
    state: TargetState
    checks: dict
    broken: str | None

    @classmethod
    def of(cls, target: Target, state: TargetState | None = None) -> "SeriesView":
        state = state if state is not None else TargetState.for_root(target.root)
        checks, broken = file_checks(state, Tree(target.root), target)  # the record checked, not trusted
        return cls(target, state, checks, broken)


def status_from_record(view: SeriesView, recorded: RecordedHotfix, *,
                       inapplicable: Inapplicable | None = None) -> Status:
    """A recorded hotfix in its series, judged by core.verdict.judge (the verdict `apply` acts on)."""
    target, option = view.target, target_option(view.target)
    word, detail = judge_recorded(view.state, recorded.id, target, view.checks, view.broken,
                                  inapplicable=(inapplicable.state, inapplicable.message) if inapplicable else None)
    checks = view.checks.get(recorded.id, ())
    files = tuple(c.to_json() for c in checks)
    common = dict(id=recorded.id, version=recorded.version, target=str(target.root), files=files, recorded=True)
    redo = _apply_command(recorded, option)
    if word == APPLIED:
        return Status(state=APPLIED, detail=detail, **common)
    if word == INTERRUPTED:
        return replace(interrupted(recorded.id, recorded.version, target.root, option), files=files)
    if inapplicable is not None and word == inapplicable.state:
        was = view.state.target.get("version")
        if release_changed(view.state, target):
            detail = f"{target.distribution} was changed from {was} to {target.version} under the record; {detail}"
        return Status(state=word, detail=detail, advice=inapplicable.advice, **common)
    if word == LOST:
        if release_changed(view.state, target):
            return Status(state=LOST, detail=detail, advice=f"re-run `{redo}` (it picks the patch for {target.version})",
                          **common)
        return Status(state=LOST, detail=f"recorded as applied, but {detail}", advice=f"re-run `{redo}`", **common)
    if word == UNKNOWN:
        return Status(state=UNKNOWN, detail=detail, advice="see `hotfix where` and the record; restore the files, "
                                                           "then apply again", **common)
    first = quote_path(next((c.path for c in checks if c.state != "patched"), "the files"))
    return Status(state=DRIFTED, detail=detail,
                  advice=f"restore {first} (reinstall the package / git checkout, or `hotfix rollback {recorded.id} "
                         f"{option}` if only baseline files differ), then `{redo}`", **common)


def status_from_files(hotfix: Hotfix, target: Target, view: SeriesView | None = None) -> Status:
    """An unrecorded hotfix: does its series plan forward (not applied) or in reverse (applied) on the
    files as they are -- on top of what the target's recorded series put there?"""
    common = dict(id=hotfix.id, version=hotfix.version, target=str(target.root))
    option = target_option(target)
    chains = steps_by_path(view.state) if view is not None else {}
    found = presence(hotfix.series, Tree(target.root).read)  # the content rule `hotfix contains` answers with
    touched = [p for p, _, _ in flatten(found.plan)] if found.plan is not None else []
    owners = tuple(dict.fromkeys(s[0] for p in touched for s in chains.get(p, ())))
    if found.state == APPLICABLE:
        return Status(state=NOT_APPLIED, advice=f"`hotfix apply {hotfix.id} {option}`",
                      detail=f"applies on top of {', '.join(owners)}" if owners else "",
                      files=tuple({"path": p, "state": "baseline"} for p in touched), **common)
    if found.state != CONTAINED:  # partly / conflicts
        hit = next((f.path for f in found.files if f.state != CONTAINED and f.path in chains), None)
        if hit is not None:
            names = ", ".join(s[0] for s in chains[hit])
            return Status(state=NOT_APPLIED, detail=f"does not apply on top of {names} (recorded): {found.detail}",
                          advice=f"it conflicts with {names}: roll back {names} first, or make one hotfix of both",
                          **common)
        return Status(state=DRIFTED, detail=found.detail,
                      advice="the file is neither baseline nor patched: restore it, then apply",
                      files=tuple({"path": f.path, "state": "changed"} for f in found.files if f.state != CONTAINED),
                      **common)
    files = tuple({"path": p, "state": "patched"} for p in touched)
    if owners:
        return Status(state=APPLIED, detail=f"its change is in effect as part of what the recorded series "
                                            f"({', '.join(owners)}) put there; it is not recorded itself",
                      files=files, **common)
    return Status(state=APPLIED, detail="the files hold the patch, but it is not recorded here (applied by hand?); "
                                        f"`hotfix apply {hotfix.id} {option}` records it without changing a file",
                  files=files, **common)


def interrupted(hotfix_id: str, version, root: Path, option: str) -> Status:
    return Status(hotfix_id, version, INTERRUPTED, str(root),
                  "an apply or rollback on this target was interrupted (kill -9, power loss) and is not recovered",
                  f"run `hotfix recover {option}` (it puts every file and the record back as before)", recorded=True)


def catalog_status(manifest: Manifest, target: Target, spec: TargetSpec | None, view: SeriesView,
                   *, patch_files: Sequence[Path] = ()) -> Status:
    """The state of a catalog hotfix on a target: its record (if any) judged in the series, else its files."""
    recorded = view.state.hotfixes.get(manifest.id)
    why_not = applicability(manifest, spec, target)
    if recorded is not None:
        problem = pin_problem(manifest, recorded, view.state, target)
        if problem is not None:  # not the bytes the catalog pins: the record proves nothing
            return Status(manifest.id, recorded.version, UNKNOWN, str(target.root), problem,
                          "the record does not describe what `hotfix apply` wrote: restore the files "
                          "(reinstall the package) and move the state folder aside", recorded=True)
        found = status_from_record(view, recorded, inapplicable=why_not)
        if not same_version(recorded.version, manifest.version) and found.state == APPLIED:
            return replace(found, detail=f"version {recorded.version} is applied; the catalog has {manifest.version}",
                           advice=f"upgrade: `hotfix apply {manifest.id} {target_option(target)}`")
        return found
    if TargetDir.of(target.root).pending():
        return interrupted(manifest.id, manifest.version, target.root, target_option(target))
    if why_not is not None:
        return Status(manifest.id, manifest.version, why_not.state, str(target.root), why_not.message, why_not.advice)
    try:
        hotfix = catalog_hotfix(manifest, target, patch_files=patch_files)
    except HotfixError as exc:
        return Status(manifest.id, manifest.version, UNKNOWN, str(target.root), exc.message, exc.hint)
    return status_from_files(hotfix, target, view)


@dataclass
class Survey:
    """status / verify over hotfixes and targets of one `--python` / `--root`; one Status per (hotfix, target)."""

    python: str | None
    root: Path | None
    catalog: Catalog
    resolver: Resolver = field(init=False)

    def __post_init__(self) -> None:
        self.resolver = Resolver(self.python, self.root)
        self._views: dict[str, SeriesView] = {}

    def view(self, target: Target, state: TargetState | None = None) -> SeriesView:
        """The series of one target, read once per survey (every status of it shares the file reads)."""
        key = str(target.root)
        if key not in self._views:
            self._views[key] = SeriesView.of(target, state)
        return self._views[key]

    def _record_status(self, target: Target, state: TargetState, recorded: RecordedHotfix) -> Status:
        view = self.view(target, state)
        if recorded.source == "catalog" and recorded.id in self.catalog.ids():
            manifest = self.catalog.get(recorded.id)
            return _of_target(catalog_status(manifest, target, manifest.spec_for(target), view), target, view.state)
        return _of_target(status_from_record(view, recorded), target, view.state)

    def _catalog_one(self, manifest: Manifest) -> Status:
        target, spec = self.resolver.for_manifest(manifest)
        view = self.view(target)
        return _of_target(catalog_status(manifest, target, spec, view), target, view.state)

    def named(self, refs: Iterable[tuple[str, str | None]]) -> list[Status]:
        out = []
        records = None
        for hotfix_id, version in refs:
            if hotfix_id in self.catalog.ids():
                out.append(self._catalog_one(self.catalog.get(hotfix_id, version)))
                continue
            records = self.resolver.records(self.catalog) if records is None else records
            holding = [(t, s) for t, s in records if hotfix_id in s.hotfixes]
            if not holding:
                self.catalog.get(hotfix_id)  # raises Refused with a close match
            out.extend(self._record_status(t, s, s.hotfixes[hotfix_id]) for t, s in holding)
        return out

    def recorded(self, target: Target, state: TargetState) -> list[Status]:
        """Every recorded hotfix of one target, in series order (an interrupted first apply: one line)."""
        if not state.hotfixes:  # only an interrupted first apply, or everything rolled back
            pending = TargetDir.of(target.root).pending()
            return [interrupted("(unrecorded apply)", None, target.root, target_option(target))] if pending else []
        return [self._record_status(target, state, recorded) for recorded in state.hotfixes.values()]

    def everything(self, *, with_catalog: bool) -> list[Status]:
        out: list[Status] = []
        seen: set[str] = set()
        for target, state in self.resolver.records(self.catalog):
            seen.update(state.hotfixes)
            out.extend(self.recorded(target, state))
        if with_catalog:
            for manifest in self.catalog.latest():
                if manifest.id in seen or manifest.kind == "advisory":  # no patch: nothing to be in effect
                    continue
                try:
                    target, spec = self.resolver.for_manifest(manifest)
                except (Refused, UsageError):
                    continue  # its package is not installed for this interpreter
                if spec is None:
                    continue
                out.append(_of_target(catalog_status(manifest, target, spec, self.view(target)), target))
        return out

    def holding(self, hotfix_id: str) -> tuple[Target, TargetState]:
        """The one target whose record holds ``hotfix_id`` (rollback)."""
        holding = [(t, s) for t, s in self.resolver.records(self.catalog) if hotfix_id in s.hotfixes]
        if not holding:
            where = f"--root {self.root}" if self.root is not None else (
                f"--python {self.python}" if self.python else "this interpreter")
            raise Refused(f"{hotfix_id}: not recorded as applied for {where}",
                          hint="`hotfix status` shows what is applied where")
        if len(holding) > 1:
            raise UsageError(f"{hotfix_id}: recorded for several targets: "
                             + ", ".join(str(t.root) for t, _ in holding), hint="pass --root DIR")
        return holding[0]


def _of_target(status: Status, target: Target, state: TargetState | None = None) -> Status:
    position = None
    if state is not None and status.recorded and status.id in state.hotfixes:
        position = list(state.hotfixes).index(status.id) + 1
    status = replace(status, distribution=target.distribution, installed_version=target.version, position=position)
    return through_mounts(status, target)


def declared_by_lock(hotfix_id: str, paths: Sequence[str]) -> str | None:
    """The lock that ``HOTFIX_LOCK`` names when it locks ``hotfix_id`` with each of ``paths``: the mounts
    were declared by `hotfix export` + `hotfix compose` / `k8s` / `bake` (and `verify --lock` checks them at
    every start). None when it is unset, unreadable, or says nothing of them."""
    import os

    from vllm_hotfix.txn.lockfile import load_lock

    named = os.environ.get(LOCK_ENV, "").strip()
    if not named:
        return None
    try:
        lock = load_lock(Path(named))
    except HotfixError:
        return None
    locked = {f.path for h in lock.hotfixes if h.id == hotfix_id for f in h.files}
    return named if locked and set(paths) <= locked else None


def mount_sources(mounts: Sequence[MountedFile]) -> str:
    """Where mounted files come from, for a line: ``/srv/hotfix-pr77/mamba_hybrid.py`` (one), else each
    with the file it is mounted over."""
    return ", ".join(m.source + (f" (for {quote_path(m.path)})" if len(mounts) > 1 else "") for m in mounts)


def refusal_through_mount(exc: HotfixError, target: Target, paths: Iterable[str]) -> HotfixError:
    """A refusal to apply (not pristine, does not apply) about a file whose bytes come through a mount:
    the same error, naming the mount, with the one hint that can work (neither `pip install
    --force-reinstall` nor apply can change a mounted file)."""
    mounted = mounted_files(target.root, [p for p in paths if p])
    if not mounted:
        return exc
    first = next(iter(mounted.values()))
    return type(exc)(f"{exc.message}; {quote_path(first.path)} is a bind mount from {first.source}",
                     hint=MOUNT_REMEDY)


MOUNT_REMEDY = ("remove the mount (and its line in the compose file) to get the installed file back, or mount the "
                "patched file instead (`hotfix export ID --to DIR` + `hotfix compose`)")


def through_mounts(status: Status, target: Target) -> Status:
    """A status whose files come through a mount below the target root (seed 001: a patched file
    bind-mounted over site-packages) says so: in effect only while the mount is, which a rebuild from a
    compose file without it undoes; not in effect, the bytes to fix are the mount's source's, and no
    reinstall or apply can change them."""
    mounted = mounted_files(target.root, [f["path"] for f in status.files])
    if not mounted:
        return status
    mounts = tuple(mounted.values())
    files = tuple(dict(f, mount=mounted[f["path"]].to_json()) if f["path"] in mounted else f for f in status.files)
    sources = mount_sources(mounts)
    export = f"`hotfix export {status.id} --to hotfix-export`"
    declared = declared_by_lock(status.id, [m.path for m in mounts])
    if status.in_effect and declared:
        detail = f"in effect through a bind mount from {sources}, declared by the lock {declared} ({LOCK_ENV})"
        advice = None
    elif status.in_effect:
        detail = f"in effect through a bind mount from {sources}: a rebuild or a compose file without the mount loses it"
        advice = (f"declare the mount where the container is defined: {export} + `hotfix compose {status.id} "
                  f"--service SERVICE` (or `hotfix k8s`), and check it at start with `hotfix verify --lock`")
    else:
        first = mounts[0]
        detail = f"{status.detail}; {quote_path(first.path)} is a bind mount from {first.source}".lstrip("; ")
        advice = (f"{quote_path(first.path)} comes from the bind mount of {first.source}, which neither a reinstall nor "
                  f"`hotfix apply` can change: {MOUNT_REMEDY.replace('ID', status.id)}")
    return replace(status, files=files, detail=detail, advice=advice, mounts=mounts)


def survey(*, hotfix_ids: Sequence[str], python: str | None, root: Path | None, catalogs: Sequence[Path],
           with_catalog: bool, targets: list | None = None) -> list[Status]:
    """`status` and `verify`: the named hotfixes, or every recorded one in series order (+ the catalog's
    others whose distribution this interpreter has, when ``with_catalog``). ``targets``, when given,
    receives the targets the survey resolved (to say where a version was derived)."""
    from vllm_hotfix.catalog.index import parse_ref

    surveyor = Survey(python, Path(root) if root is not None else None, Catalog.load(catalogs))
    if hotfix_ids:
        statuses = surveyor.named(parse_ref(i) for i in hotfix_ids)
    else:
        statuses = surveyor.everything(with_catalog=with_catalog)
    if targets is not None:
        targets.extend(surveyor.resolver.resolved())
    return statuses


def fingerprint(statuses: Iterable[Status]) -> str:
    """core.fingerprint of these statuses: each hotfix's id and version, its target's distribution and
    installed version, and every file's sha256 as it is on disk now."""
    from vllm_hotfix.core.fingerprint import Entry, fingerprint as digest
    from vllm_hotfix.flow.hotfix import sha256

    entries = []
    for s in statuses:
        tree = Tree(Path(s.target))
        files = []
        for f in s.files:
            if "sha256" in f:  # read by the check that decided the state
                sha = f["sha256"]
            else:  # decided by the patch (not recorded): read it now
                try:
                    found = tree.read(f["path"])
                except HotfixError:
                    found = None
                sha = sha256(found.data) if found else None
            files.append((f["path"], sha))
        entries.append(Entry(s.id, s.version, s.distribution, s.installed_version, tuple(files)))
    return digest(entries)
