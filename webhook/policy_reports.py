"""Warn and dry-run findings of admitted objects, as a PolicyReport in their namespace.

A researcher reads `kubectl get policyreport labgate-admission -n <namespace> -o yaml` and sees
which of their objects a rule in warn or dry-run mode found something in (dry-run findings are
otherwise invisible to them); the infra team sees the same before switching a rule to enforce.

Off the request path, and never in its way:

- `record()` is what an admission calls: a dict update under a lock, no I/O, never raises. It keeps
  the object's latest findings (none: the finding was fixed, its results go) by namespace and object,
  so a Job's thousand pods admitted in one second are one entry each, and one write per namespace.
- A background thread writes every `interval` seconds: per namespace with news, read the report,
  merge, and write it only if it changed (compare-and-swap on resourceVersion, so replicas merge
  rather than overwrite each other's results).
- Bounded: at most `max_pending` objects wait; beyond that new ones are dropped and counted
  (`labgate_policy_report_findings_dropped_total`). A write that fails (API down, CRD missing,
  RBAC) puts its findings back, still within the bound, for the next pass; admission does not notice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from labgate.core.api_resources import POLICY_REPORT
from labgate.core.decisions import Decision
from labgate.core.errors import LabgateError
from labgate.core.kube import ApiException, KubeApi, namespace_gone
from labgate.core.metrics import POLICY_REPORT_DROPPED, POLICY_REPORT_PENDING, POLICY_REPORT_WRITES
from labgate.core.policy_reports import (
    ADMISSION_REPORT,
    MAX_RESULTS,
    ResourceRef,
    merged_results,
    report,
    result,
    same_findings,
)
from webhook.review import AdmissionRequest

log = logging.getLogger(__name__)

Manifest = dict[str, Any]
ObjectKey = tuple[str, str, str]


class ReportConflictError(LabgateError):
    """The report changed (or was created) since it was read: read it again and merge again."""


class ReportNamespaceGoneError(LabgateError):
    """The report's namespace was deleted, or is being deleted: its findings are dropped."""


class ReportStore(Protocol):
    def get(self, namespace: str, name: str) -> Manifest | None: ...

    def create(self, obj: Manifest) -> None: ...

    def replace(self, obj: Manifest) -> None: ...


class KubeReportStore:
    """PolicyReports through the Kubernetes door, with short timeouts (a slow API delays reports only)."""

    def __init__(self, kube: KubeApi, *, timeout: float = 5.0):
        self.kube = kube
        self.timeout = timeout

    def get(self, namespace: str, name: str) -> Manifest | None:
        return self.kube.get(POLICY_REPORT, name, namespace=namespace, timeout=self.timeout)

    def create(self, obj: Manifest) -> None:
        try:
            self.kube.create(POLICY_REPORT, obj, namespace=obj["metadata"]["namespace"])
        except ApiException as err:
            if err.status == 409:
                raise ReportConflictError from err
            if namespace_gone(err):
                raise ReportNamespaceGoneError(obj["metadata"]["namespace"]) from err
            raise

    def replace(self, obj: Manifest) -> None:
        try:
            self.kube.replace(POLICY_REPORT, obj)
        except ApiException as err:
            if err.status == 409:
                raise ReportConflictError from err
            raise


def resource_of(request: AdmissionRequest) -> ResourceRef | None:
    """The object an admission request created or changed."""
    metadata = (request.object or {}).get("metadata") or {}
    name = request.name or metadata.get("name")
    if not name or not request.namespace:
        return None
    group, version = request.kind.group, request.kind.version
    return ResourceRef(
        api_version=f"{group}/{version}" if group else version,
        kind=request.kind.kind,
        name=str(name),
        namespace=request.namespace,
        uid=str(metadata["uid"]) if metadata.get("uid") else None,
    )


def admitted_findings(
    request: AdmissionRequest, decision: Decision | None, tenant: str | None, *, now: float
) -> tuple[str, ObjectKey, list[Manifest]] | None:
    """(namespace, object, results) to report for one validating decision, or None when there is
    nothing to report: refused, a server-side dry run, a deletion, outside any tenant (pure)."""
    if (
        decision is None
        or not decision.allowed
        or tenant is None
        or request.dry_run
        or request.operation not in ("CREATE", "UPDATE")
        or request.sub_resource
    ):
        return None
    resource = resource_of(request)
    if resource is None or resource.namespace is None:
        return None
    results = [
        result(
            rule=finding.rule,
            mode=finding.mode,
            message=finding.message,
            resource=resource,
            tenant=tenant,
            now=now,
        )
        for finding in [*decision.warnings, *decision.dry_run]
    ]
    return resource.namespace, resource.key, results


class AdmissionReports:
    """Coalesces admitted objects' findings and writes them as `labgate-admission` PolicyReports."""

    def __init__(
        self,
        store: ReportStore,
        *,
        interval: float = 5.0,
        max_pending: int = 10_000,
        max_results: int = MAX_RESULTS,
        clock: Callable[[], float] = time.time,
    ):
        self.store = store
        self.interval = interval
        self.max_pending = max_pending
        self.max_results = max_results
        self.clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, dict[ObjectKey, list[Manifest]]] = {}
        self._count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="policy-reports", daemon=True)

    @property
    def pending(self) -> int:
        """Objects whose findings wait to be written."""
        return self._count

    def record(self, request: AdmissionRequest, decision: Decision | None, tenant: str | None) -> None:
        """Keep one validating decision's findings for the next write. Never raises, never blocks on I/O."""
        try:
            found = admitted_findings(request, decision, tenant, now=self.clock())
            if found is not None:
                self._keep(*found, replace=True)
        except Exception:  # a report is a courtesy: never let it touch the admission
            log.exception("could not keep findings for the policy report")

    def _keep(self, namespace: str, key: ObjectKey, results: list[Manifest], *, replace: bool) -> bool:
        with self._lock:
            updates = self._pending.get(namespace)
            if updates is not None and key in updates:
                if replace:  # the newer decision wins
                    updates[key] = results
                return True
            if self._count >= self.max_pending:
                POLICY_REPORT_DROPPED.inc()
                return False
            self._pending.setdefault(namespace, {})[key] = results
            self._count += 1
            POLICY_REPORT_PENDING.set(self._count)
            return True

    def flush(self) -> None:
        """Write every namespace's news (one read and at most one write each)."""
        with self._lock:
            pending, self._pending, self._count = self._pending, {}, 0
            POLICY_REPORT_PENDING.set(0)
        for namespace, updates in sorted(pending.items()):
            try:
                outcome = self._write(namespace, updates)
            except ReportNamespaceGoneError:  # deleted since: its findings went with it
                POLICY_REPORT_WRITES.labels("namespace-gone").inc()
                continue
            except Exception as err:  # API down, CRD missing, forbidden: keep the news for later
                POLICY_REPORT_WRITES.labels("failed").inc()
                log.warning("policy report of namespace %s not written: %s", namespace, err)
                for key, results in updates.items():
                    self._keep(namespace, key, results, replace=False)
                continue
            POLICY_REPORT_WRITES.labels(outcome).inc()

    def _write(self, namespace: str, updates: dict[ObjectKey, list[Manifest]]) -> str:
        for _ in range(5):
            live = self.store.get(namespace, ADMISSION_REPORT)
            existing = list((live or {}).get("results") or [])
            merged = merged_results(existing, updates, max_results=self.max_results)
            if same_findings(existing, merged) and (live is not None or not merged):
                return "unchanged"
            obj = report(namespace, ADMISSION_REPORT, merged)
            try:
                if live is None:
                    self.store.create(obj)
                else:
                    obj["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
                    self.store.replace(obj)
            except ReportConflictError:
                continue  # another replica wrote it in between: merge into its version
            return "written"
        raise ReportConflictError(f"{namespace}/{ADMISSION_REPORT} kept changing")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.flush()
            except Exception:  # never let the writer die
                log.exception("policy report writer failed")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop writing. What still waits is not written (a shutdown never waits on the API); the
        object's next admission reports it again."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
