"""All-or-nothing commit of a Plan, and recovery after kill -9.

Order of a commit (each step only after the previous one is durable):

1. check: every path is safe and every file still holds the bytes the plan was made from;
2. back up every original into ``journal_dir/backups`` (a hard link to the original inode, which
   ``os.replace`` leaves untouched; a copy across file systems), then write ``journal.json``;
3. write every new content to a temp file beside its target;
4. ``os.replace`` each temp over its target, unlink deleted files and renamed sources;
5. drop ``__pycache__/<module>.*.pyc`` of every touched ``.py``;
6. fsync, then unlink ``journal.json``: this is the commit point.

While ``journal.json`` exists the target may be half-written; ``recover`` (and any failure or
SIGINT/SIGTERM inside ``commit``) puts every file back to its "before" bytes from the backups.
Per-file fsync of new contents is not needed for that guarantee: the journal and backups are made
durable before the first rename, and everything is synced before the journal goes away.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from vllm_hotfix.errors import HotfixError, InvalidInput, Refused, WriteFailed
from vllm_hotfix.target.tree import Tree
from vllm_hotfix.txn.atomic import TEMP_SUFFIX, atomic_write, fsync_dir, temp_path_for, write_new_file

if TYPE_CHECKING:
    from vllm_hotfix.core.apply import Plan

JOURNAL = "journal.json"
BACKUPS = "backups"
SCHEMA = 1


@dataclass(frozen=True)
class FileOp:
    """What happens to one path: ``before`` None = did not exist, ``after`` None = removed."""

    path: str
    before: bytes | None
    after: bytes | None
    before_mode: int | None
    after_mode: int | None


@dataclass(frozen=True)
class RecoveryReport:
    journal: Path
    root: Path
    restored: tuple[str, ...]  # put back to their "before" bytes
    removed: tuple[str, ...]  # created by the interrupted apply, removed again
    problems: tuple[str, ...]  # paths that could not be restored (journal kept)


def _sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def _with_mode_change(mode: int, new_mode: int | None) -> int:
    """Apply a git mode (0o100755 / 0o100644) to real permission bits the way git does: only the x bits."""
    if new_mode is None:
        return mode
    if new_mode & 0o111:
        return mode | ((mode & 0o444) >> 2)
    return mode & ~0o111


def file_ops(plan: Plan, current_mode: dict[str, int]) -> list[FileOp]:
    """Flatten a plan into per-path operations (a rename is a removal plus a creation)."""
    created_mode = 0o666 & ~_umask()
    ops: dict[str, FileOp] = {}

    def add(op: FileOp) -> None:
        earlier = ops.get(op.path)
        if earlier is not None:  # e.g. "rename a -> b" and "create a" in one patch
            op = FileOp(op.path, earlier.before, op.after, earlier.before_mode, op.after_mode)
        ops[op.path] = op

    for edit in plan.edits:
        if edit.action == "rename":
            source_mode = current_mode.get(edit.old_path, created_mode)
            add(FileOp(edit.old_path, edit.before, None, source_mode, None))
            add(FileOp(edit.path, None, edit.after, None, _with_mode_change(source_mode, edit.new_mode)))
            continue
        mode = current_mode.get(edit.path) if edit.before is not None else None
        if edit.after is None:
            after_mode = None
        elif mode is None:
            after_mode = _with_mode_change(created_mode, edit.new_mode)
        else:
            after_mode = _with_mode_change(mode, edit.new_mode if edit.new_mode != edit.old_mode else None)
        add(FileOp(edit.path, edit.before, edit.after, mode, after_mode))
    return list(ops.values())


def _plan_paths(plan: Plan) -> Iterable[str]:
    for edit in plan.edits:
        if edit.old_path and edit.action == "rename":
            yield edit.old_path
        yield edit.path


def _check_current(tree: Tree, plan: Plan) -> tuple[dict[str, Path], dict[str, int]]:
    """Step 1: refuse unsafe paths and files that changed since the plan was made."""
    paths: dict[str, Path] = {}
    modes: dict[str, int] = {}
    for edit in plan.edits:
        expected = {edit.path: edit.before}
        if edit.action == "rename":
            expected = {edit.old_path: edit.before, edit.path: None}
        for rel, before in expected.items():
            path = tree.path(rel)
            paths[rel] = path
            try:
                info = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                info = None
            if info is not None and os.path.islink(path):
                raise Refused(f"{rel}: is a symlink; hotfix replaces regular files only")
            if before is None:
                if info is not None:
                    raise Refused(f"{rel}: exists now but did not when the patch was planned (changed since planning)")
                continue
            if info is None:
                raise Refused(f"{rel}: missing now but existed when the patch was planned (changed since planning)")
            with open(path, "rb") as fh:
                if fh.read() != before:
                    raise Refused(f"{rel}: changed since planning", hint="plan again (rerun the command)")
            modes[rel] = info.st_mode & 0o7777
    return paths, modes


def _missing_dirs(root: Path, paths: Iterable[Path]) -> list[Path]:
    """Parent directories to create, outermost first."""
    missing: list[Path] = []
    seen: set[Path] = set()
    for path in paths:
        chain = []
        parent = path.parent
        while parent not in seen and not parent.is_dir():
            if parent.exists() or os.path.islink(parent):
                raise Refused(f"{parent.relative_to(root)}: is not a directory")
            chain.append(parent)
            parent = parent.parent
        for directory in reversed(chain):
            seen.add(directory)
            missing.append(directory)
    return missing


def _fsync_paths(paths: Iterable[Path]) -> None:
    """fsync many files or directories; fsync releases the GIL, so a few threads overlap the waits."""
    paths = list(paths)

    def one(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    if len(paths) < 8:
        for path in paths:
            one(path)
        return
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, paths))


def _drop_bytecode(paths: Iterable[Path]) -> None:
    """Remove ``__pycache__/<stem>.*.pyc`` of each ``.py`` so no stale bytecode can run."""
    by_cache_dir: dict[Path, set[str]] = {}
    for path in paths:
        if path.suffix == ".py":
            by_cache_dir.setdefault(path.parent / "__pycache__", set()).add(path.stem + ".")
    for cache_dir, prefixes in by_cache_dir.items():
        try:
            names = os.listdir(cache_dir)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            if name.endswith(".pyc") and name[: name.index(".") + 1] in prefixes:
                (cache_dir / name).unlink(missing_ok=True)


class _Interrupted(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _signals_as_exceptions() -> Iterator[None]:
    """Turn SIGINT/SIGTERM into an exception so the commit can restore before exiting."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def _signals_blocked() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _backup(original: Path, backup: Path) -> None:
    try:
        os.link(original, backup)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            raise
        shutil.copyfile(original, backup)


def commit(root: Path, plan: Plan, *, journal_dir: Path, fsync: bool = True) -> None:
    """Write ``plan`` under ``root`` all-or-nothing (see the module docstring). WriteFailed on OSError."""
    root = Path(root)
    journal_dir = Path(journal_dir)
    tree = Tree(root)
    if (journal_dir / JOURNAL).exists():
        raise Refused(f"{journal_dir / JOURNAL}: an interrupted apply was not recovered",
                      hint=f"run `hotfix recover --root {root}`")
    paths, modes = _check_current(tree, plan)
    ops = file_ops(plan, modes)
    new_dirs = _missing_dirs(root, (paths[op.path] for op in ops if op.after is not None))
    tag = f"{os.getpid()}-{os.urandom(4).hex()}"
    record = {
        "schema": SCHEMA,
        "root": str(root.absolute()),
        "tag": tag,
        "created_dirs": [str(d.relative_to(root)) for d in new_dirs],
        "files": [],
    }
    written_journal = False
    current = ""
    try:
        with _signals_as_exceptions():
            # step 2: backups, then the journal naming them
            backups = journal_dir / BACKUPS
            shutil.rmtree(backups, ignore_errors=True)
            backups.mkdir(parents=True)
            for index, op in enumerate(ops):
                current = op.path
                backup = None
                if op.before is not None:
                    backup = f"{BACKUPS}/{index}"
                    _backup(paths[op.path], journal_dir / backup)
                record["files"].append({
                    "path": op.path, "backup": backup,
                    "before_sha256": _sha256(op.before), "before_mode": op.before_mode,
                    "after_sha256": _sha256(op.after), "after_mode": op.after_mode,
                })
            current = str(journal_dir / JOURNAL)
            if fsync:
                fsync_dir(backups)
            atomic_write(journal_dir / JOURNAL, json.dumps(record, indent=1).encode())
            written_journal = True
            # step 3: new contents beside their targets
            for directory in new_dirs:
                current = str(directory.relative_to(root))
                directory.mkdir()
            temps = []
            for op in ops:
                if op.after is not None:
                    current = op.path
                    temp = temp_path_for(paths[op.path], tag)
                    write_new_file(temp, op.after, op.after_mode, fsync=False)
                    temps.append(temp)
            if fsync:
                current = "new file contents"
                _fsync_paths(temps)
            # step 4: the switch
            for op in ops:
                current = op.path
                if op.after is not None:
                    os.replace(temp_path_for(paths[op.path], tag), paths[op.path])
                else:
                    os.unlink(paths[op.path])
            # step 5
            touched = [paths[op.path] for op in ops]
            current = "__pycache__"
            _drop_bytecode(touched)
            if fsync:
                current = "directories"
                _fsync_paths({p.parent for p in touched} | {d.parent for d in new_dirs})
            # step 6: commit point
            current = str(journal_dir / JOURNAL)
            os.unlink(journal_dir / JOURNAL)
            if fsync:
                fsync_dir(journal_dir)
        shutil.rmtree(journal_dir / BACKUPS, ignore_errors=True)
    except BaseException as exc:
        with _signals_blocked():
            report = _restore(record, journal_dir) if written_journal else None
            if not written_journal:
                shutil.rmtree(journal_dir / BACKUPS, ignore_errors=True)
        _raise_after_restore(exc, current, report, root)


def _raise_after_restore(exc: BaseException, current: str, report: RecoveryReport | None, root: Path) -> None:
    if report is not None and report.problems:
        raise WriteFailed(
            f"{current}: {_describe(exc)}; restoring failed for {', '.join(report.problems)}",
            hint=f"run `hotfix recover --root {root}` once the cause is fixed",
        ) from exc
    if isinstance(exc, _Interrupted):
        name = signal.Signals(exc.signum).name
        raise HotfixError(f"interrupted by {name}; every file was restored, nothing was changed",
                          exit_code=128 + exc.signum) from None
    if isinstance(exc, OSError):
        raise WriteFailed(f"{current}: {_describe(exc)}; every file was restored, nothing was changed") from None
    raise exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        name = errno.errorcode.get(exc.errno or 0, "")
        return f"{exc.strerror} ({name})" if name else exc.strerror
    return f"{type(exc).__name__}: {exc}"


def _file_sha256(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _put_back(path: Path, backup: Path, entry: dict, tag: str) -> None:
    """Make ``path`` the backed-up original again (same inode when the backup is a hard link)."""
    try:
        if os.path.samefile(path, backup):
            return
    except FileNotFoundError:
        pass
    if _file_sha256(path) == entry["before_sha256"] and (os.stat(path).st_mode & 0o7777) == entry["before_mode"]:
        return
    temp = temp_path_for(path, f"{tag}-restore")
    temp.unlink(missing_ok=True)
    try:
        os.link(backup, temp)
    except OSError:
        shutil.copyfile(backup, temp)
    os.chmod(temp, entry["before_mode"])
    os.replace(temp, path)


def _restore(record: dict, journal_dir: Path) -> RecoveryReport:
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
                    if _file_sha256(path) != entry["before_sha256"]:
                        restored.append(rel)
                    _put_back(path, backup, entry, tag)
                elif _file_sha256(path) != entry["before_sha256"]:
                    problems.append(f"{rel} (no backup)")
            for temp in (temp_path_for(path, tag), temp_path_for(path, f"{tag}-restore")):
                temp.unlink(missing_ok=True)
        except OSError as exc:
            problems.append(f"{rel} ({_describe(exc)})")
    for rel in reversed(record.get("created_dirs", [])):
        try:
            os.rmdir(root / rel)
        except OSError:
            pass
    try:
        _drop_bytecode(touched)
        for directory in {p.parent for p in touched if p.parent.is_dir()}:
            fsync_dir(directory)
        if not problems:
            (journal_dir / JOURNAL).unlink(missing_ok=True)
            fsync_dir(journal_dir)
            shutil.rmtree(journal_dir / BACKUPS, ignore_errors=True)
    except OSError as exc:
        problems.append(f"cleanup ({_describe(exc)})")
    return RecoveryReport(journal_dir / JOURNAL, root, tuple(restored), tuple(removed), tuple(problems))


def _remove_stray_temps(journal_dir: Path) -> None:
    for name in os.listdir(journal_dir):
        if name.endswith(TEMP_SUFFIX):
            (journal_dir / name).unlink(missing_ok=True)


def recover(journal_dir: Path) -> RecoveryReport | None:
    """After a kill -9: put the target back to its state before the interrupted apply.

    Returns None when there was nothing to recover (leftover backups of an apply that had reached its
    commit point are removed silently).
    """
    journal_dir = Path(journal_dir)
    if not journal_dir.is_dir():
        return None
    _remove_stray_temps(journal_dir)
    journal = journal_dir / JOURNAL
    if not journal.exists():
        shutil.rmtree(journal_dir / BACKUPS, ignore_errors=True)
        return None
    try:
        record = json.loads(journal.read_bytes())
        if record.get("schema") != SCHEMA:
            raise ValueError(f"schema {record.get('schema')!r}")
    except (ValueError, KeyError) as exc:
        raise InvalidInput(f"{journal}: unreadable journal ({exc})",
                           hint="restore the files listed in it by hand from its backups/") from None
    with _signals_blocked():
        return _restore(record, journal_dir)
