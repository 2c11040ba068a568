"""The files of an export (what `hotfix export` wrote beside ``hotfix.lock``), read back as input: the one
reader compose, k8s and pack use before the bytes go into a bind mount, a ConfigMap or an image."""

from __future__ import annotations

from pathlib import Path

from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.settings import LOCK_NAME
from vllm_hotfix_guard.output import quote_path
from vllm_hotfix_guard.txn.hotfix_lock import LockedFile, guard_path_problem


def read_exported(export_dir: Path, files: tuple[LockedFile, ...], lock_path: Path) -> dict[str, bytes]:
    """The exported bytes of each of ``files`` (``LockedFile.export``, relative to ``export_dir``), by export
    path, read as input and checked against the lock's sha256 before they go into a ConfigMap, a bind mount,
    a bundle or an image: each is a regular file reached through real directories below ``export_dir`` (a
    symbolic link or a device on the way is InvalidInput), read without blocking and capped
    (``inputs.read_bounded``, EXPORT_FILE_LIMIT); a file that does not hold the lock's bytes is InvalidInput
    (exit 8) naming it. The one reader of an export's files for every command."""
    import hashlib
    import os
    import stat

    from vllm_hotfix_guard.inputs import EXPORT_FILE_LIMIT, read_bounded
    from vllm_hotfix_guard.output import quote_path

    hint = f"re-run `hotfix export` into {quote_path(str(export_dir))}"
    found: dict[str, bytes] = {}
    for locked in files:
        parts = locked.export.split("/")
        for depth in range(1, len(parts)):
            parent = Path(export_dir).joinpath(*parts[:depth])
            try:
                mode = os.lstat(parent).st_mode
            except OSError as exc:
                raise InvalidInput(f"{quote_path(str(parent))}: {exc.strerror} (on the way to {quote_path(locked.export)}, "
                                   f"listed in {LOCK_NAME})", hint=hint) from None
            if not stat.S_ISDIR(mode):
                what = "a symbolic link" if stat.S_ISLNK(mode) else "not a directory"
                raise InvalidInput(f"{quote_path(str(parent))}: {what}; an export is read only through its own "
                                   "directories", hint=hint)
        path = Path(export_dir).joinpath(*parts)
        try:
            data = read_bounded(path, cap=EXPORT_FILE_LIMIT, what="exported file", follow_symlinks=False, hint=hint)
        except OSError as exc:
            raise InvalidInput(f"{quote_path(str(path))}: listed in {quote_path(str(lock_path))} but not readable: "
                               f"{exc.strerror}", hint=hint) from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != locked.sha256:
            raise InvalidInput(f"{quote_path(str(path))}: does not hold the bytes {quote_path(str(lock_path))} names "
                               f"(sha256 {digest[:12]}, expected {locked.sha256[:12]})", hint=hint)
        found[locked.export] = data
    return found


def read_guard(export_dir: Path, lock) -> dict[str, bytes] | None:
    """The guard tree `hotfix export` wrote (EXPORT/guard/site-packages), by path inside site-packages, each
    file read as input and checked against its distribution's RECORD (sha256 and size; nothing more, nothing
    less on disk) and against ``lock`` (the export's: its ``guard`` names every file and its sha256, so the
    lock's signature covers the guard; a lock naming none, or other files, is refused); every path inside the
    guard's own package or dist-info (hotfix_lock.guard_path_problem: no sitecustomize.py, no .pth, nothing
    over vLLM's files). None when the export has no guard (an older export, or `--no-guard`)."""
    import base64
    import csv
    import hashlib
    import io
    import os
    import stat

    from vllm_hotfix_guard.inputs import EXPORT_FILE_LIMIT, read_bounded

    site = Path(export_dir) / "guard" / "site-packages"
    hint = f"re-run `hotfix export` into {quote_path(str(export_dir))}"
    try:
        tops = sorted(os.listdir(site))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidInput(f"{quote_path(str(site))}: {exc.strerror}", hint=hint) from None
    infos = [t for t in tops if t.endswith(".dist-info")]
    if len(infos) != 1:
        raise InvalidInput(f"{quote_path(str(site))}: expected one .dist-info, found {len(infos)}", hint=hint)
    record = read_bounded(site / infos[0] / "RECORD", cap=EXPORT_FILE_LIMIT, what="guard RECORD",
                          follow_symlinks=False, hint=hint)
    found: dict[str, bytes] = {}
    for row in csv.reader(io.StringIO(record.decode("utf-8"))):
        if len(row) != 3 or not row[0] or row[0].startswith(("/", "../")) or "/../" in row[0]:
            raise InvalidInput(f"{quote_path(str(site / infos[0] / 'RECORD'))}: not a RECORD line: {row!r}", hint=hint)
        rel, digest, size = row
        if guard_path_problem(rel):
            raise InvalidInput(f"{quote_path(str(site / rel))}: {guard_path_problem(rel)}; a guard holds nothing else",
                               hint=hint)
        path = site.joinpath(*rel.split("/"))
        data = read_bounded(path, cap=EXPORT_FILE_LIMIT, what="guard file", follow_symlinks=False, hint=hint)
        if rel.endswith(".dist-info/RECORD") and not digest:
            found[rel] = data
            continue
        actual = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if actual != digest or str(len(data)) != size:
            raise InvalidInput(f"{quote_path(str(path))}: does not hold the bytes its RECORD names", hint=hint)
        found[rel] = data
    on_disk = set()
    for folder, dirs, files in os.walk(site):
        for name in dirs:
            if stat.S_ISLNK(os.lstat(os.path.join(folder, name)).st_mode):
                raise InvalidInput(f"{quote_path(os.path.join(folder, name))}: a symbolic link in the guard tree", hint=hint)
        on_disk.update(os.path.relpath(os.path.join(folder, n), site).replace(os.sep, "/") for n in files)
    extra = sorted(on_disk - set(found))
    if extra:
        raise InvalidInput(f"{quote_path(str(site / extra[0]))}: in the guard tree but not in its RECORD", hint=hint)
    check_locked_guard(found, lock, source=quote_path(str(site)), hint=hint)
    return found


def check_locked_guard(found: dict[str, bytes], lock, *, source: str, hint: str) -> None:
    """The guard's files (path inside site-packages -> bytes) are exactly the ones ``lock.guard`` names, with
    their sha256 (InvalidInput otherwise): what a signature of the lock vouches for is what is delivered."""
    import hashlib

    if lock.guard is None:
        raise InvalidInput(f"{source}: the lock names no guard files, so its signature does not cover this guard",
                           hint=hint)
    named = dict(lock.guard)
    for rel in sorted(set(found) | set(named)):
        if rel not in named:
            raise InvalidInput(f"{source}: {quote_path(rel)} is not a guard file the lock names", hint=hint)
        if rel not in found:
            raise InvalidInput(f"{source}: {quote_path(rel)}, a guard file the lock names, is missing", hint=hint)
        if hashlib.sha256(found[rel]).hexdigest() != named[rel]:
            raise InvalidInput(f"{source}: {quote_path(rel)} differs from the guard file the lock names "
                               f"(sha256 {named[rel][:12]})", hint=hint)


def guard_tops(guard: dict[str, bytes] | None) -> tuple[str, ...]:
    """The directories a guard tree adds to site-packages (the package, its .dist-info), sorted."""
    return tuple(sorted({rel.split("/", 1)[0] for rel in guard or ()}))


def refuse_missing_guard(guard: dict[str, bytes] | None, source: Path, *, with_guard: bool, strict: bool,
                         command: str, bundled: bool = False) -> None:
    """The guard travels with the files (issue 43), the one rule of `hotfix k8s` and `hotfix compose`: an export
    or bundle without it is refused (exit 3) unless --no-guard says the image has the guard installed itself,
    and then only without strict mode (a stock image would run no guard, and strict mode would stop nothing);
    --no-guard with one that carries the guard is a usage error (exit 2): the guard it carries is mounted all
    the same. ``strict``: the command's --strict/--no-strict. ``command``: the command as the user typed it
    (flow/history_line.command_line); the hint gives it back with the opt-out, to run as pasted."""
    from vllm_hotfix_guard.errors import Refused, UsageError

    where = quote_path(str(source))
    if guard is not None and not with_guard:
        raise UsageError(f"--no-guard: {where} carries the guard, which is mounted with the files",
                         hint="drop --no-guard")
    if guard is not None:
        return
    again = ("pack it again from an export that has the guard (`hotfix export` without --no-guard, then "
             "`hotfix pack`)") if bundled else "re-run `hotfix export` into it (it writes the guard)"
    if with_guard:
        raise Refused(f"{where} carries no guard: in a stock image nothing would check the mounted files, and the "
                      "readiness check could not run", hint=f"{again}, or, when the image has vllm-hotfix-guard "
                                                            f"installed itself: {command} --no-guard --no-strict")
    if strict:
        raise Refused(f"{where} carries no guard (no guard/site-packages): strict mode would stop nothing in an "
                      f"image without vllm-hotfix-guard", hint=f"{again}, or turn strict mode off: {command} --no-strict")
