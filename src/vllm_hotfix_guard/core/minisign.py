"""minisign's public key and signature formats, read and written; signatures checked with core.ed25519.

Pure and stdlib only (the guard checks signed locks with it). The formats, as minisign 0.11 writes them:

- a public key file: ``untrusted comment: minisign public key <KEYID>`` and the key line, base64 of
  ``"Ed" || key id (8 bytes) || Ed25519 public key (32)``; KEYID is the id as a little-endian integer in
  16 uppercase hex digits;
- a signature file (``FILE.minisig``): ``untrusted comment: ...``, base64 of ``"ED" || key id ||
  Ed25519(BLAKE2b-512(FILE))`` (``"Ed"``: legacy, Ed25519 of FILE itself), ``trusted comment: TEXT``,
  and base64 of the global signature, Ed25519(signature || TEXT), which makes the trusted comment
  as authentic as the file.

Only prehashed ("ED") signatures are accepted; a legacy one is reported as such (``LEGACY``) and never
counts, as with `minisign -V -H`: minisign signs prehashed by default since 0.11, `hotfix sign` only so,
and one algorithm is one code path in every vLLM process (docs/design.md, the trust section).
"""

from __future__ import annotations

import base64
import binascii

from vllm_hotfix_guard.core.signames import SIGNATURE_FILE_LIMIT, SUFFIX, is_signature_name  # noqa: F401 - minisign's API too
from vllm_hotfix_guard.errors import InvalidInput
from vllm_hotfix_guard.values import Value

UNTRUSTED_PREFIX = "untrusted comment: "
TRUSTED_PREFIX = "trusted comment: "
COMMENT_LIMIT = 1024 - len(UNTRUSTED_PREFIX)  # minisign's COMMENTMAXBYTES
TRUSTED_LIMIT = 8192 - len(TRUSTED_PREFIX) - 1  # TRUSTEDCOMMENTMAXBYTES, with its NUL

# outcomes of checking one signature file against one key
VALID = "valid"
BAD_SIGNATURE = "bad-signature"  # the file's bytes are not what the key signed
BAD_COMMENT = "bad-comment"  # the trusted comment is not what the key signed
LEGACY = "legacy"  # a non-prehashed signature (minisign -l): not accepted
OTHER_KEY = "other-key"  # made by another key than this one


class PublicKey(Value):
    """A minisign public key: its 8-byte id and the Ed25519 key."""

    key_id: bytes
    key: bytes

    @property
    def id_text(self) -> str:
        return key_id_text(self.key_id)

    @property
    def line(self) -> str:
        """The key line of a .pub file (what `minisign -P` takes)."""
        return base64.b64encode(b"Ed" + self.key_id + self.key).decode("ascii")

    def pub_file(self) -> bytes:
        return f"{UNTRUSTED_PREFIX}minisign public key {self.id_text}\n{self.line}\n".encode("ascii")


class Signature(Value):
    """One minisign signature file, parsed."""

    algorithm: str  # "ED" (prehashed) or "Ed" (legacy)
    key_id: bytes
    signature: bytes  # 64 bytes, over BLAKE2b-512 of the file ("ED") or the file itself ("Ed")
    trusted_comment: str
    global_signature: bytes  # 64 bytes, over signature || trusted comment
    untrusted_comment: str = ""

    @property
    def key_id_text(self) -> str:
        return key_id_text(self.key_id)


def key_id_text(key_id: bytes) -> str:
    """The key id as minisign prints it: a little-endian integer in 16 uppercase hex digits."""
    return f"{int.from_bytes(key_id, 'little'):016X}"


def _b64(text: str, size: int, source: str, what: str) -> bytes:
    try:
        data = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{source}: {what} is not base64") from None
    if len(data) != size:
        raise InvalidInput(f"{source}: {what} is {len(data)} bytes, a minisign {what} is {size}")
    return data


def parse_public_key(text: str, source: str = "public key") -> PublicKey:
    """A key line (``RWQ...``, as `minisign -P` and a policy take it) or a whole .pub file's text."""
    lines = [line.rstrip("\r") for line in text.strip().split("\n")]
    if len(lines) == 2 and lines[0].startswith(UNTRUSTED_PREFIX):
        lines = lines[1:]
    if len(lines) != 1:
        raise InvalidInput(f"{source}: expected a minisign public key line (RWQ...) or a .pub file")
    data = _b64(lines[0], 42, source, "public key")
    if data[:2] != b"Ed":
        raise InvalidInput(f"{source}: unsupported signature algorithm {data[:2]!r} (minisign keys are Ed25519: 'Ed')")
    return PublicKey(key_id=data[2:10], key=data[10:])


def parse_signature(data: bytes, source: str = "signature") -> Signature:
    """A minisign signature file's four lines (LF or CRLF), each checked as minisign checks it; anything
    after the fourth line but blank lines is refused."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{source}: not a minisign signature (not UTF-8)") from None
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    while lines and lines[-1] == "":
        lines.pop()
    if len(lines) != 4:
        raise InvalidInput(f"{source}: not a minisign signature (expected 4 lines, found {len(lines)})")
    untrusted, sig_line, trusted, global_line = lines
    if not untrusted.startswith(UNTRUSTED_PREFIX):
        raise InvalidInput(f"{source}: line 1 should start with {UNTRUSTED_PREFIX.strip()!r}")
    if not trusted.startswith(TRUSTED_PREFIX):
        raise InvalidInput(f"{source}: line 3 should start with {TRUSTED_PREFIX.strip()!r}")
    comment = trusted[len(TRUSTED_PREFIX):]
    if len(comment.encode("utf-8")) > TRUSTED_LIMIT or not printable(comment):
        raise InvalidInput(f"{source}: the trusted comment is too long or holds unprintable characters")
    raw = _b64(sig_line, 74, source, "signature")
    if raw[:2] not in (b"ED", b"Ed"):
        raise InvalidInput(f"{source}: unsupported signature algorithm {raw[:2]!r}")
    return Signature(algorithm=raw[:2].decode("ascii"), key_id=raw[2:10], signature=raw[10:],
                     trusted_comment=comment, global_signature=_b64(global_line, 64, source, "global signature"),
                     untrusted_comment=untrusted[len(UNTRUSTED_PREFIX):])


def format_signature(signature: Signature) -> bytes:
    """The signature file minisign writes for ``signature``."""
    line = base64.b64encode(signature.algorithm.encode("ascii") + signature.key_id + signature.signature)
    return (f"{UNTRUSTED_PREFIX}{signature.untrusted_comment}\n{line.decode('ascii')}\n"
            f"{TRUSTED_PREFIX}{signature.trusted_comment}\n"
            f"{base64.b64encode(signature.global_signature).decode('ascii')}\n").encode("utf-8")


def printable(text: str) -> bool:
    """minisign's rule for a trusted comment: tabs and printable characters, no C0 or C1 control
    character nor DEL."""
    return all(c == "\t" or not (c < " " or "\x7f" <= c <= "\x9f") for c in text)


def prehash(message: bytes) -> bytes:
    """BLAKE2b-512 of ``message``: what a prehashed ("ED") signature signs."""
    import hashlib

    return hashlib.blake2b(message, digest_size=64).digest()


def check(signature: Signature, key: PublicKey, message: bytes) -> str:
    """One of VALID, OTHER_KEY, LEGACY, BAD_SIGNATURE, BAD_COMMENT: what `minisign -V -H` would say of
    ``signature`` over ``message`` with ``key`` (both signatures must verify)."""
    if signature.key_id != key.key_id:
        return OTHER_KEY
    if signature.algorithm != "ED":
        return LEGACY
    from vllm_hotfix_guard.core import ed25519  # here: reading names and formats (the guard's cached verdict) needs no verifier

    if not ed25519.verify(key.key, prehash(message), signature.signature):
        return BAD_SIGNATURE
    if not ed25519.verify(key.key, signature.signature + signature.trusted_comment.encode("utf-8"),
                          signature.global_signature):
        return BAD_COMMENT
    return VALID


def signature_name(signed_name: str, key_id: bytes | None = None) -> str:
    """The signature file of ``signed_name`` (a base name): ``NAME.minisig`` (minisign's default, one
    signer) or ``NAME.<KEYID>.minisig``, one per key, so that several keys can sign one file. Which key
    signed a file is read from its content, never from its name."""
    return f"{signed_name}.{key_id_text(key_id)}{SUFFIX}" if key_id is not None else signed_name + SUFFIX


def placed_name(signed_name: str, key_id: bytes, default_holder: bytes | None) -> str:
    """Where key ``key_id``'s signature of ``signed_name`` goes (`hotfix sign`): minisign's default
    ``NAME.minisig`` when it is free (``default_holder`` None) or already this key's, so that `minisign -V -m
    NAME -p KEY.pub` reads it as pasted; else ``NAME.<KEYID>.minisig`` (a further signer; minisign reads it
    with ``-x``). ``default_holder``: the key id inside the ``NAME.minisig`` there (any other bytes for one
    that cannot be read: never overwritten)."""
    return signature_name(signed_name) if default_holder in (None, key_id) else signature_name(signed_name, key_id)

