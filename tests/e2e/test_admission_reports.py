"""Warn and dry-run findings of admitted objects, as the PolicyReport labgate-admission that the
researcher reads in their namespace; a fixed object leaves it; and an outage of the report writer
(its CRD gone) costs admission nothing, the findings written once it is back."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from devcluster.stack import CRD_DIR, LabgateStack
from tests.e2e.conftest import TenantFactory, TenantUnderTest
from tests.e2e.test_reconciler import eventually

pytestmark = pytest.mark.tenancy

REPORT = "labgate-admission"


def _deployment(name: str, *, privileged: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.lab.example/research/trainer:v1"}
    if privileged:
        container["securityContext"] = {"privileged": True}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
        },
    }


def _results(team: TenantUnderTest, name: str | None = None) -> list[dict[str, Any]]:
    """The report's results (about object `name`), as the researcher reads them."""
    got = team.researcher.kubectl("get", "policyreport", REPORT, "-n", team.namespace, "-o", "json")
    if got.returncode != 0:
        return []
    results: list[dict[str, Any]] = json.loads(got.stdout).get("results") or []
    return [r for r in results if name is None or r["resources"][0]["name"] == name]


def _warnings(stderr: str, rule: str) -> list[str]:
    return [
        line.removeprefix("Warning: ")
        for line in stderr.splitlines()
        if line.startswith(f"Warning: [{rule}]")
    ]


def test_a_warn_finding_is_in_the_namespaces_report_until_the_object_is_fixed(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create(spec_extra={"enforcement": {"pod-hardening": "warn"}})
    applied = team.researcher.apply(_deployment("web", privileged=True), team.namespace)
    assert applied.returncode == 0, applied.stderr
    warned = _warnings(applied.stderr, "pod-hardening")
    assert warned, applied.stderr
    eventually(lambda: _results(team, "web") != [], what="the finding in the PolicyReport", timeout=30)
    (finding,) = _results(team, "web")
    assert finding["rule"] == "pod-hardening"
    assert finding["result"] == "warn"
    assert finding["properties"] == {"mode": "warn", "tenant": team.name}
    assert finding["source"] == "labgate"
    resource = finding["resources"][0]
    assert (resource["apiVersion"], resource["kind"], resource["namespace"]) == (
        "apps/v1",
        "Deployment",
        team.namespace,
    )
    # What kubectl printed is what the report holds (kubectl's lines may be split; the report's is whole).
    assert finding["message"].startswith(warned[0].split(" (")[0][:60])
    assert "Fix:" in finding["message"]

    # Fixed and applied again (an UPDATE): its result goes.
    fixed = team.researcher.apply(_deployment("web", privileged=False), team.namespace)
    assert fixed.returncode == 0, fixed.stderr
    assert _warnings(fixed.stderr, "pod-hardening") == []
    eventually(lambda: _results(team, "web") == [], what="the fixed finding gone from the report", timeout=30)


def test_a_dry_run_finding_is_reported_though_the_researcher_was_told_nothing(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create(spec_extra={"enforcement": {"pod-hardening": "dry-run"}})
    applied = team.researcher.apply(_deployment("quiet", privileged=True), team.namespace)
    assert applied.returncode == 0, applied.stderr
    assert _warnings(applied.stderr, "pod-hardening") == []
    eventually(lambda: _results(team, "quiet") != [], what="the dry-run finding in the report", timeout=30)
    (finding,) = _results(team, "quiet")
    assert (finding["rule"], finding["result"], finding["properties"]["mode"]) == (
        "pod-hardening",
        "warn",
        "dry-run",
    )
    # A server-side dry run creates nothing, so it reports nothing.
    trial = team.researcher.kubectl(
        "apply", "--dry-run=server", "-n", team.namespace, "-f", "-",
        stdin=json.dumps(_deployment("trial", privileged=True)),
    )  # fmt: skip
    assert trial.returncode == 0, trial.stderr
    other = team.researcher.apply(_deployment("later", privileged=True), team.namespace)
    assert other.returncode == 0
    eventually(lambda: _results(team, "later") != [], what="the next finding", timeout=30)
    assert _results(team, "trial") == []


def _writes(stack: LabgateStack, result: str) -> float:
    total = 0.0
    for url in stack.webhook_urls:
        with urllib.request.urlopen(f"{stack.health_urls[url]}/metrics", timeout=5) as response:  # noqa: S310
            for line in response.read().decode().splitlines():
                if line.startswith(f'labgate_policy_report_writes_total{{result="{result}"}}'):
                    total += float(line.rsplit(" ", 1)[1])
    return total


def test_an_outage_of_the_report_writer_costs_admission_nothing(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create(spec_extra={"enforcement": {"pod-hardening": "warn"}})
    crd = CRD_DIR / "policyreports.wgpolicyk8s.io.yaml"
    failed_before = _writes(stack, "failed")
    stack.admin_kubectl("delete", "-f", str(crd), "--wait=true")
    try:
        # Every write now fails (the API has no PolicyReports); admission answers as before.
        for i in range(5):
            started = time.monotonic()
            applied = team.researcher.apply(_deployment(f"during-{i}", privileged=True), team.namespace)
            took = time.monotonic() - started
            assert applied.returncode == 0, applied.stderr
            assert _warnings(applied.stderr, "pod-hardening"), applied.stderr
            assert took < 5, f"kubectl apply took {took:.1f}s while the report writer was failing"
        eventually(lambda: _writes(stack, "failed") > failed_before, what="a failed report write", timeout=30)
    finally:
        stack.admin_kubectl("apply", "-f", str(crd))
        stack.admin_kubectl("wait", "--for=condition=Established", "--timeout=30s", "-f", str(crd))
    # The findings were kept (within the bound) and are written once the API takes them again.
    eventually(
        lambda: {r["resources"][0]["name"] for r in _results(team)} >= {f"during-{i}" for i in range(5)},
        what="the findings kept through the outage in the report",
        timeout=60,
    )
