"""File-system and signal helpers of the transaction: threads for file work, backups as hard links,
bytecode dropping, and SIGINT/SIGTERM turned into an exception while files are switched."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from vllm_hotfix.paths import JOURNAL_NAME
from vllm_hotfix.txn.atomic import unlink_if_present
from vllm_hotfix.txn.writable import describe

JOURNAL = JOURNAL_NAME  # the name is defined once, in paths
BACKUPS = "backups"
RECORD_BACKUP = "record"

def _sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


PARALLEL_MIN = 8


WORKERS = 4  # measured best for creating + fsyncing ~1,000 files on 2 cores


def _parallel(function, items: list) -> list:
    """``map`` over threads for file system work (open/write/fsync/hash/unlink release the GIL).

    Plain threads rather than concurrent.futures: that import (with logging) costs ~8 ms per run.
    Every thread is joined before anything is raised, even a signal turned into an exception, so no
    worker still writes while the caller restores.
    """
    if len(items) < PARALLEL_MIN:
        return [function(item) for item in items]
    chunks = [items[start::WORKERS] for start in range(WORKERS)]
    done: list = [None] * WORKERS
    errors: list = [None] * WORKERS

    def work(index: int) -> None:
        try:
            done[index] = [function(item) for item in chunks[index]]
        except BaseException as exc:  # handed to the caller below
            errors[index] = exc

    threads = [threading.Thread(target=work, args=(index,), daemon=True) for index in range(WORKERS)]
    pending: BaseException | None = None
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            try:
                thread.join()
            except BaseException as exc:  # a signal: remember it, keep waiting for the workers
                pending = pending or exc
    failure = pending or next((exc for exc in errors if exc is not None), None)
    if failure is not None:
        raise failure
    results = [None] * len(items)
    for start, chunk in enumerate(done):
        results[start::WORKERS] = chunk
    return results


def _discard_backups(journal_dir: Path) -> None:
    """Remove the backups directory; its files are unlinked on threads (freeing the replaced
    originals' blocks is the slow part, ~60 µs a file)."""
    backups = journal_dir / BACKUPS
    try:
        names = os.listdir(backups)
    except OSError:
        names = []
    try:
        _parallel(unlink_if_present, [os.path.join(backups, name) for name in names])
    except OSError:
        pass
    shutil.rmtree(backups, ignore_errors=True)


def _drop_bytecode(paths: Iterable[str]) -> None:
    """Remove ``__pycache__/<stem>.*.pyc`` of each ``.py`` so no stale bytecode can run."""
    by_cache_dir: dict[str, set[str]] = {}
    for path in paths:
        directory, name = os.path.split(path)
        if name.endswith(".py"):
            by_cache_dir.setdefault(os.path.join(directory, "__pycache__"), set()).add(name[:-2])
    for cache_dir, prefixes in by_cache_dir.items():
        try:
            names = os.listdir(cache_dir)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            if name.endswith(".pyc") and name[: name.index(".") + 1] in prefixes:
                unlink_if_present(os.path.join(cache_dir, name))


class Interrupted(BaseException):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class _SignalGuard:
    """While armed, SIGINT/SIGTERM raise ``Interrupted``; once disarmed (restoring) they are only noted."""

    def __init__(self) -> None:
        self.armed = True
        self.pending: int | None = None

    def handler(self, signum, frame) -> None:
        if self.armed:
            raise Interrupted(signum)
        self.pending = self.pending or signum


@contextmanager
def signals_as_exceptions() -> Iterator[_SignalGuard]:
    """Turn SIGINT/SIGTERM into an exception so the commit can restore before exiting."""
    guard = _SignalGuard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {sig: signal.signal(sig, guard.handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield guard
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


def _remove_emptied_dirs(root: Path, deleted: list[str]) -> list[str]:
    """Remove directories left empty by deleted files, as git apply does (recovery recreates them)."""
    stop = os.path.abspath(root)
    removed = []
    for directory in sorted({os.path.dirname(p) for p in deleted}, key=len, reverse=True):
        while os.path.abspath(directory) != stop:
            try:
                os.rmdir(directory)
            except OSError:
                break
            removed.append(directory)
            directory = os.path.dirname(directory)
    return removed


_describe = describe


def _file_sha256(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        return None
