"""The wheel cache (``paths.cache_dir()/wheels``): what may be taken from it, and when it is fetched again.

A cache is input: another user could plant a wheel whose patch "applies" to other code, and a download
cut short leaves a truncated one. So a cache folder is used only when ``cache_problem`` (the state
directory's trust rule, ``paths.trust_problem``) finds nothing, and a cached wheel only while it holds
the sha256 the index gave (kept beside it by ``wheelindex.Index.download``: ``NAME.whl.sha256``);
else it is fetched once more, and the download's own check gives the clear error (exit 10).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from vllm_hotfix.catalog.wheelindex import Index, sidecar
from vllm_hotfix_guard.errors import HotfixError, Refused, Unavailable
from vllm_hotfix_guard.inputs import Unfit, file_sha256, read_bounded
from vllm_hotfix_guard.output import note
from vllm_hotfix_guard.paths import trust_problem
from vllm_hotfix_guard.txn.atomic import atomic_write

WHEEL_LIMIT = 16 << 30  # a cached wheel hashed before each use (a CUDA torch wheel is ~2.5 GB)


def cached(index: Index, project: str, version: str, directory: Path, *, prefix: str, download: bool = True) -> Path:
    """The wheel of ``project==version`` in the cache ``directory``, checked before it is used: the
    cache must be this user's (``cache_problem``; another user's is not used: the wheel is fetched into
    a private temporary folder instead); the wheel's sha256 must be the one the index gave, kept beside
    it (``NAME.whl.sha256``; a wheel without one is checked against the index, when it can be reached).
    A wheel that does not match (tampered, truncated) is fetched once more; then Unavailable.
    ``prefix``: the release's file name stem, ``NAME-VERSION`` (``upstream.release_prefix``); a release
    published only as an sdist is its ``PREFIX.tar.gz``."""
    problem = cache_problem(directory)
    if problem is not None:
        note(f"{directory}: {problem}: not used as a cache (another user could have planted a wheel there); "
             f"fetching into a private temporary folder")
        directory = _private_cache()
    found = sorted(p for p in directory.iterdir() if _is_release_file(p.name, prefix)) if directory.is_dir() else []
    for wheel in found:
        why = _unfit(index, project, wheel)
        if why is None:
            return wheel
        note(f"{wheel}: {why}; fetching it once more")
        for stale in (wheel, sidecar(wheel)):
            stale.unlink(missing_ok=True)
    if not download:
        raise Refused(f"no cached wheel of {project} {version} in {directory}",
                      hint=f"pip download --no-deps --only-binary :all: {project}=={version} -d {directory}")
    return index.download(project, version, directory)

def _is_release_file(name: str, prefix: str) -> bool:
    """A wheel of the release (``PREFIX-...whl``) or its sdist (``PREFIX.tar.gz``); wheels sort first."""
    name, prefix = name.lower(), prefix.lower()
    return (name.startswith(prefix + "-") and name.endswith(".whl")) or name == prefix + ".tar.gz"


def _unfit(index: Index, project: str, wheel: Path) -> str | None:
    """Why the cached ``wheel`` must not be used (None: its bytes are the index's)."""
    recorded = None
    try:
        text = read_bounded(sidecar(wheel), cap=256, what="sha256 file", follow_symlinks=False)
        recorded = text.decode("ascii", "replace").strip().lower()
    except FileNotFoundError:
        pass
    except (OSError, HotfixError):
        return "its sha256 file is unreadable"
    if recorded is None:
        try:
            recorded = index.index_sha256(project, wheel.name)
        except Unavailable:
            recorded = None
        if recorded is None:  # put there by hand, and no index to ask: used as it is
            return None
    try:
        actual = file_sha256(wheel, cap=WHEEL_LIMIT, what="cached wheel")
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    except Unfit as exc:  # a link, a FIFO, a file over WHEEL_LIMIT
        return exc.message.removeprefix(f"{wheel}: ")
    if actual != recorded:
        return f"sha256 {actual[:12]} is not the index's {recorded[:12]} (changed or truncated)"
    if not sidecar(wheel).exists():
        try:
            atomic_write(sidecar(wheel), recorded.encode() + b"\n", 0o644)
        except OSError:
            pass
    return None


def cache_problem(directory: Path) -> str | None:
    """Why a cache folder (and the cache above it) must not be used: ``paths.trust_problem``, the rule the
    state directory follows (a link, another user's, writable by group or others). pip refuses a cache it
    does not own too."""
    for folder in (directory.parent, directory):
        problem = trust_problem(folder)
        if problem is not None:
            return f"{folder} {problem}"
    return None


_PRIVATE: list[Path] = []


def _private_cache() -> Path:
    """A temporary folder of this process's own for wheels when the cache cannot be trusted (removed at exit)."""
    if not _PRIVATE:
        import atexit
        import shutil

        _PRIVATE.append(Path(tempfile.mkdtemp(prefix="hotfix-wheels-")))
        atexit.register(shutil.rmtree, _PRIVATE[0], True)
    return _PRIVATE[0]
