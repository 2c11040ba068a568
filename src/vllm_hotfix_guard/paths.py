"""Where vllm-hotfix keeps its own files: the one place that knows the state directory's layout.

Tests point HOTFIX_STATE_DIR at a temp dir. Stdlib only (the in-process guard reads records too).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from vllm_hotfix_guard.settings import (  # noqa: F401 - the names, defined once there
    CONTAINER_LOCK, LOCK_ENV, LOCK_NAME, REQUIRE_ENV, STATE_DIR_ENV, STRICT_ENV)
from vllm_hotfix_guard.values import Value

# The names inside a target's state folder, each defined once: go through TargetDir's properties.
STATE_NAME = "state.json"            # the record (txn/state.py)
HISTORY_NAME = "history.jsonl"       # the changes, one JSON line each (txn/history.py, `hotfix log`)
HISTORY_ROTATED = "history.1.jsonl"  # the lines before those, once history.jsonl was full
JOURNAL_DIR = "journal"              # an in-flight transaction (txn/journal.py writes it, txn/recovery.py reads it)
JOURNAL_NAME = "journal.json"        # inside a journal folder: the transaction's journal
JOURNAL_BACKUPS = "backups"          # inside a journal folder: the originals of the files it changes
RECORD_BACKUP = "record"             # in JOURNAL_BACKUPS: the state folder's own files (record-N after the first)
MUTEX_NAME = "lock"                  # the target mutex's file (txn/mutex.py)
GONE_NAME = "gone.json"              # `hotfix gc`: when the target was first seen missing (flow/gone_targets.py)
BACKUPS_DIR = "backups"              # backups/<id>/: a hotfix's kept originals
PATCHES_DIR = "patches"              # patches/<id>/: the exact patch bytes a hotfix applied

# Size caps for the files we read back: far above what we write, far below what hurts a process.
STATE_LIMIT = 16 << 20
JOURNAL_LIMIT = 64 << 20   # a journal of the real 0.29 -> 0.30 diff (1,106 files) is ~0.5 MB
LOCK_LIMIT = 4 << 20


def state_dir() -> Path:
    """Root of recorded state, journals and backups (never inside the patched package). Always absolute:
    a relative HOTFIX_STATE_DIR is taken against the current directory once, here, so nothing recorded
    or opened later depends on where the process is; a relative XDG_STATE_HOME is ignored (XDG spec)."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(os.path.abspath(explicit))
    return _xdg("XDG_STATE_HOME", Path(".local") / "state") / "vllm-hotfix"


def _xdg(variable: str, default: Path) -> Path:
    value = os.environ.get(variable)
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / default


def targets_dir() -> Path:
    return state_dir() / "targets"


def feeds_dir() -> Path:
    """Subscribed catalogs, feeds/<NAME>/ (what is inside: catalog/feeds.py)."""
    return state_dir() / "feeds"


class TargetDir(Value):
    """The state of one target (the directory patches are applied to), keyed by its real path: the ONE
    owner of its layout, every path into it is one of these properties or relative names.

    ``state.json`` (the record), ``history.jsonl`` (+ ``history.1.jsonl``: the changes), ``journal/`` (an
    in-flight transaction: ``journal.json`` and its ``backups/``), ``lock`` (the target mutex), ``gone.json``
    (gc's "first seen missing"), ``backups/<id>/`` (originals: ``backups_rel`` / ``backup_rel``) and
    ``patches/<id>/`` (the exact patch bytes applied: ``patch_rel``); the relative names are what a
    record stores (txn.state.TargetState reads the files they name)."""

    directory: Path

    @classmethod
    def of(cls, target_root: Path | str) -> "TargetDir":
        real = os.path.realpath(target_root)
        key = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]  # the path's bytes, whatever the locale
        return cls(targets_dir() / f"{Path(real).name}-{key}")

    @property
    def state_file(self) -> Path:
        return self.directory / STATE_NAME

    @property
    def history_file(self) -> Path:
        """history.jsonl: one line per change (txn/history.py), written inside the change's transaction."""
        return self.directory / HISTORY_NAME

    @property
    def history_rotated(self) -> Path:
        return self.directory / HISTORY_ROTATED

    @property
    def own_files(self) -> tuple[Path, ...]:
        """The state folder's files a transaction's journal may restore (the record and the history)."""
        return (self.state_file, self.history_file, self.history_rotated)

    @property
    def journal(self) -> Path:
        return self.directory / JOURNAL_DIR

    @property
    def journal_file(self) -> Path:
        """The pending transaction's journal (``journal_file_in(self.journal)``)."""
        return journal_file_in(self.journal)

    @property
    def lock_file(self) -> Path:
        """The target mutex's file (txn/mutex.py)."""
        return self.directory / MUTEX_NAME

    @property
    def gone_file(self) -> Path:
        """Written by `hotfix gc` when the target is first seen missing (flow/gone_targets.py)."""
        return self.directory / GONE_NAME

    @property
    def backups(self) -> Path:
        """The folder of every hotfix's kept originals (``backups_rel`` names one hotfix's inside it)."""
        return self.directory / BACKUPS_DIR

    @property
    def patches(self) -> Path:
        return self.directory / PATCHES_DIR

    @staticmethod
    def patch_rel(hotfix_id: str, index: int, version: int | str = "") -> str:
        """Where the exact bytes of a hotfix's patch ``index`` are kept, relative to the state dir.

        Named per version, so an upgrade never overwrites the bytes the current record points at."""
        name = f"{version}-{index:02d}.patch" if version != "" else f"{index:02d}.patch"
        return f"{PATCHES_DIR}/{hotfix_id}/{name}"

    @staticmethod
    def backups_rel(hotfix_id: str) -> str:
        """The folder of a hotfix's kept originals, relative to the state dir (RecordedHotfix.backups)."""
        return f"{BACKUPS_DIR}/{hotfix_id}"

    @staticmethod
    def backup_rel(hotfix_id: str, path: str) -> str:
        """Where a new record keeps the original of ``path``, relative to the state dir: one flat folder
        per hotfix (a folder per directory of the target cost 300 mkdirs for the real 0.29 -> 0.30 diff)."""
        return f"{TargetDir.backups_rel(hotfix_id)}/{flat_name(path)}"

    def check(self, *inside: str) -> None:
        """WriteFailed (exit 6) unless the state directory, targets/, this target's folder and every folder
        on the way to each of ``inside`` (relative to it: ``"journal/backups"``, ``"backups/<id>"``) can be
        trusted: checked before anything in them is read, replayed or deleted."""
        folders = [state_dir(), targets_dir(), self.directory]
        for rel in inside:
            parts = rel.split("/")
            folders += [self.directory.joinpath(*parts[:end]) for end in range(1, len(parts) + 1)]
        check_trusted(*dict.fromkeys(folders))

    def make(self, *inside: str) -> None:
        """``make_target_dir``, then each folder of ``inside`` (mode 0o755 whatever the umask), checked."""
        make_target_dir(self)
        for rel in inside:
            parts = rel.split("/")
            for end in range(1, len(parts) + 1):
                make_state_dir(self.directory.joinpath(*parts[:end]))
        self.check(*inside)

    def pending(self) -> bool:
        """An interrupted transaction waits for recovery."""
        return os.path.lexists(self.journal_file)


def journal_file_in(journal_dir: Path | str) -> Path:
    """The journal of a journal folder (a target's ``TargetDir.journal``, or any folder txn/journal.commit
    is given)."""
    return Path(journal_dir) / JOURNAL_NAME


def journal_backups_in(journal_dir: Path | str) -> Path:
    """The folder of a journal's originals (``backups/N``, ``backups/record``)."""
    return Path(journal_dir) / JOURNAL_BACKUPS


def all_target_dirs() -> list[TargetDir]:
    """Every target that has state (records, a journal) in this state directory (WriteFailed when the
    state directory is one another user could have written: ``check_trusted``)."""
    check_trusted(state_dir(), targets_dir())
    try:
        names = sorted(os.listdir(targets_dir()))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        from vllm_hotfix_guard.errors import WriteFailed

        raise WriteFailed(f"{targets_dir()}: cannot list the recorded targets: {exc.strerror or exc}",
                          hint=f"run hotfix as the user who owns the state directory, or set {STATE_DIR_ENV}") from None
    return [TargetDir(targets_dir() / name) for name in names]


def flat_name(path: str) -> str:
    """A target-relative path as one file name, reversibly ("/" -> "%2F", "%" -> "%25"); a name too long
    for the file system becomes the sha256 of the path."""
    name = path.replace("%", "%25").replace("/", "%2F")
    if len(name.encode("utf-8", "surrogateescape")) > 240:
        name = "sha256-" + hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()
    return name


def read_small_file(path: str | os.PathLike, limit: int) -> bytes | None:
    """The bytes of a small regular file that is input and may simply be wrong (a marker in the state
    directory, a checkout's version file): ``inputs.read_bounded`` without following a symlink; None for
    anything it refuses (absent, a link, a FIFO or device, over ``limit``, unreadable)."""
    from vllm_hotfix_guard.errors import InvalidInput
    from vllm_hotfix_guard.inputs import read_bounded

    try:
        return read_bounded(path, cap=limit, what="file", follow_symlinks=False)
    except (OSError, InvalidInput):
        return None


# -- trust: the state directory steers writes and deletes, so another user must not have written it ----

STATE_DIR_MODE = 0o755  # what we create: never writable by group or others, whatever the umask
STATE_FILE_MODE = 0o644  # the files we write there (txn.atomic.atomic_write sets it explicitly)


def trust_problem(directory: Path | str) -> str | None:
    """Why a directory of the state tree cannot be trusted (None: it can, or it does not exist yet): a
    symbolic link, not a directory, owned by another user than this one or root, writable by group or
    others (another local user could plant records, journals or links there)."""
    try:
        info = os.lstat(directory)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:  # a folder on the way this user may not search
        return f"cannot be looked at by this user ({exc.strerror or exc})"
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid not in (os.geteuid(), 0):
        return f"is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}) or root"
    if info.st_mode & 0o022:
        who = "group and others" if info.st_mode & 0o022 == 0o022 else "group" if info.st_mode & 0o020 else "others"
        return f"is writable by {who} (mode {info.st_mode & 0o7777:o})"
    return None


def owner_problem(info: os.stat_result) -> str | None:
    """Why a file of the state tree cannot be trusted by who wrote it: owned by another user than this one
    or root (None: it can). The one rule for the files, as ``trust_problem`` is for the folders."""
    if info.st_uid not in (os.geteuid(), 0):
        return f"is owned by uid {info.st_uid}, not by this user (uid {os.geteuid()}) or root"
    return None


def check_trusted(*directories: Path | str) -> None:
    """WriteFailed (exit 6) naming the first directory of the state tree that cannot be trusted."""
    from vllm_hotfix_guard.errors import WriteFailed

    for directory in directories:
        problem = trust_problem(directory)
        if problem is not None and problem.startswith("cannot be looked at"):
            raise WriteFailed(f"{directory}: {problem}", hint=f"run hotfix as the user the state directory belongs to, "
                              f"or set {STATE_DIR_ENV} to a directory of your own")
        if problem is not None:
            raise WriteFailed(f"{directory}: {problem}; vllm-hotfix keeps records, journals and backups only where "
                              f"no other user can write", hint=f"`chmod go-w {directory}` and own it (`chown`), or set "
                              f"{STATE_DIR_ENV} to a directory of your own (docs/applying.md: Running with a shared state directory)")


def make_state_dir(directory: Path | str) -> None:
    """Create ``directory`` and any missing parent with mode exactly 0o755, whatever the umask (a plain
    mkdir under umask 000 makes 0777, under 002 0775: a folder another user could plant a journal in).
    An existing one is left as it is (the trust check judges it). OSError when it cannot be made."""
    directory = os.fspath(directory)
    if os.path.isdir(directory):
        return
    parent = os.path.dirname(directory)
    if parent and parent != directory and not os.path.isdir(parent):
        make_state_dir(parent)
    try:
        os.mkdir(directory, STATE_DIR_MODE)
    except FileExistsError:
        return
    if stat.S_IMODE(os.lstat(directory).st_mode) != STATE_DIR_MODE:
        os.chmod(directory, STATE_DIR_MODE)


def make_target_dir(tdir: TargetDir) -> None:
    """Create the state directory, targets/ and the target's folder (mode 0o755 each) where they are
    missing, then check them. OSError when one cannot be created (the caller says why, exit 6)."""
    for directory in (state_dir(), targets_dir(), tdir.directory):
        make_state_dir(directory)
    check_trusted(state_dir(), targets_dir(), tdir.directory)


def cache_dir() -> Path:
    explicit = os.environ.get("HOTFIX_CACHE_DIR")
    if explicit:
        return Path(os.path.abspath(explicit))
    return _xdg("XDG_CACHE_HOME", Path(".cache")) / "vllm-hotfix"


def read_own_file(path: Path | str, *, limit: int, owned: bool = False) -> bytes | None:
    """The bytes of one of our own files (a record, a journal, a lock, a kept original) read back as input:
    ``inputs.read_bounded`` without following a symlink; None when it does not exist. ``owned``: a file of
    the state tree (journal, record, kept patch), refused (WriteFailed, exit 6) unless this user or root
    owns it (``owner_problem``), checked on the open file."""
    from vllm_hotfix_guard.inputs import read_bounded

    try:
        return read_bounded(path, cap=limit, what="file vllm-hotfix writes", follow_symlinks=False,
                            hint="this is not a file vllm-hotfix wrote; move it aside",
                            check=_owned_check(path) if owned else None)
    except FileNotFoundError:
        return None


def _owned_check(path: Path | str):
    def check(info: os.stat_result) -> None:
        problem = owner_problem(info)
        if problem is not None:
            from vllm_hotfix_guard.errors import WriteFailed

            raise WriteFailed(f"{path}: {problem}; vllm-hotfix uses a record, journal or kept patch only when it "
                              f"wrote it itself", hint="another user may have planted it: inspect it, then move it "
                                                       "aside (docs/trust.md: Trust model)")
    return check
