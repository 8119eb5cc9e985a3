"""The infra team changes a policy on disk; the running webhook enforces it at the next kubectl apply,
without a restart, and keeps every tenant it knew (OPA drops pushed data when it reloads)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster.stack import LabgateStack
from tests.e2e.conftest import TenantFactory, pod_manifest

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
    # OPA's --watch notices the file; bounded wait on the observable result, not a sleep.
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
    # The reload dropped OPA's copy of the tenants; labgate noticed and pushed it again, so tenant
    # rules still hold right after the reload.
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
