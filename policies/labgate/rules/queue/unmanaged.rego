package labgate.rules.queue

import data.labgate.lib.gpu
import data.labgate.lib.gpu_text
import data.labgate.lib.kueue
import data.labgate.lib.tenancy

# GPU work of a managed tenant in kinds Kueue does not queue (split from queue.rego: one package).
# Without Kueue's pod integration nothing queues a Deployment's, StatefulSet's, ReplicaSet's or
# DaemonSet's pods: they would hold GPUs that the ledger counts and Kueue's ClusterQueue does not, so
# Kueue would admit Jobs whose pods the ledger then refuses (a FailedCreate loop). With the pod
# integration Kueue gates those pods as it gates bare ones (lib.kueue.is_queued), and these rules
# stay silent.

# METADATA
# title: GPU work of a managed tenant runs in a kind Kueue queues
# description: |
#   A workload of a kind Kueue does not queue (lib.kueue.is_unqueued_workload: Deployment,
#   StatefulSet, ReplicaSet, LeaderWorkerSet, Argo, ...) is refused when it asks GPUs: on CREATE
#   whatever its replicas, on UPDATE when a template asks more GPUs a pod or the workload asks more
#   in all (replicas raised from 0). Shrinking, deleting and workloads without GPUs are untouched.
#   A controller writing it (a Deployment's ReplicaSet) is judged too: it acts for the tenant.
# custom:
#   rule_id: queue-unmanaged-kind
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	_judges_unmanaged
	kueue.is_unqueued_workload
	_adds_gpus
	tenant := kueue.managed_tenant
	field := concat(", ", [t.path | some t in _gpu_templates])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s asks %s outside Kueue; tenant %q's GPU work waits in LocalQueue %q, which takes Jobs (Kueue ",
			"queues no %s here). Fix: run it as a Job with label %s: %s (or none: labgate sets it), or ask no GPUs",
		]),
		[
			rule_id, tenancy.object_ref, _workload_asks_text, tenant.metadata.name, kueue.default_queue, input.request.kind.kind,
			kueue.queue_label, kueue.default_queue,
		],
	)
}

# METADATA
# title: A GPU pod of a managed tenant belongs to a workload Kueue admitted
# description: |
#   The pods of kinds Kueue does not queue are refused when they ask GPUs, whoever creates them: the
#   ReplicaSet of a Deployment made before the tenant was managed, a StatefulSet's or DaemonSet's
#   controller, a cluster admin's pod naming such an owner. A pod whose controller owner is a kind
#   Kueue queues (a Job's) is admitted with its owner; a bare pod is queue-bare-pod's.
# custom:
#   rule_id: queue-unmanaged-pod
violation contains {"rule": rule_id, "message": msg, "field": "metadata.ownerReferences"} if {
	_judges_unmanaged
	input.request.operation == "CREATE"
	kueue.is_pod
	not kueue.is_bare_pod(_new)
	not kueue.is_owned_by_queued_kind(_new)
	kueue.asks_gpus
	tenant := kueue.managed_tenant
	template := input.pod_templates[0]
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s of %s asks %s outside Kueue; tenant %q's GPU work waits in LocalQueue %q, which takes Jobs. Fix: ",
			"scale %s (or the workload that owns it) to 0 or delete it, and run the work as a Job with label %s: %s",
		]),
		[
			rule_id, tenancy.object_ref, _owner_text, gpu_text.describe_asks(template.spec), tenant.metadata.name,
			kueue.default_queue, _owner_text, kueue.queue_label, kueue.default_queue,
		],
	)
}

_owner_text := kueue.controller_owner_text(_new)

# Without Kueue's pod integration (with it, these pods wait behind its gate: lib.kueue.is_queued).
_judges_unmanaged if {
	input.request.operation in {"CREATE", "UPDATE"}
	object.get(input.request, "subResource", "") == ""
	not kueue.has_pod_integration
	kueue.managed_tenant
}

# The templates that ask GPUs, a pod each.
_gpu_templates contains t if {
	some t in input.pod_templates
	gpu.template_demand[t.path].total > 0
}

# "6 × 1 nvidia.com/gpu (a100)"; several templates joined by " + ".
_workload_asks_text := concat(" + ", [sprintf("%v × %s", [t.replicas, gpu_text.describe_asks(t.spec)]) |
	some t in _gpu_templates
])

_adds_gpus if {
	input.request.operation == "CREATE"
	count(_gpu_templates) > 0
}

# A template asks more GPUs a pod than it did (GPUs added to a template, whatever its replicas).
_adds_gpus if {
	input.request.operation == "UPDATE"
	some t in _gpu_templates
	gpu.template_demand[t.path].total > _old_pod_gpus(t)
}

# The workload asks more GPUs in all than it did (a GPU template's replicas raised, from 0 too).
_adds_gpus if {
	input.request.operation == "UPDATE"
	count(_gpu_templates) > 0
	_all_gpus > sum([n | some t in _gpu_templates; n := _old_pod_gpus(t) * _old_replicas(t)])
}

_all_gpus := sum([n | some t in _gpu_templates; n := gpu.template_demand[t.path].total * t.replicas])

_old_pod_gpus(t) := gpu.demand(object.get(_old, _parts(t.path), {})).total

# The replicas the old object ran of the template: the kind's replica field (the generated
# workloads data), else as many as the new one runs (kinds whose count lives beside each template).
_old_replicas(t) := object.get(_old, _parts(field), 1) if {
	some k in data.labgate.workloads.kinds
	[k.group, k.kind] == _kind
	field := k.replica_field
} else := t.replicas

# METADATA
# title: A scale call does not grow GPU work of a managed tenant outside Kueue
# description: |
#   `kubectl scale` up of a workload of a kind Kueue does not queue whose pods ask GPUs (one made
#   before the tenant was managed: a new one is refused when it is applied). The Scale carries only
#   the replica count, so the templates are the workload's, which the webhook reads
#   (input.scaled_workload). Scaling down, or to the same count, and workloads without GPUs pass.
# custom:
#   rule_id: queue-unmanaged-scale
violation contains {"rule": rule_id, "message": msg, "field": "spec.replicas"} if {
	input.request.subResource == "scale"
	input.request.operation == "UPDATE"
	not kueue.has_pod_integration
	tenant := kueue.managed_tenant
	before := object.get(input.request.oldObject, ["spec", "replicas"], 0)
	after := object.get(input.request.object, ["spec", "replicas"], 0)
	after > before
	some t in object.get(input, ["scaled_workload", "pod_templates"], [])
	gpu.demand(t.spec).total > 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %q scaled from %d to %d pods of %s outside Kueue; tenant %q's GPU work waits in LocalQueue %q, ",
			"which takes Jobs. Fix: scale it to 0 and run the work as a Job with label %s: %s",
		]),
		[
			rule_id, input.scaled_workload.kind, input.request.name, before, after, gpu_text.describe_asks(t.spec),
			tenant.metadata.name, kueue.default_queue, kueue.queue_label, kueue.default_queue,
		],
	)
}

# METADATA
# title: A scale call of a managed tenant's workload labgate cannot read does not grow it
# description: |
#   Fail closed: without the workload's pod templates (input.scaled_workload.error) labgate cannot
#   tell whether the new pods ask GPUs outside Kueue, so a scale up is refused; scaling down passes.
# custom:
#   rule_id: queue-unmanaged-scale
violation contains {"rule": rule_id, "message": msg, "field": "spec.replicas"} if {
	input.request.subResource == "scale"
	input.request.operation == "UPDATE"
	not kueue.has_pod_integration
	tenant := kueue.managed_tenant
	before := object.get(input.request.oldObject, ["spec", "replicas"], 0)
	after := object.get(input.request.object, ["spec", "replicas"], 0)
	after > before
	reason := input.scaled_workload.error
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %q scaled from %d to %d pods, but labgate could not read it to tell whether its pods ask GPUs, ",
			"which tenant %q runs through Kueue (%s). Fix: try again; if it persists, tell the infra team",
		]),
		[rule_id, input.scaled_workload.kind, tenancy.object_name, before, after, tenant.metadata.name, reason],
	)
}
