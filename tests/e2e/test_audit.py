"""The scheduled audit against the real stack: after the infra team lowers a tenant's GPU quota, a
Job admitted earlier shows as a violation in its namespace's PolicyReport (which the researcher
reads) and in `labgate_audit_violations`; raising the quota again clears both."""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.processes import ManagedProcess, free_port, spawn, wait_until
from devcluster.stack import LabgateStack, opa_argv
from devcluster.tools import REPO_ROOT, ensure_tools
from tests.e2e.conftest import TenantFactory, TenantUnderTest
from tests.e2e.test_reconciler import eventually

pytestmark = pytest.mark.quota


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
        return str(response.read().decode())


@pytest.fixture
def audit(stack: LabgateStack, tmp_path: Path) -> Iterator[str]:
    """`labgate audit --every 1` as its own process with its own OPA (as the chart's audit pod);
    the URL of its /metrics."""
    opa_port, metrics_port = free_port(), free_port()
    opa_url = f"http://127.0.0.1:{opa_port}"
    opa = spawn(
        tmp_path,
        "audit-opa",
        opa_argv(str(ensure_tools("opa")["opa"].binary()), port=opa_port, policy_dir=stack.policy_dir),
    )
    processes: list[ManagedProcess] = [opa]
    try:
        wait_until(
            lambda: json.loads(_get(f"{opa_url}/health")) == {}, what="audit OPA", timeout=30, watch=[opa]
        )
        loop = spawn(
            tmp_path,
            "audit",
            [
                sys.executable,
                "-m",
                "cli.main",
                "audit",
                "--every=1",
                f"--opa-url={opa_url}",
                f"--policies={stack.policy_dir}",
                f"--kubeconfig={stack.admin_kubeconfig}",
                "--write-reports",
                f"--metrics-port={metrics_port}",
                "--metrics-address=127.0.0.1",
            ],
            # This checkout's command line, wherever pytest was started from (as the stack's HostLauncher).
            env={"PYTHONPATH": str(REPO_ROOT)},
        )
        processes.append(loop)
        metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        wait_until(
            lambda: 'labgate_audit_runs_total{result="ok"}' in _get(metrics),
            what="a first audit run",
            timeout=60,
            watch=processes,
        )
        yield metrics
    finally:
        for process in reversed(processes):
            process.stop()


def _report(team: TenantUnderTest) -> dict[str, Any]:
    """The audit's PolicyReport, read by the researcher (labgate's role lets members read them)."""
    result = team.researcher.kubectl(
        "get", "policyreport", "labgate-audit", "-n", team.namespace, "-o", "json"
    )
    return json.loads(result.stdout) if result.returncode == 0 else {}


def _fails(team: TenantUnderTest) -> list[dict[str, Any]]:
    return [r for r in _report(team).get("results") or [] if r["result"] == "fail"]


def _violations(metrics: str, tenant: str) -> dict[str, float]:
    found = {}
    for line in _get(metrics).splitlines():
        if line.startswith("labgate_audit_violations{") and f'tenant="{tenant}"' in line:
            labels, value = line.rsplit(" ", 1)
            found[labels] = float(value)
    return found


JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "finetune"},
    "spec": {
        "parallelism": 2,
        "completions": 2,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "train",
                        "image": "registry.lab.example/research/trainer:v1",
                        "resources": {"limits": {"nvidia.com/gpu": 4}},
                    }
                ],
            }
        },
    },
}


def test_a_lowered_quota_shows_as_an_audit_violation_in_the_report_and_the_metrics(
    stack: LabgateStack, tenants: TenantFactory, audit: str
) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 8}})
    applied = team.researcher.apply(JOB, team.namespace)
    assert applied.returncode == 0, applied.stderr
    # Fits: the audit writes the tenant's report, with nothing failing, and no violation metric.
    eventually(lambda: _report(team) != {}, what="the audit's report in the namespace", timeout=60)
    assert _fails(team) == []
    assert _violations(audit, team.name) == {}

    stack.admin_kubectl("patch", "tenant", team.name, "--type=merge", "-p", '{"spec":{"gpu":{"total":4}}}')
    eventually(lambda: _fails(team) != [], what="the violation in the PolicyReport", timeout=60)
    (failing,) = _fails(team)
    assert failing["rule"] == "gpu-quota-unfit"
    assert failing["properties"]["mode"] == "enforce"
    assert failing["resources"][0]["kind"] == "Job"
    assert failing["resources"][0]["name"] == "finetune"
    assert failing["message"].startswith(
        f'[gpu-quota-unfit] Job "finetune" runs 2 pods × 4 GPUs = 8; tenant "{team.name}"'  # noqa: RUF001 - the message's own sign
    )
    assert "Fix:" in failing["message"]
    assert _report(team)["summary"]["fail"] == 1
    eventually(lambda: _violations(audit, team.name) != {}, what="the violation metric", timeout=30)
    assert _violations(audit, team.name) == {
        f'labgate_audit_violations{{mode="enforce",rule="gpu-quota-unfit",tenant="{team.name}"}}': 1.0
    }

    # The quota raised again: the next run clears the report and the metric.
    stack.admin_kubectl("patch", "tenant", team.name, "--type=merge", "-p", '{"spec":{"gpu":{"total":8}}}')
    eventually(lambda: _fails(team) == [], what="the violation gone from the report", timeout=60)
    eventually(lambda: _violations(audit, team.name) == {}, what="the violation metric gone", timeout=30)


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "registry.lab.example/research/trainer:v1"}],
            **spec,
        },
    }


# Issue 22 item 2 (written while the e2e tools were still building: not yet run here). Every bound
# Pod was refused [placement-node-name] "remove spec.nodeName": the scheduler had set it.
def test_a_pod_bound_by_the_scheduler_is_not_refused_for_its_node_name(
    stack: LabgateStack, tenants: TenantFactory, audit: str
) -> None:
    team = tenants.create()
    applied = team.researcher.apply(_pod("scheduled"), team.namespace)
    assert applied.returncode == 0, applied.stderr
    # What kube-scheduler does: a Binding (pods/binding), which sets spec.nodeName and no managed field.
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "scheduled"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-1"},
    }
    stack.admin_kubectl("create", "-n", team.namespace, "-f", "-", stdin=json.dumps(binding))
    # The positive control: a pod whose creator named the node itself (the cluster admin may) is a finding.
    stack.admin_kubectl(
        "create", "-n", team.namespace, "-f", "-", stdin=json.dumps(_pod("pinned", nodeName="gpu-node-1"))
    )
    eventually(
        lambda: any(r["resources"][0]["name"] == "pinned" for r in _fails(team)),
        what="the pinned pod's finding in the audit's report",
        timeout=60,
    )
    findings = {(r["resources"][0]["name"], r["rule"]) for r in _fails(team)}
    assert ("pinned", "placement-node-name") in findings
    assert not any(name == "scheduled" for name, _ in findings), findings
