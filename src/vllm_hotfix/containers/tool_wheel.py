"""A wheel of the running vllm-hotfix, for `hotfix bake` to carry into the build context.

The image must get the very tool that wrote its Containerfile, and vllm-hotfix may not be on the
image's package index at all. Where the running copy comes from decides how its wheel is made:

- ``installed``: a wheel install (pip, pipx, `uv tool`): the wheel is put back together from the
  files its RECORD lists (each checked against RECORD's sha256 first, so a copy edited by hand is
  refused), minus what the installer added (scripts, bytecode, INSTALLER, REQUESTED,
  direct_url.json); its RECORD is written anew. No pip is needed.
- ``editable`` / ``source``: an editable install or a checkout on sys.path: `pip wheel --no-deps`
  of the project directory (its build backend comes from the index, as for any build).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from vllm_hotfix.errors import Refused

DISTRIBUTION = "vllm-hotfix"
PACKAGE = "vllm_hotfix"
INSTALLER_FILES = frozenset({"INSTALLER", "REQUESTED", "direct_url.json", "RECORD", "uv_cache.json"})
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the same files give the same wheel bytes
HINT = "pass --wheel FILE (e.g. from `pip wheel --no-deps .` in a vllm-hotfix checkout), or --from-index"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSource:
    """Where the running vllm-hotfix comes from, and the wheel it gives."""

    how: str  # "installed" | "editable" | "source"
    where: Path  # the dist-info directory (installed) or the project directory
    version: str
    wheel_name: str

    def describe(self) -> str:
        if self.how == "installed":
            return f"put together from the installed {DISTRIBUTION} {self.version} ({self.where}, RECORD-checked)"
        return f"`pip wheel` of the {'editable install' if self.how == 'editable' else 'checkout'} {self.where}"


def _metadata(dist_info: Path) -> dict[str, str]:
    from vllm_hotfix.install.probe import metadata_headers

    try:
        return metadata_headers((dist_info / "METADATA").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return {}


def _wheel_tag(dist_info: Path) -> str:
    try:
        lines = (dist_info / "WHEEL").read_text(encoding="utf-8").splitlines()
    except OSError:
        return "py3-none-any"
    tags = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Tag:")]
    return tags[0] if tags else "py3-none-any"


def _project_name(project: Path) -> str | None:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        return tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8")).get("project", {}).get("name")
    except (OSError, ValueError):
        return None


def find_tool_source() -> ToolSource:
    """How the running vllm-hotfix can be turned into a wheel (Refused when it cannot)."""
    from packaging.utils import canonicalize_name

    import vllm_hotfix
    from vllm_hotfix import __version__
    from vllm_hotfix.install.record import read_record

    package_dir = Path(vllm_hotfix.__file__).resolve().parent
    site = package_dir.parent
    for dist_info in sorted(site.glob(f"{PACKAGE}-*.dist-info")):
        if canonicalize_name(_metadata(dist_info).get("Name", "")) != DISTRIBUTION:
            continue
        if (dist_info / "RECORD").is_file() and f"{PACKAGE}/__init__.py" in read_record(dist_info):
            version = _metadata(dist_info).get("Version", __version__)
            return ToolSource(how="installed", where=dist_info, version=version,
                              wheel_name=f"{PACKAGE}-{version}-{_wheel_tag(dist_info)}.whl")
    for project in (site.parent, site):  # a src/ layout, or the package at the project's top
        if _project_name(project) == DISTRIBUTION:
            how = "editable" if _editable_of(project) else "source"
            return ToolSource(how=how, where=project, version=__version__,
                              wheel_name=f"{PACKAGE}-{__version__}-py3-none-any.whl")
    raise Refused(f"cannot make a wheel of the running {DISTRIBUTION}: {package_dir} is neither a wheel install "
                  "(no RECORD lists it) nor inside its project", hint=HINT)


def _editable_of(project: Path) -> bool:
    """Whether an installed distribution says it is an editable install of ``project`` (PEP 610)."""
    import json
    from importlib import metadata

    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json") or ""
        url = json.loads(text)
    except (metadata.PackageNotFoundError, ValueError):
        return False
    from urllib.parse import unquote, urlparse

    if not isinstance(url, dict) or not (url.get("dir_info") or {}).get("editable"):
        return False
    return os.path.realpath(unquote(urlparse(str(url.get("url", ""))).path)) == os.path.realpath(project)


def make_wheel(source: ToolSource, dest: Path) -> Path:
    """Write the wheel into the directory ``dest`` (which exists); its path."""
    if source.how == "installed":
        return _from_record(source, dest / source.wheel_name)
    return _pip_wheel(source, dest)


def _from_record(source: ToolSource, wheel: Path) -> Path:
    from vllm_hotfix.install.record import data_digest, is_bytecode, read_record
    from vllm_hotfix.paths import read_small_file

    dist_info = source.where
    site = dist_info.parent
    members: list[tuple[str, bytes, int]] = []
    for rel, entry in sorted(read_record(dist_info).items()):
        top = rel.split("/", 1)[0]
        if rel.startswith("../") or is_bytecode(rel) or top not in (PACKAGE, dist_info.name):
            continue
        if top == dist_info.name and rel.split("/", 1)[1] in INSTALLER_FILES:
            continue
        path = site / rel
        data = read_small_file(path, 64 * 1024 * 1024)
        if data is None or entry.algorithm is None or data_digest(data, entry.algorithm) != entry.digest:
            raise Refused(f"{path}: not what {dist_info}/RECORD says was installed; will not carry a changed "
                          f"{DISTRIBUTION} into an image", hint=f"reinstall {DISTRIBUTION}, or " + HINT)
        members.append((rel, data, os.lstat(path).st_mode & 0o777))
    if not any(rel == f"{PACKAGE}/__init__.py" for rel, _, _ in members):
        raise Refused(f"{dist_info}/RECORD lists no {PACKAGE}/__init__.py", hint=HINT)
    members.sort(key=lambda m: (m[0].startswith(dist_info.name + "/"), m[0]))  # dist-info last, as wheels have it
    record = "".join(f"{rel},sha256={_b64(hashlib.sha256(data).digest())},{len(data)}\n" for rel, data, _ in members)
    record += f"{dist_info.name}/RECORD,,\n"
    tmp = wheel.with_name(wheel.name + ".part")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for rel, data, mode in [*members, (f"{dist_info.name}/RECORD", record.encode(), 0o644)]:
            info = zipfile.ZipInfo(rel, ZIP_TIME)
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    os.replace(tmp, wheel)
    return wheel


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _pip_wheel(source: ToolSource, dest: Path) -> Path:
    import tempfile

    pip = [sys.executable, "-m", "pip"] if _has_pip() else [shutil.which("pip3") or shutil.which("pip") or "pip"]
    with tempfile.TemporaryDirectory(prefix=".hotfix-wheel-", dir=dest) as out:
        try:
            done = subprocess.run([*pip, "wheel", "--no-deps", "--disable-pip-version-check", "-q", str(source.where),
                                   "-w", out], capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            raise Refused(f"cannot build a wheel of {source.where}: {exc}", hint=HINT) from None
        built = sorted(Path(out).glob(f"{PACKAGE}-*.whl"))
        if done.returncode != 0 or len(built) != 1:
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise Refused(f"`pip wheel {source.where}` failed: {last}", hint=HINT)
        wheel = dest / built[0].name
        os.replace(built[0], wheel)
    return wheel


def _has_pip() -> bool:
    from importlib.util import find_spec

    return find_spec("pip") is not None
