"""Signing in minisign's format with a key `minisign -G` made: its secret key file read (scrypt-encrypted,
or unencrypted with -W), the Ed25519 signature made by `cryptography` (the CLI's dependency; never
imported by the guard: an import-linter contract). Pure: bytes and a password in, bytes out.

A secret key file is ``untrusted comment: ...`` and base64 of ``"Ed" || kdf ("Sc" scrypt, or two NUL
bytes: none) || "B2" || salt (32) || opslimit (8, LE) || memlimit (8, LE) || key id (8) || secret key
(64: seed || public key) || checksum (32)``; with scrypt, the last 104 bytes are XORed with
scrypt(password, salt) as libsodium's crypto_pwhash_scryptsalsa208sha256 derives it from opslimit and
memlimit; the checksum is BLAKE2b-256 of "Ed" || key id || secret key (all zero in an unencrypted key
from minisign 0.11, which never checks it there).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time

from vllm_hotfix_guard.core import minisign
from vllm_hotfix_guard.errors import InvalidInput, Refused
from vllm_hotfix_guard.values import Value

SECRET_KEY_SIZE = 158
SECRET_KEY_FILE_LIMIT = 4096


class SecretKey(Value):
    """A minisign secret key, parsed; ``sealed`` until ``unseal`` (the 104 bytes still XORed)."""

    kdf: str  # "Sc" (scrypt) or "" (unencrypted)
    salt: bytes
    opslimit: int
    memlimit: int
    keynum_sk: bytes  # key id || secret key || checksum (encrypted when kdf == "Sc")

    @property
    def encrypted(self) -> bool:
        return self.kdf == "Sc"


class SigningKey(Value):
    """An unsealed key: what signs."""

    key_id: bytes
    seed: bytes  # the Ed25519 private key (32 bytes)
    public: bytes  # the Ed25519 public key the secret key carries

    @property
    def public_key(self) -> minisign.PublicKey:
        return minisign.PublicKey(key_id=self.key_id, key=self.public)


def parse_secret_key(data: bytes, source: str) -> SecretKey:
    """A `minisign -G` secret key file: its two lines, every field checked."""
    try:
        lines = data.decode("ascii").strip().split("\n")
    except UnicodeDecodeError:
        raise InvalidInput(f"{source}: not a minisign secret key (not ASCII)") from None
    lines = [line.rstrip("\r") for line in lines]
    if len(lines) != 2 or not lines[0].startswith(minisign.UNTRUSTED_PREFIX):
        raise InvalidInput(f"{source}: not a minisign secret key (expected an untrusted comment and a key line)")
    try:
        raw = base64.b64decode(lines[1], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{source}: the key line is not base64") from None
    if len(raw) != SECRET_KEY_SIZE:
        raise InvalidInput(f"{source}: the key is {len(raw)} bytes, a minisign secret key is {SECRET_KEY_SIZE}"
                           + (" (that looks like a public key)" if len(raw) == 42 else ""))
    if raw[:2] != b"Ed":
        raise InvalidInput(f"{source}: unsupported signature algorithm {raw[:2]!r}")
    if raw[4:6] != b"B2":
        raise InvalidInput(f"{source}: unsupported checksum {raw[4:6]!r}")
    if raw[2:4] not in (b"Sc", b"\0\0"):
        raise InvalidInput(f"{source}: unsupported key derivation {raw[2:4]!r}")
    return SecretKey(kdf="Sc" if raw[2:4] == b"Sc" else "", salt=raw[6:38],
                     opslimit=int.from_bytes(raw[38:46], "little"), memlimit=int.from_bytes(raw[46:54], "little"),
                     keynum_sk=raw[54:])


def scrypt_parameters(opslimit: int, memlimit: int) -> tuple[int, int, int]:
    """(N, r, p) as libsodium's crypto_pwhash_scryptsalsa208sha256 picks them from its limits (its
    ``pickparams``); minisign's defaults (2^25, 2^30) give N = 2^20, r = 8, p = 1: 1 GiB."""
    opslimit = max(opslimit, 32768)
    r = 8
    if opslimit < memlimit // 32:
        p = 1
        max_n = opslimit // (r * 4)
        log_n = 1
        while log_n < 63 and (1 << log_n) <= max_n // 2:
            log_n += 1
    else:
        max_n = memlimit // (r * 128)
        log_n = 1
        while log_n < 63 and (1 << log_n) <= max_n // 2:
            log_n += 1
        max_rp = min((opslimit // 4) // (1 << log_n), 0x3FFFFFFF)
        p = max_rp // r
    return 1 << log_n, r, p


def unseal(key: SecretKey, password: bytes | None, source: str) -> SigningKey:
    """The signing key; an encrypted key needs its password (Refused, exit 3, when it is wrong)."""
    body = key.keynum_sk
    if key.encrypted:
        if password is None:
            raise Refused(f"{source}: the secret key is encrypted and no password was given")
        n, r, p = scrypt_parameters(key.opslimit, key.memlimit)
        if p < 1 or n * r * 128 > (1 << 31) - (128 << 20):
            raise InvalidInput(f"{source}: implausible scrypt limits (opslimit {key.opslimit}, memlimit {key.memlimit})")
        stream = hashlib.scrypt(password, salt=key.salt, n=n, r=r, p=p, maxmem=n * r * 128 + (64 << 20),
                                dklen=len(body))
        body = bytes(a ^ b for a, b in zip(body, stream))
    key_id, secret, checksum = body[:8], body[8:72], body[72:]
    if key.encrypted or checksum != bytes(32):
        expected = hashlib.blake2b(b"Ed" + key_id + secret, digest_size=32).digest()
        if checksum != expected:
            if key.encrypted:
                raise Refused(f"{source}: wrong password for that key")
            raise InvalidInput(f"{source}: the secret key's checksum does not match: the file is damaged")
    signing = SigningKey(key_id=key_id, seed=secret[:32], public=secret[32:])
    if _private(signing.seed)[1] != signing.public:
        raise InvalidInput(f"{source}: the secret key does not hold the public key it names: the file is damaged")
    return signing


def _private(seed: bytes):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    private = Ed25519PrivateKey.from_private_bytes(seed)
    return private, private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def default_trusted_comment(file_name: str, now: float | None = None) -> str:
    """minisign's own: ``timestamp:<unix time>\\tfile:<base name>\\thashed``."""
    return f"timestamp:{int(time.time() if now is None else now)}\tfile:{file_name}\thashed"


def sign(message: bytes, key: SigningKey, *, trusted_comment: str,
         untrusted_comment: str = "signature from minisign secret key") -> minisign.Signature:
    """A prehashed minisign signature of ``message``, checked with the stdlib verifier before it is
    returned (as minisign checks its own against the public key)."""
    if not minisign.printable(trusted_comment) or len(trusted_comment.encode("utf-8")) > minisign.TRUSTED_LIMIT:
        raise InvalidInput("the trusted comment must be one printable line of at most 8 KB")
    if "\n" in untrusted_comment or "\r" in untrusted_comment or len(untrusted_comment) > minisign.COMMENT_LIMIT:
        raise InvalidInput("the untrusted comment must be one line of at most 1 KB")
    private, _ = _private(key.seed)
    signature = private.sign(minisign.prehash(message))
    global_signature = private.sign(signature + trusted_comment.encode("utf-8"))
    made = minisign.Signature(algorithm="ED", key_id=key.key_id, signature=signature,
                              trusted_comment=trusted_comment, global_signature=global_signature,
                              untrusted_comment=untrusted_comment)
    if minisign.check(made, key.public_key, message) != minisign.VALID:  # pragma: no cover - a bug
        raise RuntimeError("a signature just made does not verify")
    return made
