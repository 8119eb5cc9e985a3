"""labgate's own webhook certificates, rotated before they expire without failing an admission.

The apiserver trusts the CAs in the webhook configurations' caBundle; the webhook replicas serve a
certificate signed by one CA. Rotating the CA in one step would let a replica present a certificate
the apiserver does not trust yet (or the reverse), so a CA rotation takes three steps, each only
once the previous one is visible everywhere:

1. `trust-next`: a new CA is made; the bundle trusts the current and the new CA; replicas keep
   serving the certificate of the current CA.
2. `serve-next`: once every webhook configuration carries both CAs, replicas get a certificate of
   the new CA, which becomes current.
3. `drop-previous`: once every replica serves the new certificate, the bundle trusts only it.

A serving certificate close to expiry under a CA that is not is simply renewed (`renew-serving`).
Deciding is pure (`next_step`); storing (a Secret, or files for the local stack) and patching the
webhook configurations are thin doors around it.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.serialization import Encoding

from labgate.core.api_resources import MUTATING_CONFIGURATION, VALIDATING_CONFIGURATION, Kind
from labgate.core.certificates import KeyPair, issue_serving_cert, make_ca
from labgate.core.kube import ApiException, KubeApi
from rbac.cert_lifetimes import DEFAULT_LIFETIMES, Lifetimes
from rbac.runtime import WRITES, PeriodicTask

log = logging.getLogger(__name__)

Step = Literal["create", "trust-next", "serve-next", "drop-previous", "renew-serving", "none"]


def fingerprint(cert_pem: bytes) -> str:
    """sha256 of the certificate's DER: how CAs in a bundle are compared."""
    der = x509.load_pem_x509_certificate(cert_pem).public_bytes(encoding=Encoding.DER)
    return hashlib.sha256(der).hexdigest()


def split_bundle(bundle_pem: bytes) -> list[bytes]:
    """The PEM certificates of a bundle, in order."""
    marker = b"-----END CERTIFICATE-----"
    return [part.strip() + b"\n" + marker + b"\n" for part in bundle_pem.split(marker) if part.strip()]


@dataclass(frozen=True)
class CertificateState:
    """What labgate stores: the CA it signs with, the next CA while rotating, the serving pair, and the
    bundle the apiserver should trust."""

    ca: KeyPair
    serving: KeyPair
    bundle: tuple[bytes, ...]
    next_ca: KeyPair | None = None


@dataclass(frozen=True)
class Observation:
    """What is visible right now: CA fingerprints in each webhook configuration's caBundle, and the
    issuer fingerprint of the certificate each replica serves."""

    bundles_in_configurations: tuple[frozenset[str], ...]
    served_issuers: frozenset[str]


def _expires(pair: KeyPair) -> dt.datetime:
    return pair.certificate.not_valid_after_utc


def next_step(  # noqa: PLR0911 - one return per rotation step reads best
    state: CertificateState | None,
    observation: Observation,
    *,
    now: dt.datetime,
    lifetimes: Lifetimes,
    dns_names: tuple[str, ...],
    ip_addresses: tuple[str, ...] = (),
) -> tuple[CertificateState, Step]:
    """The state to store next and the step taken (pure, apart from making keys)."""

    def serving_of(ca: KeyPair) -> KeyPair:
        return issue_serving_cert(
            ca,
            common_name=dns_names[0] if dns_names else "labgate-webhook",
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            valid_for=lifetimes.serving,
        )

    if state is None:
        ca = make_ca("labgate-webhook-ca", valid_for=lifetimes.ca)
        return CertificateState(ca=ca, serving=serving_of(ca), bundle=(ca.cert_pem,)), "create"
    current = fingerprint(state.ca.cert_pem)
    if state.next_ca is not None:
        upcoming = fingerprint(state.next_ca.cert_pem)
        everywhere = all(upcoming in b and current in b for b in observation.bundles_in_configurations)
        if everywhere:
            return (
                CertificateState(
                    ca=state.next_ca,
                    serving=serving_of(state.next_ca),
                    bundle=state.bundle,
                    next_ca=None,
                ),
                "serve-next",
            )
        return state, "none"
    if len(state.bundle) > 1:
        if observation.served_issuers == frozenset({current}):
            return replace(state, bundle=(state.ca.cert_pem,)), "drop-previous"
        if _expires(state.serving) - now <= lifetimes.renew_before:
            # A replica that cannot be asked must not stop renewals: the bundle trusts both CAs.
            return replace(state, serving=serving_of(state.ca)), "renew-serving"
        return state, "none"
    if _expires(state.ca) - now <= lifetimes.renew_before + lifetimes.serving:
        # The CA must outlive every serving certificate it signs: rotate it while there is room.
        next_ca = make_ca("labgate-webhook-ca", valid_for=lifetimes.ca)
        return replace(state, next_ca=next_ca, bundle=(state.ca.cert_pem, next_ca.cert_pem)), "trust-next"
    if _expires(state.serving) - now <= lifetimes.renew_before:
        return replace(state, serving=serving_of(state.ca)), "renew-serving"
    return state, "none"


class CertificateStore(Protocol):
    def load(self) -> CertificateState | None: ...

    def save(self, state: CertificateState) -> None: ...


class FileStore:
    """The state as files (the local stack: webhook processes read tls.crt and tls.key from here)."""

    def __init__(self, directory: Path):
        self.directory = directory

    def _read(self, name: str) -> bytes | None:
        path = self.directory / name
        return path.read_bytes() if path.exists() else None

    def load(self) -> CertificateState | None:
        ca_crt, ca_key = self._read("ca.crt"), self._read("ca.key")
        tls_crt, tls_key = self._read("tls.crt"), self._read("tls.key")
        if not (ca_crt and ca_key and tls_crt and tls_key):
            return None
        next_crt, next_key = self._read("next-ca.crt"), self._read("next-ca.key")
        bundle = self._read("bundle.pem") or ca_crt
        return CertificateState(
            ca=KeyPair(ca_crt, ca_key),
            serving=KeyPair(tls_crt, tls_key),
            bundle=tuple(split_bundle(bundle)),
            next_ca=KeyPair(next_crt, next_key) if next_crt and next_key else None,
        )

    def save(self, state: CertificateState) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        files = {
            "ca.crt": state.ca.cert_pem,
            "ca.key": state.ca.key_pem,
            "bundle.pem": b"".join(state.bundle),
            # The key first: a replica that sees the new certificate must find its key beside it.
            "tls.key": state.serving.key_pem,
            "tls.crt": state.serving.cert_pem,
        }
        for name, data in files.items():
            tmp = self.directory / f".{name}.tmp"
            tmp.write_bytes(data)
            tmp.chmod(0o600)
            tmp.replace(self.directory / name)  # atomic: a reader never sees half a file
        for name in ("next-ca.crt", "next-ca.key"):
            (self.directory / name).unlink(missing_ok=True)
        if state.next_ca is not None:
            (self.directory / "next-ca.crt").write_bytes(state.next_ca.cert_pem)
            (self.directory / "next-ca.key").write_bytes(state.next_ca.key_pem)


def issuer_fingerprint(served_pem: bytes, candidates: list[bytes]) -> str | None:
    """Which of the candidate CAs signed `served_pem` (by signature, not by name)."""
    served = x509.load_pem_x509_certificate(served_pem)
    for ca_pem in candidates:
        try:
            served.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
        except (ValueError, TypeError, InvalidSignature):
            continue
        return fingerprint(ca_pem)
    return None


def served_certificate(host: str, port: int, *, timeout: float = 2.0) -> bytes:
    """The certificate a TLS server presents (not verified: we only ask who signed it)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=timeout) as raw, context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    if der is None:
        raise ConnectionError(f"{host}:{port} presented no certificate")
    return x509.load_der_x509_certificate(der).public_bytes(Encoding.PEM)


class CertificateManager:
    """Runs next_step against a store, the webhook configurations and the replicas, one step per call."""

    def __init__(
        self,
        store: CertificateStore,
        kube: KubeApi,
        *,
        configuration_name: str,
        dns_names: tuple[str, ...],
        ip_addresses: tuple[str, ...] = (),
        lifetimes: Lifetimes = DEFAULT_LIFETIMES,
        replicas: Callable[[], list[tuple[str, int]]],
    ):
        self.store = store
        self.kube = kube
        self.configuration_name = configuration_name
        self.dns_names = dns_names
        self.ip_addresses = ip_addresses
        self.lifetimes = lifetimes
        self.replicas = replicas

    def _configurations(self) -> list[tuple[Kind, dict[str, Any]]]:
        found = []
        for kind in (MUTATING_CONFIGURATION, VALIDATING_CONFIGURATION):
            obj = self.kube.get(kind, self.configuration_name)
            if obj is not None:
                found.append((kind, obj))
        return found

    def observe(self, state: CertificateState | None) -> Observation:
        bundles = []
        for _, configuration in self._configurations():
            for webhook in configuration.get("webhooks") or []:
                pem = base64.b64decode(webhook.get("clientConfig", {}).get("caBundle") or b"")
                bundles.append(frozenset(fingerprint(c) for c in split_bundle(pem)))
        candidates = [] if state is None else [state.ca.cert_pem, *state.bundle]
        issuers = set()
        for host, port in self.replicas():
            try:
                issuer = issuer_fingerprint(served_certificate(host, port), candidates)
            except OSError as error:
                # The previous CA stays trusted until every replica can be asked (a NetworkPolicy in
                # front of the webhook's port that leaves out the reconciler's pods, say).
                log.warning("webhook certificates: cannot read what %s:%d serves: %s", host, port, error)
                issuer = None
            issuers.add(issuer or "unknown")
        return Observation(bundles_in_configurations=tuple(bundles), served_issuers=frozenset(issuers))

    def publish_bundle(self, bundle: tuple[bytes, ...]) -> None:
        """Set caBundle on every webhook of labgate's configurations."""
        value = base64.b64encode(b"".join(bundle)).decode()
        for kind, configuration in self._configurations():
            patch = [
                {"op": "replace", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": value}
                for i in range(len(configuration.get("webhooks") or []))
            ]
            if patch:
                self.kube.json_patch(kind, self.configuration_name, patch)

    def step(self, *, now: dt.datetime | None = None) -> Step:
        """Observe, decide, store, publish: one step of the rotation (or none)."""
        state = self.store.load()
        observation = self.observe(state)
        new_state, step = next_step(
            state,
            observation,
            now=now or dt.datetime.now(dt.UTC),
            lifetimes=self.lifetimes,
            dns_names=self.dns_names,
            ip_addresses=self.ip_addresses,
        )
        if step != "none":
            self.store.save(new_state)
        if state is None or new_state.bundle != state.bundle:
            self.publish_bundle(new_state.bundle)
        return step


SECRET = Kind("Secret", "", "v1", "secrets", is_namespaced=True)
ENDPOINT_SLICE = Kind("EndpointSlice", "discovery.k8s.io", "v1", "endpointslices", is_namespaced=True)


class SecretStore:
    """The state in two Secrets (in a cluster). The webhook pods mount the serving Secret `name`
    (tls.crt, tls.key, ca.crt), and the kubelet refreshes the files, which the webhook's
    CertificateReloader picks up. The CAs' private keys live apart, in `name`-ca, which only the
    reconciler's rotation reads: a webhook pod never holds a key that could sign certificates.
    A serving Secret written before the split (with ca.key in it) is read once and then rewritten
    without it."""

    def __init__(self, kube: KubeApi, *, namespace: str, name: str):
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.ca_name = f"{name}-ca"
        self._versions: dict[str, str | None] = {}

    def _read(self, name: str) -> dict[str, bytes] | None:
        secret = self.kube.get(SECRET, name, namespace=self.namespace)
        self._versions[name] = None if secret is None else secret.get("metadata", {}).get("resourceVersion")
        if secret is None:
            return None
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    def load(self) -> CertificateState | None:
        serving = self._read(self.name) or {}
        authority = self._read(self.ca_name) or serving  # before the split, the CA was in `name`
        if not (all(authority.get(k) for k in ("ca.crt", "ca.key")) and serving.get("tls.crt")):
            return None
        if not serving.get("tls.key"):
            return None
        return CertificateState(
            ca=KeyPair(authority["ca.crt"], authority["ca.key"]),
            serving=KeyPair(serving["tls.crt"], serving["tls.key"]),
            bundle=tuple(split_bundle(authority.get("bundle.pem") or authority["ca.crt"])),
            next_ca=KeyPair(authority["next-ca.crt"], authority["next-ca.key"])
            if authority.get("next-ca.crt") and authority.get("next-ca.key")
            else None,
        )

    def _write(self, name: str, secret_type: str, values: dict[str, bytes]) -> None:
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": self.namespace,
            "labels": {"app.kubernetes.io/managed-by": "labgate"},
        }
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": secret_type,
            "metadata": metadata,
            "data": {k: base64.b64encode(v).decode() for k, v in values.items()},
        }
        version = self._versions.get(name)
        if version is None:
            result = self.kube.create(SECRET, body, namespace=self.namespace)
        else:
            # Compare-and-swap: two leaders in a split second cannot both rotate.
            metadata["resourceVersion"] = version
            result = self.kube.replace(SECRET, body)
        self._versions[name] = result.get("metadata", {}).get("resourceVersion")

    def save(self, state: CertificateState) -> None:
        """The CA first, the serving pair second: the webhook is only ever told to serve a
        certificate whose CA is already kept."""
        authority = {
            "ca.crt": state.ca.cert_pem,
            "ca.key": state.ca.key_pem,
            "bundle.pem": b"".join(state.bundle),
        }
        if state.next_ca is not None:
            authority["next-ca.crt"] = state.next_ca.cert_pem
            authority["next-ca.key"] = state.next_ca.key_pem
        self._write(self.ca_name, "Opaque", authority)
        self._write(
            self.name,
            "kubernetes.io/tls",
            {
                "ca.crt": state.ca.cert_pem,
                "tls.crt": state.serving.cert_pem,
                "tls.key": state.serving.key_pem,
            },
        )


def endpoint_replicas(kube: KubeApi, *, namespace: str, service: str, port: int) -> list[tuple[str, int]]:
    """The ready webhook pods behind `service`, from its EndpointSlices."""
    listing = kube.list(
        ENDPOINT_SLICE, namespace=namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    replicas = []
    for endpoint_slice in listing.get("items") or []:
        for endpoint in endpoint_slice.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready", True):
                replicas += [(address, port) for address in endpoint.get("addresses") or []]
    return replicas


def rotation_task(manager: CertificateManager, *, every_seconds: float) -> PeriodicTask:
    """The rotation as a periodic task of the reconciler's runtime: one step every `every_seconds`
    while this replica leads (the first at once); a failed step is tried again at the next turn."""

    def rotate() -> None:
        try:
            step = manager.step()
        except (ApiException, OSError) as err:
            log.warning("webhook certificates: %s; retrying", err)
            return
        if step != "none":
            log.info("webhook certificates: %s", step)
            WRITES.labels("certificates").inc()

    return PeriodicTask("certificate-rotation", every_seconds, rotate)
