# METADATA
# title: Tenant GPU quota
# description: |
#   A tenant's GPUs are limited across all its namespaces by spec.gpu.total and, per model, by
#   spec.gpu.models. A Pod created in a tenant namespace (by anyone: a Job's pods count too) is
#   refused when its demand (lib.gpu) plus what the tenant already uses or has reserved
#   (input.gpu_usage, gathered by the webhook from the quota ledger) exceeds a limit. A tenant that
#   lists models gets only those: a pod asking another model, or naming none while several are
#   listed, is refused. A workload whose pods, all running at once, could never fit the limits is
#   refused when applied. A tenant without spec.gpu.total has no total limit; its per-model limits,
#   when it lists any, still hold.
#   `demand` is the request's Pod's demand, which the webhook reserves in the ledger when it admits.
#   A tenant with spec.gpu.overQuota: preemptible gets pods beyond quota admitted instead of refused,
#   never silently: the mutation labels them labgate.io/preemptible=true and gives them the
#   preemptible priority class (config), they hold no reservation, and kubectl shows a warning.
#   Demand counts every container, init container, sidecar, the pod's overhead and its Dynamic
#   Resource Allocation claims as the scheduler does (lib.gpu). What cannot be counted is refused,
#   never free: a resource of a GPU vendor's domain labgate does not know (gpu-resource-unknown), a
#   claim it cannot read or whose device class it cannot count (gpu-dra-unsupported); the same holds
#   for ResourceClaims and ResourceClaimTemplates written in tenant namespaces.
package labgate.rules.gpu_quota

import data.labgate.lib.gpu
import data.labgate.lib.tenancy

# What the tenant uses or has reserved, not counting this request; nothing when not given.
_usage := object.get(input, "gpu_usage", {})

_used_total := object.get(_usage, "total", 0)

_used(model) := object.get(_usage, ["by_model", model], 0)

_models(tenant) := m if {
	m := tenant.spec.gpu.models
	is_object(m)
} else := {}

_has_total(tenant) if is_number(tenant.spec.gpu.total)

# The request's Pod in a tenant namespace, being created: what the webhook reserves when it admits.
_pod_template := template if {
	gpu.is_pod
	input.request.operation == "CREATE"
	tenancy.namespace_tenant
	some template in input.pod_templates
	template.path == "spec"
}

default demand := {"total": 0, "by_model": {}}

# A preemptible pod beyond quota (tenant overQuota: preemptible) holds no reservation.
demand := gpu.template_demand[_pod_template.path] if not _is_admitted_preemptible

# --- beyond quota as preemptible (spec.gpu.overQuota: preemptible) ---

_preemptible_label := data.labgate.config.preemptible_label

_preemptible_class := data.labgate.config.preemptible_priority_class

_allows_preemptible(tenant) if tenant.spec.gpu.overQuota == "preemptible"

_is_marked_preemptible if object.get(_pod_template.metadata, ["labels", _preemptible_label], "") == "true"

_is_admitted_preemptible if {
	_is_marked_preemptible
	_allows_preemptible(tenancy.namespace_tenant)
	object.get(_pod_template.spec, "priorityClassName", "") == _preemptible_class
}

# The most GPUs the tenant may use or have reserved, in total and per model, with the request's Pod
# still admitted: the gpu-quota rule refuses it exactly when input.gpu_usage goes beyond one of these
# (total null: no total limit; by_model only the models it asks that have a limit). The webhook
# decides a burst of GPU pods against these numbers, and asks again only at the quota's edge.
default headroom := null

headroom := {"total": _headroom_total(tenant, d), "by_model": by_model} if {
	not _is_admitted_preemptible
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

# Whether demand `d` would go beyond one of the tenant's limits (for the mutation).
exceeds(tenant, d) if _overrun_text(tenant, d)

# METADATA
# title: Preemptible pods run at the preemptible priority
# custom:
#   rule_id: gpu-preemptible
violation contains {"rule": rule_id, "message": msg, "field": "spec.priorityClassName"} if {
	_is_marked_preemptible
	tenant := tenancy.namespace_tenant
	not _is_admitted_preemptible
	rule_id := rego.metadata.rule().custom.rule_id
	reason := _preemptible_refusal(tenant)
	msg := sprintf("[%s] %s is labelled %s=true but %s. Fix: remove the label; labgate marks pods beyond quota itself", [rule_id, tenancy.object_ref, _preemptible_label, reason])
}

_preemptible_refusal(tenant) := sprintf("tenant %q admits no pods beyond quota (spec.gpu.overQuota is not preemptible)", [tenant.metadata.name]) if {
	not _allows_preemptible(tenant)
} else := sprintf("its priority class is %q, not %q", [object.get(_pod_template.spec, "priorityClassName", ""), _preemptible_class])

# The limits a pod's demand would exceed, as text: "12 of 16 GPUs (h100: 4 of 8)".
_overrun_text(tenant, d) := sprintf("%v of %v GPUs%s", [_used_total, tenant.spec.gpu.total, _in_parentheses(parts)]) if {
	_has_total(tenant)
	d.total + _used_total > tenant.spec.gpu.total
	parts := _model_overruns(tenant, d)
} else := concat(", ", [sprintf("%v of %v %s GPUs", [o.used, o.limit, o.model]) | some o in _model_overrun_list(tenant, d)]) if {
	count(_model_overrun_list(tenant, d)) > 0
}

_model_overrun_list(tenant, d) := [{"model": model, "used": _used(model), "limit": limit} |
	some model in sort(object.keys(_models(tenant)))
	limit := _models(tenant)[model]
	asked := object.get(d.by_model, model, 0)
	asked > 0
	asked + _used(model) > limit
]

_model_overruns(tenant, d) := [sprintf("%s: %v of %v", [o.model, o.used, o.limit]) | some o in _model_overrun_list(tenant, d)]

_in_parentheses(parts) := "" if {
	count(parts) == 0
} else := sprintf(" (%s)", [concat(", ", parts)])

# METADATA
# title: A tenant's pods fit its GPU quota
# custom:
#   rule_id: gpu-quota
violation contains {"rule": rule_id, "message": msg, "field": sprintf("%s.containers", [template.path])} if {
	template := _pod_template
	not _is_admitted_preemptible
	tenant := tenancy.namespace_tenant
	d := gpu.template_demand[template.path]
	d.total > 0
	overrun := _overrun_text(tenant, d)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s asks %s; tenant %q uses %s. Fix: %s",
		[rule_id, tenancy.object_ref, gpu.describe_asks(template.spec), tenant.metadata.name, overrun, _quota_fix(tenant, d)],
	)
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
	"ask at most %s per pod (the request alone exceeds the limit, so waiting cannot help), or ask the infra team to raise %s of Tenant %q",
	[gpu.plural(over.limit, _gpu_word(over.model)), _limit_field(over.model), tenant.metadata.name],
) if {
	over := _alone_over(tenant, d)[0]
} else := "lower the request or wait for running pods to finish"

_quoted(names) := concat(", ", [sprintf("%q", [n]) | some n in sort(names)])

_unknown_model_fix(template, resource) := sprintf("select one with %s.nodeSelector %s: <model>", [template.path, gpu.model_label]) if {
	not gpu.is_mig_resource(resource)
} else := "ask the MIG resource of one of those models instead (model mig-1g.10gb is resource nvidia.com/mig-1g.10gb)"

_unknown_model_field(template, resource) := sprintf("%s.nodeSelector", [template.path]) if {
	not gpu.is_mig_resource(resource)
} else := sprintf("%s.containers", [template.path])

_is_unknown_model(models, model) if {
	model != gpu.unspecified_model
	not model in object.keys(models)
}

# Without a model a pod could land on any of several; with one listed, the mutation selects it.
_is_unknown_model(models, model) if {
	model == gpu.unspecified_model
	count(models) > 1
}

# METADATA
# title: A tenant that lists GPU models gets only those
# custom:
#   rule_id: gpu-model-unknown
violation contains {"rule": rule_id, "message": msg, "field": _unknown_model_field(template, resource)} if {
	tenant := tenancy.namespace_tenant
	models := _models(tenant)
	count(models) > 0
	some template in gpu.checked_templates
	some [resource, model] in {[a.resource, a.model] | some a in gpu.template_asks[template.path]}
	_is_unknown_model(models, model)
	asked := sum([a.count | some a in gpu.template_asks[template.path]; a.resource == resource; a.model == model])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s asks %v %s%s; tenant %q has GPU models %s only. Fix: %s",
		[
			rule_id, tenancy.object_ref, template.path, asked, resource, _model_note(resource, model),
			tenant.metadata.name, _quoted(object.keys(models)), _unknown_model_fix(template, resource),
		],
	)
}

_model_note(resource, _) := "" if gpu.is_mig_resource(resource)

_model_note(resource, model) := sprintf(" (%s)", [_model_name(model)]) if not gpu.is_mig_resource(resource)

_model_name(model) := "model unspecified" if {
	model == gpu.unspecified_model
} else := model

# Where the request's kind says how many pods run at once, when one field says it for all its pod
# templates (data.labgate.workloads, generated from labgate/core/workload_kinds.py: `labgate generate`).
_replica_field := {w.kind: w.replica_field |
	some w in data.labgate.workloads.kinds
	w.group == input.request.kind.group
	w.replica_field
}

_replicas(template) := object.get(template, "replicas", 1)

# What a workload's pods ask all at once, per template, of the whole tenant (model "") or of one
# model: [{"pods", "each"}] for the templates that ask any.
_terms(model) := [{"pods": _replicas(t), "each": each} |
	some t in input.pod_templates
	d := gpu.template_demand[t.path]
	each := _per_pod(d, model)
	each > 0
	_replicas(t) > 0
]

_per_pod(d, "") := d.total

_per_pod(d, model) := object.get(d.by_model, model, 0) if model != ""

_arithmetic(terms, model) := sprintf("%s = %v", [
	concat(" + ", [sprintf("%s × %s", [gpu.plural(t.pods, "pod"), gpu.plural(t.each, _gpu_word(model))]) | some t in terms]),
	sum([n | some t in terms; n := t.pods * t.each]),
])

_gpu_word("") := "GPU"

_gpu_word(model) := sprintf("%s GPU", [model]) if model != ""

_limit_text(tenant, "") := sprintf("tenant %q has %v in total", [tenant.metadata.name, tenant.spec.gpu.total])

_limit_text(tenant, model) := sprintf("tenant %q has %s", [tenant.metadata.name, gpu.plural(_models(tenant)[model], _gpu_word(model))]) if {
	model != ""
}

_limit(tenant, "") := tenant.spec.gpu.total

_limit(tenant, model) := _models(tenant)[model] if model != ""

_limit_field("") := "spec.gpu.total"

_limit_field(model) := sprintf("spec.gpu.models[%s]", [model]) if model != ""

# One template: how many pods of this size fit; several: only the sum can be named.
_unfit_fix(terms, limit) := sprintf("run at most %v at once (%s) or ask fewer GPUs per pod", [
	gpu.plural(floor(limit / terms[0].each), "pod"),
	object.get(_replica_field, input.request.kind.kind, "its replica count"),
]) if {
	count(terms) == 1
	terms[0].each <= limit
} else := sprintf("ask at most %v per pod", [gpu.plural(limit, "GPU")]) if {
	count(terms) == 1
} else := sprintf("lower the replica counts or the GPUs per pod until they total at most %v", [limit])

# The limits a workload is checked against: the total ("") when the tenant has one, and each model.
_checked_limits(tenant) := {"" | _has_total(tenant)} | object.keys(_models(tenant))

# METADATA
# title: A workload whose pods can never all run within the GPU quota is refused when applied
# custom:
#   rule_id: gpu-quota-unfit
violation contains {"rule": rule_id, "message": msg, "field": _unfit_field} if {
	not gpu.is_pod
	tenant := tenancy.namespace_tenant
	count(gpu.checked_templates) > 0
	some model in _checked_limits(tenant)
	terms := _terms(model)
	count(terms) > 0
	limit := _limit(tenant, model)
	_all_at_once(model) > limit
	not _said_by_a_model_limit(tenant, model)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s runs %s; %s. Fix: %s, or ask the infra team to raise %s of Tenant %q",
		[
			rule_id, tenancy.object_ref, _arithmetic(terms, model), _limit_text(tenant, model),
			_unfit_fix(terms, limit), _limit_field(model), tenant.metadata.name,
		],
	)
}

_all_at_once(model) := sum([n | some t in _terms(model); n := t.pods * t.each])

# When every GPU asked is of one model whose limit is no larger than the total, the model's refusal
# says all the total's would.
_said_by_a_model_limit(tenant, "") if {
	some model in object.keys(_models(tenant))
	_all_at_once(model) == _all_at_once("")
	_limit(tenant, model) <= _limit(tenant, "")
}

_unfit_field := object.get(_replica_field, input.request.kind.kind, concat(".", [input.pod_templates[0].path, "containers"]))

# --- pods that will wait: a workload that fits its quota but not what is free now ---

_used_of("") := _used_total

_used_of(model) := _used(model) if model != ""

_has_usage if is_object(input.gpu_usage)

# The limits whose free GPUs the workload's pods, all at once, exceed (though they fit the limit).
_pending_limits(tenant) := {model |
	some model in _checked_limits(tenant)
	count(_terms(model)) > 0
	_all_at_once(model) <= _limit(tenant, model)
	_all_at_once(model) + _used_of(model) > _limit(tenant, model)
}

_free(tenant, model) := max([_limit(tenant, model) - _used_of(model), 0])

_can_start(tenant, model, terms) := "no pod can start now" if {
	count(terms) == 1
	floor(_free(tenant, model) / terms[0].each) == 0
} else := sprintf("only %s can start now", [gpu.plural(floor(_free(tenant, model) / terms[0].each), "pod")]) if {
	count(terms) == 1
} else := sprintf("only %s are free now", [gpu.plural(_free(tenant, model), _gpu_word(model))])

_usage_text(tenant, "") := sprintf("%v of %v GPUs", [_used_total, tenant.spec.gpu.total])

_usage_text(tenant, model) := sprintf("%v of %s", [_used(model), gpu.plural(_models(tenant)[model], _gpu_word(model))]) if model != ""

# METADATA
# title: A workload whose pods will wait for GPUs says so when applied
# description: |
#   Announced, not refused (config rule_modes gives it warn): the pods beyond what is free are
#   refused one by one when the controller creates them (gpu-quota), which shows only in the
#   workload's events (FailedCreate), until running pods finish.
# custom:
#   rule_id: gpu-quota-pending
violation contains {"rule": rule_id, "message": msg, "field": _unfit_field} if {
	not gpu.is_pod
	input.request.operation == "CREATE" # on UPDATE its own pods are in the usage already
	_has_usage
	tenant := tenancy.namespace_tenant
	count(gpu.checked_templates) > 0
	pending := _pending_limits(tenant)
	some model in pending
	_is_first_pending(pending, model)
	terms := _terms(model)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s runs %s; tenant %q uses %s now, so %s and the rest wait (events: FailedCreate) until GPUs are free. Fix: wait for running pods to finish, or run fewer pods at once (%s)",
		[
			rule_id, tenancy.object_ref, _arithmetic(terms, model), tenant.metadata.name,
			_usage_text(tenant, model), _can_start(tenant, model, terms),
			object.get(_replica_field, input.request.kind.kind, "its replica count"),
		],
	)
}

# One finding per workload: a model's limit before the total, models in name order.
_is_first_pending(pending, model) if {
	model != ""
	model == min({m | some m in pending; m != ""})
}

_is_first_pending(pending, "") if {
	"" in pending
	count(pending) == 1
}

# METADATA
# title: Resources of a GPU vendor that labgate does not count are refused, not ignored
# custom:
#   rule_id: gpu-resource-unknown
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	tenancy.namespace_tenant
	some template in gpu.checked_templates
	some unknown in gpu.unknown_resources(template.spec)
	field := sprintf("%s.%s", [template.path, unknown.field])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s asks %v %s, a resource of a GPU vendor that labgate does not count. Fix: ask one it counts (%s), or ask the infra team to add %q to gpu_resources (or gpu_companion_resources) in labgate's policy config",
		[rule_id, tenancy.object_ref, field, unknown.count, unknown.resource, concat(", ", sort(gpu.gpu_resources)), unknown.resource],
	)
}

_class_list := concat(", ", [sprintf("%q", [c]) | some c in sort(gpu.dra_gpu_classes)])

# METADATA
# title: GPUs asked through Dynamic Resource Allocation are counted, or refused
# custom:
#   rule_id: gpu-dra-unsupported
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	tenancy.namespace_tenant
	some template in gpu.checked_templates
	some problem in gpu.claim_problems(template.spec)
	field := sprintf("%s.%s", [template.path, problem.field])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s %s, so its GPUs cannot be counted against the quota. Fix: %s",
		[rule_id, tenancy.object_ref, field, problem.text, _dra_fix],
	)
}

_dra_fix := sprintf("name a claim (or template) that exists and asks an exact count of devices of a GPU device class labgate counts (%s), or ask the infra team to map its device class (dra_device_classes in labgate's policy config)", [_class_list])

# --- ResourceClaims and ResourceClaimTemplates written in tenant namespaces ---

_is_claim_object if {
	input.request.kind.group == "resource.k8s.io"
	input.request.kind.kind in {"ResourceClaim", "ResourceClaimTemplate"}
	object.get(input.request, "subResource", "") == ""
	input.request.operation in {"CREATE", "UPDATE"}
}

# The claim spec and its field: a claim's spec, a template's spec.spec.
_claim_object_spec := [object.get(input.request.object, "spec", {}), "spec"] if {
	input.request.kind.kind == "ResourceClaim"
} else := [object.get(input.request.object, ["spec", "spec"], {}), "spec.spec"]

# METADATA
# title: ResourceClaims in tenant namespaces ask only device classes labgate can count
# custom:
#   rule_id: gpu-dra-unsupported
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	_is_claim_object
	tenancy.namespace_tenant
	not tenancy.is_trusted_requester
	[spec, prefix] := _claim_object_spec
	some request in gpu.device_requests(spec)
	problem := gpu.request_problem(request)
	field := concat(".", [prefix, trim_prefix(request.field, "spec.")])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf("[%s] %s %s %s, so pods using it could not be counted against the GPU quota. Fix: ask an exact count of devices of a GPU device class labgate counts (%s), or ask the infra team to map the device class (dra_device_classes in labgate's policy config)", [rule_id, tenancy.object_ref, field, problem, _class_list])
}
