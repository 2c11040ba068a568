"""The one rule from "how PACKAGE resolves here" (the probe's facts) to the install it belongs to: its
kind, its root (what patch paths and records are relative to, and what keys the state directory), its
distribution and version.

Stdlib only and pure apart from file-existence checks: ``install/locate.py`` (every command, through
the probe in the target interpreter) and the in-process guard (``vllm_hotfix_guard/plugin.py``, from the same
facts gathered in the vLLM process by ``probe.install_facts``) both call ``decide``, so the guard
finds the record `hotfix apply` made for a src-layout editable install or a subdirectory of a checkout.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional


WHEEL, EDITABLE, GIT, DIRECTORY = "wheel", "editable", "git", "directory"


class Decided:
    """What ``decide`` found (plain __slots__ class: the guard builds one per process)."""

    __slots__ = ("kind", "root", "package_dir", "origin", "dist", "dist_info")

    def __init__(self, kind: str, root: Path, package_dir: Path, origin: Optional[Path],
                 dist: Optional[dict], dist_info: Optional[Path]):
        self.kind, self.root, self.package_dir, self.origin = kind, root, package_dir, origin
        self.dist, self.dist_info = dist, dist_info

    @property
    def distribution(self) -> Optional[str]:
        return self.dist["name"] if self.dist else None

    @property
    def version(self) -> Optional[str]:
        return self.dist.get("version") if self.dist else None


def __getattr__(name: str):
    """``find_work_tree`` (install/worktree.py), the one rule, re-exported: imported on first use, as a wheel
    install (the guard's common case) never looks for a work tree."""
    if name == "find_work_tree":
        from vllm_hotfix_guard.install.worktree import find_work_tree

        return find_work_tree
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class NotImportable(Exception):
    """The facts show no importable package with files on disk (the message says why)."""


HEAD_CAP = 4096  # HEAD, a loose ref, gitdir / commondir files: a line each
PACKED_REFS_CAP = 32 << 20  # packed-refs of a repository with every vLLM tag is well under 1 MiB


def read_head(path: Path) -> Optional[str]:
    """The commit HEAD of the git work tree holding ``path`` names, read from the repository's files as
    git lays them out (``.git`` directory or ``gitdir:`` file, HEAD, loose refs, packed-refs), without
    running git: the same answer for every user and in every process, the guard's included (git refuses
    a repository another user owns). None when there is no work tree, HEAD is unborn, or anything read is
    not what git writes (a symbolic link, an oversized file, a ref outside refs/): then the version decides.
    Every file is read by paths.read_small_file (no link followed, regular files, capped)."""
    from vllm_hotfix_guard.install.worktree import find_work_tree

    top = find_work_tree(path)
    if top is None:
        return None
    from vllm_hotfix_guard.paths import read_small_file

    def line(file: Path, cap: int = HEAD_CAP) -> Optional[str]:
        data = read_small_file(file, cap)
        return data.decode("utf-8", "replace").strip() if data is not None else None

    gitdir = top / ".git"
    if gitdir.is_file():  # a linked worktree or a submodule: "gitdir: PATH" (a link to it is not read)
        pointer = line(gitdir)
        if not pointer or not pointer.startswith("gitdir:"):
            return None
        gitdir = (top / pointer[len("gitdir:"):].strip()).resolve()
    common = gitdir
    shared = line(gitdir / "commondir")
    if shared:
        common = (gitdir / shared).resolve()
    value = line(gitdir / "HEAD")
    for _ in range(5):  # HEAD -> refs/heads/main (-> another symbolic ref, rarely)
        if value is None:
            return None
        if not value.startswith("ref:"):
            from vllm_hotfix_guard.core.docfields import is_commit

            return value.lower() if is_commit(value.lower()) else None
        ref = value[len("ref:"):].strip()
        parts = ref.split("/")
        if parts[0] != "refs" or any(p in ("", ".", "..") for p in parts) or "\\" in ref or "\x00" in ref:
            return None
        loose = next((d / ref for d in (gitdir, common) if os.path.lexists(d / ref)), None)
        value = line(loose) if loose is not None else _packed_ref(common / "packed-refs", ref)
    return None


def _packed_ref(file: Path, ref: str) -> Optional[str]:
    from vllm_hotfix_guard.paths import read_small_file

    data = read_small_file(file, PACKED_REFS_CAP)
    if data is None:
        return None
    tail = b" " + ref.encode("utf-8", "surrogateescape") + b"\n"
    at = (data if data.endswith(b"\n") else data + b"\n").find(tail)
    if at < 0:
        return None
    start = data.rfind(b"\n", 0, at) + 1
    return data[start:at].decode("ascii", "replace")


def checkout_commit(decided: "Decided") -> Optional[str]:
    """HEAD's commit for a checkout (an editable install or a git work tree), None for anything else:
    with the version, what a record or a lock of a checkout names its release by (core.verdict.release_seen)."""
    return read_head(decided.root) if decided.kind in (EDITABLE, GIT) else None


def release_version(decided: "Decided", package: str) -> tuple[Optional[str], Optional[str], Optional[str], Optional[str]]:
    """(version, what it was derived from or None, the file under the root it was read from, pyproject's
    project name) of the install ``decided`` names: its metadata's version for a wheel or a directory; for
    a checkout (editable, git) what its build would produce (install/version.py). The one rule: every
    command's Target (install/locate) and the guard's lazy version of a checkout."""
    if decided.kind not in (EDITABLE, GIT):
        return decided.version, None, None, None
    return checkout_release(decided.root, package, decided.version,
                            str(decided.dist_info / "METADATA") if decided.dist_info else None)


def distribution_of(decided: "Decided") -> Optional[str]:
    """The distribution an install is: its metadata's name, else for a checkout its pyproject [project] name
    (what `--root` says). The one rule for every command's Target and the guard (the fingerprint names it)."""
    if decided.distribution is not None or decided.kind not in (EDITABLE, GIT):
        return decided.distribution
    from vllm_hotfix_guard.install.version import project_name

    return project_name(decided.root)


def checkout_release(root: Path, package: Optional[str], metadata: Optional[str],
                     metadata_from: Optional[str]) -> tuple[Optional[str], Optional[str], Optional[str], Optional[str]]:
    """``release_version``'s tuple for the checkout at ``root`` (install/version.checkout_version, with
    ``metadata`` read from ``metadata_from`` as the last resort): also what `--root` gives (install/locate)."""
    from vllm_hotfix_guard.install.version import checkout_version

    found = checkout_version(root, package, metadata=metadata, metadata_from=metadata_from)
    return found.version, (found.detail if found.derived else None), found.file, found.distribution


def under(path: Path, parent: Path) -> bool:
    try:
        Path(path).resolve().relative_to(Path(parent).resolve())
        return True
    except ValueError:
        return False


def package_location(facts: dict[str, Any]) -> tuple[Path, Optional[Path]]:
    """(package directory, its __init__.py or None) from the facts' find_spec answer; NotImportable."""
    spec = facts.get("spec")
    if spec is None or (not spec.get("origin") and not spec.get("locations")):
        why = f" ({facts['spec_error']})" if facts.get("spec_error") else ""
        raise NotImportable(f"package {facts['package']} is not importable by {facts.get('python')}{why}")
    origin = Path(spec["origin"]) if spec.get("origin") and spec["origin"] not in ("namespace", "built-in", "frozen") else None
    if spec.get("locations"):
        return Path(spec["locations"][0]), origin
    if origin is not None:
        return origin.parent, origin
    raise NotImportable(f"package {facts['package']} has no files on disk ({spec.get('origin')}): nothing to patch")


def choose_distribution(facts: dict[str, Any], package_dir: Path) -> Optional[dict]:
    """The distribution the loaded copy belongs to: the first whose metadata lies beside (above) the
    package directory, else the first that provides the package at all (an editable install)."""
    dists = facts["distributions"]
    for dist in dists:
        if dist["dist_info"] and under(package_dir, Path(dist["dist_info"]).parent):
            return dist
    return dists[0] if dists else None


def editable_project(dist: Optional[dict]) -> Optional[Path]:
    """The project directory of an editable install (PEP 610 direct_url.json, as the probe read it)."""
    if not dist or not dist.get("direct_url"):
        return None
    import json  # here: only an editable install has a direct_url to read

    try:
        url = json.loads(dist["direct_url"])
    except (ValueError, RecursionError):
        return None
    if not isinstance(url, dict) or not isinstance(url.get("dir_info"), dict) or not url["dir_info"].get("editable"):
        return None
    text = url.get("url")
    if not isinstance(text, str) or not text.startswith("file://"):
        return None
    from urllib.parse import unquote, urlparse

    return Path(unquote(urlparse(text).path))


def decide(facts: dict[str, Any]) -> Decided:
    """Kind and root of the install the facts' package is loaded from (NotImportable when none):

    - ``editable``: the distribution's direct_url.json says editable and the loaded directory is inside
      its project (or inside what its setuptools finder maps the package to): root = the project;
    - ``wheel``: a distribution with a RECORD beside the loaded directory: root = that site-packages;
    - ``git``: the loaded directory is inside a git work tree: root = the top of the work tree;
    - ``directory``: else root = the directory holding the package.
    """
    package_dir, origin = package_location(facts)
    dist = choose_distribution(facts, package_dir)
    dist_info = Path(dist["dist_info"]) if dist and dist.get("dist_info") else None
    editable = editable_project(dist)
    finder_paths = [Path(f["path"]) for f in facts.get("editable_finders") or ()]
    if editable is not None and (under(package_dir, editable) or any(under(package_dir, p) for p in finder_paths)):
        kind, root = EDITABLE, editable
    elif dist is not None and dist["has_record"] and dist_info is not None and under(package_dir, dist_info.parent):
        kind, root = WHEEL, dist_info.parent
    else:
        from vllm_hotfix_guard.install.worktree import find_work_tree

        top = find_work_tree(package_dir)
        kind, root = (GIT, top) if top is not None else (DIRECTORY, package_dir.parent)
    return Decided(kind, Path(root), package_dir, origin, dist, dist_info)



def record_sha256s(dist_info: Path, paths) -> dict[str, Optional[str]]:
    """The sha256 (hex) pip's RECORD of ``dist_info`` gives each path (relative to site-packages): None for
    a path it does not list; a path it lists without a sha256 is left out (nothing to compare). A search in
    RECORD's bytes for just those lines (a vLLM RECORD holds 5,000): what the guard and `status` compare a
    record's pristine bytes with. {} when there is no readable RECORD."""
    import base64

    try:
        with open(Path(dist_info) / "RECORD", "rb") as handle:
            data = b"\n" + handle.read(64 << 20)
    except OSError:
        return {}
    out: dict[str, Optional[str]] = {}
    for path in paths:
        head = b"\n" + path.encode("utf-8", "surrogateescape") + b","
        at = data.find(head)
        if at < 0:
            out[path] = None
            continue
        end = data.find(b"\n", at + 1)
        line = data[at + len(head):end if end >= 0 else len(data)]
        algorithm, _, value = line.split(b",", 1)[0].partition(b"=")
        if algorithm != b"sha256" or not value.strip():
            continue
        try:
            out[path] = base64.urlsafe_b64decode(value.strip() + b"=" * (-len(value.strip()) % 4)).hex()
        except ValueError:
            continue
    return out
