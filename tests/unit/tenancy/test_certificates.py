"""Certificates labgate makes: who a client certificate says it is, and where a serving one is valid."""

from __future__ import annotations

import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from labgate.core.certificates import issue_client_cert, issue_serving_cert, make_ca


def test_client_certificate_names_user_and_groups_and_is_signed_by_the_ca() -> None:
    ca = make_ca("test-ca")
    pair = issue_client_cert(ca, user="alice", groups=("team-a", "gpu-users"))
    cert = pair.certificate
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "team-a",
        "gpu-users",
    ]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    public_key = ca.certificate.public_key()
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(ca.certificate)


def test_serving_certificate_covers_loopback_ip_and_names() -> None:
    ca = make_ca("test-ca")
    cert = issue_serving_cert(
        ca, common_name="w", dns_names=("localhost",), ip_addresses=("127.0.0.1",)
    ).certificate
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.not_valid_after_utc <= ca.certificate.not_valid_after_utc
