"""Rolling a recorded hotfix back, byte for byte: from the kept backups, else by reverse-applying the
recorded patch. The files and the record change in one transaction."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_hotfix.core.apply import FileEdit, FileState, Plan, plan_patch
from vllm_hotfix.core.diff import Patch
from vllm_hotfix.errors import Refused
from vllm_hotfix.flow import transaction
from vllm_hotfix.flow.hotfix import recorded_series, sha256
from vllm_hotfix.flow.plan import _flatten
from vllm_hotfix.install.tree import Tree
from vllm_hotfix.txn.state import RecordedHotfix, TargetState


@dataclass(frozen=True)
class RollbackOutcome:
    """What a rollback restored, and from what (backups or the reversed patch)."""

    recorded: RecordedHotfix
    plan: Plan
    method: str  # 'backups' | 'reverse' | 'none'
    dry_run: bool


def _rollback_plan(state: TargetState, recorded: RecordedHotfix, root: Path, tree: Tree) -> tuple[Plan, str]:
    current: dict[str, FileState | None] = {}
    to_restore = []
    for f in recorded.files:
        current[f.path] = found = tree.read(f.path)
        digest = sha256(found.data if found else None)
        if digest == f.before_sha256:
            continue
        if digest != f.after_sha256:
            raise Refused(f"{root / f.path}: neither what {recorded.id} wrote nor the baseline (changed by hand?)",
                          hint="restore it (reinstall the package / git checkout) first; nothing was changed")
        to_restore.append(f)
    desired: dict[str, bytes | None] = {}
    method = "backups"
    for f in to_restore:
        if f.before_sha256 is None:
            desired[f.path] = None
            continue
        data = state.read_backup(recorded, f)
        if data is None:
            method = "reverse"
            break
        desired[f.path] = data
    if method == "reverse" and to_restore:
        wanted = {f.path for f in to_restore}
        series = recorded_series(state, recorded)
        part = Patch(tuple(fp for fp in series.files if {fp.old_path, fp.new_path} & wanted), series.source)
        undo = plan_patch(part, tree.read, reverse=True)
        desired = {p: after for p, _, after in _flatten(undo) if p in wanted}
        for f in to_restore:
            if sha256(desired.get(f.path)) != f.before_sha256:
                raise Refused(f"{f.path}: reversing the recorded patch does not give the recorded baseline",
                              hint="reinstall the package to restore its baseline")
    edits = []
    for f in to_restore:
        found = current[f.path]
        after = desired[f.path]
        action = "create" if found is None else "delete" if after is None else "modify"
        edits.append(FileEdit(f.path, action, None, found.data if found else None, after,
                              found.mode if found else None, None, ()))
    return Plan(tuple(edits), True), method if edits else "none"


def rollback(hotfix_id: str, root: Path, *, dry_run: bool) -> RollbackOutcome:
    """Restore what ``hotfix_id`` changed under ``root`` and remove its record, all-or-nothing."""

    def prepare(state: TargetState, tree: Tree) -> transaction.Change:
        if hotfix_id not in state.hotfixes:
            known = ", ".join(sorted(state.hotfixes)) or "none"
            raise Refused(f"{hotfix_id}: not recorded as applied to {root} (recorded: {known})",
                          hint="`hotfix status` shows what is applied where")
        recorded = state.hotfixes[hotfix_id]
        plan, method = _rollback_plan(state, recorded, root, tree)
        hotfixes = {k: v for k, v in state.hotfixes.items() if k != hotfix_id}
        after = TargetState(state.directory, dict(state.target), hotfixes)
        return transaction.Change(plan, after, True, result=RollbackOutcome(recorded, plan, method, dry_run))

    return transaction.run(root, prepare, dry_run=dry_run).result
