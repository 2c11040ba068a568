"""The lock verdict cache, its hit half: a container's later processes take the verdict on HOTFIX_LOCK that an
earlier one derived, in ``$HOTFIX_READY_DIR/lock-verdicts/KEY.json`` (ready_io.py's rules for the guard's caches), instead of deriving it
again (issue 43's budget). A hit still reads the lock (the key names its bytes), stats every path the derivation
read (lock_inputs.paths_read) and hashes every locked file: anything changed is a miss, derived again. Only verdicts
where every hotfix is in effect are kept. The rules, and why they suffice: docs/design.md, "The lock verdict cache".
Stdlib only; an entry is untrusted input (every field's type checked, anything unexpected a miss)."""

from __future__ import annotations

import os
import sys

from vllm_hotfix_guard.settings import LOCK_CACHE_DIR as DIR, READY_DIR_ENV

SCHEMA = 1
ENTRY_LIMIT = 1 << 20
RACY_NS = 1_000_000_000
PLAIN_FINDERS = frozenset({"_frozen_importlib", "_frozen_importlib_external", "importlib._bootstrap",
                           "importlib._bootstrap_external", "importlib.machinery", "zipimport",
                           "_distutils_hack", "vllm_hotfix_guard.imports"})
_ENV_PREFIXES = ("HOTFIX_", "PYTHON", "XDG_")


class Hit:
    """A lookup: the lock's bytes and digest (None: unreadable), the key (None: this process is not cached), the
    cache directory (None: not made yet), and the entry's values when it holds for this process."""

    __slots__ = ("data", "sha256", "key", "directory", "verdicts", "watched", "names", "usable", "fingerprint")

    def __init__(self, data, sha256, key, directory) -> None:
        self.data, self.sha256, self.key, self.directory = data, sha256, key, directory
        self.verdicts = self.watched = self.names = self.usable = self.fingerprint = None

    def close(self) -> None:
        """Close the cache directory's descriptor (ready_io.private_dir opened it)."""
        fd = getattr(self.directory, "fd", -1)
        if fd >= 0:
            self.directory.fd = -1
            os.close(fd)


def lookup(lock: str) -> Hit:
    """Read the lock once and look for a fit entry; ``hit.verdicts`` is None unless it holds."""
    import hashlib

    from vllm_hotfix_guard.ready_io import LOCK_LIMIT, read_small

    try:
        data = read_small(lock, LOCK_LIMIT) if "\0" not in lock else None
    except OSError:
        data = None
    if data is None:
        return Hit(None, None, None, None)
    digest = hashlib.sha256(data).hexdigest()
    key = cache_key(lock, digest)
    directory = None
    if key is not None:
        from vllm_hotfix_guard.ready_io import private_dir

        directory = private_dir(os.environ.get(READY_DIR_ENV, ""), DIR, create=False)  # made by the first process that keeps an entry
    found = Hit(data, digest, key, directory)
    if directory is not None:
        from vllm_hotfix_guard.ready_io import read_entry

        raw = read_entry(directory, f"{key}.json", ENTRY_LIMIT)
        if raw is not None:
            _take(found, raw)
    return found


def cache_key(lock: str, digest: str):
    """The key of this process's verdict on the lock (see the module); None: this process is not cached."""
    finders = [str(getattr(f if isinstance(f, type) else type(f), "__module__", "")) for f in sys.meta_path]
    if any(name not in PLAIN_FINDERS for name in finders):
        return None
    import _imp
    import hashlib

    from vllm_hotfix_guard.ready_io import container_identity

    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES) or k == "HOME")
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    parts = [str(SCHEMA), os.path.dirname(__file__), lock, digest, repr(env), sys.executable, sys.version,
             repr(tuple(sys.flags)), str(sys.pycache_prefix), str(sys.implementation.cache_tag),
             str(getattr(_imp, "check_hash_based_pycs", "")), repr(sys.path), cwd, repr(finders),
             repr([getattr(h, "__qualname__", repr(h)) for h in sys.path_hooks]), f"{os.geteuid()}:{os.getegid()}"]
    digest_of = hashlib.sha256(b"vllm-hotfix lock verdict\0")
    for part in parts:
        value = part.encode("utf-8", "surrogateescape")
        digest_of.update(len(value).to_bytes(8, "big") + value)
    identity = container_identity()
    digest_of.update(len(identity).to_bytes(8, "big") + identity)
    return digest_of.hexdigest()


def signature(path: str):
    """(device, inode, mode, size, mtime, ctime) of ``path`` as lstat sees it, and of what a link leads to;
    None when there is nothing there (or it cannot be looked at)."""
    try:
        info = os.lstat(path)
    except (OSError, ValueError):
        return None
    seen = [info.st_dev, info.st_ino, info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
    if (info.st_mode & 0o170000) == 0o120000:  # a link (a ConfigMap's files are): what it leads to, too
        try:
            target = os.stat(path)
        except (OSError, ValueError):
            return seen + [None]
        seen += [target.st_dev, target.st_ino, target.st_mode, target.st_size, target.st_mtime_ns, target.st_ctime_ns]
    return seen


def stats_digest(paths, signatures=None) -> str:
    """The sha256 of every path's ``signature`` (taken now unless given), in order: what an entry keeps of them."""
    import hashlib

    seen = signatures if signatures is not None else map(signature, paths)
    return hashlib.sha256(repr(list(zip(paths, seen))).encode("utf-8", "surrogateescape")).hexdigest()


def _take(found: Hit, raw: bytes) -> None:
    """Fill ``found`` from the entry ``raw`` when it is well formed, for this key, unexpired, and every stat
    and locked file's sha256 is as it was; else leave it a miss."""
    import json

    try:
        doc = json.loads(raw.decode("utf-8"))
        entry = _fields(doc, found.key)
    except (UnicodeDecodeError, ValueError, TypeError, KeyError, RecursionError):  # RecursionError: nested too deep
        return
    if entry is None:
        return
    until, paths, stats, files, verdicts, watched, names, usable, fingerprint = entry
    if until is not None:
        import time

        if time.time() >= until:
            return
    if stats_digest(paths) != stats:
        return
    from vllm_hotfix_guard.filehash import target_sha256  # the lock check's own hash of a locked file

    if any(target_sha256(where) != sha for where, sha in files):
        return
    from vllm_hotfix_guard.verdicts import Locked, Verdict, Watched

    found.verdicts = tuple(Verdict(*v) for v in verdicts)
    found.watched = tuple(Watched(*w) for w in watched)
    found.names, found.usable, found.fingerprint = [Locked(*n) for n in names], usable, fingerprint


def _fields(doc, key: str):
    """The entry's fields, each type checked; None when it is not a schema-1 entry for ``key``."""
    if type(doc) is not dict or doc.get("schema") != SCHEMA or type(doc.get("schema")) is not int or doc.get("key") != key:
        return None
    until = doc["until"]
    if until is not None and type(until) is not int:
        return None
    paths, stats = doc["paths"], doc["stats"]
    if type(paths) is not list or not all(type(p) is str for p in paths) or type(stats) is not str:
        return None
    files = [(w, h) for w, h in _lists(doc["files"], 2) if type(w) is str and (h is None or type(h) is str)]
    verdicts = [v for v in _lists(doc["verdicts"], 5) if v[1] is True and _strs(v[:1] + v[2:])]
    watched = [w for w in _lists(doc["watched"], 4) if _strs(w)]
    names = [n for n in _lists(doc["names"], 7) if _strs(n[:4]) and _strs(n[5:]) and (n[4] is None or type(n[4]) is str)]
    lengths = [len(doc[k]) for k in ("files", "verdicts", "watched", "names")]
    if lengths != [len(files), len(verdicts), len(watched), len(names)] or not verdicts:
        return None
    if type(doc["usable"]) is not bool or type(doc["fingerprint"]) is not str:
        return None
    return until, paths, stats, files, verdicts, watched, names, doc["usable"], doc["fingerprint"]


def _lists(values, length: int) -> list:
    """``values`` when it is a list of lists of ``length`` items, else TypeError (the entry is a miss)."""
    if type(values) is not list or any(type(v) is not list or len(v) != length for v in values):
        raise TypeError("not an entry")
    return values


def _strs(values) -> bool:
    return all(type(v) is str for v in values)
