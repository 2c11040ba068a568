"""`hotfix compose`: add (or --remove) read-only bind mounts of exported files to a compose service.

The export must carry the guard (txn/exported.refuse_missing_guard, the rule `hotfix k8s` follows too):
without it nothing in a stock image would check the mounts, and the healthcheck could not run; --no-guard
says the image has vllm-hotfix-guard installed itself. --remove takes out what the export mounts, whatever
it carries: removing mounts never needs the guard. --strict (the default, as `hotfix k8s`'s) writes
HOTFIX_STRICT=1 right after HOTFIX_LOCK, and --remove takes it out from there (compose_edit)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from vllm_hotfix.containers import compose_edit, compose_mounts, compose_ready, composefiles
from vllm_hotfix_guard.errors import InvalidInput, UsageError, WriteFailed
from vllm_hotfix_guard.inputs import read_bounded as read_input
from vllm_hotfix.txn.exported import guard_tops, read_exported, read_guard, refuse_missing_guard
from vllm_hotfix_guard.txn.hotfix_lock import load_lock
from vllm_hotfix_guard.output import emit_json, note, say, say_lines
from vllm_hotfix_guard.txn.atomic import atomic_write


def run(*, hotfix_ids=(), service: str, compose_file: Path | None = None, override_file: Path | None = None,
        export_dir: Path, container_site_packages: str | None = None, remove: bool = False,
        readiness: bool = True, with_guard: bool = True, strict: bool = True, dry_run: bool = False,
        as_json: bool = False) -> int:
    lock = load_lock(export_dir / "hotfix.lock")
    hotfixes = lock.select(tuple(hotfix_ids))
    guard = read_guard(export_dir, lock)  # the guard tree, checked against its RECORD and the lock (None: none)
    if not remove:  # what gets bind-mounted is a regular file holding the lock's bytes, never a link out
        from vllm_hotfix.flow.history_line import command_line  # the command as typed, for a hint

        read_exported(export_dir, lock.mounted_files(hotfixes), export_dir / "hotfix.lock")
        refuse_missing_guard(guard, export_dir, with_guard=with_guard, strict=strict, command=command_line())
    base_files = [compose_file] if compose_file is not None else composefiles.discover(Path.cwd(), dict(os.environ))
    if compose_file is None and override_file is None:
        compose_file = _defining(base_files, service)
    else:
        compose_file = compose_file or base_files[0]
    mounts = compose_mounts.mounts_for(lock, hotfixes, compose_mounts.host_source(export_dir, compose_file.parent),
                                container_site_packages, guard=guard_tops(guard), strict=strict)
    path = override_file or compose_file
    original = _read(path, required=override_file is None)
    source = str(path)
    if remove:
        edit = _remove(original, service, mounts, source) if original else compose_mounts.Edit(original, (), ())
    else:
        edit = compose_edit.add_mounts(original, service, mounts, source=source, create_service=override_file is not None)
        if readiness:  # docs/readiness.md: a tmpfs, HOTFIX_READY_DIR and `ready` as the healthcheck
            text, added, why = compose_ready.add_readiness(edit.text, service, source=source)
            edit = compose_mounts.Edit(text, edit.added + added, ())
            if why:
                note(f"WARNING: readiness not added: {why}; {compose_ready.HINT}")
    if container_site_packages is None and edit.added:
        warning = composefiles.site_packages_warning(lock.site_packages, ["docker", "compose", "exec", service])
        if warning:
            note(warning)
    delete = bool(override_file and remove and edit.removed
                  and compose_edit.service_is_empty(edit.text, service, source=source))
    new_text = "" if delete else edit.text
    changed = new_text != original

    if changed and not dry_run:
        try:
            if delete:
                path.unlink()
            else:  # through a symlink: the link stays, its target changes
                atomic_write(Path(os.path.realpath(path)), new_text.encode("utf-8"))
        except OSError as exc:
            raise WriteFailed(f"{path}: cannot write: {exc.strerror}", hint="the file was left unchanged") from None

    load = (composefiles.load_instructions(base_files if compose_file in base_files else [compose_file], override_file,
                                      dict(os.environ)) if override_file and not remove else None)
    if as_json:
        emit_json({"file": source, "service": service, "changed": changed, "dry_run": dry_run,
                   "deleted": delete, "added": list(edit.added), "removed": list(edit.removed), "load": load})
        return 0
    if dry_run:
        diff = difflib.unified_diff(original.splitlines(True), new_text.splitlines(True), source, source)
        text = "".join(diff)
        say_lines(text.rstrip("\n").split("\n") if text else [f"{source}: no change"])
        return 0
    verb = "removed from" if remove else "added to"
    if not changed:
        say(f"{source}: services.{service} already {'clean' if remove else 'up to date'}; nothing changed")
    for line in (*edit.added, *edit.removed):
        say(f"{verb} services.{service} in {source}: {line}")
    if delete:
        say(f"deleted {source}: nothing left in it")
    if load:
        say(load)
    return 0


def _remove(original: str, service: str, mounts, source: str) -> compose_mounts.Edit:
    """Readiness's lines out first (they sit in the environment the mounts' removal may delete), then the mounts."""
    text, removed = compose_ready.remove_readiness(original, service, source=source)
    edit = compose_edit.remove_mounts(text, service, mounts, source=source)
    return compose_mounts.Edit(edit.text, (), removed + edit.removed)


def _defining(files: list[Path], service: str) -> Path:
    """The first of the loaded compose files that defines ``service`` (else the first)."""
    for path in files:
        try:
            text = _read(path, required=True)
        except (InvalidInput, UsageError):
            continue
        if composefiles.defines_service(text, service):
            return path
    return files[0]


def _read(path: Path, *, required: bool) -> str:
    """The file's exact text: no newline translation (CRLF stays CRLF); a regular file, at most
    composefiles.COMPOSE_CAP bytes."""
    try:
        return read_input(path, cap=composefiles.COMPOSE_CAP, what="compose file",
                          hint="hotfix edits compose files as written by people; split this one").decode("utf-8")
    except FileNotFoundError:
        if required:
            raise UsageError(f"{path}: compose file not found", hint="pass --file PATH or --override FILE") from None
        return ""
    except UnicodeDecodeError:
        raise InvalidInput(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
