"""Recovery after kill -9 or power loss: put every file of a pending journal, and the record, back to
their state before the interrupted transaction. Idempotent, so itself crash-safe."""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

from vllm_hotfix_guard.core.data import load_json
from vllm_hotfix_guard.core.docfields import Fields, relpath_problem
from vllm_hotfix_guard.errors import HotfixError, InvalidInput, WriteFailed
from vllm_hotfix.install.tree import Tree
from vllm_hotfix_guard.output import quote_path
from vllm_hotfix_guard.paths import (
    JOURNAL_BACKUPS, RECORD_BACKUP, TargetDir, journal_backups_in,
    journal_file_in, owner_problem, trust_problem)
from vllm_hotfix_guard.txn.atomic import TEMP_SUFFIX, copy_new_file, fsync_dir, temp_path_for, unlink_if_present
from vllm_hotfix_guard.txn.fsops import (
    describe, discard_backups, drop_bytecode, file_sha256, signals_blocked,
)

SCHEMA = 2  # 2: "records", the state folder's files of the change (state.json, history); 1: "record" (read too)

@dataclass(frozen=True)
class RecoveryReport:
    """What recovering an interrupted transaction restored and removed."""

    journal: Path
    root: Path
    restored: tuple[str, ...]  # put back to their "before" bytes
    removed: tuple[str, ...]  # created by the interrupted apply, removed again
    problems: tuple[str, ...]  # paths that could not be restored (journal kept)
    temps: tuple[str, ...] = ()  # stray temp files of ours removed (beside the files the journal names)


def _restore_record(entry: dict, journal_dir: Path, tag: str) -> None:
    """Put the record back as it was before the transaction (idempotent)."""
    path = Path(entry["path"])
    if entry["backup"] is None:
        unlink_if_present(path)
        return
    if file_sha256(path) == entry["before_sha256"]:
        return
    backup = journal_dir / entry["backup"]
    if file_sha256(backup) != entry["before_sha256"]:
        raise OSError(errno.EIO, "the backup does not hold the bytes the journal names", str(backup))
    temp = temp_path_for(path, f"{tag}-restore")
    unlink_if_present(temp)
    copy_new_file(backup, temp)  # 0o644 whatever the umask
    os.replace(temp, path)
    fsync_dir(path.parent)


def _put_back(path: Path, backup: Path, entry: dict, tag: str, current_sha256: str | None) -> None:
    """Make ``path`` (now holding ``current_sha256``) the backed-up original again (same inode when the
    backup is a hard link)."""
    try:
        if os.path.samefile(path, backup):
            return
    except FileNotFoundError:
        pass
    if current_sha256 == entry["before_sha256"] and (os.stat(path).st_mode & 0o7777) == entry["before_mode"]:
        return
    info = os.lstat(backup)
    if not stat.S_ISREG(info.st_mode) or file_sha256(backup) != entry["before_sha256"]:
        raise OSError(errno.EIO, "the backup is not the original the journal names", str(backup))
    temp = temp_path_for(path, f"{tag}-restore")
    os.makedirs(os.path.dirname(temp), exist_ok=True)
    unlink_if_present(temp)
    linked = False
    if owner_problem(info) is None:  # ours (or root's): the original's very inode goes back
        try:
            os.link(backup, temp)
            linked = True
        except OSError:
            pass
    if not linked:  # a copy, never a link of a file another user owns into the target
        copy_new_file(backup, temp, entry["before_mode"] & 0o777)
    os.chmod(temp, entry["before_mode"])
    os.replace(temp, path)


def restore_journal(record: dict, journal_dir: Path) -> RecoveryReport:
    """Put every file of a journal back to its "before" state. Idempotent, so itself crash-safe."""
    root = Path(record["root"])
    tag = record["tag"]
    restored: list[str] = []
    removed: list[str] = []
    problems: list[str] = []
    touched: list[Path] = []
    for entry in reversed(record["files"]):
        rel = entry["path"]
        path = root / rel
        touched.append(path)
        try:
            if entry["before_sha256"] is None:
                if os.path.lexists(path):
                    os.unlink(path)
                    removed.append(rel)
            else:
                backup = journal_dir / entry["backup"] if entry["backup"] else None
                if backup is not None and os.path.exists(backup):
                    current_sha256 = file_sha256(path)
                    if current_sha256 != entry["before_sha256"]:
                        restored.append(rel)
                    _put_back(path, backup, entry, tag, current_sha256)
                elif file_sha256(path) != entry["before_sha256"]:
                    problems.append(f"{quote_path(rel)} (no backup)")
            for temp in (temp_path_for(path, tag), temp_path_for(path, f"{tag}-restore")):
                unlink_if_present(temp)
        except OSError as exc:
            problems.append(f"{quote_path(rel)} ({describe(exc)})")
    for rel in reversed(record.get("created_dirs", [])):
        try:
            os.rmdir(root / rel)
        except OSError:
            pass
    for own in _records(record):
        try:
            _restore_record(own, journal_dir, tag)
        except OSError as exc:
            problems.append(f"{own['path']} ({describe(exc)})")
    try:
        try:
            drop_bytecode(touched)
        except OSError as exc:  # a read-only target this pass did not change: its bytecode is its own
            if exc.errno != errno.EROFS or restored or removed:
                raise
        for directory in {p.parent for p in touched if p.parent.is_dir()}:
            fsync_dir(directory)
        if not problems:
            (journal_file_in(journal_dir)).unlink(missing_ok=True)
            fsync_dir(journal_dir)
            discard_backups(journal_dir)
    except OSError as exc:
        problems.append(f"cleanup ({describe(exc)})")
    return RecoveryReport(journal_file_in(journal_dir), root, tuple(restored), tuple(removed), tuple(problems))


TAG = re.compile(r"[0-9]{1,10}-[0-9a-f]{8}")


def _records(journal: dict) -> list[dict]:
    """The state folder's files a journal restores: schema 2's "records", schema 1's one "record"."""
    if "records" in journal:
        return list(journal["records"])
    return [journal["record"]] if journal.get("record") else []


def read_journal(journal_dir: Path, root: Path | str | None = None) -> dict:
    """journal.json of ``journal_dir``, read as input and validated (the one reader of the format;
    ``txn.journal.commit`` is its one writer): its root must be ``root`` (the target whose state folder
    holds it, when the caller knows it), every path it names is confined (files relative to that root,
    backups inside this journal or the target's kept originals beside it, the record the state.json beside
    it). InvalidInput (exit 8) names the key path of the first problem; such a journal steers no write."""
    from vllm_hotfix_guard.paths import JOURNAL_LIMIT, read_own_file

    journal_dir = Path(journal_dir)
    path = journal_file_in(journal_dir)
    hint = "restore the files listed in it by hand from its backups/, then remove it"
    try:
        data = read_own_file(path, limit=JOURNAL_LIMIT, owned=True)
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read the journal: {exc.strerror}", hint=hint) from None
    if data is None:
        raise InvalidInput(f"{path}: no journal", hint=hint)
    f = Fields(str(path))
    doc = f.mapping(load_json(data, str(path)), "")
    if f.get(doc, "", "schema", int) not in (1, SCHEMA):
        raise f.fail("schema", f"unsupported journal schema {doc.get('schema')!r} (this vllm-hotfix writes {SCHEMA})")
    named = f.text(doc, "", "root")
    state_dir = journal_dir.parent
    if not os.path.isabs(named) or (root is not None and os.path.realpath(named) != os.path.realpath(root)):
        raise f.fail("root", f"{named!r} is not the target {root} whose state folder holds this journal")
    tag = f.text(doc, "", "tag")
    if not TAG.fullmatch(tag):
        raise f.fail("tag", f"expected PID-HEX, got {tag!r}")
    for index, directory in enumerate(f.items(doc.get("created_dirs", []), "created_dirs")):
        problem = relpath_problem(directory) if isinstance(directory, str) else "not a string"
        if problem:
            raise f.fail(f"created_dirs[{index}]", f"unsafe path {directory!r} ({problem})")
    kept_dir = os.path.realpath(TargetDir(state_dir).backups)

    def backup(entry: dict, where: str) -> None:
        value = f.text(entry, where, "backup", required=False)
        if value is None:
            return
        if os.path.isabs(value):
            real = os.path.realpath(value)
            if os.path.commonpath([real, kept_dir]) != kept_dir or ".." in value.split("/"):
                raise f.fail(f.at(where, "backup"), f"{value!r} is outside this target's kept originals")
        elif not re.fullmatch(rf"{JOURNAL_BACKUPS}/[0-9]+|{JOURNAL_BACKUPS}/{RECORD_BACKUP}(-[0-9]{{1,3}})?", value):
            raise f.fail(f.at(where, "backup"), f"expected {JOURNAL_BACKUPS}/N, got {value!r}")

    if doc["schema"] == 1:
        named_records = [("record", doc["record"])] if doc.get("record") is not None else []
    else:
        named_records = [(f"records[{i}]", r) for i, r in enumerate(f.items(f.get(doc, "", "records", list), "records"))]
    own_files = {os.path.realpath(path): path.name for path in TargetDir(state_dir).own_files}
    for where, record in named_records:
        record = f.mapping(record, where)
        if os.path.realpath(f.text(record, where, "path")) not in own_files:
            raise f.fail(f.at(where, "path"), f"{record['path']!r} is not this target's {' or '.join(own_files.values())}")
        backup(record, where)
        f.sha256(record, where, "before_sha256", required=False)
        f.sha256(record, where, "after_sha256", required=False)
    for index, entry in enumerate(f.items(f.get(doc, "", "files", list), "files")):
        where = f"files[{index}]"
        entry = f.mapping(entry, where)
        f.relpath(entry, where, "path")
        backup(entry, where)
        for key in ("before_sha256", "after_sha256"):
            f.sha256(entry, where, key, required=False)
        for key in ("before_mode", "after_mode"):
            mode = f.get(entry, where, key, int, required=False)
            if mode is not None and not 0 <= mode <= 0o7777:
                raise f.fail(f.at(where, key), f"not a file mode: {mode}")
        if entry.get("before_sha256") is not None and entry.get("before_mode") is None:
            raise f.fail(f.at(where, "before_mode"), "missing")
    return doc


def journal_root(journal_dir: Path) -> str | None:
    """The target root a pending journal names (validated), None when it cannot be read or trusted (gc)."""
    try:
        check_untrusted_journal(Path(journal_dir))
        return read_journal(journal_dir)["root"]
    except (InvalidInput, WriteFailed):
        return None


def _remove_stray_temps(journal_dir: Path) -> None:
    for name in os.listdir(journal_dir):
        if name.endswith(TEMP_SUFFIX):
            (journal_dir / name).unlink(missing_ok=True)


def check_untrusted_journal(journal_dir: Path) -> None:
    """WriteFailed (exit 6) when the journal's folder, its backups or journal.json itself could have been
    written by another user (``paths.trust_problem`` / ``paths.owner_problem``, the state tree's one trust
    rule): interrupted work found there is reported, never replayed (it would put that user's bytes into
    the target and delete what the journal names)."""
    from vllm_hotfix_guard.errors import WriteFailed

    journal = journal_file_in(journal_dir)
    found = [(d, trust_problem(d)) for d in (journal_dir, journal_backups_in(journal_dir))]
    try:
        found.append((journal, owner_problem(os.lstat(journal))))
    except FileNotFoundError:
        pass
    for where, problem in found:
        if problem is not None:
            what = "an interrupted transaction" if os.path.lexists(journal) else "what it holds"
            raise WriteFailed(f"{where}: {problem}; {what} was not replayed: another user could have written it",
                              hint=f"inspect {journal_dir} (who wrote it?), restore the files by hand if the "
                                   f"transaction was yours, then remove it (docs/trust.md: Trust model)")


class RecoveredTree(Tree):
    """The target as recovering its pending journal would leave it, read only (what a dry run plans on, so
    that it predicts the real run, which recovers first): each file the journal names reads as its
    backup's bytes, or as absent when the interrupted transaction created it."""

    recovered = True

    def __init__(self, root: Path, files: dict):
        super().__init__(root)
        self._files = files

    def read(self, relpath: str):
        return self._files[relpath] if relpath in self._files else super().read(relpath)


def as_recovered(journal_dir: Path, root: Path) -> tuple[dict[str, bytes | None], RecoveredTree]:
    """What ``recover`` would put back, read only: {each state-folder file the journal restores: its bytes
    before (None: no file)} and the tree. The same refusals as ``recover``: an untrusted journal (exit 6),
    an invalid one (8), a backup that does not hold what the journal names (6)."""
    from vllm_hotfix_guard.core.hunk_apply import FileState

    check_untrusted_journal(journal_dir)
    record = read_journal(journal_dir, root)
    files: dict = {}
    for entry in record["files"]:
        if entry.get("before_sha256") is None:
            files[entry["path"]] = None
        else:
            data = _before_bytes(journal_dir, entry, Path(root) / entry["path"])
            files[entry["path"]] = FileState(data, entry["before_mode"])
    records = {own["path"]: _before_bytes(journal_dir, own, Path(own["path"])) if own.get("before_sha256") else None
               for own in _records(record)}
    return records, RecoveredTree(Path(root), files)


def _before_bytes(journal_dir: Path, entry: dict, current: Path) -> bytes:
    """The bytes ``entry`` names as before: its backup's, or the file's own when it still holds them."""
    import hashlib

    from vllm_hotfix_guard.inputs import TARGET_FILE_LIMIT, read_bounded

    for candidate in ([journal_dir / entry["backup"]] if entry.get("backup") else []) + [current]:
        try:
            data = read_bounded(candidate, cap=TARGET_FILE_LIMIT, what="file", follow_symlinks=False)
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() == entry["before_sha256"]:
            return data
    raise WriteFailed(f"{journal_file_in(journal_dir)}: could not restore {quote_path(str(current))} (no backup holds "
                      "the bytes the journal names)", hint="`hotfix recover` says the same; restore it by hand")


def recover(journal_dir: Path, root: Path | str | None = None) -> RecoveryReport | None:
    """After a kill -9: put the target back to its state before the interrupted apply.

    Returns None when there was nothing to recover (leftover backups of an apply that had reached its
    commit point are removed silently).
    """
    journal_dir = Path(journal_dir)
    if not journal_dir.is_dir():
        return None
    journal = journal_file_in(journal_dir)
    check_untrusted_journal(journal_dir)
    _remove_stray_temps(journal_dir)
    if not journal.exists():
        discard_backups(journal_dir)
        return None
    record = read_journal(journal_dir, root)
    with signals_blocked():
        report = restore_journal(record, journal_dir)
    if report.problems:
        raise WriteFailed(f"{journal}: could not restore {', '.join(report.problems)}",
                          hint="fix the cause (read-only or full file system?) and run `hotfix recover` again")
    paths = [entry["path"] for entry in record["files"] if isinstance(entry.get("path"), str)]
    return replace(report, temps=tuple(remove_stray_temps(report.root, paths)))


# What commit and recovery name their temp files: '.<name>.<pid>-<8 hex>.hotfix-tmp' (the journal's tag)
# and '.<name>.<pid>-<8 hex>-restore.hotfix-tmp' (txn.atomic.temp_path_for).
_OUR_TEMP = re.compile(r"\.(?P<name>.+)\.[0-9]+-[0-9a-f]{8}(?:-restore)?" + re.escape(TEMP_SUFFIX) + r"\Z", re.DOTALL)


def remove_stray_temps(root: Path, paths: Iterable[str]) -> list[str]:
    """Remove temp files a commit or a restore left beside the files ``paths`` names (an interrupted
    transaction, or an older vllm-hotfix), whatever pid and tag they carry. Only what is certainly ours
    goes: a regular file (not followed if a symlink) in the directory of a named file, under the root
    and reached through no symlink (Tree's checks), whose name is exactly our pattern for that very
    file's name. Returns the root-relative paths removed."""
    tree = Tree(root)
    wanted: dict[str, set[str]] = {}
    for rel in paths:
        try:
            full = tree.checked_path(rel)
        except HotfixError:  # a path no transaction of ours could have written: nothing of ours beside it
            continue
        wanted.setdefault(os.path.dirname(full), set()).add(os.path.basename(full))
    removed = []
    for directory, names in wanted.items():
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            found = _OUR_TEMP.match(entry.name)
            if found and found.group("name") in names and entry.is_file(follow_symlinks=False):
                try:
                    unlink_if_present(entry.path)
                except OSError:
                    continue
                removed.append(os.path.relpath(entry.path, root))
    return sorted(removed)
