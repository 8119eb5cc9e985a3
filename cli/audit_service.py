"""The scheduled audit: `labgate audit --every SECONDS`, as Gatekeeper's audit runs in the cluster.

Every run reads the cluster (list calls), evaluates every workload in tenant namespaces and every
Tenant against the current policies (cli.policy_impact, the same evaluation as `labgate
audit`), replaces the `labgate-audit` PolicyReport of every tenant namespace, and sets:

- `labgate_audit_violations{rule,mode,tenant}`: findings of the last run (Gatekeeper's
  `gatekeeper_violations`; mode enforce is what would be refused now);
- `labgate_audit_last_run_timestamp_seconds`, `labgate_audit_duration_seconds`,
  `labgate_audit_objects`, `labgate_audit_runs_total{result}`.

In the chart it runs as its own Deployment with an OPA sidecar (the image has no `opa` binary): the
policies come from the same ConfigMap as the webhook's, kept loaded by webhook.policy_sync, and each
run's inventory (the snapshot's tenants and namespaces) is put into that OPA, never the webhook's.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.offline_admission import Facts, OfflineCheckError, OfflineOpa, facts_from_manifests
from cli.policy_impact import (
    audit_rows,
    cluster_items,
    evaluate,
    export_snapshot,
    policy_reports,
    tenant_namespaces,
)
from labgate.core import policy_reports as reports_model
from labgate.core.api_resources import POLICY_REPORT
from labgate.core.errors import LabgateError
from labgate.core.kube import ApiException, KubeApi, namespace_gone
from labgate.core.metrics import (
    AUDIT_DURATION,
    AUDIT_LAST_RUN,
    AUDIT_OBJECTS,
    AUDIT_RUNS,
    AUDIT_VIOLATIONS,
)
from webhook.pod_templates import WorkloadKind
from webhook.policy_engine import BlockingOpa
from webhook.policy_input import PolicyInput
from webhook.policy_sync import PolicySync

# Not __name__: docs/infra.md shows the audit's lines under this name.
log = logging.getLogger(__name__)

Manifest = dict[str, Any]


class ServerOpa(OfflineOpa):
    """The offline evaluation, asked of an OPA server instead of `opa eval`: the facts are put at
    data.inventory (so the server must be the audit's own), the queries asked through its data API."""

    def __init__(self, url: str, facts: Facts, *, timeout: float = 10.0):
        super().__init__("opa", Path(url), facts)
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._opa = BlockingOpa(self.url, timeout=timeout)
        self._pushed: str | None = None

    def close(self) -> None:
        self._opa.close()
        super().close()

    def eval(self, query: str, policy_input: PolicyInput, *, facts: Facts | None = None) -> Any:
        inventory = json.dumps((facts or self.facts).inventory, sort_keys=True)
        try:
            if inventory != self._pushed:
                self._opa.expect("PUT", "/v1/data/inventory", text=inventory)
                self._pushed = inventory
            path = query.removeprefix("data.").replace(".", "/")
            body = self._opa.expect("POST", f"/v1/data/{path}", document={"input": policy_input}).body
        except (OSError, ValueError) as err:
            raise OfflineCheckError(f"OPA at {self.url}: {query}: {err}") from err
        if not isinstance(body, dict) or "result" not in body:
            raise OfflineCheckError(f"{query} is undefined: are labgate's policies loaded in {self.url}?")
        return body["result"]


@dataclass(frozen=True)
class AuditRun:
    """What one run found and wrote."""

    evaluated: int
    rows: list[Manifest]
    reports: int
    seconds: float


OpaFor = Callable[[Facts], OfflineOpa]


class ReportWriteError(LabgateError, RuntimeError):
    """Some PolicyReports could not be written (the others were); the message names each."""


def write_policy_reports(kube: KubeApi, reports: list[dict[str, Any]]) -> int:
    """Apply every report; the number written. A namespace deleted (or being deleted) since the
    cluster was read has nothing left to report on and is skipped; any other refusal is raised as
    ReportWriteError after every other report was written (one bad namespace hides none)."""
    written, failures = 0, []
    for report in reports:
        namespace = report["metadata"].get("namespace", "")
        try:
            kube.apply(report)
            written += 1
        except ApiException as err:
            if namespace_gone(err):
                log.info("namespace %s is gone or going: its PolicyReport is not written", namespace)
                continue
            failures.append(f"{namespace}: {err.status} {err.reason}")
    if failures:
        raise ReportWriteError(f"{len(failures)} PolicyReports not written: {'; '.join(failures)}")
    return written


# A result younger than this may be about an object created after the audit listed its namespace.
ADMISSION_RESULT_GRACE_SECONDS = 60.0


def prune_admission_reports(
    kube: KubeApi, present: dict[str, dict[tuple[str, str], set[str]]], *, now: float
) -> int:
    """Drop, from the webhook's `labgate-admission` report of each namespace the audit read, the
    results of objects that are gone (labgate.core.policy_reports.without_gone); the number dropped.
    Written with the report's resourceVersion: a report the webhook changed since is left for the
    next run. Kinds the audit does not list (Services, Secrets, ...) keep their results."""
    dropped = 0
    for namespace, live_names in sorted(present.items()):
        try:
            live = kube.get(POLICY_REPORT, reports_model.ADMISSION_REPORT, namespace=namespace)
            if live is None:
                continue
            results = list(live.get("results") or [])
            grace = now - ADMISSION_RESULT_GRACE_SECONDS
            kept = reports_model.without_gone(results, live_names, before=grace)
            if len(kept) == len(results):
                continue
            pruned = reports_model.report(namespace, reports_model.ADMISSION_REPORT, kept)
            pruned["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            kube.apply(pruned)
            dropped += len(results) - len(kept)
        except ApiException as err:  # changed since (409), namespace going: the next run tries again
            log.info("labgate-admission report of %s not pruned: %s %s", namespace, err.status, err.reason)
    return dropped


def audit_once(
    kube: KubeApi,
    opa_for: OpaFor,
    kinds: tuple[WorkloadKind, ...],
    *,
    platform_namespace: str,
    write_reports: bool,
) -> AuditRun:
    """Read the cluster, evaluate it (with `opa_for(facts)`: a ServerOpa, or the `opa` binary),
    write the reports; the metrics set from the result."""
    started = time.monotonic()
    snapshot = export_snapshot(kube, kinds, platform_namespace=platform_namespace)
    items = cluster_items(snapshot)
    facts = facts_from_manifests(snapshot.definitions, platform_namespace=platform_namespace)
    with opa_for(facts) as opa:
        rows = audit_rows(list(evaluate(opa, items, kinds)))
    written = 0
    if write_reports:
        written = write_policy_reports(
            kube, policy_reports(rows, tenant_namespaces(snapshot), now=time.time())
        )
        prune_admission_reports(kube, snapshot.present, now=time.time())
    seconds = time.monotonic() - started
    counts: dict[tuple[str, str, str], int] = {}
    for row in rows:
        key = (row["rule"], row["mode"], row["tenant"] or "")
        counts[key] = counts.get(key, 0) + 1
    AUDIT_VIOLATIONS.clear()  # a finding that was fixed goes from the metrics too
    for (rule, mode, tenant), count in counts.items():
        AUDIT_VIOLATIONS.labels(rule, mode, tenant).set(count)
    AUDIT_OBJECTS.set(len(items))
    AUDIT_DURATION.set(seconds)
    AUDIT_LAST_RUN.set(time.time())
    AUDIT_RUNS.labels("ok").inc()
    return AuditRun(evaluated=len(items), rows=rows, reports=written, seconds=seconds)


class AuditLoop:
    """`audit_once` every `interval` seconds, the policies kept loaded in the audit's OPA first."""

    def __init__(
        self,
        kube: KubeApi,
        opa_for: OpaFor,
        kinds: tuple[WorkloadKind, ...],
        *,
        policies: PolicySync | None,
        interval: float,
        platform_namespace: str,
        write_reports: bool,
    ):
        """`policies`: the loader that keeps the audit's OPA server current (None with `opa eval`)."""
        self.kube = kube
        self.opa_for = opa_for
        self.kinds = kinds
        self.interval = interval
        self.platform_namespace = platform_namespace
        self.write_reports = write_reports
        self.policies = policies
        self.last: AuditRun | None = None

    def run_once(self) -> AuditRun | None:
        if self.policies is not None:
            status = self.policies.sync_once()
            if status.revision is None:
                AUDIT_RUNS.labels("failed").inc()
                log.error("audit skipped: no complete policy revision loaded: %s", status.error)
                return None
            if status.error is not None:
                log.warning(
                    "auditing with revision %s; the newer one failed: %s", status.revision, status.error
                )
        try:
            run = audit_once(
                self.kube,
                self.opa_for,
                self.kinds,
                platform_namespace=self.platform_namespace,
                write_reports=self.write_reports,
            )
        except Exception:  # the next run tries again; the metrics keep the last good run
            AUDIT_RUNS.labels("failed").inc()
            log.exception("audit run failed")
            return None
        self.last = run
        log.info(
            "audit: %d objects, %d findings (%d enforce), %d reports written, %.1fs",
            run.evaluated,
            len(run.rows),
            sum(1 for r in run.rows if r["mode"] == "enforce"),
            run.reports,
            run.seconds,
        )
        return run

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.run_once()
            stop.wait(self.interval)
