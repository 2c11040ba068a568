"""What a derivation of the verdict on HOTFIX_LOCK read, and the storing of that verdict for the container's
later processes (lock_cache.py has the rules; this is the storing process's half, never on a hit's path).

The paths whose stats an entry keeps (``paths_read``): every sys.path entry (a listing that gains or loses a
copy or a distribution changes its directory), for each package the lock names its package directory and
``__init__.py``, its dist-info directory and the files read there, the install's root and its journal
(an interrupted apply), for each locked file the file, its directory, its ``__pycache__`` and the entry of
every optimization level (install/bytecode.py's rule), the lock's directory and every file beside the lock
whose name starts with the lock's (its signatures), the trust policy (HOTFIX_TRUST and the image's pinned
one) and HOTFIX_TRUST_CHAIN's directory and files, and the guard's own folder. Stdlib only.
"""

from __future__ import annotations

import os
import sys

from vllm_hotfix_guard.lock_cache import DIR, RACY_NS, SCHEMA, ENTRY_LIMIT, signature, stats_digest
from vllm_hotfix_guard.settings import READY_DIR_ENV

_DIST_FILES = ("METADATA", "RECORD", "top_level.txt", "direct_url.json", "INSTALLER")


def paths_read(lock_path: str, installed: dict, checks) -> list[str] | None:
    """The paths the derivation's verdict depends on (see the module), or None when it must not be cached:
    a package not installed from a wheel, or not importable."""
    from importlib.util import cache_from_source

    from vllm_hotfix_guard.install.facts import WHEEL
    from vllm_hotfix_guard.paths import TargetDir
    from vllm_hotfix_guard.settings import CONTAINER_TRUST, TRUST_CHAIN_ENV, TRUST_ENV

    cwd = os.getcwd()
    paths = [os.path.join(cwd, entry or ".") for entry in sys.path]
    for here in installed.values():
        if here is None or here.kind != WHEEL or here.dist_info is None:
            return None
        paths += [str(here.package_dir), os.path.join(here.package_dir, "__init__.py"), str(here.root),
                  str(here.dist_info), *(os.path.join(here.dist_info, name) for name in _DIST_FILES),
                  str(TargetDir.of(here.root).journal_file)]
    for check in checks:
        for file in check.files:
            if not file.where:
                continue
            folder = os.path.dirname(file.where)
            paths += [file.where, folder, os.path.join(folder, "__pycache__")]
            for level in ("", 1, 2):
                try:
                    paths.append(cache_from_source(file.where, optimization=level))
                except (NotImplementedError, ValueError):
                    pass
    lock_dir, lock_name = os.path.split(os.path.abspath(lock_path))
    paths += [lock_dir, *_listed(lock_dir, lock_name + "."), CONTAINER_TRUST]
    if os.environ.get(TRUST_ENV):
        paths.append(os.path.abspath(os.environ[TRUST_ENV]))
    chain = os.environ.get(TRUST_CHAIN_ENV, "")
    if chain:
        paths += [os.path.abspath(chain), *_listed(os.path.abspath(chain), "")]
    paths.append(os.path.dirname(os.path.abspath(__file__)))
    return list(dict.fromkeys(paths))


def _listed(directory: str, prefix: str) -> list[str]:
    try:
        return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.startswith(prefix)][:256]
    except OSError:
        return []


def offer(hit, *, lock_path: str, lock, installed: dict, checks, derived: tuple, names: list, usable: bool,
          trust_cached: bool, again) -> bool:
    """Keep ``derived`` (verdicts, watched, fingerprint) of the lock read into ``hit`` when lock_cache.py's rules
    allow it: every verdict in effect, the trust verdict (if any) from its cache, the paths read stat-able and
    none younger than RACY_NS, and ``again()`` -- a second derivation after the stats -- giving the same.
    Returns whether an entry was written. Never raises into the guard."""
    verdicts, watched, fingerprint = derived
    if hit is None or hit.key is None or not verdicts or not all(v.in_effect for v in verdicts) or not trust_cached:
        return False
    paths = paths_read(lock_path, installed, checks)
    if paths is None:
        return False
    import time

    stats = [signature(p) for p in paths]
    now = time.time_ns()
    if any(s is not None and max(s[4], s[5], *(s[10:12] if len(s) > 7 else ())) > now - RACY_NS for s in stats):
        return False
    if again() != derived:
        return False
    until = None
    if lock.expires:
        from vllm_hotfix_guard.core.utctime import parse_utc

        until = parse_utc(lock.expires)
        if until is None:
            return False
    files = [[f.where, f.sha256] for check in checks for f in check.files if f.where]
    doc = {"schema": SCHEMA, "key": hit.key, "until": until, "paths": paths,
           "stats": stats_digest(paths, stats), "files": files,
           "verdicts": [[v.hotfix_id, v.in_effect, v.detail, v.remedy, v.source] for v in verdicts],
           "watched": [[w.module, w.hotfix_id, w.path, w.sha256] for w in watched],
           "names": [[n.hotfix_id, n.module, n.qualname, n.kind, n.fingerprint, n.path, n.sha256] for n in names],
           "usable": bool(usable), "fingerprint": fingerprint}
    import json

    data = json.dumps(doc, separators=(",", ":")).encode("ascii")
    if len(data) > ENTRY_LIMIT:
        return False
    from vllm_hotfix_guard.ready_io import private_dir, store_entry

    if hit.directory is None:
        hit.directory = private_dir(os.environ.get(READY_DIR_ENV, ""), DIR)  # hit.close() closes it
    if hit.directory is None:
        return False
    store_entry(hit.directory, f"{hit.key}.json", data)
    return True
