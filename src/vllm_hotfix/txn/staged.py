"""A directory written whole (an OCI layout, a set of manifests): every file goes into a new directory
beside the destination, each with an explicit mode and fsynced, and that directory takes the
destination's place in two renames (the earlier one moved aside, then removed). An error, SIGINT or
SIGTERM before the renames removes the new directory and leaves the destination as it was; one that
comes during them waits until they are done (the new directory stands).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from vllm_hotfix_guard.errors import HotfixError, InvalidInput, Refused, WriteFailed
from vllm_hotfix_guard.txn.atomic import fsync_dir, write_new_file
from vllm_hotfix_guard.txn.fsops import Interrupted, signals_as_exceptions, signals_blocked
from vllm_hotfix_guard.txn.writable import describe

FILE_MODE, DIR_MODE = 0o644, 0o755


def check_replaceable(out_dir: Path, ours: Callable[[Path], bool], *, what: str, hint: str) -> None:
    """Refused (exit 3) unless ``out_dir`` is new, empty, or ``ours(out_dir)`` says it is what this
    command wrote before (``what``: "a bundle written by `hotfix pack`"): never the user's own files. A
    check that cannot read what it looks at (InvalidInput, OSError) counts as not ours."""
    from vllm_hotfix_guard.output import quote_path

    if out_dir.exists() and not out_dir.is_dir():
        raise Refused(f"{quote_path(str(out_dir))}: not a directory; nothing was written", hint=hint)
    if not out_dir.is_dir() or not any(out_dir.iterdir()):
        return
    try:
        mine = ours(out_dir)
    except (InvalidInput, OSError):
        mine = False
    if not mine:
        raise Refused(f"{quote_path(str(out_dir))}: not empty and not {what}; nothing was written", hint=hint)


def write_directory(out_dir: Path, files: dict, *, suffix: str, what: str) -> None:
    """Put ``files`` (relative posix name -> bytes) at ``out_dir`` whole, replacing what is there.
    WriteFailed (exit 6) or 128 + the signal, naming ``what``; either way ``out_dir`` is unchanged and
    nothing is left beside it."""
    out_dir = Path(out_dir)
    staged = None
    try:
        with signals_as_exceptions() as guard:
            out_dir.parent.mkdir(parents=True, exist_ok=True)
            staged = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=suffix, dir=out_dir.parent))
            os.chmod(staged, DIR_MODE)
            made = {staged}
            for name in sorted(files):
                path = staged.joinpath(*name.split("/"))
                for parent in reversed(path.relative_to(staged).parents[:-1]):
                    folder = staged / parent
                    if folder not in made:
                        folder.mkdir()
                        os.chmod(folder, DIR_MODE)
                        made.add(folder)
                write_new_file(path, files[name], FILE_MODE)
            for folder in made:
                fsync_dir(folder)
            with signals_blocked():  # the renames are one step; a signal from here on is only noted
                guard.armed = False
                _swap(staged, out_dir)
                staged = None
    except Interrupted as exc:
        import signal

        raise HotfixError(f"interrupted by {signal.Signals(exc.signum).name}; {out_dir} is unchanged, nothing was "
                          f"written", exit_code=128 + exc.signum) from None
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else out_dir
        raise WriteFailed(f"{where}: cannot write {what}: {describe(exc)}; {out_dir} is unchanged") from None
    finally:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)


def _swap(staged: Path, out_dir: Path) -> None:
    old = None
    if out_dir.is_dir() and any(out_dir.iterdir()):
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}{staged.suffix or '.hotfix-old'}")
        os.rename(out_dir, old)
    elif out_dir.is_dir():
        out_dir.rmdir()
    try:
        os.rename(staged, out_dir)
    except OSError:
        if old is not None:
            os.rename(old, out_dir)
        raise
    fsync_dir(out_dir.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
