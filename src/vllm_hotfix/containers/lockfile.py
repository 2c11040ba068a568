"""hotfix.lock: what `hotfix export` wrote, and whether a (rebuilt) install still carries it.

Standard library only: the in-process guard (containers/guard.py) imports this module inside every
vLLM process, where nothing but the stdlib is guaranteed. States and the rule from hashes to a state
are core.verdict's, the same as `hotfix status`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from vllm_hotfix.core import verdict
from vllm_hotfix.core.data import load_json
from vllm_hotfix.core.verdict import APPLIED, FIXED_UPSTREAM, UNKNOWN, FileCheck, version_at_least
from vllm_hotfix.errors import InvalidInput
from vllm_hotfix.output import quote_path

SCHEMA = 1


@dataclass(frozen=True)
class LockedFile:
    """One file a locked hotfix writes, as `hotfix export` found it."""

    path: str  # relative to site-packages, posix
    sha256: str  # of the patched content
    baseline_sha256: Optional[str]  # of the pristine file the patch was computed from (None: created)
    export: str  # relative to the export directory (where hotfix.lock lives)


@dataclass(frozen=True)
class LockedHotfix:
    """One hotfix of the lock: what it is for and the files that must hold its bytes."""

    id: str
    version: Any
    distribution: str
    package: str
    baseline_version: str
    fixed_in: Optional[str]
    files: tuple[LockedFile, ...]
    versions: Optional[str] = None  # the manifest's PEP 440 range for this distribution


@dataclass(frozen=True)
class Lock:
    """hotfix.lock: the hotfixes an image must have in effect (written by `hotfix export`).

    Every dataclass here has a docstring: without one, @dataclass builds it with inspect.signature,
    which the guard would pay for in every vLLM process."""

    site_packages: str
    hotfixes: tuple[LockedHotfix, ...]
    generator: str = ""
    schema: int = SCHEMA

    def select(self, ids) -> tuple[LockedHotfix, ...]:
        """The locked hotfixes with these ids (all when ``ids`` is empty); InvalidInput names unknown ones."""
        if not ids:
            return self.hotfixes
        known = {h.id: h for h in self.hotfixes}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise InvalidInput(
                f"hotfix.lock has no hotfix {', '.join(unknown)}",
                hint=f"locked: {', '.join(known) or '(none)'}; run `hotfix export` for it first",
            )
        return tuple(known[i] for i in ids)


@dataclass(frozen=True)
class Installed:
    """What the package really resolves to in the interpreter being checked."""

    package_dir: Path  # directory of the imported package
    version: Optional[str]  # version of its distribution (None if unknown)
    pending: bool = False  # an interrupted apply on this install waits for `hotfix recover`


@dataclass(frozen=True)
class HotfixCheck:
    """One locked hotfix checked against what this interpreter resolves: core.verdict's state."""

    hotfix: LockedHotfix
    state: str  # a core.verdict state
    installed_version: Optional[str]
    files: tuple[FileCheck, ...]  # core.verdict.FileCheck, ``where`` = the real path read (None: not importable)
    detail: str = ""

    @property
    def in_effect(self) -> bool:
        return verdict.in_effect(self.state)


# -- reading and writing ---------------------------------------------------------------------------


def load_lock(path: Path) -> Lock:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InvalidInput(f"{path}: lock file not found", hint="run `hotfix export ID... --to DIR` to write DIR/hotfix.lock") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read lock file: {exc.strerror}") from None
    return parse_lock(data, source=str(path))


def parse_lock(data: bytes, *, source: str = "hotfix.lock") -> Lock:
    doc = load_json(data, source)  # InvalidInput also for nesting too deep or an integer of 4300+ digits
    reader = _Reader(source)
    reader.mapping(doc, "")
    schema = reader.field(doc, "", "schema", int)
    if schema != SCHEMA:
        raise InvalidInput(f"{source}: key 'schema': unsupported lock schema {schema} (this vllm-hotfix reads {SCHEMA})",
                           hint="upgrade vllm-hotfix or re-export with this version")
    hotfixes = reader.field(doc, "", "hotfixes", list)
    if not hotfixes:  # fail closed: a lock that requires nothing must not pass a container's start check
        raise InvalidInput(f"{source}: key 'hotfixes': the lock names no hotfix",
                           hint="re-run `hotfix export ID... --to DIR` for the hotfixes this image must carry")
    return Lock(
        schema=schema,
        generator=reader.field(doc, "", "generator", str, required=False) or "",
        site_packages=reader.field(doc, "", "site_packages", str),
        hotfixes=tuple(_read_hotfix(reader, h, f"hotfixes[{i}]") for i, h in enumerate(hotfixes)),
    )


def _read_hotfix(reader: "_Reader", doc: Any, where: str) -> LockedHotfix:
    reader.mapping(doc, where)
    files = reader.field(doc, where, "files", list)
    version = doc.get("version")
    if not isinstance(version, (int, str)) or isinstance(version, bool):
        raise InvalidInput(f"{reader.source}: key '{where}.version': expected an integer or a string")
    hotfix_id = reader.field(doc, where, "id", str)
    return LockedHotfix(
        id=hotfix_id,
        version=version,
        distribution=reader.field(doc, where, "distribution", str),
        package=reader.field(doc, where, "package", str),
        baseline_version=reader.field(doc, where, "baseline_version", str),
        fixed_in=reader.field(doc, where, "fixed_in", str, required=False),
        files=tuple(_read_file(reader, f, f"{where}.files[{i}]") for i, f in enumerate(files)),
        versions=reader.field(doc, where, "versions", str, required=False),
    )


def _read_file(reader: "_Reader", doc: Any, where: str) -> LockedFile:
    reader.mapping(doc, where)
    path = reader.field(doc, where, "path", str)
    export = reader.field(doc, where, "export", str)
    for key, value in (("path", path), ("export", export)):
        parts = value.split("/")
        if value.startswith("/") or "\\" in value or ".." in parts or "" in parts:
            raise InvalidInput(f"{reader.source}: key '{where}.{key}': unsafe path {value!r} (must be relative, without '..')")
    return LockedFile(
        path=path,
        sha256=reader.sha256(doc, where, "sha256", required=True),
        baseline_sha256=reader.sha256(doc, where, "baseline_sha256", required=False),
        export=export,
    )


class _Reader:
    def __init__(self, source: str):
        self.source = source

    def mapping(self, doc: Any, where: str) -> None:
        if not isinstance(doc, dict):
            raise InvalidInput(f"{self.source}: {f'key {where!r}' if where else 'top level'}: expected an object")

    def field(self, doc: dict, where: str, key: str, kind: type, *, required: bool = True) -> Any:
        path = f"{where}.{key}" if where else key
        value = doc.get(key)
        if value is None:
            if required:
                raise InvalidInput(f"{self.source}: key '{path}' is missing")
            return None
        if not isinstance(value, kind) or isinstance(value, bool):
            raise InvalidInput(f"{self.source}: key '{path}': expected {kind.__name__}, got {type(value).__name__}")
        return value

    def sha256(self, doc: dict, where: str, key: str, *, required: bool) -> Optional[str]:
        value = self.field(doc, where, key, str, required=required)
        if value is not None and not re.fullmatch(r"[0-9a-f]{64}", value):
            raise InvalidInput(f"{self.source}: key '{where}.{key}': expected 64 lowercase hex digits")
        return value


def dump_lock(lock: Lock) -> bytes:
    doc = {
        "schema": lock.schema,
        "generator": lock.generator,
        "site_packages": lock.site_packages,
        "hotfixes": [
            {
                "id": h.id, "version": h.version, "distribution": h.distribution, "package": h.package,
                "baseline_version": h.baseline_version, "fixed_in": h.fixed_in, "versions": h.versions,
                "files": [
                    {"path": f.path, "sha256": f.sha256, "baseline_sha256": f.baseline_sha256, "export": f.export}
                    for f in h.files
                ],
            }
            for h in lock.hotfixes
        ],
    }
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


# -- checking an install against the lock ----------------------------------------------------------


def sha256_file(path: Path) -> Optional[str]:
    """Hex sha256 of a file's bytes, None when it does not exist."""
    import hashlib  # here: `verify --lock` starts its probe process before paying for OpenSSL

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def real_file(installed: Installed, package: str, path: str) -> Path:
    """The file a site-packages-relative ``path`` of ``package`` really is in this install."""
    head, _, rest = path.partition("/")
    if head == package and rest:
        return installed.package_dir / rest
    return installed.package_dir.parent / path


def check_file(locked: LockedFile, installed: Optional[Installed], package: str) -> FileCheck:
    if installed is None:
        return FileCheck(locked.path, verdict.MISSING, None, locked.sha256, locked.baseline_sha256, None)
    where = real_file(installed, package, locked.path)
    return verdict.check_file(locked.path, sha256_file(where), locked.sha256, locked.baseline_sha256, str(where))


def check_hotfix(hotfix: LockedHotfix, installed: Optional[Installed]) -> HotfixCheck:
    version = installed.version if installed else None
    files = tuple(check_file(f, installed, hotfix.package) for f in hotfix.files)
    if installed is None:
        return HotfixCheck(hotfix, UNKNOWN, None, files, f"package {hotfix.package!r} is not importable here")
    if installed.pending:
        return HotfixCheck(hotfix, verdict.INTERRUPTED, version, files,
                           "an apply on this install was interrupted; run `hotfix recover`")
    if hotfix.fixed_in and version and version_at_least(version, hotfix.fixed_in):
        return HotfixCheck(hotfix, FIXED_UPSTREAM, version, files,
                           f"{hotfix.distribution} {version} >= {hotfix.fixed_in}")
    if hotfix.versions and version and not verdict.version_in(version, hotfix.versions):
        return HotfixCheck(hotfix, verdict.NOT_APPLICABLE, version, files,
                           f"{hotfix.distribution} {version} is outside {hotfix.versions}")
    if not files:
        return HotfixCheck(hotfix, UNKNOWN, version, files, "the lock lists no file for this hotfix")
    state, detail = verdict.files_verdict(files)
    if state != APPLIED and version and hotfix.baseline_version \
            and not verdict.same_release(version, hotfix.baseline_version):
        return HotfixCheck(hotfix, verdict.LOST, version, files,
                           f"{hotfix.distribution} is {version} here, the lock was exported from {hotfix.baseline_version}: "
                           f"re-export against this image")
    return HotfixCheck(hotfix, state, version, files, detail)


def check_lock(
    lock: Lock, resolve: Callable[[str], Optional[Installed]], ids=()
) -> list[HotfixCheck]:
    """Check every (or each named) locked hotfix; ``resolve(package)`` is asked once per package."""
    resolved: dict[str, Optional[Installed]] = {}
    checks = []
    for hotfix in lock.select(ids):
        if hotfix.package not in resolved:
            resolved[hotfix.package] = resolve(hotfix.package)
        checks.append(check_hotfix(hotfix, resolved[hotfix.package]))
    return checks


def fingerprint(checks) -> str:
    """core.fingerprint of these checks: each hotfix's id and version, the distribution and the version
    installed, and the sha256 each file has *now* (what this interpreter really loads)."""
    from vllm_hotfix.core.fingerprint import Entry, fingerprint as digest

    return digest(Entry(c.hotfix.id, c.hotfix.version, c.hotfix.distribution, c.installed_version,
                        tuple((f.path, f.sha256) for f in c.files)) for c in checks)


def advice(check: HotfixCheck, mount_line: Callable[[LockedFile, FileCheck], str]) -> Optional[str]:
    """What to do about one hotfix check; ``mount_line`` renders the compose volume to restore."""
    h = check.hotfix
    if check.state == APPLIED:
        return None
    if check.state == FIXED_UPSTREAM:
        return (f"{h.distribution} {check.installed_version} already contains the fix (fixed in {h.fixed_in}): "
                f"drop the {h.id} bind mounts from the compose service and the lock")
    if check.installed_version is None and all(f.where is None for f in check.files):
        return f"package {h.package!r} not found in this interpreter: check --python / the image"
    lines = []
    by_path = {f.path: f for f in h.files}
    for f in check.files:
        locked = by_path[f.path]
        if f.state == verdict.BASELINE:
            lines.append(f"lost: {quote_path(f.path)} is the pristine {h.baseline_version} file: the bind mount is missing; "
                         f"restore this line in the compose service volumes: - {mount_line(locked, f)}")
        elif f.state == verdict.CHANGED:
            lines.append(f"drifted: {quote_path(f.path)} is neither the patched nor the pristine {h.baseline_version} file "
                         f"(installed {h.distribution} {check.installed_version or '?'}): re-export the hotfix "
                         f"against this image, then mount - {mount_line(locked, f)}")
        elif f.state == verdict.MISSING:
            lines.append(f"missing: {quote_path(f.path)} does not exist in this install ({f.where}): "
                         f"the image no longer matches the lock; re-export against it")
    return "\n".join(lines) or None
