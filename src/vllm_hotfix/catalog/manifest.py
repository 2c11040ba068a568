"""Hotfix manifests: TOML -> frozen dataclasses, validated strictly.

Every validation error is an ``InvalidInput`` whose message is ``<file>: <key path>: <problem>``,
e.g. ``manifests/x.toml: patches[1].sha256: expected 64 hex characters`` (array indices are
0-based). The only I/O here is reading the manifest file in ``load_manifest``.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Mapping, Sequence

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from vllm_hotfix.errors import InvalidInput, Refused
from vllm_hotfix.catalog.signatures import Signature, _signature

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on python 3.10 only
    import tomli as tomllib

SCHEMA = 1
ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]*")
COMMIT_PATTERN = re.compile(r"[0-9a-f]{7,40}")
REFERENCE_KINDS = ("pr", "commit", "issue", "repo", "doc", "advisory")
KINDS = ("hotfix", "advisory")  # advisory: a known issue with signatures and a workaround, no patch


@dataclass(frozen=True)
class Reference:
    kind: str
    url: str
    title: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class FixedIn:
    """The upstream release (``version``) or commit (``commit`` in ``repo``) containing the fix."""

    version: str | None = None
    commit: str | None = None
    repo: str | None = None

    def describe(self) -> str:
        if self.version:
            return self.version
        return f"{self.repo or 'commit'}@{self.commit}"


@dataclass(frozen=True)
class GitBaseline:
    commit: str | None = None
    tag: str | None = None
    branch: str | None = None
    clean: bool = False

    @property
    def rev(self) -> str | None:
        """What HEAD must be: the commit, else the tag, else the branch."""
        return self.commit or self.tag or self.branch

    def describe(self) -> str:
        parts = [f"tag {self.tag}" if self.tag else "", f"branch {self.branch}" if self.branch else "",
                 f"commit {self.commit}" if self.commit else "", "clean" if self.clean else ""]
        return ", ".join(p for p in parts if p)


@dataclass(frozen=True)
class TargetSpec:
    distribution: str
    package: str
    versions: str | None = None  # PEP 440 specifier set; prereleases match
    git: GitBaseline | None = None

    @property
    def specifier(self) -> SpecifierSet | None:
        return SpecifierSet(self.versions) if self.versions is not None else None

    def contains(self, version: str | Version) -> bool:
        """True when ``version`` is inside this target's range (no range: any version)."""
        return in_range(self.versions, version)

    def describe(self) -> str:
        text = self.distribution
        if self.versions:
            text += f" {self.versions}"
        if self.git:
            text += f" (git {self.git.describe()})"
        return text


@dataclass(frozen=True)
class PatchStats:
    files: int
    insertions: int
    deletions: int

    def describe(self) -> str:
        return f"{self.files} files +{self.insertions}/-{self.deletions}"


@dataclass(frozen=True)
class PatchSpec:
    """One diff. ``kind`` says where its bytes come from:

    - ``file``: ``file`` relative to the catalog's ``patches/`` directory;
    - ``external``: a separately distributed file named ``external``, obtained from ``url``;
    - ``commit``: upstream ``commit`` in ``repo``; ``sha256`` pins its normalised diff.
    """

    kind: str
    sha256: str | None  # None only for an external file pinned by md5 (its publisher gives md5 only)
    file: str | None = None
    external: str | None = None
    url: str | None = None
    repo: str | None = None
    commit: str | None = None
    md5: str | None = None
    strip: int = 1
    exclude: tuple[str, ...] = ()
    stats: PatchStats | None = None
    versions: str | None = None
    description: str | None = None

    @property
    def label(self) -> str:
        if self.kind == "file":
            return str(self.file)
        if self.kind == "external":
            return str(self.external)
        return f"{self.repo}@{self.commit}"

    def matches_version(self, version: str | Version) -> bool:
        return in_range(self.versions, version)


@dataclass(frozen=True)
class Requirement:
    """A precondition on another target, e.g. the vLLM checkout clean at a commit."""

    distribution: str
    package: str
    git: GitBaseline
    root_hint: str | None = None


@dataclass(frozen=True)
class PostCheck:
    """After applying: ``file`` (relative to the target root) contains / does not contain a text."""

    file: str
    contains: str | None = None
    not_contains: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class Manifest:
    id: str
    version: int | str
    title: str
    targets: tuple[TargetSpec, ...]
    patches: tuple[PatchSpec, ...]
    description: str = ""
    symptoms: tuple[str, ...] = ()  # free text, kept for older manifests; doctor reads ``signatures``
    kind: str = "hotfix"
    signatures: tuple[Signature, ...] = ()
    workaround: str | None = None  # advisories: what to do instead of a patch
    fixed_by: str | None = None  # advisories: "ID@VERSION", the catalog hotfix (from that version on) that fixes it
    fixed_in: FixedIn | None = None
    supersedes: tuple[int | str, ...] = ()
    references: tuple[Reference, ...] = ()
    requires: tuple[Requirement, ...] = ()
    checks: tuple[PostCheck, ...] = ()
    schema: int = SCHEMA
    source: Path | None = field(default=None, compare=False)
    patches_dir: Path | None = field(default=None, compare=False)

    @property
    def ref(self) -> str:
        return f"{self.id}@{self.version}"

    def target_for(self, distribution: str) -> TargetSpec | None:
        wanted = canonicalize_name(distribution)
        for target in self.targets:
            if canonicalize_name(target.distribution) == wanted:
                return target
        return None

    def applies_to_version(self, version: str | Version, distribution: str | None = None) -> bool:
        """True when some target (of ``distribution``, if given) has ``version`` in its range."""
        targets = self.targets
        if distribution is not None:
            targets = tuple(t for t in targets if canonicalize_name(t.distribution) == canonicalize_name(distribution))
        return any(t.contains(version) for t in targets)

    def is_fixed_in(self, version: str | Version | None, commit_checker: Callable[[str, str | None], bool] | None = None) -> bool:
        """True when the target already contains the upstream fix.

        A ``fixed_in`` version compares against ``version``; a ``fixed_in`` commit is decided by
        ``commit_checker(commit, repo)`` (e.g. "is this commit an ancestor of HEAD"), False without one.
        """
        if self.fixed_in is None:
            return False
        if self.fixed_in.version is not None:
            return version is not None and parse_version(version) >= Version(self.fixed_in.version)
        if commit_checker is None or self.fixed_in.commit is None:
            return False
        return bool(commit_checker(self.fixed_in.commit, self.fixed_in.repo))

    def patches_for(self, version: str | Version | None) -> tuple[PatchSpec, ...]:
        """The patches to apply to ``version``: unranged ones always, ranged ones when they match."""
        if self.kind == "advisory":
            raise Refused(f"{self.ref} is an advisory: there is no patch to apply",
                          hint=f"`hotfix show {self.id}` gives the workaround" + (f"; the fix is {self.fixed_by}" if self.fixed_by else ""))
        chosen = tuple(p for p in self.patches if p.versions is None or (version is not None and p.matches_version(version)))
        if not chosen:
            ranges = ", ".join(sorted({p.versions for p in self.patches if p.versions}))
            raise Refused(
                f"{self.ref}: no patch for version {version or '(unknown)'}",
                hint=f"this hotfix has patches for {ranges}",
            )
        return chosen

    def patch_path(self, spec: PatchSpec) -> Path:
        """Where a ``file`` patch lives (the catalog's patches/ dir joined with its ``file``)."""
        if spec.file is None:
            raise ValueError(f"{spec.label} is not a catalog patch file")
        base = self.patches_dir if self.patches_dir is not None else Path("patches")
        return base / spec.file

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["source"] = str(self.source) if self.source else None
        data["patches_dir"] = str(self.patches_dir) if self.patches_dir else None
        return data


def parse_version(version: str | Version) -> Version:
    if isinstance(version, Version):
        return version
    try:
        return Version(str(version))
    except InvalidVersion:
        raise InvalidInput(f"not a PEP 440 version: {version!r}") from None


def in_range(versions: str | None, version: str | Version) -> bool:
    """PEP 440 range check in which pre-releases (0.30.0rc2) match; no range matches everything."""
    if versions is None:
        return True
    return SpecifierSet(versions).contains(parse_version(version), prereleases=True)


def verify_patch_bytes(spec: PatchSpec, data: bytes, label: str | None = None) -> None:
    """Refuse when ``data`` does not have the md5 / sha256 the manifest pins (both checked)."""
    name = label or spec.label
    if spec.md5 is not None:
        actual = hashlib.md5(data, usedforsecurity=False).hexdigest()
        if actual != spec.md5:
            raise Refused(f"{name}: md5 mismatch: expected {spec.md5}, got {actual}",
                          hint="this is not the patch file the manifest pins; get the right one" + (f" from {spec.url}" if spec.url else ""))
    actual = hashlib.sha256(data).hexdigest()
    if spec.sha256 is not None and actual != spec.sha256:
        raise Refused(f"{name}: sha256 mismatch: expected {spec.sha256}, got {actual}",
                      hint="this is not the patch the manifest pins; nothing was changed")


def check_stats(spec: PatchSpec, stats: Any, label: str | None = None) -> None:
    """Refuse when a parsed patch's stats (files, insertions, deletions) differ from the declared ones."""
    if spec.stats is None:
        return
    got = PatchStats(stats.files, stats.insertions, stats.deletions)
    if got != spec.stats:
        raise Refused(f"{label or spec.label}: expected {spec.stats.describe()}, got {got.describe()}",
                      hint="the patch file is not the declared one (wrong version or truncated download)")


def load_manifest(path: Path | str, *, patches_dir: Path | None = None) -> Manifest:
    """Read and validate one manifest file; ``patches_dir`` defaults to ``<manifests>/../patches``."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read manifest: {exc.strerror or exc}") from None
    data = parse_toml(raw, str(path))
    if patches_dir is None:
        patches_dir = path.parent.parent / "patches"
    return manifest_from_dict(data, str(path), source_path=path, patches_dir=patches_dir)


def parse_toml(raw: bytes, source: str) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{source}: not UTF-8 text (byte {exc.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
        if found:
            where = f"line {found.group(1)}, column {found.group(2)}: "
            message = message[: found.start()]
        else:
            where = ""
        raise InvalidInput(f"{source}: {where}invalid TOML: {message}") from None


# --- validation -------------------------------------------------------------------------------

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "an array", dict: "a table"}


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    for kind, name in ((str, "a string"), (int, "an integer"), (float, "a float"), (list, "an array"), (dict, "a table")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


class _Table:
    """One TOML table being validated; knows its key path for error messages."""

    def __init__(self, data: Any, path: str, source: str, allowed: Sequence[str]):
        self.path = path
        self.source = source
        if not isinstance(data, dict):
            raise self.error(None, f"expected a table, got {_type_name(data)}")
        self.data = data
        unknown = [key for key in data if key not in allowed]
        if unknown:
            raise self.error(unknown[0], f"unknown key (allowed: {', '.join(allowed)})")

    def key_path(self, key: str | None) -> str:
        if key is None:
            return self.path or "(top level)"
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str | None, problem: str) -> InvalidInput:
        return InvalidInput(f"{self.source}: {self.key_path(key)}: {problem}")

    def has(self, key: str) -> bool:
        return key in self.data

    def value(self, key: str, kinds: tuple[type, ...], *, required: bool = False, default: Any = None) -> Any:
        if key not in self.data:
            if required:
                raise self.error(key, "missing required key")
            return default
        value = self.data[key]
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            expected = " or ".join(_TYPE_NAMES[k] for k in kinds)
            raise self.error(key, f"expected {expected}, got {_type_name(value)}")
        return value

    def text(self, key: str, *, required: bool = False, default: str | None = None) -> str | None:
        value = self.value(key, (str,), required=required, default=default)
        if value is not None and key in self.data and not value.strip():
            raise self.error(key, "must not be empty")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        values = self.value(key, (list,), default=[])
        for index, item in enumerate(values):
            if not isinstance(item, str):
                raise self.error(f"{key}[{index}]", f"expected a string, got {_type_name(item)}")
        return tuple(values)

    def tables(self, key: str, *, required: bool = False) -> list[tuple[str, Any]]:
        values = self.value(key, (list,), required=required, default=[])
        if required and not values:
            raise self.error(key, "needs at least one entry")
        return [(f"{self.key_path(key)}[{index}]", item) for index, item in enumerate(values)]

    def sub(self, key: str, allowed: Sequence[str]) -> _Table | None:
        if key not in self.data:
            return None
        return _Table(self.data[key], self.key_path(key), self.source, allowed)

    def hexdigest(self, key: str, length: int, *, required: bool = False) -> str | None:
        value = self.text(key, required=required)
        if value is not None and not re.fullmatch(f"[0-9a-f]{{{length}}}", value):
            raise self.error(key, f"expected {length} hex characters")
        return value

    def commit(self, key: str, *, required: bool = False) -> str | None:
        value = self.text(key, required=required)
        if value is not None and not COMMIT_PATTERN.fullmatch(value):
            raise self.error(key, "expected a commit id (7 to 40 lowercase hex characters)")
        return value

    def specifier(self, key: str) -> str | None:
        value = self.text(key)
        if value is not None:
            try:
                SpecifierSet(value)
            except InvalidSpecifier:
                raise self.error(key, f"invalid PEP 440 version range {value!r} (e.g. '>=0.29.0,<0.32.0')") from None
        return value

    def relative_path(self, key: str, *, required: bool = False) -> str | None:
        value = self.text(key, required=required)
        if value is not None:
            pure = PurePosixPath(value)
            if pure.is_absolute() or ".." in pure.parts or "\\" in value:
                raise self.error(key, f"expected a relative path without '..', got {value!r}")
        return value


def _package(table: _Table, distribution: str) -> str:
    package = table.text("package", default=distribution.replace("-", "_"))
    if not all(part.isidentifier() for part in package.split(".")):
        raise table.error("package", f"not an importable package name: {package!r}")
    return package


def _git(table: _Table | None) -> GitBaseline | None:
    if table is None:
        return None
    baseline = GitBaseline(
        commit=table.commit("commit"),
        tag=table.text("tag"),
        branch=table.text("branch"),
        clean=table.value("clean", (bool,), default=False),
    )
    if not baseline.rev:
        raise table.error(None, "needs at least one of commit, tag, branch")
    return baseline


def _version_value(table: _Table, key: str, value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise table.error(key, f"expected an integer or a string, got {_type_name(value)}")
    if isinstance(value, str) and not value.strip():
        raise table.error(key, "must not be empty")
    return value


def _fixed_in(top: _Table) -> FixedIn | None:
    if not top.has("fixed_in"):
        return None
    raw = top.data["fixed_in"]
    if isinstance(raw, str):
        fixed = FixedIn(version=raw)
        table = top
        key = "fixed_in"
    else:
        table = _Table(raw, "fixed_in", top.source, ("version", "commit", "repo"))
        fixed = FixedIn(version=table.text("version"), commit=table.commit("commit"), repo=table.text("repo"))
        key = "version"
        if (fixed.version is None) == (fixed.commit is None):
            raise table.error(None, "needs exactly one of version, commit")
    if fixed.version is not None:
        try:
            Version(fixed.version)
        except InvalidVersion:
            raise table.error(key, f"not a PEP 440 version: {fixed.version!r}") from None
    return fixed


def _target(path: str, raw: Any, source: str) -> TargetSpec:
    table = _Table(raw, path, source, ("distribution", "package", "versions", "git"))
    distribution = table.text("distribution", required=True)
    target = TargetSpec(
        distribution=distribution,
        package=_package(table, distribution),
        versions=table.specifier("versions"),
        git=_git(table.sub("git", ("commit", "tag", "branch", "clean"))),
    )
    if target.versions is None and target.git is None:
        raise table.error(None, "needs versions (a PEP 440 range) or git (a baseline), or both")
    return target


_PATCH_KEYS = ("file", "external", "url", "repo", "commit", "md5", "sha256", "strip", "exclude", "stats", "versions", "description")


def _patch(path: str, raw: Any, source: str) -> PatchSpec:
    table = _Table(raw, path, source, _PATCH_KEYS)
    kinds = [k for k in ("file", "external", "commit") if table.has(k)]
    if len(kinds) != 1:
        raise table.error(None, "needs exactly one of file, external, commit (with repo)")
    kind = kinds[0]
    if kind != "commit" and table.has("repo"):
        raise table.error("repo", "only for commit patches")
    if kind != "external" and table.has("url"):
        raise table.error("url", "only for external patches")
    stats_table = table.sub("stats", ("files", "insertions", "deletions"))
    stats = None
    if stats_table is not None:
        counts = {}
        for key in ("files", "insertions", "deletions"):
            counts[key] = stats_table.value(key, (int,), required=True)
            if counts[key] < 0:
                raise stats_table.error(key, "must not be negative")
        stats = PatchStats(**counts)
    strip = table.value("strip", (int,), default=1)
    if strip < 0:
        raise table.error("strip", "must not be negative")
    spec = PatchSpec(
        kind=kind,
        file=table.relative_path("file"),
        external=table.text("external"),
        url=table.text("url", required=kind == "external"),
        repo=table.text("repo", required=kind == "commit"),
        commit=table.commit("commit"),
        md5=table.hexdigest("md5", 32),
        sha256=table.hexdigest("sha256", 64, required=not (kind == "external" and table.has("md5"))),
        strip=strip,
        exclude=table.strings("exclude"),
        stats=stats,
        versions=table.specifier("versions"),
        description=table.text("description"),
    )
    if spec.external is not None and ("/" in spec.external or spec.external in (".", "..")):
        raise table.error("external", f"expected a plain file name, got {spec.external!r}")
    return spec


def _requirement(path: str, raw: Any, source: str) -> Requirement:
    table = _Table(raw, path, source, ("distribution", "package", "root_hint", "git"))
    distribution = table.text("distribution", required=True)
    git_table = table.sub("git", ("commit", "tag", "clean"))
    if git_table is None:
        raise table.error("git", "missing required key")
    return Requirement(
        distribution=distribution,
        package=_package(table, distribution),
        root_hint=table.text("root_hint"),
        git=_git(git_table),
    )


def _check(path: str, raw: Any, source: str) -> PostCheck:
    table = _Table(raw, path, source, ("file", "contains", "not_contains", "description"))
    check = PostCheck(
        file=table.relative_path("file", required=True),
        contains=table.text("contains"),
        not_contains=table.text("not_contains"),
        description=table.text("description"),
    )
    if (check.contains is None) == (check.not_contains is None):
        raise table.error(None, "needs exactly one of contains, not_contains")
    return check


def _reference(path: str, raw: Any, source: str) -> Reference:
    table = _Table(raw, path, source, ("kind", "url", "title", "note"))
    kind = table.text("kind", required=True)
    if kind not in REFERENCE_KINDS:
        raise table.error("kind", f"expected one of {', '.join(REFERENCE_KINDS)}, got {kind!r}")
    return Reference(kind=kind, url=table.text("url", required=True), title=table.text("title"), note=table.text("note"))


_TOP_KEYS = ("schema", "id", "version", "title", "description", "symptoms", "fixed_in", "supersedes",
             "references", "targets", "patches", "requires", "checks", "kind", "signatures", "workaround", "fixed_by")


def _kind_fields(top: _Table) -> tuple[str, str | None, str | None]:
    """``kind``, ``workaround``, ``fixed_by``: an advisory has a workaround and no patches, a hotfix the reverse."""
    kind = top.text("kind", default="hotfix")
    if kind not in KINDS:
        raise top.error("kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
    workaround = top.text("workaround", required=kind == "advisory")
    fixed_by = top.text("fixed_by")
    if kind == "advisory":
        for key in ("patches", "checks", "requires", "supersedes"):
            if top.data.get(key):
                raise top.error(key, "an advisory has no patches (kind = \"advisory\"); make it a hotfix or drop the key")
        if fixed_by is not None:
            ref, _, version = fixed_by.partition("@")
            if not ID_PATTERN.fullmatch(ref) or not version:
                raise top.error("fixed_by", f"expected ID@VERSION of the hotfix that fixes it, got {fixed_by!r}")
    else:
        for key, value in (("workaround", workaround), ("fixed_by", fixed_by)):
            if value is not None:
                raise top.error(key, "only for kind = \"advisory\"")
    return kind, workaround, fixed_by


def manifest_from_dict(data: Mapping[str, Any], source: str, *, source_path: Path | None = None,
                       patches_dir: Path | None = None) -> Manifest:
    """Validate a parsed manifest (pure). ``source`` names the file in error messages."""
    top = _Table(dict(data), "", source, _TOP_KEYS)
    schema = top.value("schema", (int,), required=True)
    if schema != SCHEMA:
        raise top.error("schema", f"unsupported schema {schema} (this vllm-hotfix reads schema {SCHEMA})")
    hotfix_id = top.text("id", required=True)
    if not ID_PATTERN.fullmatch(hotfix_id):
        raise top.error("id", f"expected lowercase letters, digits and '-' (starting with a letter or digit), got {hotfix_id!r}")
    if "version" not in top.data:
        raise top.error("version", "missing required key")
    version = _version_value(top, "version", top.data["version"])
    supersedes_raw = top.value("supersedes", (list,), default=[])
    supersedes = tuple(_version_value(top, f"supersedes[{i}]", v) for i, v in enumerate(supersedes_raw))
    if any(str(v) == str(version) for v in supersedes):
        raise top.error("supersedes", f"version {version} cannot supersede itself")
    kind, workaround, fixed_by = _kind_fields(top)
    return Manifest(
        schema=schema,
        id=hotfix_id,
        version=version,
        title=top.text("title", required=True),
        description=top.text("description", default="") or "",
        symptoms=top.strings("symptoms"),
        kind=kind,
        signatures=tuple(_signature(p, r, source) for p, r in top.tables("signatures")),
        workaround=workaround,
        fixed_by=fixed_by,
        fixed_in=_fixed_in(top),
        supersedes=supersedes,
        references=tuple(_reference(p, r, source) for p, r in top.tables("references")),
        targets=tuple(_target(p, r, source) for p, r in top.tables("targets", required=True)),
        patches=tuple(_patch(p, r, source) for p, r in top.tables("patches", required=kind == "hotfix")),
        requires=tuple(_requirement(p, r, source) for p, r in top.tables("requires")),
        checks=tuple(_check(p, r, source) for p, r in top.tables("checks")),
        source=source_path,
        patches_dir=patches_dir,
    )
