"""The one rule from "how PACKAGE resolves here" (the probe's facts) to the install it belongs to: its
kind, its root (what patch paths and records are relative to, and what keys the state directory), its
distribution and version.

Stdlib only and pure apart from file-existence checks: ``install/locate.py`` (every command, through
the probe in the target interpreter) and the in-process guard (``containers/guard.py``, from the same
facts gathered in the vLLM process by ``probe.install_facts``) both call ``decide``, so the guard
finds the record `hotfix apply` made for a src-layout editable install or a subdirectory of a checkout.
"""

from __future__ import annotations

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


class NotImportable(Exception):
    """The facts show no importable package with files on disk (the message says why)."""


def find_work_tree(path: Path) -> Optional[Path]:
    """Top of the git work tree containing ``path`` (found from .git entries; needs no git binary)."""
    here = Path(path).resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


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
