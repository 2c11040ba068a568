"""Which files of a target are mount points, and where their bytes come from: the one reader of
/proc/self/mountinfo (Linux; elsewhere, and when it cannot be read, nothing is mounted).

A patched ``.py`` bind-mounted over site-packages (seed 001) is in effect only as long as the mount is:
a rebuild from a compose file without it loses the fix. `where`, `status` and `verify` say so; the
transaction refuses to replace a mount point (txn/writable.py: EBUSY). Stdlib only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

MOUNTINFO = "/proc/self/mountinfo"
MOUNTINFO_LIMIT = 8 << 20  # a node with thousands of mounts has a few hundred KB


@dataclass(frozen=True, slots=True, kw_only=True)
class Mount:
    """One line of mountinfo (proc(5)): a mount point and the part of a file system shown there."""

    mount_id: int
    parent_id: int
    device: str        # major:minor of the file system
    root: str          # the path inside that file system shown at ``point`` (a bind mount's source there)
    point: str         # where it is mounted, in this process's view
    options: str       # per-mount options: ro / rw, ...
    fstype: str
    source: str        # the file system's source: a device, a volume name, "overlay", ...

    @property
    def read_only(self) -> bool:
        return "ro" in self.options.split(",")


@dataclass(frozen=True, slots=True, kw_only=True)
class MountedFile:
    """A file of a target whose bytes come through a mount below the target's root."""

    path: str          # relative to the target root, as recorded
    point: str         # the mount point holding it: the file itself, or a directory between root and file
    source: str        # where its bytes come from: a path visible here, else ROOT on SOURCE (the host's)
    visible: bool      # ``source`` is a path this process can open
    read_only: bool

    def to_json(self) -> dict:
        return {"path": self.path, "mount_point": self.point, "source": self.source, "source_visible": self.visible,
                "read_only": self.read_only}


_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> tuple[Mount, ...]:
    """Every well-formed line (``ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER``);
    others are skipped (the kernel writes this file, but nothing here may fail on it)."""
    found = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(" "), tail.split(" ")
        if not sep or len(fields) < 6 or len(rest) < 2 or not (fields[0].isdigit() and fields[1].isdigit()):
            continue
        found.append(Mount(mount_id=int(fields[0]), parent_id=int(fields[1]), device=fields[2],
                           root=_unescape(fields[3]), point=_unescape(fields[4]), options=fields[5],
                           fstype=_unescape(rest[0]), source=_unescape(rest[1])))
    return tuple(found)


def mount_table(path: str = MOUNTINFO) -> tuple[Mount, ...]:
    """This process's mounts, in mount order (a later mount of the same point hides an earlier one)."""
    from vllm_hotfix_guard.errors import InvalidInput
    from vllm_hotfix_guard.inputs import read_bounded

    try:
        data = read_bounded(path, cap=MOUNTINFO_LIMIT, what="mount table")
    except (OSError, InvalidInput):
        return ()
    return parse_mountinfo(data.decode("utf-8", "surrogateescape"))


def mount_points(table: tuple[Mount, ...] | None = None) -> set[str]:
    """Every mount point of this process."""
    return {m.point for m in (mount_table() if table is None else table)}


def source_of(mount: Mount, table: tuple[Mount, ...]) -> tuple[str, bool]:
    """Where a mount's bytes come from, as (text, visible here): the path of ``mount.root`` through another
    mount of the same file system that shows a directory holding it (longest such root wins), else
    ``ROOT on SOURCE`` (in a container: the host's path, on the host's device)."""
    best = None
    for other in table:
        if other is mount or other.device != mount.device:
            continue
        base = other.root.rstrip("/")
        if mount.root == other.root or mount.root.startswith(base + "/"):
            if other.point == mount.point:
                continue
            if best is None or len(other.root) > len(best.root):
                best = other
    if best is not None:
        rest = mount.root[len(best.root.rstrip("/")):].lstrip("/")
        return (os.path.join(best.point, rest) if rest else best.point), True
    return f"{mount.root} on {mount.source}", False


def mounts_below(root: str | os.PathLike, table: tuple[Mount, ...] | None = None) -> dict[str, MountedFile]:
    """Every mount point strictly below ``root`` (real path -> MountedFile, ``path`` relative to the root):
    the files and directories whose bytes do not come from the install's own file system. A root that is
    itself on a mount (a volume holding the whole venv) is the install, not an overlay over it."""
    table = mount_table() if table is None else table
    real_root = os.path.realpath(root)
    inside = real_root.rstrip(os.sep) + os.sep
    top: dict[str, Mount] = {}
    for mount in table:  # the last mount of a point is the one seen there
        if mount.point.startswith(inside):
            top[mount.point] = mount
    found = {}
    for point, mount in top.items():
        source, visible = source_of(mount, table)
        found[point] = MountedFile(path=os.path.relpath(point, real_root), point=point, source=source,
                                   visible=visible, read_only=mount.read_only)
    return found


def mounted_files(root: str | os.PathLike, paths, table: tuple[Mount, ...] | None = None) -> dict[str, MountedFile]:
    """The ``paths`` (relative to ``root``) whose bytes come through a mount below ``root`` (``mounts_below``):
    the file itself bind-mounted, or a directory on its way from ``root``. ``path`` is the one asked for."""
    below = mounts_below(root, table)
    if not below:
        return {}
    real_root = os.path.realpath(root)
    inside = real_root.rstrip(os.sep) + os.sep
    found = {}
    for rel in paths:
        path = os.path.realpath(os.path.join(real_root, rel))
        while path.startswith(inside):
            if path in below:
                mounted = below[path]
                found[rel] = MountedFile(path=rel, point=path, source=mounted.source, visible=mounted.visible,
                                         read_only=mounted.read_only)
                break
            path = os.path.dirname(path)
    return found
