"""File-system and signal helpers of the transaction: threads for file work, backups as hard links,
bytecode dropping, and SIGINT/SIGTERM turned into an exception while files are switched."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from vllm_hotfix_guard.inputs import TARGET_FILE_LIMIT as BACKUP_CAP, Unfit, file_sha256 as hash_file
from vllm_hotfix_guard.output import note
from vllm_hotfix_guard.paths import journal_backups_in
from vllm_hotfix_guard.txn.atomic import copy_new_file, unlink_if_present
from vllm_hotfix_guard.txn.writable import describe

_remembered: dict[int, tuple[bytes, str]] | None = None  # inside ``digests_remembered``: id -> (data, hex)


def sha256_hex(data: bytes | None) -> str | None:
    """Hex sha256 of ``data`` (None for None). Inside ``digests_remembered()`` each content object is
    hashed once: the record (flow) and the journal (commit) name the sha256 of the same before / after
    bytes of a transaction, and hashing 1,106 files twice cost ~60 ms of CPU."""
    if data is None:
        return None
    memo = _remembered
    if memo is not None:
        hit = memo.get(id(data))
        if hit is not None and hit[0] is data:  # the very object (an id is reused only after it is freed)
            return hit[1]
    digest = hashlib.sha256(data).hexdigest()
    if memo is not None:
        memo[id(data)] = (data, digest)
    return digest


@contextmanager
def digests_remembered() -> Iterator[None]:
    """Within: ``sha256_hex`` remembers what it hashed (holding the bytes, so an id cannot be reused)."""
    global _remembered
    outer = _remembered
    if outer is None:
        _remembered = {}
    try:
        yield
    finally:
        if outer is None:
            _remembered = None


PARALLEL_MIN = 8


WORKERS = 4  # measured best for creating + fsyncing ~1,000 files on 2 cores


def parallel(function, items: list) -> list:
    """``map`` over threads for file system work (open/write/fsync/hash/unlink release the GIL).

    Plain threads rather than concurrent.futures: that import (with logging) costs ~8 ms per run.
    Every worker has finished before anything is raised, even a signal turned into an exception, so no
    worker still writes (a temp file beside its target) while the caller restores. The workers start
    with SIGINT/SIGTERM blocked (a signal cannot stop the start half-way, and no worker ever runs a
    handler), and the wait is on each worker's own "finished" flag: ``Thread.join`` cannot be trusted
    here, since a handler raising inside it marks a still-running thread as stopped (bpo-45274).
    """
    if len(items) < PARALLEL_MIN:
        return [function(item) for item in items]
    chunks = [items[start::WORKERS] for start in range(WORKERS)]
    done: list = [None] * WORKERS
    errors: list = [None] * WORKERS
    finished = [threading.Event() for _ in range(WORKERS)]

    def work(index: int) -> None:
        try:
            done[index] = [function(item) for item in chunks[index]]
        except BaseException as exc:  # handed to the caller below
            errors[index] = exc
        finally:
            finished[index].set()

    pending: BaseException | None = None
    try:
        with signals_blocked():
            for index in range(WORKERS):
                try:
                    threading.Thread(target=work, args=(index,), daemon=True).start()
                except RuntimeError as exc:  # "can't start new thread": this chunk never ran
                    errors[index] = exc
                    finished[index].set()
    except BaseException as exc:  # a signal that came while blocked runs its handler on unblocking
        pending = exc
    for event in finished:
        while not event.is_set():
            try:
                event.wait()
            except BaseException as exc:  # a signal: remember it, keep waiting for the workers
                pending = pending or exc
    failure = pending or next((exc for exc in errors if exc is not None), None)
    if failure is not None:
        raise failure
    results = [None] * len(items)
    for start, chunk in enumerate(done):
        results[start::WORKERS] = chunk
    return results


def discard_backups(journal_dir: Path) -> None:
    """Remove the backups directory; its files are unlinked on threads (freeing the replaced
    originals' blocks is the slow part, ~60 µs a file)."""
    backups = journal_backups_in(journal_dir)
    try:
        names = os.listdir(backups)
    except OSError:
        names = []
    try:
        parallel(unlink_if_present, [os.path.join(backups, name) for name in names])
    except OSError:
        pass
    shutil.rmtree(backups, ignore_errors=True)


def drop_bytecode(paths: Iterable[str]) -> None:
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


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _SignalGuard:
    """While armed, the first SIGINT/SIGTERM raises ``Interrupted`` and disarms the guard, so the undo
    that follows cannot be interrupted in turn; a signal while disarmed is only noted (``pending``)."""

    def __init__(self, armed: bool = True) -> None:
        self.armed = armed
        self.pending: int | None = None

    def handler(self, signum, frame) -> None:
        if self.armed:
            self.armed = False
            raise Interrupted(signum)
        self.pending = self.pending or signum


# After the commit point of a transaction, a signal must not undo it, nor make the command report a
# failure for a change that stands. A command (flow.transaction.run calls ``hold_late_signals``) then
# keeps SIGINT/SIGTERM noted-only for the rest of its process ("late"): it finishes with the code of
# what it did, says the signal came late, and starts no other transaction. A third late signal is
# obeyed (the default action): the change on disk is complete and recorded either way. Without the
# hold (a library caller of journal.commit), a signal noted after the commit point is re-raised when
# the commit returns, under the caller's own handler.
_late: list[int] = []
_hold = False
_after_commit = False


def hold_late_signals() -> None:
    """This process is one command: after a commit point, signals wait for it to end (see above)."""
    global _hold
    _hold = True


def _note_late(signum: int) -> None:
    _late.append(signum)
    if len(_late) == 1:
        note(f"{signal.Signals(signum).name} arrived after the change was committed: it stands, and the "
             f"command finishes (two more stop it anyway)")


def _late_handler(signum, frame) -> None:
    _note_late(signum)
    if len(_late) >= 3:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


def hold_signals_to_the_end() -> None:
    """The command is done and its exit code says what it did to the files: a SIGINT / SIGTERM from here on
    (the interpreter's shutdown restores the default handlers) stays blocked, so it cannot turn a committed
    change into a death by signal (issue 45)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, set(_SIGNALS))


def late_signal() -> int | None:
    """The first SIGINT/SIGTERM that arrived after a commit point of this command, if any."""
    return _late[0] if _late else None


def committed(guard: _SignalGuard) -> None:
    """The commit point was passed: from here a signal is noted, never undoes (see above)."""
    global _after_commit
    guard.armed = False
    if _hold:
        _after_commit = True
        if threading.current_thread() is threading.main_thread():
            for sig in _SIGNALS:
                signal.signal(sig, _late_handler)


@contextmanager
def signals_as_exceptions() -> Iterator[_SignalGuard]:
    """Turn SIGINT/SIGTERM into an exception so the commit can restore before exiting (after a commit
    point of a command they stay noted-only: see ``committed``)."""
    guard = _SignalGuard(armed=not _after_commit)
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {sig: signal.signal(sig, _late_handler if _after_commit else guard.handler) for sig in _SIGNALS}
    try:
        yield guard
    finally:
        if _after_commit:
            if guard.pending:
                _note_late(guard.pending)
            for sig in _SIGNALS:
                signal.signal(sig, _late_handler)
        else:
            for sig, old in previous.items():
                signal.signal(sig, old)
            if guard.pending and not guard.armed and not sys.exc_info()[0]:
                signal.raise_signal(guard.pending)  # noted after a commit point: the caller's to handle


@contextmanager
def signals_blocked() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, set(_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def link_backup(original: Path, backup: Path) -> None:
    """A hard link of ``original`` at ``backup``, else (another file system, a link refused) a copy made
    with mode 0o644 whatever the umask."""
    try:
        os.link(original, backup)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            raise
        copy_new_file(original, backup)


def remove_emptied_dirs(root: Path, deleted: list[str]) -> list[str]:
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


NOT_REGULAR = "not-a-regular-file"  # file_sha256 of a link, FIFO or device: equal to no digest


def file_sha256(path: Path) -> str | None:
    """sha256 of the regular file at ``path`` (None: absent), by ``inputs.file_sha256``: never through a
    link, never blocking on a FIFO; a link or special file hashes to ``NOT_REGULAR``, one over
    BACKUP_CAP is an OSError (EFBIG)."""
    try:
        return hash_file(path, cap=BACKUP_CAP, what="file")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except Unfit as exc:
        if exc.why == "large":
            raise OSError(errno.EFBIG, exc.message, str(path)) from None
        return NOT_REGULAR
