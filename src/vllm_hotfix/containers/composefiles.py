"""Which compose files `docker compose` (v2) loads, how to make it load an override, and whether a
site-packages path recorded on the host can be the container's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from vllm_hotfix.containers import yamledit as ye
from vllm_hotfix_guard.errors import InvalidInput, UsageError


# -- which file, and where inside the container ----------------------------------------------------

COMPOSE_CAP = 256 * 1024  # a real one is a few KB; ruamel composes ~140 KB/s here (1.7 MB took 94 s)
COMPOSE_NAMES = ("compose.yaml", "compose.yml", "docker-compose.yaml", "docker-compose.yml")
OVERRIDE_NAMES = ("compose.override.yaml", "compose.override.yml", "docker-compose.override.yaml",
                  "docker-compose.override.yml")


def discover(cwd: Path, environ: dict[str, str]) -> list[Path]:
    """The files `docker compose` (v2) loads without -f: ``COMPOSE_FILE`` (split on
    ``COMPOSE_PATH_SEPARATOR``, default ``os.pathsep``), else the first of ``COMPOSE_NAMES`` in the current
    directory or the nearest parent that has one."""
    listed = environ.get("COMPOSE_FILE")
    if listed:
        separator = environ.get("COMPOSE_PATH_SEPARATOR") or os.pathsep
        return [cwd / part for part in listed.split(separator) if part]
    for directory in (cwd, *cwd.parents):
        for name in COMPOSE_NAMES:
            if (directory / name).is_file():
                return [directory / name]
    raise UsageError(f"no compose file in {cwd} or its parents ({', '.join(COMPOSE_NAMES)}) and COMPOSE_FILE is not set",
                     hint="pass --file PATH")


def load_instructions(base: list[Path], override: Path, environ: dict[str, str]) -> str:
    """How to make `docker compose` load ``override`` on top of ``base``."""
    if (not environ.get("COMPOSE_FILE") and len(base) == 1 and override.name in OVERRIDE_NAMES
            and os.path.abspath(override.parent) == os.path.abspath(base[0].parent)):
        return f"docker compose loads {override.name} beside {base[0].name} by itself (no -f, no COMPOSE_FILE)"
    files = [*base, override]
    separator = environ.get("COMPOSE_PATH_SEPARATOR") or os.pathsep
    return ("load it with: docker compose " + " ".join(f"-f {f}" for f in files) + " up -d"
            + f"   (or export COMPOSE_FILE={separator.join(str(f) for f in files)})")


HOST_PREFIXES = ("/home/", "/Users/", "/tmp/", "/var/tmp/", "/private/", "/var/folders/")


def foreign_site_packages(site: str) -> Optional[str]:
    """Why ``site`` (the host install the lock recorded) is unlikely to be the container's site-packages."""
    home = os.path.expanduser("~").rstrip("/")
    if site.startswith(HOST_PREFIXES) or (home and home != "/" and site.startswith(home + "/")):
        return "it is under a home or temporary directory"
    if "/.venv/" in site or "/.cache/" in site or "/.local/share/" in site:
        return "it is a user's venv"
    return None


def site_packages_warning(site: str, asked_with: list[str]) -> Optional[str]:
    """The warning `compose` and `k8s` give when their mounts go to the site-packages `hotfix export` recorded
    on a host (``foreign_site_packages``) and no --container-site-packages was given: None when ``site`` may be
    the container's. ``asked_with``: the command that runs a Python in the container (its argv before
    ``python3``), so that the printed question runs as pasted."""
    import shlex

    from vllm_hotfix_guard.output import quote_path

    why = foreign_site_packages(site)
    if why is None:
        return None
    ask = shlex.join([*asked_with, "python3", "-c", 'import sysconfig; print(sysconfig.get_path("purelib"))'])
    return (f"WARNING: the mounts go to {quote_path(site)}, the site-packages `hotfix export` recorded, but {why}: "
            "inside the container it is usually elsewhere (e.g. /usr/local/lib/python3.12/site-packages); pass "
            f"--container-site-packages PATH, the path `{ask}` prints")


def defines_service(text: str, service: str) -> bool:
    try:
        root = ye.compose(text, "compose file").root
    except InvalidInput:
        return False
    services = ye.get(root, "services") if ye.is_mapping(root) else None
    return bool(services and ye.is_mapping(services[1]) and ye.get(services[1], service))
