"""The guard's side of signed locks (issue 36 part B): with a trust policy in force (``HOTFIX_TRUST`` or
the image's pinned one), a lock is used only when ``txn.signed.lock_verdict`` -- the one verdict
`hotfix verify --lock --trust` prints -- accepts it; its refusal lines are the guard's words, unchanged.

Offline and cheap: the first process of a container that accepts a lock verifies its signatures (pure
Python Ed25519, ~2 ms each) and leaves a verdict in ``$HOTFIX_READY_DIR/trust-verdicts/``; a later
process with the same inputs finds it and imports no verifier. The cache is untrusted input and only
ever says "accepted" (a refusal is recomputed every time):

- its key is the sha256 of everything the verdict depends on: the lock's bytes, every signature file
  beside it (name and bytes), the policy's bytes, every file of ``HOTFIX_TRUST_CHAIN`` (name and bytes),
  and this container's identity (the boot id and the start time of the pid namespace's first process):
  an entry written before the container started, or for other bytes, matches nothing;
- who may write it: the directory ``trust-verdicts/`` must be a real directory (no link) owned by this
  process's user with no permission for group or others (the guard creates it 0700), judged on its open
  descriptor, and every entry is read, written and renamed relative to that descriptor (a 0777 ready
  directory cannot redirect a write: issue 45; another user there can only make it unusable, which
  costs a verification); an entry must be a
  regular file there (opened without following links), owned by this user, 0600, one link, at most
  ``ENTRY_LIMIT`` bytes, holding exactly ``{"schema": 1, "key": KEY, "verdict": "trusted"}`` for its
  own name. Anything else is ignored and the signatures are verified again. So only this user (or root)
  in this container can make a cache entry -- and they can already change what the process runs --
  never the writer of the lock, of its ConfigMap or of a volume;
- a lock without any signature file is never served from the cache, whatever it holds;
- a lock with ``expires`` is served from the cache only before that time (read from the lock's bytes,
  never from the cache): after it, every process recomputes (the policy's grace, its EXPIRED line).

Stdlib only (the import-linter ``guard`` contract).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from vllm_hotfix_guard.verdicts import Verdict
from vllm_hotfix_guard.settings import READY_DIR_ENV, TRUST_CACHE_DIR, TRUST_CHAIN_ENV

TRUST_ID = "(trust)"  # the guard line's name for the verdict on the lock's signatures
CACHE_DIR = TRUST_CACHE_DIR
CACHED = "trusted: verified by an earlier process of this container"  # a (trust) verdict from the cache
ENTRY_LIMIT = 256
SCHEMA = 1
CHAIN_FILES = 1024  # at most this many files of a chain directory enter the key (else: no cache)
REMEDY = ("sign the lock with enough keys the policy lists (`hotfix sign LOCK --key KEY`, or `minisign -S`) and "
          "mount its signature files beside it; `hotfix verify --lock LOCK` says the same")


def read_lock_here(path: Path, data: Optional[bytes] = None) -> tuple:
    """HOTFIX_LOCK as the guard reads it: (the lock, or None when it cannot be used, its lines as
    [(Verdict, None)], the sha256 of the bytes judged or None): `(lock)` for a file that does not read or
    parse; `(trust)` for the policy's verdict on its very bytes (``lock_trust``); [] for a lock read without a
    policy. The digest is what the process's readiness record names (ready.record): the lock is read once
    (``data``: its bytes as lock_cache.lookup read them, the ones its cache entry is keyed by)."""
    from vllm_hotfix_guard.errors import InvalidInput
    from vllm_hotfix_guard.txn.hotfix_lock import parse_lock, read_lock

    try:
        data, lock = read_lock(path) if data is None else (data, parse_lock(data, source=str(path)))
    except InvalidInput as exc:
        from vllm_hotfix_guard.output import visible

        message = visible(exc.message)  # one line, no escapes (emit sanitises the whole line too)
        return None, [(Verdict("(lock)", False, f"cannot use HOTFIX_LOCK: {message}",
                               exc.hint or "mount the hotfix.lock written by `hotfix export` there, or fix HOTFIX_LOCK",
                               "lock"), None)], None
    import hashlib

    verdict = lock_trust(path, data, lock)
    return lock, [] if verdict is None else [(verdict, None)], hashlib.sha256(data).hexdigest()


def lock_trust(path: Path, data: bytes, lock) -> Optional[Verdict]:
    """The (trust) verdict on the lock parsed from ``data`` (read from ``path``); None: no policy in force."""
    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix_guard.txn import signed

    try:
        policy_file = signed.policy_path(None)
        if policy_file is None:
            return None
        import time

        now = time.time()
        signatures = signed.signature_files(path)  # read once: what the key covers is what is judged
        policy_bytes = signed.read_policy_bytes(policy_file)  # read once too: the key's bytes are the policy's
        directory = cache_dir()
        key = cache_key(data, signatures, policy_bytes) if directory is not None else None
        if signatures and key is not None and _unexpired(lock, now) and cached(directory, key):
            return Verdict(TRUST_ID, True, f"{CACHED} (cache {directory})", source="lock")
        policy = signed.load_policy(now=now, data=policy_bytes)
        from vllm_hotfix_guard.output import quote_path

        verdict = signed.lock_verdict(path, data, lock, policy, now=now, subject=quote_path(str(path)),
                                      signatures=signatures)
    except HotfixError as exc:  # the policy (or its chain) cannot be used: nothing is trusted (fail closed)
        from vllm_hotfix_guard.output import visible

        return Verdict(TRUST_ID, False, f"cannot use the trust policy: {visible(exc.message)}",
                       exc.hint or "fix the trust policy (HOTFIX_TRUST) or unset it", "lock")
    if not verdict.trusted:
        return Verdict(TRUST_ID, False, "; ".join(r.line for r in verdict.refusals), REMEDY, "lock")
    if key is not None and _unexpired(lock, now):
        store(directory, key)
    warnings = "".join(f"; warning: {w}" for w in verdict.warnings)
    return Verdict(TRUST_ID, True, f"trusted: {verdict.summary()}{warnings}", source="lock")


def _unexpired(lock, now: float) -> bool:
    if not lock.expires:
        return True
    from vllm_hotfix_guard.core.utctime import parse_utc

    limit = parse_utc(lock.expires)
    return limit is not None and now < limit


def cache_key(data: bytes, signatures, policy: bytes) -> Optional[str]:
    """The sha256 (hex) of every input of the verdict and of this container's identity; None when the
    chain directory cannot be read whole (then nothing is cached)."""
    import hashlib

    digest = hashlib.sha256(b"vllm-hotfix trust verdict 1\0")

    def part(value: bytes) -> None:
        digest.update(len(value).to_bytes(8, "big"))
        digest.update(value)

    part(data)
    part(policy)
    part(str(len(signatures)).encode())
    for name, content in signatures:
        part(name.encode("utf-8", "surrogateescape"))
        part(content)
    chain = _chain_files()
    if chain is None:
        return None
    part(str(len(chain)).encode())
    for name, content in chain:
        part(name)
        part(content)
    from vllm_hotfix_guard.ready_io import container_identity

    part(container_identity())
    return digest.hexdigest()


def _chain_files() -> Optional[list]:
    """(name, bytes) of every file in HOTFIX_TRUST_CHAIN's directory, by name; [] without one."""
    chain = os.environ.get(TRUST_CHAIN_ENV, "")
    if not chain:
        return []
    from vllm_hotfix_guard.errors import HotfixError
    from vllm_hotfix_guard.inputs import read_bounded
    from vllm_hotfix_guard.txn.signed import POLICY_LIMIT

    try:
        names = sorted(os.listdir(os.fsencode(chain)))
        if len(names) > CHAIN_FILES:
            return None
        found = []
        for name in names:
            if name.startswith(b"."):  # a ConfigMap's ..data and its timestamped folder
                continue
            where = os.path.join(os.fsencode(chain), name)
            if os.path.isfile(where):
                found.append((name, read_bounded(os.fsdecode(where), cap=POLICY_LIMIT, what="trust chain file")))
        return found
    except (OSError, ValueError, HotfixError):  # an unfit file: no cache (load_policy says what is wrong)
        return None


def cache_dir() -> "Optional[CacheDir]":
    """``$HOTFIX_READY_DIR/trust-verdicts`` when it is fit to hold verdicts (ready_io.private_dir: created 0700,
    a real directory owned by this user with no permission for group or others, judged on its descriptor)."""
    from vllm_hotfix_guard.ready_io import private_dir

    return private_dir(os.environ.get(READY_DIR_ENV, ""), CACHE_DIR)


def entry_bytes(key: str) -> bytes:
    """The one entry the cache accepts for ``key``."""
    return b'{"schema": 1, "key": "' + key.encode() + b'", "verdict": "trusted"}'


def cached(directory: "CacheDir", key: str) -> bool:
    """Whether ``directory`` holds a fit entry accepting ``key`` (see the module's rules)."""
    import json

    from vllm_hotfix_guard.ready_io import read_entry

    raw = read_entry(directory, f"{key}.json", ENTRY_LIMIT)
    if raw is None:
        return False
    try:
        doc = json.loads(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return False
    return doc == {"schema": SCHEMA, "key": key, "verdict": "trusted"} and type(doc["schema"]) is int


def store(directory: "CacheDir", key: str) -> None:
    """Leave the accepting verdict for ``key``: written 0600 under a temporary name, then renamed into
    place (a reader sees a whole entry or none), both relative to the checked directory's descriptor. A
    failure only costs the next process a verification."""
    from vllm_hotfix_guard.ready_io import store_entry

    store_entry(directory, f"{key}.json", entry_bytes(key))
