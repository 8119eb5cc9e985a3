"""cosign signature verification, given bytes: simple-signing payloads and Sigstore bundles (DSSE and
messageSignature), per key type, and everything that must not verify."""

from __future__ import annotations

import base64
import hashlib
import json
import warnings
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from cryptography.utils import CryptographyDeprecationWarning

from webhook.provenance import cosign, ed25519ph
from webhook.provenance.cosign import Bundle, InvalidKeyError, SimpleSigning, TrustedKey

DIGEST = "sha256:" + hashlib.sha256(b"an image manifest").hexdigest()
OTHER_DIGEST = "sha256:" + hashlib.sha256(b"another manifest").hexdigest()

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


def _pem(private: PrivateKey) -> str:
    return (
        private.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def _sign(private: PrivateKey, message: bytes, *, pss: bool = False) -> bytes:
    if isinstance(private, ed25519.Ed25519PrivateKey):
        return private.sign(message)
    if isinstance(private, rsa.RSAPrivateKey):
        scheme = padding.PSS(padding.MGF1(hashes.SHA256()), 32) if pss else padding.PKCS1v15()
        return private.sign(message, scheme, hashes.SHA256())
    algorithm = {"secp384r1": hashes.SHA384(), "secp521r1": hashes.SHA512()}.get(
        private.curve.name, hashes.SHA256()
    )
    return private.sign(message, ec.ECDSA(algorithm))


@pytest.fixture(scope="module")
def p256() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="module")
def stranger() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key(name: str, private: PrivateKey) -> TrustedKey:
    return cosign.load_trusted_key(name, _pem(private))


def _payload(digest: str = DIGEST) -> bytes:
    return json.dumps(
        {
            "critical": {
                "identity": {"docker-reference": "registry.lab.example/x"},
                "image": {"docker-manifest-digest": digest},
                "type": "cosign container image signature",
            },
            "optional": None,
        }
    ).encode()


def _simple(private: PrivateKey, payload: bytes | None = None) -> SimpleSigning:
    payload = payload if payload is not None else _payload()
    return SimpleSigning(payload=payload, signature=base64.b64encode(_sign(private, payload)).decode())


def _statement(digest: str = DIGEST, predicate: str = cosign.COSIGN_SIGN_PREDICATE) -> bytes:
    return json.dumps(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"digest": {"sha256": digest.split(":")[1]}, "annotations": {}}],
            "predicateType": predicate,
            "predicate": {},
        }
    ).encode()


def _dsse_bundle(
    private: PrivateKey, statement: bytes | None = None, payload_type: str = cosign.IN_TOTO_PAYLOAD_TYPE
) -> Bundle:
    statement = statement if statement is not None else _statement()
    pae = b"DSSEv1 %d %s %d %s" % (len(payload_type), payload_type.encode(), len(statement), statement)
    document = {
        "mediaType": cosign.BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": "ignored"}},
        "dsseEnvelope": {
            "payload": base64.b64encode(statement).decode(),
            "payloadType": payload_type,
            "signatures": [{"sig": base64.b64encode(_sign(private, pae)).decode()}],
        },
    }
    return Bundle(json.dumps(document).encode())


# --- .sig payloads ---


def test_simple_signing_verifies_with_the_signers_key_only(
    p256: ec.EllipticCurvePrivateKey, stranger: ec.EllipticCurvePrivateKey
) -> None:
    keys = [_key("stranger", stranger), _key("release", p256)]
    assert cosign.verify(_simple(p256), image_digest=DIGEST, keys=keys) == ["release"]
    assert cosign.verify(_simple(p256), image_digest=DIGEST, keys=[_key("stranger", stranger)]) == []


def test_simple_signing_for_another_digest_verifies_nothing(p256: ec.EllipticCurvePrivateKey) -> None:
    signature = _simple(p256, _payload(OTHER_DIGEST))
    assert cosign.verify(signature, image_digest=DIGEST, keys=[_key("release", p256)]) == []


def test_a_tampered_payload_verifies_nothing(p256: ec.EllipticCurvePrivateKey) -> None:
    good = _simple(p256, _payload(OTHER_DIGEST))
    forged = SimpleSigning(payload=_payload(DIGEST), signature=good.signature)
    assert cosign.verify(forged, image_digest=DIGEST, keys=[_key("release", p256)]) == []


@pytest.mark.parametrize(
    "payload",
    [b"not json", b"{}", b'{"critical": {"image": {}}}', b"[1]"],
    ids=["text", "empty", "no-digest", "list"],
)
def test_malformed_payloads_verify_nothing(p256: ec.EllipticCurvePrivateKey, payload: bytes) -> None:
    assert cosign.verify(_simple(p256, payload), image_digest=DIGEST, keys=[_key("k", p256)]) == []


def test_a_signature_that_is_not_base64_or_der_verifies_nothing(p256: ec.EllipticCurvePrivateKey) -> None:
    for text in ("%%%", base64.b64encode(b"short").decode(), ""):
        signature = SimpleSigning(payload=_payload(), signature=text)
        assert cosign.verify(signature, image_digest=DIGEST, keys=[_key("k", p256)]) == []


KEY_MAKERS: dict[str, Any] = {
    "p256": lambda: ec.generate_private_key(ec.SECP256R1()),
    "p384": lambda: ec.generate_private_key(ec.SECP384R1()),
    "p521": lambda: ec.generate_private_key(ec.SECP521R1()),
    "rsa2048": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "ed25519": ed25519.Ed25519PrivateKey.generate,
}


@pytest.mark.parametrize("kind", sorted(KEY_MAKERS))
def test_every_supported_key_type_verifies_both_formats(kind: str) -> None:
    private = KEY_MAKERS[kind]()
    key = _key(kind, private)
    assert cosign.verify(_simple(private), image_digest=DIGEST, keys=[key]) == [kind]
    assert cosign.verify(_dsse_bundle(private), image_digest=DIGEST, keys=[key]) == [kind]


def test_rsa_pss_signatures_verify() -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    payload = _payload()
    signature = SimpleSigning(payload, base64.b64encode(_sign(private, payload, pss=True)).decode())
    assert cosign.verify(signature, image_digest=DIGEST, keys=[_key("rsa", private)]) == ["rsa"]


def test_p384_signed_with_sha256_by_old_cosign_verifies() -> None:
    private = ec.generate_private_key(ec.SECP384R1())
    payload = _payload()
    signature = SimpleSigning(
        payload, base64.b64encode(private.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()
    )
    assert cosign.verify(signature, image_digest=DIGEST, keys=[_key("p384", private)]) == ["p384"]


# --- Ed25519ph (RFC 8032 §7.3) ---

RFC_PUBLIC = bytes.fromhex("ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf")
RFC_SIGNATURE = bytes.fromhex(
    "98a70222f0b8121aa9d30f813d683f809e462b469c7ff87639499bb94e6dae41"
    "31f85042463c2a355a2003d062adf5aaa10b8c61e636062aaad11c2a26083406"
)


def test_ed25519ph_verifies_the_rfc_8032_test_vector() -> None:
    assert ed25519ph.verify(RFC_PUBLIC, RFC_SIGNATURE, b"abc")


def test_ed25519ph_refuses_what_it_must() -> None:
    assert not ed25519ph.verify(RFC_PUBLIC, RFC_SIGNATURE, b"abd")
    flipped = bytearray(RFC_SIGNATURE)
    flipped[5] ^= 1
    assert not ed25519ph.verify(RFC_PUBLIC, bytes(flipped), b"abc")
    # S + L is the same point arithmetic but a non-canonical encoding: refused.
    s = int.from_bytes(RFC_SIGNATURE[32:], "little") + 2**252 + 27742317777372353535851937790883648493
    assert not ed25519ph.verify(RFC_PUBLIC, RFC_SIGNATURE[:32] + s.to_bytes(32, "little"), b"abc")
    assert not ed25519ph.verify(RFC_PUBLIC, RFC_SIGNATURE[:63], b"abc")
    assert not ed25519ph.verify(b"\xff" * 32, RFC_SIGNATURE, b"abc")  # y >= p: not a point


def test_ed25519ph_via_a_trusted_key() -> None:
    pem = _pem_of_raw_ed25519(RFC_PUBLIC)
    key = cosign.load_trusted_key("rfc", pem)
    assert cosign.verify_message(key.key, RFC_SIGNATURE, b"abc")
    assert not cosign.verify_message(key.key, RFC_SIGNATURE, b"abcd")


def _pem_of_raw_ed25519(raw: bytes) -> str:
    public = ed25519.Ed25519PublicKey.from_public_bytes(raw)
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


# --- bundles ---


def test_dsse_bundle_verifies_with_the_signers_key_only(
    p256: ec.EllipticCurvePrivateKey, stranger: ec.EllipticCurvePrivateKey
) -> None:
    keys = [_key("release", p256), _key("stranger", stranger)]
    assert cosign.verify(_dsse_bundle(p256), image_digest=DIGEST, keys=keys) == ["release"]
    assert cosign.verify(_dsse_bundle(p256), image_digest=OTHER_DIGEST, keys=keys) == []


def test_an_attestation_is_not_a_signature(p256: ec.EllipticCurvePrivateKey) -> None:
    attestation = _dsse_bundle(p256, _statement(predicate="https://slsa.dev/provenance/v1"))
    assert cosign.verify(attestation, image_digest=DIGEST, keys=[_key("release", p256)]) == []


def test_a_dsse_payload_of_another_type_verifies_nothing(p256: ec.EllipticCurvePrivateKey) -> None:
    bundle = _dsse_bundle(p256, payload_type="application/json")
    assert cosign.verify(bundle, image_digest=DIGEST, keys=[_key("release", p256)]) == []


def test_dsse_accepts_url_safe_unpadded_base64(p256: ec.EllipticCurvePrivateKey) -> None:
    document = json.loads(_dsse_bundle(p256).content)
    envelope = document["dsseEnvelope"]
    for field in ("payload",):
        envelope[field] = base64.urlsafe_b64encode(base64.b64decode(envelope[field])).decode().rstrip("=")
    sig = envelope["signatures"][0]
    sig["sig"] = base64.urlsafe_b64encode(base64.b64decode(sig["sig"])).decode().rstrip("=")
    bundle = Bundle(json.dumps(document).encode())
    assert cosign.verify(bundle, image_digest=DIGEST, keys=[_key("release", p256)]) == ["release"]


def test_message_signature_bundle_verifies_over_the_image_digest(p256: ec.EllipticCurvePrivateKey) -> None:
    digest_bytes = bytes.fromhex(DIGEST.split(":")[1])
    signature = p256.sign(digest_bytes, ec.ECDSA(Prehashed(hashes.SHA256())))
    document = {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": ""}},
        "messageSignature": {
            "messageDigest": {"algorithm": "SHA2_256", "digest": base64.b64encode(digest_bytes).decode()},
            "signature": base64.b64encode(signature).decode(),
        },
    }
    bundle = Bundle(json.dumps(document).encode())
    assert cosign.verify(bundle, image_digest=DIGEST, keys=[_key("release", p256)]) == ["release"]
    assert cosign.verify(bundle, image_digest=OTHER_DIGEST, keys=[_key("release", p256)]) == []


def test_keyless_material_verifies_nothing(p256: ec.EllipticCurvePrivateKey) -> None:
    # A bundle whose verification material is a certificate is keyless: even if the envelope was
    # signed by a key the tenant trusts, labgate does not accept it (no trust root, no identity policy).
    document = json.loads(_dsse_bundle(p256).content)
    document["verificationMaterial"] = {"certificate": {"rawBytes": "MIIB..."}, "tlogEntries": []}
    bundle = Bundle(json.dumps(document).encode())
    assert cosign.verify(bundle, image_digest=DIGEST, keys=[_key("release", p256)]) == []


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[]",
        b'{"mediaType": "application/json"}',
        b'{"mediaType": "' + cosign.BUNDLE_MEDIA_TYPE.encode() + b'"}',
    ],
    ids=["text", "list", "other-type", "empty-bundle"],
)
def test_malformed_bundles_verify_nothing(p256: ec.EllipticCurvePrivateKey, content: bytes) -> None:
    assert cosign.verify(Bundle(content), image_digest=DIGEST, keys=[_key("k", p256)]) == []


# --- keys and layers ---


def test_trusted_keys_load_from_pem_and_carry_cosigns_hint(p256: ec.EllipticCurvePrivateKey) -> None:
    key = _key("release", p256)
    der = p256.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert key.fingerprint == hashlib.sha256(der).hexdigest()
    assert key.hint == base64.b64encode(hashlib.sha256(der).digest()).decode()


def test_keys_that_are_not_supported_public_keys_are_refused() -> None:
    with pytest.raises(InvalidKeyError, match="'broken' is not a PEM public key"):
        cosign.load_trusted_key("broken", "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n")
    # cryptography deprecates DSA from version 51 on (a warning at each use); a DSA key an operator
    # still configures must be refused all the same.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        dsa_key = dsa.generate_private_key(key_size=2048)
        with pytest.raises(InvalidKeyError, match="use ECDSA, RSA or Ed25519"):
            cosign.load_trusted_key("dsa", _pem(dsa_key))  # type: ignore[arg-type]


def test_signature_layers_and_bundle_layers_are_picked_by_media_type() -> None:
    sig_manifest = {
        "layers": [
            {
                "mediaType": cosign.SIMPLE_SIGNING_MEDIA_TYPE,
                "digest": "sha256:" + "1" * 64,
                "size": 1,
                "annotations": {cosign.SIGNATURE_ANNOTATION: "c2ln"},
            },
            {"mediaType": cosign.SIMPLE_SIGNING_MEDIA_TYPE, "digest": "sha256:" + "2" * 64, "size": 1},
            {
                "mediaType": "application/octet-stream",
                "digest": "sha256:" + "3" * 64,
                "size": 1,
                "annotations": {cosign.SIGNATURE_ANNOTATION: "c2ln"},
            },
            {"not": "a descriptor"},
        ]
    }
    assert [d.digest for d in cosign.simple_signing_layers(sig_manifest)] == ["sha256:" + "1" * 64]
    bundle_manifest = {
        "layers": [
            {"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json", "digest": "sha256:" + "4" * 64}
        ]
    }
    assert [d.digest for d in cosign.bundle_layers(bundle_manifest)] == ["sha256:" + "4" * 64]
    assert cosign.bundle_layers({"layers": "nope"}) == []
    assert cosign.is_bundle_media_type("application/vnd.dev.sigstore.bundle+json;version=0.2")
    assert not cosign.is_bundle_media_type(None)
    assert cosign.signature_tag(DIGEST) == DIGEST.replace(":", "-") + ".sig"
