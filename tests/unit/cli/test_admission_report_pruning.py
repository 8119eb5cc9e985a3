"""The webhook's labgate-admission PolicyReport drops the results of objects that were deleted
(issue 22 item 8): the scheduled audit, which lists every workload of every tenant namespace anyway,
prunes them (cli.audit_service.prune_admission_reports, deciding with the pure
labgate.core.policy_reports.without_gone)."""

from __future__ import annotations

from typing import Any, cast

from cli.audit_service import ADMISSION_RESULT_GRACE_SECONDS, prune_admission_reports
from labgate.core.api_resources import Kind
from labgate.core.kube import KubeApi
from labgate.core.policy_reports import ResourceRef, result, without_gone
from tests.unit.cli.test_audit_report_writes import refusal

NOW = 1_000_000.0
OLD = NOW - 10 * ADMISSION_RESULT_GRACE_SECONDS


def _result(kind: str, name: str, *, at: float = OLD, api_version: str = "batch/v1") -> dict[str, Any]:
    ref = ResourceRef(api_version=api_version, kind=kind, name=name, namespace="team-a")
    return result(
        rule="pod-hardening", mode="warn", message=f"[pod-hardening] {name}", resource=ref, tenant="t", now=at
    )


LIVE = {("batch", "Job"): {"kept"}, ("", "Pod"): {"kept-pod"}}


def _names(results: list[dict[str, Any]]) -> list[str]:
    return [r["resources"][0]["name"] for r in results]


def test_results_of_deleted_objects_go_and_the_others_stay() -> None:
    results = [
        _result("Job", "kept"),
        _result("Job", "deleted"),
        _result("Pod", "kept-pod", api_version="v1"),
        _result("Pod", "deleted-pod", api_version="v1"),
        _result("Job", "just-admitted", at=NOW - 1),  # may be created after the list: kept
        _result("Service", "web", api_version="v1"),  # a kind the audit does not list: kept
    ]
    kept = without_gone(results, LIVE, before=NOW - ADMISSION_RESULT_GRACE_SECONDS)
    assert _names(kept) == ["kept", "kept-pod", "just-admitted", "web"]


class _Api:
    def __init__(self, live: dict[str, dict[str, Any]], conflict: bool = False):
        self.live = live
        self.conflict = conflict
        self.applied: list[dict[str, Any]] = []

    def get(self, kind: Kind, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        assert (kind.kind, name) == ("PolicyReport", "labgate-admission")
        return self.live.get(namespace or "")

    def apply(self, document: dict[str, Any]) -> dict[str, Any]:
        if self.conflict:
            raise refusal(409, "Conflict", {"name": "labgate-admission"})
        self.applied.append(document)
        return document


def _report(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "labgate-admission", "namespace": "team-a", "resourceVersion": "42"},
        "results": results,
    }


def test_the_audit_prunes_the_admission_report_with_its_resource_version() -> None:
    api = _Api({"team-a": _report([_result("Job", "kept"), _result("Job", "deleted")])})
    dropped = prune_admission_reports(cast(KubeApi, api), {"team-a": LIVE, "team-b": {}}, now=NOW)
    assert dropped == 1
    [written] = api.applied
    assert written["metadata"]["resourceVersion"] == "42"  # a report changed since is not overwritten
    assert _names(written["results"]) == ["kept"]
    assert written["summary"]["warn"] == 1


def test_nothing_gone_writes_nothing_and_a_conflict_waits_for_the_next_run() -> None:
    unchanged = _Api({"team-a": _report([_result("Job", "kept")])})
    assert prune_admission_reports(cast(KubeApi, unchanged), {"team-a": LIVE}, now=NOW) == 0
    assert unchanged.applied == []
    changed_since = _Api({"team-a": _report([_result("Job", "deleted")])}, conflict=True)
    assert prune_admission_reports(cast(KubeApi, changed_since), {"team-a": LIVE}, now=NOW) == 0
