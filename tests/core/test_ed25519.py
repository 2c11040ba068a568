"""core.ed25519, the stdlib verifier: RFC 8032's vectors, libsodium's answers on the ed25519-speccheck edge
cases, and agreement with `cryptography` (OpenSSL) on random keys, messages and corruptions."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st

from vllm_hotfix_guard.core import ed25519

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ed25519"

# RFC 8032 section 7.1, TEST 1-3: (secret key, public key, message, signature)
RFC8032 = [
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"),
    ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
     "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"),
]


def _public(private: Ed25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def test_rfc8032_vectors_verify_and_match_openssl():
    for secret, public, message, signature in RFC8032:
        private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(secret))
        assert _public(private).hex() == public  # the vector is the RFC's, as a second implementation says
        assert private.sign(bytes.fromhex(message)).hex() == signature
        assert ed25519.verify(bytes.fromhex(public), bytes.fromhex(message), bytes.fromhex(signature))
        assert not ed25519.verify(bytes.fromhex(public), bytes.fromhex(message) + b"\0", bytes.fromhex(signature))


def test_speccheck_edge_cases_answered_as_libsodium():
    """LibSodium's row of ed25519-speccheck's results: only case 3 verifies (small-order R and A, mixed
    order points, S >= L and non-canonical encodings are all refused)."""
    cases = json.loads((FIXTURES / "speccheck_cases.json").read_text())
    answers = "".join("V" if ed25519.verify(bytes.fromhex(c["pub_key"]), bytes.fromhex(c["message"]),
                                            bytes.fromhex(c["signature"])) else "X" for c in cases)
    assert answers == "XXXVXXXXXXXX"


def test_s_plus_l_is_refused_though_the_equation_holds():
    private = Ed25519PrivateKey.generate()
    message = b"hotfix.lock"
    signature = private.sign(message)
    s = int.from_bytes(signature[32:], "little")
    malleated = signature[:32] + (s + ed25519.L).to_bytes(32, "little")
    assert ed25519.verify(_public(private), message, signature)
    assert not ed25519.verify(_public(private), message, malleated)


def test_small_order_set_is_the_eight_torsion_points():
    """SMALL_ORDER_Y holds exactly the y of the points of order dividing 8 (and two non-canonical spellings)."""
    torsion_y = set()
    for y in range(2, 200):  # a point with a torsion component of order 8: [L]Q generates the torsion group
        base = ed25519.decode_point(y.to_bytes(32, "little"))
        if base is None:
            continue
        point = _affine_mul(base, ed25519.L)
        if _affine_mul(point, 4) != (0, 1):
            break
    current = (0, 1)
    for _ in range(8):
        torsion_y.add(current[1])
        current = _affine_add(current, point)
    assert current == (0, 1)
    assert len(torsion_y) == 5  # x = +-: 8 points, 5 distinct y
    assert torsion_y | {ed25519.P, ed25519.P + 1} == set(ed25519.SMALL_ORDER_Y)
    for y in torsion_y:
        for sign in (0, 1 << 255):
            key = (y | sign).to_bytes(32, "little")
            assert not ed25519.verify(key, b"m", bytes(64))


def test_non_canonical_public_key_and_wrong_sizes_are_refused():
    private = Ed25519PrivateKey.generate()
    public, signature = _public(private), private.sign(b"m")
    y = int.from_bytes(public, "little") & ((1 << 255) - 1)
    if y < 19:  # practically never: a y that has a second spelling y + p
        return
    assert not ed25519.verify(public[:31], b"m", signature)
    assert not ed25519.verify(public, b"m", signature[:63])
    assert not ed25519.verify((ed25519.P).to_bytes(32, "little"), b"m", signature)


@settings(max_examples=60, deadline=None)
@given(message=st.binary(max_size=300), flip=st.integers(min_value=0, max_value=64 * 8 - 1))
def test_agrees_with_openssl_on_random_keys_and_corruptions(message, flip):
    private = Ed25519PrivateKey.from_private_bytes(os.urandom(32))
    public, signature = _public(private), private.sign(message)
    assert ed25519.verify(public, message, signature)
    corrupted = bytearray(signature)
    corrupted[flip // 8] ^= 1 << (flip % 8)
    from cryptography.exceptions import InvalidSignature

    try:
        private.public_key().verify(bytes(corrupted), message)
        openssl = True
    except InvalidSignature:
        openssl = False
    assert ed25519.verify(public, message, bytes(corrupted)) == openssl == False  # noqa: E712


def _affine_add(a, b):
    p, d = ed25519.P, ed25519.D
    (x1, y1), (x2, y2) = a, b
    t = d * x1 * x2 * y1 * y2 % p
    return ((x1 * y2 + x2 * y1) * pow(1 + t, p - 2, p) % p, (y1 * y2 + x1 * x2) * pow(1 - t, p - 2, p) % p)


def _affine_mul(point, n):
    result, addend = (0, 1), point
    while n:
        if n & 1:
            result = _affine_add(result, addend)
        addend = _affine_add(addend, addend)
        n >>= 1
    return result
