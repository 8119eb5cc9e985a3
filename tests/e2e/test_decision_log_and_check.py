"""Audit and offline checks against the live webhook: the decision log verifies and catches an edited
record; `labgate check` gives the same verdict and message as the webhook on the policy samples."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.offline_admission import OfflineOpa, admission_request, facts_from_manifests, load_manifests
from cli.policy_samples import find_samples, inventory_path, load_sample
from devcluster.kubectl import kubectl
from devcluster.stack import LabgateStack
from devcluster.tools import REPO_ROOT, binary
from tests.e2e.conftest import TenantFactory, pod_manifest

pytestmark = pytest.mark.chart

POLICIES = REPO_ROOT / "policies"


def labgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, check=False
    )


def test_the_decision_log_records_verifies_and_detects_an_edit(
    stack: LabgateStack, tenants: TenantFactory, tmp_path: Path
) -> None:
    mine, theirs = tenants.create(), tenants.create()
    tenants.open_rbac(theirs.namespace, *mine.researcher.groups)
    assert mine.researcher.apply(pod_manifest("audited"), mine.namespace).returncode == 0
    assert mine.researcher.apply(pod_manifest("audited"), theirs.namespace).returncode == 1
    log = stack.workdir / "logs" / "decisions-0.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    refused = [
        r for r in records if r["object"].get("namespace") == theirs.namespace and r["verdict"] == "refused"
    ]
    assert refused, "the refusal is in the log"
    assert refused[-1]["user"] == mine.researcher.name
    assert "tenant-membership" in json.dumps(refused[-1])
    ok = labgate("decisions", "verify", str(log))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"ok: {len(records)} records" in ok.stdout
    # Someone turns a refusal into an admission after the fact.
    copy = tmp_path / "edited.jsonl"
    lines = log.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if json.loads(line)["uid"] == refused[-1]["uid"])
    lines[index] = lines[index].replace('"verdict":"refused"', '"verdict":"allowed"')
    copy.write_text("\n".join(lines) + "\n")
    tampered = labgate("decisions", "verify", str(copy))
    assert tampered.returncode == 1
    assert f"TAMPERED: line {index + 1}" in tampered.stdout + tampered.stderr


def test_metrics_count_refusals_by_rule_and_tenant(stack: LabgateStack, tenants: TenantFactory) -> None:
    mine, theirs = tenants.create(), tenants.create()
    tenants.open_rbac(theirs.namespace, *mine.researcher.groups)
    assert mine.researcher.apply(pod_manifest("counted"), theirs.namespace).returncode == 1
    # /metrics is on the plain-HTTP probe port (the admission port wants the apiserver's certificate).
    metrics = f"{stack.health_urls[stack.webhook_urls[0]]}/metrics"
    with urllib.request.urlopen(metrics, timeout=5) as response:  # noqa: S310
        text = response.read().decode()
    assert (
        f'labgate_admission_rule_findings_total{{mode="enforce",rule="tenant-membership",tenant="{theirs.name}"}} 1.0'
        in text
    )
    assert (
        f'labgate_admission_requests_total{{tenant="{theirs.name}",verdict="refused",webhook="validate"}} 1.0'
        in text
    )
    assert 'labgate_admission_duration_seconds_count{webhook="validate"}' in text


@pytest.fixture(scope="module")
def sample_tenants(stack: LabgateStack) -> Iterator[list[dict[str, Any]]]:
    """The samples' tenants in the live cluster, and RBAC that lets every sample user reach the webhook."""
    manifests = load_manifests([inventory_path(POLICIES)])
    stack.admin_kubectl("apply", "-f", str(inventory_path(POLICIES)))
    for tenant in (m for m in manifests if m["kind"] == "Tenant"):
        stack.admin_kubectl(
            "wait", "--for=condition=Ready", "--timeout=60s", f"tenant/{tenant['metadata']['name']}"
        )
    samples = [load_sample(p) for p in find_samples(POLICIES)]
    subjects = [
        {"kind": "User", "name": s.user.username, "apiGroup": "rbac.authorization.k8s.io"} for s in samples
    ]
    open_rbac = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "e2e-sample-actors"},
            "rules": [
                {"apiGroups": ["", "batch", "apps", "networking.k8s.io"], "resources": ["*"], "verbs": ["*"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "e2e-sample-actors"},
            "subjects": subjects,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "e2e-sample-actors",
            },
        },
    ]
    stack.admin_kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(open_rbac))
    try:
        yield manifests
    finally:
        stack.admin_kubectl(
            "delete", "clusterrolebinding,clusterrole", "e2e-sample-actors", "--ignore-not-found"
        )
        stack.admin_kubectl(
            "delete", "-f", str(inventory_path(POLICIES)), "--wait=false", "--ignore-not-found"
        )


def _live_comparable(path: Path) -> bool:
    sample = load_sample(path)
    # Usage, image facts and updates of existing objects cannot be replayed as one kubectl create;
    # nor can a case its sample marks offline_only (with the reason).
    return (
        sample.offline_only is None
        and sample.gpu_usage is None
        and sample.tenant_usage is None
        and sample.images is None
        and sample.operation == "CREATE"
        and sample.old_object is None
    )


@pytest.mark.parametrize(
    "path", [p for p in find_samples(POLICIES) if _live_comparable(p)], ids=lambda p: p.stem
)
def test_labgate_check_says_what_the_live_webhook_says(
    stack: LabgateStack, sample_tenants: list[dict[str, Any]], path: Path
) -> None:
    sample = load_sample(path)
    assert sample.object is not None
    opa = OfflineOpa(
        binary("opa"), POLICIES, facts_from_manifests(sample_tenants, platform_namespace="labgate-system")
    )
    with opa:
        offline = opa.check(
            admission_request(
                obj=sample.object,
                username=sample.user.username,
                groups=sample.user.groups,
                namespace=sample.namespace,
                operation="CREATE",
                uid=f"e2e-{path.stem}",
            )
        )
    who = stack.kubeconfig_for(sample.user.username, tuple(sample.user.groups))
    args = ["create", "-f", "-"] + (["-n", sample.namespace] if sample.namespace else [])
    live = kubectl(who, *args, stdin=json.dumps(sample.object))
    try:
        assert (live.returncode == 0) == offline.is_allowed, (
            f"live: {live.stderr}\ncheck: {offline.visible_text}"
        )
        if not offline.is_allowed:
            assert offline.response.status is not None
            assert offline.response.status.message in live.stderr
    finally:
        if live.returncode == 0:
            kind = sample.object["kind"].lower()
            name = sample.object["metadata"]["name"]
            delete = ["delete", kind, name, "--wait=false"] + (
                ["-n", sample.namespace] if sample.namespace else []
            )
            stack.cluster_kubectl(*delete)
