"""The ready directory's small readers and writers: the readiness probe's, shared by ready.py (the records),
expected.py (vLLM's command lines) and admitted.py (the mounted lock), so none of them imports another for them;
and the guard's caches there -- the trust verdicts (trust.py) and the lock verdicts (lock_cache.py) -- as one rule:

- **The directory** (``private_dir``): ``$HOTFIX_READY_DIR/NAME``, created 0700; usable only as a real
  directory (no link) owned by this process's user with no permission for group or others, judged on its
  open descriptor. Every entry is opened, written and renamed relative to that descriptor, so a link or a
  rename in a 0777 ready directory (an emptyDir) cannot send a read or a write elsewhere (issue 45).
- **An entry** (``read_entry``): a regular file there, opened without following links or blocking, owned by
  this user, no permission for group or others, one link, at most ``limit`` bytes. Anything else reads as
  no entry: the caller derives its verdict again and writes the entry anew.
- **A write** (``store_entry``): a 0600 file under a temporary name, renamed into place (a reader sees a whole
  entry or none). A failure only costs the next process a derivation.
- **The container** (``container_identity``): the boot id and the start time of the pid namespace's first
  process, part of every key, so an entry left in a volume before this container started matches nothing.

Stdlib only, imports nothing of the guard: the probe runs every 10 seconds, a cache hit in every vLLM process."""

from __future__ import annotations

import os

LOCK_LIMIT = 4 << 20            # what the guard reads of a lock (paths.LOCK_LIMIT)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_small(name: str, limit: int, *, dir_fd: int | None = None, uid: int | None = None,
               private: bool = False) -> bytes | None:
    """A regular file's bytes (at most ``limit``; None: missing), never following a link or blocking;
    OSError for anything else (a link, a fifo, too large, another user's when ``uid`` is given, and with
    ``private`` one that group or others may use or that has more than one link: a cache entry)."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        import stat

        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(0, "not a regular file")
        if uid is not None and st.st_uid != uid:
            raise OSError(0, f"owned by uid {st.st_uid}, not {uid}")
        if private and (stat.S_IMODE(st.st_mode) & 0o077 or st.st_nlink != 1):
            raise OSError(0, f"mode {stat.S_IMODE(st.st_mode):o} with {st.st_nlink} links, not 0600-like and one")
        if st.st_size > limit:
            raise OSError(0, f"{st.st_size} bytes, more than {limit}")
        data = os.read(fd, limit + 1)
        if len(data) > limit:
            raise OSError(0, f"more than {limit} bytes")
        return data
    finally:
        os.close(fd)


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22); None: no such process."""
    try:
        data = read_small(f"/proc/{pid}/stat", 4096)
    except OSError:
        return None
    if not data:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # the name in parentheses may hold anything
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def quote(text: str) -> str:
    """A string from outside, double-quoted, backslash-escaping what is not printable ASCII."""
    out = []
    for c in str(text):
        if c in '"\\':
            out.append("\\" + c)
        elif c.isascii() and c.isprintable():
            out.append(c)
        else:
            code = ord(c)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


# -- the guard's caches ---------------------------------------------------------------------------


class CacheDir:
    """A cache directory as checked: ``fd`` is the descriptor of the very directory judged (a path-like; plain, not a
    pathlib path: a hit in every vLLM process makes one)."""

    __slots__ = ("path", "fd")

    def __init__(self, path: str) -> None:
        self.path, self.fd = path, -1

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path


def private_dir(ready: str, name: str, *, create: bool = True) -> CacheDir | None:
    """``READY/name`` (READY: HOTFIX_READY_DIR's value), created 0700 (``create``), when it is fit to hold cache
    entries (see the module); None: no cache (or none yet)."""
    import stat

    if not ready or not os.path.isabs(ready) or "\0" in ready:
        return None
    directory = CacheDir(os.path.join(ready, name))
    if create:
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        os.close(fd)
        return None
    directory.fd = fd
    return directory


def dir_fd(directory) -> int | None:
    return getattr(directory, "fd", None) if getattr(directory, "fd", -1) >= 0 else None


def read_entry(directory: CacheDir, name: str, limit: int) -> bytes | None:
    """The bytes of a fit entry ``name`` in ``directory`` (see the module: ``read_small``, private, this user's),
    else None."""
    where = dir_fd(directory)
    if where is None:
        return None
    try:
        return read_small(name, limit, dir_fd=where, uid=os.geteuid(), private=True)
    except OSError:
        return None


def store_entry(directory: CacheDir, name: str, data: bytes) -> None:
    """Leave ``data`` as entry ``name`` (see the module); never raises."""
    where = dir_fd(directory)
    if where is None:
        return
    tmp = f".{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600,
                     dir_fd=where)
    except OSError:
        return
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=where, dst_dir_fd=where)
    except OSError:
        try:
            os.unlink(tmp, dir_fd=where)
        except OSError:
            pass


def container_identity() -> bytes:
    """The boot id and the start time (``start_time``: clock ticks since boot) of pid 1 as this process sees it:
    different for every container start, unknown before it (empty where /proc does not say)."""
    try:
        boot = (read_small("/proc/sys/kernel/random/boot_id", 4096) or b"").strip()
    except OSError:
        boot = b""
    start = start_time(1)
    return boot + b"\0" + (b"" if start is None else str(start).encode())
