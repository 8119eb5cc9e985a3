# METADATA
# title: Beyond GPU quota, as preemptible
# description: |
#   A tenant with spec.gpu.overQuota: preemptible gets a GPU pod that would exceed its quota admitted
#   at the preemptible priority (input.gpu_usage is the tenant's usage). The Priority admission
#   plugin has already resolved spec.priority on the Pod, so the class and its value are set
#   together. Gathered by labgate.mutation.
package labgate.mutations.preemptible

import data.labgate.lib.gpu
import data.labgate.lib.gpu_text
import data.labgate.lib.json_patch
import data.labgate.lib.kueue
import data.labgate.lib.tenancy
import data.labgate.mutations.queue
import data.labgate.rules.gpu_quota

# Each mutated template's changes, by its path: [{"rule", "ops", "warning"}].
template_changes[template.path] := _preemptible_changes(tenant, template) if {
	tenant := tenancy.namespace_tenant
	some template in json_patch.mutated_templates
}

# A pod that waits behind Kueue's admission gate (it carries it, or the queue mutation gates it)
# runs when Kueue admits it, not now: what the tenant uses now says nothing about its quota then,
# and it holds no GPUs until then (lib.gpu.reserved_pod_template).
_waits_behind_admission_gate if gpu.is_behind_admission_gate(input.request.object)

_waits_behind_admission_gate if {
	kueue.is_pod
	count(queue.changes) > 0 # a queued pod: gated by the queue mutation when it is not already
}

_preemptible_changes(tenant, template) := [{"rule": "gpu-preemptible", "ops": ops, "warning": warning} |
	gpu.is_pod
	template.path == "spec"
	not _waits_behind_admission_gate
	tenant.spec.gpu.overQuota == "preemptible"
	d := gpu.template_demand[template.path]
	d.total > 0
	gpu_quota.exceeds(tenant, d)
	label := data.labgate.config.preemptible_label
	object.get(template.metadata, ["labels", label], "") != "true"
	class := data.labgate.config.preemptible_priority_class
	labels := object.union(json_patch.object_or_empty(object.get(template.metadata, "labels", {})), {label: "true"})
	ops := [
		{"op": "add", "path": "/metadata/labels", "value": labels},
		{"op": "add", "path": "/spec/priorityClassName", "value": class},
		{"op": "add", "path": "/spec/priority", "value": data.labgate.config.preemptible_priority_value},
	]

	# The rule and the numbers, under 120 characters: "[gpu-preemptible] asks 8 GPUs, uses 12 of 16 GPUs
	# (h100: 4 of 8): admitted as preemptible, may be evicted".
	warning := sprintf(
		"[gpu-preemptible] asks %s, uses %s: admitted as preemptible, may be evicted",
		[gpu_text.plural(d.total, "GPU"), gpu_quota.overrun_text(tenant, d)],
	)
]
