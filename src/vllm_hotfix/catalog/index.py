"""The catalog: built-in hotfixes, then ``--catalog DIR``s, then ``HOTFIX_CATALOG`` directories.

Each catalog directory holds ``manifests/*.toml`` and ``patches/``. Several versions of one hotfix
may exist; the same id and version twice is an error naming both files.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from packaging.version import InvalidVersion, Version

from vllm_hotfix_guard.core.pep440 import same_version
from vllm_hotfix_guard.errors import InvalidInput, Refused, UsageError
from vllm_hotfix.catalog.model import Manifest
from vllm_hotfix.catalog.manifest import load_manifest

_PACKAGE_DIR = Path(__file__).resolve().parent.parent
BUNDLED_DIR = _PACKAGE_DIR / "_catalog"  # where the wheel carries the project's top-level manifests/ + patches/
CHECKOUT_DIR = _PACKAGE_DIR.parent.parent  # a source checkout (editable install): its root is a catalog


def builtin_dir() -> Path:
    """The built-in catalog: inside the installed wheel, else the root of the source checkout.

    A missing built-in catalog is a broken install, never an empty catalog."""
    for candidate in (BUNDLED_DIR, CHECKOUT_DIR):
        if (candidate / "manifests").is_dir() and (candidate / "patches").is_dir():
            return candidate
    raise InvalidInput(f"the built-in catalog is missing: neither {BUNDLED_DIR} nor {CHECKOUT_DIR} holds manifests/ "
                       "and patches/", hint="reinstall vllm-hotfix from its clone (`pip install --force-reinstall .` there) or from the wheel you built")


ENV_VAR = "HOTFIX_CATALOG"


SUBSCRIBED = "subscribed"
SHADOW_ENV = "HOTFIX_ALLOW_SHADOW"  # '1': a user catalog may redefine a built-in id (also --allow-shadow)


@dataclass(frozen=True)
class CatalogDir:
    """One catalog directory (its manifests/ and patches/) and where it comes from."""

    path: Path
    origin: str  # 'built-in' | '--catalog' | 'HOTFIX_CATALOG' | 'subscribed' (catalog/feeds.py)

    @property
    def builtin(self) -> bool:
        return self.origin == "built-in"

    def describe(self) -> str:
        """'built-in catalog /…', '--catalog /abs/dir', 'HOTFIX_CATALOG entry /abs/dir'."""
        where = {"built-in": "built-in catalog", ENV_VAR: "HOTFIX_CATALOG entry",
                 SUBSCRIBED: f"subscribed catalog {self.path.parent.parent.name}"}.get(self.origin, self.origin)
        return f"{where} {os.path.abspath(self.path)}"

    def to_json(self) -> dict:
        return {"origin": self.origin, "path": os.path.abspath(self.path)}


def hotfix_version_key(version: int | str) -> tuple:
    """Order a hotfix's own versions (a manifest's ``version``): integers numerically, strings as PEP 440
    versions when they parse (equal keys: core/pep440.same_version, the rule every reader asks). A release's
    version: core/pep440.release_key."""
    try:
        return (1, Version(str(version)), "")
    except InvalidVersion:
        return (0, Version("0"), str(version))


def parse_ref(text: str) -> tuple[str, str | None]:
    """``'qwen38-flash-next@5'`` -> ``('qwen38-flash-next', '5')``; no ``@``: latest version."""
    hotfix_id, sep, version = text.partition("@")
    if sep and not version:
        raise UsageError(f"{text!r}: expected ID or ID@VERSION")
    return hotfix_id, (version if sep else None)


class Catalog:
    """Every manifest of the catalog directories, and which directory each one comes from."""

    def __init__(self, manifests: Iterable[Manifest], dirs: Iterable[CatalogDir] = (),
                 origins: Mapping[int, CatalogDir] | None = None):
        self.dirs = tuple(dirs)
        self._origins = dict(origins or {})  # id(manifest) -> its catalog directory
        by_key: dict[tuple, Manifest] = {}
        for manifest in manifests:
            key = (manifest.id, hotfix_version_key(manifest.version))
            if key in by_key:
                first = by_key[key]
                raise InvalidInput(
                    f"hotfix {manifest.id} version {manifest.version} is declared twice: {first.source} and {manifest.source}",
                    hint="remove one of them or give the newer one a new version",
                )
            by_key[key] = manifest
        self._manifests = tuple(sorted(by_key.values(), key=lambda m: (m.id, hotfix_version_key(m.version))))

    @classmethod
    def load(cls, extra_dirs: Iterable[Path | str] = (), env: Mapping[str, str] | None = None) -> Catalog:
        """Built-in, then ``extra_dirs`` (--catalog), then HOTFIX_CATALOG. A user catalog's manifest
        with the id of a built-in hotfix is refused (exit 8, both files named) unless
        HOTFIX_ALLOW_SHADOW=1 (--allow-shadow): otherwise whoever can set HOTFIX_CATALOG would
        silently decide what `apply` writes and what doctor advises for a known crash."""
        env = os.environ if env is None else env
        dirs = [CatalogDir(builtin_dir(), "built-in")]
        dirs += [CatalogDir(Path(d), "--catalog") for d in extra_dirs]
        dirs += [CatalogDir(Path(d), ENV_VAR) for d in env.get(ENV_VAR, "").split(os.pathsep) if d]
        subscribed = _subscribed()
        manifests: list[Manifest] = []
        origins: dict[int, CatalogDir] = {}
        builtin_ids: dict[str, Manifest] = {}
        verified = _require_signed([d for d in dirs if not d.builtin], env)
        dirs += subscribed  # checked against their own policy by `hotfix catalog update`
        for catalog_dir in dirs:
            for manifest in load_dir(catalog_dir, verified.get(id(catalog_dir))):
                if catalog_dir.builtin:
                    builtin_ids.setdefault(manifest.id, manifest)
                elif manifest.id in builtin_ids and env.get(SHADOW_ENV) != "1":
                    raise InvalidInput(
                        f"{manifest.source}: hotfix {manifest.id} from {catalog_dir.describe()} shadows the built-in "
                        f"{builtin_ids[manifest.id].source}",
                        hint=f"rename it, or pass --allow-shadow (or set {SHADOW_ENV}=1) to let it stand beside the "
                             f"built-in one")
                manifests.append(manifest)
                origins[id(manifest)] = catalog_dir
        return cls(manifests, dirs, origins)

    def origin(self, manifest: Manifest) -> CatalogDir | None:
        """The catalog directory ``manifest`` was loaded from."""
        return self._origins.get(id(manifest))

    def shadows(self, manifest: Manifest) -> bool:
        """``manifest`` comes from a user catalog and has the id of a built-in hotfix (allowed by the user)."""
        origin = self.origin(manifest)
        return bool(origin and not origin.builtin and any(
            self.origin(m) and self.origin(m).builtin for m in self._manifests if m.id == manifest.id))

    def all(self) -> tuple[Manifest, ...]:
        """Every manifest, by id, oldest version first."""
        return self._manifests

    def latest(self) -> tuple[Manifest, ...]:
        """The newest version of each hotfix."""
        newest: dict[str, Manifest] = {}
        for manifest in self._manifests:
            newest[manifest.id] = manifest
        return tuple(newest.values())

    def ids(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m.id for m in self._manifests))

    def versions(self, hotfix_id: str) -> tuple[int | str, ...]:
        return tuple(m.version for m in self._manifests if m.id == hotfix_id)

    def get(self, hotfix_id: str, version: int | str | None = None) -> Manifest:
        """One manifest (the latest version unless ``version``); Refused for an unknown id or version."""
        candidates = [m for m in self._manifests if m.id == hotfix_id]
        if not candidates:
            close = difflib.get_close_matches(hotfix_id, self.ids(), n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise Refused(f"unknown hotfix '{hotfix_id}'",
                          hint=hint + "`hotfix list` shows the catalog; add yours with --catalog DIR or HOTFIX_CATALOG")
        if version is None:
            return candidates[-1]
        for manifest in candidates:
            if same_version(manifest.version, version):
                return manifest
        known = ", ".join(str(m.version) for m in candidates)
        raise Refused(f"hotfix '{hotfix_id}' has no version {version}", hint=f"known versions: {known}")


def _require_signed(user_dirs: list[CatalogDir], env: Mapping[str, str]) -> dict[int, dict[str, bytes]]:
    """With a trust policy whose ``catalogs = "signed"``, every user catalog must be signed as it asks
    (vllm_hotfix_guard/txn/catalog_sums.py, the guard's verdict too); else Untrusted (exit 11-13) with each
    refusal. Each is read once (catalog_sums.directory_verdict),
    judged on those bytes and loaded from them: {id(catalog_dir): its files}. A directory that is not
    there is refused as `load_dir` refuses it, never skipped. The built-in catalog is part of the
    installed package, trusted as the package is."""
    if not user_dirs:
        return {}
    import time

    from vllm_hotfix_guard.txn.catalog_sums import catalog_policy, directory_verdict, is_manifest, sign_advice
    from vllm_hotfix_guard.txn.signed import refuse

    now = time.time()
    policy = catalog_policy(env, now=now)
    if policy is None:
        return {}
    verified = {}
    for catalog_dir in user_dirs:
        verdict, files = directory_verdict(catalog_dir.path, policy, now=now)
        if not any(is_manifest(path) for path in files):
            load_dir(catalog_dir)  # refuses (no directory, no manifests/); an empty one is refused below
        refuse(verdict, hint=sign_advice(catalog_dir.path))
        verified[id(catalog_dir)] = files
    return verified


def _subscribed() -> list[CatalogDir]:
    """The subscribed catalogs whose cached release has not expired (catalog/feeds.py); a note for each
    stale one."""
    import time

    from vllm_hotfix.catalog import feeds

    fresh, stale = feeds.served(time.time())
    if stale:
        from vllm_hotfix_guard.output import note

        for cached in stale:
            note(feeds.stale_line(cached))
    return [CatalogDir(cached.catalog, SUBSCRIBED) for cached in fresh]


def load_dir(catalog_dir: CatalogDir, files: dict[str, bytes] | None = None) -> list[Manifest]:
    """The manifests of one catalog directory; from ``files`` (the bytes a signed catalog's verdict judged)
    when given, never read again."""
    path = catalog_dir.path
    manifests_dir = path / "manifests"
    if files is not None:
        from vllm_hotfix_guard.txn.catalog_sums import is_manifest

        return [load_manifest(path / name, patches_dir=path / "patches", raw=files[name])
                for name in sorted(files) if is_manifest(name)]
    if not manifests_dir.is_dir():
        if not path.is_dir():
            raise UsageError(f"{catalog_dir.origin}: catalog directory {path} does not exist")
        hint = "point at its parent directory" if path.name == "manifests" else "a catalog holds manifests/*.toml and patches/"
        raise UsageError(f"{catalog_dir.origin}: {path} is not a catalog: no manifests/ directory in it", hint=hint)
    patches_dir = path / "patches"
    try:
        return [load_manifest(file, patches_dir=patches_dir) for file in sorted(manifests_dir.glob("*.toml"))]
    except FileNotFoundError as gone:  # removed or swapped between the check above and the read: input, not a bug
        raise InvalidInput(f"{catalog_dir.origin}: catalog directory {path} changed while it was read "
                           f"({gone.filename or 'a file'} is gone)") from None
