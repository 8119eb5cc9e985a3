"""The researcher's view and the traps of issue 12 on the real control plane: namespaces only under
one's own tenant, the Tenant's usage columns and who may read it, the record of every mutation, an
unknown rule id in spec.enforcement, a Job whose pods will wait, and a broken policy made visible."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.stack import LabgateStack
from tests.e2e.conftest import TenantFactory
from tests.e2e.test_reconciler import eventually

pytestmark = pytest.mark.tenancy


def _gpu_pod(name: str, gpus: int, model: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.product": model},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.lab.example/research/trainer:v1",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}},
                }
            ],
        },
    }


def _status_gpu(stack: LabgateStack, tenant: str) -> dict[str, Any]:
    result = stack.cluster_kubectl("get", "tenant", tenant, "-o", "json")
    gpu: dict[str, Any] = (
        json.loads(result.stdout).get("status", {}).get("gpu", {}) if result.returncode == 0 else {}
    )
    return gpu


def test_researchers_create_namespaces_only_under_their_own_tenant(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    mine = tenants.create(spec_extra={"namespaces": {"names": [], "prefix": "mine-"}})
    tenants.create(spec_extra={"namespaces": {"names": [], "prefix": "theirs-"}})
    ours = f"mine-{mine.name}"
    try:
        # Regression: both were created, as namespaces of no tenant (orphans) or outside one's tenant.
        orphan = mine.researcher.kubectl("create", "namespace", f"scratch-{mine.name}")
        assert orphan.returncode != 0
        assert "[namespace-orphan]" in orphan.stderr
        assert "it would belong to no tenant" in orphan.stderr
        assert "[namespace-untenanted]" not in orphan.stderr  # said once (issue 22 item 12)
        foreign = mine.researcher.kubectl("create", "namespace", f"theirs-{mine.name}")
        assert foreign.returncode != 0
        assert "[namespace-orphan]" in foreign.stderr
        assert "under tenant" in foreign.stderr
        # The legitimate action it must not break: a namespace under one's own prefix, labelled for us.
        created = mine.researcher.kubectl("create", "namespace", ours)
        assert created.returncode == 0, created.stderr
        labels = json.loads(stack.admin_kubectl("get", "namespace", ours, "-o", "json"))["metadata"]["labels"]
        assert labels["labgate.io/tenant"] == mine.name
    finally:
        stack.admin_kubectl("delete", "namespace", ours, "--wait=false", "--ignore-not-found")


def test_tenant_shows_gpus_per_model_and_members_read_only_their_own(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 8, "models": {"h100": 4, "a100": 4}}})
    other = tenants.create()
    applied = team.researcher.apply(_gpu_pod("train-1", 2, "h100"), team.namespace)
    assert applied.returncode == 0, applied.stderr
    # No scheduler here: the pod stays Pending, admitted and counted, and the summary says it holds
    # its GPUs while it waits for a node (issue 22 item 6).
    eventually(
        lambda: (
            _status_gpu(stack, team.name).get("summary")
            == "a100 0/4, h100 2/4, total 2/8; 2 held by 1 pod not yet scheduled: train-1"
        ),
        what="status.gpu.summary",
    )
    assert _status_gpu(stack, team.name)["unscheduledPods"] == ["train-1"]
    eventually(lambda: _status_gpu(stack, team.name).get("pendingPods") == 1, what="one pod pending")
    assert _status_gpu(stack, team.name)["preemptible"] == 0
    shown = team.researcher.kubectl("get", "tenant", team.name)
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()
    # QUEUED and QUEUED GPUS are Kueue's (empty without it: nothing is ever queued).
    assert header.split()[:10] == [
        "NAME",
        "NAMESPACES",
        "GPUS",
        "USED/LIMIT",
        "PREEMPTIBLE",
        "PENDING",
        "QUEUED",
        "QUEUED",
        "GPUS",
        "READY",
    ]
    assert "a100 0/4, h100 2/4, total 2/8" in row
    print(shown.stdout)  # the real output, for docs/researchers.md
    # Their own Tenant by name (also as a list with a field selector); not another's, not all of them.
    selected = team.researcher.kubectl("get", "tenants", "--field-selector", f"metadata.name={team.name}")
    assert selected.returncode == 0, selected.stderr
    assert team.researcher.kubectl("get", "tenant", other.name).returncode != 0
    assert team.researcher.kubectl("get", "tenants").returncode != 0


def test_every_mutation_is_recorded_on_the_pod(stack: LabgateStack, tenants: TenantFactory) -> None:
    team = tenants.create()
    assert team.researcher.apply(_gpu_pod("recorded", 1, "h100"), team.namespace).returncode == 0
    pod = json.loads(stack.admin_kubectl("get", "pod", "recorded", "-n", team.namespace, "-o", "json"))
    record = json.loads(pod["metadata"]["annotations"]["labgate.io/mutations"])
    assert {"op": "add", "path": "/spec/automountServiceAccountToken", "rule": "token-automount"} in record
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_a_misspelt_rule_id_in_spec_enforcement_is_refused(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create()
    tenant = json.loads(stack.admin_kubectl("get", "tenant", team.name, "-o", "json"))
    tenant["spec"]["enforcement"] = {"gpu-qouta": "warn"}
    for key in ("resourceVersion", "managedFields", "uid", "generation", "creationTimestamp"):
        tenant["metadata"].pop(key, None)
    tenant.pop("status", None)
    refused = stack.cluster_kubectl("apply", "-f", "-", manifest=tenant)
    assert refused.returncode != 0
    assert '[tenant-enforcement-unknown] Tenant "' in refused.stderr
    assert '"gpu-qouta", which is not a rule id' in refused.stderr
    assert 'Did you mean "gpu-quota"?' in refused.stderr
    tenant["spec"]["enforcement"] = {"gpu-quota": "warn"}
    assert stack.cluster_kubectl("apply", "-f", "-", manifest=tenant).returncode == 0


def test_a_job_whose_pods_will_wait_is_announced_when_applied(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 8, "models": {"h100": 8}}})
    assert team.researcher.apply(_gpu_pod("running", 6, "h100"), team.namespace).returncode == 0
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sweep"},
        "spec": {
            "parallelism": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"nvidia.com/gpu.product": "h100"},
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.lab.example/research/trainer:v1",
                            "resources": {"limits": {"nvidia.com/gpu": 2}},
                        }
                    ],
                }
            },
        },
    }
    # Regression: the Job was created silently and its pods looped on FailedCreate in its events.
    result = team.researcher.apply(job, team.namespace)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "[gpu-quota-pending]" in line]
    assert warnings, result.stderr
    assert all(len(line.removeprefix("Warning: ")) < 120 for line in warnings)
    text = " ".join(line.split("] ", 1)[1].removeprefix("... ") for line in warnings)
    assert "uses 6 of 8 h100 GPUs now, so only 1 pod can start now" in text
    assert "Fix: wait for running pods to finish" in text


def _readyz(stack: LabgateStack) -> dict[str, Any]:
    url = f"{stack.health_urls[stack.webhook_urls[0]]}/readyz"  # the replica's plain-HTTP health port
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310
            body: dict[str, Any] = json.loads(response.read())
    except urllib.error.HTTPError as err:
        body = json.loads(err.read())
    return body


def test_a_broken_policy_shows_in_readiness_and_the_old_one_keeps_deciding(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create()
    good = _readyz(stack)["policy"]
    assert good["error"] is None
    assert good["revision"]
    broken: Path = stack.policy_dir / "labgate" / "rules" / "e2e_broken" / "broken.rego"
    broken.parent.mkdir()
    try:
        broken.write_text("package labgate.rules.e2e_broken\n\nviolation contains {{{\n")
        eventually(lambda: _readyz(stack)["policy"]["error"] is not None, what="the error in /readyz")
        policy = _readyz(stack)["policy"]
        assert "labgate/rules/e2e_broken/broken.rego" in policy["error"]
        assert "rego_parse_error" in policy["error"]
        assert policy["revision"] == good["revision"]
        assert (
            team.researcher.apply(
                yaml.safe_load("{apiVersion: v1, kind: ConfigMap, metadata: {name: still-decided}}"),
                team.namespace,
            ).returncode
            == 0
        )
    finally:
        broken.unlink(missing_ok=True)
        broken.parent.rmdir()
    eventually(lambda: _readyz(stack)["policy"]["error"] is None, what="the error cleared")


def test_researchers_scale_their_own_workloads_and_only_theirs(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """`kubectl scale` with the RBAC labgate provisions (issue 22 item 10): the Scale passes the
    webhook (judged for who asks and where; each pod a new count makes is judged as it is created),
    and another tenant's workload stays out of reach."""
    mine, theirs = tenants.create(), tenants.create()
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "notebook"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "notebook"}},
            "template": {
                "metadata": {"labels": {"app": "notebook"}},
                "spec": {"containers": [{"name": "main", "image": "registry.lab.example/research/nb:v1"}]},
            },
        },
    }
    for tenant in (mine, theirs):
        created = tenant.researcher.apply(deployment, tenant.namespace)
        assert created.returncode == 0, created.stderr
    scaled = mine.researcher.kubectl("scale", "deployment/notebook", "-n", mine.namespace, "--replicas=3")
    assert scaled.returncode == 0, scaled.stderr
    live = json.loads(
        stack.admin_kubectl("get", "deployment", "notebook", "-n", mine.namespace, "-o", "json")
    )
    assert live["spec"]["replicas"] == 3
    foreign = mine.researcher.kubectl("scale", "deployment/notebook", "-n", theirs.namespace, "--replicas=3")
    assert foreign.returncode != 0
    assert "forbidden" in foreign.stderr.lower()
    # Kubernetes' own RBAC answers, in the words docs/researchers.md shows: no [rule-id].
    assert 'cannot get resource "deployments" in API group "apps"' in foreign.stderr, foreign.stderr
    assert "[" not in foreign.stderr.split("forbidden", 1)[1]
    untouched = json.loads(
        stack.admin_kubectl("get", "deployment", "notebook", "-n", theirs.namespace, "-o", "json")
    )
    assert untouched["spec"]["replicas"] == 1


# Issue 22 items 5 and 7 (written while the e2e tools were still building: not yet run here).
def test_what_labgate_changed_is_said_only_when_the_pod_is_admitted(tenants: TenantFactory) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 8, "models": {"h100": 8}}})
    refused = team.researcher.apply(_gpu_pod("too-big", 16, "h100"), team.namespace)
    assert refused.returncode != 0
    assert "[gpu-quota]" in refused.stderr
    assert "labgate turned off token automount" not in refused.stderr  # said of a pod that never was
    admitted = team.researcher.apply(_gpu_pod("fits", 1, "h100"), team.namespace)
    assert admitted.returncode == 0, admitted.stderr
    assert 'labgate turned off token automount (service account "default") for pod' in admitted.stderr


def test_lowering_a_quota_below_the_usage_says_what_happens(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 8, "models": {"h100": 8}}})
    assert team.researcher.apply(_gpu_pod("running", 4, "h100"), team.namespace).returncode == 0
    lowered = stack.cluster_kubectl(
        "patch", "tenant", team.name, "--type=merge", "-p", '{"spec":{"gpu":{"models":{"h100":2}}}}'
    )
    assert lowered.returncode == 0, lowered.stderr
    assert f'[tenant-quota-below-usage] Tenant "{team.name}" uses 4 h100, above the new limit 2' in " ".join(
        lowered.stderr.replace("Warning: ", "").replace("[tenant-quota-below-usage] ...", "").split()
    )
