"""`labgate audit` and `labgate policy diff` on a snapshot: the real command and the pinned OPA."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.tools import REPO_ROOT

POLICIES = REPO_ROOT / "policies"


def _snapshot(h100: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "labgate.io/v1alpha1",
                "kind": "Tenant",
                "metadata": {"name": "team-a"},
                "spec": {
                    "members": {"researchers": [{"kind": "Group", "name": "team-a"}]},
                    "namespaces": {"names": ["team-a"], "prefix": "team-a-"},
                    "gpu": {"total": 16, "models": {"h100": h100}},
                },
            },
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "finetune", "namespace": "team-a", "labels": {"owner": "alice"}},
                "spec": {
                    "parallelism": 2,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "nodeSelector": {"nvidia.com/gpu.product": "h100"},
                            "priorityClassName": "research-default",
                            "automountServiceAccountToken": False,
                            "containers": [
                                {
                                    "name": "train",
                                    "image": "docker.io/lab/trainer:v1",
                                    "resources": {"limits": {"nvidia.com/gpu": 4}},
                                }
                            ],
                        }
                    },
                },
            },
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "evaluate", "namespace": "team-a", "labels": {"owner": "alice"}},
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "main", "image": "registry.lab.example/x:v1"}],
                        }
                    }
                },
            },
            {
                "apiVersion": "labgate.io/v1alpha1",
                "kind": "TenantGpuUsage",
                "metadata": {"name": "team-a"},
                "usage": {"total": 8, "by_model": {"h100": 8}},
            },
        ],
    }


def labgate(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
        timeout=300,
    )


@pytest.fixture
def snapshots(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name, h100 in (("fits", 8), ("lowered", 4)):
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(_snapshot(h100)))
    return paths


@pytest.mark.tools  # `labgate audit` and `policy diff` run opa
def test_audit_finds_a_job_that_no_longer_fits_after_its_quota_was_lowered(
    snapshots: dict[str, Path],
) -> None:
    before = labgate("audit", "--snapshot", snapshots["fits"], "--policies", POLICIES, "-o", "json")
    assert before.returncode == 0, before.stdout + before.stderr
    assert json.loads(before.stdout)["findings"] == []
    after = labgate("audit", "--snapshot", snapshots["lowered"], "--policies", POLICIES, "-o", "json")
    assert after.returncode == 1, after.stdout + after.stderr
    [finding] = json.loads(after.stdout)["findings"]
    assert finding["object"] == "Job team-a/finetune"
    assert finding["rule"] == "gpu-quota-unfit"
    assert finding["mode"] == "enforce"
    assert 'tenant "team-a" has 4 h100 GPUs' in finding["message"]


def _candidate(tmp_path: Path) -> Path:
    candidate = tmp_path / "candidate"
    shutil.copytree(POLICIES, candidate)
    config = candidate / "labgate/config/data.json"
    settings = json.loads(config.read_text())
    settings["allowed_registries"] = ["registry.lab.example"]  # tightened: docker.io no longer
    settings["default_priority_class"] = "research-low"  # another mutation
    config.write_text(json.dumps(settings))
    # ...of a class the candidate also lets research pods use (else priority-class refuses them).
    scheduling_file = candidate / "labgate/config/scheduling/data.json"
    scheduling = json.loads(scheduling_file.read_text())
    scheduling["research_priority_classes"].append("research-low")
    scheduling_file.write_text(json.dumps(scheduling))
    return candidate


@pytest.mark.tools  # `labgate audit` and `policy diff` run opa
def test_policy_diff_names_who_is_newly_refused_and_whose_mutation_changes(
    snapshots: dict[str, Path], tmp_path: Path
) -> None:
    log = tmp_path / "decisions.jsonl"
    log.write_text(
        json.dumps(
            {
                "user": "alice",
                "groups": ["team-a", "system:authenticated"],
                "operation": "CREATE",
                "object": {"group": "batch", "kind": "Job", "name": "finetune", "namespace": "team-a"},
            }
        )
        + "\n"
        + json.dumps(
            {
                "user": "alice",
                "groups": ["team-a"],
                "operation": "CREATE",
                "object": {"group": "", "kind": "Pod", "name": "deleted-since", "namespace": "team-a"},
            }
        )
        + "\n"
    )
    candidate = _candidate(tmp_path)
    result = labgate(
        "policy", "diff", "--policies", candidate, "--current", POLICIES,
        "--snapshot", snapshots["fits"], "--decision-log", log, "-o", "json",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["decision_log_requests"] == 1
    assert report["decision_log_not_replayable"] == 1
    changes = {(c["change"], c["rule"], c["object"], c["source"]) for c in report["changes"]}
    assert ("newly refused", "image-registry", "Job team-a/finetune", "cluster") in changes
    assert ("newly refused", "image-registry", "Job team-a/finetune", "decision-log") in changes
    assert ("different mutation", "mutation", "Job team-a/evaluate", "cluster") in changes
    # The text groups by change, rule and tenant.
    text = labgate(
        "policy",
        "diff",
        "--policies",
        candidate,
        "--current",
        POLICIES,
        "--snapshot",
        snapshots["fits"],
    ).stdout
    assert "newly refused (1):\n  [image-registry] tenant team-a:\n    Job team-a/finetune" in text


@pytest.mark.tools  # `labgate audit` and `policy diff` run opa
def test_policy_diff_of_identical_policies_changes_nothing(snapshots: dict[str, Path]) -> None:
    result = labgate(
        "policy", "diff", "--policies", POLICIES, "--current", POLICIES, "--snapshot", snapshots["fits"]
    )
    assert result.returncode == 0, result.stderr
    assert "no change" in result.stdout


def test_policy_reports_hold_every_finding_per_namespace_and_clear_fixed_ones() -> None:
    from cli.policy_impact import policy_reports

    rows = [
        {
            "tenant": "team-a",
            "object": "Job team-a/finetune",
            "resource": {"apiVersion": "batch/v1", "kind": "Job", "name": "finetune", "namespace": "team-a"},
            "rule": "gpu-quota-unfit",
            "mode": "enforce",
            "message": "[gpu-quota-unfit] ...",
        },
        {
            "tenant": "team-a",
            "object": "Tenant team-a",
            "resource": {"apiVersion": "labgate.io/v1alpha1", "kind": "Tenant", "name": "team-a"},
            "rule": "tenant-enforcement-unknown",
            "mode": "warn",
            "message": "[tenant-enforcement-unknown] ...",
        },
    ]
    reports = {
        r["metadata"]["namespace"]: r for r in policy_reports(rows, ["team-a", "team-a-data"], now=1.5)
    }
    assert reports["team-a"]["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
    assert reports["team-a"]["metadata"]["name"] == "labgate-audit"
    assert reports["team-a"]["summary"] == {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0}
    [result] = reports["team-a"]["results"]
    assert result["policy"] == result["rule"] == "gpu-quota-unfit"
    assert result["result"] == "fail"
    assert result["properties"] == {"mode": "enforce", "tenant": "team-a"}
    assert result["resources"] == [rows[0]["resource"]]
    # A namespace without findings gets an empty report, replacing any earlier findings.
    assert reports["team-a-data"]["results"] == []


def test_a_pod_behind_kueues_gate_is_replayed_against_the_whole_usage() -> None:
    """Issue 20: the ledger holds nothing of a gated pod, so its replay takes none of it away; a pod
    that runs is replayed against the usage without its own GPUs."""
    from cli.policy_impact import Snapshot, cluster_items
    from labgate.gpu_accounting.ledger import GpuAmount

    tenant = {
        "apiVersion": "labgate.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": "vision"},
        "spec": {
            "members": {"researchers": [{"kind": "User", "name": "vera"}]},
            "namespaces": {"names": ["vision"]},
        },
    }
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "vision", "labels": {"labgate.io/tenant": "vision"}},
    }

    def pod(name: str, gates: list[dict[str, str]]) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": "4"}
        spec = {
            "containers": [{"name": "m", "image": "x", "resources": {"limits": limits}}],
            "schedulingGates": gates,
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "vision"},
            "spec": spec,
        }

    used = GpuAmount(total=4, by_model={"unspecified": 4})
    snapshot = Snapshot(
        definitions=[tenant, namespace],
        workloads=[pod("runs", []), pod("waits", [{"name": "kueue.x-k8s.io/admission"}])],
        gpu_usage={"vision": used},
    )
    usages = {
        item.obj["metadata"]["name"]: item.gpu_usage
        for item in cluster_items(snapshot)
        if item.obj["kind"] == "Pod"
    }
    assert usages["runs"] == GpuAmount(total=0, by_model={"unspecified": 0})
    assert usages["waits"] == used
