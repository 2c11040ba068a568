"""A hotfix bundle: the OCI image `hotfix pack` makes of an export, so that a fix too big for
ConfigMaps mounts into a pod as an image volume pinned by digest (KEP-4639).

Pure: the lock's bytes and the exported files in, the layer's entries and the image's annotations out
(``content``, ``entries``, ``annotations``); a bundle read back checked against its own lock
(``check``). containers/oci.py makes and reads the layout; commands/pack.py reads the export and writes.

The one layer holds, at these paths inside the image:

    hotfix.lock                  the lock, byte for byte as exported
    site-packages/<path>         each locked file at its site-packages-relative path (the top of its
                                 series: one file per path, Lock.mounted_files), 0644
    guard/<path>                 the guard's own distribution (vllm_hotfix_guard and its .dist-info), at
                                 its site-packages-relative path, as `hotfix export` wrote it (checked
                                 against its RECORD: txn/exported.read_guard), when the export has one

``Content.extra`` is where more members go (the lock's signature files beside it, named as
core.minisign names them, and the guard distribution under ``guard/``): ``entries`` adds them,
``check`` accepts them there (``is_extra``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable, Optional

from vllm_hotfix.containers.oci import Entry
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.output import quote_path
from vllm_hotfix_guard.settings import LOCK_NAME, OCI_PREFIX
from vllm_hotfix_guard.txn.hotfix_lock import Lock, parse_lock
from vllm_hotfix_guard.txn.lock_check import expected_fingerprint

LOCK_PATH = LOCK_NAME  # the lock, at the image's top
FILES_DIR = "site-packages"  # the patched files below it, at their site-packages-relative paths
GUARD_DIR = "guard"  # the guard distribution below it, at its site-packages-relative paths
FORMAT_VERSION = "1"
CREATED_BY = "hotfix pack"

TITLE = "org.opencontainers.image.title"
DESCRIPTION = "org.opencontainers.image.description"
FORMAT = OCI_PREFIX + "bundle"  # this layout of the layer, FORMAT_VERSION
FINGERPRINT = OCI_PREFIX + "fingerprint"  # core/fingerprint of the lock in effect (txn.lock_check.expected_fingerprint)
HOTFIXES = OCI_PREFIX + "hotfixes"  # "id@version id@version", series order
BASELINE = OCI_PREFIX + "baseline"  # "vllm==0.30.0" (one per distribution, space-separated): the release the files fit
SITE_PACKAGES = OCI_PREFIX + "site-packages"  # where the lock says the files go in the container
LOCK_SHA256 = OCI_PREFIX + "lock.sha256"  # of hotfix.lock's bytes in the layer


@dataclass(frozen=True, slots=True, kw_only=True)
class Content:
    """What goes into one bundle: the lock (parsed and as bytes) and the file of each locked path."""

    lock: Lock
    lock_bytes: bytes
    files: dict  # site-packages-relative path -> bytes (each checked against the lock)
    extra: tuple[Entry, ...] = ()

    @property
    def fingerprint(self) -> str:
        return expected_fingerprint(self.lock)

    @property
    def guard(self) -> Optional[dict]:
        """The guard's files it carries (site-packages-relative path -> bytes), None when it carries none."""
        prefix = GUARD_DIR + "/"
        found = {e.path[len(prefix):]: e.data for e in self.extra if e.path.startswith(prefix)}
        return found or None


def guard_entries(guard: Optional[dict]) -> tuple[Entry, ...]:
    """The layer's members of a guard tree (txn/exported.read_guard: path in site-packages -> bytes), sorted."""
    return tuple(Entry(path=f"{GUARD_DIR}/{path}", data=data) for path, data in sorted((guard or {}).items()))


def content(lock: Lock, lock_bytes: bytes, exported: dict, *, source: str, extra: tuple[Entry, ...] = ()) -> Content:
    """The bundle's content from an export: ``exported`` maps each locked file's export path to its
    bytes; every one must be there and hash to the lock's sha256 (InvalidInput otherwise, naming it)."""
    files = {}
    for locked in lock.mounted_files():
        data = exported.get(locked.export)
        if data is None:
            raise InvalidInput(f"{source}: the export has no {quote_path(locked.export)} (listed in {LOCK_NAME})",
                               hint="re-run `hotfix export` into this directory")
        actual = hashlib.sha256(data).hexdigest()
        if actual != locked.sha256:
            raise InvalidInput(f"{source}: {quote_path(locked.export)} is not the file {LOCK_NAME} names (sha256 "
                               f"{actual}, the lock says {locked.sha256})", hint="re-run `hotfix export` into this directory; "
                               "nothing that differs from the lock goes into a bundle")
        files[locked.path] = data
    return Content(lock=lock, lock_bytes=lock_bytes, files=files, extra=extra)


def entries(bundle: Content) -> list[Entry]:
    """The layer's members (containers/oci.py sorts them and adds the directories)."""
    found = [Entry(path=LOCK_PATH, data=bundle.lock_bytes)]
    found += [Entry(path=f"{FILES_DIR}/{path}", data=data) for path, data in bundle.files.items()]
    return found + list(bundle.extra)


def baseline(lock: Lock) -> str:
    releases = dict.fromkeys(f"{h.distribution}=={h.baseline_version}" for h in lock.hotfixes)
    return " ".join(releases)


def annotations(bundle: Content) -> dict:
    """The manifest's (and image index's, and index.json's) annotations; the image config's Labels too
    (what `skopeo inspect` shows)."""
    lock = bundle.lock
    hotfixes = " ".join(f"{h.id}@{h.version}" for h in lock.hotfixes)
    return {
        TITLE: "vllm-hotfix bundle",
        DESCRIPTION: f"hotfixes {hotfixes} for {baseline(lock)}, fingerprint {bundle.fingerprint}",
        FORMAT: FORMAT_VERSION,
        FINGERPRINT: bundle.fingerprint,
        HOTFIXES: hotfixes,
        BASELINE: baseline(lock),
        SITE_PACKAGES: lock.site_packages,
        LOCK_SHA256: hashlib.sha256(bundle.lock_bytes).hexdigest(),
    }


def is_extra(path: str) -> bool:
    """A member a bundle may hold besides the lock and its files: a signature file of the lock, the guard."""
    from vllm_hotfix_guard.core.minisign import is_signature_name

    return path.split("/")[0] == GUARD_DIR or ("/" not in path and is_signature_name(path, LOCK_PATH))


def check(members: Iterable[tuple[str, Optional[bytes], int]], *, source: str, annotated: dict) -> Content:
    """A bundle read back (``members`` of its layer: path, bytes or None for a directory, mode) checked
    against its own lock: the lock is there and valid, every locked path holds the lock's sha256 (and
    nothing else is there but directories and ``is_extra`` members), and the annotations ``annotated`` name its
    fingerprint and lock. InvalidInput otherwise: such a bundle is approved for nothing."""
    lock_bytes, files, extra, seen = None, {}, [], set()
    prefix = FILES_DIR + "/"
    for path, data, mode in members:
        if path in seen or mode & 0o7000:
            why = "given twice" if path in seen else f"mode {mode:o} (setuid, setgid or sticky)"
            raise InvalidInput(f"{source}: the bundle's member {quote_path(path)} is {why}")
        seen.add(path)
        if data is None:
            continue
        if path == LOCK_PATH:
            lock_bytes = data
        elif path.startswith(prefix):
            files[path[len(prefix):]] = data
        elif is_extra(path):
            extra.append(Entry(path=path, data=data, mode=mode & 0o7777))
        else:
            raise InvalidInput(f"{source}: the bundle holds {quote_path(path)}, which a hotfix bundle does not")
    if lock_bytes is None:
        raise InvalidInput(f"{source}: the bundle has no {LOCK_PATH}", hint="pack the export with `hotfix pack`")
    lock = parse_lock(lock_bytes, source=f"{source}: {LOCK_PATH}")
    wanted = {f.path for f in lock.mounted_files()}
    unlisted, missing = sorted(set(files) - wanted), sorted(wanted - set(files))
    if unlisted:
        raise InvalidInput(f"{source}: the bundle holds {quote_path(prefix + unlisted[0])}, which its lock does not list")
    if missing:
        raise InvalidInput(f"{source}: the bundle has no {quote_path(prefix + missing[0])}, which its lock lists")
    found = content(lock, lock_bytes, {f.export: files[f.path] for f in lock.mounted_files()}, source=source,
                    extra=tuple(extra))
    if found.guard is not None:  # exactly the guard files the (signed) lock names: nothing added, nothing changed
        from vllm_hotfix.txn.exported import check_locked_guard

        check_locked_guard(found.guard, lock, source=f"{source}: {GUARD_DIR}/", hint="pack the export again with `hotfix pack`")
    check_annotations(found, annotated, source=source)
    return found


def check_annotations(bundle: Content, annotated: dict, *, source: str) -> None:
    """InvalidInput unless ``annotated`` (a manifest's or index's annotations) names this bundle's
    fingerprint and lock."""
    expected = annotations(bundle)
    for key in (FINGERPRINT, LOCK_SHA256):
        if annotated.get(key) != expected[key]:
            raise InvalidInput(f"{source}: annotation {key} is {annotated.get(key)!r}, but the bundle's lock gives "
                               f"{expected[key]!r}", hint="pack the export again with `hotfix pack`")
