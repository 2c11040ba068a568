"""Readiness: each guarded process's verdict as one small file in ``HOTFIX_READY_DIR`` (docs/readiness.md);
``ready``, the probe that reads them, is ready_probe.py (this module is in every vLLM process, that one not).

``record`` runs in every vLLM process the guard checks (plugin.register, and the fork hook for forked
children): role, ranks, pid, the process's start time (a recycled pid is not the process that wrote the
file), the sha256 of the lock, in effect or not and the failing ids; written atomically (a temporary
file renamed into place) through a descriptor of the checked directory. ready_probe.main is
``python -m vllm_hotfix_guard ready``: exit 0 only when every expected process (expected.py) has
recorded "in effect" since the container started.

Everything in the directory is input: the directory must be ours (or our private subdirectory of a
shared mount: an ``emptyDir`` or a tmpfs is world-writable), no symlink is followed, a record is a
regular file of ours under RECORD_LIMIT bytes with every field checked, and nothing read can hang the
probe (O_NONBLOCK) or import anything. Whatever goes wrong, the probe says "not ready", never "ready";
a directory problem never changes the guard's verdict. Stdlib only, and ``os`` alone at import: the
probe runs every few seconds (its budget: 2x ``python -c pass``). Plain ``__slots__`` classes.
"""

from __future__ import annotations

import os

from vllm_hotfix_guard.ready_io import LOCK_LIMIT, quote, read_small, start_time  # noqa: F401 - ready's API too
from vllm_hotfix_guard.settings import LOCK_ENV, READY_DIR_ENV

FORMAT = "vllm-hotfix-ready 1"  # a record's first line
SUFFIX = ".ready"               # a record's name: <pid>.ready
RECORD_LIMIT = 4096             # bytes; a record is ~300
MAX_RECORDS = 4096              # files in the directory; beyond: not ready (restarts without end, or junk)
KINDS = ("main", "api", "engine", "worker", "other")
EXIT_READY, EXIT_NOT_READY, EXIT_USAGE = 0, 1, 2
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-()")
_warned = False


class Unusable(Exception):
    """The readiness directory cannot be trusted or used (the message says why)."""


class Record:
    """One process's verdict as its file says it (every field checked by ``parse``)."""

    __slots__ = ("pid", "start", "ppid", "kind", "role", "rank", "dp", "tp", "pp", "lock", "in_effect", "failing")

    def __init__(self, pid: int, start: int, ppid: int, kind: str, role: str, ranks: tuple, lock: str,
                 in_effect: bool, failing: tuple[str, ...]) -> None:
        self.pid, self.start, self.ppid, self.kind, self.role = pid, start, ppid, kind, role
        self.rank, self.dp, self.tp, self.pp = ranks  # each None where not known
        self.lock, self.in_effect, self.failing = lock, in_effect, failing

    def text(self) -> str:
        def number(value):
            return "-" if value is None else str(value)
        return (f"{FORMAT}\npid {self.pid}\nstart {self.start}\nppid {self.ppid}\nkind {self.kind}\n"
                f"role {self.role}\nrank {number(self.rank)}\ndp {number(self.dp)}\ntp {number(self.tp)}\n"
                f"pp {number(self.pp)}\nlock {self.lock or '-'}\n"
                f"effect {'yes' if self.in_effect else 'no'}\nfailing {','.join(self.failing) or '-'}\n")


# -- the directory -------------------------------------------------------------------------------


def open_directory(base: str, *, create: bool) -> int:
    """A descriptor of the directory records go in: ``base`` itself when it is ours and no one else can
    write it, else our own subdirectory ``vllm-hotfix-UID`` of it (made 0700 when ``create``); Unusable
    otherwise (a link, not a directory, another user's, writable by others)."""
    if not base.startswith("/") or "\x00" in base:
        raise Unusable(f"{READY_DIR_ENV} must be an absolute path")
    uid = os.geteuid()
    try:
        fd = os.open(base, _DIR_FLAGS)
    except OSError as exc:
        raise Unusable(f"{READY_DIR_ENV} {quote(base)}: {_why(exc)}") from None
    try:
        st = os.fstat(fd)
        if st.st_uid == uid and not st.st_mode & 0o022:
            fd, kept = -1, fd
            return kept
        name = f"vllm-hotfix-{uid}"
        if create:
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise Unusable(f"{quote(base + '/' + name)}: {_why(exc)}") from None
        st = os.fstat(sub)
        if st.st_uid != uid or st.st_mode & 0o022:
            os.close(sub)
            raise Unusable(f"{quote(base + '/' + name)}: not ours alone (owner {st.st_uid}, mode {st.st_mode & 0o7777:o})")
        return sub
    finally:
        if fd >= 0:
            os.close(fd)


def _why(exc: OSError) -> str:
    import errno

    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        try:
            link = os.path.islink(exc.filename) if exc.filename is not None else False
        except (OSError, ValueError):
            link = False
        return "a symlink (not followed)" if link or exc.errno == errno.ELOOP else "not a directory"
    return exc.strerror or type(exc).__name__


# -- writing: in every guarded process -----------------------------------------------------------


_this: dict = {}  # pid -> {"role": ..., "failed": {id: None}}: what this process recorded (a fork starts afresh)


def record(verdicts, *, role: str | None = None, lock_sha256: str | None = None) -> None:
    """This serving process's verdict (the guard's verdicts, each ``.in_effect`` or not) into the directory,
    when HOTFIX_READY_DIR is set (plugin._check_here, once per process: register and the fork hook). Never
    raises, never changes the verdict: a problem is one WARNING line. ``role``: for tests. ``lock_sha256``:
    of the lock bytes the guard judged (not read again), else ``lock_digest()``. A hotfix this process once
    found not in effect stays in its record (``failed``): a process that failed is never ready."""
    _this.setdefault(os.getpid(), {"role": role, "failed": {}})["lock"] = lock_sha256
    _record([_clean_id(v.hotfix_id) for v in verdicts if not v.in_effect], role)


def failed(ids) -> None:
    """A verdict found after the process recorded -- the import watch (a patched module imported from other
    bytes), a code checkpoint or a rebinding (a fixed function not the one running): the record follows it,
    not in effect from now on. Callers check HOTFIX_READY_DIR first (this module is imported only then)."""
    _record([_clean_id(str(i)) for i in ids], None)


def _record(failing: list[str], role: str | None) -> None:
    base = os.environ.get(READY_DIR_ENV, "").strip()
    if not base:
        return
    try:
        pid = os.getpid()
        mine = _this.setdefault(pid, {"role": role, "failed": {}})
        role = role if role is not None else mine["role"]
        if role is None:
            from vllm_hotfix_guard.process import process_role, serving_process

            if not serving_process():  # `vllm --version` & co.: nothing to wait for
                return
            role = process_role()
        mine["role"] = role
        mine["failed"].update(dict.fromkeys(failing))
        start = start_time(pid)
        if start is None:
            raise Unusable(f"cannot read /proc/{pid}/stat (the start time that tells this process from a recycled pid)")
        kind, ranks = classify(role)
        ids = tuple(mine["failed"])
        lock = mine.get("lock") or lock_digest()
        write(base, Record(pid, start, os.getppid(), kind, _clean_role(role), ranks, lock, not ids, ids))
    except (Unusable, OSError) as exc:
        _warn(f"vllm-hotfix guard pid={os.getpid()}: readiness not recorded: {exc}")


def write(base: str, mine: Record) -> None:
    data = mine.text().encode("ascii", "backslashreplace")
    fd = open_directory(base, create=True)
    try:
        final, tmp = f"{mine.pid}{SUFFIX}", f".{mine.pid}.tmp"
        try:
            os.unlink(tmp, dir_fd=fd)  # a crashed writer of a recycled pid
        except FileNotFoundError:
            pass
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            os.write(out, data)
        finally:
            os.close(out)
        os.rename(tmp, final, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)


def lock_digest() -> str:
    """sha256 of HOTFIX_LOCK's bytes ("" without a lock, or when it cannot be read: the verdict says why)."""
    path = os.environ.get(LOCK_ENV, "").strip()
    if not path or "\x00" in path:
        return ""
    try:
        data = read_small(path, LOCK_LIMIT)
    except OSError:
        return ""
    if data is None:
        return ""
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _warn(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        from vllm_hotfix_guard.process import emit

        emit("WARNING", message)


def classify(role: str) -> tuple[str, tuple]:
    """(kind, (rank, dp, tp, pp)) from the guard's role name (process.process_role: vLLM's own process
    names): ``main (...)``; ``ApiServer_N``; ``EngineCore`` / ``EngineCore_DPN``; ``VllmWorker-N`` (N: its
    rank in its engine core's TPxPP world), ``Worker_DPa_PPb_TPc`` (vLLM's title, parts left out when 1),
    ``rank N``; anything else ``other``. A number not known is None."""
    none = (None, None, None, None)
    if role.startswith("main ("):
        return "main", none
    if role.startswith("ApiServer_"):
        return "api", (_int(role[len("ApiServer_"):]), None, None, None)
    if role == "EngineCore":
        return "engine", (0, 0, None, None)
    if role.startswith("EngineCore_DP"):
        dp = _int(role[len("EngineCore_DP"):])
        return ("engine", (dp, dp, None, None)) if dp is not None else ("other", none)
    if role.startswith("VllmWorker-"):
        return "worker", (_int(role[len("VllmWorker-"):]), None, None, None)
    if role.startswith("rank "):
        return "worker", (_int(role[len("rank "):]), None, None, None)
    if role == "Worker" or role.startswith("Worker_"):
        parts = dict(_rank_part(p) for p in role.split("_")[1:])
        tp, pp = parts.get("TP", 0), parts.get("PP", 0)
        return "worker", (tp if pp == 0 and "PP" not in parts else None, parts.get("DP"), tp, pp)
    return "other", none


def _rank_part(part: str) -> tuple[str, int | None]:
    head = part.rstrip("0123456789")
    return head, _int(part[len(head):])


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() and text.isascii() and len(text) < 10 else None


def _clean_role(role: str) -> str:
    text = "".join(c if c.isprintable() and c.isascii() else "?" for c in role)
    return text[:200] or "?"


def _clean_id(value: str) -> str:
    text = "".join(c if c in ID_CHARS else "?" for c in str(value))
    return text[:128] or "?"
