"""The files generated from labgate's Python, so that each fact is written once (`labgate generate`).

| generated | from |
| --- | --- |
| `charts/labgate/templates/_generated.tpl` | the workload kinds the webhooks register and the audit lists (`labgate.core.workload_catalog.BUILTIN_WORKLOAD_KINDS`, through `webhook.registration.workload_resources`), the webhooks' CEL (`webhook.registration.namespace_match_expression`, `webhook.registration.settled_job_pod_expression`, `webhook.registration.finalizer_removal_expression`), the tenant and over-quota labels and the PriorityClass names (`labgate.core.tenant`), the ClusterRoles the reconciler escalates and binds by name (`rbac.desired`) |
| `policies/labgate/workloads/data.json` | `data.labgate.workloads`: the workload kinds and the field where each says how many pods it runs |
| `policies/labgate/config/data.json` | its keys `tenant_label`, `preemptible_label`, `preemptible_priority_class`, `preemptible_priority_value` (the other keys are the infra team's) |
| `policies/labgate/config/scheduling/data.json` | its key `research_priority_classes` |

`tests/unit/cli/test_generated.py` fails when a generated file differs from what this module makes of the
Python (someone edited the copy, or the source without running `labgate generate`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from labgate.core.tenant import (
    DEFAULT_PRIORITY_CLASS,
    OVER_QUOTA_LABEL,
    PREEMPTIBLE_LABEL,
    PREEMPTIBLE_PRIORITY_CLASS,
    PREEMPTIBLE_PRIORITY_VALUE,
    TENANT_LABEL,
)
from labgate.core.workload_catalog import BUILTIN_WORKLOAD_KINDS, WorkloadKind, resources_by_group
from rbac.desired import roles_bound_beyond_the_reconciler, roles_granted_beyond_the_reconciler
from webhook.registration import (
    namespace_match_expression,
    refusing_tenants_match_conditions,
    tenant_namespaces_match_conditions,
    workload_resources,
)

CHART_HELPERS = Path("charts/labgate/templates/_generated.tpl")
POLICIES = Path("policies")
# Relative to a policy directory (the repository's policies/, or the infra team's own copy).
POLICY_WORKLOADS = Path("labgate/workloads/data.json")
POLICY_CONFIG = Path("labgate/config/data.json")
POLICY_SCHEDULING = Path("labgate/config/scheduling/data.json")
WORKLOADS_DATA = POLICIES / POLICY_WORKLOADS
CONFIG_DATA = POLICIES / POLICY_CONFIG
SCHEDULING_DATA = POLICIES / POLICY_SCHEDULING
GENERATED_BY = "labgate generate (cli/generated.py); do not edit, see docs/architecture.md"


def _go_string(text: str) -> str:
    """A Go template string literal (JSON's escapes are Go's)."""
    return json.dumps(text)


def _json_list_define(name: str, comment: str, values: list[str]) -> str:
    """A chart helper `name` that renders `values` as a JSON list, with `comment` above it."""
    return f"""{{{{/*
{comment}
*/}}}}
{{{{- define "{name}" -}}}}
{json.dumps(values)}
{{{{- end }}}}

"""


def _reconciler_role_helpers() -> str:
    """The ClusterRoles the chart lets the reconciler escalate and bind, by name."""
    return _json_list_define(
        "labgate.reconcilerEscalatedRoleNames",
        "The ClusterRoles the reconciler writes that grant more than it holds, as a JSON list: its `escalate`\n"
        "names them (rbac.desired.roles_granted_beyond_the_reconciler).",
        roles_granted_beyond_the_reconciler(),
    ) + _json_list_define(
        "labgate.reconcilerBoundRoleNames",
        "The ClusterRoles the reconciler binds that grant more than it holds, as a JSON list: its `bind`\n"
        "names them (rbac.desired.roles_bound_beyond_the_reconciler).",
        roles_bound_beyond_the_reconciler(),
    )


def _match_condition_defines(prefix: str, comment: str, condition: dict[str, str]) -> str:
    """A matchCondition as two chart defines, `<prefix>Condition` (its name) and `<prefix>Expression`
    (its CEL, quoted), under `comment`."""
    return f"""{{{{/*
{comment}
*/}}}}
{{{{- define "labgate.{prefix}Condition" -}}}}
{condition["name"]}
{{{{- end }}}}
{{{{- define "labgate.{prefix}Expression" -}}}}
{{{{ {_go_string(condition["expression"])} | quote }}}}
{{{{- end }}}}
"""


def _webhook_condition_helpers() -> str:
    """The webhooks' CEL matchConditions, quoted for the chart."""
    (settled,) = refusing_tenants_match_conditions()
    (finalizers,) = tenant_namespaces_match_conditions()
    namespace = f"""{{{{/*
The cluster-scoped webhooks' CEL matchCondition, quoted (webhook.registration.namespace_match_expression).
*/}}}}
{{{{- define "labgate.namespaceMatchExpression" -}}}}
{{{{ {_go_string(namespace_match_expression())} | quote }}}}
{{{{- end }}}}

"""
    settled_comment = (
        "The matchCondition of the mutating webhook for refusing tenants' namespaces, quoted: every request\n"
        "but a pod the Job controller makes from a template labgate mutated\n"
        "(webhook.registration.settled_job_pod_expression)."
    )
    finalizers_comment = (
        "The matchCondition of the validating webhook for tenant namespaces, quoted: every request but the\n"
        "Job controller taking its finalizer off a pod (webhook.registration.finalizer_removal_expression)."
    )
    return (
        namespace
        + _match_condition_defines("settledJobPod", settled_comment, settled)
        + "\n"
        + _match_condition_defines("finalizerRemoval", finalizers_comment, finalizers)
    )


def chart_helpers(kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS) -> str:
    """charts/labgate/templates/_generated.tpl."""
    resources = "\n".join(
        f"  (list {_go_string(g)} {_go_string(v)} {_go_string(r)})" for g, v, r in workload_resources(kinds)
    )
    priority_classes = json.dumps([DEFAULT_PRIORITY_CLASS, PREEMPTIBLE_PRIORITY_CLASS])
    list_rules = "\n".join(
        f'- apiGroups: [{json.dumps(group)}]\n  resources: {json.dumps(resources)}\n  verbs: ["list"]'
        for group, resources in resources_by_group(kinds).items()
    )
    return f"""{{{{/*
Generated by {GENERATED_BY}.
From labgate/core/workload_catalog.py, webhook/registration.py, labgate/core/tenant.py and rbac/desired.py.
*/}}}}

{{{{/* The namespace label naming a namespace's tenant (labgate.core.tenant.TENANT_LABEL). */}}}}
{{{{- define "labgate.tenantLabel" -}}}}
{TENANT_LABEL}
{{{{- end }}}}

{{{{/* The namespace label saying its tenant's spec.gpu.overQuota (labgate.core.tenant.OVER_QUOTA_LABEL). */}}}}
{{{{- define "labgate.overQuotaLabel" -}}}}
{OVER_QUOTA_LABEL}
{{{{- end }}}}

{{{{/* The PriorityClasses the reconciler creates (rbac.desired.shared_priority_classes), as a JSON list. */}}}}
{{{{- define "labgate.priorityClassNames" -}}}}
{priority_classes}
{{{{- end }}}}

{_reconciler_role_helpers()}{_webhook_condition_helpers()}
{{{{/*
Webhook rules for Pods and the workload kinds (webhook.registration.workload_resources), one per
resource. Call with a list of operations.
*/}}}}
{{{{- define "labgate.workloadRules" -}}}}
{{{{- $operations := . }}}}
{{{{- $workloads := list
{resources} }}}}
{{{{- range $workloads }}}}
- apiGroups: [{{{{ index . 0 | quote }}}}]
  apiVersions: [{{{{ index . 1 | quote }}}}]
  resources: [{{{{ index . 2 | quote }}}}]
  operations: {{{{ toJson $operations }}}}
  scope: Namespaced
{{{{- end }}}}
{{{{- end }}}}

{{{{/*
RBAC rules: list on every workload kind, one rule per API group (labgate.core.workload_catalog
resources_by_group; the scheduled audit's snapshot lists them).
*/}}}}
{{{{- define "labgate.workloadListRules" -}}}}
{list_rules}
{{{{- end }}}}
"""


def replica_field(kind: WorkloadKind) -> str | None:
    """The one field where a kind says how many pods it runs at once, when there is one: every pod
    template counted by the same field, which names no map entry or list item ("*")."""
    fields = {location.replicas for location in kind.templates}
    if len(fields) != 1:
        return None
    (field,) = fields
    return field if field is not None and "*" not in field.split(".") else None


def workloads_document(kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS) -> dict[str, Any]:
    """data.labgate.workloads: the workload kinds, as the webhook finds their pod templates."""
    entries: list[dict[str, Any]] = []
    for kind in kinds:
        entry: dict[str, Any] = {
            "group": kind.group,
            "version": kind.version,
            "kind": kind.kind,
            "resource": kind.resource,
        }
        if (field := replica_field(kind)) is not None:
            entry["replica_field"] = field
        entries.append(entry)
    return {"generated_by": GENERATED_BY, "kinds": entries}


def config_keys() -> dict[str, Any]:
    """The keys of data.labgate.config whose values labgate's Python uses too."""
    return {
        "tenant_label": TENANT_LABEL,
        "preemptible_priority_class": PREEMPTIBLE_PRIORITY_CLASS,
        "preemptible_priority_value": PREEMPTIBLE_PRIORITY_VALUE,
        "preemptible_label": PREEMPTIBLE_LABEL,
    }


def scheduling_keys() -> dict[str, Any]:
    """The keys of data.labgate.config.scheduling that name the reconciler's PriorityClasses."""
    return {"research_priority_classes": [DEFAULT_PRIORITY_CLASS, PREEMPTIBLE_PRIORITY_CLASS]}


def _json_text(document: Any) -> str:
    return json.dumps(document, indent=2) + "\n"


def _with_keys(path: Path, keys: dict[str, Any]) -> str:
    """A JSON object file with `keys` set (in place, or appended), every other key kept as it is."""
    document = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    return _json_text({**document, **keys})


def generated_policy_files(policies: Path) -> dict[Path, str]:
    """Path (relative to the policy directory) -> the content it must have for this labgate."""
    return {
        POLICY_WORKLOADS: _json_text(workloads_document()),
        POLICY_CONFIG: _with_keys(policies / POLICY_CONFIG, config_keys()),
        POLICY_SCHEDULING: _with_keys(policies / POLICY_SCHEDULING, scheduling_keys()),
    }


def generated_files(root: Path) -> dict[Path, str]:
    """Path (relative to the repository root) -> the content it must have."""
    policy_files = generated_policy_files(root / POLICIES)
    return {CHART_HELPERS: chart_helpers(), **{POLICIES / path: text for path, text in policy_files.items()}}


def _is_current(path: Path, wanted: str) -> bool:
    """The file says what `wanted` says: JSON by value (the infra team's own keys of the config may be
    written as they like), templates by text."""
    if not path.exists():
        return False
    current = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            return bool(json.loads(current) == json.loads(wanted))
        except ValueError:
            return False
    return current == wanted


def _stale(base: Path, wanted: dict[Path, str]) -> list[Path]:
    return [path for path, text in wanted.items() if not _is_current(base / path, text)]


def stale_files(root: Path) -> list[Path]:
    """The generated files whose content is not what the Python makes (missing ones too)."""
    return _stale(root, generated_files(root))


def stale_policy_files(policies: Path) -> list[Path]:
    """The generated policy files of a policy directory that do not match this labgate (relative)."""
    return _stale(policies, generated_policy_files(policies))


def write_generated_files(root: Path) -> list[Path]:
    """Write the stale generated files; return them."""
    stale = stale_files(root)
    wanted = generated_files(root)
    for path in stale:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(wanted[path], encoding="utf-8")
    return stale
