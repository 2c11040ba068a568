"""`hotfix apply A B C`: several catalog hotfixes on one target, in that order, as ONE transaction.

Each member is planned by apply's own ``prepare`` (flow/apply_hotfix.hotfix_prepare: the same refusals,
baseline proof, record, history event) on the record and files the members before it leave -- held in
memory: ``Pending`` (their records, and the patches and backups they keep, not written yet) and ``Overlay``
(their files). The members' plans are then composed into one plan (``compose``: each path's first
``before`` and last ``after``), and flow/transaction.run writes it with one journal, one record (the last
member's) and one history line per member: every hotfix applied and recorded, in order, or nothing.
A post-apply check of any member undoes them all; kill -9 leaves one journal, which `hotfix recover`
(or the next command that writes) undoes whole.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from vllm_hotfix_guard.core.hunk_apply import FileEdit, FileState, Plan
from vllm_hotfix_guard.errors import DoesNotApply, Refused
from vllm_hotfix.flow import transaction
from vllm_hotfix.flow.apply_hotfix import ApplyOutcome, drop_stale_bytecode, hotfix_prepare
from vllm_hotfix.flow.baseline_proof import check_after
from vllm_hotfix.flow.hotfix import Hotfix, sha256
from vllm_hotfix.install.locate import Target
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.output import progress
from vllm_hotfix_guard.txn.state import RecordedFile, RecordedHotfix, TargetState

if TYPE_CHECKING:
    from vllm_hotfix.catalog.model import TargetSpec

CREATED_MODE = 0o100644  # what a file a member creates reads as to the members after it (no mode given)


@dataclass(frozen=True)
class Member:
    """One hotfix of the group and its target (the command checked it applies there; every member's target
    has the same root: one record, one transaction -- two packages of one checkout may be two targets)."""

    hotfix: Hotfix
    target: Target
    spec: TargetSpec | None
    catalog_dir: str | None = None


@dataclass
class Pending(TargetState):
    """The record as the members planned so far leave it: what they keep (state-folder-relative name ->
    bytes, or the target-relative path of a file untouched so far whose bytes are kept) is read from here
    until the transaction writes it."""

    kept: dict = field(default_factory=dict)
    files: Tree | None = None  # the target's files as they are (the keeps named by path)

    def _kept(self, rel: str) -> bytes | None:
        what = self.kept[rel]
        if isinstance(what, bytes):
            return what
        found = self.files.read(what) if self.files is not None else None
        return found.data if found is not None else None

    def read_patch(self, rel: str) -> bytes | None:
        return self._kept(rel) if rel in self.kept else super().read_patch(rel)

    def read_backup(self, recorded: RecordedHotfix, file: RecordedFile) -> bytes | None:
        rel = os.path.relpath(self.backup_path(recorded, file.path), self.directory).replace(os.sep, "/")
        if rel not in self.kept:
            return super().read_backup(recorded, file)
        data = self._kept(rel)
        return data if data is not None and sha256(data) == file.before_sha256 else None


class Overlay(Tree):
    """The target's files with what the members planned so far write (path -> FileState, None: removed)."""

    def __init__(self, base: Tree, files: dict):
        super().__init__(base.root)
        self._base, self._files = base, files
        self.recovered = base.recovered  # a dry run after kill -9 plans on what recover leaves

    def read(self, relpath: str):
        return self._files[relpath] if relpath in self._files else self._base.read(relpath)


def written(plan: Plan) -> dict[str, FileState | None]:
    """What ``plan`` leaves at each path it touches, as the members after it read it."""
    out: dict[str, FileState | None] = {}
    for edit in plan.edits:
        if edit.action == "rename":
            out[edit.old_path] = None
        mode = edit.old_mode if edit.old_mode is not None else CREATED_MODE
        if edit.new_mode is not None:
            mode = (mode & ~0o7777) | edit.new_mode
        out[edit.path] = None if edit.after is None else FileState(edit.after, mode)
    return out


def compose(plans: Sequence[Plan]) -> Plan:
    """One plan that writes what ``plans`` write one after another: each path's first ``before`` and last
    ``after`` (a rename is its source removed and its destination created; a path created then removed, or
    given back its bytes and mode, is left out). The placements are kept for messages only."""
    paths: dict[str, list] = {}  # path -> [before, after, old_mode, new_mode, placements]
    for plan in plans:
        for edit in plan.edits:
            if edit.action == "rename":
                _step(paths, edit.old_path, edit.before, None, edit.old_mode, None, ())
                mode = edit.new_mode if edit.new_mode is not None else \
                    (edit.old_mode & 0o7777 if edit.old_mode is not None else None)
                _step(paths, edit.path, None, edit.after, None, mode, edit.placements)
            else:
                _step(paths, edit.path, edit.before, edit.after, edit.old_mode, edit.new_mode, edit.placements)
    edits = []
    for path, (before, after, old_mode, new_mode, placements) in paths.items():
        same_mode = new_mode is None or (old_mode is not None and new_mode == old_mode & 0o7777)
        if (before is None and after is None) or (before == after and same_mode):
            continue
        action = "create" if before is None else "delete" if after is None else "modify" if before != after else "mode"
        edits.append(FileEdit(path, action, None, before, after, old_mode if before is not None else None,
                              new_mode if after is not None else None, placements))
    return Plan(tuple(edits), False)


def _step(paths: dict, path: str, before, after, old_mode, new_mode, placements) -> None:
    earlier = paths.get(path)
    if earlier is None:
        paths[path] = [before, after, old_mode, new_mode, tuple(placements)]
        return
    earlier[1] = after
    earlier[3] = None if after is None else new_mode if new_mode is not None else earlier[3]
    earlier[4] += tuple(placements)


def _resolved(keep: dict, files: dict, tree: Tree) -> dict:
    """A member's keeps, a path the members before it wrote given as the bytes it planned on (the hard link
    of the file on disk would keep the bytes from before the group)."""
    out = {}
    for rel, what in keep.items():
        if isinstance(what, str) and what in files:
            found = tree.read(what)
            what = found.data if found is not None else b""
        out[rel] = what
    return out


def group_prepare(members: Sequence[Member], *, catalog, resealed: list) -> transaction.Prepare:
    """The one transaction's ``prepare``: every member planned in turn on what the ones before it leave."""
    from vllm_hotfix.flow.mounted import hotfix_refusal

    def prepare(state: TargetState, tree: Tree) -> transaction.Change:
        changes, steps, keep, files = [], [], {}, {}
        now_state, now_tree = state, tree
        for member in progress(members, len(members), "hotfix: planning"):  # a bar on a terminal only
            one = hotfix_prepare(member.hotfix, member.target, member.spec, catalog=catalog,
                                 catalog_dir=member.catalog_dir, resealed=resealed)
            try:
                change = one(now_state, now_tree)
            except (Refused, DoesNotApply) as refused:
                raise hotfix_refusal(refused, member.hotfix, member.target) from None
            changes.append(change)
            keep.update(_resolved(change.keep, files, now_tree))
            if change.event is not None:
                steps.append((change.event, change.state, change.plan, now_tree))
            files.update(written(change.plan))
            now_tree = Overlay(tree, dict(files))
            now_state = Pending(change.state.directory, dict(change.state.target), dict(change.state.hotfixes),
                                kept=dict(keep), files=tree)
        final = TargetState(now_state.directory, now_state.target, now_state.hotfixes)
        return transaction.Change(compose([c.plan for c in changes]), final, any(c.record_changed for c in changes),
                                  keep, tuple(changes), steps=tuple(steps))

    return prepare


def apply_group(members: Sequence[Member], *, dry_run: bool, catalog=None,
                lock_timeout: float | None = None) -> list[ApplyOutcome]:
    """Plan (and unless ``dry_run``) apply ``members`` in order, all-or-nothing, in one transaction on their
    root (see the module doc); one ApplyOutcome per member, as `apply ID` would report it."""
    resealed: list = []
    by_id = {m.hotfix.id: m for m in members}

    def after(change: transaction.Change) -> None:  # each member's post-apply checks, on the files of all
        for one in change.result:
            member = by_id[one.result.hotfix.id]
            if member.hotfix.id not in resealed and (one.plan.edits or one.record_changed):
                check_after(one.result, member.spec)

    change = transaction.run(members[0].target.root, group_prepare(members, catalog=catalog, resealed=resealed),
                             dry_run=dry_run, after=after, lock_timeout=lock_timeout)
    outcomes = [ApplyOutcome(one.result, dry_run, one.record_changed, sealed=one.result.hotfix.id in resealed)
                for one in change.result]
    if not dry_run:
        for outcome in outcomes:
            if outcome.proposal.bytecode:  # applied, but Python would load stale entries: drop exactly those
                drop_stale_bytecode(outcome.proposal.bytecode)
    return outcomes

