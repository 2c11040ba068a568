"""hotfix.lock: what `hotfix export` wrote, and whether a (rebuilt) install still carries it.

Standard library only: the in-process guard (guard/plugin.py) imports this module inside every
vLLM process, where nothing but the stdlib is guaranteed. States and the rule from hashes to a state
are core.verdict's, the same as `hotfix status`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from vllm_hotfix.core import pep440, verdict
from vllm_hotfix.core.data import load_json
from vllm_hotfix.core.distname import canonical_name
from vllm_hotfix.core.docfields import Fields
from vllm_hotfix.core.verdict import APPLIED, FIXED_UPSTREAM, FileCheck
from vllm_hotfix.errors import InvalidInput
from vllm_hotfix.inputs import TARGET_FILE_LIMIT  # noqa: F401 - the guard's cap on a locked file too
from vllm_hotfix.paths import LOCK_LIMIT, LOCK_NAME, read_own_file
from vllm_hotfix.values import Value

if TYPE_CHECKING:
    from vllm_hotfix.txn.lockcode import LockedCode

SCHEMA = 1


class LockedFile(Value):
    """One file a locked hotfix writes, as `hotfix export` found it."""

    path: str  # relative to site-packages, posix
    sha256: str  # of the patched content
    baseline_sha256: Optional[str]  # of the pristine file the patch was computed from (None: created)
    export: str  # relative to the export directory (where hotfix.lock lives)
    code: Optional[LockedCode] = None  # txn/lockcode.py; optional: locks written before names were locked have none


class LockedHotfix(Value):
    """One hotfix of the lock: what it is for and the files that must hold its bytes."""

    id: str
    version: Any
    distribution: str
    package: str
    baseline_version: str
    fixed_in: Optional[str]
    files: tuple[LockedFile, ...]
    versions: Optional[str] = None  # the manifest's PEP 440 range for this distribution


class Lock(Value):
    """hotfix.lock: the hotfixes an image must have in effect (written by `hotfix export`)."""

    site_packages: str
    hotfixes: tuple[LockedHotfix, ...]
    generator: str = ""
    schema: int = SCHEMA
    version: Optional[int] = None  # the lock's counter (`hotfix export` raises it): a policy's min_version
    expires: Optional[str] = None  # RFC 3339 UTC (YYYY-MM-DDTHH:MM:SSZ) after which a policy refuses it

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

    def mounted_files(self, hotfixes: tuple[LockedHotfix, ...] | None = None) -> tuple[LockedFile, ...]:
        """One file per path, the top of its series (the last locked hotfix that writes it): what a bind
        mount, a ConfigMap or an image carries. ``hotfixes``: only the paths these touch."""
        wanted = {f.path for h in (self.hotfixes if hotfixes is None else hotfixes) for f in h.files}
        top: dict[str, LockedFile] = {}
        for h in self.hotfixes:
            for f in h.files:
                if f.path in wanted:
                    top[f.path] = f
        return tuple(top.values())


class Installed(Value):
    """What the package really resolves to in the interpreter being checked."""

    package_dir: Path  # directory of the imported package
    version: Optional[str]  # version of its distribution (None if unknown)
    pending: bool = False  # an interrupted apply on this install waits for `hotfix recover`
    distribution: Optional[str] = None  # the distribution the loaded copy belongs to (None: unknown)


class HotfixCheck(Value):
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
    """The lock at ``path``, read as input (a regular file, no symlink followed, never blocking, at most
    LOCK_LIMIT bytes) and validated (``parse_lock``)."""
    return read_lock(path)[1]


def read_lock(path: Path) -> tuple[bytes, Lock]:
    """``load_lock`` and the very bytes it parsed (what a signature covers: read once, judged once)."""
    if "\x00" in str(path):
        raise InvalidInput(f"{str(path)!r}: a lock path cannot contain a NUL byte")
    try:
        data = read_own_file(path, limit=LOCK_LIMIT)
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read lock file: {exc.strerror}") from None
    if data is None:
        raise InvalidInput(f"{path}: lock file not found", hint="run `hotfix export ID... --to DIR` to write DIR/hotfix.lock")
    return data, parse_lock(data, source=str(path))


def parse_lock(data: bytes, *, source: str = LOCK_NAME) -> Lock:
    """The one reader of hotfix.lock: every field checked, errors naming the key path."""
    f = Fields(source)
    doc = f.mapping(load_json(data, source), "")
    schema = f.get(doc, "", "schema", int)
    if schema != SCHEMA:
        raise InvalidInput(f"{source}: schema: unsupported lock schema {schema} (this vllm-hotfix reads {SCHEMA})",
                           hint="upgrade vllm-hotfix or re-export with this version")
    hotfixes = f.items(f.get(doc, "", "hotfixes", list), "hotfixes")
    if not hotfixes:  # fail closed: a lock that requires nothing must not pass a container's start check
        raise InvalidInput(f"{source}: hotfixes: the lock names no hotfix",
                           hint="re-run `hotfix export ID... --to DIR` for the hotfixes this image must carry")
    site_packages = f.text(doc, "", "site_packages")
    if not site_packages.startswith("/"):
        raise f.fail("site_packages", f"expected an absolute path, got {site_packages!r}")
    read = tuple(_read_hotfix(f, h, f"hotfixes[{i}]") for i, h in enumerate(hotfixes))
    seen: set[str] = set()
    for i, h in enumerate(read):
        if h.id in seen:
            raise f.fail(f"hotfixes[{i}].id", f"{h.id!r} is locked twice")
        seen.add(h.id)
    version = f.get(doc, "", "version", int, required=False)
    if version is not None and not 1 <= version < 1 << 53:
        raise f.fail("version", f"expected a counter from 1, got {version}")
    expires = f.text(doc, "", "expires", required=False, limit=20)
    if expires is not None and _utc(expires) is None:
        raise f.fail("expires", f"expected a UTC time as YYYY-MM-DDTHH:MM:SSZ, got {expires!r}")
    lock = Lock(schema=schema, generator=f.text(doc, "", "generator", required=False) or "",
                site_packages=site_packages, hotfixes=read, version=version, expires=expires)
    try:
        lock_series_checks(lock, lambda path: (None, None))  # the files of one path must chain
    except verdict.BrokenSeries as exc:
        raise InvalidInput(f"{source}: hotfixes: the locked series does not chain: {exc}") from None
    return lock


def _utc(text: str) -> Optional[int]:
    from vllm_hotfix.core.trust_policy import parse_utc  # here: a lock without `expires` costs the guard nothing more

    return parse_utc(text)


def _read_hotfix(f: Fields, doc: Any, where: str) -> LockedHotfix:
    doc = f.mapping(doc, where)
    hotfix_id = f.record_id(doc.get("id"), f.at(where, "id"))
    files = f.items(f.get(doc, where, "files", list), f.at(where, "files"))
    package = f.package(doc, where, "package")
    if "." in package:  # find_spec of a dotted name imports its parent: never in a vLLM process
        raise f.fail(f.at(where, "package"), f"expected a top-level import name, got {package!r}")
    baseline = f.text(doc, where, "baseline_version", limit=64)
    _check_version(f, f.at(where, "baseline_version"), baseline)
    fixed_in = f.text(doc, where, "fixed_in", required=False, limit=64)
    if fixed_in is not None:
        _check_version(f, f.at(where, "fixed_in"), fixed_in)
        if not pep440.release_key(fixed_in) > pep440.release_key(baseline):
            raise f.fail(f.at(where, "fixed_in"), f"{fixed_in!r} is not after the exported baseline {baseline!r} "
                                                   "(export refuses a fix already in the release)")
    versions = f.text(doc, where, "versions", required=False, limit=512)
    if versions is not None and not pep440.version_in(baseline, versions):
        raise f.fail(f.at(where, "versions"), f"the exported baseline {baseline!r} is outside {versions!r}")
    return LockedHotfix(
        id=hotfix_id,
        version=f.version(doc, where),
        distribution=f.text(doc, where, "distribution", limit=256),
        package=package,
        baseline_version=baseline,
        fixed_in=fixed_in,
        files=tuple(_read_file(f, item, f"{f.at(where, 'files')}[{i}]") for i, item in enumerate(files)),
        versions=versions,
    )


def _check_version(f: Fields, where: str, value: str) -> None:
    try:
        pep440.release_key(value)
    except ValueError:
        raise f.fail(where, f"not a PEP 440 version: {value!r}") from None


def _read_file(f: Fields, doc: Any, where: str) -> LockedFile:
    doc = f.mapping(doc, where)
    path = f.relpath(doc, where, "path")
    code = doc.get("code")
    if code is not None:
        from vllm_hotfix.txn.lockcode import read_code  # only for a lock with code names: the guard's import cost
    return LockedFile(
        path=path,
        sha256=f.sha256(doc, where, "sha256"),
        baseline_sha256=f.sha256(doc, where, "baseline_sha256", required=False),
        export=f.relpath(doc, where, "export"),
        code=None if code is None else read_code(f, code, f.at(where, "code"), path),
    )


def dump_lock(lock: Lock) -> bytes:
    doc = {
        "schema": lock.schema,
        **({"version": lock.version} if lock.version is not None else {}),
        **({"expires": lock.expires} if lock.expires is not None else {}),
        "generator": lock.generator,
        "site_packages": lock.site_packages,
        "hotfixes": [
            {
                "id": h.id, "version": h.version, "distribution": h.distribution, "package": h.package,
                "baseline_version": h.baseline_version, "fixed_in": h.fixed_in, "versions": h.versions,
                "files": [
                    {"path": f.path, "sha256": f.sha256, "baseline_sha256": f.baseline_sha256, "export": f.export,
                     **({} if f.code is None else {"code": f.code.to_json()})}
                    for f in h.files
                ],
            }
            for h in lock.hotfixes
        ],
    }
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


# -- checking an install against the lock ----------------------------------------------------------




def sha256_file(path: Path) -> Optional[str]:
    """Hex sha256 of a regular file's bytes; None when there is none at ``path`` (absent, a directory,
    a symlink, a FIFO or device: never followed, never blocking; or over TARGET_FILE_LIMIT) -- such a file
    is not in effect. Hashed by inputs.file_sha256, the one bounded file hash."""
    from vllm_hotfix.inputs import file_sha256

    try:
        return file_sha256(path, cap=TARGET_FILE_LIMIT, what="locked file")
    except (InvalidInput, OSError):
        return None


def real_file(installed: Installed, package: str, path: str) -> Path:
    """The file a site-packages-relative ``path`` of ``package`` really is in this install."""
    head, _, rest = path.partition("/")
    if head == package and rest:
        return installed.package_dir / rest
    return installed.package_dir.parent / path


def lock_series_checks(lock: Lock, current: Callable[[str], tuple]) -> dict:
    """core.verdict.series_checks over the lock: its hotfixes, in order, are the series."""
    return verdict.series_checks([(h.id, [(f.path, f.baseline_sha256, f.sha256) for f in h.files])
                                  for h in lock.hotfixes], current)


def check_lock(
    lock: Lock, resolve: Callable[[str], Optional[Installed]], ids=(), bytecode: Optional[Callable] = None
) -> list[HotfixCheck]:
    """Check every (or each named) locked hotfix in the lock's series; ``resolve(package)`` is asked
    once per package and every locked file is read once. ``bytecode(sources)``: {real source path:
    [(pyc, why)]} (install/bytecode.py, in the interpreter checked) for the modules of applied hotfixes."""
    resolved: dict[str, Optional[Installed]] = {}

    def installed(package: str) -> Optional[Installed]:
        if package not in resolved:
            resolved[package] = resolve(package)
        return resolved[package]

    package_of = {f.path: h.package for h in lock.hotfixes for f in h.files}

    def current(path: str) -> tuple:
        here = installed(package_of[path])
        if here is None:
            return None, None
        where = real_file(here, package_of[path], path)
        return sha256_file(where), str(where)

    checks = lock_series_checks(lock, current)
    judged = [_check_hotfix(hotfix, installed(hotfix.package), checks[hotfix.id]) for hotfix in lock.select(ids)]
    sources = sorted({f.where for c in judged if c.state == APPLIED for f in c.files
                      if f.where and f.path.endswith(".py") and f.sha256 is not None})
    stale = bytecode(sources) if bytecode is not None and sources else {}
    return [_stale_bytecode(c, stale) if c.state == APPLIED and stale else c for c in judged]


def _stale_bytecode(check: HotfixCheck, stale: dict) -> HotfixCheck:
    entries = [(f.where, pyc, why) for f in check.files if f.where in stale for pyc, why in stale[f.where]]
    if not entries:
        return check
    from vllm_hotfix.output import quote_path

    source, pyc, why = entries[0]
    more = f" (+{len(entries) - 1} more)" if len(entries) > 1 else ""
    state, detail = verdict.hotfix_state(check.files, stale_bytecode=f"Python would load {quote_path(pyc)} instead of "
                                                              f"{quote_path(source)}: {why}{more}")
    return HotfixCheck(check.hotfix, state, check.installed_version, check.files, detail)


def _check_hotfix(hotfix: LockedHotfix, installed: Optional[Installed], files: tuple) -> HotfixCheck:
    """core.verdict.hotfix_state for one locked hotfix, as it is here."""
    # a lock is exported from a wheel (flow/export_plan): no commit to compare, the version decides
    version, moved = verdict.release_seen(recorded=hotfix.baseline_version,
                                          installed=lambda: installed.version if installed else None)
    missing = None if installed is not None else f"package {hotfix.package!r} is not importable here"
    other = getattr(installed, "distribution", None)
    if other and canonical_name(other) != canonical_name(hotfix.distribution):
        missing = (f"package {hotfix.package!r} is loaded from the distribution {other}, the lock is for "
                   f"{hotfix.distribution}")
    state, detail = verdict.hotfix_state(
        files, pending=bool(installed and installed.pending), missing_package=missing,
        inapplicable=verdict.release_rule(version, fixed_in=hotfix.fixed_in, versions=hotfix.versions,
                                          distribution=hotfix.distribution),
        recorded_release=hotfix.baseline_version, installed_release=version, moved=moved,
        distribution=hotfix.distribution)
    if state == verdict.STALE:
        detail = (f"{hotfix.distribution} is {version} here, the lock was exported from {hotfix.baseline_version}: "
                  f"re-export against this image")
    return HotfixCheck(hotfix, state, version, files, detail)


def mount_line_for(lock_file: Path) -> Callable[[LockedFile, FileCheck], str]:
    """The compose volume line that puts a locked file back: the exported copy beside the lock when it is
    there, else where `hotfix compose` expects the export (``./hotfix-export``)."""
    def mount_line(locked: LockedFile, check: FileCheck) -> str:
        beside_lock = Path(lock_file).absolute().parent / locked.export
        source = str(beside_lock) if beside_lock.is_file() else f"{DEFAULT_EXPORT_SOURCE}/{locked.export}"
        return f"{source}:{check.where}:ro"
    return mount_line


DEFAULT_EXPORT_SOURCE = "./hotfix-export"  # `hotfix compose --export-dir` default


def fingerprint(checks) -> str:
    """core.fingerprint of these checks: each hotfix's id and version, the distribution and the version
    installed, and the sha256 each file has *now* (what this interpreter really loads)."""
    from vllm_hotfix.core.fingerprint import fingerprint as digest

    return digest(fingerprint_entries(checks))


def expected_fingerprint(lock: Lock) -> str:
    """The fingerprint of ``lock`` in effect: what ``fingerprint`` gives for the checks of an install on
    the locked baseline whose every file holds the top of its series (what the guard and `verify --lock`
    print there). What a bundle is labelled with, and what admission approves."""
    from vllm_hotfix.core.fingerprint import Entry, fingerprint as digest

    top = {f.path: f.sha256 for f in lock.mounted_files()}
    return digest(Entry(h.id, h.version, h.distribution, h.baseline_version, tuple((f.path, top[f.path]) for f in h.files))
                  for h in lock.hotfixes)


def fingerprint_entries(checks) -> list:
    """The core.fingerprint entries of these checks (the guard merges them with its records' entries)."""
    from vllm_hotfix.core.fingerprint import Entry

    return [Entry(c.hotfix.id, c.hotfix.version, c.hotfix.distribution, c.installed_version,
                  tuple((f.path, f.sha256) for f in c.files)) for c in checks]


def advice(check: HotfixCheck, mount_line: Callable[[LockedFile, FileCheck], str],
           option: str = "--python PY") -> Optional[str]:
    """What to do about one hotfix check; ``mount_line`` renders the compose volume to restore, ``option``
    names the interpreter checked (and the catalogs given) for the commands it prints."""
    h = check.hotfix
    if check.state == APPLIED:
        return None
    if check.state == FIXED_UPSTREAM:
        return (f"{h.distribution} {check.installed_version} already contains the fix (fixed in {h.fixed_in}): "
                f"drop the {h.id} bind mounts from the compose service and the lock")
    if check.installed_version is None and all(f.where is None for f in check.files):
        return f"package {h.package!r} not found in this interpreter: check --python / the image"
    if check.state == verdict.STALE:
        return (f"{h.distribution} is {check.installed_version} here, the lock was exported from "
                f"{h.baseline_version}: re-export {h.id} against this image (`hotfix export {h.id} --to "
                f"hotfix-export {option}`) and mount what it writes")
    if check.state == verdict.STALE_BYTECODE:
        return (f"{check.detail}: remove those __pycache__ entries from the image (or build it with "
                f"`PYTHONDONTWRITEBYTECODE=1`); the mounted files themselves are right")
    lines = []
    by_path = {f.path: f for f in h.files}
    for f in check.files:
        locked = by_path[f.path]
        if f.state == verdict.BASELINE:
            lines.append(f"lost: {f.path} is the pristine {h.baseline_version} file: the bind mount is missing; "
                         f"restore this line in the compose service volumes: - {mount_line(locked, f)}")
        elif f.state == verdict.CHANGED:
            lines.append(f"drifted: {f.path} is neither the patched nor the pristine {h.baseline_version} file "
                         f"(installed {h.distribution} {check.installed_version or '?'}): re-export the hotfix "
                         f"against this image, then mount - {mount_line(locked, f)}")
        elif f.state == verdict.MISSING:
            lines.append(f"missing: {f.path} does not exist in this install ({f.where}): "
                         f"the image no longer matches the lock; re-export against it")
    return "\n".join(lines) or None
