"""`hotfix sign`: a minisign signature of a lock, a trust policy or a catalog, by one key.

Writes minisign's default ``FILE.minisig`` beside the file (catalog: ``DIR/hotfix-catalog.sha256`` and
its signature), atomically, mode 0644, so that `minisign -V -m FILE -p KEY.pub` accepts it as pasted. A
further signer runs the same command with their key and gets ``FILE.<KEYID>.minisig`` (`minisign -V -m FILE
-x FILE.<KEYID>.minisig -p KEY.pub`): one signature file per key, where core.minisign.placed_name puts it;
a key signing again replaces its own file (and its older ``FILE.<KEYID>.minisig`` once it moves to
``FILE.minisig``). The file itself is never changed: the signature covers its exact bytes.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Mapping, Optional

from vllm_hotfix_guard.errors import InvalidInput, UsageError, WriteFailed
from vllm_hotfix_guard.inputs import read_bounded
from vllm_hotfix_guard.output import emit_json, note, quote_path, say
from vllm_hotfix_guard.settings import CATALOG_SUMS, PASSWORD_ENV, PASSWORD_FILE_ENV

PASSWORD_LIMIT = 4096
SIGNED_FILE_LIMIT = 16 << 20  # a lock is at most 4 MiB, a policy 64 KiB


def run(*, file: Optional[Path], catalog: Optional[Path], key: Path, password_file: Optional[Path],
        trusted_comment: Optional[str], dry_run: bool, as_json: bool, env: Optional[Mapping[str, str]] = None) -> int:
    from vllm_hotfix.core import signing
    from vllm_hotfix_guard.core import minisign

    env = os.environ if env is None else env
    if (file is None) == (catalog is None):
        raise UsageError("name the file to sign (a lock or a trust policy) or --catalog DIR, not both")
    if catalog is not None:
        kind, target, data = "catalog", Path(catalog) / CATALOG_SUMS, _catalog_sums(Path(catalog))
    else:
        target = Path(file)
        data = _read(target, SIGNED_FILE_LIMIT, "file to sign")
        kind = _check_signable(target, data)
    signing_key = unsealed_key(key, password_file, env)
    comment = trusted_comment if trusted_comment is not None else signing.default_trusted_comment(target.name)
    signature = signing.sign(data, signing_key, trusted_comment=comment)
    sig_path, replaced = _placed(target, signing_key.key_id)
    stale = [n for n in _stale_signatures(target, data) if n not in (sig_path.name, replaced and replaced.name)] \
        if kind == "catalog" else []
    if not dry_run:
        _write(target, data if kind == "catalog" else None, sig_path, minisign.format_signature(signature), replaced)
    if as_json:
        emit_json({"kind": kind, "signed": str(target), "signature": str(sig_path), "key_id": signing_key.public_key.id_text,
                   "public_key": signing_key.public_key.line, "trusted_comment": comment, "dry_run": dry_run,
                   "stale": stale, "replaced": str(replaced) if replaced else None})
        return 0
    for name in stale:
        note(f"{quote_path(name)} no longer verifies: the catalog changed since that key signed it; its holder must "
             f"sign again")
    verb = "would write" if dry_run else "wrote"
    say(f"{verb} {quote_path(str(sig_path))} ({kind}, key {signing_key.public_key.id_text})")
    if replaced:
        say(f"{'would remove' if dry_run else 'removed'} {quote_path(str(replaced))} (this key's older signature file)")
    beside = "" if sig_path.name == minisign.signature_name(target.name) else f" -x {shlex.quote(str(sig_path))}"
    say(f"check: minisign -V -m {shlex.quote(str(target))}{beside} -P {signing_key.public_key.line}")
    return 0


def _placed(target: Path, key_id: bytes) -> tuple[Path, Optional[Path]]:
    """(where this key's signature goes, the older file of this key it replaces): core.minisign.placed_name,
    the holder of ``FILE.minisig`` read from its content; what it replaces is this key's ``FILE.<KEYID>.minisig``
    (the name `hotfix sign` gave every signature before) once the signature moves to ``FILE.minisig``."""
    from vllm_hotfix_guard.core import minisign

    default = target.parent / minisign.signature_name(target.name)
    path = target.parent / minisign.placed_name(target.name, key_id, _holder(default))
    own = target.parent / minisign.signature_name(target.name, key_id)
    return path, (own if path == default and _holder(own) == key_id else None)


def _holder(path: Path) -> Optional[bytes]:
    """The key id of the signature file at ``path``; None when there is none; b"" for a file that is not a
    readable signature (never overwritten, never removed)."""
    from vllm_hotfix_guard.core import minisign

    try:
        return minisign.parse_signature(read_bounded(path, cap=minisign.SIGNATURE_FILE_LIMIT, what="signature file"),
                                        str(path)).key_id
    except FileNotFoundError:
        return None
    except (OSError, InvalidInput):
        return b""


def _write(target: Path, sums: Optional[bytes], sig_path: Path, signature: bytes, replaced: Optional[Path]) -> None:
    """The catalog's list of sums (``sums``) and the signature, each atomically; then this key's older file."""
    from vllm_hotfix_guard.txn.atomic import atomic_write, unlink_if_present

    try:
        if sums is not None:
            atomic_write(target, sums, 0o644)
        atomic_write(sig_path, signature, 0o644)
    except OSError as exc:
        raise WriteFailed(f"{getattr(exc, 'filename', None) or sig_path}: cannot write the signature: "
                          f"{exc.strerror}", hint="nothing that was signed before changed") from None
    if replaced is not None:
        try:
            unlink_if_present(replaced)
        except OSError as exc:
            note(f"{quote_path(str(replaced))}: cannot remove this key's older signature file ({exc.strerror}); "
                 f"it still counts once with the new one, or as a warning if it no longer verifies")


def unsealed_key(key: Path, password_file: Optional[Path], env: Mapping[str, str]):
    """The signing key in the secret key file ``key`` (its password as ``_password`` finds it)."""
    from vllm_hotfix.core import signing

    secret = signing.parse_secret_key(_read(key, signing.SECRET_KEY_FILE_LIMIT, "secret key"), str(key))
    password = _password(key, password_file, env) if secret.encrypted else None
    return signing.unseal(secret, password, str(key))


def _read(path: Path, cap: int, what: str) -> bytes:
    try:
        return read_bounded(path, cap=cap, what=what)
    except FileNotFoundError:
        raise UsageError(f"{quote_path(str(path))}: no such {what}") from None
    except OSError as exc:
        raise InvalidInput(f"{quote_path(str(path))}: cannot read the {what}: {exc.strerror}") from None


def _check_signable(path: Path, data: bytes) -> str:
    """'lock' or 'policy': what the bytes are, checked as their reader checks them (a broken file is never
    signed)."""
    if path.suffix == ".toml":
        from vllm_hotfix_guard.core.trust_policy import parse_policy

        parse_policy(data, str(path))
        return "policy"
    from vllm_hotfix_guard.txn.hotfix_lock import parse_lock

    lock = parse_lock(data, source=str(path))
    if lock.version is None:
        note(f"{quote_path(str(path))} has no version: a policy's min_version counts it as 0 (re-export it with "
             f"`hotfix export ... --lock-version N`)")
    return "lock"


def _catalog_sums(directory: Path) -> bytes:
    from vllm_hotfix_guard.txn.catalog_sums import current_sums, format_sums

    if not (directory / "manifests").is_dir():
        raise UsageError(f"{quote_path(str(directory))} is not a catalog: no manifests/ directory in it")
    return format_sums(current_sums(directory))


def _stale_signatures(target: Path, data: bytes) -> list[str]:
    """Signature files beside the catalog's list that were made over other bytes than ``data``."""
    from vllm_hotfix_guard.txn.signed import signature_files

    try:
        old = read_bounded(target, cap=16 << 20, what="catalog list of sums")
    except OSError:
        return []
    if old == data:
        return []
    return [name for name, _ in signature_files(target)]


def _password(key: Path, password_file: Optional[Path], env: Mapping[str, str]) -> bytes:
    """The secret key's password: --password-file / HOTFIX_KEY_PASSWORD_FILE (its first line), else
    HOTFIX_KEY_PASSWORD, else a prompt on the terminal. Never from the command line itself."""
    named = password_file or env.get(PASSWORD_FILE_ENV)
    if named:
        data = _read(Path(named), PASSWORD_LIMIT, "password file")
        return data.split(b"\n", 1)[0].rstrip(b"\r")
    if PASSWORD_ENV in env:
        return env[PASSWORD_ENV].encode("utf-8")
    if not sys.stdin.isatty():
        raise UsageError(f"{quote_path(str(key))} is encrypted and no terminal is there to ask its password",
                         hint=f"give it with --password-file FILE or {PASSWORD_FILE_ENV}=FILE (a mounted secret), "
                              f"or {PASSWORD_ENV}")
    import getpass

    try:
        return getpass.getpass(f"Password for {key}: ").encode("utf-8")
    except EOFError:
        raise UsageError("no password given") from None
