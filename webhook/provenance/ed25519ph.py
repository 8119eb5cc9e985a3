"""Ed25519ph signature verification (RFC 8032 §5.1, HashEdDSA with an empty context), by libsodium.

Why this exists: cosign signs with Ed25519 keys in the pre-hashed variant (sigstore's
`WithED25519ph()` is cosign's default load option, for `.sig` payloads and DSSE bundles alike), and the
`cryptography` package only implements pure Ed25519. libsodium's `crypto_sign_ed25519ph_*` (through
PyNaCl's bindings) does the curve arithmetic: no hand-written elliptic-curve code in a security path,
and a verification costs microseconds, so it can stay on the event loop.
"""

from __future__ import annotations

from nacl import bindings
from nacl.exceptions import BadSignatureError, CryptoError

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64


def verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Whether `signature` is a valid Ed25519ph signature of `message` by `public_key`."""
    if len(public_key) != PUBLIC_KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    state = bindings.crypto_sign_ed25519ph_state()
    bindings.crypto_sign_ed25519ph_update(state, message)
    try:
        return bool(bindings.crypto_sign_ed25519ph_final_verify(state, signature, public_key))
    except (BadSignatureError, CryptoError, ValueError):
        return False
