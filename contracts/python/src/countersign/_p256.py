"""ECDSA P-256 signature verification (FIPS 186-4, section 6.4.2; SEC 1, section 4.1.4) in pure Python.

Python's standard library has no elliptic curves, so passkey signatures (ES256) are verified with this
module: the signature is strict ASN.1 DER (as WebAuthn and Go's ``ecdsa.VerifyASN1`` have it), r and s in
[1, n−1], the public key a point on the curve, and R = u1·G + u2·Q computed in Jacobian coordinates with
Shamir's trick; the signature holds iff R.x mod n = r. It only verifies, so it handles no secrets and needs
no constant-time arithmetic.
"""

from __future__ import annotations

# The curve y² = x³ − 3x + b over GF(p), its base point G and order n (FIPS 186-4, D.1.2.3).
P = 2**256 - 2**224 + 2**192 + 2**96 - 1
B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
GX = 0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296
GY = 0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5

_Jacobian = tuple[int, int, int]  # X, Y, Z with x = X/Z², y = Y/Z³; Z = 0 is the point at infinity
_INFINITY: _Jacobian = (1, 1, 0)


def on_curve(x: int, y: int) -> bool:
    """Report whether (x, y) is a point of P-256 (the point at infinity has no affine form)."""
    return 0 <= x < P and 0 <= y < P and (y * y - (x * x * x - 3 * x + B)) % P == 0


def _double(p: _Jacobian) -> _Jacobian:
    # dbl-2001-b (a = −3).
    x1, y1, z1 = p
    if z1 == 0 or y1 == 0:
        return _INFINITY
    delta = z1 * z1 % P
    gamma = y1 * y1 % P
    beta = x1 * gamma % P
    alpha = 3 * (x1 - delta) * (x1 + delta) % P
    x3 = (alpha * alpha - 8 * beta) % P
    z3 = ((y1 + z1) ** 2 - gamma - delta) % P
    y3 = (alpha * (4 * beta - x3) - 8 * gamma * gamma) % P
    return (x3, y3, z3)


def _add(p: _Jacobian, q: _Jacobian) -> _Jacobian:
    # add-1998-cmo-2, with the doubling and inverse cases.
    x1, y1, z1 = p
    x2, y2, z2 = q
    if z1 == 0:
        return q
    if z2 == 0:
        return p
    z1z1, z2z2 = z1 * z1 % P, z2 * z2 % P
    u1, u2 = x1 * z2z2 % P, x2 * z1z1 % P
    s1, s2 = y1 * z2 * z2z2 % P, y2 * z1 * z1z1 % P
    if u1 == u2:
        return _double(p) if s1 == s2 else _INFINITY
    h, r = (u2 - u1) % P, (s2 - s1) % P
    h2 = h * h % P
    h3 = h * h2 % P
    u1h2 = u1 * h2 % P
    x3 = (r * r - h3 - 2 * u1h2) % P
    y3 = (r * (u1h2 - x3) - s1 * h3) % P
    z3 = h * z1 * z2 % P
    return (x3, y3, z3)


def _shamir(u1: int, g: _Jacobian, u2: int, q: _Jacobian) -> _Jacobian:
    """u1·g + u2·q with one pass of doublings."""
    gq = _add(g, q)
    acc = _INFINITY
    for i in range(max(u1.bit_length(), u2.bit_length()) - 1, -1, -1):
        acc = _double(acc)
        b1, b2 = (u1 >> i) & 1, (u2 >> i) & 1
        if b1 and b2:
            acc = _add(acc, gq)
        elif b1:
            acc = _add(acc, g)
        elif b2:
            acc = _add(acc, q)
    return acc


def parse_der_signature(der: bytes) -> tuple[int, int] | None:
    """(r, s) of a strict DER ``SEQUENCE { INTEGER r, INTEGER s }``, or None when it is not one or r or s
    is not in [1, n−1]."""
    # A valid P-256 signature is at most 72 bytes: its lengths are all of the short form.
    if len(der) < 8 or der[0] != 0x30 or der[1] != len(der) - 2:
        return None
    out: list[int] = []
    off = 2
    for _ in range(2):
        if off + 2 > len(der) or der[off] != 0x02:
            return None
        n = der[off + 1]
        if n == 0 or n >= 0x80 or off + 2 + n > len(der):
            return None
        body = der[off + 2 : off + 2 + n]
        if body[0] & 0x80:
            return None  # negative
        if body[0] == 0 and (n == 1 or not body[1] & 0x80):
            return None  # zero, or a needless leading zero
        v = int.from_bytes(body, "big")
        if not 1 <= v < N:
            return None
        out.append(v)
        off += 2 + n
    if off != len(der):
        return None
    return out[0], out[1]


def verify(x: int, y: int, digest: bytes, signature: bytes) -> bool:
    """Report whether ``signature`` (ASN.1 DER) is a valid ECDSA signature of the SHA-256 ``digest`` by
    the P-256 public key (x, y)."""
    if len(digest) != 32 or not on_curve(x, y):
        return False
    rs = parse_der_signature(signature)
    if rs is None:
        return False
    r, s = rs
    e = int.from_bytes(digest, "big")  # the hash is as long as n: no truncation
    w = pow(s, -1, N)
    pt = _shamir(e * w % N, (GX, GY, 1), r * w % N, (x, y, 1))
    xr, _, z = pt
    if z == 0:
        return False
    return xr * pow(z * z % P, -1, P) % P % N == r
