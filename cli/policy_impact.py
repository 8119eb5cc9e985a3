"""Audit and impact preview: the policies evaluated against what a cluster holds.

- `labgate snapshot export` reads a cluster (read-only: list calls only) into one YAML file: the
  Tenants, the tenants' Namespaces, restricted Secrets (their metadata only) and the workloads in
  tenant namespaces (Pods no controller owns, Jobs, CronJobs, Deployments, StatefulSets, training
  jobs...), plus each tenant's GPU usage from its quota ledger.
- `labgate audit` evaluates every workload and Tenant against the current policies, as if applied again
  now by a member of its tenant, and lists what would be refused, warned or recorded (e.g. a Job that
  no longer fits after its tenant's h100 quota was lowered).
- `labgate policy diff --policies CANDIDATE` evaluates the same objects, and the recent decision log's
  requests (by their user, on the object as the cluster holds it now), under the current and the
  candidate policies, and prints who would newly be refused, newly be admitted or get another
  mutation, grouped by rule and tenant.

Everything here runs the pinned `opa eval` (webhook.offline_admission), never the live webhook: the
cluster is only read. GPU usage: a Pod is evaluated with its tenant's usage minus its own GPUs
(it is already counted); other workloads without usage (their pods are already counted), so the
preview does not mistake running work for new demand. Objects read from a cluster are judged as they
were admitted (cli.admitted_state: the scheduler's binding is not held against a Pod).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cli.admitted_state import as_admitted
from cli.offline_admission import (
    CheckResult,
    Facts,
    OfflineCheckError,
    OfflineOpa,
    admission_request,
    facts_from_manifests,
    load_manifests,
)
from labgate.core.api_resources import NAMESPACE, SECRET, TENANT, Kind
from labgate.core.kube import ApiException
from labgate.core.policy_reports import AUDIT_REPORT, ResourceRef, report, result
from labgate.core.tenant import TENANT_LABEL
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.ledger import GpuAmount, usage
from labgate.gpu_accounting.ledger_store import LedgerStore
from labgate.gpu_accounting.pod_gpus import is_behind_admission_gate, pod_gpus
from webhook.pod_templates import BUILTIN_WORKLOAD_KINDS, WorkloadKind

Manifest = dict[str, Any]
USAGE_KIND = "TenantGpuUsage"  # a snapshot item: a tenant's GPUs in use or reserved (from its ledger)
AUDIT_USER = "labgate-audit"
# A pod's own GPUs, taken out of its tenant's usage when the pod is judged again: NVIDIA's GPUs and MIG
# profiles, by the scheduler's effective request (labgate.gpu_accounting.pod_gpus).
_GPU_COUNTING = GpuCounting()


@dataclass(frozen=True)
class Snapshot:
    """What the policies are evaluated against."""

    definitions: list[Manifest]  # Tenants, Namespaces, Secrets (restricted metadata only)
    workloads: list[Manifest]
    gpu_usage: dict[str, GpuAmount] = field(default_factory=dict)
    # Read from a live cluster only: namespace -> (group, kind) -> the names of every object of that
    # kind there, controllers' included (what the labgate-admission reports may still speak of).
    present: dict[str, dict[tuple[str, str], set[str]]] = field(default_factory=dict)

    def document(self) -> Manifest:
        usage = [
            {
                "apiVersion": "labgate.io/v1alpha1",
                "kind": USAGE_KIND,
                "metadata": {"name": t},
                "usage": u.to_document(),
            }
            for t, u in sorted(self.gpu_usage.items())
        ]
        return {"apiVersion": "v1", "kind": "List", "items": [*self.definitions, *self.workloads, *usage]}


def load_snapshot(path: Path) -> Snapshot:
    """A file `labgate snapshot export` wrote (or any kubectl `-o yaml` List of the same objects)."""
    definitions: list[Manifest] = []
    workloads: list[Manifest] = []
    usage: dict[str, GpuAmount] = {}
    for item in load_manifests([path]):
        kind = item.get("kind")
        if kind == USAGE_KIND:
            usage[item["metadata"]["name"]] = GpuAmount.from_document(item.get("usage"))
        elif kind in ("Tenant", "Namespace", "Secret"):
            definitions.append(item)
        else:
            workloads.append(item)
    return Snapshot(definitions=definitions, workloads=workloads, gpu_usage=usage)


# --- reading a live cluster (read-only) ---


def _clean(obj: Manifest) -> Manifest:
    metadata = dict(obj.get("metadata") or {})
    for noisy in ("managedFields", "resourceVersion", "uid", "generation", "creationTimestamp"):
        metadata.pop(noisy, None)
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": metadata}


def export_snapshot(
    kube: Any,
    kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS,
    *,
    platform_namespace: str = "labgate-system",
) -> Snapshot:
    """Read the cluster through `kube` (labgate.core.kube.KubeApi; list calls only; the quota ledgers
    from `platform_namespace`)."""
    tenants = [
        _clean(t) | {"apiVersion": "labgate.io/v1alpha1", "kind": "Tenant"}
        for t in kube.list(TENANT)["items"]
    ]
    namespaces = [
        _clean(n) | {"apiVersion": "v1", "kind": "Namespace"}
        for n in kube.list(NAMESPACE)["items"]
        if TENANT_LABEL in ((n.get("metadata") or {}).get("labels") or {})
    ]
    tenant_namespaces = [n["metadata"]["name"] for n in namespaces]
    listed_kinds = [
        Kind("Pod", "", "v1", "pods", is_namespaced=True),
        *(Kind(k.kind, k.group, k.version, k.resource, is_namespaced=True) for k in kinds),
    ]
    secrets: list[Manifest] = []
    workloads: list[Manifest] = []
    present: dict[str, dict[tuple[str, str], set[str]]] = {}
    for namespace in tenant_namespaces:
        secrets.extend(_restricted_secrets(kube, namespace))
        unowned, present[namespace] = _unowned_objects(kube, namespace, listed_kinds)
        workloads.extend(unowned)
    store = LedgerStore(kube, namespace=platform_namespace)
    gpu_usage = {}
    for tenant in tenants:
        name = tenant["metadata"]["name"]
        try:
            gpu_usage[name] = usage(store.read(name))
        except Exception:  # an unreadable ledger: usage unknown, counted as none
            gpu_usage[name] = GpuAmount()
    return Snapshot(
        definitions=[*tenants, *namespaces, *secrets],
        workloads=workloads,
        gpu_usage=gpu_usage,
        present=present,
    )


def _restricted_secrets(kube: Any, namespace: str) -> list[Manifest]:
    """The Secrets of `namespace` with labgate.io/ annotations, those annotations only."""
    # Metadata only: the audit needs the labgate.io/ annotations, never a Secret's data.
    listed = kube.lister(SECRET, metadata_only=True, namespace=namespace)(_request_timeout=30)
    secrets = []
    for secret in (listed or {}).get("items") or []:
        annotations = (secret.get("metadata") or {}).get("annotations") or {}
        restricted = {k: v for k, v in annotations.items() if k.startswith("labgate.io/")}
        if restricted:
            secrets.append(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {
                        "name": secret["metadata"]["name"],
                        "namespace": namespace,
                        "annotations": restricted,
                    },
                }
            )
    return secrets


def _unowned_objects(
    kube: Any, namespace: str, kinds: list[Kind]
) -> tuple[list[Manifest], dict[tuple[str, str], set[str]]]:
    """The objects of `kinds` in `namespace` that no controller made (kinds not installed skipped),
    and the names of all of them, by (group, kind)."""
    found: list[Manifest] = []
    names: dict[tuple[str, str], set[str]] = {}
    for kind in kinds:
        try:
            items = kube.list(kind, namespace=namespace)["items"]
        except ApiException as err:
            if err.status == 404:  # the kind is not installed (e.g. no Kubeflow)
                continue
            raise
        names[(kind.group, kind.kind)] = {str((i.get("metadata") or {}).get("name")) for i in items}
        for item in items:
            if (item.get("metadata") or {}).get("ownerReferences"):
                continue  # made by a controller: its owner is evaluated (and its pods counted)
            # As admitted: a field the platform set since (the binding) is not held against it.
            typed = item | {"apiVersion": kind.api_version, "kind": kind.kind}
            found.append(_clean(as_admitted(typed)))
    return found, names


# --- evaluating ---


@dataclass(frozen=True)
class Subject:
    """Who an object is evaluated as."""

    username: str
    groups: tuple[str, ...]


def member_of(tenant: Manifest | None) -> Subject:
    """A member of `tenant` who may run workloads (its first researcher or admin), so that only the
    object itself is judged; the platform's audit user when there is none."""
    members = ((tenant or {}).get("spec") or {}).get("members") or {}
    for subject in [*(members.get("researchers") or []), *(members.get("admins") or [])]:
        if subject.get("kind") == "User":
            return Subject(subject["name"], ())
        if subject.get("kind") == "Group":
            return Subject(AUDIT_USER, (subject["name"],))
        if subject.get("kind") == "ServiceAccount":
            return Subject(f"system:serviceaccount:{subject['namespace']}:{subject['name']}", ())
    return Subject(AUDIT_USER, ())


@dataclass(frozen=True)
class Item:
    """One request to evaluate: an object as a subject applies it, from the cluster or the decision log."""

    source: str  # "cluster" or "decision-log"
    tenant: str | None
    obj: Manifest
    subject: Subject
    gpu_usage: GpuAmount | None

    @property
    def ref(self) -> str:
        metadata = self.obj.get("metadata") or {}
        where = f"{metadata.get('namespace')}/" if metadata.get("namespace") else ""
        return f"{self.obj.get('kind')} {where}{metadata.get('name')}"


@dataclass(frozen=True)
class Outcome:
    """The verdict on one item under one set of policies."""

    allowed: bool
    denials: tuple[tuple[str, str], ...]  # (rule, message)
    warnings: tuple[tuple[str, str], ...]
    dry_run: tuple[tuple[str, str], ...]
    patch: tuple[str, ...]  # the JSON Patch, one canonical op per entry

    @staticmethod
    def of(result: CheckResult) -> Outcome:
        decision = result.decision

        def pairs(findings: Iterable[Any]) -> tuple[tuple[str, str], ...]:
            return tuple(sorted((f.rule, f.message) for f in findings))

        return Outcome(
            allowed=result.is_allowed,
            denials=pairs(decision.denials),
            warnings=pairs(decision.warnings),
            dry_run=pairs(decision.dry_run),
            patch=tuple(
                json.dumps(op.model_dump(), sort_keys=True, separators=(",", ":"))
                for op in result.mutation.patch
                if "labgate.io~1mutation" not in op.path and op.path != "/metadata/annotations"
            ),
        )


def _tenants_by_namespace(facts: Facts) -> dict[str, str]:
    return {
        name: labels[TENANT_LABEL]
        for name, ns in facts.inventory["namespaces"].items()
        if TENANT_LABEL in (labels := ns.get("labels") or {})
    }


def _without(used: GpuAmount, own: GpuAmount) -> GpuAmount:
    """The tenant's usage without one pod's own GPUs (it is counted already)."""
    return GpuAmount(
        total=max(used.total - own.total, 0),
        by_model={m: max(n - own.by_model.get(m, 0), 0) for m, n in used.by_model.items()},
    )


def cluster_items(snapshot: Snapshot) -> list[Item]:
    """Every workload in a tenant namespace, and every Tenant, as a member (or the infra team) applies it."""
    facts = facts_from_manifests(snapshot.definitions, platform_namespace="labgate-system")
    owners = _tenants_by_namespace(facts)
    items = []
    for definition in [d for d in snapshot.definitions if d.get("kind") == "Tenant"]:
        name = definition["metadata"]["name"]
        items.append(Item("cluster", name, definition, Subject("infra", ("system:masters",)), None))
    for obj in snapshot.workloads:
        namespace = (obj.get("metadata") or {}).get("namespace")
        tenant = owners.get(namespace or "")
        if tenant is None:
            continue
        pod_usage = None
        if obj.get("kind") == "Pod" and tenant in snapshot.gpu_usage:
            # A pod behind Kueue's gate holds none of the usage (it is reserved when the gate goes).
            own = GpuAmount() if is_behind_admission_gate(obj) else pod_gpus(obj, _GPU_COUNTING)
            pod_usage = _without(snapshot.gpu_usage[tenant], own)
        subject = member_of(facts.inventory["tenants"].get(tenant))
        items.append(Item("cluster", tenant, obj, subject, pod_usage))
    return items


def decision_log_items(snapshot: Snapshot, records: Iterable[Manifest]) -> tuple[list[Item], int]:
    """The decision log's requests (CREATE and UPDATE of Tenants and workloads, by people) replayed by
    their own user on the object as the snapshot holds it; how many could not be (the object is gone
    or was never created)."""
    by_ref = {
        (o.get("kind"), (o.get("metadata") or {}).get("namespace"), (o.get("metadata") or {}).get("name")): o
        for o in [*snapshot.workloads, *snapshot.definitions]
    }
    facts = facts_from_manifests(snapshot.definitions, platform_namespace="labgate-system")
    owners = _tenants_by_namespace(facts)
    kinds = {"Tenant", "Pod", *(k.kind for k in BUILTIN_WORKLOAD_KINDS)}
    items, missing, seen = [], 0, set()
    for record in records:
        if record.get("operation") not in ("CREATE", "UPDATE"):
            continue
        # People's requests for what a snapshot holds; controllers (a Job's pods) follow their owner.
        if (
            str(record.get("user", "")).startswith("system:")
            or (record.get("object") or {}).get("kind") not in kinds
        ):
            continue
        ref = record.get("object") or {}
        key = (ref.get("kind"), ref.get("namespace") or None, ref.get("name"))
        user = (record.get("user"), tuple(record.get("groups") or []))
        if (key, user) in seen:
            continue
        seen.add((key, user))
        obj = by_ref.get(key)
        if obj is None:
            missing += 1
            continue
        groups = tuple(g for g in user[1] if g != "system:authenticated")
        items.append(Item("decision-log", owners.get(key[1] or ""), obj, Subject(str(user[0]), groups), None))
    return items, missing


def read_decision_log(paths: Iterable[Path], *, last: int) -> list[Manifest]:
    """The last `last` records of the decision logs (JSON lines)."""
    records: list[Manifest] = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records[-last:]


def evaluate(
    opa: OfflineOpa, items: Iterable[Item], kinds: tuple[WorkloadKind, ...]
) -> Iterator[tuple[Item, Outcome]]:
    for number, item in enumerate(items, start=1):
        metadata = item.obj.get("metadata") or {}
        request = admission_request(
            obj=item.obj,
            username=item.subject.username,
            groups=item.subject.groups,
            namespace=metadata.get("namespace"),
            uid=f"labgate-impact-{number}",
            kinds=kinds,
        )
        try:
            result = opa.check(request, gpu_usage=item.gpu_usage, kinds=kinds)
        except OfflineCheckError as err:
            raise OfflineCheckError(f"{item.ref}: {err}") from err
        yield item, Outcome.of(result)


# --- reports ---


def audit_rows(results: Iterable[tuple[Item, Outcome]]) -> list[Manifest]:
    """One row per finding: tenant, object (and its API reference), rule, mode, message."""
    rows = []
    for item, outcome in results:
        metadata = item.obj.get("metadata") or {}
        resource = {
            "apiVersion": item.obj.get("apiVersion"),
            "kind": item.obj.get("kind"),
            "name": metadata.get("name"),
            **({"namespace": metadata["namespace"]} if metadata.get("namespace") else {}),
        }
        for mode, findings in (
            ("enforce", outcome.denials),
            ("warn", outcome.warnings),
            ("dry-run", outcome.dry_run),
        ):
            for rule, message in findings:
                rows.append(
                    {
                        "tenant": item.tenant,
                        "object": item.ref,
                        "resource": resource,
                        "rule": rule,
                        "mode": mode,
                        "message": message,
                    }
                )
    return sorted(rows, key=lambda r: (r["tenant"] or "", r["object"], r["rule"]))


def diff_rows(current: list[tuple[Item, Outcome]], candidate: list[tuple[Item, Outcome]]) -> list[Manifest]:
    """What changes between the two: newly refused, newly admitted, other findings or mutation."""
    rows = []
    for (item, before), (_, after) in zip(current, candidate, strict=True):
        base = {
            "tenant": item.tenant,
            "object": item.ref,
            "source": item.source,
            "user": item.subject.username,
        }
        if before.allowed and not after.allowed:
            for rule, message in after.denials:
                rows.append({**base, "change": "newly refused", "rule": rule, "message": message})
        elif not before.allowed and after.allowed:
            for rule, message in before.denials:
                rows.append(
                    {**base, "change": "newly admitted", "rule": rule, "message": f"no longer: {message}"}
                )
        elif not after.allowed and set(after.denials) != set(before.denials):
            for rule, message in sorted(set(after.denials) - set(before.denials)):
                rows.append({**base, "change": "refused differently", "rule": rule, "message": message})
        if before.allowed and after.allowed and before.patch != after.patch:
            added = sorted(set(after.patch) - set(before.patch))
            removed = sorted(set(before.patch) - set(after.patch))
            text = "; ".join([*(f"+ {op}" for op in added), *(f"- {op}" for op in removed)])
            rows.append({**base, "change": "different mutation", "rule": "mutation", "message": text})
        for mode, b, a in (
            ("warn", before.warnings, after.warnings),
            ("dry-run", before.dry_run, after.dry_run),
        ):
            for rule, message in sorted(set(a) - set(b)):
                rows.append({**base, "change": f"new {mode} finding", "rule": rule, "message": message})
    order = [
        "newly refused",
        "newly admitted",
        "refused differently",
        "different mutation",
        "new warn finding",
        "new dry-run finding",
    ]
    return sorted(rows, key=lambda r: (order.index(r["change"]), r["rule"], r["tenant"] or "", r["object"]))


def grouped_text(rows: list[Manifest], *, key: str) -> list[str]:
    """Rows as text grouped by `key` (change or mode), then rule, then tenant."""
    lines: list[str] = []
    groups: dict[str, dict[str, dict[str, list[Manifest]]]] = {}
    for row in rows:
        groups.setdefault(row[key], {}).setdefault(row["rule"], {}).setdefault(
            row["tenant"] or "(no tenant)", []
        ).append(row)
    for heading, rules in groups.items():
        total = sum(len(r) for t in rules.values() for r in t.values())
        lines.append(f"{heading} ({total}):")
        for rule, tenants in rules.items():
            for tenant, entries in tenants.items():
                lines.append(f"  [{rule}] tenant {tenant}:")
                for row in entries:
                    via = f" (decision log: {row['user']})" if row.get("source") == "decision-log" else ""
                    lines.append(f"    {row['object']}{via}")
                    lines.append(f"      {row['message']}")
    return lines


def dump_snapshot(snapshot: Snapshot) -> str:
    return yaml.safe_dump(snapshot.document(), sort_keys=False)


REPORT_NAME = AUDIT_REPORT


def policy_reports(rows: list[Manifest], namespaces: Iterable[str], *, now: float) -> list[Manifest]:
    """One wgpolicyk8s.io/v1alpha2 PolicyReport per tenant namespace (empty when nothing was found, so
    a fixed finding disappears): each finding as a result, `fail` for what enforce mode would refuse,
    `warn` for warn and dry-run findings (the mode is in its properties)."""
    by_namespace: dict[str, list[Manifest]] = {ns: [] for ns in namespaces}
    for row in rows:
        namespace = row["resource"].get("namespace")
        if namespace is None:
            continue  # a Tenant: cluster-scoped, reported by the CLI only
        ref = ResourceRef(
            api_version=str(row["resource"].get("apiVersion")),
            kind=str(row["resource"].get("kind")),
            name=str(row["resource"].get("name")),
            namespace=namespace,
        )
        by_namespace.setdefault(namespace, []).append(
            result(
                rule=row["rule"],
                mode=row["mode"],
                message=row["message"],
                resource=ref,
                tenant=row["tenant"],
                now=now,
            )
        )
    return [report(namespace, REPORT_NAME, results) for namespace, results in sorted(by_namespace.items())]


def tenant_namespaces(snapshot: Snapshot) -> list[str]:
    """The namespaces that belong to a tenant (where reports are written)."""
    facts = facts_from_manifests(snapshot.definitions, platform_namespace="labgate-system")
    return sorted(_tenants_by_namespace(facts))
