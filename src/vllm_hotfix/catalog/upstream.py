"""Upstream commits as patch sources, read with GitPython from a local clone.

A manifest patch may name ``repo`` + ``commit`` instead of a file. Its ``sha256`` pins the commit's
*normalised* diff (``core.diff.normalised_diff_bytes``, like Nix ``fetchpatch``), so abbreviated
``index`` lines, mail headers and the git version do not change the hash. ``load_commit_patch``
returns exactly those normalised bytes: ``manifest.verify_patch_bytes`` and ``check_stats`` work on
them as on any patch file, and they parse with ``strip = 1``.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path
from typing import Sequence

from packaging.utils import canonicalize_name

from vllm_hotfix_guard.core.hunk_apply import FileState
from vllm_hotfix_guard.core.diff import exclude_paths, normalised_diff_bytes, parse_patch
from vllm_hotfix_guard.errors import InvalidInput, Refused, Unavailable
from vllm_hotfix_guard.output import quote_path
from vllm_hotfix.catalog.model import PatchSpec
from vllm_hotfix_guard.paths import cache_dir
from vllm_hotfix.install.git import find_work_tree, git_available, has_commit

# Fixed diff options: a user's diff.noprefix / diff.renames / diff.algorithm config must not change the pin.
DIFF_OPTIONS = ("--full-index", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
                "--unified=3", "--diff-algorithm=myers", "--src-prefix=a/", "--dst-prefix=b/")


def _require_git(commit: str) -> None:
    if not git_available():
        raise Refused(f"git is not installed here: cannot read upstream commit {commit[:12]}",
                      hint="install git (apt-get install git), or use a catalog patch file instead of a commit")


def _open(repo_path: Path, commit: str):
    _require_git(commit)
    import git  # GitPython: imported lazily, only commands that read commits pay for it

    from vllm_hotfix.install.git import repository  # hardened: owner checked, no fsmonitor, hooks or global config

    repo = repository(repo_path, f"cannot read commit {commit[:12]}")
    try:
        return repo, repo.commit(commit)
    except (git.BadName, ValueError, git.GitCommandError):
        raise Refused(f"commit {commit[:12]} not found in {repo_path}",
                      hint="fetch it first (git fetch origin) or pass another clone with --upstream-repo") from None


def _git_bytes(repo, command: str, *args: str) -> bytes:
    return getattr(repo.git, command)(*args, stdout_as_string=False, strip_newline_in_stdout=False)


def format_commit_patch(repo_path: Path, commit: str, paths: Sequence[str] = ()) -> bytes:
    """The commit as a ``git format-patch`` mail (its diff against the first parent), ``paths`` only if given.

    A merge commit (which format-patch skips) gives a plain ``git diff`` against its first parent.
    """
    repo, found = _open(repo_path, commit)
    pathspec = ("--", *(f":(literal){p}" for p in paths)) if paths else ()
    if len(found.parents) > 1:
        return _git_bytes(repo, "diff", *DIFF_OPTIONS, found.parents[0].hexsha, found.hexsha, *pathspec)
    return _git_bytes(repo, "format_patch", "-1", "--stdout", "--no-signature", "--root",
                      *DIFF_OPTIONS, found.hexsha, *pathspec)


def commit_info(repo_path: Path, commit: str) -> dict[str, str | None]:
    """Full sha, subject, body and the ``origin`` remote URL (None without one) of a commit."""
    repo, found = _open(repo_path, commit)
    subject, _, body = found.message.partition("\n")
    try:
        remote = repo.remotes.origin.url if "origin" in [r.name for r in repo.remotes] else None
    except ValueError:
        remote = None
    return {"sha": found.hexsha, "subject": subject.strip(), "body": body.strip(), "remote": remote}


def load_commit_patch(repo: Path, commit: str, exclude: Sequence[str] = ()) -> bytes:
    """The commit's normalised diff against its first parent; files matching ``exclude`` left out.

    The manifest pin (sha256 of the normalised diff) is over the diff *without* exclusions, like a patch file's
    hash and stats; callers that verify a pin load with no ``exclude`` and apply ``exclude_paths``.
    """
    full = normalised_diff_bytes(format_commit_patch(repo, commit))
    if not exclude:
        return full
    patch = parse_patch(full, strip=1, source=f"commit {commit[:12]}")
    kept = exclude_paths(patch, exclude)
    if len(kept.files) == len(patch.files):
        return full
    if not kept.files:
        raise Refused(f"commit {commit[:12]}: every changed file is excluded by {', '.join(exclude)}")
    paths = sorted({p for f in kept.files for p in (f.old_path, f.new_path) if p is not None})
    return normalised_diff_bytes(format_commit_patch(repo, commit, paths))


def find_commit_source(commit: str, upstream_repo: Path | None = None, target_root: Path | None = None,
                       repo_url: str | None = None) -> Path:
    """The local repository holding ``commit``: ``upstream_repo`` if given, else the target checkout."""
    _require_git(commit)
    searched = []
    if upstream_repo is not None:
        if has_commit(Path(upstream_repo), commit):
            return Path(upstream_repo)
        searched.append(str(upstream_repo))
    if target_root is not None:
        work_tree = find_work_tree(Path(target_root))
        if work_tree is not None:
            if has_commit(work_tree, commit):
                return work_tree
            searched.append(str(work_tree))
    where = ", ".join(searched) if searched else "any local clone (none given, and the target is not a git checkout)"
    clone = f"a clone of {repo_url}" if repo_url else "a clone that has it"
    raise Refused(f"commit {commit[:12]} not found in {where}", hint=f"pass --upstream-repo PATH ({clone})")


def load_pinned_commit(spec: PatchSpec, *, upstream_repo: Path | None = None, target_root: Path | None = None) -> bytes:
    """Find, read and verify a manifest's commit patch; the normalised diff, before ``spec.exclude``."""
    if spec.kind != "commit" or spec.commit is None:
        raise ValueError(f"{spec.label} is not a commit patch")
    source = find_commit_source(spec.commit, upstream_repo, target_root, spec.repo)
    data = load_commit_patch(source, spec.commit)
    actual = hashlib.sha256(data).hexdigest()
    if spec.sha256 is not None and actual != spec.sha256:
        raise Refused(f"{spec.label}: sha256 of the normalised diff in {source}: expected {spec.sha256}, got {actual}",
                      hint="that commit's content is not what the manifest pins (rewritten history?); nothing was changed")
    return data


# --- published wheels: the pristine bytes of a release -------------------------------------------


def release_prefix(distribution: str, version: str) -> str:
    """How a release's files are named: ``vllm_ascend-0.30.0rc2`` (wheels add ``-TAGS.whl``, sdists ``.tar.gz``)."""
    return f"{canonicalize_name(distribution).replace('-', '_')}-{version}"


def published_wheel(distribution: str, version: str, *, download: bool = True) -> Path:
    """The real wheel of ``distribution==version`` from the cache (``paths.cache_dir()/wheels``).

    Not cached: downloaded from the index pip is configured with (``catalog.wheelindex``, no pip
    needed), sha256-checked, with progress on stderr; ``errors.Unavailable`` when that fails. Cached: used
    only from a cache this user owns, and only when it still holds the index's sha256
    (``wheelcache.cached``: else fetched once more).
    """
    from vllm_hotfix.catalog.wheelcache import cached
    from vllm_hotfix.catalog.wheelindex import Index

    return cached(Index(), distribution, version, cache_dir() / "wheels", prefix=release_prefix(distribution, version),
                  download=download)


def open_release(distribution: str, release: str, *, repo: Path | None = None):
    """A ``Reader`` over the files of a published release: its wheel, else its sdist (``published_wheel``),
    or with ``repo`` the clone's tag of that release (``sources.release_tags``). Close it after use."""
    from vllm_hotfix.catalog.sources import SDIST_SUFFIX, GitTagReader, SdistReader, release_tags

    if repo is not None:
        tags = release_tags(repo)
        if release not in tags:
            raise Unavailable(f"{repo}: no tag of release {release} (v{release})",
                              hint="git fetch --tags, or pick --versions from `git -C REPO tag`")
        return GitTagReader(repo, tags[release])
    path = published_wheel(distribution, release)
    return SdistReader(path) if path.name.endswith(SDIST_SUFFIX) else WheelReader(path)


class WheelReader:
    """A ``core.hunk_apply.Reader`` over a wheel's files (paths relative to site-packages), no install needed."""

    def __init__(self, wheel: Path):
        self.wheel = Path(wheel)
        try:
            self._zip = zipfile.ZipFile(self.wheel)
        except (OSError, zipfile.BadZipFile) as exc:
            raise Refused(f"{self.wheel}: not a readable wheel: {exc}") from None
        self._members = {info.filename: info for info in self._zip.infolist() if not info.is_dir()}

    @property
    def archive(self) -> zipfile.ZipFile:
        return self._zip

    @property
    def members(self) -> dict[str, zipfile.ZipInfo]:
        """Every file of the wheel by its name (site-packages relative)."""
        return self._members

    def __call__(self, relpath: str) -> FileState | None:
        info = self._members.get(relpath)
        if info is None:
            return None
        mode = (info.external_attr >> 16) & 0o7777 or 0o644
        return FileState(self.read_member(info), mode)

    def read_member(self, info: zipfile.ZipInfo) -> bytes:
        """A member's bytes, capped by its declared size and by what it really inflates to (both at most
        ``inputs.ARCHIVE_MEMBER_LIMIT``: a 1.7 MB wheel declaring, or inflating to, a 400 MB member is
        refused, exit 8, before it is held)."""
        from vllm_hotfix_guard.inputs import ARCHIVE_MEMBER_LIMIT, size_text

        name = quote_path(info.filename)
        if info.file_size > ARCHIVE_MEMBER_LIMIT:
            raise InvalidInput(f"{self.wheel.name}: {name} declares {size_text(info.file_size)}, over the "
                               f"{size_text(ARCHIVE_MEMBER_LIMIT)} a wheel member read may be")
        try:
            with self._zip.open(info) as member:
                data = member.read(ARCHIVE_MEMBER_LIMIT + 1)
        except (OSError, zipfile.BadZipFile, EOFError, ValueError) as exc:  # CRC, truncated, bad compression
            raise InvalidInput(f"{self.wheel.name}: {name}: not readable: {exc}") from None
        if len(data) > ARCHIVE_MEMBER_LIMIT or len(data) != info.file_size:
            raise InvalidInput(f"{self.wheel.name}: {name} inflates to {'more than ' if len(data) > ARCHIVE_MEMBER_LIMIT else ''}"
                               f"{size_text(len(data))}, not the {size_text(info.file_size)} it declares")
        return data

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> WheelReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def published_releases(distribution: str, *, repo: Path | None = None) -> list[str]:
    """Releases of ``distribution`` with a (non-yanked) wheel or sdist on the configured indexes, oldest first;
    with ``repo``, the releases the clone has a tag of."""
    from packaging.version import Version

    from vllm_hotfix.catalog.wheelindex import Index

    if repo is not None:
        from vllm_hotfix.catalog.sources import release_tags

        return sorted(release_tags(repo), key=Version)
    return Index().releases(distribution)
