"""PolicyReports of admitted objects' findings: what is kept, merged and written, and that neither a
slow nor a dead API nor a flood of admissions reaches the admission path."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from labgate.core.decisions import Decision, Finding
from labgate.core.policy_reports import (
    ADMISSION_REPORT,
    ResourceRef,
    merged_results,
    result,
    same_findings,
    summary,
)
from webhook.policy_reports import (
    AdmissionReports,
    ReportConflictError,
    ReportNamespaceGoneError,
    admitted_findings,
)
from webhook.review import AdmissionRequest, parse_request

Manifest = dict[str, Any]


def request(
    name: str = "train-1",
    *,
    namespace: str = "team-a",
    operation: str = "CREATE",
    dry_run: bool = False,
    kind: tuple[str, str, str] = ("", "v1", "Pod"),
) -> AdmissionRequest:
    group, version, kind_name = kind
    return parse_request(
        {
            "uid": f"req-{name}",
            "kind": {"group": group, "version": version, "kind": kind_name},
            "resource": {"group": group, "version": version, "resource": kind_name.lower() + "s"},
            "name": name,
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}},
            "dryRun": dry_run,
        }
    )


WARN = Finding(rule="pod-hardening", message="[pod-hardening] ... Fix: drop it", mode="warn")
DRY = Finding(rule="owner-label", message="[owner-label] no owner. Fix: add it", mode="dry-run")


def decision(*findings: Finding, allowed: bool = True) -> Decision:
    return Decision(
        allowed=allowed,
        warnings=[f for f in findings if f.mode == "warn"],
        dry_run=[f for f in findings if f.mode == "dry-run"],
        denials=[f for f in findings if f.mode == "enforce"],
        tenant="team-a",
    )


class MemoryStore:
    """An in-memory stand-in for the apiserver's PolicyReports, with resourceVersion checks."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Manifest] = {}
        self.version = 0
        self.writes = 0
        self.fail: Exception | None = None
        self.before_write: Any = None
        self.deleted: set[str] = set()  # namespaces deleted (or being deleted) since the findings

    def get(self, namespace: str, name: str) -> Manifest | None:
        if self.fail is not None:
            raise self.fail
        obj = self.objects.get((namespace, name))
        return None if obj is None else {**obj, "metadata": dict(obj["metadata"])}

    def _store(self, obj: Manifest) -> None:
        self.version += 1
        self.writes += 1
        self.objects[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = {
            **obj,
            "metadata": {**obj["metadata"], "resourceVersion": str(self.version)},
        }

    def create(self, obj: Manifest) -> None:
        if self.before_write is not None:
            self.before_write()
        if obj["metadata"]["namespace"] in self.deleted:
            raise ReportNamespaceGoneError(obj["metadata"]["namespace"])
        if (obj["metadata"]["namespace"], obj["metadata"]["name"]) in self.objects:
            raise ReportConflictError
        self._store(obj)

    def replace(self, obj: Manifest) -> None:
        if self.before_write is not None:
            self.before_write()
        live = self.objects[(obj["metadata"]["namespace"], obj["metadata"]["name"])]
        if live["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise ReportConflictError
        self._store(obj)

    def results(self, namespace: str = "team-a") -> list[Manifest]:
        return list(self.objects.get((namespace, ADMISSION_REPORT), {}).get("results") or [])


def test_warn_and_dry_run_findings_of_an_admitted_object_are_its_results() -> None:
    found = admitted_findings(request(), decision(WARN, DRY), "team-a", now=100.0)
    assert found is not None
    namespace, key, results = found
    assert (namespace, key) == ("team-a", ("", "Pod", "train-1"))
    assert [(r["rule"], r["result"], r["properties"]["mode"]) for r in results] == [
        ("pod-hardening", "warn", "warn"),
        ("owner-label", "warn", "dry-run"),
    ]
    assert results[0]["resources"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "train-1", "namespace": "team-a", "uid": "uid-train-1"}
    ]
    assert results[0]["message"] == WARN.message
    assert results[0]["timestamp"] == {"seconds": 100, "nanos": 0}


@pytest.mark.parametrize(
    ("req", "dec", "tenant"),
    [
        (request(), decision(WARN, allowed=False), "team-a"),  # refused: kubectl showed it already
        (request(dry_run=True), decision(WARN), "team-a"),  # --dry-run=server created nothing
        (request(operation="DELETE"), decision(WARN), "team-a"),
        (request(), decision(WARN), None),  # outside every tenant
        (request(), None, "team-a"),  # no policy decision (refused as unavailable)
    ],
)
def test_nothing_is_reported_for_what_was_not_admitted_into_a_tenant(
    req: AdmissionRequest, dec: Decision | None, tenant: str | None
) -> None:
    assert admitted_findings(req, dec, tenant, now=1.0) is None


def test_a_job_resource_is_named_with_its_group() -> None:
    found = admitted_findings(request("sweep", kind=("batch", "v1", "Job")), decision(WARN), "team-a", now=1)
    assert found is not None
    assert found[1] == ("batch", "Job", "sweep")
    assert found[2][0]["resources"][0]["apiVersion"] == "batch/v1"


def _result(name: str, rule: str, seconds: int) -> Manifest:
    ref = ResourceRef(api_version="v1", kind="Pod", name=name, namespace="team-a")
    return result(rule=rule, mode="warn", message=f"[{rule}] {name}", resource=ref, tenant="t", now=seconds)


def test_merge_replaces_an_objects_results_and_drops_fixed_ones() -> None:
    existing = [_result("a", "r1", 1), _result("a", "r2", 1), _result("b", "r1", 1)]
    merged = merged_results(existing, {("", "Pod", "a"): [_result("a", "r3", 2)], ("", "Pod", "b"): []})
    assert [(r["resources"][0]["name"], r["rule"]) for r in merged] == [("a", "r3")]


def test_merge_keeps_the_newest_results_within_the_bound() -> None:
    existing = [_result(f"p{i}", "r", i) for i in range(10)]
    merged = merged_results(existing, {("", "Pod", "new"): [_result("new", "r", 100)]}, max_results=3)
    assert sorted(r["resources"][0]["name"] for r in merged) == ["new", "p8", "p9"]


def test_same_findings_ignores_timestamps() -> None:
    assert same_findings([_result("a", "r", 1)], [_result("a", "r", 2)])
    assert not same_findings([_result("a", "r", 1)], [_result("a", "r2", 1)])
    assert summary([_result("a", "r", 1), _result("b", "r", 1)])["warn"] == 2


def test_a_flush_writes_one_report_per_namespace_and_a_fixed_object_leaves_it() -> None:
    store = MemoryStore()
    reports = AdmissionReports(store, interval=3600)
    for i in range(50):  # a Job's pods: fifty admissions, one write
        reports.record(request(f"pod-{i}"), decision(WARN), "team-a")
    reports.record(request("other", namespace="team-b"), decision(DRY), "team-a")
    reports.flush()
    assert store.writes == 2
    assert len(store.results("team-a")) == 50
    assert store.objects[("team-a", ADMISSION_REPORT)]["summary"]["warn"] == 50
    assert [r["properties"]["mode"] for r in store.results("team-b")] == ["dry-run"]
    # pod-0 is admitted again, fixed: its result goes; nothing new elsewhere writes nothing.
    reports.record(request("pod-0"), decision(), "team-a")
    reports.flush()
    assert len(store.results("team-a")) == 49
    assert store.writes == 3
    reports.record(request("pod-1"), decision(WARN), "team-a")
    reports.flush()
    assert store.writes == 3  # unchanged: no write


def test_an_object_without_findings_creates_no_report() -> None:
    store = MemoryStore()
    reports = AdmissionReports(store, interval=3600)
    reports.record(request("clean"), decision(), "team-a")
    reports.flush()
    assert store.objects == {}


def test_a_replica_that_lost_the_race_merges_into_the_other_ones_report() -> None:
    store = MemoryStore()
    mine, theirs = AdmissionReports(store, interval=3600), AdmissionReports(store, interval=3600)
    mine.record(request("mine"), decision(WARN), "team-a")
    theirs.record(request("theirs"), decision(DRY), "team-a")

    def other_replica_writes_first() -> None:
        store.before_write = None
        theirs.flush()

    store.before_write = other_replica_writes_first
    mine.flush()
    assert sorted(r["resources"][0]["name"] for r in store.results()) == ["mine", "theirs"]


def test_an_api_outage_costs_admission_nothing_and_keeps_the_news_bounded() -> None:
    store = MemoryStore()
    store.fail = ConnectionError("apiserver unreachable")
    reports = AdmissionReports(store, interval=3600, max_pending=100)
    started = time.perf_counter()
    for i in range(1000):
        reports.record(request(f"pod-{i}"), decision(WARN), "team-a")
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"1000 records took {elapsed:.3f}s"
    assert reports.pending == 100  # the bound; the rest dropped and counted
    reports.flush()  # fails, keeps the news for later
    assert reports.pending == 100
    store.fail = None
    reports.flush()
    assert reports.pending == 0
    assert len(store.results()) == 100


def test_findings_of_a_deleted_namespace_are_dropped_not_retried_forever() -> None:
    store = MemoryStore()
    store.deleted.add("gone")
    reports = AdmissionReports(store, interval=3600)
    reports.record(request("left-behind", namespace="gone"), decision(WARN), "team-a")
    reports.record(request("kept"), decision(WARN), "team-a")
    reports.flush()
    assert reports.pending == 0  # nothing kept for a namespace that is no more
    assert [r["resources"][0]["name"] for r in store.results()] == ["kept"]
    assert ("gone", ADMISSION_REPORT) not in store.objects


def test_a_hanging_api_never_blocks_record() -> None:
    release, entered = threading.Event(), threading.Event()

    class Hanging(MemoryStore):
        def get(self, namespace: str, name: str) -> Manifest | None:
            entered.set()
            release.wait(10)
            return None

    reports = AdmissionReports(Hanging(), interval=0.01)
    reports.start()
    try:
        reports.record(request("first"), decision(WARN), "team-a")
        assert entered.wait(5), "the writer never read the report"  # it now hangs in get()
        started = time.perf_counter()
        for i in range(100):
            reports.record(request(f"pod-{i}"), decision(WARN), "team-a")
        assert time.perf_counter() - started < 0.5
    finally:
        release.set()
        reports.stop()


def test_record_never_raises() -> None:
    reports = AdmissionReports(MemoryStore(), interval=3600)
    broken = Decision.model_construct(allowed=True, warnings=[object()], dry_run=[], denials=[])  # type: ignore[list-item]
    reports.record(request(), broken, "team-a")  # logged, not raised
    assert reports.pending == 0
