"""What `hotfix compose` mounts into a service: each exported file of a lock's hotfixes over its path in the
container, and the lock itself (``mounts_for``), as the lines compose_edit.py writes (``Mount``, ``Mounts``).
Pure: a lock in, values out."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from vllm_hotfix_guard.errors import Refused, UsageError
from vllm_hotfix_guard.process import STRICT_VALUES
from vllm_hotfix_guard.settings import CONTAINER_LOCK as LOCK_IN_CONTAINER, LOCK_NAME, STRICT_ENV
from vllm_hotfix_guard.txn.hotfix_lock import Lock, LockedHotfix


@dataclass(frozen=True)
class Mount:
    """One read-only bind mount of an exported file over the install."""

    source: str  # host path
    target: str  # absolute path inside the container

    @property
    def spec(self) -> str:
        """The short-syntax entry as written in the file (``$`` doubled: compose interpolates it)."""
        return f"{escaped(self.source)}:{escaped(self.target)}:ro"


def escaped(value: str) -> str:
    """``value`` as compose reads it back after interpolation: ``$`` written as ``$$``."""
    return value.replace("$", "$$")


@dataclass(frozen=True)
class Mounts:
    """Every mount a lock asks for in one service, and the lock's own mount."""

    hotfix: tuple[Mount, ...]  # one per exported file
    lock: Mount
    export_source: str  # host path of the export directory as written (prefix of every source)
    strict: bool = False  # HOTFIX_STRICT=1 beside HOTFIX_LOCK (`hotfix compose --strict`)

    @property
    def env_value(self) -> str:
        return self.lock.target

    def wants_strict(self, present: Optional[str], where: str) -> bool:
        """Whether HOTFIX_STRICT=1 is still to be written, ``present`` being the value the service's environment
        already gives it (None: none). One that says otherwise than --strict / --no-strict is refused (exit 3):
        the option and the file would disagree on whether the guard stops the process."""
        on = present is not None and present.strip().lower() in STRICT_VALUES  # as the guard reads it
        if present is not None and on != self.strict:
            raise Refused(f"{where} sets {STRICT_ENV}={present}, {'not ' if self.strict else ''}strict mode, and "
                          f"this is {'--strict' if self.strict else '--no-strict'}: not edited",
                          hint=(f"pass --no-strict to keep it, or take that entry out for strict mode" if self.strict
                                else "drop --no-strict, or take that entry out (`hotfix compose --remove` takes "
                                     "out the one it wrote)"))
        return self.strict and present is None


@dataclass(frozen=True)
class Edit:
    """A change to a compose file, kept as the bytes before and after."""

    text: str
    added: tuple[str, ...]
    removed: tuple[str, ...]


def host_source(export_dir: Path, compose_dir: Path) -> str:
    """``./relative`` when the export lives under the compose file's directory, else absolute."""
    export_abs = Path(os.path.abspath(export_dir))
    compose_abs = Path(os.path.abspath(compose_dir))
    try:
        rel = export_abs.relative_to(compose_abs)
    except ValueError:
        return export_abs.as_posix()
    return "./" + rel.as_posix() if rel.parts else "."


def mounts_for(lock: Lock, hotfixes: tuple[LockedHotfix, ...], export_source: str,
               container_site_packages: Optional[str] = None, guard: tuple[str, ...] = (),
               strict: bool = False) -> Mounts:
    """The mounts of these hotfixes' files (the top of each series), the guard's tree (``guard``: its top-level
    names in site-packages, txn/exported.guard_tops) and the lock; ``strict``: HOTFIX_STRICT=1 with them."""
    site = (container_site_packages or lock.site_packages).rstrip("/")
    if not site.startswith("/"):
        raise UsageError(f"container site-packages must be an absolute path, got {site!r}")
    files = tuple(  # one mount per path: the top of its series (one file cannot be mounted twice)
        Mount(f"{export_source}/{f.export}", f"{site}/{f.path}") for f in lock.mounted_files(hotfixes)
    ) + tuple(Mount(f"{export_source}/guard/site-packages/{top}", f"{site}/{top}") for top in guard)
    for mount in files:
        for path in (mount.source, mount.target):
            if ":" in path:  # SOURCE:TARGET:MODE cannot say where such a path ends
                raise Refused(f"{path}: a path with ':' cannot be written in compose's short volume syntax",
                              hint="export to a directory whose path has no ':' (hotfix export --to DIR)")
    return Mounts(files, Mount(f"{export_source}/{LOCK_NAME}", LOCK_IN_CONTAINER), export_source, strict)
