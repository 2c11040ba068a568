"""Ed25519 signature verification (RFC 8032, section 5.1.7) in pure Python on the standard library.

The guard verifies signed locks inside vLLM processes, where nothing but the stdlib is allowed, so this is
the one verifier every caller uses (`hotfix verify --lock`, `hotfix trust`, the catalog check and the
guard); signing is `cryptography`'s (core/signing.py, the CLI only). Strict in the way libsodium's
``crypto_sign_verify_detached`` is, which is what `minisign -V` runs:

- S must be canonical (S < L), else no signature (RFC 8032 5.1.7 step 1, no malleable S + L);
- the public key's encoding must be canonical (y < p) and the point must decode;
- the public key and R must not be one of the eight small-order points, in any encoding (libsodium's
  block list: y in {0, 1, p - 1, the two y of the order-8 points} and the non-canonical p, p + 1);
- the check is cofactorless and by bytes: encode([S]B - [k]A) must equal R's 32 bytes, so a
  non-canonical R never verifies.

Speed (docs/design.md, the trust section): the verifying process pays about 1 ms a signature. One
double-scalar multiplication, [S]B + [k](-A), Straus's interleaving of two signed sliding windows:
width 5 for A (8 odd multiples computed per signature), width 7 for the fixed base point B (32 odd
multiples, computed once per process, ~0.2 ms). Points are extended twisted Edwards coordinates
(X:Y:Z:T), x = X/Z, y = Y/Z, xy = T/Z (Hisil, Wong, Carter, Dawson 2008: add-2008-hwcd-3 and
dbl-2008-hwcd for a = -1); table entries are kept as (Y-X, Y+X, 2dT, 2Z). Variable time: it only
ever handles public data (keys, signatures, messages).
"""

from __future__ import annotations

P = 2 ** 255 - 19
L = 2 ** 252 + 27742317777372353535851937790883648493  # the order of the base point
D = 37095705934669439343138083508754565189542113879843219016388785533085940283555  # -121665/121666 mod P
D2 = 2 * D % P
SQRT_M1 = 19681161376707505956807079304988542015446066515923890162744021073123829784752  # 2^((P-1)/4) mod P
_BASE_Y = 46316835694926478169428394003475163141307993866256225615783033603165251855960  # 4/5 mod P
_BASE_X = 15112221349535400772501151409588531511454012693041857206046113283949847762202  # the even root
# y of the order-8 points (the other one is P minus it); with 0, 1 and P - 1 they are the small-order y
_ORDER8_Y = 2707385501144840649318225287225658788936804267575313519463743609750303402022
SMALL_ORDER_Y = frozenset((0, 1, P - 1, _ORDER8_Y, P - _ORDER8_Y, P, P + 1))  # + non-canonical encodings
_Y_MASK = (1 << 255) - 1

_A_WIDTH = 5
_B_WIDTH = 7
_base_table: list | None = None


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """True when ``signature`` (64 bytes: R, S) is ``public_key``'s (32 bytes) Ed25519 signature of
    ``message``; False for anything else (wrong sizes included). Never raises for bad input."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    r_bytes = bytes(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if s >= L:
        return False
    if int.from_bytes(r_bytes, "little") & _Y_MASK in SMALL_ORDER_Y:
        return False
    a_int = int.from_bytes(public_key, "little")
    a_y = a_int & _Y_MASK
    if a_y >= P or a_y in SMALL_ORDER_Y:
        return False
    point = decode_point(bytes(public_key))
    if point is None:
        return False
    import hashlib  # here: importing this module costs nothing until a signature is checked

    k = int.from_bytes(hashlib.sha512(r_bytes + bytes(public_key) + bytes(message)).digest(), "little") % L
    x, y = point
    minus_a = ((P - x) % P, y, 1, (P - x) * y % P)
    return encode_point(*_double_scalar_mult(s, k, minus_a)) == r_bytes


def decode_point(data: bytes) -> tuple[int, int] | None:
    """The affine point (x, y) a 32-byte encoding names (RFC 8032 5.1.3), None when it names none:
    y >= p, no square root, or x = 0 with the sign bit set."""
    value = int.from_bytes(data, "little")
    y = value & _Y_MASK
    sign = value >> 255
    if y >= P:
        return None
    yy = y * y % P
    u = (yy - 1) % P
    v = (D * yy + 1) % P
    v3 = v * v % P * v % P
    x = u * v3 % P * pow(u * v3 % P * v3 % P * v % P, (P - 5) // 8, P) % P
    vxx = v * x % P * x % P
    if vxx != u:
        if vxx != (P - u) % P:
            return None
        x = x * SQRT_M1 % P
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = P - x
    return x, y


def encode_point(x_: int, y_: int, z: int, _t: int = 0) -> bytes:
    """The 32-byte encoding of the point (X:Y:Z:T): y with the low bit of x on top."""
    inverse = pow(z, P - 2, P)
    x = x_ * inverse % P
    y = y_ * inverse % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def _cached(point: tuple) -> tuple:
    """(Y-X, Y+X, 2dT, 2Z): an addend prepared once for many additions."""
    x, y, z, t = point
    return ((y - x) % P, (y + x) % P, D2 * t % P, 2 * z % P)


def _add(point: tuple, cached: tuple) -> tuple:
    """point + cached (add-2008-hwcd-3, a = -1), in extended coordinates."""
    x1, y1, z1, t1 = point
    ym, yp, t2d, z2 = cached
    a = (y1 - x1) * ym % P
    b = (y1 + x1) * yp % P
    c = t1 * t2d % P
    d = z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _double(point: tuple) -> tuple:
    """2 * point (dbl-2008-hwcd, a = -1); T is not read."""
    x1, y1, z1, _ = point
    a = x1 * x1 % P
    b = y1 * y1 % P
    c = 2 * z1 * z1 % P
    h = a + b
    e = h - (x1 + y1) * (x1 + y1) % P
    g = a - b
    f = c + g
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _odd_multiples(point: tuple, width: int) -> list:
    """[P, 3P, 5P, ..., (2^(width-1) - 1)P] as cached addends."""
    twice = _cached(_double(point))
    multiples = [point]
    for _ in range((1 << (width - 2)) - 1):
        multiples.append(_add(multiples[-1], twice))
    return [_cached(m) for m in multiples]


def _negated(cached: tuple) -> tuple:
    ym, yp, t2d, z2 = cached
    return (yp, ym, (P - t2d) % P, z2)


def _naf(scalar: int, width: int) -> list:
    """The width-w non-adjacent form of ``scalar``, lowest digit first: odd digits in
    (-2^(w-1), 2^(w-1)), each followed by at least w-1 zeros."""
    digits = []
    window = 1 << width
    half = window >> 1
    while scalar:
        if scalar & 1:
            digit = scalar & (window - 1)
            if digit >= half:
                digit -= window
            scalar -= digit
        else:
            digit = 0
        digits.append(digit)
        scalar >>= 1
    return digits


def _base_multiples() -> list:
    global _base_table
    if _base_table is None:
        base = (_BASE_X, _BASE_Y, 1, _BASE_X * _BASE_Y % P)
        table = _odd_multiples(base, _B_WIDTH)
        _base_table = [(c, _negated(c)) for c in table]
    return _base_table


def _double_scalar_mult(s: int, k: int, point: tuple) -> tuple:
    """[s]B + [k]point (Straus: one run of doublings, both windows added in as their digits come). The
    doubling and the addition are written out here (no call, no tuple per step; T computed only when an
    addition follows): half the time of calling ``_double`` / ``_add``, which stay as the reference
    (tests/core/test_ed25519.py checks both give the same points)."""
    base = _base_multiples()
    mine = [(c, _negated(c)) for c in _odd_multiples(point, _A_WIDTH)]
    s_digits = _naf(s, _B_WIDTH)
    k_digits = _naf(k, _A_WIDTH)
    top = max(len(s_digits), len(k_digits))
    s_digits += [0] * (top - len(s_digits))
    k_digits += [0] * (top - len(k_digits))
    p = P
    x, y, z, t = 0, 1, 1, 0  # the neutral element
    started = False
    for i in range(top - 1, -1, -1):
        sd = s_digits[i]
        kd = k_digits[i]
        if started:
            a = x * x % p
            b = y * y % p
            c = 2 * z * z % p
            h = a + b
            e = h - (x + y) * (x + y) % p
            g = a - b
            f = c + g
            x, y, z = e * f % p, g * h % p, f * g % p
            if sd or kd:
                t = e * h % p
        if sd:
            ym, yp, t2d, z2 = base[sd >> 1][0] if sd > 0 else base[(-sd) >> 1][1]
            a = (y - x) * ym % p
            b = (y + x) * yp % p
            c = t * t2d % p
            d = z * z2 % p
            e, f, g, h = b - a, d - c, d + c, b + a
            x, y, z, t = e * f % p, g * h % p, f * g % p, e * h % p
            started = True
        if kd:
            ym, yp, t2d, z2 = mine[kd >> 1][0] if kd > 0 else mine[(-kd) >> 1][1]
            a = (y - x) * ym % p
            b = (y + x) * yp % p
            c = t * t2d % p
            d = z * z2 % p
            e, f, g, h = b - a, d - c, d + c, b + a
            x, y, z, t = e * f % p, g * h % p, f * g % p, e * h % p
            started = True
    return x, y, z, t


def _double_scalar_mult_reference(s: int, k: int, point: tuple) -> tuple:
    """The same with ``_double`` and ``_add`` (tests only)."""
    base = _base_multiples()
    mine = [(c, _negated(c)) for c in _odd_multiples(point, _A_WIDTH)]
    acc = (0, 1, 1, 0)
    s_digits, k_digits = _naf(s, _B_WIDTH), _naf(k, _A_WIDTH)
    for i in range(max(len(s_digits), len(k_digits)) - 1, -1, -1):
        acc = _double(acc)
        for digits, table in ((s_digits, base), (k_digits, mine)):
            digit = digits[i] if i < len(digits) else 0
            if digit:
                acc = _add(acc, table[digit >> 1][0] if digit > 0 else table[(-digit) >> 1][1])
    return acc
