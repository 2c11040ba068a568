"""The version of a source checkout: what its build would produce. One rule, stdlib only.

A checkout (``--root``, an editable install, a work tree on ``PYTHONPATH``) has no installed metadata,
or metadata written when it was installed that goes stale as HEAD moves. Its version is derived, in
this order:

1. a static ``[project] version`` in ``pyproject.toml``: the build uses it as it is;
2. git (vLLM and vllm-ascend version with setuptools-scm): HEAD exactly at a version tag gives the
   tag's version (``v0.30.0`` -> ``0.30.0``); N commits after the nearest one, setuptools-scm's
   default ``guess-next-dev`` scheme with its ``node-and-date`` local part: the last number of the
   tag bumped, ``.devN``, ``+g`` and nine hex digits of HEAD (``0.30.1.dev3+g02c7db4c5``);
3. the ``_version.py`` setuptools-scm writes into the package at build time (read as text, never run);
4. the metadata found beside it (an editable install's dist-info, an egg-info left in the checkout).

A dirty work tree is left out of the version, unlike setuptools-scm (``.dev0`` / ``.dYYYYMMDD``):
applying a hotfix makes the tree dirty, and the release the checkout stands on does not change with
it (``hotfix where`` lists the dirty files). The answer carries what it was derived from, so every
command can say so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from vllm_hotfix_guard.core.pep440 import normal_form

GIT_TIMEOUT = 10.0
MAX_TEXT = 256 * 1024  # pyproject.toml / _version.py larger than this are not read
# setuptools-scm's defaults (vcs_versioning._config / _backends._git): the tag pattern, and describe's output
TAG_PATTERN = r"^(?:[\w-]+-)?(?P<version>[vV]?\d+(?:\.\d+){0,2}[^\+]*)(?:\+.*)?$"
DESCRIBE_PATTERN = r"^(?P<tag>.+)-(?P<distance>\d+)-g(?P<node>[0-9a-f]+)$"
NODE_HEX = 9
VERSION_FILE_PATTERN = r"""^(?:__version__\s*=\s*)?(?:version|__version__)\s*(?::\s*str\s*)?=\s*['"]([^'"\n]+)['"]"""


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckoutVersion:
    """A checkout's version and what it was derived from."""

    version: str | None
    source: str | None  # "pyproject" | "git-tag" | "git-describe" | "version-file" | "metadata" | None
    detail: str | None  # what was read, for people: "git tag v0.30.0", "vllm/_version.py", ...
    distribution: str | None = None  # [project] name in pyproject.toml, when there is one
    file: str | None = None  # the file under the root it was read from ('pyproject.toml', 'vllm/_version.py')

    @property
    def derived(self) -> bool:
        """Computed from the checkout rather than read from installed metadata."""
        return self.source is not None and self.source != "metadata"


def checkout_version(root: Path, package: str | None, *, metadata: str | None = None,
                     metadata_from: str | None = None) -> CheckoutVersion:
    """The version ``root``'s build would produce (see the module text for the order). ``metadata``:
    the version a dist-info / egg-info found for it says (the last resort), read from ``metadata_from``."""
    root = Path(root)
    project = _pyproject(root)
    name = project.get("name") if isinstance(project.get("name"), str) else None
    dynamic = project.get("dynamic") if isinstance(project.get("dynamic"), list) else []
    static = project.get("version")
    if isinstance(static, str) and "version" not in dynamic and normal_form(static):
        return CheckoutVersion(version=normal_form(static), source="pyproject", detail=f"{root / 'pyproject.toml'} "
                               "[project] version", distribution=name, file="pyproject.toml")
    from_git = _from_git(root)
    if from_git is not None:
        version, source, detail = from_git
        return CheckoutVersion(version=version, source=source, detail=detail, distribution=name)
    if package:
        found = _from_version_file(root, package, project.get("_version_file"))
        if found is not None:
            version, path = found
            return CheckoutVersion(version=version, source="version-file", detail=str(path), distribution=name,
                                   file=path.relative_to(root).as_posix())
    if metadata:
        return CheckoutVersion(version=metadata, source="metadata", detail=metadata_from, distribution=name)
    return CheckoutVersion(version=None, source=None, detail=None, distribution=name)


def project_name(root: Path) -> str | None:
    """pyproject.toml's [project] name of the checkout at ``root`` (None: none): its distribution when no
    metadata names one (what ``checkout_version`` reports too, without deriving the version)."""
    name = _pyproject(Path(root)).get("name")
    return name if isinstance(name, str) else None


def git_available() -> bool:
    """A git binary is on PATH (or GIT_PYTHON_GIT_EXECUTABLE names one)."""
    return shutil.which(os.environ.get("GIT_PYTHON_GIT_EXECUTABLE", "git")) is not None


# -- every git we run, hardened (subprocess and GitPython alike) ------------------------------------------
# A checkout is input: its .git/config can name a core.fsmonitor command that `git status` runs, hooks,
# a pager. The caller's own configuration is not ours to take either (diff.noprefix changes a diff, and
# `safe.directory=*`, common in images and CI, would make git run another user's fsmonitor as root).
# So: no system or global configuration, and these set on the command line (GIT_CONFIG_COUNT: git -c).
GIT_OVERRIDES = (("core.fsmonitor", "false"), ("core.hooksPath", os.devnull), ("core.pager", "cat"),
                 ("core.untrackedCache", "false"), ("diff.external", ""), ("core.sshCommand", "false"),
                 ("protocol.allow", "never"), ("core.askPass", ""), ("credential.helper", ""))


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every git command vllm-hotfix runs: no system or global configuration
    (GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL and XDG_CONFIG_HOME pointed at nothing), ``GIT_OVERRIDES``
    as command-line configuration (the repository's fsmonitor, hooks and pager never run), no optional
    locks (looking at a checkout never rewrites its index), no prompt, the C locale."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_CONFIG")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, XDG_CONFIG_HOME=os.devnull,
               GIT_ATTR_NOSYSTEM="1", GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C",
               GIT_CONFIG_COUNT=str(len(GIT_OVERRIDES)))
    for index, (key, value) in enumerate(GIT_OVERRIDES):
        env[f"GIT_CONFIG_KEY_{index}"], env[f"GIT_CONFIG_VALUE_{index}"] = key, value
    env.update(extra or {})
    return env


def checkout_owner_problem(top: Path) -> str | None:
    """Why git must not run in the work tree ``top`` for this user (None: it may): git's own rule for a
    "dubious ownership", without what safe.directory would excuse -- the work tree and its .git must be
    owned by this user (as root under sudo, by SUDO_UID, as git allows). The one rule, asked before any
    git runs in a checkout (install/git.py, catalog/upstream.py, ``_from_git``)."""
    me = os.geteuid()
    allowed = {me}
    if me == 0 and os.environ.get("SUDO_UID", "").isdigit():
        allowed.add(int(os.environ["SUDO_UID"]))
    for path in (top, top / ".git"):
        try:
            owner = os.lstat(path).st_uid
        except OSError:
            continue
        if owner not in allowed:
            return (f"{path} is owned by uid {owner}, not by this user (uid {me}): git calls such a checkout "
                    f"\"dubious ownership\", and vllm-hotfix runs no git in it, whatever safe.directory says")
    return None


def next_dev_version(tag_version: str, distance: int, node: str | None) -> str:
    """setuptools-scm's guess-next-dev + node-and-date for a clean tree ``distance`` commits after the tag:
    ``1.0.0`` -> ``1.0.1.devN+g<node>``, ``1.0rc2`` -> ``1.0rc3.devN``, ``2.0.dev0`` -> ``2.0.devN``."""
    base = tag_version.split("+", 1)[0]
    if distance == 0:
        return base
    if ".dev" in base:
        prefix, tail = base.rsplit(".dev", 1)
        if tail != "0":
            raise ValueError(f"{tag_version}: a tag ending in .dev{tail} cannot be bumped (setuptools-scm refuses it)")
        guessed = prefix
    else:
        found = re.match(r"(.*?)(\d+)$", base)
        if found is None:
            raise ValueError(f"{tag_version} does not end with a number to bump")
        guessed = f"{found.group(1)}{int(found.group(2)) + 1}"
    return f"{guessed}.dev{distance}" + (f"+g{node[:NODE_HEX]}" if node else "")


def _tag_version(tag: str) -> str | None:
    found = re.match(TAG_PATTERN, tag)
    return normal_form(found.group("version")) if found else None


def _from_git(root: Path) -> tuple[str, str, str] | None:
    """(version, source, detail) from ``git describe`` as setuptools-scm runs it, without ``--dirty``
    (which would refresh the index: looking at a checkout never writes to it); None without git, a
    repository or a version tag."""
    if not git_available() or not (root.is_dir()):
        return None
    from vllm_hotfix_guard.install.worktree import find_work_tree

    top = find_work_tree(root)
    if top is None or checkout_owner_problem(top) is not None:
        return None
    git = os.environ.get("GIT_PYTHON_GIT_EXECUTABLE", "git")
    env = git_env()
    try:
        done = subprocess.run([git, "-C", str(root), "describe", "--tags", "--long", "--abbrev=40", "--match", "*[0-9]*"],
                              capture_output=True, text=True, timeout=GIT_TIMEOUT, env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.match(DESCRIBE_PATTERN, done.stdout.strip()) if done.returncode == 0 else None
    if found is None:
        return None
    tag, distance, node = found.group("tag"), int(found.group("distance")), found.group("node")
    version = _tag_version(tag)
    if version is None:
        return None
    if distance == 0:
        return version, "git-tag", f"git tag {tag}"
    try:
        guessed = next_dev_version(version, distance, node)
    except ValueError:
        return None
    return guessed, "git-describe", (f"git describe {tag}-{distance}-g{node[:NODE_HEX]} "
                                     "(setuptools-scm's guess-next-dev)")


def _read_text(path: Path) -> str | None:
    from vllm_hotfix_guard.paths import read_small_file

    data = read_small_file(path, MAX_TEXT)
    return data.decode("utf-8", errors="replace") if data is not None else None


def _pyproject(root: Path) -> dict:
    """pyproject.toml's [project] table (empty when absent, unreadable or not TOML)."""
    text = _read_text(root / "pyproject.toml")
    if text is None:
        return {}
    try:
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        data = tomllib.loads(text)
    except Exception:  # noqa: BLE001 - a broken pyproject.toml says nothing about the version
        return {}
    project = data.get("project")
    scm = (data.get("tool") or {}).get("setuptools_scm") if isinstance(data.get("tool"), dict) else None
    out = dict(project) if isinstance(project, dict) else {}
    if isinstance(scm, dict):
        out["_version_file"] = scm.get("version_file") or scm.get("write_to")
    return out


def _from_version_file(root: Path, package: str, configured: object) -> tuple[str, Path] | None:
    """The version setuptools-scm wrote (``write_to`` / ``version_file``, else ``<package>/_version.py``)."""
    candidates = []
    if isinstance(configured, str) and not os.path.isabs(configured) and ".." not in Path(configured).parts:
        candidates.append(root / configured)
    candidates.append(root / package / "_version.py")
    for path in candidates:
        text = _read_text(path)
        found = re.search(VERSION_FILE_PATTERN, text, re.MULTILINE) if text else None
        version = normal_form(found.group(1)) if found else None
        if version:
            return version, path
    return None
