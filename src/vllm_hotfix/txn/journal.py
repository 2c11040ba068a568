"""All-or-nothing commit of a Plan (recovery after kill -9 is txn/recovery.py).

Order of a commit (each step only after the previous one is durable):

1. check: every path is safe and every file still holds the bytes the plan was made from;
2. back up every original into ``journal_dir/backups`` (a hard link to the original inode, which
   ``os.replace`` leaves untouched; a copy across file systems), then write ``journal.json``;
3. write every new content to a temp file beside its target;
4. ``os.replace`` each temp over its target, unlink deleted files and renamed sources;
5. drop ``__pycache__/<module>.*.pyc`` of every touched ``.py``;
6. write the new record (``state.json`` of the target: what is applied, with which bytes), if given,
   and the state directory's other files of the change (``also``: history.jsonl with its new line);
7. fsync, then unlink ``journal.json``: this is the commit point.

The record is part of the transaction: its previous bytes (and the history's) are backed up with the
files, so a crash anywhere before the commit point gives back the old files AND the old record and
history, and after it all new.

While ``journal.json`` exists the target may be half-written; ``recover`` (and any failure or
SIGINT/SIGTERM inside ``commit``) puts every file back to its "before" bytes from the backups.
For power loss: the journal and backups are durable before the first rename; new contents are
fsynced before their rename and their directories after it, all before the journal goes away.
"""

from __future__ import annotations

import json
import os
import signal
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from vllm_hotfix_guard.core.hunk_apply import Plan
from vllm_hotfix_guard.errors import HotfixError, Refused, WriteFailed
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.output import quote_path
from vllm_hotfix_guard.paths import (
    JOURNAL_BACKUPS, RECORD_BACKUP, check_trusted, journal_backups_in, journal_file_in, make_state_dir)
from vllm_hotfix_guard.txn.atomic import UMASK, atomic_write, fsync_dir, temp_path_for, write_new_file
from vllm_hotfix_guard.txn.fsops import (
    Interrupted, link_backup, describe, discard_backups, drop_bytecode,
    file_sha256, parallel, remove_emptied_dirs, signals_blocked, committed, sha256_hex, signals_as_exceptions,
)
from vllm_hotfix.txn.recovery import SCHEMA, RecoveryReport, restore_journal
from vllm_hotfix_guard.txn.writable import WRITE_HINTS


@dataclass(frozen=True)
class FileOp:
    """What happens to one path: ``before`` None = did not exist, ``after`` None = removed."""

    path: str
    before: bytes | None
    after: bytes | None
    before_mode: int | None
    after_mode: int | None


def file_ops(plan: Plan, current_mode: dict[str, int]) -> list[FileOp]:
    """Flatten a plan into per-path operations (a rename is a removal plus a creation)."""
    created_mode = 0o666 & ~UMASK
    ops: dict[str, FileOp] = {}

    def add(op: FileOp) -> None:
        earlier = ops.get(op.path)
        if earlier is not None:  # e.g. "rename a -> b" and "create a" in one patch
            op = FileOp(op.path, earlier.before, op.after, earlier.before_mode, op.after_mode)
        ops[op.path] = op

    for edit in plan.edits:
        if edit.action == "rename":
            source_mode = current_mode[edit.old_path]
            new_mode = source_mode if edit.new_mode is None else edit.new_mode
            add(FileOp(edit.old_path, edit.before, None, source_mode, None))
            add(FileOp(edit.path, None, edit.after, None, new_mode))
            continue
        mode = current_mode.get(edit.path) if edit.before is not None else None
        after_mode = None
        if edit.after is not None:
            after_mode = edit.new_mode if edit.new_mode is not None else (created_mode if mode is None else mode)
        add(FileOp(edit.path, edit.before, edit.after, mode, after_mode))
    return list(ops.values())


def _check_current(fresh: Tree, planned: Tree, plan: Plan) -> tuple[dict[str, str], dict[str, int]]:
    """Step 1: refuse unsafe paths (checked afresh) and files that changed since ``planned`` read them."""
    paths: dict[str, str] = {}
    modes: dict[str, int] = {}
    for edit in plan.edits:
        expected = {edit.path: edit.before}
        if edit.action == "rename":
            expected = {edit.old_path: edit.before, edit.path: None}
        for rel, before in expected.items():
            path, info = fresh.checked_lstat(rel)  # one lstat: the link check and the "unchanged" proof
            paths[rel] = path
            if before is None:
                if info is not None:
                    raise Refused(f"{quote_path(rel)}: exists now but did not when the patch was planned (changed since planning)")
                continue
            if info is None:
                raise Refused(f"{quote_path(rel)}: missing now but existed when the patch was planned (changed since planning)")
            if not planned.unchanged_since_read(rel, info):
                now = fresh.read(rel)
                if now is None or now.data != before:
                    raise Refused(f"{quote_path(rel)}: changed since planning", hint="plan again (rerun the command)")
            modes[rel] = info.st_mode & 0o7777
    return paths, modes


def _missing_dirs(root: Path, paths: Iterable[str]) -> list[str]:
    """Parent directories to create, outermost first."""
    missing: list[str] = []
    known: set[str] = set()
    for path in paths:
        chain = []
        parent = os.path.dirname(path)
        while parent not in known and not os.path.isdir(parent):
            if os.path.lexists(parent):
                raise Refused(f"{os.path.relpath(parent, root)}: is not a directory")
            chain.append(parent)
            parent = os.path.dirname(parent)
        known.add(parent)
        for directory in reversed(chain):
            known.add(directory)
            missing.append(directory)
    return missing


def commit(root: Path, plan: Plan, *, journal_dir: Path, fsync: bool = True, tree: Tree | None = None,
           state_record: tuple[Path, bytes] | None = None, kept: dict[str, str] | None = None,
           also: Sequence[tuple[Path, bytes]] = ()) -> None:
    """Write ``plan`` under ``root`` all-or-nothing (see the module docstring). WriteFailed on OSError.

    ``tree``: the Tree the plan was read through, if at hand; files it read and that provably did not
    change since (same inode, size, mtime, ctime) are not read again.
    ``state_record``: (path, bytes) of the target's record, replaced inside the same transaction;
    ``also``: more (path, bytes) of the target's state folder replaced with it (its history files).
    ``kept``: target-relative path -> absolute path of a durable hard link of its original that the
    caller already made (the record's backups): the journal names it instead of linking its own, when
    it still is the very inode at the path (recovery runs before anything prunes those).
    """
    root = Path(root)
    journal_dir = Path(journal_dir)
    tree = tree if tree is not None else Tree(root)
    check_trusted(journal_dir, journal_backups_in(journal_dir))  # before anything in them is written or removed
    if (journal_file_in(journal_dir)).exists():
        raise Refused(f"{journal_file_in(journal_dir)}: an interrupted apply was not recovered",
                      hint=f"run `hotfix recover --root {root}`")
    paths, modes = _check_current(Tree(root), tree, plan)
    ops = file_ops(plan, modes)
    new_dirs = _missing_dirs(root, (paths[op.path] for op in ops if op.after is not None))
    tag = f"{os.getpid()}-{os.urandom(4).hex()}"
    record = {
        "schema": SCHEMA,
        "root": str(root.absolute()),
        "tag": tag,
        "created_dirs": [os.path.relpath(d, root) for d in new_dirs],
        "records": [],
        "files": [],
    }
    records = ([state_record] if state_record is not None else []) + list(also)
    at = _Progress()
    with signals_as_exceptions() as guard:
        try:
            _write_journal(ops, paths, record, journal_dir, records=records, kept=kept, fsync=fsync, at=at)
            _write_temps(ops, paths, new_dirs, root, tag, fsync=fsync, at=at)
            _switch(ops, paths, tag, at=at)
            at.current = "emptied directories"
            removed_dirs = remove_emptied_dirs(root, [paths[op.path] for op in ops if op.after is None])
            # step 5: no stale bytecode
            touched = [paths[op.path] for op in ops]
            at.current = "__pycache__"
            drop_bytecode(touched)
            # step 6: the record (and the history), inside the transaction
            for path, data in records:
                at.current = str(path)
                make_state_dir(path.parent)
                atomic_write(path, data)
            if fsync:
                at.current = "directories"
                _fsync_dirs({os.path.dirname(p) for p in touched + new_dirs + removed_dirs} - set(removed_dirs))
            # step 7: commit point
            at.current = str(journal_file_in(journal_dir))
            with signals_blocked():  # the commit point and the switch to "only noted" are one step
                os.unlink(journal_file_in(journal_dir))
                at.done = True
                committed(guard)  # from here a signal is only noted: it cannot undo a change that stands
            if fsync:
                fsync_dir(journal_dir)
            discard_backups(journal_dir)
        except BaseException as exc:
            if at.done:  # only the journal's directory fsync can fail here: the change is made and recorded
                discard_backups(journal_dir)
                return
            guard.armed = False
            report = restore_journal(record, journal_dir) if at.written_journal else None
            if not at.written_journal:
                discard_backups(journal_dir)
            if guard.pending and not isinstance(exc, Interrupted):
                exc = Interrupted(guard.pending)
            _raise_after_restore(exc, at.current, report, root)


class _Progress:
    """How far a commit got: what it was writing (for the one-line error), whether the journal is
    written (from then on a failure restores) and whether the commit point was passed."""

    __slots__ = ("current", "written_journal", "done")

    def __init__(self) -> None:
        self.current, self.written_journal, self.done = "", False, False


def _write_journal(ops: list[FileOp], paths: dict[str, str], record: dict, journal_dir: Path, *,
                   records: list[tuple[Path, bytes]], kept: dict[str, str] | None, fsync: bool,
                   at: _Progress) -> None:
    """Step 2: a backup of every original (the caller's durable hard link when it still is the inode at
    the path, else a link of our own), then ``journal.json`` naming them, durable."""
    backups = journal_backups_in(journal_dir)
    discard_backups(journal_dir)
    make_state_dir(backups)  # journal/ and journal/backups/ 0o755 whatever the umask, then checked
    check_trusted(journal_dir, backups)
    hashes = parallel(sha256_hex, [op.before for op in ops] + [op.after for op in ops])  # once: remembered
    for number, own in enumerate(records):  # the state folder's files of the change (record, history)
        at.current = str(own[0])
        record["records"].append(_back_up_record(own, backups, number))
    for index, op in enumerate(ops):
        at.current = op.path
        backup = None
        if op.before is not None:
            backup = kept.get(op.path) if kept else None
            if backup is None or not _same_inode(backup, paths[op.path]):
                backup = f"{JOURNAL_BACKUPS}/{index}"
                link_backup(paths[op.path], journal_dir / backup)
        record["files"].append({
            "path": op.path, "backup": backup,
            "before_sha256": hashes[index], "before_mode": op.before_mode,
            "after_sha256": hashes[len(ops) + index], "after_mode": op.after_mode,
        })
    at.current = str(journal_file_in(journal_dir))
    if fsync:
        fsync_dir(backups)
    at.written_journal = True  # from here on restore: atomic_write may fail after its rename
    atomic_write(journal_file_in(journal_dir), _journal_bytes(record))


def _write_temps(ops: list[FileOp], paths: dict[str, str], new_dirs: list[str], root: Path, tag: str, *,
                 fsync: bool, at: _Progress) -> None:
    """Step 3: the new directories, and every new content in a temp file beside its target (fsynced)."""
    for directory in new_dirs:
        at.current = os.path.relpath(directory, root)
        os.mkdir(directory)
    at.current = "new file contents"
    parallel(lambda op: _write_temp(paths[op.path], tag, op, fsync), [op for op in ops if op.after is not None])


def _switch(ops: list[FileOp], paths: dict[str, str], tag: str, *, at: _Progress) -> None:
    """Step 4: each temp renamed over its target; deleted files and renamed sources unlinked."""
    for op in ops:
        at.current = op.path
        if op.after is not None:
            os.replace(temp_path_for(paths[op.path], tag), paths[op.path])
        else:
            os.unlink(paths[op.path])


def _fsync_dirs(directories: set[str]) -> None:
    """The directories whose entries changed, durable (on threads) before the commit point."""
    parallel(fsync_dir, sorted(directories))


def _back_up_record(record: tuple[Path, bytes], backups: Path, number: int = 0) -> dict:
    """Keep a state file's current bytes (a hard link: atomic_write replaces, never edits) for a restore."""
    path, data = record
    entry = {"path": str(path), "backup": None, "before_sha256": file_sha256(path), "after_sha256": sha256_hex(data)}
    if entry["before_sha256"] is not None:
        name = RECORD_BACKUP if number == 0 else f"{RECORD_BACKUP}-{number}"
        link_backup(path, backups / name)
        entry["backup"] = f"{JOURNAL_BACKUPS}/{name}"
    return entry


def _journal_bytes(record: dict) -> bytes:
    """The journal as JSON with one file entry per line: readable by hand, and encoded by json's C
    encoder (``indent`` would switch to the pure-Python one, ~30x slower on a 1,000-file patch)."""
    head = json.dumps({k: v for k, v in record.items() if k != "files"})
    entries = ",\n".join(map(json.dumps, record["files"]))
    return f'{head[:-1]}, "files": [\n{entries}\n]}}\n'.encode()


def _same_inode(a: str, b: str) -> bool:
    try:
        first, second = os.lstat(a), os.lstat(b)
    except OSError:
        return False
    return (first.st_ino, first.st_dev) == (second.st_ino, second.st_dev) and stat.S_ISREG(first.st_mode)


def _write_temp(path: str, tag: str, op: FileOp, fsync: bool) -> None:
    try:
        write_new_file(temp_path_for(path, tag), op.after, op.after_mode, fsync=fsync)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, op.path) from None


def _raise_after_restore(exc: BaseException, current: str, report: RecoveryReport | None, root: Path) -> None:
    if report is not None and report.problems:
        raise WriteFailed(
            f"{current}: {describe(exc)}; restoring failed for {', '.join(report.problems)}",
            hint=f"run `hotfix recover --root {root}` once the cause is fixed",
        ) from exc
    if isinstance(exc, (Interrupted, OSError)):
        where = exc.filename if isinstance(exc, OSError) and isinstance(exc.filename, str) \
            and current == "new file contents" else current
        raise nothing_changed(exc, where) from None
    raise exc


def nothing_changed(exc: BaseException, where: str) -> HotfixError:
    """The one-line error for an OSError or a SIGINT/SIGTERM after which every file is as before."""
    if isinstance(exc, Interrupted):
        name = signal.Signals(exc.signum).name
        return HotfixError(f"interrupted by {name}; every file was restored, nothing was changed",
                           exit_code=128 + exc.signum)
    return WriteFailed(f"{where}: {describe(exc)}; every file was restored, nothing was changed",
                       hint=WRITE_HINTS.get(getattr(exc, "errno", None)))
