package labgate.rules.gpu_quota

import data.labgate.lib.gpu
import data.labgate.lib.gpu_text
import data.labgate.lib.kueue
import data.labgate.lib.tenancy

# gpu-quota-scale: a replica count raised past what the tenant has free (split from gpu_quota.rego,
# whose helpers it uses: one package). A pre-check, not the enforcement: the pods the new count makes
# are each judged and reserved when they are created (gpu-quota), so nothing is reserved here.

# A scale call (`kubectl scale`: the Scale subresource of a Deployment, StatefulSet or ReplicaSet). The
# Scale carries only spec.replicas; the pod template is the workload's, which the webhook reads
# (input.scaled_workload: {"kind", "pod_templates"}, or {"kind", "error"} when it could not).
_is_scale if {
	input.request.subResource == "scale"
	input.request.operation == "UPDATE"
}

_scaled := object.get(input, "scaled_workload", {})

_replicas_of(obj) := object.get(obj, ["spec", "replicas"], 0)

_scale_grows if _replicas_of(input.request.object) > _replicas_of(input.request.oldObject)

# What makes no pods now whatever its replica counts say: a CronJob (its runs do, later, each judged
# as created) and a suspended object.
_makes_no_pods_now if [input.request.kind.group, input.request.kind.kind] == ["batch", "CronJob"]

_makes_no_pods_now if kueue.is_suspended(input.request.object)

# Each pod template whose replica count the request raises: {"path", "spec", "before", "after"}.
_replica_growths contains {"path": t.path, "spec": t.spec, "before": before, "after": after} if {
	_is_scale
	_scale_grows
	before := _replicas_of(input.request.oldObject)
	after := _replicas_of(input.request.object)
	some t in _scaled.pod_templates
}

# An UPDATE of a workload: each template's count in the old object (input.replicas_before, by path; a
# template the old object lacked had none) against the new.
_replica_growths contains {"path": t.path, "spec": t.spec, "before": before, "after": t.replicas} if {
	input.request.operation == "UPDATE"
	is_object(input.replicas_before)
	not gpu.is_pod
	not _makes_no_pods_now
	some t in input.pod_templates
	before := object.get(input.replicas_before, [t.path], 0)
	t.replicas > before
}

# The GPUs the growths add, of the tenant's total ("") or of one model.
_growth(model) := sum([n |
	some g in _replica_growths
	n := (g.after - g.before) * _per_pod(gpu.demand(g.spec), model)
])

# Judged for members and tenant admins, in a tenant Kueue does not manage (Kueue queues what is
# beyond its quota) and that does not run pods beyond quota as preemptible. Controllers (a
# Deployment's rollout scaling its ReplicaSets, an autoscaler in kube-system) are trusted: the pods
# they make are judged.
_judged_tenant := tenant if {
	not tenancy.is_trusted_requester
	not kueue.managed_tenant
	tenant := tenancy.namespace_tenant
	not tenant.spec.gpu.overQuota == "preemptible"
}

# The limits the growth goes past what is free under (a workload that can never fit at all is
# gpu-quota-unfit's to refuse).
_scale_overs(tenant) := {model |
	some model in checked_limits(tenant)
	_growth(model) > 0
	_growth(model) + _used_of(model) > _limit(tenant, model)
}

# The limit that binds: the one that lets the fewest more replicas (several templates: GPUs) start.
_scale_binding(tenant) := min(ranked)[2] if {
	ranked := {[_scale_room(tenant, m), total_last(m), m] | some m in _scale_overs(tenant)}
	count(ranked) > 0
}

_single_growth := g if {
	count(_replica_growths) == 1
	some g in _replica_growths
}

_scale_room(tenant, model) := floor(free_gpus(tenant, model) / _per_pod(gpu.demand(_single_growth.spec), model)) if {
	_per_pod(gpu.demand(_single_growth.spec), model) > 0
} else := free_gpus(tenant, model)

# METADATA
# title: A replica count raised past the GPUs the tenant has free is refused at the call
# description: |
#   `kubectl scale`, or an UPDATE that raises a workload's replica counts, adds (new - old) replicas
#   times the GPUs each pod asks (lib.gpu's effective request). Beyond what the tenant has free under a
#   limit, its pods would be refused one by one when created (FailedCreate): the call is refused
#   instead, saying how far it may scale now. Shrinking, scaling within what is free, and changes
#   that leave the replica counts alone are not judged.
# custom:
#   rule_id: gpu-quota-scale
violation contains {"rule": rule_id, "message": msg, "field": _scale_field} if {
	count(_replica_growths) > 0 # first: most requests grow nothing
	has_usage
	tenant := _judged_tenant
	count(unfit_limits(tenant)) == 0 # refused as unfit: that says it
	model := _scale_binding(tenant)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf("[%s] %s scales %s, which asks %s more; tenant %q uses %s (%v free). Fix: %s", [
		rule_id, _workload_ref, concat(" and ", [_growth_text(g) | some g in _replica_growths]),
		gpu_text.plural(_growth(model), gpu_word(model)), tenant.metadata.name,
		usage_text(tenant, model), free_gpus(tenant, model), _scale_fix(tenant, model),
	])
}

# METADATA
# title: A scale up of a workload labgate cannot read is refused
# description: |
#   Fail closed: the Scale says nothing of the pods; without the workload's pod template the growth
#   cannot be counted.
# custom:
#   rule_id: gpu-quota-scale
violation contains {"rule": rule_id, "message": msg, "field": "spec.replicas"} if {
	_is_scale
	_scale_grows
	reason := _scaled.error
	_judged_tenant
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s scales from %v to %v replicas, but labgate could not read it to count the GPUs its pods ask (%s). ",
			"Fix: try again; if it persists, tell the infra team",
		]),
		[rule_id, _workload_ref, _replicas_of(input.request.oldObject), _replicas_of(input.request.object), reason],
	)
}

# `Deployment "serve"`: a Scale's request names the workload's resource, not its kind.
_workload_ref := sprintf("%s %q", [_scaled.kind, input.request.name]) if {
	_is_scale
} else := tenancy.object_ref

_scale_field := "spec.replicas" if {
	_is_scale
} else := object.get(_replica_field, input.request.kind.kind, "its replica counts")

# "from 0 to 5 replicas of 1 nvidia.com/gpu (h100) each"; the template named where there are several.
_growth_text(g) := sprintf(
	"%sfrom %v to %v replicas of %s each",
	[_template_text(g), g.before, g.after, gpu_text.describe_asks(g.spec)],
)

_template_text(g) := sprintf("%s ", [trim_suffix(g.path, ".spec")]) if {
	not _is_scale
	count(input.pod_templates) > 1
} else := ""

_scale_fix(tenant, model) := sprintf(
	"scale to at most %v replicas (what fits now), or wait for running pods to finish",
	[_single_growth.before + _scale_room(tenant, model)],
) if {
	_fits_the_limit(tenant, model)
	_scale_room(tenant, model) > 0
} else := "wait for running pods to finish before scaling up (no replica more fits now)" if {
	_fits_the_limit(tenant, model)
} else := sprintf("scale to at most %v replicas (what fits now; at most %v ever fit %s), or %s", [
	_single_growth.before + _scale_room(tenant, model), _most_ever(tenant, model), _limit_field(model),
	_raise_text(model, tenant),
]) if {
	_scale_room(tenant, model) > 0
} else := sprintf("no replica more fits now and at most %v ever fit %s: wait for running pods to finish, or %s", [
	_most_ever(tenant, model), _limit_field(model), _raise_text(model, tenant),
]) if {
	_most_ever(tenant, model)
} else := sprintf("raise the replica counts by at most %s in all, or wait for running pods to finish", [
	gpu_text.plural(free_gpus(tenant, model), gpu_word(model)),
])

# The most replicas of the one growing template the limit could ever hold (nothing else running).
_most_ever(tenant, model) := floor(_limit(tenant, model) / each) if {
	each := _per_pod(gpu.demand(_single_growth.spec), model)
	each > 0
}

# The new count fits the limit once other pods finish: waiting can help.
_fits_the_limit(tenant, model) if _single_growth.after <= _most_ever(tenant, model)
