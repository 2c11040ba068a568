"""The readiness probe's small readers, shared by ready.py (the records), expected.py (vLLM's command lines)
and admitted.py (the mounted lock), so none of them imports another for them. Stdlib only, imports nothing
of the guard: the probe runs every 10 seconds."""

from __future__ import annotations

import os

LOCK_LIMIT = 4 << 20            # what the guard reads of a lock (paths.LOCK_LIMIT)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def read_small(name: str, limit: int, *, dir_fd: int | None = None, uid: int | None = None) -> bytes | None:
    """A regular file's bytes (at most ``limit``; None: missing), never following a link or blocking;
    OSError for anything else (a link, a fifo, too large, another user's when ``uid`` is given)."""
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
