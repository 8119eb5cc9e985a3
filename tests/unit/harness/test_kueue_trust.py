"""LabgateStack(kueue=True) serves policies that trust Kueue without a call of its caller's: the copy
devcluster.kueue.trusting_kueue makes (what the chart's kueue.enabled renders)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from devcluster.kueue import (
    KUEUE_NAMESPACE,
    KUEUE_USER,
    kueue_configuration,
    kueue_webhook_configurations,
    trusting_kueue,
)
from devcluster.stack import POLICY_DIR


def _config(policy_dir: Path, *parts: str) -> dict[str, Any]:
    return dict(json.loads((policy_dir.joinpath("labgate", "config", *parts, "data.json")).read_text()))


def test_the_copy_trusts_kueue_and_leaves_the_shipped_policies_alone(tmp_path: Path) -> None:
    shipped = _config(POLICY_DIR)
    copy = trusting_kueue(POLICY_DIR, tmp_path / "policies")
    assert f"system:serviceaccounts:{KUEUE_NAMESPACE}" in _config(copy)["trusted_groups"]
    queue = _config(copy, "queue")
    assert queue["managed_by_kueue"] is True
    assert queue["kueue_users"] == [KUEUE_USER]
    assert _config(POLICY_DIR) == shipped


def test_every_tenant_false_leaves_each_tenant_to_opt_in(tmp_path: Path) -> None:
    copy = trusting_kueue(POLICY_DIR, tmp_path / "policies", every_tenant=False)
    assert _config(copy, "queue")["managed_by_kueue"] is False


def test_a_restarted_stack_trusts_its_own_copy_again_unchanged(tmp_path: Path) -> None:
    copy = trusting_kueue(POLICY_DIR, tmp_path / "policies")
    before = _config(copy)
    assert trusting_kueue(copy, copy) == copy
    assert _config(copy) == before


def test_pod_integration_is_said_to_the_policies_and_off_by_default(tmp_path: Path) -> None:
    assert _config(trusting_kueue(POLICY_DIR, tmp_path / "plain"), "queue")["pod_integration"] is False
    copy = trusting_kueue(POLICY_DIR, tmp_path / "pods", pod_integration=True)
    assert _config(copy, "queue")["pod_integration"] is True


def test_kueue_runs_its_pod_integrations_and_their_webhooks_only_when_asked(tmp_path: Path) -> None:
    def frameworks(pod_integration: bool) -> list[str]:
        config = kueue_configuration(
            webhook_port=1, health_port=2, metrics_port=3, cert_dir=tmp_path, pod_integration=pod_integration
        )
        return list(config["integrations"]["frameworks"])

    def webhooks(pod_integration: bool) -> dict[str, set[str]]:
        configurations = kueue_webhook_configurations(
            "https://127.0.0.1:9", b"ca", pod_integration=pod_integration
        )
        return {
            c["kind"]: {r for w in c["webhooks"] for rule in w["rules"] for r in rule["resources"]}
            for c in configurations
        }

    assert frameworks(False) == ["batch/job"]
    assert frameworks(True) == ["batch/job", "pod", "deployment", "statefulset"]
    assert not {"pods", "deployments", "statefulsets"} & set().union(*webhooks(False).values())
    for resources in webhooks(True).values():
        assert {"jobs", "pods", "deployments", "statefulsets"} <= resources


def test_webhook_names_have_no_empty_segment() -> None:
    names = [
        w["name"]
        for c in kueue_webhook_configurations("https://127.0.0.1:9", b"ca", pod_integration=True)
        for w in c["webhooks"]
    ]
    assert "mutate.v1.pod.kueue.x-k8s.io" in names
    assert all(".." not in n for n in names), names


def test_kueue_asks_one_of_the_tenants_total_for_each_gpu(tmp_path: Path) -> None:
    """The stack's Kueue counts the cap across a tenant's flavors that its ClusterQueues hold."""
    config = kueue_configuration(webhook_port=1, health_port=2, metrics_port=3, cert_dir=tmp_path)
    assert config["resources"]["transformations"] == [
        {"input": "nvidia.com/gpu", "strategy": "Retain", "outputs": {"labgate.io/gpu-total": "1"}}
    ]
