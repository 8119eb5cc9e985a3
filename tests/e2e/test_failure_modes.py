"""What happens when parts fail: never an accidental admission, never a bricked cluster."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from devcluster.processes import free_port
from devcluster.stack import LABGATE_NAMESPACE, LabgateStack
from tests.e2e.conftest import TenantFactory, pod_manifest

pytestmark = pytest.mark.tenancy


@pytest.fixture
def restore_webhook(stack: LabgateStack) -> Iterator[None]:
    try:
        yield
    finally:
        stack.register_webhook(stack.webhook_urls[0])


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A real TCP listener that accepts connections and never answers: a hung OPA."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield int(listener.getsockname()[1])


@pytest.mark.usefixtures("restore_webhook")
def test_kube_system_and_labgate_namespace_are_never_intercepted(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    mine = tenants.create()
    tenants.open_rbac(mine.namespace, *mine.researcher.groups)
    # Point the apiserver at a webhook that does not exist: with failurePolicy Fail, every request it
    # intercepts now fails, so whatever still succeeds was not intercepted.
    stack.register_webhook(f"https://127.0.0.1:{free_port()}")
    refused = mine.researcher.apply(pod_manifest("blocked"), mine.namespace)
    assert refused.returncode == 1
    # A tenant that refuses GPU pods beyond quota (the default): its namespace's mutating webhook.
    assert 'failed calling webhook "mutate-refusing-tenants.labgate.io"' in refused.stderr
    for namespace in ("kube-system", LABGATE_NAMESPACE):
        name = f"exempt-{mine.name}"
        created = stack.cluster_kubectl("apply", "-n", namespace, "-f", "-", manifest=pod_manifest(name))
        assert created.returncode == 0, created.stderr
        assert stack.cluster_kubectl("delete", "pod", name, "-n", namespace, "--wait=false").returncode == 0


@pytest.mark.usefixtures("restore_webhook")
def test_unreachable_policy_engine_refuses_with_clear_message(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    mine = tenants.create()
    tenants.open_rbac(mine.namespace, *mine.researcher.groups)
    stack.register_webhook(
        stack.start_webhook(opa_url=f"http://127.0.0.1:{free_port()}", wait_for="/healthz")
    )
    result = mine.researcher.apply(pod_manifest("p"), mine.namespace)
    assert result.returncode == 1
    assert (
        "[policy-engine-unavailable] labgate could not evaluate its policies (cannot reach OPA"
        in result.stderr
    )
    assert "retry in a minute" in result.stderr
    assert mine.admin.kubectl("get", "pod", "p", "-n", mine.namespace).returncode == 1


@pytest.mark.usefixtures("restore_webhook")
def test_hung_policy_engine_refuses_within_the_webhook_deadline(
    stack: LabgateStack, tenants: TenantFactory, silent_server: int
) -> None:
    mine = tenants.create()
    tenants.open_rbac(mine.namespace, *mine.researcher.groups)
    stack.register_webhook(
        stack.start_webhook(opa_url=f"http://127.0.0.1:{silent_server}", wait_for="/healthz")
    )
    result = mine.researcher.apply(pod_manifest("p"), mine.namespace)
    assert result.returncode == 1
    # labgate's own refusal (its deadline fired), not the apiserver's webhook timeout.
    assert "[policy-engine-unavailable] labgate could not evaluate its policies (no " in result.stderr
    assert "within" in result.stderr
    assert "context deadline exceeded" not in result.stderr
