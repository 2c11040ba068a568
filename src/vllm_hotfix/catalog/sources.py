"""Release sources other than a wheel, read as the files an install of that release holds.

vllm-ascend publishes most of its releases only as sdists (``vllm_ascend-0.30.0rc2.tar.gz``: pip cannot
install them without CANN, but their ``vllm_ascend/`` tree is what a checkout or a build holds), and its
git repository tags each release (``v0.23.0``). Both are ``core.hunk_apply.Reader`` s with the paths a
patch uses (``vllm_ascend/...``), like ``upstream.WheelReader``:

- ``SdistReader``: members of ``NAME-VERSION/`` of a ``.tar.gz``; regular files only (a link or device
  member counts as absent), each capped at ``inputs.ARCHIVE_MEMBER_LIMIT``; a member outside the one
  top folder, or with ``..``, is not a file of the release.
- ``GitTagReader``: ``git cat-file`` of ``TAG:path`` in a local clone (hardened: ``install/git.repository``).
"""

from __future__ import annotations

import tarfile
from pathlib import Path, PurePosixPath

from vllm_hotfix_guard.core.hunk_apply import FileState
from vllm_hotfix_guard.errors import InvalidInput, Refused
from vllm_hotfix_guard.output import quote_path

SDIST_SUFFIX = ".tar.gz"


class SdistReader:
    """A ``Reader`` over a source distribution's files (paths relative to its top folder)."""

    def __init__(self, sdist: Path):
        self.sdist = Path(sdist)
        try:
            self._tar = tarfile.open(self.sdist, "r:gz")
            infos = self._tar.getmembers()
        except (OSError, tarfile.TarError, EOFError) as exc:
            raise Refused(f"{self.sdist}: not a readable sdist: {exc}") from None
        tops = {PurePosixPath(i.name).parts[0] for i in infos if PurePosixPath(i.name).parts}
        if len(tops) != 1:
            raise InvalidInput(f"{self.sdist.name}: expected one top folder, found {len(tops)}")
        self._members = {}
        for info in infos:
            parts = PurePosixPath(info.name).parts[1:]
            if info.isreg() and parts and ".." not in parts:
                self._members["/".join(parts)] = info

    @property
    def members(self) -> dict[str, tarfile.TarInfo]:
        return self._members

    def __call__(self, relpath: str) -> FileState | None:
        info = self._members.get(relpath)
        if info is None:
            return None
        from vllm_hotfix_guard.inputs import ARCHIVE_MEMBER_LIMIT, size_text

        name = quote_path(relpath)
        if info.size > ARCHIVE_MEMBER_LIMIT:
            raise InvalidInput(f"{self.sdist.name}: {name} is {size_text(info.size)}, over the "
                               f"{size_text(ARCHIVE_MEMBER_LIMIT)} an sdist member read may be")
        try:
            handle = self._tar.extractfile(info)
            data = handle.read(ARCHIVE_MEMBER_LIMIT + 1) if handle is not None else b""
        except (OSError, tarfile.TarError, EOFError) as exc:
            raise InvalidInput(f"{self.sdist.name}: {name}: not readable: {exc}") from None
        if len(data) != info.size:
            raise InvalidInput(f"{self.sdist.name}: {name}: {len(data)} bytes, not the {info.size} it declares")
        return FileState(data, info.mode & 0o7777 or 0o644)

    def close(self) -> None:
        self._tar.close()

    def __enter__(self) -> SdistReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class GitTagReader:
    """A ``Reader`` over the files of one tag of a local git clone."""

    def __init__(self, repo: Path, tag: str):
        from vllm_hotfix.install.git import repository

        self.repo, self.tag = Path(repo), tag
        self._repo = repository(self.repo, f"cannot read tag {tag}")

    def __call__(self, relpath: str) -> FileState | None:
        import git

        spec = f"{self.tag}^{{commit}}:{relpath}"
        try:
            line = self._repo.git.ls_tree(f"{self.tag}^{{commit}}", "--", relpath)
        except git.GitCommandError as exc:
            raise Refused(f"{self.repo}: cannot read {self.tag}: {exc.stderr.strip() or exc}") from None
        if not line or not line.startswith(("100644 blob", "100755 blob")):
            return None  # absent, a folder, a link or a submodule: not a file of the release
        data = self._repo.git.cat_file("blob", spec, stdout_as_string=False, strip_newline_in_stdout=False)
        return FileState(data, 0o755 if line.startswith("100755") else 0o644)

    def close(self) -> None:
        self._repo.close()

    def __enter__(self) -> GitTagReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def release_tags(repo: Path) -> dict[str, str]:
    """``{release: tag}`` for a clone's tags that name a release (``v0.23.0`` / ``0.23.0``; PEP 440, no dev)."""
    from packaging.version import InvalidVersion, Version

    from vllm_hotfix.install.git import repository

    found: dict[str, str] = {}
    with repository(Path(repo), "cannot list its tags") as handle:
        for tag in handle.git.tag("--list").splitlines():
            try:
                version = Version(tag.strip().removeprefix("v"))
            except InvalidVersion:
                continue
            if not version.is_devrelease:
                found.setdefault(str(version), tag.strip())
    return found
