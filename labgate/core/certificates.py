"""X.509 material that labgate makes for itself: certificate authorities, serving and client certificates.

Used by the webhook (its serving certificate and the caBundle it registers) and by the local control
plane (apiserver serving certificate, client certificates for the admin and for researchers).
Everything is PEM in memory; callers decide where it is written.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Clock skew between this machine and the apiserver's must never make a fresh certificate "not yet valid".
_BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        """The parsed certificate."""
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def private_key(self) -> ec.EllipticCurvePrivateKey:
        """The parsed private key (labgate only makes ECDSA P-256 keys)."""
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError("labgate key pairs are ECDSA")
        return key


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def make_ca(common_name: str, *, valid_for: dt.timedelta = dt.timedelta(days=365)) -> KeyPair:
    """A self-signed certificate authority."""
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    name = _name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + valid_for)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _issue(
    ca: KeyPair,
    *,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName],
    valid_for: dt.timedelta,
) -> KeyPair:
    key = _new_key()
    now = dt.datetime.now(dt.UTC)
    ca_cert = ca.certificate
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(min(now + valid_for, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.private_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca.private_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_serving_cert(
    ca: KeyPair,
    *,
    common_name: str,
    dns_names: tuple[str, ...] = (),
    ip_addresses: tuple[str, ...] = (),
    valid_for: dt.timedelta = dt.timedelta(days=90),
) -> KeyPair:
    """A TLS server certificate for the given DNS names and IP addresses, signed by `ca`."""
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    return _issue(
        ca, subject=_name(common_name), usage=ExtendedKeyUsageOID.SERVER_AUTH, sans=sans, valid_for=valid_for
    )


def issue_client_cert(
    ca: KeyPair,
    *,
    user: str,
    groups: tuple[str, ...] = (),
    valid_for: dt.timedelta = dt.timedelta(days=30),
) -> KeyPair:
    """A client certificate that Kubernetes reads as user `user` (CN) in `groups` (O)."""
    return _issue(
        ca,
        subject=_name(user, groups),
        usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        sans=[],
        valid_for=valid_for,
    )


def make_signing_key() -> tuple[bytes, bytes]:
    """An RSA key pair (private PEM, public PEM), e.g. for signing service-account tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _key_pem(key), public
