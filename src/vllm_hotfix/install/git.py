"""Git baselines of source checkouts (vllm-ascend, /vllm-workspace/vllm). GitPython is imported lazily."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from vllm_hotfix_guard.errors import Refused
from vllm_hotfix_guard.install.facts import find_work_tree  # noqa: F401 - the one rule, re-exported
from vllm_hotfix_guard.install.version import checkout_owner_problem, git_available, git_env  # noqa: F401 - re-exported


@dataclass(frozen=True)
class GitInfo:
    """The git state of a checkout: HEAD, branch, nearest tag, dirty or not."""

    root: Path
    commit: str | None            # full sha of HEAD, None in a repository without commits
    branch: str | None            # None when HEAD is detached
    describe: str | None          # nearest tag, e.g. 'v0.30.0-3-gabc1234'
    dirty: tuple[str, ...]        # 'XY path' lines of `git status --porcelain`

    @property
    def clean(self) -> bool:
        return not self.dirty

    def to_json(self) -> dict[str, Any]:
        return {"root": str(self.root), "commit": self.commit, "branch": self.branch,
                "describe": self.describe, "clean": self.clean, "dirty": list(self.dirty)}


def _repo(root: Path, purpose: str):
    if not git_available():
        raise Refused(
            f"git is not installed here: cannot check {purpose} of {root}",
            hint="install git (apt-get install git) or pass the checkout as files with a known RECORD",
        )
    return repository(root, f"cannot check {purpose}")


def repository(root: Path, why: str):
    """The GitPython Repo of the work tree holding ``root``, hardened: refused (exit 3, one line) when
    another user owns it (``install.version.checkout_owner_problem``, git's dubious ownership), and every
    git it runs gets ``install.version.git_env`` (no system/global configuration, no fsmonitor, hooks or
    pager). ``why``: what cannot be done, for the messages."""
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    import git  # GitPython: imported here so commands that never touch git do not pay for it

    try:
        repo = git.Repo(root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise Refused(f"{root} is not a git work tree: {why}") from None
    top = Path(repo.working_tree_dir) if repo.working_tree_dir else Path(repo.git_dir).parent
    problem = checkout_owner_problem(top)
    if problem is not None:
        repo.close()
        raise Refused(f"{problem}; {why}", hint=f"run hotfix as the user who owns {top} (sudo -u '#{os.lstat(top).st_uid}' "
                      f"...), or give it to this user (chown -R)")
    repo.git.update_environment(**git_env())
    return repo


def dubious(exc: Exception, top: Path | str) -> Refused | None:
    """git's own "dubious ownership" refusal (a parent's .git, a worktree's gitdir) as the one-line error."""
    if "dubious ownership" in str(getattr(exc, "stderr", "") or exc):
        return Refused(f"{top}: git refuses this checkout (dubious ownership: another user owns it)",
                       hint="run hotfix as the user who owns the checkout")
    return None


def _head_sha(repo) -> str | None:
    try:
        return repo.head.commit.hexsha
    except ValueError:  # unborn HEAD: no commit yet
        return None


def _resolve(repo, rev: str) -> str | None:
    import git

    try:
        return repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}") or None
    except git.GitCommandError:
        return None


def _status(repo) -> list[tuple[str, str]]:
    """(code, path) for every changed or untracked file, paths relative to the work tree."""
    # GIT_OPTIONAL_LOCKS=0 (git_env): a status query must not rewrite the user's .git/index (as `git status`
    # does opportunistically), so looking at a checkout never writes to it.
    import git

    try:
        raw = repo.git.status("--porcelain=v1", "-z", "--untracked-files=all")  # git_env: GIT_OPTIONAL_LOCKS=0
    except git.GitCommandError as exc:
        why = (str(exc.stderr or "").strip().splitlines() or [f"exit {exc.status}"])[-1]
        raise dubious(exc, repo.working_tree_dir) or Refused(f"{repo.working_tree_dir}: git status failed: {why}") from None
    fields = raw.split("\0")
    result = []
    i = 0
    while i < len(fields):
        field = fields[i]
        i += 1
        if len(field) < 4:
            continue
        code, path = field[:2], field[3:]
        if "R" in code or "C" in code:
            i += 1  # the original path of a rename/copy follows
        result.append((code, path))
    return result


def _describe_status(code: str) -> str:
    if code == "??":
        return "untracked"
    letters = set(code.replace(" ", ""))
    for letter, word in (("D", "deleted"), ("A", "added"), ("R", "renamed"), ("U", "unmerged")):
        if letter in letters:
            return word
    return "modified"


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "(no commit)"


def head(root: Path) -> str | None:
    return _head_sha(_repo(root, "HEAD"))


def has_commit(root: Path, rev: str) -> bool:
    return _resolve(_repo(root, f"commit {rev}"), rev) is not None


def is_ancestor(root: Path, rev: str) -> bool:
    """True when ``rev`` is HEAD or an ancestor of it (an upstream fix already contained)."""
    repo = _repo(root, f"ancestry of {rev}")
    sha = _resolve(repo, rev)
    current = _head_sha(repo)
    if sha is None or current is None:
        return False
    return sha == current or repo.is_ancestor(sha, current)


def blob_id(data: bytes) -> str:
    """The id git gives a file's bytes (``git hash-object``)."""
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def head_blobs(root: Path, paths: Iterable[str]) -> dict[str, str | None]:
    """The blob id of each path (relative to the work tree's top) at HEAD; None when HEAD lacks it."""
    repo = _repo(root, "files at HEAD")
    try:
        tree = repo.head.commit.tree
    except ValueError:  # no commit yet
        return {path: None for path in paths}
    out = {}
    for path in paths:
        try:
            item = tree / path
            out[path] = item.hexsha if item.type == "blob" else None
        except KeyError:
            out[path] = None
    return out


def info(root: Path) -> GitInfo:
    repo = _repo(root, "the state")
    try:
        branch = None if repo.head.is_detached else repo.active_branch.name
    except TypeError:
        branch = None
    import git

    try:
        describe = repo.git.describe("--tags", "--always", "--dirty")
    except git.GitCommandError:
        describe = None
    dirty = tuple(f"{code} {path}" for code, path in _status(repo))
    return GitInfo(Path(repo.working_tree_dir), _head_sha(repo), branch, describe, dirty)


def check_baseline(root: Path, expected_rev: str | None, allow: Iterable[str] = ()) -> list[str]:
    """Problems that stop ``root`` from being the expected pristine checkout (empty list: at baseline).

    ``expected_rev``: full or abbreviated sha, tag or branch that HEAD must be; None to check cleanliness only.
    ``allow``: globs of paths (relative to the work tree) that may be modified or untracked.
    """
    repo = _repo(root, "the baseline")
    top = Path(repo.working_tree_dir)
    problems = []
    current = _head_sha(repo)
    if expected_rev:
        wanted = _resolve(repo, expected_rev)
        if wanted is None:
            problems.append(
                f"{top}: expected commit {expected_rev} is not in this repository (HEAD is {_short(current)})"
            )
        elif wanted != current:
            problems.append(
                f"{top}: HEAD is {_short(current)}, not the expected {expected_rev} ({_short(wanted)})"
            )
    allowed = tuple(allow)
    for code, path in _status(repo):
        if any(fnmatch.fnmatchcase(path, pattern) for pattern in allowed):
            continue
        problems.append(f"{top}: {path} is {_describe_status(code)} (git status: {code.strip()})")
    return problems




def _git_tool(purpose: str, args: list[str], files: dict[str, bytes]) -> tuple[int, bytes]:
    """Run a git command that needs no repository on ``files`` written to a temporary directory."""
    import subprocess
    import tempfile

    if not git_available():
        raise Refused(f"git is not installed here: {purpose} runs git",
                      hint="port is an authoring command: run it where git is installed (apt-get install git)")
    with tempfile.TemporaryDirectory(prefix="hotfix-git-") as tmp:
        for name, data in files.items():
            (Path(tmp) / name).write_bytes(data)
        done = subprocess.run([os.environ.get("GIT_PYTHON_GIT_EXECUTABLE", "git"), *args], cwd=tmp,
                              capture_output=True, env=git_env())  # no configuration changes a merge or a diff
    if done.returncode < 0 or done.returncode > 127:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise Refused(f"{purpose}: git failed: {why[0] if why else f'exit {done.returncode}'}")
    return done.returncode, done.stdout


def merge_file(ours: bytes, base: bytes, theirs: bytes, marker_size: int) -> tuple[int, bytes]:
    """``git merge-file -p --diff3`` of three texts: (number of conflict blocks, the merged text).

    No repository is needed and no configuration changes the result (style, labels and marker size are
    given). No git binary, a binary input: Refused.
    """
    return _git_tool("the three-way merge (git merge-file)",
                     ["merge-file", "-p", "--diff3", f"--marker-size={marker_size}", "-L", "ours", "-L", "base",
                      "-L", "theirs", "ours", "base", "theirs"], {"ours": ours, "base": base, "theirs": theirs})


def diff_texts(path: str, before: bytes, after: bytes) -> bytes:
    """``git diff`` of one modified file (myers, indent heuristic, 3 lines of context) as ``a/PATH b/PATH``,
    without an ``index`` line; b'' when equal. For a created or deleted file use ``core.render.file_diff``."""
    code, out = _git_tool("the diff of a ported file (git diff --no-index)",
                          ["diff", "--no-index", "--no-color", "--no-ext-diff", "--no-textconv", "--unified=3",
                           "--diff-algorithm=myers", "--indent-heuristic", "--src-prefix=a/", "--dst-prefix=b/",
                           "--", "old", "new"], {"old": before, "new": after})
    if code == 0 or not out:
        return b""
    body = out[out.index(b"\n@@") + 1:]
    name = path.encode("utf-8", "surrogateescape")
    return b"diff --git a/%s b/%s\n--- a/%s\n+++ b/%s\n" % (name, name, name, name) + body
