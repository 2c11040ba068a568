"""`hotfix compose`: add (or --remove) read-only bind mounts of exported files to a compose service."""

from __future__ import annotations

import difflib
from pathlib import Path

from vllm_hotfix.containers import compose
from vllm_hotfix.errors import InvalidInput, UsageError, WriteFailed
from vllm_hotfix.containers.lockfile import load_lock
from vllm_hotfix.output import emit_json, say
from vllm_hotfix.txn.atomic import atomic_write


def run(*, hotfix_ids=(), service: str, compose_file: Path, override_file: Path | None = None,
        export_dir: Path, container_site_packages: str | None = None, remove: bool = False,
        dry_run: bool = False, as_json: bool = False) -> int:
    lock = load_lock(export_dir / "hotfix.lock")
    hotfixes = lock.select(tuple(hotfix_ids))
    mounts = compose.mounts_for(lock, hotfixes, compose.host_source(export_dir, compose_file.parent),
                                container_site_packages)
    path = override_file or compose_file
    original = _read(path, required=override_file is None)
    source = str(path)
    if remove:
        edit = compose.remove_mounts(original, service, mounts, source=source) if original else compose.Edit(original, (), ())
    else:
        edit = compose.add_mounts(original, service, mounts, source=source, create_service=override_file is not None)
    delete = bool(override_file and remove and edit.removed
                  and compose.service_is_empty(edit.text, service, source=source))
    new_text = "" if delete else edit.text
    changed = new_text != original

    if changed and not dry_run:
        try:
            if delete:
                path.unlink()
            else:
                atomic_write(path, new_text.encode("utf-8"))
        except OSError as exc:
            raise WriteFailed(f"{path}: cannot write: {exc.strerror}", hint="the file was left unchanged") from None

    if as_json:
        emit_json({"file": source, "service": service, "changed": changed, "dry_run": dry_run,
                   "deleted": delete, "added": list(edit.added), "removed": list(edit.removed)})
        return 0
    if dry_run:
        diff = difflib.unified_diff(original.splitlines(True), new_text.splitlines(True), source, source)
        text = "".join(diff)
        say(text.rstrip("\n") if text else f"{source}: no change")
        return 0
    verb = "removed from" if remove else "added to"
    if not changed:
        say(f"{source}: services.{service} already {'clean' if remove else 'up to date'}; nothing changed")
    for line in (*edit.added, *edit.removed):
        say(f"{verb} services.{service}: {line}")
    if delete:
        say(f"deleted {source}: nothing left in it")
    return 0


def _read(path: Path, *, required: bool) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise UsageError(f"{path}: compose file not found", hint="pass --file PATH or --override FILE") from None
        return ""
    except UnicodeDecodeError:
        raise InvalidInput(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
