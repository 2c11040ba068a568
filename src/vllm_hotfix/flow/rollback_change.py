"""Rolling a recorded hotfix back, byte for byte, wherever it sits in the target's series.

Each file it touches gets exactly what the series without it gives (flow/series.Series.without): for
the top of a file's series that is the bytes before it (its kept original, else its recorded patch
reversed, either checked against the record); under other hotfixes its hunks are reversed on the file
as it is, which must agree with the upper hotfixes' recorded patches replayed without it -- else the
rollback is refused naming the hotfix on top. The records of the hotfixes above are re-derived, and the
files and the record change in one transaction.

A record made on another release than the one installed now (``stale``: pip installed another vLLM, a
checkout's HEAD moved) is forgotten instead: its backups are that release's files, and writing them
back would put another release's bytes into this one. Only the record changes (and the history says
``forgotten``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_hotfix_guard.core.hunk_apply import FileEdit, Plan
from vllm_hotfix_guard.errors import InvalidInput, Refused
from vllm_hotfix.flow import transaction
from vllm_hotfix.flow.history_line import Event
from vllm_hotfix.flow.resolve import target_option
from vllm_hotfix.flow.series import Series, distrust, rebased_records
from vllm_hotfix_guard.txn.judgement import release_of
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.txn.state import RecordedHotfix, TargetState


@dataclass(frozen=True)
class RollbackOutcome:
    """What a rollback restored, and from what (backups or the reversed patch)."""

    recorded: RecordedHotfix
    plan: Plan
    method: str  # 'backups' | 'reverse' | 'in-place' (its hunks reversed under others) | 'none' | 'forget'
    dry_run: bool
    rebased: tuple[str, ...] = ()  # hotfixes above it whose records were re-derived without it
    release_change: str | None = None  # 'forget': why the record describes another release (nothing written)


def rollback_change(state: TargetState, tree: Tree, hotfix_id: str, root: Path, result_dry_run: bool,
                    target=None) -> transaction.Change:
    """The transaction that takes ``hotfix_id`` out of the series (also `apply --patch --reverse` of a
    recorded diff). With the ``target``, the record is checked first (``flow/series.distrust``): a record
    that does not describe the install writes nothing back."""
    if target is not None and state.hotfixes:
        problem = distrust(state, tree, target)
        if problem is not None:
            raise InvalidInput(f"{state.path}: {problem}",
                               hint="nothing was changed; restore the files (reinstall) and move the state folder aside")
    if hotfix_id not in state.hotfixes:
        known = ", ".join(state.hotfixes) or "none"
        raise Refused(f"{hotfix_id}: not recorded as applied to {root} (recorded: {known})",
                      hint="`hotfix status --all` shows what is applied where")
    recorded = state.hotfixes[hotfix_id]
    changed = release_of(state, target)[2] if target is not None else None
    if changed is not None:  # its backups are another release's files: never written back, the record goes
        after = TargetState(state.directory, dict(state.target), {k: v for k, v in state.hotfixes.items() if k != hotfix_id})
        plan = Plan((), True)
        return transaction.Change(plan, after, True, result=RollbackOutcome(recorded, plan, "forget", result_dry_run,
                                                                            release_change=changed),
                                  event=Event(outcome="forgotten", hotfix=hotfix_id, version=recorded.version,
                                              detail=changed))
    series = Series(state, tree)
    rebases = series.without(hotfix_id, target_option(target) if target is not None else "")
    edits = []
    for rebase in rebases:
        found = rebase.current
        if (found.data if found else None) == rebase.after:
            continue
        action = "create" if found is None else "delete" if rebase.after is None else "modify"
        edits.append(FileEdit(rebase.path, action, None, found.data if found else None, rebase.after,
                              found.mode if found else None, None, ()))
    plan = Plan(tuple(edits), True)
    hotfixes = rebased_records(state, hotfix_id, rebases)
    rebased = tuple(h for h in hotfixes if hotfixes[h] != state.hotfixes[h])
    method = "none" if not edits else "in-place" if series.in_place else "reverse" if series.reversed_any else "backups"
    after = TargetState(state.directory, dict(state.target), hotfixes)
    event = Event(outcome="rolled-back", hotfix=hotfix_id, version=recorded.version,
                  detail=f"re-derived without it: {', '.join(rebased)}" if rebased else "")
    return transaction.Change(plan, after, True, result=RollbackOutcome(recorded, plan, method, result_dry_run, rebased),
                              event=event)


def rollback(hotfix_id: str, root: Path, *, dry_run: bool, target=None) -> RollbackOutcome:
    """Take what ``hotfix_id`` changed under ``root`` out of the files and remove its record, all-or-nothing."""
    return transaction.run(root, lambda state, tree: rollback_change(state, tree, hotfix_id, root, dry_run, target),
                           dry_run=dry_run).result
