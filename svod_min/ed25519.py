"""Ed25519 signatures (RFC 8032, section 5.1) in pure Python: keys from a 32-byte seed, sign, strict verify.

A leaf module (stdlib and :mod:`svod_min.error` only), so a bare interpreter running the zipapp checks a
bundle's signature without any package. Points are kept in extended twisted Edwards coordinates
(X, Y, Z, T with x = X/Z, y = Y/Z, xy = T/Z) so that adding and doubling need no inversion; a
verification computes ``[S]B - [k]A`` in one pass over both scalars (Straus' trick with width-5
non-adjacent forms) and compares its encoding with R's bytes.

Verification is strict, as libsodium's: S must be below the group order L (no malleable signatures),
the public key must be a canonical encoding of a point on the curve and not of small order, and R must
be the canonical encoding of the computed point, not of small order. Any failure raises
:class:`~svod_min.error.SignatureError`; :func:`verify` never returns False.
"""

from __future__ import annotations

import hashlib
from typing import List, Optional, Tuple

from .error import SignatureError

P = 2**255 - 19
#: The order of the prime-order subgroup the base point generates.
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
_D2 = 2 * D % P
SQRT_M1 = pow(2, (P - 1) // 4, P)

SEED_BYTES = 32
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
_WINDOW = 5  # width of the non-adjacent forms: 8 odd multiples per point, about one addition per 6 bits

Point = Tuple[int, int, int, int]
IDENTITY: Point = (0, 1, 1, 0)


def _add(p: Point, q: Point) -> Point:
    """p + q (RFC 8032 5.1.4: the unified addition for a = -1, valid for every pair of points)."""
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = t1 * _D2 * t2 % P
    d = z1 * 2 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % P, g * h % P, f * g % P, e * h % P


def _double(p: Point) -> Point:
    """2p (RFC 8032 5.1.4's doubling, one multiplication cheaper than adding p to itself)."""
    x1, y1, z1, _ = p
    a = x1 * x1 % P
    b = y1 * y1 % P
    c = 2 * z1 * z1 % P
    h = a + b
    e = h - (x1 + y1) * (x1 + y1)
    g = a - b
    f = c + g
    return e * f % P, g * h % P, f * g % P, e * h % P


def _negate(p: Point) -> Point:
    x, y, z, t = p
    return (P - x) % P, y, z, (P - t) % P


def _is_identity(p: Point) -> bool:
    x, y, z, _ = p
    return x % P == 0 and (y - z) % P == 0


def encode_point(p: Point) -> bytes:
    """The 32-byte encoding: y little-endian, the top bit holding x's low bit (RFC 8032 5.1.2)."""
    x, y, z, _ = p
    zi = pow(z, P - 2, P)
    x, y = x * zi % P, y * zi % P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def decode_point(data: bytes) -> Point:
    """The point ``data`` encodes (RFC 8032 5.1.3); SignatureError for a non-canonical y (y >= p), no square
    root, or the sign bit set on x = 0 (-0 is not a canonical encoding)."""
    if len(data) != 32:
        raise SignatureError("a point is 32 bytes, not %d" % len(data))
    n = int.from_bytes(data, "little")
    sign, y = n >> 255, n & ((1 << 255) - 1)
    if y >= P:
        raise SignatureError("a point's y is not reduced modulo p (a non-canonical encoding)")
    u = (y * y - 1) % P
    v = (D * y * y + 1) % P
    # x = u/v's square root in one exponentiation: (u v^3) (u v^7)^((p-5)/8)
    x = u * pow(v, 3, P) * pow(u * pow(v, 7, P), (P - 5) // 8, P) % P
    vx2 = v * x * x % P
    if vx2 == (P - u) % P:
        x = x * SQRT_M1 % P
    elif vx2 != u:
        raise SignatureError("the bytes do not encode a point of the curve")
    if x == 0 and sign:
        raise SignatureError("a point with x = 0 and its sign bit set (a non-canonical encoding)")
    if x & 1 != sign:
        x = P - x
    return x, y, 1, x * y % P


def _base_point() -> Point:
    y = 4 * pow(5, P - 2, P) % P
    x, y, z, t = decode_point(y.to_bytes(32, "little"))  # sign bit 0: the even x, as RFC 8032 defines B
    return x, y, z, t


B = _base_point()


def _odd_multiples(p: Point) -> List[Point]:
    """p, 3p, 5p, ... up to (2^(w-1) - 1)p: the table a width-w non-adjacent form indexes."""
    twice = _double(p)
    out = [p]
    for _ in range((1 << (_WINDOW - 2)) - 1):
        out.append(_add(out[-1], twice))
    return out


_B_TABLE: Optional[List[Point]] = None


def _base_table() -> List[Point]:
    global _B_TABLE
    if _B_TABLE is None:
        _B_TABLE = _odd_multiples(B)
    return _B_TABLE


def _naf(k: int) -> List[int]:
    """k's width-w non-adjacent form, least significant digit first: odd digits in (-2^(w-1), 2^(w-1)),
    each followed by at least w - 1 zeros."""
    digits = []
    full, half = 1 << _WINDOW, 1 << (_WINDOW - 1)
    while k:
        if k & 1:
            d = k & (full - 1)
            if d >= half:
                d -= full
            k -= d
        else:
            d = 0
        digits.append(d)
        k >>= 1
    return digits


def _combined(terms: List[Tuple[int, List[Point]]]) -> Point:
    """The sum of k * p over (k, odd multiples of p), all scalars walked together (Straus): one doubling per
    bit for all of them."""
    nafs = [(_naf(k), table) for k, table in terms]
    acc = IDENTITY
    for i in range(max((len(n) for n, _ in nafs), default=0) - 1, -1, -1):
        acc = _double(acc)
        for naf, table in nafs:
            d = naf[i] if i < len(naf) else 0
            if d > 0:
                acc = _add(acc, table[d >> 1])
            elif d < 0:
                acc = _add(acc, _negate(table[(-d) >> 1]))
    return acc


def base_multiple(k: int) -> Point:
    """[k]B."""
    return _combined([(k % L, _base_table())])


def _sha512_int(*parts: bytes) -> int:
    h = hashlib.sha512()
    for part in parts:
        h.update(part)
    return int.from_bytes(h.digest(), "little")


def _expanded(seed: bytes) -> Tuple[int, bytes]:
    """The secret scalar (clamped, RFC 8032 5.1.5) and the nonce prefix a seed expands to."""
    if len(seed) != SEED_BYTES:
        raise SignatureError("an Ed25519 private key (seed) is %d bytes, not %d" % (SEED_BYTES, len(seed)))
    h = hashlib.sha512(seed).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8  # clear the three low bits and bit 255
    a |= 1 << 254
    return a, h[32:]


def public_key(seed: bytes) -> bytes:
    """The 32-byte public key of a 32-byte seed (the private key)."""
    a, _ = _expanded(seed)
    return encode_point(base_multiple(a))


def sign(seed: bytes, message: bytes) -> bytes:
    """The 64-byte signature R || S of ``message`` (RFC 8032 5.1.6; deterministic: no randomness)."""
    a, prefix = _expanded(seed)
    pub = encode_point(base_multiple(a))
    r = _sha512_int(prefix, message) % L
    big_r = encode_point(base_multiple(r))
    k = _sha512_int(big_r, pub, message) % L
    s = (r + k * a) % L
    return big_r + s.to_bytes(32, "little")


def _has_small_order(p: Point) -> bool:
    return _is_identity(_double(_double(_double(p))))


def checked_public_key(public: bytes) -> Point:
    """The point a public key encodes; SignatureError for a non-canonical encoding, a point off the curve or
    one of small order (a key any signature could match with a small-order R)."""
    if len(public) != PUBLIC_KEY_BYTES:
        raise SignatureError("an Ed25519 public key is %d bytes, not %d" % (PUBLIC_KEY_BYTES, len(public)))
    try:
        a = decode_point(public)
    except SignatureError as exc:
        raise SignatureError("the public key: %s" % exc) from None
    if _has_small_order(a):
        raise SignatureError("the public key is a point of small order")
    return a


def verify(public: bytes, message: bytes, signature: bytes) -> None:
    """Return when ``signature`` is ``public``'s valid signature of ``message``; SignatureError naming what
    failed otherwise (RFC 8032 5.1.7, cofactorless, with the strict checks of this module's docstring)."""
    if len(signature) != SIGNATURE_BYTES:
        raise SignatureError("an Ed25519 signature is %d bytes, not %d" % (SIGNATURE_BYTES, len(signature)))
    big_r, s = signature[:32], int.from_bytes(signature[32:], "little")
    if s >= L:
        raise SignatureError("the signature's S is not below the group order (a malleated signature)")
    a = checked_public_key(public)
    try:
        r_point = decode_point(big_r)
    except SignatureError as exc:
        raise SignatureError("the signature's R: %s" % exc) from None
    if _has_small_order(r_point):
        raise SignatureError("the signature's R is a point of small order")
    k = _sha512_int(big_r, public, message) % L
    check = _combined([(s, _base_table()), (k, _odd_multiples(_negate(a)))])
    if encode_point(check) != big_r:
        raise SignatureError("the signature does not match the message and key")


__all__ = [
    "B",
    "D",
    "L",
    "P",
    "PUBLIC_KEY_BYTES",
    "SEED_BYTES",
    "SIGNATURE_BYTES",
    "base_multiple",
    "checked_public_key",
    "decode_point",
    "encode_point",
    "public_key",
    "sign",
    "verify",
]
