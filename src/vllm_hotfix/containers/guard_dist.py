"""The guard as its own distribution, ``vllm-hotfix-guard``: the ``vllm_hotfix_guard`` package folder, verbatim.

The guard is a source package (src/vllm_hotfix_guard, stdlib only, never importing vllm_hotfix: .importlinter).
Its standalone wheel is that folder's ``.py`` files byte for byte -- the same files the vllm-hotfix wheel
carries (tests/test_project.py compares them) -- plus a dist-info (METADATA, WHEEL, the one entry point,
top_level.txt) and its RECORD; fixed zip times and modes: same folder, same bytes. Nothing is rewritten,
nothing is left out: a folder holding anything but Python sources (and __pycache__) or a symlink is refused,
so what ships is what was reviewed. Pure but for reading that folder.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

from vllm_hotfix_guard.errors import Refused

PACKAGE = "vllm_hotfix_guard"
DISTRIBUTION = "vllm-hotfix-guard"
ENTRY_POINT = f"{PACKAGE} = {PACKAGE}:register"  # the one vllm.general_plugins entry point (pyproject.toml too)
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
WHEEL_TAG = "py3-none-any"
GUARD_DIR = "guard"  # in an export: EXPORT/guard/site-packages/{vllm_hotfix_guard,vllm_hotfix_guard-V.dist-info}
SITE_DIR = "site-packages"


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardDist:
    """The distribution's files: path inside site-packages -> bytes (RECORD included, last)."""

    version: str
    files: tuple[tuple[str, bytes], ...]

    @property
    def dist_info(self) -> str:
        return f"{PACKAGE}-{self.version}.dist-info"

    @property
    def wheel_name(self) -> str:
        return f"{PACKAGE}-{self.version}-{WHEEL_TAG}.whl"

    @property
    def top(self) -> tuple[str, str]:
        """The two directories it adds to site-packages."""
        return PACKAGE, self.dist_info


def package_files(folder: Path) -> dict[str, bytes]:
    """The package's files, ``vllm_hotfix_guard/REL`` -> bytes, sorted: every ``.py`` below ``folder``
    (__pycache__ skipped). Refused: a symlink, or any other file (it would ship unreviewed)."""
    found: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if "__pycache__" in rel.split("/"):
            continue
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            raise Refused(f"{path}: not a regular file in the guard's package", hint="reinstall vllm-hotfix")
        if path.is_file():
            if not rel.endswith(".py"):
                raise Refused(f"{path}: the guard's package holds only Python sources", hint="remove it, or reinstall "
                              "vllm-hotfix")
            found[f"{PACKAGE}/{rel}"] = path.read_bytes()
    if f"{PACKAGE}/__init__.py" not in found:
        raise Refused(f"{folder}: no {PACKAGE}/__init__.py", hint="reinstall vllm-hotfix")
    return found


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(folder: Path, version: str) -> GuardDist:
    """The distribution of the guard package in ``folder`` (the directory vllm_hotfix_guard/__init__.py is in)."""
    files = package_files(folder)
    dist_info = f"{PACKAGE}-{version}.dist-info"
    files[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n"
        "Summary: The in-process guard of vllm-hotfix (its vllm_hotfix_guard package; stdlib only)\n"
        "License: Apache-2.0\nRequires-Python: >=3.10\n").encode()
    files[f"{dist_info}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: vllm-hotfix {version}\nRoot-Is-Purelib: true\nTag: {WHEEL_TAG}\n".encode()
    files[f"{dist_info}/entry_points.txt"] = f"[vllm.general_plugins]\n{ENTRY_POINT}\n".encode()
    files[f"{dist_info}/top_level.txt"] = f"{PACKAGE}\n".encode()
    ordered = sorted(files.items(), key=lambda item: (item[0].startswith(dist_info + "/"), item[0]))
    record = "".join(f"{rel},sha256={_b64(data)},{len(data)}\n" for rel, data in ordered) + f"{dist_info}/RECORD,,\n"
    return GuardDist(version=version, files=(*ordered, (f"{dist_info}/RECORD", record.encode())))


def locked_files(dist: GuardDist) -> tuple[tuple[str, str], ...]:
    """What the lock names of the guard (hotfix_lock.Lock.guard): every file inside site-packages and its
    sha256, RECORD included, sorted."""
    return tuple(sorted((rel, hashlib.sha256(data).hexdigest()) for rel, data in dist.files))


def wheel_bytes(dist: GuardDist) -> bytes:
    """The wheel of ``dist``: the same files in the same order, fixed times and modes (reproducible)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for rel, data in dist.files:
            info = zipfile.ZipInfo(rel, ZIP_TIME)
            info.external_attr = (0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return out.getvalue()


def own_source() -> tuple[Path, str]:
    """The folder of the guard package this vllm-hotfix runs on, and its version."""
    import vllm_hotfix_guard

    return Path(vllm_hotfix_guard.__file__).resolve().parent, vllm_hotfix_guard.__version__


def tree_files(dist: GuardDist) -> dict[str, bytes]:
    """What `hotfix export` writes into EXPORT/guard (and `hotfix guard --build-dist DIR` into DIR): the
    unpacked site-packages tree to mount, and the wheel to install (`pip install --no-index --no-deps`)."""
    files = {f"{SITE_DIR}/{rel}": data for rel, data in dist.files}
    files[dist.wheel_name] = wheel_bytes(dist)
    return files


def current() -> GuardDist:
    """The distribution of the guard this vllm-hotfix runs on."""
    return build(*own_source())
