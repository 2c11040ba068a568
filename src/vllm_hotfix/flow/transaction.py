"""The one transaction runner: the only code that writes to a target.

lock -> recover a pending transaction -> plan (``prepare``; a dry run stops here) -> keep backups and
the patch bytes in the state dir -> journalled commit of the files AND the new record AND the history
line (``Change.event``) together -> post-checks, or undo (files, record, history) -> prune what no
record points at.

Catalog apply, ad-hoc and raw ``--patch`` applies, upgrades, rollback and recover all run through here,
so every write is recorded and every record describes files that were really written.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from vllm_hotfix_guard.core.hunk_apply import Plan
from vllm_hotfix_guard.errors import HotfixError, Refused, WriteFailed
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.output import note
from vllm_hotfix_guard.paths import TargetDir, make_state_dir
from vllm_hotfix_guard.txn.atomic import atomic_write, copy_new_file, fsync_dir, unlink_if_present
from vllm_hotfix.flow.plan import invert
from vllm_hotfix_guard.txn.fsops import (Interrupted, parallel, digests_remembered, hold_late_signals, late_signal,
                                   signals_as_exceptions)
from vllm_hotfix.txn import history
from vllm_hotfix.txn.journal import commit, nothing_changed
from vllm_hotfix.txn.recovery import RecoveryReport, recover, remove_stray_temps
from vllm_hotfix.txn.mutex import DEFAULT_TIMEOUT, target_mutex
from vllm_hotfix_guard.txn.state import TargetState
from vllm_hotfix_guard.txn.writable import state_dir_writable, target_writable

if TYPE_CHECKING:
    from vllm_hotfix.flow.history_line import Event


@dataclass
class Change:
    """What one transaction does to a target: the file edits and the record afterwards.

    ``keep``: files written into the state dir before the commit (backups, the exact patch bytes):
    relative path -> bytes, or the target-relative path of a file whose current bytes are the ones to
    keep (hard-linked). They are new names only, so a transaction that is undone leaves only orphans,
    which ``prune`` removes."""

    plan: Plan
    state: TargetState          # the record as it must be after the transaction
    record_changed: bool = True
    keep: dict[str, bytes | str] = field(default_factory=dict)
    result: object = None       # what the caller reports (a Proposal, a rollback summary, ...)
    event: Event | None = None  # what it does, for the target's history (None: nothing to log)
    steps: tuple = ()           # a group (flow/apply_group): (event, record after it, its plan, the files it
                                # was planned on) per member that logs a line; then ``event`` is unused


Prepare = Callable[[TargetState, Tree], Change]
AfterCheck = Callable[[Change], None]


def pending_note(root: Path) -> None:
    if TargetDir.of(root).pending():
        note(f"an interrupted apply on {root} was not recovered yet; the next hotfix command that writes will "
             f"undo it (or run `hotfix recover`); this dry run plans on the files as that leaves them")


def run(root: Path, prepare: Prepare, *, dry_run: bool, after: AfterCheck | None = None,
        lock_timeout: float | None = None) -> Change:
    """Plan with ``prepare`` and, unless ``dry_run``, carry the change out all-or-nothing (see module doc)."""
    with digests_remembered():  # the record (prepare) and the journal (commit) hash each content once
        return _run(Path(root), prepare, dry_run=dry_run, after=after, lock_timeout=lock_timeout)


def _prepare(prepare: Prepare, state: TargetState, tree: Tree) -> Change:
    """The plan and the record after it (a phase of its own: benchmarks/apply_large.py times it)."""
    return prepare(state, tree)


def _run(root: Path, prepare: Prepare, *, dry_run: bool, after: AfterCheck | None, lock_timeout: float | None
         ) -> Change:
    tdir = TargetDir.of(root)
    if dry_run:  # predicts the real run, refusals included; writes nothing
        pending_note(root)
        state_dir_writable(tdir.directory, create=False)
        change = _prepare(prepare, *_as_the_run_finds_it(tdir, root))
        if change.plan.edits:
            target_writable(root, _written_paths(change.plan))
        return change
    late = late_signal()
    if late is not None:  # a signal came after an earlier transaction of this command: start no other
        raise nothing_changed(Interrupted(late), str(root))
    hold_late_signals()  # after the commit point a signal changes nothing: the command ends with what it did
    state_dir_writable(tdir.directory)
    with target_mutex(tdir.directory, DEFAULT_TIMEOUT if lock_timeout is None else lock_timeout):
        recover_locked(root)
        before = TargetState.load(tdir.directory)
        tree = Tree(root)
        change = _prepare(prepare, before, tree)
        if not change.plan.edits and not change.record_changed:
            return change
        target_writable(root, _written_paths(change.plan))  # before any backup or journal is written
        logged = _history(tdir, root, change, tree)  # the history files with this change's line
        as_read = _record_bytes(tdir, before) if after is not None and change.record_changed else None  # for an undo
        unlogged = history.as_before(logged)
        current = str(tdir.directory)
        with signals_as_exceptions():  # SIGINT/SIGTERM anywhere below: undo, then one line
            try:
                current = _keep(tdir, root, change.keep)
                current = str(tdir.state_file)
                if not change.plan.edits and not logged:  # a record alone, nothing to log: one atomic write
                    atomic_write(tdir.state_file, change.state.to_bytes())
                else:  # files, record and history line: one journalled commit
                    record = (tdir.state_file, change.state.to_bytes()) if change.record_changed else None
                    kept = {what: os.path.join(tdir.directory, rel) for rel, what in change.keep.items()
                            if isinstance(what, str)}  # hard links of the originals: the journal's backups too
                    commit(root, change.plan, journal_dir=tdir.journal, tree=tree, state_record=record, kept=kept,
                           also=logged)
            except (OSError, Interrupted) as exc:
                before.prune()  # what _keep wrote for a transaction that did not happen
                raise nothing_changed(exc, current) from None
            except BaseException:
                before.prune()
                raise
            if after is not None:
                try:
                    _check_after(after, change)
                except (HotfixError, Interrupted) as failed:
                    undo_record = (tdir.state_file, as_read) if change.record_changed else None
                    commit(root, invert(change.plan), journal_dir=tdir.journal, state_record=undo_record,
                           also=unlogged)  # undone: the history as before, no line for what did not happen
                    before.prune()
                    if isinstance(failed, Interrupted):
                        raise nothing_changed(failed, str(root)) from None
                    if isinstance(failed, WriteFailed):  # the check could not run (disk full, read-only)
                        raise WriteFailed(f"post-apply check could not run, every file and the record were restored: "
                                          f"{failed.message}", hint=failed.hint) from None
                    raise Refused(f"post-apply check failed, every file and the record were restored: {failed.message}",
                                  hint=failed.hint) from None
        change.state.prune()
    return change


def _record_bytes(tdir: TargetDir, before: TargetState) -> bytes:
    """The record's bytes as they were (an undo puts them back byte for byte; ``to_bytes`` of what was read
    would write it anew, e.g. without a null field), else ``before`` written (there was no record)."""
    from vllm_hotfix_guard.paths import STATE_LIMIT, read_own_file

    data = read_own_file(tdir.state_file, limit=STATE_LIMIT, owned=True)
    return data if data is not None else before.to_bytes()


def _check_after(after: AfterCheck, change: Change) -> None:
    """The post-commit checks; once more when a signal came after the commit point while they ran (a
    Ctrl-C reaches the whole foreground group: a probe caught before it left it dies of it, and that
    failure says nothing of the files, which stand). Issue 45."""
    try:
        after(change)
    except HotfixError:
        if late_signal() is None:
            raise
        after(change)


def _history(tdir: TargetDir, root: Path, change: Change, tree: Tree) -> list[tuple[Path, bytes]]:
    """The target's history files with the line of ``change`` appended (nothing when it logs no event),
    or a group's lines, one per member, in order."""
    steps = change.steps or (((change.event, change.state, change.plan, tree),) if change.event is not None else ())
    if not steps:
        return []
    from vllm_hotfix.flow.history_line import entry

    return history.appended(tdir, *(entry(event, state, plan, files, str(root)) for event, state, plan, files in steps))


def _as_the_run_finds_it(tdir: TargetDir, root: Path) -> tuple[TargetState, Tree]:
    """The record and the files as the real run plans on them: after recovering a pending journal
    (txn/recovery.as_recovered, read only), so that a dry run after a kill -9 predicts the run."""
    state = TargetState.load(tdir.directory)
    if not tdir.pending():
        return state, Tree(root)
    from vllm_hotfix.txn.recovery import as_recovered
    from vllm_hotfix_guard.txn.state import parse_state

    records, tree = as_recovered(tdir.journal, root)
    for path, data in records.items():
        if os.path.realpath(path) == os.path.realpath(tdir.state_file):
            state = TargetState(tdir.directory, *parse_state(data, path)) if data is not None else TargetState(tdir.directory)
    return state, tree


def recover_locked(root: Path) -> RecoveryReport | None:
    """Undo an interrupted transaction of ``root`` (files and record), then drop orphans; lock held."""
    tdir = TargetDir.of(root)
    report = recover(tdir.journal, root)  # the journal must name this very target
    if report is not None:
        note(f"recovered an interrupted apply on {root}: {len(report.restored)} file(s) restored, "
             f"{len(report.removed)} created file(s) removed, record as before")
    if tdir.directory.is_dir():
        TargetState.load(tdir.directory).prune()
    return report


def recover_target(root: Path) -> RecoveryReport | None:
    """`hotfix recover`: take the lock, then ``recover_locked``; also remove stray temp files of ours
    beside the files the record names (left by an interrupted transaction of an older vllm-hotfix)."""
    tdir = TargetDir.of(root)
    if not tdir.directory.is_dir():
        return None
    state_dir_writable(tdir.directory)
    with target_mutex(tdir.directory, DEFAULT_TIMEOUT):
        report = recover_locked(root)
        recorded = [f.path for hotfix in TargetState.load(tdir.directory).hotfixes.values() for f in hotfix.files]
        temps = remove_stray_temps(root, recorded)
    if not temps:
        return report
    if report is None:
        return RecoveryReport(tdir.journal_file, Path(root), (), (), (), tuple(temps))
    return replace(report, temps=tuple(sorted(set(report.temps) | set(temps))))


def _written_paths(plan: Plan) -> list[str]:
    """Every target-relative path the plan creates, replaces or removes."""
    paths = [edit.path for edit in plan.edits]
    return paths + [edit.old_path for edit in plan.edits if edit.action == "rename" and edit.old_path]


def _keep(tdir: TargetDir, root: Path, keep: dict[str, bytes | str]) -> str:
    """Write backups and patch copies into the state dir (durable before the commit names them).

    A backup is a hard link of the original (the commit's os.replace leaves that inode alone), one
    link(2) per file on a new name; a name kept from an earlier apply is replaced atomically. The
    directories are made level by level and the files kept on threads: creating an inode is the
    slow part (~0.25 ms a directory here, 300 of them for the real 0.29 -> 0.30 diff)."""
    tdir.check(*sorted({os.path.dirname(rel) for rel in keep if os.path.dirname(rel)}))  # planted folders: exit 6
    items = [(os.path.join(tdir.directory, rel), what) for rel, what in keep.items()]
    parents = {os.path.dirname(dest) for dest, _ in items}
    missing: set[str] = set()
    for directory in parents:
        while directory not in missing and not os.path.isdir(directory):
            missing.add(directory)
            directory = os.path.dirname(directory)
    by_depth: dict[int, list[str]] = {}
    for directory in missing:
        by_depth.setdefault(directory.count(os.sep), []).append(directory)
    for depth in sorted(by_depth):
        parallel(_make_dir, sorted(by_depth[depth]))
    parallel(lambda item: _keep_one(root, *item), items)
    # the backups and the new directories' entries are durable before the journal names them
    parallel(fsync_dir, sorted(parents | {os.path.dirname(d) for d in missing}))
    return str(tdir.directory)


def _make_dir(directory: str) -> None:
    make_state_dir(directory)  # 0o755 whatever the umask: never a folder another user can plant files in


def _keep_one(root: Path, dest: str, what: bytes | str) -> None:
    if isinstance(what, bytes):
        atomic_write(Path(dest), what)
        return
    try:
        _link_or_copy(os.path.join(root, what), dest)
    except FileExistsError:
        temp = dest + ".hotfix-keep"
        unlink_if_present(temp)
        _link_or_copy(os.path.join(root, what), temp)
        os.replace(temp, dest)


def _link_or_copy(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            raise
        if os.path.lexists(dest):
            raise FileExistsError(errno.EEXIST, "exists", dest) from None
        copy_new_file(source, dest)
