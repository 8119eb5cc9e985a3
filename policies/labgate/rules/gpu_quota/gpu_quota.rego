# METADATA
# title: Tenant GPU quota
# description: |
#   A tenant's GPUs are limited across all its namespaces by spec.gpu.total and, per model, by
#   spec.gpu.models. A Pod created in a tenant namespace (by anyone: a Job's pods count too) is
#   refused when its demand (lib.gpu) plus what the tenant already uses or has reserved
#   (input.gpu_usage, gathered by the webhook from the quota ledger) exceeds a limit (the models a
#   tenant may use: rules.gpu_model; what cannot be counted: rules.gpu_countable). A workload whose
#   pods, all running at once, could never fit the limits is
#   refused when applied; one whose pods will wait for GPUs now is announced. A tenant without
#   spec.gpu.total has no total limit; its per-model limits, when it lists any, still hold.
#   `demand` is the request's Pod's demand, which the webhook reserves in the ledger when it admits.
#   A pod behind Kueue's admission gate holds none while it waits in the queue: it is judged against
#   the usage, and reserved, when the gate is removed (lib.gpu.judged_pod_template).
#   A pod beyond quota of a tenant with spec.gpu.overQuota: preemptible is admitted instead, and
#   reserves nothing (rules.gpu_preemptible).
package labgate.rules.gpu_quota

import data.labgate.lib.gpu
import data.labgate.lib.gpu_text
import data.labgate.lib.tenancy
import data.labgate.rules.gpu_preemptible

# What the tenant uses or has reserved, not counting this request; nothing when not given.
_usage := object.get(input, "gpu_usage", {})

_used_total := object.get(_usage, "total", 0)

_used(model) := object.get(_usage, ["by_model", model], 0)

_models(tenant) := m if {
	m := tenant.spec.gpu.models
	is_object(m)
} else := {}

_has_total(tenant) if is_number(tenant.spec.gpu.total)

# The Pod the webhook reserves for when it admits (not one behind Kueue's admission gate: it holds
# nothing until Kueue removes the gate, and is reserved then).
_pod_template := gpu.reserved_pod_template

# METADATA
# scope: document
# title: The GPUs the webhook reserves for the request's pod
# description: |
#   What the request's Pod asks ({total, by_model}), which the webhook reserves in the quota ledger
#   when the verdict is to admit; zero for anything else, for a pod behind Kueue's admission gate
#   until the gate is removed, and for a preemptible pod beyond quota (tenant overQuota:
#   preemptible), which holds no reservation.
default demand := {"total": 0, "by_model": {}}

# A preemptible pod beyond quota (tenant overQuota: preemptible) holds no reservation.
demand := gpu.template_demand[_pod_template.path] if not gpu_preemptible.is_admitted

# METADATA
# scope: document
# title: The usage up to which the request's pod still fits the GPU quota
# description: |
#   The most GPUs the tenant may use or have reserved, in total and per model, with the pod still
#   admitted: gpu-quota refuses it exactly when input.gpu_usage goes beyond one of these (total
#   null: no total limit; by_model only the models it asks that have a limit). The webhook decides a
#   burst of GPU pods against these numbers and asks again only at the quota's edge.
default headroom := null

headroom := {"total": _headroom_total(tenant, d), "by_model": by_model} if {
	not gpu_preemptible.is_admitted
	tenant := tenancy.namespace_tenant
	d := gpu.template_demand[_pod_template.path]
	d.total > 0
	by_model := {model: room |
		some model, limit in _models(tenant)
		asked := object.get(d.by_model, model, 0)
		asked > 0
		room := limit - asked
	}
}

_headroom_total(tenant, d) := tenant.spec.gpu.total - d.total if _has_total(tenant)

else := null

# METADATA
# title: Whether a GPU demand goes beyond one of the tenant's limits
# description: |
#   For the preemptible mutation: a pod whose demand `d` exceeds the total or a model's limit is
#   admitted beyond quota as preemptible, where the tenant allows it.
exceeds(tenant, d) if overrun_text(tenant, d)

# METADATA
# title: The limits a pod's demand would exceed, as text
# description: |
#   "12 of 16 GPUs (h100: 4 of 8)": what gpu-quota's refusal says the tenant uses, and what the
#   mutation quotes when it admits a pod beyond them as preemptible.
overrun_text(tenant, d) := sprintf("%v of %v GPUs%s", [_used_total, tenant.spec.gpu.total, _in_parentheses(parts)]) if {
	_has_total(tenant)
	d.total + _used_total > tenant.spec.gpu.total
	parts := _model_overruns(tenant, d)
} else := concat(
	", ",
	[sprintf("%v of %v %s GPUs", [o.used, o.limit, o.model]) | some o in _model_overrun_list(tenant, d)],
) if {
	count(_model_overrun_list(tenant, d)) > 0
}

_model_overrun_list(tenant, d) := [{"model": model, "used": _used(model), "limit": limit} |
	some model in sort(object.keys(_models(tenant)))
	limit := _models(tenant)[model]
	asked := object.get(d.by_model, model, 0)
	asked > 0
	asked + _used(model) > limit
]

_model_overruns(tenant, d) := [sprintf("%s: %v of %v", [o.model, o.used, o.limit]) |
	some o in _model_overrun_list(tenant, d)
]

_in_parentheses(parts) := "" if {
	count(parts) == 0
} else := sprintf(" (%s)", [concat(", ", parts)])

# METADATA
# title: A tenant's pods fit its GPU quota
# custom:
#   rule_id: gpu-quota
violation contains {"rule": rule_id, "message": msg, "field": sprintf("%s.containers", [template.path])} if {
	input.request.kind.kind == "Pod" # first, for rule indexing
	input.request.kind.group == ""
	template := gpu.judged_pod_template
	not gpu_preemptible.is_admitted
	tenant := tenancy.namespace_tenant
	d := gpu.template_demand[template.path]
	d.total > 0
	_usage_decides(tenant, d)
	overrun := overrun_text(tenant, d)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s asks %s; tenant %q uses %s%s. Fix: %s",
		[
			rule_id, tenancy.object_ref, gpu_text.describe_asks(template.spec), tenant.metadata.name, overrun, _held_text,
			_quota_fix(tenant, d),
		],
	)
}

# A pod reserved now is judged against the usage. One created behind Kueue's admission gate waits in
# Kueue's queue instead, whatever the tenant uses now (it is judged against the usage when the gate
# is removed): refused now only when it alone exceeds a limit, which no wait can help.
_usage_decides(_, _) if _pod_template

_usage_decides(tenant, d) if {
	not _pod_template
	count(_alone_over(tenant, d)) > 0
}

# Of that usage, what admitted pods the scheduler has not bound yet hold (input.gpu_held, as the
# Tenant's status last said it): they count until they run or are deleted. The status names the first
# few such pods only (all_named false): their count is then not the number of pods that hold the GPUs.
_held_text := sprintf(", %v held by %s not yet scheduled: %s", [
	input.gpu_held.gpus,
	gpu_text.plural(count(input.gpu_held.pods), "pod"),
	concat(", ", input.gpu_held.pods),
]) if {
	_holds_named
	object.get(input.gpu_held, "all_named", true) == true
} else := sprintf(", %v held by pods not yet scheduled, among them %s", [
	input.gpu_held.gpus,
	concat(", ", input.gpu_held.pods),
]) if {
	_holds_named
} else := ""

_holds_named if {
	input.gpu_held.gpus > 0
	count(input.gpu_held.pods) > 0
}

# The limits the pod's demand exceeds on its own, whatever else runs: waiting can never help those.
_alone_over(tenant, d) := array.concat(
	[{"model": "", "limit": tenant.spec.gpu.total} | _has_total(tenant); d.total > tenant.spec.gpu.total],
	[{"model": model, "limit": limit} |
		some model in sort(object.keys(_models(tenant)))
		limit := _models(tenant)[model]
		object.get(d.by_model, model, 0) > limit
	],
)

_quota_fix(tenant, d) := sprintf(
	concat("", [
		"ask at most %s per pod: the largest node of your pools has %v (a larger pod is never scheduled, so waiting ",
		"cannot help)",
	]),
	[gpu_text.plural(over.limit, gpu_word(_node_model(over.model))), over.limit],
) if {
	over := _binding_over(tenant, d)
	over.is_node
} else := sprintf(
	concat("", [
		"ask at most %s per pod (the request alone exceeds the limit, so waiting cannot help), or ask the infra ",
		"team to raise %s of Tenant %q",
	]),
	[gpu_text.plural(over.limit, gpu_word(over.model)), _limit_field(over.model), tenant.metadata.name],
) if {
	over := _binding_over(tenant, d)
} else := "lower the request, wait for running pods to finish, or delete a pod that waits for a node" if {
	_held_text != ""
} else := "lower the request or wait for running pods to finish"

# What the nodes of the tenant's pools hold per model (input.gpu_pools, as the Tenant's status last
# said it): {model: {"gpus", "nodes", "largestNode"}}; nothing when labgate does not know.
_pools := object.get(input, "gpu_pools", {})

# The largest node of the pools for a model the pod asks; for a pod that names no model, the largest
# of any model. Undefined without facts.
_largest_node(model) := n if {
	n := _pools[model].largestNode
} else := n if {
	model == gpu.unspecified_model
	sizes := [p.largestNode | some p in _pools]
	count(sizes) > 0
	n := max(sizes)
}

_node_model(model) := "" if {
	model == gpu.unspecified_model
} else := model

# The models the pod asks more of than the largest node of its pools has: it is never scheduled.
_node_over(d) := [{"model": model, "limit": n, "is_node": true} |
	some model in sort(object.keys(d.by_model))
	n := _largest_node(model)
	d.by_model[model] > n
]

# The limit a request over several must meet first: the smallest (a model's before the total on a
# tie, a quota's before a node's), so the Fix is the one that fits, not one that leads to the next
# refusal (32 asked of 24 GPUs, 16 h100 and nodes of 8: "ask at most 8", not 16, then wait forever).
_binding_over(tenant, d) := overs[min(ranked)[2]] if {
	overs := array.concat(_alone_over(tenant, d), _node_over(d))
	ranked := {[o.limit, total_last(o.model), i] | some i, o in overs}
	count(ranked) > 0
}

# Where the request's kind says how many pods run at once, when one field says it for all its pod
# templates (data.labgate.workloads, generated from labgate/core/workload_catalog.py: `labgate generate`).
_replica_field := {w.kind: w.replica_field |
	some w in data.labgate.workloads.kinds
	w.group == input.request.kind.group
	w.replica_field
}

_replicas(template) := object.get(template, "replicas", 1)

# METADATA
# title: What a workload's pods ask all at once, per template
# description: |
#   [{pods, each, models}] for the templates that ask any GPUs, of the whole tenant (model "") or of
#   one model: the terms of the arithmetic the unfit, pending and queue-wait messages show.
limit_terms(model) := [{"pods": _replicas(t), "each": each, "models": object.keys(d.by_model)} |
	some t in input.pod_templates
	d := gpu.template_demand[t.path]
	each := _per_pod(d, model)
	each > 0
	_replicas(t) > 0
]

# The largest node of the pools for a workload's one template, when it asks more than that node has:
# its pods are never scheduled, whatever the quota. The model's node, or for the total the node of
# the one model its pods ask. Undefined without facts, with several templates, or when it fits.
_node_cap(terms, model) := n if {
	count(terms) == 1
	n := _term_largest_node(terms[0], model)
	terms[0].each > n
}

_term_largest_node(_, model) := _largest_node(model) if model != ""

_term_largest_node(term, "") := _largest_node(m) if {
	count(term.models) == 1
	some m in term.models
}

_per_pod(d, "") := d.total

_per_pod(d, model) := object.get(d.by_model, model, 0) if model != ""

# METADATA
# title: A workload's GPU arithmetic as text
# description: |
#   "4 pods × 2 h100 GPUs = 8": how the messages show what a workload asks all at once, so a
#   researcher sees which number to lower.
arithmetic_text(terms, model) := sprintf("%s = %v", [
	concat(
		" + ",
		[sprintf("%s × %s", [gpu_text.plural(t.pods, "pod"), gpu_text.plural(t.each, gpu_word(model))]) | some t in terms],
	),
	sum([n | some t in terms; n := t.pods * t.each]),
])

# METADATA
# scope: document
# title: The noun for the GPUs a limit counts
# description: |
#   "GPU" for the tenant's total, "h100 GPU" for a model's limit, pluralised by gpu_text.plural.
gpu_word("") := "GPU"

gpu_word(model) := sprintf("%s GPU", [model]) if model != ""

_limit_text(tenant, "") := sprintf("tenant %q has %v in total", [tenant.metadata.name, tenant.spec.gpu.total])

_limit_text(tenant, model) := sprintf(
	"tenant %q has %s",
	[tenant.metadata.name, gpu_text.plural(_models(tenant)[model], gpu_word(model))],
) if {
	model != ""
}

_limit(tenant, "") := tenant.spec.gpu.total

_limit(tenant, model) := _models(tenant)[model] if model != ""

_limit_field("") := "spec.gpu.total"

_limit_field(model) := sprintf("spec.gpu.models[%s]", [model]) if model != ""

# Kinds whose pods all start together (a gang: the job waits for every one of them), so running
# fewer at once is no fix. A Job is one when Indexed with as many pods at once as completions.
_gang_kinds := {
	["jobset.x-k8s.io", "JobSet"],
	["kubeflow.org", "PyTorchJob"],
	["kubeflow.org", "TFJob"],
	["kubeflow.org", "MPIJob"],
	["kubeflow.org", "XGBoostJob"],
	["kubeflow.org", "PaddleJob"],
	["trainer.kubeflow.org", "TrainJob"],
}

_is_gang if [input.request.kind.group, input.request.kind.kind] in _gang_kinds

_is_gang if {
	input.request.kind.group == "batch"
	input.request.kind.kind == "Job"
	spec := input.request.object.spec
	spec.completionMode == "Indexed"
	object.get(spec, "parallelism", 1) == spec.completions
}

_pod_count(terms) := sum([t.pods | some t in terms])

# The Fix of gpu-quota-unfit. A gang: its pods cannot wait for each other, they can only ask less
# each or get more quota.
_unfit_fix(terms, limit, model, tenant) := sprintf(
	"its %s start together and the largest node of your pools has %v, so ask at most %s per pod",
	[gpu_text.plural(_pod_count(terms), "pod"), n, gpu_text.plural(n, gpu_word(model))],
) if {
	_is_gang
	n := _node_cap(terms, model)
	n < floor(limit / _pod_count(terms))
} else := sprintf("ask at most %s per pod: the largest node of your pools has %v (a larger pod is never scheduled)%s", [
	gpu_text.plural(n, gpu_word(model)),
	n,
	_at_once_text(terms, limit, n),
]) if {
	not _is_gang
	n := _node_cap(terms, model)
	n < limit
} else := sprintf("its %s start together, so ask at most %s per pod, or %s", [
	gpu_text.plural(_pod_count(terms), "pod"),
	gpu_text.plural(floor(limit / _pod_count(terms)), gpu_word(model)),
	_raise_text(model, tenant),
]) if {
	_is_gang
	_pod_count(terms) <= limit
} else := sprintf("%s (its %s start together, so even 1 %s each is too many)", [
	_raise_text(model, tenant),
	gpu_text.plural(_pod_count(terms), "pod"),
	gpu_word(model),
]) if {
	_is_gang
} else := sprintf("%s, or %s", [_unfit_fix_of_pods(terms, limit), _raise_text(model, tenant)])

# With pods of `each` GPUs, how many may run at once under `limit`, when fewer than the workload runs.
_at_once_text(terms, limit, each) := sprintf(", and run at most %s at once (%s)", [
	gpu_text.plural(floor(limit / each), "pod"),
	object.get(_replica_field, input.request.kind.kind, "its replica count"),
]) if {
	terms[0].pods * each > limit
} else := ""

_raise_text(model, tenant) := sprintf(
	"ask the infra team to raise %s of Tenant %q",
	[_limit_field(model), tenant.metadata.name],
)

# One template: how many pods of this size fit; several: only the sum can be named.
_unfit_fix_of_pods(terms, limit) := sprintf("run at most %v at once (%s) or ask fewer GPUs per pod", [
	gpu_text.plural(floor(limit / terms[0].each), "pod"),
	object.get(_replica_field, input.request.kind.kind, "its replica count"),
]) if {
	count(terms) == 1
	terms[0].each <= limit
} else := sprintf("ask at most %v per pod", [gpu_text.plural(limit, "GPU")]) if {
	count(terms) == 1
} else := sprintf("lower the replica counts or the GPUs per pod until they total at most %v", [limit])

# METADATA
# title: The GPU limits a workload is checked against
# description: |
#   The tenant's total ("") when it has one, and each model it lists in spec.gpu.models.
checked_limits(tenant) := {"" | _has_total(tenant)} | object.keys(_models(tenant))

# METADATA
# title: A workload whose pods can never all run within the GPU quota is refused when applied
# custom:
#   rule_id: gpu-quota-unfit
violation contains {"rule": rule_id, "message": msg, "field": _unfit_field} if {
	not gpu.is_pod
	tenant := tenancy.namespace_tenant
	count(gpu.checked_templates) > 0
	some model in checked_limits(tenant)
	terms := limit_terms(model)
	count(terms) > 0
	limit := _limit(tenant, model)
	all_at_once(model) > limit
	not _said_by_a_model_limit(tenant, model)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s runs %s; %s. Fix: %s",
		[
			rule_id, tenancy.object_ref, arithmetic_text(terms, model), _limit_text(tenant, model),
			_unfit_fix(terms, limit, model, tenant),
		],
	)
}

# METADATA
# title: The GPUs a workload's pods ask when they all run
# description: |
#   The sum over its templates of pods × GPUs each, against the total ("") or one model's limit:
#   more than the limit can never run (gpu-quota-unfit), more than what is free waits (gpu-quota-
#   pending).
all_at_once(model) := sum([n | some t in limit_terms(model); n := t.pods * t.each])

# When every GPU asked is of one model whose limit is no larger than the total, the model's refusal
# says all the total's would.
_said_by_a_model_limit(tenant, "") if {
	some model in object.keys(_models(tenant))
	all_at_once(model) == all_at_once("")
	_limit(tenant, model) <= _limit(tenant, "")
}

# A gang's refusal points at the GPUs its pods ask, not at how many run at once.
_unfit_field := concat(".", [input.pod_templates[0].path, "containers"]) if {
	_is_gang
} else := object.get(_replica_field, input.request.kind.kind, concat(".", [input.pod_templates[0].path, "containers"]))
