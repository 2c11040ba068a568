"""The survey: the states (flow/hotfix_status.py) of the hotfixes asked about, over the targets that
hold them (``Survey``: named ids, a target's record, everything recorded), and their fingerprint."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

from vllm_hotfix.catalog.index import Catalog
from vllm_hotfix.catalog.model import Manifest
from vllm_hotfix_guard.errors import HotfixError, Refused, UsageError
from vllm_hotfix.flow.resolve import Resolver, target_option
from vllm_hotfix.install.locate import Target
from vllm_hotfix.flow.mounted import through_mounts
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.paths import TargetDir
from vllm_hotfix_guard.txn.state import RecordedHotfix, TargetState
from vllm_hotfix.flow.hotfix_status import SeriesView, Status, catalog_status, interrupted, status_from_record


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
            self._views[key] = SeriesView.of(target, state, self.catalog)
        return self._views[key]

    def _record_status(self, target: Target, state: TargetState, recorded: RecordedHotfix) -> Status:
        view = self.view(target, state)
        if recorded.source == "catalog" and recorded.id in self.catalog.ids():
            manifest = self.catalog.get(recorded.id)
            return _of_target(catalog_status(manifest, target, manifest.spec_for(target), view), target, view)
        return _of_target(status_from_record(view, recorded), target, view)

    def _catalog_one(self, manifest: Manifest) -> Status:
        target, spec = self.resolver.for_manifest(manifest)
        view = self.view(target)
        return _of_target(catalog_status(manifest, target, spec, view), target, view)

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
            return [interrupted("(unrecorded apply)", None, target.root, target_option(target, self.catalog))] \
                if pending else []
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
                view = self.view(target)
                out.append(_of_target(catalog_status(manifest, target, spec, view), target, view))
        return out

    def holding(self, hotfix_id: str) -> tuple[Target, TargetState]:
        """The one target whose record holds ``hotfix_id`` (rollback)."""
        holding = [(t, s) for t, s in self.resolver.records(self.catalog) if hotfix_id in s.hotfixes]
        if not holding:
            where = f"--root {self.root}" if self.root is not None else (
                f"--python {self.python}" if self.python else "this interpreter")
            raise Refused(f"{hotfix_id}: not recorded as applied for {where}",
                          hint="`hotfix status --all` shows what is applied where")
        if len(holding) > 1:
            raise UsageError(f"{hotfix_id}: recorded for several targets: "
                             + ", ".join(str(t.root) for t, _ in holding), hint="pass --root DIR")
        return holding[0]


def _of_target(status: Status, target: Target, view: SeriesView) -> Status:
    position = None
    state = view.state
    if status.recorded and status.id in state.hotfixes:
        position = list(state.hotfixes).index(status.id) + 1
    status = replace(status, distribution=target.distribution, position=position,
                     installed_version=status.installed_version if status.recorded else target.version)
    return through_mounts(status, target, view.catalog)


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
    from vllm_hotfix_guard.core.fingerprint import Entry, fingerprint as digest
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
