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
from vllm_hotfix.core.verdict import (
    APPLIED, DRIFTED, IN_EFFECT, INTERRUPTED, LOST, NOT_APPLIED, UNKNOWN,
    files_verdict,
)
from vllm_hotfix.errors import HotfixError, Refused, UsageError
from vllm_hotfix.flow.applicability import applicability
from vllm_hotfix.flow.hotfix import Hotfix, catalog_hotfix
from vllm_hotfix.flow.plan import _flatten, check_record, judge_record, release_changed
from vllm_hotfix.flow.resolve import Resolver, target_option
from vllm_hotfix.install.locate import Target
from vllm_hotfix.install.tree import Tree
from vllm_hotfix.paths import TargetDir
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

    @property
    def in_effect(self) -> bool:
        return self.state in IN_EFFECT

    def to_json(self) -> dict:
        return {"id": self.id, "version": self.version, "state": self.state, "target": self.target,
                "recorded": self.recorded, "detail": self.detail, "advice": self.advice, "files": list(self.files)}


def _apply_command(recorded: RecordedHotfix, option: str) -> str:
    if recorded.source == "catalog":
        return f"hotfix apply {recorded.id} {option}"
    if option.startswith("--root"):
        return f"hotfix apply --patch PATCH --id {recorded.id} {option}"
    return f"hotfix apply --patch PATCH --id {recorded.id} {option} --package {recorded.package or 'PACKAGE'}"


def status_from_record(recorded: RecordedHotfix, root: Path, option: str, *, state: TargetState | None = None,
                       target: Target | None = None) -> Status:
    """A recorded hotfix judged by plan.judge_record (the same verdict `apply` acts on)."""
    tree = Tree(root)
    checks = check_record(recorded, tree)
    if state is not None and target is not None:
        word, detail = judge_record(state, recorded, target, tree)
    else:
        word, detail = files_verdict(checks)
    files = tuple(c.to_json() for c in checks)
    common = dict(id=recorded.id, version=recorded.version, target=str(root), files=files, recorded=True)
    redo = _apply_command(recorded, option)
    if word == APPLIED:
        return Status(state=APPLIED, detail=detail, **common)
    if word == LOST:
        return Status(state=LOST, detail=f"recorded as applied, but {detail}", advice=f"re-run `{redo}`", **common)
    first = next(c.path for c in checks if c.state != "patched")
    return Status(state=DRIFTED, detail=detail,
                  advice=f"restore {first} (reinstall the package / git checkout, or `hotfix rollback {recorded.id} "
                         f"{option}` if only baseline files differ), then `{redo}`", **common)


def status_from_files(hotfix: Hotfix, target: Target) -> Status:
    """An unrecorded hotfix: does its series plan forward (not applied) or in reverse (applied)?"""
    common = dict(id=hotfix.id, version=hotfix.version, target=str(target.root))
    option = target_option(target)
    found = presence(hotfix.series, Tree(target.root).read)  # the content rule `hotfix contains` answers with
    if found.state == APPLICABLE:
        return Status(state=NOT_APPLIED, advice=f"`hotfix apply {hotfix.id} {option}`",
                      files=tuple({"path": p, "state": "baseline"} for p, _, _ in _flatten(found.plan)), **common)
    if found.state != CONTAINED:  # partly / conflicts
        return Status(state=DRIFTED, detail=found.detail,
                      advice="the file is neither baseline nor patched: restore it, then apply", **common)
    return Status(state=APPLIED, detail="the files hold the patch, but it is not recorded here (applied by hand?); "
                                        f"`hotfix apply {hotfix.id} {option}` records it without changing a file",
                  files=tuple({"path": p, "state": "patched"} for p, _, _ in _flatten(found.plan)), **common)


def interrupted(hotfix_id: str, version, root: Path, option: str) -> Status:
    return Status(hotfix_id, version, INTERRUPTED, str(root),
                  "an apply or rollback on this target was interrupted (kill -9, power loss) and is not recovered",
                  f"run `hotfix recover {option}` (it puts every file and the record back as before)", recorded=True)


def catalog_status(manifest: Manifest, target: Target, spec: TargetSpec | None, recorded: RecordedHotfix | None,
                   *, recorded_version: str | None = None, patch_files: Sequence[Path] = (),
                   state: TargetState | None = None) -> Status:
    """The state of a catalog hotfix on a target, with its record (if any) and the release the record was made on."""
    option = target_option(target)
    if TargetDir.of(target.root).pending():
        return interrupted(manifest.id, manifest.version, target.root, option)
    upgraded = recorded is not None and release_changed(recorded_version, target)
    why_not = applicability(manifest, spec, target)
    if why_not is not None:
        detail = why_not.message
        if upgraded:
            detail = (f"{target.distribution} was changed from {recorded_version} to {target.version} under the "
                      f"record; " + detail)
        return Status(manifest.id, manifest.version, why_not.state, str(target.root), detail,
                      why_not.advice, recorded=recorded is not None)
    if recorded is not None:
        state = state if state is not None else TargetState.for_root(target.root)
        found = status_from_record(recorded, target.root, option, state=state, target=target)
        if upgraded:
            return replace(found, advice=f"re-run `hotfix apply {manifest.id} {option}` (it picks the patch for "
                                         f"{target.version})")
        if not same_version(recorded.version, manifest.version) and found.state == APPLIED:
            return replace(found, detail=f"version {recorded.version} is applied; the catalog has {manifest.version}",
                           advice=f"upgrade: `hotfix apply {manifest.id} {option}`")
        return found
    try:
        hotfix = catalog_hotfix(manifest, target, patch_files=patch_files)
    except HotfixError as exc:
        return Status(manifest.id, manifest.version, UNKNOWN, str(target.root), exc.message, exc.hint)
    return status_from_files(hotfix, target)


@dataclass
class Survey:
    """status / verify over hotfixes and targets of one `--python` / `--root`; one Status per (hotfix, target)."""

    python: str | None
    root: Path | None
    catalog: Catalog
    resolver: Resolver = field(init=False)

    def __post_init__(self) -> None:
        self.resolver = Resolver(self.python, self.root)

    def _record_status(self, target: Target, state: TargetState, recorded: RecordedHotfix) -> Status:
        return _of_target(self._record_status_of(target, state, recorded), target)

    def _record_status_of(self, target: Target, state: TargetState, recorded: RecordedHotfix) -> Status:
        if recorded.source == "catalog" and recorded.id in self.catalog.ids():
            return self._catalog_one(self.catalog.get(recorded.id), target, state)
        option = target_option(target)
        if TargetDir.of(target.root).pending():
            return interrupted(recorded.id, recorded.version, target.root, option)
        return status_from_record(recorded, Path(target.root), option, state=state, target=target)

    def _catalog_one(self, manifest: Manifest, target: Target | None = None, state: TargetState | None = None) -> Status:
        spec = None
        if target is None:
            target, spec = self.resolver.for_manifest(manifest)
        else:
            spec = manifest.target_for(target.distribution) if target.distribution else \
                next((s for s in manifest.targets if s.package == target.package), None)
        state = state if state is not None else TargetState.for_root(target.root)
        return _of_target(catalog_status(manifest, target, spec, state.hotfixes.get(manifest.id),
                                         recorded_version=state.target.get("version"), state=state), target)

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

    def everything(self, *, with_catalog: bool) -> list[Status]:
        out: list[Status] = []
        seen: set[str] = set()
        for target, state in self.resolver.records(self.catalog):
            if not state.hotfixes:  # only an interrupted first apply
                out.append(interrupted("(unrecorded apply)", None, target.root, target_option(target)))
            for hotfix_id, recorded in sorted(state.hotfixes.items()):
                seen.add(hotfix_id)
                out.append(self._record_status(target, state, recorded))
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
                out.append(_of_target(catalog_status(manifest, target, spec, None), target))
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


def _of_target(status: Status, target: Target) -> Status:
    from dataclasses import replace

    return replace(status, distribution=target.distribution, installed_version=target.version)


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
