"""hotfix.lock: what `hotfix export` wrote -- its model, its one reader and its one writer. Whether a
(rebuilt) install still carries it is txn/lock_check.py's.

Standard library only: the in-process guard (vllm_hotfix_guard/plugin.py) imports this module inside every
vLLM process, where nothing but the stdlib is guaranteed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from vllm_hotfix_guard.core import pep440, verdict
from vllm_hotfix_guard.core.data import load_json
from vllm_hotfix_guard.core.docfields import Fields, relpath_problem
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.paths import LOCK_LIMIT, LOCK_NAME, read_own_file
from vllm_hotfix_guard.values import Value

if TYPE_CHECKING:
    from vllm_hotfix_guard.txn.lockcode import LockedCode

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
    # the guard's files as `hotfix export` wrote them ((path inside site-packages, sha256), every one, RECORD
    # too): a signature of the lock covers the guard; None: exported without a guard (or before issue 43)
    guard: Optional[tuple[tuple[str, str], ...]] = None

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
                site_packages=site_packages, hotfixes=read, version=version, expires=expires,
                guard=_read_guard(f, doc.get("guard")))
    try:
        lock_series_checks(lock, lambda path: (None, None))  # the files of one path must chain
    except verdict.BrokenSeries as exc:
        raise InvalidInput(f"{source}: hotfixes: the locked series does not chain: {exc}") from None
    return lock


GUARD_PACKAGE = "vllm_hotfix_guard"
GUARD_META = ("METADATA", "WHEEL", "RECORD", "entry_points.txt", "top_level.txt")
GUARD_FILES_LIMIT = 1000


def guard_path_problem(rel: str) -> Optional[str]:
    """Why ``rel`` (a path inside site-packages) is not a file of the guard's own package or dist-info -- the
    one rule of what a delivered guard may hold (a sitecustomize.py, a .pth, or a path over vLLM's own
    files is not); None when it is."""
    problem = relpath_problem(rel)
    if problem:
        return problem
    top, _, rest = rel.partition("/")
    if top == GUARD_PACKAGE:
        return None if rest.endswith(".py") and rest.replace("/", "").replace("_", "").replace(".", "").isalnum() \
            else "not a Python source of the guard's package"
    if top.startswith(GUARD_PACKAGE + "-") and top.endswith(".dist-info") and "/" not in rest:
        return None if rest in GUARD_META else f"not one of the guard's metadata files ({', '.join(GUARD_META)})"
    return f"outside the guard's package ({GUARD_PACKAGE}/) and its .dist-info"


def _read_guard(f: Fields, doc: Any) -> Optional[tuple[tuple[str, str], ...]]:
    if doc is None:
        return None
    files = f.items(f.get(f.mapping(doc, "guard"), "guard", "files", list), "guard.files")
    if not files or len(files) > GUARD_FILES_LIMIT:
        raise f.fail("guard.files", f"expected 1 to {GUARD_FILES_LIMIT} files, got {len(files)}")
    found: dict[str, str] = {}
    for i, item in enumerate(files):
        where = f"guard.files[{i}]"
        item = f.mapping(item, where)
        rel = f.text(item, where, "path", limit=256)
        problem = guard_path_problem(rel)
        if problem:
            raise f.fail(f.at(where, "path"), f"{rel!r}: {problem}")
        if rel in found:
            raise f.fail(f.at(where, "path"), f"{rel!r} is named twice")
        found[rel] = f.sha256(item, where, "sha256")
    if len({rel.partition("/")[0] for rel in found if rel.partition("/")[0] != GUARD_PACKAGE}) != 1:
        raise f.fail("guard.files", "expected the files of one .dist-info")
    return tuple(sorted(found.items()))


def _utc(text: str) -> Optional[int]:
    from vllm_hotfix_guard.core.utctime import parse_utc  # here: a lock without `expires` costs the guard nothing more

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
    fixed_in = f.text(doc, where, "fixed_in", required=False, limit=256)
    if fixed_in is not None:
        try:
            pep440.fixed_in_sets(fixed_in)
        except ValueError as e:
            raise f.fail(f.at(where, "fixed_in"), str(e)) from None
        if pep440.fixed_by(baseline, fixed_in):
            raise f.fail(f.at(where, "fixed_in"), f"{fixed_in!r} already holds the exported baseline {baseline!r} "
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
        from vllm_hotfix_guard.txn.lockcode import read_code  # only for a lock with code names: the guard's import cost
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
        **({"guard": {"files": [{"path": rel, "sha256": sha} for rel, sha in lock.guard]}} if lock.guard else {}),
    }
    return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def lock_series_checks(lock: Lock, current: Callable[[str], tuple]) -> dict:
    """core.verdict.series_checks over the lock: its hotfixes, in order, are the series."""
    return verdict.series_checks([(h.id, [(f.path, f.baseline_sha256, f.sha256) for f in h.files])
                                  for h in lock.hotfixes], current)
