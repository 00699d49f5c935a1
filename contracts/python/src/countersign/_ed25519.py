"""Ed25519 signature verification (RFC 8032, section 5.1.7) in pure Python.

Python's standard library has no Ed25519, so receipts are verified with this
module: points in extended homogeneous coordinates (RFC 8032, section
5.1.4), decoding as in section 5.1.3, and the cofactorless check
[S]B = R + [k]A, comparing encodings as Go's crypto/ed25519 does. It only
verifies, so it handles no secrets and needs no constant-time arithmetic.
"""

from __future__ import annotations

import hashlib

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = (-121665 * pow(121666, _P - 2, _P)) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)

_Point = tuple[int, int, int, int]  # X, Y, Z, T with x = X/Z, y = Y/Z, x*y = T/Z


def _add(p: _Point, q: _Point) -> _Point:
    # RFC 8032 section 5.1.4, addition in extended coordinates (a = -1).
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % _P
    b = (y1 + x1) * (y2 + x2) % _P
    c = 2 * t1 * t2 * _D % _P
    d = 2 * z1 * z2 % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _mul(s: int, p: _Point) -> _Point:
    q: _Point = (0, 1, 1, 0)  # the neutral element
    while s > 0:
        if s & 1:
            q = _add(q, p)
        p = _add(p, p)
        s >>= 1
    return q


def _encode(p: _Point) -> bytes:
    x, y, z, _ = p
    zi = pow(z, _P - 2, _P)
    x, y = x * zi % _P, y * zi % _P
    return (y | ((x & 1) << 255)).to_bytes(32, "little")


def _decode(b: bytes) -> _Point | None:
    # RFC 8032 section 5.1.3.
    if len(b) != 32:
        return None
    n = int.from_bytes(b, "little")
    sign = n >> 255
    y = n & ((1 << 255) - 1)
    if y >= _P:
        return None
    u = (y * y - 1) % _P
    v = (_D * y * y + 1) % _P
    x = u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P) % _P
    vx2 = v * x * x % _P
    if vx2 == (-u) % _P:
        x = x * _SQRT_M1 % _P
    elif vx2 != u:
        return None
    if x == 0 and sign == 1:
        return None
    if x & 1 != sign:
        x = _P - x
    return (x, y, 1, x * y % _P)


_BY = 4 * pow(5, _P - 2, _P) % _P
_B = _decode(_BY.to_bytes(32, "little"))
assert _B is not None


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Report whether signature is a valid Ed25519 signature of message by public_key."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a = _decode(public_key)
    if a is None:
        return False
    r_bytes, s = signature[:32], int.from_bytes(signature[32:], "little")
    if s >= _L:
        return False
    k = int.from_bytes(hashlib.sha512(r_bytes + public_key + message).digest(), "little") % _L
    assert _B is not None
    # [S]B - [k]A must encode as R.
    minus_a = ((_P - a[0]) % _P, a[1], a[2], (_P - a[3]) % _P)
    return _encode(_add(_mul(s, _B), _mul(k, minus_a))) == r_bytes
