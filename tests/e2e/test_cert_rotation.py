"""labgate rotates its webhook CA and serving certificate under a steady stream of admissions through
the real apiserver, with zero failed requests."""

from __future__ import annotations

import datetime as dt
import threading
import time
from urllib.parse import urlsplit

import pytest
from cryptography import x509
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from devcluster.stack import WEBHOOK_CONFIGURATION, LabgateStack
from labgate.core.kube import KubeApi
from rbac.cert_lifetimes import Lifetimes, lifetimes_from
from rbac.cert_rotation import (
    CertificateManager,
    FileStore,
    fingerprint,
    issuer_fingerprint,
    served_certificate,
)
from tests.e2e.conftest import TenantFactory

pytestmark = pytest.mark.chart


def due_for_rotation(ca_pem: bytes) -> Lifetimes:
    """Lifetimes the chart would accept under which the served CA is due for rotation now: a serving
    certificate lives as long as the CA has left, so the CA cannot outlive the next one it signs, while a
    freshly issued serving certificate is not close to expiry (so no `renew-serving` while replicas
    catch up)."""
    left = x509.load_pem_x509_certificate(ca_pem).not_valid_after_utc - dt.datetime.now(dt.UTC)
    hours = int(left.total_seconds() // 3600)
    return lifetimes_from(serving=f"{hours}h", renew_before="24h", ca=f"{2 * hours}h")


def test_ca_rotation_under_load_fails_no_admission(stack: LabgateStack, tenants: TenantFactory) -> None:
    team = tenants.create()
    pki = stack.workdir / "webhook-pki"
    # Seed labgate's store with the CA the stack made, so the rotation starts from what is served.
    (pki / "ca.key").write_bytes(stack.webhook_ca.key_pem)
    (pki / "bundle.pem").write_bytes(stack.webhook_ca.cert_pem)
    url = urlsplit(stack.webhook_urls[0])
    api = config.new_client_from_config(config_file=str(stack.admin_kubeconfig))
    manager = CertificateManager(
        FileStore(pki),
        KubeApi(api, field_manager="labgate-certificates"),
        configuration_name=WEBHOOK_CONFIGURATION,
        dns_names=("localhost",),
        ip_addresses=("127.0.0.1",),
        lifetimes=due_for_rotation(stack.webhook_ca.cert_pem),
        replicas=lambda: [(url.hostname or "127.0.0.1", url.port or 443)],
    )
    old_ca = stack.webhook_ca.cert_pem

    researcher = client.CoreV1Api(config.new_client_from_config(config_file=str(team.researcher.kubeconfig)))
    stop = threading.Event()
    outcomes: list[str] = []

    def stream() -> None:
        while not stop.is_set():
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"generateName": "stream-"},
                "spec": {"containers": [{"name": "m", "image": "registry.lab.example/x:v1"}]},
            }
            try:
                researcher.create_namespaced_pod(team.namespace, pod, dry_run="All")
                outcomes.append("ok")
            except ApiException as err:
                outcomes.append(f"{err.status}: {err.body}")

    streamer = threading.Thread(target=stream, daemon=True)
    streamer.start()
    steps: list[str] = []
    try:
        deadline = time.monotonic() + 90
        while "drop-previous" not in steps:
            assert time.monotonic() < deadline, f"rotation stuck after {steps}"
            step = manager.step()
            if step != "none":
                steps.append(step)
            time.sleep(0.5)  # pace the control loop: replicas poll their files every second
        # Keep the stream going on the final state for a few more admissions.
        settled = len(outcomes) + 10
        while len(outcomes) < settled:
            assert time.monotonic() < deadline + 30, "the stream stopped after the rotation"
            time.sleep(0.1)
    finally:
        stop.set()
        streamer.join(timeout=10)
        state = manager.store.load()
        if state is not None:
            stack.webhook_ca = state.ca  # later registrations trust the new CA
    failures = [o for o in outcomes if o != "ok"]
    assert steps == ["trust-next", "serve-next", "drop-previous"]
    assert len(outcomes) >= 20, "the stream kept admitting during the rotation"
    assert failures == []
    assert state is not None
    assert fingerprint(state.ca.cert_pem) != fingerprint(old_ca)
    assert state.bundle == (state.ca.cert_pem,)
    served = served_certificate(url.hostname or "127.0.0.1", url.port or 443)
    assert issuer_fingerprint(served, [state.ca.cert_pem]) == fingerprint(state.ca.cert_pem)
