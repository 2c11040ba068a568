"""The manifest model: small frozen dataclasses, and the pure checks on patch bytes. No I/O."""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from vllm_hotfix.catalog.signatures import ConfirmStep, Signature
from vllm_hotfix_guard.core.pep440 import fixed_by, fixed_in_first, range_takes
from vllm_hotfix_guard.errors import InvalidInput, Refused

SCHEMA = 1


ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]*")


REFERENCE_KINDS = ("pr", "commit", "issue", "repo", "doc", "advisory")


KINDS = ("hotfix", "advisory")  # advisory: a known issue with signatures and a workaround, no patch


@dataclass(frozen=True)
class Reference:
    """An upstream reference of a manifest: a commit, a pull request or an issue."""

    kind: str
    url: str
    title: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class FixedIn:
    """The upstream releases (``version``) or commit (``commit`` in ``repo``) containing the fix. ``version`` is
    a PEP 440 version V (every release >= V) or a union of specifier sets, ``">=0.23.0,<0.24.0rc1 ||
    >=0.25.1rc1"`` (parallel release lines); core/pep440.fixed_by decides a release against it."""

    version: str | None = None
    commit: str | None = None
    repo: str | None = None

    def describe(self) -> str:
        if self.version:
            return self.version
        return f"{self.repo or 'commit'}@{self.commit}"

    @property
    def first(self) -> str | None:
        """The one release to name where one is needed ("the release that ships it", "upgrade to"): the lowest
        lower bound of ``version`` (core/pep440.fixed_in_first); None for a commit."""
        return fixed_in_first(self.version) if self.version else None


@dataclass(frozen=True)
class GitBaseline:
    """A git checkout a target applies to: its commit, and checkouts it requires."""

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
    """One distribution a manifest targets: its version range, commit, patches and checks."""

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
    """The diffstat a manifest pins for a patch file (files, insertions, deletions)."""

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

    def matches_version(self, version: str | Version | None) -> bool:
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


def check_problem(check: PostCheck, data: bytes | None) -> str | None:
    """Why a post-apply check fails on a file's bytes (None: absent), or None when it passes."""
    if data is None:
        return "file missing after applying"
    text = data.decode("utf-8", "replace")
    if check.contains is not None and check.contains not in text:
        return f"does not contain {check.contains!r} after applying"
    if check.not_contains is not None and check.not_contains in text:
        return f"still contains {check.not_contains!r} after applying"
    return None


@dataclass(frozen=True)
class Manifest:
    """One version of one hotfix, as its TOML file declares it (validated on load)."""

    id: str
    version: int | str
    title: str
    targets: tuple[TargetSpec, ...]
    patches: tuple[PatchSpec, ...]
    description: str = ""
    symptoms: tuple[str, ...] = ()  # free text, kept for older manifests; doctor reads ``signatures``
    kind: str = "hotfix"
    signatures: tuple[Signature, ...] = ()
    confirm: tuple[ConfirmStep, ...] = ()  # doctor: how to get the evidence that confirms a "possible" verdict
    platforms: tuple[str, ...] = ()  # doctor: the platforms the bug occurs on (cuda, rocm, ascend, ...); () = any
    workaround: str | None = None  # advisories: what to do instead of a patch
    fixed_by: str | None = None  # advisories: "ID@VERSION", the catalog hotfix (from that version on) that fixes it
    fixed_in: FixedIn | None = None
    supersedes: tuple[int | str, ...] = ()
    conflicts: tuple[str, ...] = ()  # hotfix ids that must not be applied together with this one
    after: tuple[str, ...] = ()      # hotfix ids this one goes on top of when both are applied (may share lines)
    references: tuple[Reference, ...] = ()
    requires: tuple[Requirement, ...] = ()
    checks: tuple[PostCheck, ...] = ()
    compiled_changes: tuple[str, ...] = ()  # compiled files the release this was made from also changed (not in the patch)
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

    def spec_for(self, target: Any) -> TargetSpec | None:
        """The one rule for which of this manifest's targets an install or checkout is (every command,
        the survey and doctor ask this): by distribution, names compared normalised, when the target
        knows its distribution; else -- a checkout without metadata -- by the import name, when the
        checkout has that package."""
        if target.distribution:
            return self.target_for(target.distribution)
        if getattr(target, "origin", None) is None:
            return None
        return next((s for s in self.targets if s.package == target.package), None)

    def is_fixed_in(self, version: str | Version | None, commit_checker: Callable[[str, str | None], bool] | None = None) -> bool:
        """True when the target already contains the upstream fix.

        A ``fixed_in`` version or union of specifier sets decides ``version`` (core/pep440.fixed_by, the one
        rule locks and records use too); a ``fixed_in`` commit is decided by
        ``commit_checker(commit, repo)`` (e.g. "is this commit an ancestor of HEAD"), False without one.
        """
        if self.fixed_in is None:
            return False
        if self.fixed_in.version is not None:
            return version is not None and fixed_by(str(parse_version(version)), self.fixed_in.version)
        if commit_checker is None or self.fixed_in.commit is None:
            return False
        return bool(commit_checker(self.fixed_in.commit, self.fixed_in.repo))

    def patches_for(self, version: str | Version | None) -> tuple[PatchSpec, ...]:
        """The patches to apply to ``version``: unranged ones always, ranged ones when they match."""
        if self.kind == "advisory":
            raise Refused(f"{self.ref} is an advisory: there is no patch to apply",
                          hint=f"`hotfix show {self.id}` gives the workaround" + (f"; the fix is {self.fixed_by}" if self.fixed_by else ""))
        chosen = tuple(p for p in self.patches if p.matches_version(version))
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


def failed_check(manifest: Manifest, read: Callable[[str], Any]) -> str | None:
    """The first of the manifest's post-apply checks that fails on the files ``read`` gives
    (``core.hunk_apply.Reader``), as ``<ref>: checks[i] <file>: <why>``; None when all pass."""
    for index, check in enumerate(manifest.checks):
        found = read(check.file)
        problem = check_problem(check, found.data if found is not None else None)
        if problem:
            return f"{manifest.ref}: checks[{index}] {check.file}: {problem}"
    return None


def parse_version(version: str | Version) -> Version:
    if isinstance(version, Version):
        return version
    try:
        return Version(str(version))
    except InvalidVersion:
        raise InvalidInput(f"not a PEP 440 version: {version!r}") from None


def in_range(versions: str | None, version: str | Version | None) -> bool:
    """core/pep440.range_takes, the guard's rule too (pre-releases such as 0.30.0rc2 match; no range matches
    everything; an unknown version only that); a ranged check on a version that is not PEP 440 is refused."""
    if versions is not None and version is not None:
        parse_version(version)  # InvalidInput (exit 8), as before: the CLI names the bad version
    return range_takes(versions, None if version is None else str(version))


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
