# METADATA
# title: Kueue's queue cannot be skipped
# description: |
#   Where Kueue manages a tenant (lib.kueue.managed_tenant), every object of a tenant that
#   Kueue queues (Jobs, JobSets, Kubeflow training jobs, TrainJobs, RayJobs, RayClusters, and, with
#   Kueue's pod integration, bare pods that ask GPUs or name a queue; without it a bare GPU pod is
#   refused) waits in one of the tenant's own LocalQueues:
#   the mutation names `default` when the object names none, and these rules refuse a queue the
#   tenant does not own, a change of queue, and starting a workload (spec.suspend false, Kueue's
#   scheduling gate removed, node selectors edited before admission) by anyone but Kueue's
#   controller (config queue.kueue_users). Kueue's controller is exempt for those fields only: every
#   other rule judges its requests as any other's. A WorkloadPriorityClass (label
#   kueue.x-k8s.io/priority-class) is judged as a PriorityClass is: one of the tenant's classes by
#   name, and at or below its ceiling where labgate knows the class's value.
package labgate.rules.queue

import data.labgate.lib.gpu_text
import data.labgate.lib.kueue
import data.labgate.lib.tenancy

_new := input.request.object

_old := input.request.oldObject

_queued if {
	input.request.operation in {"CREATE", "UPDATE"}
	object.get(input.request, "subResource", "") == ""
	kueue.managed_tenant
	kueue.is_queued(_new)
}

_queue_field := sprintf("metadata.labels[%s]", [kueue.queue_label])

_owned_text := concat(", ", [sprintf("%q", [q]) | some q in sort(kueue.owned_queues)])

# METADATA
# title: A queued workload names one of its tenant's LocalQueues
# custom:
#   rule_id: queue-name
violation contains {"rule": rule_id, "message": msg, "field": _queue_field} if {
	_queued
	queue := kueue.queue_of(_new)
	not queue in kueue.owned_queues
	_names_or_creates(queue)
	tenant := kueue.managed_tenant
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s; tenant %q's workloads wait in its own LocalQueue here (%s). Fix: set label %s: %s, or leave ",
			"it out and labgate sets it",
		]),
		[
			rule_id, tenancy.object_ref, _names_text(queue), tenant.metadata.name, _owned_text, kueue.queue_label,
			kueue.default_queue,
		],
	)
}

# A missing label is refused on CREATE only (the mutation sets it then); an object made before Kueue
# managed the tenant can still be updated. A removed label is a change of queue (queue-change).
_names_or_creates(queue) if queue != ""

_names_or_creates("") if input.request.operation == "CREATE"

_names_text("") := sprintf("names no LocalQueue (label %s)", [kueue.queue_label])

_names_text(queue) := sprintf("names LocalQueue %q (label %s)", [queue, kueue.queue_label]) if queue != ""

# METADATA
# title: Without Kueue's pod integration, GPU work of a managed tenant runs in a workload that queues
# custom:
#   rule_id: queue-bare-pod
violation contains {"rule": rule_id, "message": msg, "field": "spec.containers"} if {
	input.request.operation == "CREATE"
	tenant := kueue.managed_tenant
	not kueue.has_pod_integration
	kueue.is_bare_pod(_new)
	kueue.asks_gpus
	template := input.pod_templates[0]
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s asks %s outside any queue; tenant %q's GPU work waits in its Kueue queue, which takes Jobs, not ",
			"bare pods. Fix: run it as a Job (kubectl create job), which labgate puts in LocalQueue %q",
		]),
		[rule_id, tenancy.object_ref, gpu_text.describe_asks(template.spec), tenant.metadata.name, kueue.default_queue],
	)
}

# METADATA
# title: A queued workload stays in its queue
# custom:
#   rule_id: queue-change
violation contains {"rule": rule_id, "message": msg, "field": _queue_field} if {
	_queued
	input.request.operation == "UPDATE"
	before := kueue.queue_of(_old)
	after := kueue.queue_of(_new)
	before != after
	before != ""
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s moves from LocalQueue %q to %s (label %s); a queued workload stays in the queue it was created ",
			"in. Fix: keep the label %s: %s, or delete it and create it anew",
		]),
		[rule_id, tenancy.object_ref, before, _queue_or_none(after), kueue.queue_label, kueue.queue_label, before],
	)
}

_queue_or_none("") := "none"

_queue_or_none(queue) := sprintf("%q", [queue]) if queue != ""

# METADATA
# title: Only Kueue starts a queued workload
# custom:
#   rule_id: queue-unsuspend
violation contains {"rule": rule_id, "message": msg, "field": concat(".", kueue.suspend_paths[_kind])} if {
	_queued
	kueue.is_suspendable
	not kueue.is_suspended(_new)
	_was_suspended
	not kueue.is_kueue_controller
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s sets %s to false; only Kueue starts a queued workload, when its queue admits it. Fix: leave %s ",
			"true and wait for admission (kubectl get workloads -n %s)",
		]),
		[
			rule_id, tenancy.object_ref, concat(".", kueue.suspend_paths[_kind]), concat(".", kueue.suspend_paths[_kind]),
			input.request.namespace,
		],
	)
}

_kind := [input.request.kind.group, input.request.kind.kind]

# On CREATE the mutation suspends it, so one that arrives running skipped the mutation.
_was_suspended if input.request.operation == "CREATE"

_was_suspended if {
	input.request.operation == "UPDATE"
	kueue.is_suspended(_old)
}

# METADATA
# title: Only Kueue removes its scheduling gate
# custom:
#   rule_id: queue-gate
violation contains {"rule": rule_id, "message": msg, "field": "spec.schedulingGates"} if {
	_queued
	kueue.is_pod
	input.request.operation == "UPDATE"
	kueue.is_gated(_old)
	not kueue.is_gated(_new)
	not kueue.is_kueue_controller
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s removes scheduling gate %s; only Kueue removes it, when its queue admits the pod. Fix: keep the ",
			"gate and wait for admission (kubectl get workloads -n %s)",
		]),
		[rule_id, tenancy.object_ref, kueue.admission_gate, input.request.namespace],
	)
}

# METADATA
# title: Before admission, only Kueue edits where a queued workload runs
# custom:
#   rule_id: queue-placement
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	_queued
	input.request.operation == "UPDATE"
	_waiting(_old)
	not kueue.is_kueue_controller
	some template in input.pod_templates
	some key in ["nodeSelector", "affinity"]
	before := object.get(_old, array.concat(_parts(template.path), [key]), null)
	object.get(template.spec, key, null) != before
	field := sprintf("%s.%s", [template.path, key])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s changes %s while it waits in its queue; Kueue sets where it runs when it admits it (the flavor's ",
			"node selector). Fix: leave %s as it was, or delete the workload and create it anew",
		]),
		[rule_id, tenancy.object_ref, field, field],
	)
}

_waiting(old) if {
	kueue.is_suspendable
	kueue.is_suspended(old)
}

_waiting(old) if {
	kueue.is_pod
	kueue.is_gated(old)
}

# "spec.replicatedJobs.0.template.spec" -> ["spec", "replicatedJobs", 0, "template", "spec"].
_parts(path) := [_key(p) | some p in split(path, ".")]

_key(p) := to_number(p) if {
	regex.match(`^[0-9]+$`, p)
} else := p

# --- Workload priority ---

_priority_class := _new.metadata.labels[kueue.priority_label]

_ceiling(tenant) := object.get(
	tenant,
	["spec", "scheduling", "maxPriority"],
	data.labgate.config.scheduling.max_priority,
)

# METADATA
# title: A workload's Kueue priority stays within the tenant's ceiling
# custom:
#   rule_id: queue-priority
violation contains {
	"rule": rule_id, "message": msg, "field": sprintf("metadata.labels[%s]", [kueue.priority_label]),
} if {
	_queued
	tenant := kueue.managed_tenant
	name := _priority_class
	problem := _priority_problem(name, tenant)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s asks WorkloadPriorityClass %q (label %s), %s. Fix: name one of the tenant's classes at or below ",
			"priority %v, or leave the label out",
		]),
		[rule_id, tenancy.object_ref, name, kueue.priority_label, problem, _ceiling(tenant)],
	)
}

# By name first, as PriorityClasses: labgate's research classes and those the Tenant lists
# (spec.scheduling.priorityClasses), never a system-* one; then by value, where the inventory has the
# class (data.inventory.workload_priority_classes, name -> {"value"}).
_allowed_classes(tenant) := {c |
	some c in array.concat(
		data.labgate.config.scheduling.research_priority_classes,
		object.get(tenant, ["spec", "scheduling", "priorityClasses"], []),
	)
	not startswith(c, "system-")
}

_priority_problem(name, tenant) := sprintf(
	"which tenant %q may not use (its classes: %s)",
	[tenant.metadata.name, _quoted(_allowed_classes(tenant))],
) if {
	not name in _allowed_classes(tenant)
}

_priority_problem(name, tenant) := sprintf(
	"priority %v, above tenant %q's ceiling of %v",
	[value, tenant.metadata.name, _ceiling(tenant)],
) if {
	name in _allowed_classes(tenant)
	value := data.inventory.workload_priority_classes[name].value
	value > _ceiling(tenant)
}

_quoted(names) := concat(", ", [sprintf("%q", [n]) | some n in sort(names)])
