"""Recorded state of one target: which hotfixes were applied, with which exact bytes.

The record is a claim, never the proof: status is always decided from the files themselves; the
record only tells what *should* be there (and so turns "not applied" into "lost" after a rebuild).
Lives outside the patched tree (paths.TargetDir) and is written by the transaction that changes the
files (txn.journal.commit(state_record=...)), so the record and the files can never disagree.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from vllm_hotfix.errors import InvalidInput
from vllm_hotfix.paths import TargetDir

SCHEMA = 1


@dataclass(frozen=True)
class RecordedFile:
    """One file a recorded hotfix changed: its sha256 before and after."""

    path: str
    before_sha256: str | None
    after_sha256: str | None


@dataclass(frozen=True)
class RecordedHotfix:
    """One applied hotfix as state.json records it."""

    id: str
    version: int | str
    applied_at: str
    source: str  # 'catalog' | 'adhoc'
    patches: tuple[str, ...]  # relative to the target state dir: exact bytes applied, in order
    files: tuple[RecordedFile, ...]
    strip: tuple[int, ...] = ()  # per patch, as applied
    exclude: tuple[tuple[str, ...], ...] = ()  # per patch: the manifest's excluded globs
    backups: str | None = None  # relative to the target state dir: originals, one file per path
    package: str | None = None  # import name the hotfix was applied for
    backup_names: str = "paths"  # "flat": backups/<id>/<flat_name(path)>; "paths" (older records): backups/<id>/<path>

    def to_json(self) -> dict:
        data = asdict(self)
        data.pop("id")
        return data


@dataclass
class TargetState:
    """Mutable view of state.json; load(), change, save()."""

    directory: Path
    target: dict = field(default_factory=dict)
    hotfixes: dict[str, RecordedHotfix] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return self.directory / "state.json"

    @classmethod
    def for_root(cls, root: Path) -> "TargetState":
        return cls.load(TargetDir.of(root).directory)

    @classmethod
    def load(cls, directory: Path) -> "TargetState":
        path = directory / "state.json"
        if not path.exists():
            return cls(directory)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            hotfixes = {
                hid: RecordedHotfix(
                    id=hid,
                    version=entry["version"],
                    applied_at=entry["applied_at"],
                    source=entry.get("source", "catalog"),
                    patches=tuple(entry.get("patches", ())),
                    files=tuple(RecordedFile(**f) for f in entry["files"]),
                    strip=tuple(entry.get("strip", ())),
                    exclude=tuple(tuple(globs) for globs in entry.get("exclude", ())),
                    backups=entry.get("backups"),
                    package=entry.get("package"),
                    backup_names=entry.get("backup_names", "paths"),
                )
                for hid, entry in raw.get("hotfixes", {}).items()
            }
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise InvalidInput(
                f"{path}: recorded state is unreadable ({type(exc).__name__}: {exc})",
                hint="move the file aside; status is decided from the files themselves",
            ) from exc
        return cls(directory, raw.get("target", {}), hotfixes)

    def to_bytes(self) -> bytes:
        """state.json as the transaction writes it."""
        doc = {
            "schema": SCHEMA,
            "target": self.target,
            "hotfixes": {hid: h.to_json() for hid, h in sorted(self.hotfixes.items())},
        }
        return (json.dumps(doc, indent=2) + "\n").encode()

    def save(self) -> None:
        """Write the record alone (no file of the target changes with it)."""
        from vllm_hotfix.txn.atomic import atomic_write

        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, self.to_bytes())

    @staticmethod
    def patch_rel(hotfix_id: str, index: int, version: int | str = "") -> str:
        """Where the exact bytes of a hotfix's patch ``index`` are kept, relative to the state dir.

        Named per version, so an upgrade never overwrites the bytes the current record points at."""
        return f"patches/{hotfix_id}/{version}-{index:02d}.patch" if version != "" else f"patches/{hotfix_id}/{index:02d}.patch"

    @staticmethod
    def backups_rel(hotfix_id: str) -> str:
        """The folder of a hotfix's kept originals, relative to the state dir (RecordedHotfix.backups)."""
        return f"backups/{hotfix_id}"

    @staticmethod
    def backup_rel(hotfix_id: str, path: str) -> str:
        """Where a new record keeps the original of ``path``, relative to the state dir: one flat folder
        per hotfix (a folder per directory of the target cost 300 mkdirs for the real 0.29 -> 0.30 diff)."""
        return f"{TargetState.backups_rel(hotfix_id)}/{flat_name(path)}"

    def _backup_folder(self, recorded: RecordedHotfix) -> Path:
        return self.directory / (recorded.backups or self.backups_rel(recorded.id))

    def backup_path(self, recorded: RecordedHotfix, path: str) -> Path:
        """The kept original of ``path`` for ``recorded``, whichever layout its record was written with."""
        return self._backup_folder(recorded) / (flat_name(path) if recorded.backup_names == "flat" else path)

    def read_backup(self, recorded: RecordedHotfix, file: RecordedFile) -> bytes | None:
        """The kept original of ``file`` when it is there and holds the recorded baseline, else None."""
        import hashlib

        path = self.backup_path(recorded, file.path)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == file.before_sha256 else None

    def read_patch(self, rel: str) -> bytes | None:
        path = self.directory / rel
        return path.read_bytes() if path.exists() else None

    def prune(self) -> None:
        """Remove stored patches and backups that no record points at (left by a transaction that was
        undone, or by a rollback that was killed after its commit point). Best effort: what stays is
        found again next time."""
        try:
            self._prune()
        except OSError:
            pass

    def _prune(self) -> None:
        wanted = {rel for h in self.hotfixes.values() for rel in h.patches}
        patches = self.directory / "patches"
        for stored in sorted(patches.glob("*/*")) if patches.is_dir() else ():
            if stored.relative_to(self.directory).as_posix() not in wanted:
                stored.unlink(missing_ok=True)
        for kind in ("patches", "backups"):
            for folder in sorted((self.directory / kind).glob("*")) if (self.directory / kind).is_dir() else ():
                if folder.name not in self.hotfixes or (kind == "patches" and not any(folder.iterdir())):
                    shutil.rmtree(folder, ignore_errors=True)
        for recorded in self.hotfixes.values():  # a flat folder holds exactly the recorded files' originals
            if recorded.backup_names != "flat":
                continue
            folder = self._backup_folder(recorded)
            wanted_names = {flat_name(f.path) for f in recorded.files}
            for entry in os.scandir(folder) if folder.is_dir() else ():
                if entry.name not in wanted_names:
                    if entry.is_dir(follow_symlinks=False):  # the older layout's folders, from before an upgrade
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)


def flat_name(path: str) -> str:
    """A target-relative path as one file name, reversibly ("/" -> "%2F", "%" -> "%25"); a name too long
    for the file system becomes the sha256 of the path."""
    name = path.replace("%", "%25").replace("/", "%2F")
    if len(name.encode("utf-8", "surrogateescape")) > 240:
        import hashlib

        name = "sha256-" + hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()
    return name


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
