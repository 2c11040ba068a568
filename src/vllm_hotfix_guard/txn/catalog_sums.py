"""A signed catalog: ``hotfix-catalog.sha256`` lists every file under its ``manifests/`` and ``patches/``
with its sha256, in the format ``sha256sum`` writes (``<64 hex>  <relative path>``, one a line, sorted
by path as UTF-8 bytes), and minisign signature files sign that list (core.minisign.placed_name).

So a catalog can be checked with standard tools too: ``minisign -V -m DIR/hotfix-catalog.sha256 -p KEY.pub``
(a further key's: ``-x DIR/hotfix-catalog.sha256.<KEYID>.minisig``) and ``(cd DIR && sha256sum -c --strict
hotfix-catalog.sha256)``; hotfix also refuses files the list does not name. Paths holding a newline,
a backslash or a control character cannot be listed (sha256sum would escape them): such a catalog
cannot be signed.

The one verdict on a catalog directory under a policy with ``catalogs = "signed"``: `hotfix` refuses a
``--catalog`` / ``HOTFIX_CATALOG`` directory it does not accept (catalog/index._require_signed), and the guard
under HOTFIX_REQUIRE takes no pin from it and calls every required record unknown (vllm_hotfix_guard/pins.py),
with the same lines (``subject``) and the same advice (``sign_advice``). Stdlib only (the guard's kernel).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional

from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.inputs import read_bounded
from vllm_hotfix_guard.settings import CATALOG_SUMS

if TYPE_CHECKING:  # the verifier is imported where a policy is in force (txn/signed.py's rule)
    from vllm_hotfix_guard.core import trust_policy

LISTED_DIRS = ("manifests", "patches")
FILE_LIMIT = 64 << 20  # a catalog patch's cap (catalog/manifest.py)
SUMS_LIMIT = 16 << 20
MAX_FILES = 100_000


def current_sums(directory: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under the catalog's manifests/ and patches/ (``catalog_files``)."""
    return {path: hashlib.sha256(data).hexdigest() for path, data in catalog_files(directory).items()}


def catalog_files(directory: Path) -> dict[str, bytes]:
    """relative path -> the bytes of every file under the catalog's manifests/ and patches/, each read once
    as input (regular files only: a symbolic link or any other kind of file is refused, InvalidInput; a file
    that goes away while it is read too). What a signed catalog's verdict judges, what it is loaded from, and
    what `hotfix catalog publish` archives."""
    found: dict[str, bytes] = {}
    for top in LISTED_DIRS:
        root = directory / top
        if not root.is_dir():
            continue
        for parent, dirs, files in os.walk(root, followlinks=False):
            for name in sorted(dirs):
                if os.path.islink(os.path.join(parent, name)):
                    raise InvalidInput(f"{os.path.join(parent, name)}: a symbolic link in a catalog; a signed catalog "
                                       f"holds regular files only")
            for name in files:
                path = os.path.join(parent, name)
                relative = os.path.relpath(path, directory).replace(os.sep, "/")
                _check_name(relative, path)
                try:
                    info = os.lstat(path)
                    if not stat.S_ISREG(info.st_mode):
                        raise InvalidInput(f"{path}: not a regular file; a signed catalog holds regular files only")
                    found[relative] = read_bounded(path, cap=FILE_LIMIT, what="catalog file", follow_symlinks=False)
                except OSError as exc:
                    raise InvalidInput(f"{path}: cannot read: {exc.strerror}",
                                       hint="the catalog changed while it was read; read it again") from None
                if len(found) > MAX_FILES:
                    raise InvalidInput(f"{directory}: more than {MAX_FILES} files in the catalog")
    return found


def _check_name(relative: str, path: str) -> None:
    if any(c < " " or c in "\\\x7f" for c in relative):
        raise InvalidInput(f"{path!r}: a catalog file name with a control character or a backslash cannot be listed")


def is_manifest(relative: str) -> bool:
    """A catalog's manifest among ``catalog_files``' paths: ``manifests/<name>.toml``."""
    return relative.startswith("manifests/") and relative.count("/") == 1 and relative.endswith(".toml")


def format_sums(sums: dict[str, str]) -> bytes:
    """The list's bytes: sorted by path as UTF-8, as ``sha256sum`` prints each file."""
    ordered = sorted(sums.items(), key=lambda item: item[0].encode("utf-8", "surrogateescape"))
    return "".join(f"{digest}  {path}\n" for path, digest in ordered).encode("utf-8", "surrogateescape")


def parse_sums(data: bytes, source: str) -> dict[str, str]:
    """The list written by ``format_sums``, strictly: the canonical bytes only (sorted, no duplicates,
    no blank line), else InvalidInput."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{source}: not UTF-8") from None
    sums: dict[str, str] = {}
    for number, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"), 1):
        digest, sep, path = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not path:
            raise InvalidInput(f"{source}: line {number}: expected '<sha256>  <path>'")
        top = path.split("/", 1)[0]
        if top not in LISTED_DIRS or ".." in path.split("/") or path in sums:
            raise InvalidInput(f"{source}: line {number}: {path!r} is not a file of manifests/ or patches/ listed once")
        sums[path] = digest
    if format_sums(sums) != data:
        raise InvalidInput(f"{source}: not in canonical form (sorted by path, one '<sha256>  <path>' a line)",
                           hint="write it again with `hotfix sign --catalog DIR`")
    return sums


def catalog_policy(env: Mapping[str, str], *, now: float) -> Optional[trust_policy.Policy]:
    """The trust policy in force (txn/signed.load_policy) when it asks for signed catalogs, else None: no
    user catalog is checked. A policy that cannot be used raises as load_policy does (HotfixError)."""
    from vllm_hotfix_guard.txn.signed import load_policy

    policy = load_policy(now=now, env=env)
    return policy if policy is not None and policy.catalogs == "signed" else None


def directory_verdict(directory: Path, policy: trust_policy.Policy, *,
                      now: float) -> tuple[trust_policy.TrustDecision, dict[str, bytes]]:
    """(the policy's verdict on a user catalog directory, the files it judged: ``catalog_files``, read once,
    what the catalog is then loaded from). Raises InvalidInput for a file that cannot be listed or read."""
    files = catalog_files(directory)
    return catalog_verdict(directory, policy, now=now, subject=subject(directory), files=files), files


def subject(directory: Path) -> str:
    """How a verdict's lines name a catalog directory: its absolute path, quoted (output.quote_path)."""
    from vllm_hotfix_guard.output import quote_path

    return f"catalog {quote_path(os.path.abspath(directory))}"


def sign_advice(directory: Path) -> str:
    """What to do about a catalog directory the policy refuses, the command as pasted in a shell (KEY: the
    secret key file of a key the policy lists)."""
    import shlex

    from vllm_hotfix_guard.output import visible

    return f"sign the catalog with enough listed keys: hotfix sign --catalog {visible(shlex.quote(str(directory)))} --key KEY"


def catalog_verdict(directory: Path, policy: trust_policy.Policy, *, now: float, subject: str,
                    files: dict[str, bytes]) -> trust_policy.TrustDecision:
    """The policy's verdict on a catalog directory: its list signed as the policy asks, and every file
    under manifests/ and patches/ listed with its sha256 (one TAMPERED line per file that differs).
    ``files``: what ``catalog_files`` read, the very bytes the catalog is then loaded from."""
    from vllm_hotfix_guard.core import trust_policy
    from vllm_hotfix_guard.txn.signed import signature_files

    sums_path = directory / CATALOG_SUMS
    data = _read_sums(sums_path)
    if data is None:
        return trust_policy.evaluate(b"", [], policy, now=now, subject=subject, versioned=False)
    verdict = trust_policy.evaluate(data, signature_files(sums_path), policy, now=now, subject=subject, versioned=False)
    if not verdict.trusted:
        return verdict
    listed = parse_sums(data, str(sums_path))
    lines = tampered_lines(subject, {path: (digest, None) for path, digest in listed.items()}, files)
    if not lines:
        return verdict
    return trust_policy.TrustDecision(subject=verdict.subject, signers=verdict.signers, threshold=verdict.threshold,
                         checks=verdict.checks, refusals=tuple(trust_policy.Refusal(trust_policy.TAMPERED, line) for line in lines),
                         warnings=verdict.warnings)


def tampered_lines(subject: str, signed: dict[str, tuple[str, Optional[int]]], found: dict[str, bytes]) -> list[str]:
    """One TAMPERED line per file that is not what was signed: ``signed`` maps each path to its sha256 and
    size (None: not signed), ``found`` each file read to its bytes. Empty: every file is the signed one.
    The one rule for a signed catalog directory and a published catalog release alike."""
    lines = []
    for path in sorted(set(signed) | set(found)):
        if path not in found:
            lines.append(f"TAMPERED: {subject}: {path} is listed but missing")
        elif path not in signed:
            lines.append(f"TAMPERED: {subject}: {path} is not in the signed list")
        else:
            digest, size = signed[path]
            body = found[path]
            got = hashlib.sha256(body).hexdigest()
            if got != digest or (size is not None and len(body) != size):
                lines.append(f"TAMPERED: {subject}: {path} changed after signing (sha256 {got[:12]}..., "
                             f"signed {digest[:12]}...)")
    return lines


def _read_sums(path: Path) -> Optional[bytes]:
    try:
        return read_bounded(path, cap=SUMS_LIMIT, what="catalog list of sums")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot read: {exc.strerror}") from None
