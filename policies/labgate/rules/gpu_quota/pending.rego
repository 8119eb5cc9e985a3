package labgate.rules.gpu_quota

import data.labgate.lib.gpu
import data.labgate.lib.gpu_text
import data.labgate.lib.kueue
import data.labgate.lib.tenancy

# What gpu_quota announces when a workload is applied instead of refusing it (config rule_modes gives
# both warn): pods that will wait for GPUs (gpu-quota-pending) and CronJob runs that may overlap
# (gpu-cronjob-overlap), with the free GPUs and usage they say (queue_wait says them too). Split from
# gpu_quota.rego, whose limits and arithmetic it uses: one package.

# --- pods that will wait: a workload that fits its quota but not what is free now ---

_used_of("") := _used_total

_used_of(model) := _used(model) if model != ""

# METADATA
# title: Whether the webhook gave the tenant's GPU usage
# description: |
#   The announcements about waiting pods need input.gpu_usage; without it (an offline check, an
#   audit) nothing is said about what is free now.
has_usage if is_object(input.gpu_usage)

# METADATA
# title: The limits a workload's pods can never fit all at once
# description: |
#   The limits gpu-quota-unfit refuses the workload for; a workload refused as unfit is not also
#   announced as waiting.
unfit_limits(tenant) := {model |
	some model in checked_limits(tenant)
	count(limit_terms(model)) > 0
	all_at_once(model) > _limit(tenant, model)
}

# The limits whose free GPUs the workload's pods, all at once, exceed (though they fit the limit).
_pending_limits(tenant) := {model |
	some model in checked_limits(tenant)
	count(limit_terms(model)) > 0
	all_at_once(model) <= _limit(tenant, model)
	all_at_once(model) + _used_of(model) > _limit(tenant, model)
}

# METADATA
# title: The GPUs of a limit still free now
# description: |
#   The limit less what the tenant uses or has reserved, never below zero; the waiting announcements
#   and queue_wait say it.
free_gpus(tenant, model) := max([_limit(tenant, model) - _used_of(model), 0])

_can_start(tenant, model, terms) := "no pod can start now" if {
	count(terms) == 1
	floor(free_gpus(tenant, model) / terms[0].each) == 0
} else := sprintf(
	"only %s can start now",
	[gpu_text.plural(floor(free_gpus(tenant, model) / terms[0].each), "pod")],
) if {
	count(terms) == 1
} else := sprintf("only %s are free now", [gpu_text.plural(free_gpus(tenant, model), gpu_word(model))])

# METADATA
# scope: document
# title: What the tenant uses of a limit, as text
# description: |
#   "6 of 8 h100 GPUs" or "6 of 16 GPUs": the usage against the total or a model's limit, as the
#   waiting announcements and queue_wait say it.
usage_text(tenant, "") := sprintf("%v of %v GPUs", [_used_total, tenant.spec.gpu.total])

usage_text(tenant, model) := sprintf(
	"%v of %s",
	[_used(model), gpu_text.plural(_models(tenant)[model], gpu_word(model))],
) if {
	model != ""
}

# METADATA
# title: A workload whose pods will wait for GPUs says so when applied
# description: |
#   Announced, not refused (config rule_modes gives it warn): the pods beyond what is free are
#   refused one by one when the controller creates them (gpu-quota), which shows only in the
#   workload's events (FailedCreate), until running pods finish. Said about the limit that binds
#   (the fewest pods can start under it), never about a workload gpu-quota-unfit refuses, and only
#   when the workload is admitted (`if_admitted`: labgate.admission drops it beside a refusal).
# custom:
#   rule_id: gpu-quota-pending
violation contains {"rule": rule_id, "message": msg, "field": _unfit_field, "if_admitted": true} if {
	not gpu.is_pod
	input.request.operation == "CREATE" # on UPDATE its own pods are in the usage already
	has_usage
	not waits_in_kueue
	tenant := tenancy.namespace_tenant
	count(gpu.checked_templates) > 0
	count(unfit_limits(tenant)) == 0 # refused: nothing will wait
	pending := _pending_limits(tenant)
	some model in pending
	_is_binding(tenant, pending, model)
	terms := limit_terms(model)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s runs %s; tenant %q uses %s now, so %s and the rest wait (events: FailedCreate) until GPUs are ",
			"free. Fix: wait for running pods to finish, or run fewer pods at once (%s)",
		]),
		[
			rule_id, tenancy.object_ref, arithmetic_text(terms, model), tenant.metadata.name,
			usage_text(tenant, model), _can_start(tenant, model, terms),
			object.get(_replica_field, input.request.kind.kind, "its replica count"),
		],
	)
}

# METADATA
# title: Whether the workload waits in a Kueue queue
# description: |
#   A workload Kueue queues waits suspended until its queue admits it, so no pod is refused
#   meanwhile and gpu-quota-pending has nothing to announce; queue_wait says how it waits instead.
waits_in_kueue if {
	kueue.managed_tenant
	kueue.is_queued(input.request.object)
}

# One finding per workload, about the limit that binds: the one that lets the fewest pods (or, with
# several templates, the fewest GPUs) start now; a model's limit before the total on a tie.
_is_binding(tenant, pending, model) if {
	ranked := {[_startable(tenant, m), total_last(m), m] | some m in pending}
	min(ranked)[2] == model
}

_startable(tenant, model) := floor(free_gpus(tenant, model) / terms[0].each) if {
	terms := limit_terms(model)
	count(terms) == 1
} else := free_gpus(tenant, model)

# METADATA
# scope: document
# title: The rank that puts a model's limit before the total
# description: |
#   Breaks ties between limits that bind equally (here, in gpu_quota's refusals and scale's, and in
#   queue_wait): a model's limit (0) ranks before the tenant's total (1), so the message names the
#   more specific limit.
total_last("") := 1

total_last(model) := 0 if model != ""

# --- CronJob runs that may overlap ---

# METADATA
# title: A CronJob whose GPU runs may overlap says so when applied
# description: |
#   Announced, not refused (config rule_modes gives it warn): with concurrencyPolicy Allow (the
#   default) a run that starts before the last one ends asks its GPUs on top of it, and its pods wait
#   or are refused (gpu-quota) while the tenant is at its quota.
# custom:
#   rule_id: gpu-cronjob-overlap
violation contains {"rule": rule_id, "message": msg, "field": "spec.concurrencyPolicy"} if {
	input.request.kind.kind == "CronJob" # first, for rule indexing
	input.request.kind.group == "batch"
	tenant := tenancy.namespace_tenant
	count(gpu.checked_templates) > 0
	object.get(input.request.object, ["spec", "concurrencyPolicy"], "Allow") == "Allow"
	terms := limit_terms("")
	count(terms) > 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s runs %s per run with concurrencyPolicy Allow: a run that starts before the last one ends adds its ",
			"GPUs to tenant %q's usage, and its pods wait or are refused at the quota. Fix: set ",
			"spec.concurrencyPolicy: Forbid (skip a run while one is active) or Replace",
		]),
		[rule_id, tenancy.object_ref, arithmetic_text(terms, ""), tenant.metadata.name],
	)
}
