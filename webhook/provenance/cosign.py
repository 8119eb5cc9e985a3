"""cosign key-based signatures, verified offline with `cryptography`. Pure: bytes in, key names out.

Two formats, both as current cosign writes them with `cosign sign --key`:

- **`.sig` tag** (cosign v2 and earlier): the tag `sha256-<hex>.sig` holds a manifest whose layers are
  simple-signing payloads (`application/vnd.dev.cosign.simplesigning.v1+json`), each with its base64
  signature over the exact payload bytes in the annotation `dev.cosignproject.cosign/signature`. The
  payload's `critical.image.docker-manifest-digest` must be the image's digest.
- **Sigstore bundle** (cosign v3's default): a referrer manifest (artifactType
  `application/vnd.dev.sigstore.bundle.v0.3+json`, subject = the image) whose layer is the bundle. cosign
  v3 writes a DSSE envelope: an in-toto Statement v1 with predicateType
  `https://sigstore.dev/cosign/sign/v1` whose subject digest is the image's, signed over the DSSE
  pre-authentication encoding. A bundle with a `messageSignature` (a signature over the image manifest,
  whose sha256 is the image digest) is verified too.

Key types: ECDSA (P-256 with SHA-256, P-384 with SHA-384, P-521 with SHA-512), RSA (PKCS#1 v1.5 or PSS,
SHA-256) and Ed25519. cosign signs with Ed25519 keys in the pre-hashed variant (Ed25519ph), which
`cryptography` lacks; webhook.provenance.ed25519ph verifies it with libsodium.

Keyless signatures (a Fulcio certificate instead of a key, a Rekor entry as proof of time) cannot be
verified offline without the Sigstore trust root and an identity policy: such material verifies nothing. Transparency-log entries in bundles are not
required and not checked: trust comes from the tenant's keys alone.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from pydantic import ValidationError

from labgate.core.errors import LabgateError
from webhook.provenance import ed25519ph
from webhook.provenance.oci import Descriptor

log = logging.getLogger(__name__)

SIMPLE_SIGNING_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
CERTIFICATE_ANNOTATION = "dev.sigstore.cosign/certificate"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
COSIGN_SIGN_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
_IN_TOTO_STATEMENTS = frozenset({"https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1"})
_BUNDLE_MEDIA_TYPE = re.compile(r"application/vnd\.dev\.sigstore\.bundle(?:\.v0\.[0-9]+)?\+json(?:;.*)?")
_MESSAGE_DIGEST_ALGORITHMS = {"SHA2_256": "sha256", "SHA2_384": "sha384", "SHA2_512": "sha512"}

PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey


class InvalidKeyError(LabgateError, ValueError):
    """A trusted key that is not a PEM public key of a supported type."""


@dataclass(frozen=True)
class TrustedKey:
    """A public key a tenant trusts, by the name the tenant gave it."""

    name: str
    key: PublicKey
    fingerprint: str  # hex sha256 of the DER SubjectPublicKeyInfo

    @property
    def hint(self) -> str:
        """The `publicKey.hint` cosign writes into bundles: base64 of the same sha256."""
        return base64.b64encode(bytes.fromhex(self.fingerprint)).decode()


@lru_cache(maxsize=256)
def load_trusted_key(name: str, pem: str) -> TrustedKey:
    """A TrustedKey from a PEM public key (cosign.pub); InvalidKeyError for anything else."""
    try:
        key = serialization.load_pem_public_key(pem.encode())
    except (ValueError, UnsupportedAlgorithm) as err:
        raise InvalidKeyError(f"signing key {name!r} is not a PEM public key") from err
    if not isinstance(key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey):
        raise InvalidKeyError(f"signing key {name!r} is a {type(key).__name__}; use ECDSA, RSA or Ed25519")
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return TrustedKey(name=name, key=key, fingerprint=hashlib.sha256(der).hexdigest())


@dataclass(frozen=True)
class SimpleSigning:
    """One layer of a `.sig` manifest: the payload bytes and the signature from its annotation."""

    payload: bytes
    signature: str  # base64
    certificate: str | None = None  # keyless: the PEM certificate annotation


@dataclass(frozen=True)
class Bundle:
    """One Sigstore bundle, as stored in a referrer's layer."""

    content: bytes


Signature = SimpleSigning | Bundle


# --- which layers of which manifests hold signatures ---


def is_bundle_media_type(media_type: str | None) -> bool:
    """Whether a media type or artifactType is a Sigstore bundle (v0.1 to v0.3)."""
    return bool(media_type) and _BUNDLE_MEDIA_TYPE.fullmatch(media_type or "") is not None


def simple_signing_layers(manifest: Mapping[str, Any]) -> list[Descriptor]:
    """The layers of a `.sig` manifest that carry a simple-signing payload and its signature."""
    return [
        layer
        for layer in _layers(manifest)
        if layer.media_type == SIMPLE_SIGNING_MEDIA_TYPE and SIGNATURE_ANNOTATION in layer.annotations
    ]


def bundle_layers(manifest: Mapping[str, Any]) -> list[Descriptor]:
    """The layers of a referrer manifest that hold a Sigstore bundle."""
    return [layer for layer in _layers(manifest) if is_bundle_media_type(layer.media_type)]


def _layers(manifest: Mapping[str, Any]) -> list[Descriptor]:
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        return []
    found = []
    for layer in layers:
        try:
            found.append(Descriptor.model_validate(layer))
        except ValidationError:
            continue
    return found


def signature_tag(digest: str) -> str:
    """cosign's signature tag for an image digest: `sha256:abc` -> `sha256-abc.sig`."""
    return digest.replace(":", "-") + ".sig"


# --- verification ---


def _b64decode(text: str) -> bytes:
    """Standard or URL-safe base64, padded or not (DSSE allows either)."""
    padded = text + "=" * (-len(text) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except binascii.Error:
        return base64.urlsafe_b64decode(padded)


_CURVE_HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "secp256r1": hashes.SHA256,
    "secp384r1": hashes.SHA384,
    "secp521r1": hashes.SHA512,
}


def _verify_ed25519(key: ed25519.Ed25519PublicKey, signature: bytes, message: bytes) -> bool:
    try:
        key.verify(signature, message)
        return True
    except InvalidSignature:
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return ed25519ph.verify(raw, signature, message)


def _verify_ecdsa(key: ec.EllipticCurvePublicKey, signature: bytes, message: bytes) -> bool:
    curve_hash = _CURVE_HASHES.get(key.curve.name, hashes.SHA256)
    algorithms: list[hashes.HashAlgorithm] = [curve_hash()]
    if curve_hash is not hashes.SHA256:
        algorithms.append(hashes.SHA256())  # cosign before v2 hashed every curve with SHA-256
    for algorithm in algorithms:
        try:
            key.verify(signature, message, ec.ECDSA(algorithm))
            return True
        except InvalidSignature:
            continue
    return False


def _verify_rsa(key: rsa.RSAPublicKey, signature: bytes, message: bytes) -> bool:
    for scheme in (padding.PKCS1v15(), padding.PSS(padding.MGF1(hashes.SHA256()), padding.PSS.AUTO)):
        try:
            key.verify(signature, message, scheme, hashes.SHA256())
            return True
        except InvalidSignature:
            continue
    return False


def verify_message(key: PublicKey, signature: bytes, message: bytes) -> bool:
    """Whether `signature` over `message` verifies with `key`, in any scheme cosign signs with."""
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            return _verify_ed25519(key, signature, message)
        if isinstance(key, ec.EllipticCurvePublicKey):
            return _verify_ecdsa(key, signature, message)
        return _verify_rsa(key, signature, message)
    except (ValueError, UnsupportedAlgorithm):  # e.g. a signature that is not DER
        return False


def verify_prehashed(key: PublicKey, signature: bytes, digest: bytes, algorithm: str) -> bool:
    """Whether `signature` verifies over a message whose `algorithm` hash is `digest` (ECDSA and RSA;
    Ed25519 cannot sign a digest it did not compute)."""
    hash_types: dict[str, type[hashes.HashAlgorithm]] = {
        "sha256": hashes.SHA256,
        "sha384": hashes.SHA384,
        "sha512": hashes.SHA512,
    }
    hash_type = hash_types.get(algorithm)
    if hash_type is None or isinstance(key, ed25519.Ed25519PublicKey):
        return False
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, digest, ec.ECDSA(Prehashed(hash_type())))
            return True
        for scheme in (padding.PKCS1v15(), padding.PSS(padding.MGF1(hash_type()), padding.PSS.AUTO)):
            try:
                key.verify(signature, digest, scheme, Prehashed(hash_type()))
                return True
            except InvalidSignature:
                continue
        return False
    except (InvalidSignature, ValueError, UnsupportedAlgorithm):
        return False


def _names(keys: Sequence[TrustedKey], signature: bytes, message: bytes) -> list[str]:
    return [k.name for k in keys if verify_message(k.key, signature, message)]


def verify_simple_signing(
    signature: SimpleSigning,
    *,
    image_digest: str,
    keys: Sequence[TrustedKey],
) -> list[str]:
    """Names of the keys whose signature over the payload verifies, when the payload names
    `image_digest`; [] otherwise."""
    try:
        payload = json.loads(signature.payload)
        named = payload["critical"]["image"]["docker-manifest-digest"]
        raw_signature = _b64decode(signature.signature)
    except (ValueError, KeyError, TypeError, binascii.Error):
        log.debug("a simple-signing payload for %s is malformed", image_digest)
        return []
    if named != image_digest:
        return []
    return _names(keys, raw_signature, signature.payload)


def _pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what a DSSE signature signs."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _statement_names(payload: bytes, image_digest: str) -> bool:
    """Whether an in-toto statement is cosign's signature statement about `image_digest`."""
    algorithm, _, hex_part = image_digest.partition(":")
    try:
        statement = json.loads(payload)
        if statement.get("_type") not in _IN_TOTO_STATEMENTS:
            return False
        if statement.get("predicateType") != COSIGN_SIGN_PREDICATE:
            return False  # an attestation (SBOM, provenance) is not a signature of the image
        return any(
            isinstance(subject, dict) and (subject.get("digest") or {}).get(algorithm) == hex_part
            for subject in statement.get("subject") or []
        )
    except (ValueError, AttributeError):
        return False


def _verify_envelope(envelope: Mapping[str, Any], image_digest: str, keys: Sequence[TrustedKey]) -> list[str]:
    payload_type = str(envelope.get("payloadType") or "")
    if payload_type != IN_TOTO_PAYLOAD_TYPE:
        return []
    payload = _b64decode(str(envelope.get("payload") or ""))
    if not _statement_names(payload, image_digest):
        return []
    message = _pae(payload_type, payload)
    signers: list[str] = []
    for entry in envelope.get("signatures") or []:
        if not isinstance(entry, dict):
            continue
        raw = _b64decode(str(entry.get("sig") or ""))
        signers += [name for name in _names(keys, raw, message) if name not in signers]
    return signers


def _verify_message_signature(
    message_signature: Mapping[str, Any], image_digest: str, keys: Sequence[TrustedKey]
) -> list[str]:
    algorithm, _, hex_part = image_digest.partition(":")
    message_digest = message_signature.get("messageDigest") or {}
    if _MESSAGE_DIGEST_ALGORITHMS.get(str(message_digest.get("algorithm"))) != algorithm:
        return []
    digest = _b64decode(str(message_digest.get("digest") or ""))
    if digest.hex() != hex_part:
        return []
    raw = _b64decode(str(message_signature.get("signature") or ""))
    return [k.name for k in keys if verify_prehashed(k.key, raw, digest, algorithm)]


def verify_bundle(
    bundle: Bundle,
    *,
    image_digest: str,
    keys: Sequence[TrustedKey],
) -> list[str]:
    """Names of the keys that signed `image_digest` in a Sigstore bundle (DSSE or messageSignature)."""
    try:
        document = json.loads(bundle.content)
        if not isinstance(document, dict) or not is_bundle_media_type(str(document.get("mediaType"))):
            return []
        material = document.get("verificationMaterial") or {}
        if "certificate" in material or "x509CertificateChain" in material:
            return []  # keyless: not accepted (see the module docstring)
        if isinstance(envelope := document.get("dsseEnvelope"), dict):
            return _verify_envelope(envelope, image_digest, keys)
        if isinstance(message_signature := document.get("messageSignature"), dict):
            return _verify_message_signature(message_signature, image_digest, keys)
    except (ValueError, TypeError, AttributeError, binascii.Error):
        log.debug("a Sigstore bundle for %s is malformed", image_digest)
    return []


def verify(
    signature: Signature,
    *,
    image_digest: str,
    keys: Sequence[TrustedKey],
) -> list[str]:
    """Names of the trusted keys that signed `image_digest` in `signature`, in the order of `keys`."""
    if isinstance(signature, SimpleSigning):
        found = verify_simple_signing(signature, image_digest=image_digest, keys=keys)
    else:
        found = verify_bundle(signature, image_digest=image_digest, keys=keys)
    return list(dict.fromkeys(found))
