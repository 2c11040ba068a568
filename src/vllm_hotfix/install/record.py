"""pip's RECORD (PEP 376/627): parsing, verifying files against it, and the parallel full audit."""

from __future__ import annotations

import base64
import errno
import csv
import hashlib
import io
import mmap
import os
import posixpath
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from vllm_hotfix_guard.errors import InvalidInput

CHUNK = 1 << 20


@dataclass(frozen=True)
class RecordEntry:
    """One line of pip's RECORD: path, hash and size."""

    path: str                  # as in RECORD, normalised; relative to site-packages (may start with '../')
    algorithm: str | None      # 'sha256'; None for entries without a hash (RECORD itself, some .pyc)
    digest: str | None         # urlsafe base64 without padding, as pip writes it
    size: int | None

    @property
    def hash_text(self) -> str | None:
        return f"{self.algorithm}={self.digest}" if self.algorithm else None


@dataclass(frozen=True)
class Difference:
    """One file that differs from pip's RECORD, and how."""

    path: str
    kind: str                  # 'missing' | 'size' | 'digest' | 'unrecorded' | 'symlink' | 'not-a-file' ('unreadable' in audits)
    expected: str | None
    actual: str | None

    @property
    def flags(self) -> str:
        """The `rpm -V` column: S = size, 5 = digest; a different size implies a different digest."""
        if self.kind == "size":
            return "S.5......"
        if self.kind == "digest":
            return "..5......"
        return self.kind

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "expected": self.expected, "actual": self.actual}


@dataclass(frozen=True)
class AuditReport:
    """The result of checking an install against its RECORD."""

    files_checked: int
    bytes: int
    differences: tuple[Difference, ...]
    bytecode_missing: int = 0  # recorded __pycache__/*.pyc that are gone: Python rebuilds them, no difference

    @property
    def pristine(self) -> bool:
        return not self.differences


def read_record(dist_info: Path) -> dict[str, RecordEntry]:
    """Entries of ``dist_info/RECORD`` keyed by their path relative to site-packages."""
    record = Path(dist_info) / "RECORD"
    try:
        text = record.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput(f"{record}: no RECORD file (not installed by pip from a wheel?)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{record}: cannot read: {exc}") from None
    return parse_record(text, source=str(record))


def parse_record(text: str, *, source: str = "RECORD") -> dict[str, RecordEntry]:
    entries: dict[str, RecordEntry] = {}
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not any(row):
            continue
        if len(row) != 3:
            raise InvalidInput(f"{source}:{lineno}: expected 3 comma-separated fields, found {len(row)}")
        raw_path, hash_field, size_field = row
        path = posixpath.normpath(raw_path.replace("\\", "/"))
        algorithm = digest = None
        if hash_field:
            algorithm, sep, digest = hash_field.partition("=")
            if not sep or algorithm not in hashlib.algorithms_guaranteed or not digest:
                raise InvalidInput(f"{source}:{lineno}: bad hash {hash_field!r} for {raw_path}")
        try:
            size = int(size_field) if size_field else None
        except ValueError:
            raise InvalidInput(f"{source}:{lineno}: bad size {size_field!r} for {raw_path}") from None
        entries[path] = RecordEntry(path, algorithm, digest, size)
    return entries


def _hasher(algorithm: str):
    constructor = getattr(hashlib, algorithm, None)
    return constructor() if constructor is not None else hashlib.new(algorithm)


def _encode(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _digest_fd(fd: int, size: int, algorithm: str, buffer: bytearray | None) -> str:
    """Digest of an open file. Small files in one read; large ones through a pre-faulted mmap,
    which hashes straight from the page cache without the GIL and without a copy."""
    hasher = _hasher(algorithm)
    if size <= CHUNK:
        hasher.update(os.read(fd, size + 1))
        return _encode(hasher.digest())
    try:
        with mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ) as mapped:
            hasher.update(mapped)
        return _encode(hasher.digest())
    except (OSError, ValueError, AttributeError):  # not mappable (special file, platform): plain reads
        hasher = _hasher(algorithm)
    buf = buffer if buffer is not None else bytearray(CHUNK)
    view = memoryview(buf)
    os.lseek(fd, 0, os.SEEK_SET)
    with open(fd, "rb", buffering=0, closefd=False) as fh:
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            hasher.update(view[:n])
    return _encode(hasher.digest())


def data_digest(data: bytes, algorithm: str = "sha256") -> str:
    """urlsafe-b64 digest without padding of ``data``, the way RECORD writes it."""
    hasher = _hasher(algorithm)
    hasher.update(data)
    return _encode(hasher.digest())


def check_entry(root: Path | str, entry: RecordEntry, buffer: bytearray | None = None) -> Difference | None:
    """Compare one file under ``root`` (site-packages) with its RECORD entry: size first, then digest."""
    try:  # a symlink where pip installed a file is a difference, never followed (nor its target's hash shown)
        fd = os.open(os.path.join(root, entry.path), os.O_RDONLY | _CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return Difference(entry.path, "missing", entry.hash_text, None)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            return Difference(entry.path, "symlink", entry.hash_text, None)
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return Difference(entry.path, "not-a-file", entry.hash_text, None)
    try:
        if entry.algorithm is not None and entry.size is not None and entry.size <= CHUNK:
            # the common small file: one read of size + 1 bytes tells the size and gives the bytes
            data = os.read(fd, entry.size + 1)
            if len(data) == entry.size:
                actual = data_digest(data, entry.algorithm)
                if actual != entry.digest:
                    return Difference(entry.path, "digest", entry.hash_text, f"{entry.algorithm}={actual}")
                return None
            os.lseek(fd, 0, os.SEEK_SET)  # the size differs: the checks below read from the start
        size = os.fstat(fd).st_size
        if entry.size is not None and size != entry.size:
            return Difference(entry.path, "size", str(entry.size), str(size))
        if entry.algorithm is None:
            return None
        actual = _digest_fd(fd, size, entry.algorithm, buffer)
    finally:
        os.close(fd)
    if actual != entry.digest:
        return Difference(entry.path, "digest", entry.hash_text, f"{entry.algorithm}={actual}")
    return None


def verify(root: Path, entries: dict[str, RecordEntry], paths: Iterable[str]) -> list[Difference]:
    """Differences of exactly ``paths`` (relative to ``root``): what a patch touches must be pristine.

    A path absent from RECORD is 'unrecorded' when the file exists (nothing proves its bytes) and
    fine when it does not (a patch that creates it).
    """
    differences = []
    for path in paths:
        key = posixpath.normpath(path)
        entry = entries.get(key)
        if entry is None:
            if (Path(root) / key).exists():
                differences.append(Difference(key, "unrecorded", None, None))
            continue
        found = check_entry(root, entry)
        if found is not None:
            differences.append(found)
    return differences


def verify_bytes(entries: dict[str, RecordEntry], expected: dict[str, bytes | None]) -> list[Difference]:
    """Differences between bytes a file is known to have had and its RECORD entry (the pristine state a
    series derived): None means the file did not exist, so RECORD must not list it."""
    differences = []
    for path, data in sorted(expected.items()):
        key = posixpath.normpath(path)
        entry = entries.get(key)
        if entry is None:
            if data is not None:
                differences.append(Difference(key, "unrecorded", None, None))
            continue
        if data is None:
            differences.append(Difference(key, "missing", entry.hash_text, None))
        elif entry.size is not None and entry.size != len(data):
            differences.append(Difference(key, "size", str(entry.size), str(len(data))))
        elif entry.algorithm is not None and data_digest(data, entry.algorithm) != entry.digest:
            differences.append(Difference(key, "digest", entry.hash_text,
                                          f"{entry.algorithm}={data_digest(data, entry.algorithm)}"))
    return differences


def _top_level_dirs(root: Path, entries: dict[str, RecordEntry]) -> list[str]:
    firsts = set()
    for path in entries:
        first, sep, _ = path.partition("/")
        if sep and first != ".." and not first.endswith((".dist-info", ".data")):
            firsts.add(first)
    return sorted(first for first in firsts if os.path.isdir(os.path.join(root, first)))


def unrecorded_files(root: Path, entries: dict[str, RecordEntry], top_dirs: Iterable[str]) -> list[str]:
    """Files inside the package directories that RECORD does not list.

    ``__pycache__/*.pyc`` is not reported: Python writes those on import and checks them against the
    source's size and mtime; anything else unlisted (a stray .py, .so, .pth) is. Compared per
    directory as sets (it runs beside the hashing threads: every bytecode it runs holds the GIL).
    """
    recorded: dict[str, set[str]] = {}
    for path in entries:
        head, _, name = path.rpartition("/")
        recorded.setdefault(head, set()).add(name)
    found = []
    prefix = len(os.fspath(root)) + 1
    nothing: set[str] = set()
    for top in top_dirs:
        for dirpath, _, filenames in os.walk(os.path.join(root, top)):
            rel_dir = dirpath[prefix:].replace(os.sep, "/")
            extra = set(filenames).difference(recorded.get(rel_dir, nothing))
            if extra and dirpath.endswith("__pycache__"):
                extra = {name for name in extra if not name.endswith(".pyc")}
            found.extend(rel_dir + "/" + name for name in extra)
    return sorted(found)


def _default_workers() -> int:
    """Two threads per core (at most 16): a thread that runs Python for a small file holds the GIL while
    the others hash large files without it; measured 1.49x the sha256 limit against 1.53x with one per core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(2 * cores, 16))


def audit(
    root: Path,
    entries: dict[str, RecordEntry],
    *,
    workers: int | None = None,
    top_dirs: Iterable[str] | None = None,
    progress: Callable[[Iterator[int], int], Iterator[int]] | None = None,
) -> AuditReport:
    """Check every RECORD entry under ``root`` in parallel (largest files first), plus unrecorded files."""
    ordered = sorted(entries.values(), key=lambda e: e.size or 0, reverse=True)
    workers = workers or _default_workers()
    total_bytes = sum(e.size or 0 for e in ordered)

    # Each worker gets its own list, balanced by RECORD sizes (largest first, to the least loaded):
    # a shared queue or a future per file makes GIL hand-offs cost more than hashing 5,000 small files.
    thread_count = max(1, min(workers, len(ordered)))
    shares: list[list[RecordEntry]] = [[] for _ in range(thread_count)]
    loads = [0] * thread_count
    for entry in ordered:
        lightest = loads.index(min(loads))
        shares[lightest].append(entry)
        loads[lightest] += (entry.size or 0) + 4096
    root_text = os.fspath(root)
    differences: list[Difference] = []
    checked = [0] * thread_count

    def worker(index: int) -> None:
        buffer = bytearray(CHUNK)
        for entry in shares[index]:
            try:
                found = check_entry(root_text, entry, buffer)
            except OSError as exc:
                found = Difference(entry.path, "unreadable", entry.hash_text, f"{type(exc).__name__}: {exc}")
            if found is not None:
                differences.append(found)
            checked[index] += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(thread_count)]
    for thread in threads:
        thread.start()

    def ticks() -> Iterator[int]:
        seen = 0
        while True:
            threads[0].join(0.05)
            alive = any(t.is_alive() for t in threads)
            now = sum(checked)
            yield from range(seen, now)
            seen = now
            if not alive:
                return

    tops = _top_level_dirs(root, entries) if top_dirs is None else list(top_dirs)
    unrecorded = unrecorded_files(root, entries, tops)  # while the workers hash
    for _ in (progress(ticks(), len(ordered)) if progress is not None else ()):
        pass
    for thread in threads:
        thread.join()
    kept = [d for d in differences if not (d.kind == "missing" and is_bytecode(d.path))]
    bytecode_missing = len(differences) - len(kept)
    kept.extend(Difference(p, "unrecorded", None, None) for p in unrecorded)
    kept.sort(key=lambda d: d.path)
    return AuditReport(len(ordered), total_bytes, tuple(kept), bytecode_missing)


def is_bytecode(path: str) -> bool:
    """A ``__pycache__/*.pyc`` import cache (what pip compiles at install and apply/rollback drop)."""
    head, name = posixpath.split(path)
    return name.endswith(".pyc") and posixpath.basename(head) == "__pycache__"
