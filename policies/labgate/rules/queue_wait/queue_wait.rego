# METADATA
# title: Where a workload Kueue queues waits
# description: |
#   queue-wait: where a workload Kueue queues waits, and why. The counterpart of gpu-quota-pending
#   (rules.gpu_quota) for a tenant Kueue manages; the limits, free GPUs and arithmetic are
#   rules.gpu_quota's, so the two say the same numbers.
package labgate.rules.queue_wait

import data.labgate.lib.gpu
import data.labgate.lib.gpu_text
import data.labgate.lib.kueue
import data.labgate.lib.tenancy
import data.labgate.rules.gpu_quota

# METADATA
# title: A workload Kueue queues says where it waits and why when applied
# description: |
#   Announced, not refused (config rule_modes gives it warn): a workload Kueue queues is created
#   suspended (a pod: gated) and starts only when its LocalQueue's ClusterQueue admits it whole.
#   Says the queue, what the workload asks in all, what the tenant uses of the limit that binds
#   (the one with the least room left; a model's before the total on a tie), whether it fits now or
#   waits whole until enough GPUs are free, what is queued ahead (the Tenant's status:
#   input.gpu_queued, from Kueue's Workloads), and how to watch it. Only when the workload is
#   admitted (`if_admitted`): a refused one (gpu-quota-unfit, queue-*) waits nowhere.
# custom:
#   rule_id: queue-wait
violation contains {"rule": rule_id, "message": msg, "field": _queue_label_field, "if_admitted": true} if {
	input.request.operation == "CREATE"
	gpu_quota.has_usage
	gpu_quota.waits_in_kueue
	tenant := kueue.managed_tenant
	count(gpu_quota.unfit_limits(tenant)) == 0 # refused: nothing will wait
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf("[%s] %s %s. Fix: none, it starts by itself (watch: kubectl get workloads -n %s)", [
		rule_id, tenancy.object_ref, _wait_text(tenant), input.request.namespace,
	])
}

_queue_label_field := sprintf("metadata.labels[%s]", [kueue.queue_label])

# "team-b-1/default": the mutation names the default queue when the object names none.
_local_queue := sprintf("%s/%s", [input.request.namespace, _queue_name])

_queue_name := q if {
	q := kueue.queue_of(input.request.object)
	q != ""
} else := kueue.default_queue

# The limit the workload's GPUs, all at once, leave the least room under (it is the one Kueue waits
# on); undefined when the workload asks no GPUs under any limit.
_wait_limit(tenant) := min(ranked)[2] if {
	ranked := {[gpu_quota.free_gpus(tenant, m) - gpu_quota.all_at_once(m), gpu_quota.total_last(m), m] |
		some m in gpu_quota.checked_limits(tenant)
		count(gpu_quota.limit_terms(m)) > 0
	}
	count(ranked) > 0
}

_wait_text(tenant) := sprintf(
	"waits in LocalQueue %s: it runs %s; tenant %q uses %s, so it %s until %s are free (%v now)%s",
	[
		_local_queue,
		gpu_quota.arithmetic_text(gpu_quota.limit_terms(model), model),
		tenant.metadata.name,
		gpu_quota.usage_text(tenant, model),
		_how_it_waits,
		gpu_text.plural(gpu_quota.all_at_once(model), gpu_quota.gpu_word(model)),
		gpu_quota.free_gpus(tenant, model),
		_ahead_text,
	],
) if {
	model := _wait_limit(tenant)
	gpu_quota.all_at_once(model) > gpu_quota.free_gpus(tenant, model)
} else := sprintf(
	"is queued in LocalQueue %s: it runs %s; tenant %q uses %s, so it fits now and starts once Kueue admits it%s",
	[
		_local_queue,
		gpu_quota.arithmetic_text(gpu_quota.limit_terms(model), model),
		tenant.metadata.name,
		gpu_quota.usage_text(tenant, model),
		_ahead_text,
	],
) if {
	model := _wait_limit(tenant)
} else := sprintf("is queued in LocalQueue %s and starts once Kueue admits it (%s)%s", [
	_local_queue, _no_limit_text(tenant), _ahead_text,
])

# A pod waits unscheduled behind Kueue's gate (kueue.x-k8s.io/admission); a workload Kueue suspends
# waits with none of its pods created.
_how_it_waits := "waits behind Kueue's scheduling gate, not scheduled," if {
	kueue.is_pod
} else := "waits whole, no pod started,"

_no_limit_text(tenant) := sprintf("tenant %q has no GPU limit it asks under", [tenant.metadata.name]) if {
	count(gpu.checked_templates) > 0
	kueue.asks_gpus
} else := "it asks no GPUs"

# What Kueue holds queued of the tenant, as its status last said (rbac.tenant_status: queuedWorkloads).
_ahead_text := sprintf("; queued ahead: %s asking %s", [
	gpu_text.plural(input.gpu_queued.workloads, "workload"),
	gpu_text.plural(input.gpu_queued.gpus, "GPU"),
]) if {
	input.gpu_queued.workloads > 0
} else := ""
