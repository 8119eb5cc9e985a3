"""Ed25519ph signature verification (RFC 8032 §5.1, HashEdDSA with an empty context). Pure.

Why this exists: cosign signs with Ed25519 keys in the pre-hashed variant (sigstore's
`WithED25519ph()` is cosign's default load option, for `.sig` payloads and DSSE bundles alike), and the
`cryptography` package only implements pure Ed25519. This is the RFC's verification procedure, no more:
strict decoding (non-canonical y and S >= L are refused), cofactored check [8][S]B = [8]R + [8][k]A.
It only ever handles public data (keys, signatures, payloads), so constant time does not matter here.
"""

from __future__ import annotations

import hashlib

_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)
_DOM2_PH = b"SigEd25519 no Ed25519 collisions" + bytes([1, 0])  # phflag 1, empty context

# Points in extended homogeneous coordinates (X, Y, Z, T): x = X/Z, y = Y/Z, x*y = T/Z.
_Point = tuple[int, int, int, int]
_IDENTITY: _Point = (0, 1, 1, 0)


def _add(p: _Point, q: _Point) -> _Point:
    # RFC 8032 §5.1.4; complete, so it also doubles.
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % _P
    b = (y1 + x1) * (y2 + x2) % _P
    c = t1 * 2 * _D * t2 % _P
    d = z1 * 2 * z2 % _P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % _P, g * h % _P, f * g % _P, e * h % _P)


def _multiply(scalar: int, point: _Point) -> _Point:
    result = _IDENTITY
    while scalar > 0:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _equal(p: _Point, q: _Point) -> bool:
    return (p[0] * q[2] - q[0] * p[2]) % _P == 0 and (p[1] * q[2] - q[1] * p[2]) % _P == 0


def _recover_x(y: int, sign: int) -> int | None:
    if y >= _P:
        return None
    u = (y * y - 1) % _P
    v = (_D * y * y + 1) % _P
    x = u * pow(v, 3, _P) * pow(u * pow(v, 7, _P), (_P - 5) // 8, _P) % _P
    if (v * x * x - u) % _P != 0:
        if (v * x * x + u) % _P != 0:
            return None
        x = x * _SQRT_M1 % _P
    if x == 0 and sign:
        return None
    if x & 1 != sign:
        x = _P - x
    return x


def _decode_point(encoded: bytes) -> _Point | None:
    if len(encoded) != 32:
        return None
    value = int.from_bytes(encoded, "little")
    y = value & ((1 << 255) - 1)
    x = _recover_x(y, value >> 255)
    if x is None:
        return None
    return (x, y, 1, x * y % _P)


_BASE_Y = 4 * pow(5, _P - 2, _P) % _P
_BASE_X = _recover_x(_BASE_Y, 0)
assert _BASE_X is not None
_BASE: _Point = (_BASE_X, _BASE_Y, 1, _BASE_X * _BASE_Y % _P)


def verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Whether `signature` is an Ed25519ph signature of `message` (empty context) by `public_key`
    (the 32-byte raw key)."""
    if len(signature) != 64 or len(public_key) != 32:
        return False
    r = _decode_point(signature[:32])
    a = _decode_point(public_key)
    s = int.from_bytes(signature[32:], "little")
    if r is None or a is None or s >= _L:
        return False
    prehash = hashlib.sha512(message).digest()
    k = int.from_bytes(hashlib.sha512(_DOM2_PH + signature[:32] + public_key + prehash).digest(), "little")
    left = _multiply(8, _multiply(s, _BASE))
    right = _multiply(8, _add(r, _multiply(k % _L, a)))
    return _equal(left, right)
