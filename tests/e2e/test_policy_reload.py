"""The infra team changes a policy on disk; the running webhook enforces it at the next kubectl apply,
without a restart, and keeps every tenant it knew (OPA drops pushed data when it reloads)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.stack import LABGATE_NAMESPACE, LabgateStack
from tests.e2e.conftest import TenantFactory, pod_manifest
from tests.e2e.test_reconciler import eventually

pytestmark = pytest.mark.chart

RULE = """# METADATA
# title: e2e reload probe
package labgate.rules.e2e_reload

import data.labgate.lib.tenancy

# METADATA
# custom:
#   rule_id: e2e-reload
violation contains {"rule": rule_id, "message": msg} if {
\tinput.request.object.metadata.labels["e2e-reload"] == "deny"
\ttenancy.namespace_tenant
\trule_id := rego.metadata.rule().custom.rule_id
\tmsg := sprintf("[%s] refused by a policy added at run time. Fix: drop the label", [rule_id])
}
"""


@pytest.fixture
def probe_rule(stack: LabgateStack) -> Iterator[Path]:
    # A new file in a directory that existed when OPA started.
    path = stack.policy_dir / "labgate" / "rules" / "e2e_reload.rego"
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def _refused_by_probe(result_stderr: str) -> bool:
    return "[e2e-reload]" in result_stderr


def test_a_policy_written_to_disk_is_enforced_without_restart(
    stack: LabgateStack, tenants: TenantFactory, probe_rule: Path
) -> None:
    mine, theirs = tenants.create(), tenants.create()
    tenants.open_rbac(theirs.namespace, *mine.researcher.groups)
    labelled = pod_manifest("probe")
    labelled["metadata"]["labels"] = {"e2e-reload": "deny"}
    assert mine.researcher.apply(labelled, mine.namespace).returncode == 0
    mine.researcher.kubectl("delete", "pod", "probe", "-n", mine.namespace, "--wait=false")
    probe_rule.write_text(RULE)
    # The webhook's policy loader notices the file; bounded wait on the observable result, not a sleep.
    deadline = time.monotonic() + 30
    while True:
        result = mine.researcher.apply(
            {**labelled, "metadata": {**labelled["metadata"], "name": "probe2"}}, mine.namespace
        )
        if result.returncode == 1 and _refused_by_probe(result.stderr):
            break
        if result.returncode == 0:
            mine.researcher.kubectl("delete", "pod", "probe2", "-n", mine.namespace, "--wait=false")
        assert time.monotonic() < deadline, f"new policy not enforced after 30s: {result.stderr}"
        time.sleep(0.5)
    assert "[e2e-reload] refused by a policy added at run time. Fix: drop the label" in result.stderr
    # Loading the policy kept OPA's copy of the tenants (with OPA's --watch, a reload dropped it and
    # labgate pushed it again), so tenant rules still hold right after the reload.
    outsider = mine.researcher.apply(pod_manifest("sneaky"), theirs.namespace)
    assert outsider.returncode == 1
    assert "[tenant-membership]" in outsider.stderr
    assert mine.researcher.apply(pod_manifest("fine"), mine.namespace).returncode == 0


def test_a_broken_policy_never_replaces_the_working_one(
    stack: LabgateStack, tenants: TenantFactory, probe_rule: Path
) -> None:
    mine, theirs = tenants.create(), tenants.create()
    tenants.open_rbac(theirs.namespace, *mine.researcher.groups)
    probe_rule.write_text("package labgate.rules.e2e_reload\n\nviolation contains x if {\n")  # does not parse
    # OPA refuses the broken file and keeps deciding with the policies it had: nothing is refused
    # for want of a policy, and the tenant rules still hold.
    for i in range(5):
        assert mine.researcher.apply(pod_manifest(f"ok-{i}"), mine.namespace).returncode == 0
        outsider = mine.researcher.apply(pod_manifest(f"no-{i}"), theirs.namespace)
        assert outsider.returncode == 1
        assert "[tenant-membership]" in outsider.stderr
        assert "policy-engine-unavailable" not in outsider.stderr


def _events(stack: LabgateStack, reason: str) -> list[dict[str, Any]]:
    listed = stack.admin_kubectl(
        "get", "events", "-n", LABGATE_NAMESPACE, f"--field-selector=reason={reason}", "-o", "json"
    )
    items: list[dict[str, Any]] = json.loads(listed)["items"]
    return items


def test_a_broken_policy_is_an_event_on_the_policies_configmap(stack: LabgateStack) -> None:
    """Besides /readyz and the metrics: `kubectl describe configmap <release>-policies` shows it."""
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "labgate-policies", "namespace": LABGATE_NAMESPACE},
    }  # as the chart installs it (the local stack's webhooks read a directory instead)
    stack.admin_kubectl("apply", "-f", "-", stdin=json.dumps(configmap))
    broken = stack.policy_dir / "labgate" / "rules" / "e2e_event_probe" / "probe.rego"
    broken.parent.mkdir()
    try:
        broken.write_text("package labgate.rules.e2e_event_probe\n\nviolation contains {{{\n")

        def failures() -> list[dict[str, Any]]:
            return [
                e
                for e in _events(stack, "PolicyReloadFailed")
                if "e2e_event_probe/probe.rego" in e["message"]
            ]

        eventually(lambda: failures() != [], what="a PolicyReloadFailed Event")
        event = failures()[0]
        assert event["type"] == "Warning"
        assert event["involvedObject"]["kind"] == "ConfigMap"
        assert event["involvedObject"]["name"] == "labgate-policies"
        assert "rego_parse_error" in event["message"]
        assert "still serving revision" in event["message"]
        assert "Fix:" in event["message"]
        described = stack.admin_kubectl("describe", "configmap", "labgate-policies", "-n", LABGATE_NAMESPACE)
        assert "PolicyReloadFailed" in described
        reloaded_before = len(_events(stack, "PolicyReloaded"))
    finally:
        broken.unlink(missing_ok=True)
        broken.parent.rmdir()
    # The fix is told too.
    eventually(
        lambda: len(_events(stack, "PolicyReloaded")) > reloaded_before,
        what="a PolicyReloaded Event after the fix",
    )
    assert any(
        e["type"] == "Normal" and "after a failed revision" in e["message"]
        for e in _events(stack, "PolicyReloaded")
    )
    stack.admin_kubectl(
        "delete", "configmap", "labgate-policies", "-n", LABGATE_NAMESPACE, "--ignore-not-found"
    )
