"""Recorded state of one target: which hotfixes were applied, with which exact bytes.

The record is a claim, never the proof: status is always decided from the files themselves; the
record only tells what *should* be there (and so turns "not applied" into "lost" after a rebuild).
Lives outside the patched tree (paths.TargetDir) and is written by the transaction that changes the
files (txn.journal.commit(state_record=...)), so the record and the files can never disagree.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

from vllm_hotfix_guard.core.data import load_json
from vllm_hotfix_guard.core.docfields import Fields, is_hex64
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.txn.lockcode import read_record_code, record_code_json
from vllm_hotfix_guard.paths import STATE_LIMIT, TargetDir, flat_name, read_own_file, trust_problem

SCHEMA = 2  # 2: "series", an ordered list (1: "hotfixes", an object keyed by id; still read)
SOURCES = ("catalog", "adhoc")
BACKUP_NAMES = ("flat", "paths")


@dataclass(frozen=True)
class RecordedFile:
    """One file a recorded hotfix changed: its sha256 just before and just after it (in series order:
    "before" is what the hotfixes under it left, so a file's records chain from the pristine bytes)."""

    path: str
    before_sha256: str | None
    after_sha256: str | None


_FILE_FIELDS = tuple(f.name for f in fields(RecordedFile))


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
    patch_sha256: tuple[str, ...] = ()  # per patch: sha256 of the kept bytes (a catalog patch's pin); () in older records
    fixed_in: str | None = None  # the manifest's release with the fix, for this distribution (judged without a catalog)
    versions: str | None = None  # the manifest's PEP 440 range for this distribution
    catalog: str | None = None  # the --catalog / HOTFIX_CATALOG directory its manifest came from (None: built-in)
    code: tuple | None = None  # txn/lockcode.RecordCode: the code names of its Python files (None: older records)
    seal: str | None = field(default=None, compare=False)  # as read: ``seal_of`` when hotfix wrote it (None: older)

    def to_json(self) -> dict:
        """What ``dataclasses.asdict`` gives, built in one pass (asdict copies every string of every
        file's record recursively: ~1,100 files take it several ms)."""
        doc = {f.name: getattr(self, f.name) for f in fields(self)}
        doc["files"] = tuple({name: getattr(f, name) for name in _FILE_FIELDS} for f in self.files)
        doc["code"] = record_code_json(self.code)
        return doc

    def steps(self) -> tuple[tuple[str, str | None, str | None], ...]:
        """(path, sha256 before, sha256 after) per file: this hotfix's part of each file's series."""
        return tuple((f.path, f.before_sha256, f.after_sha256) for f in self.files)


@dataclass
class TargetState:
    """Mutable view of state.json: ``load()`` reads it, a change is made in memory, and ``to_bytes()`` is
    what flow/transaction.run commits through the journal (there is no save: only a transaction writes
    the record). ``hotfixes`` is the series: applied order."""

    directory: Path
    target: dict = field(default_factory=dict)
    hotfixes: dict[str, RecordedHotfix] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        """The record's file: ``TargetDir.state_file`` of this directory."""
        return TargetDir(self.directory).state_file

    @classmethod
    def for_root(cls, root: Path) -> "TargetState":
        return cls.load(TargetDir.of(root).directory)

    @classmethod
    def load(cls, directory: Path) -> "TargetState":
        """The record of one target (empty when there is none), validated: InvalidInput (exit 8) names
        the file and the key path of the first problem; a record that fails steers nothing."""
        path = TargetDir(Path(directory)).state_file
        TargetDir(Path(directory)).check()  # a record steers writes and deletes: never one another user wrote
        try:
            data = read_own_file(path, limit=STATE_LIMIT, owned=True)
        except OSError as exc:
            import errno

            denied = exc.errno in (errno.EACCES, errno.EPERM)
            raise InvalidInput(f"{path}: cannot read the recorded state: {exc.strerror}",
                               hint="fix its permissions (the user running hotfix must read it)" if denied
                               else CORRUPT_HINT.format(folder=directory)) from None
        if data is None:
            return cls(Path(directory))
        try:
            target, hotfixes = parse_state(data, str(path))
        except InvalidInput as exc:  # a corrupt record: not a permission problem (issue 45)
            raise InvalidInput(exc.message, hint=exc.hint or CORRUPT_HINT.format(folder=directory)) from None
        return cls(Path(directory), target, hotfixes)

    def series(self) -> list[tuple[str, tuple]]:
        """[(hotfix id, its steps)] in applied order: the input of core.verdict.series_checks."""
        return [(hid, h.steps()) for hid, h in self.hotfixes.items()]

    def to_bytes(self) -> bytes:
        """state.json as the transaction writes it (the one writer of the format). Each record that knows
        its patches' sha256 is sealed (``seal_of``): every transaction derives the whole series it writes
        from the kept originals and patches first (flow/plan.propose, flow/rollback_change: txn/judgement), so a
        seal says "this record is what hotfix derived"; a hand edit of any sealed field breaks it."""
        import json

        series = []
        for h in self.hotfixes.values():
            doc = h.to_json()
            doc["seal"] = seal_of(self.target, h) if h.patch_sha256 else None
            series.append(doc)
        doc = {"schema": SCHEMA, "target": self.target, "series": series}
        return (json.dumps(doc, indent=2) + "\n").encode()

    def _backup_folder(self, recorded: RecordedHotfix) -> Path:
        return self.directory / (recorded.backups or TargetDir.backups_rel(recorded.id))

    def backup_path(self, recorded: RecordedHotfix, path: str) -> Path:
        """The kept original of ``path`` for ``recorded``, whichever layout its record was written with."""
        return self._backup_folder(recorded) / (flat_name(path) if recorded.backup_names == "flat" else path)

    def read_backup(self, recorded: RecordedHotfix, file: RecordedFile) -> bytes | None:
        """The kept original of ``file`` when it is there and holds the recorded baseline, else None."""
        import hashlib

        path = self.backup_path(recorded, file.path)
        TargetDir(self.directory).check(os.path.relpath(path.parent, self.directory).replace(os.sep, "/"))
        try:  # a hard link of the original may be owned by the original's owner: trusted by its bytes alone
            data = read_own_file(path, limit=BACKUP_LIMIT)
        except (OSError, InvalidInput):
            return None
        return data if data is not None and hashlib.sha256(data).hexdigest() == file.before_sha256 else None

    def read_patch(self, rel: str) -> bytes | None:
        """The kept bytes of a recorded patch (``rel`` was validated as patches/<id>/<name>), or None;
        WriteFailed (exit 6) when its folder or the file itself is not this user's or root's."""
        TargetDir(self.directory).check(rel.rsplit("/", 1)[0])
        try:
            return read_own_file(self.directory / rel, limit=PATCH_LIMIT, owned=True)
        except OSError:
            return None

    def prune(self) -> None:
        """Remove stored patches and backups that no record points at (left by a transaction that was
        undone, or by a rollback that was killed after its commit point). Best effort: what stays is
        found again next time."""
        try:
            self._prune()
        except OSError:
            pass

    def _prune(self) -> None:
        """Only ever inside this state directory: links are removed as links, never followed (a planted
        ``backups/<id> -> /tmp/v`` loses the link, /tmp/v keeps its files)."""
        wanted = {rel for h in self.hotfixes.values() for rel in h.patches}
        tdir = TargetDir(self.directory)
        for base in (tdir.patches, tdir.backups):
            if not _real_dir(base) or trust_problem(base) is not None:
                continue  # nothing is deleted in a folder another user could have written
            for folder in _entries(base):
                if not _real_dir(folder):
                    os.unlink(folder)  # a stray file or link where a hotfix's folder belongs
                elif folder.name not in self.hotfixes:
                    shutil.rmtree(folder, ignore_errors=True)  # rmtree never follows links inside
                elif base == tdir.patches:
                    for stored in _entries(folder):
                        if stored.relative_to(self.directory).as_posix() not in wanted:
                            _remove(stored)
                    if not any(os.scandir(folder)):
                        os.rmdir(folder)
        for recorded in self.hotfixes.values():  # a flat folder holds exactly the recorded files' originals
            folder = self._backup_folder(recorded)
            if recorded.backup_names != "flat" or not _real_dir(folder):
                continue
            wanted_names = {flat_name(f.path) for f in recorded.files}
            for entry in _entries(folder):
                if entry.name not in wanted_names:
                    _remove(entry)  # the older layout's folders, from before an upgrade, too


def _real_dir(path: Path) -> bool:
    """A directory, and not through a symbolic link."""
    import stat

    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _entries(folder: Path) -> list[Path]:
    return sorted(Path(entry.path) for entry in os.scandir(folder))


def _remove(path: Path) -> None:
    if _real_dir(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


CORRUPT_HINT = ("the record cannot be used: restore the files (reinstall the package / git checkout), then move the "
                "state folder aside ({folder}) and apply again")
SEAL_FORMAT = "vllm-hotfix-seal/1"
SEALED_TARGET = ("root", "package", "distribution", "version", "kind", "commit")


def seal_of(target: dict, recorded: RecordedHotfix) -> str:
    """The sha256 of one record's claims in a canonical form (JSON, sorted keys, ASCII): the target it was
    made on (root, release, commit), its id and version, the sha256 and parse options of every kept patch,
    each file's sha256 before and after it, and the range and fix release it was applied under. What the
    guard checks instead of deriving the series (txn/judgement.py, docs/design.md): a record edited after
    hotfix wrote it does not carry the seal of what it says."""
    import hashlib
    import json

    claims = [SEAL_FORMAT, {k: target.get(k) for k in SEALED_TARGET},
              {"id": recorded.id, "version": recorded.version, "source": recorded.source, "package": recorded.package,
               "patches": list(recorded.patches), "patch_sha256": list(recorded.patch_sha256),
               "strip": list(recorded.strip), "exclude": [list(g) for g in recorded.exclude],
               "fixed_in": recorded.fixed_in, "versions": recorded.versions,
               "files": [[f.path, f.before_sha256, f.after_sha256] for f in recorded.files]}]
    if recorded.code is not None:  # sealed when kept (a record from before it keeps its seal)
        claims[2]["code"] = record_code_json(recorded.code)
    text = json.dumps(claims, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


PATCH_LIMIT = 512 << 20   # a kept patch: the real 0.29 -> 0.30 diff is 8.5 MB, seed 004's v6 ~1 MB
BACKUP_LIMIT = 256 << 20  # a kept original (vLLM's largest source file is ~1 MB)


def parse_state(data: bytes, source: str) -> tuple[dict, dict[str, RecordedHotfix]]:
    """(target, {id: RecordedHotfix} in series order) from state.json's bytes: the one reader of the
    format (status, apply, rollback, recover, gc and the guard all load records through here)."""
    f = Fields(source)
    doc = f.mapping(load_json(data, source), "")
    schema = f.get(doc, "", "schema", int)
    if schema not in (1, SCHEMA):
        raise f.fail("schema", f"unsupported record schema {schema} (this vllm-hotfix reads 1 and {SCHEMA})")
    target = _target(f, f.get(doc, "", "target", dict, required=False, default={}))
    if schema == 1:
        raw = f.get(doc, "", "hotfixes", dict, required=False, default={})
        entries = [(f"hotfixes.{hid}", dict(entry, id=hid) if isinstance(entry, dict) else entry)
                   for hid, entry in raw.items()]
        entries.sort(key=lambda item: (str(item[1].get("applied_at", "")) if isinstance(item[1], dict) else "", item[0]))
    else:
        entries = [(f"series[{i}]", entry) for i, entry in enumerate(f.get(doc, "", "series", list))]
    hotfixes: dict[str, RecordedHotfix] = {}
    for where, entry in entries:
        recorded = _hotfix(f, entry, where)
        if recorded.id in hotfixes:
            raise f.fail(f"{where}.id", f"{recorded.id!r} is recorded twice")
        hotfixes[recorded.id] = recorded
    return target, hotfixes


def _target(f: Fields, doc: dict) -> dict:
    out = {}
    for key in ("root", "package", "distribution", "version", "kind", "python"):
        value = f.text(doc, "target", key, required=False)
        if value is not None:
            out[key] = value
    if "root" in out and not os.path.isabs(out["root"]):
        raise f.fail("target.root", f"expected an absolute path, got {out['root']!r}")
    commit = f.commit(doc, "target", "commit", required=False)
    if commit is not None:
        out["commit"] = commit
    return out  # target.package names what was resolved (a checkout's folder name at worst): text, never imported


def _hotfix(f: Fields, entry, where: str) -> RecordedHotfix:
    entry = f.mapping(entry, where)
    hotfix_id = f.record_id(entry.get("id"), f.at(where, "id"))
    source = f.text(entry, where, "source", required=False) or "catalog"
    if source not in SOURCES:
        raise f.fail(f.at(where, "source"), f"expected one of {', '.join(SOURCES)}, got {source!r}")
    patches = []
    for i, rel in enumerate(f.items(entry.get("patches", []), f.at(where, "patches"))):
        at = f"{f.at(where, 'patches')}[{i}]"
        folder, _, name = (rel if isinstance(rel, str) else "").rpartition("/")
        if folder != f"patches/{hotfix_id}" or not name or name in (".", "..") or "\\" in name or "\x00" in name:
            raise f.fail(at, f"expected patches/{hotfix_id}/NAME, got {rel!r}")
        patches.append(rel)
    files, seen = [], set()
    for i, item in enumerate(f.items(entry.get("files"), f.at(where, "files"))):
        at = f"{f.at(where, 'files')}[{i}]"
        item = f.mapping(item, at)
        path = f.relpath(item, at, "path")
        if path in seen:
            raise f.fail(f.at(at, "path"), f"{path!r} is listed twice")
        seen.add(path)
        # before == after is read as written: txn/judgement says why such a record proves nothing (unknown)
        files.append(RecordedFile(path, f.sha256(item, at, "before_sha256", required=False),
                                  f.sha256(item, at, "after_sha256", required=False)))
    strip = tuple(f.items(entry.get("strip", []), f.at(where, "strip")))
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 64 for n in strip):
        raise f.fail(f.at(where, "strip"), "expected small non-negative integers")
    exclude = []
    for i, globs in enumerate(f.items(entry.get("exclude", []), f.at(where, "exclude"))):
        globs = f.items(globs, f"{f.at(where, 'exclude')}[{i}]")
        if not all(isinstance(g, str) and len(g) < 1024 for g in globs):
            raise f.fail(f"{f.at(where, 'exclude')}[{i}]", "expected strings")
        exclude.append(tuple(globs))
    backups = f.text(entry, where, "backups", required=False)
    if backups is not None and backups != TargetDir.backups_rel(hotfix_id):
        raise f.fail(f.at(where, "backups"), f"expected {TargetDir.backups_rel(hotfix_id)!r}, got {backups!r}")
    backup_names = f.text(entry, where, "backup_names", required=False) or "paths"
    if backup_names not in BACKUP_NAMES:
        raise f.fail(f.at(where, "backup_names"), f"expected one of {', '.join(BACKUP_NAMES)}, got {backup_names!r}")
    pins = tuple(f.items(entry.get("patch_sha256", []), f.at(where, "patch_sha256")))
    for i, pin in enumerate(pins):
        if not isinstance(pin, str) or not is_hex64(pin):
            raise f.fail(f"{f.at(where, 'patch_sha256')}[{i}]", "expected 64 lowercase hex digits")
    if pins and len(pins) != len(patches):
        raise f.fail(f.at(where, "patch_sha256"), f"expected one sha256 per patch ({len(patches)}), got {len(pins)}")
    catalog = f.text(entry, where, "catalog", required=False)
    if catalog is not None and not os.path.isabs(catalog):
        raise f.fail(f.at(where, "catalog"), f"expected an absolute path, got {catalog!r}")
    seal = entry.get("seal")
    return RecordedHotfix(
        id=hotfix_id, version=f.version(entry, where), applied_at=f.text(entry, where, "applied_at", limit=64),
        source=source, patches=tuple(patches), files=tuple(files), strip=strip, exclude=tuple(exclude),
        backups=backups, package=f.package(entry, where, "package", required=False), backup_names=backup_names,
        patch_sha256=pins, fixed_in=_release(f, entry, where, "fixed_in"), versions=_range(f, entry, where),
        catalog=catalog, code=read_record_code(f, entry.get("code"), f.at(where, "code"), tuple(x.path for x in files)),
        seal=f.sha256(entry, where, "seal", required=False) if seal is not None else None,
    )


def _release(f: Fields, entry: dict, where: str, key: str) -> str | None:
    """A record's ``fixed_in``: a PEP 440 version or a union of specifier sets (core/pep440.fixed_in_sets)."""
    from vllm_hotfix_guard.core.pep440 import fixed_in_sets

    value = f.text(entry, where, key, required=False, limit=256)
    if value is not None:
        try:
            fixed_in_sets(value)
        except ValueError as e:
            raise f.fail(f.at(where, key), str(e)) from None
    return value


def _range(f: Fields, entry: dict, where: str) -> str | None:
    return f.text(entry, where, "versions", required=False, limit=512)
