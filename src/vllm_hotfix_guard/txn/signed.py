"""Signed files on disk: the trust policy (and its rotations), the signature files beside a lock, a
policy or a catalog's list of sums; read as input (inputs.read_bounded), judged by core.trust_policy.

Stdlib only, like the lock reader: the guard (issue 36 part B) calls ``lock_verdict`` with the bytes
it parsed, so a process pays the verifier only (core.ed25519 + core.minisign + core.policytoml +
core.trust_policy), nothing of the CLI.

Where the policy comes from (docs/trust.md, "Signed locks"): ``--trust FILE`` / ``HOTFIX_TRUST``; in an image,
the pinned ``/etc/vllm-hotfix/trust.toml`` (settings.CONTAINER_TRUST) applies whether the environment
names it or not, and the environment cannot name another one: whoever writes the pod spec and the
lock's ConfigMap must not be able to choose the policy. Newer policies come through
``HOTFIX_TRUST_CHAIN=DIR`` (``policy-<N>.toml`` + their signature files), each step signed by the
threshold of the one before (core.trust_policy.rotation), walked from the pinned one up.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Mapping, Optional

from vllm_hotfix_guard.errors import InvalidInput, Refused, Untrusted, UsageError
from vllm_hotfix_guard.inputs import read_bounded
from vllm_hotfix_guard.settings import CONTAINER_TRUST, TRUST_CHAIN_ENV, TRUST_ENV

CHAIN_LIMIT = 256  # rotations walked at most
POLICY_LIMIT = 64 << 10  # core.trust_policy.POLICY_LIMIT (checked equal in tests): read before core.trust_policy is imported
# core.minisign and core.trust_policy are imported where a policy is in force: without one, `verify --lock` and
# the guard pay for policy_path only


def chain_name(version: int) -> str:
    """The file of policy ``version`` in a chain directory."""
    return f"policy-{version}.toml"


def policy_path(given: Optional[str | Path], env: Optional[Mapping[str, str]] = None,
                pinned: str = CONTAINER_TRUST) -> Optional[Path]:
    """The policy that applies: ``given`` (--trust), else HOTFIX_TRUST, else the image's pinned one when
    it exists; None: no policy. Naming another file than a pinned one is a usage error (exit 2)."""
    env = os.environ if env is None else env
    named = str(given) if given else env.get(TRUST_ENV, "")
    if "\0" in named:
        raise InvalidInput(f"--trust / {TRUST_ENV} {named!r}: holds a NUL byte; no file has such a name")
    if os.path.lexists(pinned):
        if named and os.path.realpath(named) != os.path.realpath(pinned):
            raise UsageError(f"--trust / {TRUST_ENV} names {named}, but this image pins its trust policy at {pinned}",
                             hint=f"the pinned policy cannot be replaced from outside the image; ship newer, signed "
                                  f"policies through {TRUST_CHAIN_ENV}=DIR (`hotfix trust rotate --chain DIR`)")
        return Path(pinned)
    return Path(named) if named else None


def read_policy_file(path: Path) -> tuple[bytes, "trust_policy.Policy"]:
    """A policy file's bytes and policy (``read_policy_bytes``, then core.trust_policy.parse_policy)."""
    data = read_policy_bytes(path)
    from vllm_hotfix_guard.core import trust_policy

    return data, trust_policy.parse_policy(data, str(path))


def read_policy_bytes(path: Path) -> bytes:
    """A policy file's bytes, unparsed (what the guard's verdict cache keys on). It is trusted by where it
    is, so it must be a regular file (a link is followed: ConfigMap mounts are links) that only its owner,
    this user or root, can write: judged on the fstat of the one descriptor the bytes are read from."""
    def owned(info: os.stat_result) -> None:  # the fstat of the very descriptor read (issue 45: never a 2nd look)
        if info.st_uid not in (os.geteuid(), 0) or info.st_mode & 0o022:
            raise Refused(f"{path}: the trust policy is writable by others than its owner, or owned by another user "
                          f"(uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}): whoever can write it decides "
                          f"what runs", hint=f"`chmod go-w {path}` and own it, or keep it in the image (read-only)")

    try:
        return read_bounded(path, cap=POLICY_LIMIT, what="trust policy", check=owned)
    except FileNotFoundError:
        raise UsageError(f"trust policy {path} does not exist", hint=f"check --trust / {TRUST_ENV}") from None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read the trust policy: {exc.strerror}") from None


def signature_files(signed: Path, *, follow_symlinks: bool = True) -> list[tuple[str, bytes]]:
    """(base name, bytes) of every signature file of ``signed`` in its directory: ``NAME.minisig`` and
    ``NAME.<KEYID>.minisig`` (core.minisign.signature_name; core/signames.py), by name; links followed (a ConfigMap's
    files are links) unless ``follow_symlinks`` is False (`hotfix pack`), each a regular file of at most a few KB."""
    from vllm_hotfix_guard.core.signames import MAX_SIGNATURES, SIGNATURE_FILE_LIMIT, is_signature_name

    directory = signed.parent
    try:
        names = sorted(n for n in os.listdir(directory) if is_signature_name(n, signed.name))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise InvalidInput(f"{directory}: cannot list the signature files of {signed.name}: {exc.strerror}") from None
    found = []
    for name in names[:MAX_SIGNATURES + 1]:
        try:
            found.append((name, read_bounded(directory / name, cap=SIGNATURE_FILE_LIMIT,
                                             what="signature file", follow_symlinks=follow_symlinks)))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise InvalidInput(f"{directory / name}: cannot read the signature file: {exc.strerror}") from None
    return found


def load_policy(given: Optional[str | Path] = None, *, now: float, env: Optional[Mapping[str, str]] = None,
                chain: Optional[str | Path] = None, pinned: str = CONTAINER_TRUST,
                data: Optional[bytes] = None) -> Optional["trust_policy.Policy"]:
    """The policy in force (None: none): ``policy_path``'s, then every rotation in the chain directory
    (``chain`` or HOTFIX_TRUST_CHAIN) that its predecessor's keys signed. A step that does not verify is
    refused (Untrusted, its exit code): a chain is never skipped past. ``data``: the policy file's bytes,
    when the caller read them (``read_policy_bytes``) and keys on them."""
    env = os.environ if env is None else env
    path = policy_path(given, env, pinned)
    if path is None:
        return None
    if data is None:
        _, policy = read_policy_file(path)
    else:  # its bytes read already (``read_policy_bytes``): judged as read, never read again
        from vllm_hotfix_guard.core import trust_policy

        policy = trust_policy.parse_policy(data, str(path))
    chain_dir = str(chain) if chain else env.get(TRUST_CHAIN_ENV, "")
    if not chain_dir:
        return policy
    directory = Path(chain_dir)
    for _ in range(CHAIN_LIMIT):
        step = directory / chain_name(policy.version + 1)
        if not step.exists():
            break
        policy = rotated(policy, step, now=now)
    return policy


def rotated(current: trust_policy.Policy, new_path: Path, *, now: float) -> trust_policy.Policy:
    """The policy at ``new_path`` when ``current`` lets it replace itself (core.trust_policy.rotation); else
    Untrusted naming each refusal."""
    from vllm_hotfix_guard.core import trust_policy

    try:
        data = read_bounded(new_path, cap=POLICY_LIMIT, what="trust policy")
    except OSError as exc:
        raise InvalidInput(f"{new_path}: cannot read the new trust policy: {exc.strerror}") from None
    new = trust_policy.parse_policy(data, str(new_path))
    verdict = trust_policy.rotation(current, data, new, signature_files(new_path), now=now, subject=str(new_path))
    refuse(verdict)
    return new


def refuse(verdict: trust_policy.TrustDecision, hint: Optional[str] = None) -> None:
    """Untrusted (the first refusal's exit code) with every refusal line; nothing for a trusted verdict."""
    if verdict.trusted:
        return
    lines = [r.line for r in verdict.refusals]
    raise Untrusted("; ".join(lines), exit_code=verdict.exit_code,
                    hint=hint or "sign it with enough listed keys (`hotfix sign FILE --key KEY`), or check that it "
                                 "is the file the keys signed")


def lock_verdict(lock_path: Path, data: bytes, lock, policy: trust_policy.Policy, *, now: float,
                 subject: str, signatures=None) -> trust_policy.TrustDecision:
    """The policy's verdict on a lock: ``data`` are the bytes ``lock`` was parsed from
    (txn.hotfix_lock.read_lock), its signature files those beside ``lock_path`` (or ``signatures``, (name,
    bytes) pairs read elsewhere: a bundle's layer, the guard's cache key); ``subject`` names the lock in the lines (quoted by
    the caller: output.quote_path)."""
    from vllm_hotfix_guard.core import trust_policy

    found = signature_files(lock_path) if signatures is None else list(signatures)
    return trust_policy.evaluate(data, found, policy, now=now, subject=subject,
                          version=lock.version, expires=lock.expires)
