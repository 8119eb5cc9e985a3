# METADATA
# title: GPU demand and node pools
# description: |
#   What a pod spec asks of GPUs and where a tenant's GPU pods may run; shared by rules.gpu_quota,
#   rules.placement and the mutation package. A pod's demand is the sum over its containers (not its
#   initContainers, which run before them and release what they held) of limits[r], or requests[r]
#   when there is no limit, for r in config gpu_resources (whole GPUs, of the model the pod's
#   nodeSelector[gpu_model_label] names, else "unspecified") plus MIG resources (config
#   mig_resource_prefix), each its own model: "nvidia.com/mig-1g.10gb" is model "mig-1g.10gb".
package labgate.lib.gpu

import data.labgate.lib.tenancy

gpu_resources := {r | some r in data.labgate.config.gpu_resources}

mig_resource_prefix := data.labgate.config.mig_resource_prefix

model_label := data.labgate.config.gpu_model_label

node_pool_label := data.labgate.config.node_pool_label

capacity_annotation := data.labgate.config.capacity_annotation

unspecified_model := "unspecified"

# "nvidia.com/" for "nvidia.com/mig-": what is cut from a MIG resource to name its model.
_mig_domain := concat("", [concat("/", array.slice(parts, 0, count(parts) - 1)), "/"]) if {
	parts := split(mig_resource_prefix, "/")
	count(parts) > 1
} else := ""

is_mig_resource(resource) if {
	mig_resource_prefix != ""
	startswith(resource, mig_resource_prefix)
}

# "mig-1g.10gb" for "nvidia.com/mig-1g.10gb".
mig_model(resource) := trim_prefix(resource, _mig_domain)

# Whether a model name (a key of spec.gpu.models) is a MIG profile rather than a GPU product.
is_mig_model(model) if startswith(concat("", [_mig_domain, model]), mig_resource_prefix)

# The model of the whole GPUs a pod spec asks: its nodeSelector[gpu_model_label], else "unspecified".
whole_gpu_model(spec) := model if {
	model := _object(object.get(spec, "nodeSelector", {}))[model_label]
	is_string(model)
	model != ""
} else := unspecified_model

_object(value) := value if {
	is_object(value)
} else := {}

_array(value) := value if {
	is_array(value)
} else := []

# A resource quantity as a number: 8, "8", "1k". The apiserver has validated it already.
_amount(quantity) := quantity if is_number(quantity)

_amount(quantity) := units.parse(quantity) if is_string(quantity)

_model(_, resource) := mig_model(resource) if is_mig_resource(resource)

_model(spec, resource) := whole_gpu_model(spec) if resource in gpu_resources

# Every GPU ask of a pod spec: {"field", "resource", "model", "count"}, in container order. A limit
# wins over the request for the same resource.
asks(spec) := [{"field": sprintf("containers[%d].resources", [i]), "resource": resource, "model": model, "count": n} |
	some i, container in _array(object.get(spec, "containers", []))
	resources := _object(object.get(container, "resources", {}))
	asked := object.union(_object(object.get(resources, "requests", {})), _object(object.get(resources, "limits", {})))
	some resource, quantity in asked
	model := _model(spec, resource)
	n := _amount(quantity)
	n > 0
]

# {"total": n, "by_model": {model: n}}; {"total": 0, "by_model": {}} for a pod without GPUs.
demand(spec) := _demand_of(asks(spec))

_demand_of(list) := {"total": sum([a.count | some a in list]), "by_model": {model: sum([a.count |
	some a in list
	a.model == model
]) |
	some ask in list
	model := ask.model
}}

# The asks and demand of each of the request's pod templates, by path: computed once per query.
template_asks[template.path] := asks(template.spec) if some template in input.pod_templates

template_demand[path] := _demand_of(list) if some path, list in template_asks

# "8 nvidia.com/gpu (h100), 1 nvidia.com/mig-1g.10gb" for messages: per resource and model.
describe_asks(spec) := concat(", ", [text |
	some key in sort({[a.resource, a.model] | some a in asks(spec)})
	n := sum([a.count | some a in asks(spec); [a.resource, a.model] == key])
	text := sprintf("%v %s%s", [n, key[0], _model_note(key[0], key[1])])
])

_model_note(resource, _) := "" if is_mig_resource(resource)

_model_note(resource, model) := " (model unspecified)" if {
	not is_mig_resource(resource)
	model == unspecified_model
}

_model_note(resource, model) := sprintf(" (%s)", [model]) if {
	not is_mig_resource(resource)
	model != unspecified_model
}

# "1 GPU", "8 GPUs".
plural(n, word) := sprintf("%v %s", [n, word]) if {
	n == 1
} else := sprintf("%v %ss", [n, word])

# The request's kind is a bare Pod (not a subresource of one).
is_pod if {
	input.request.kind.kind == "Pod"
	input.request.kind.group == ""
	object.get(input.request, "subResource", "") == ""
}

# Pod templates the GPU rules check: a Pod when it is created, whoever creates it (a Job's pods count
# against the quota too); other workloads when people create or change them, so that what can never
# run is refused when applied. Workloads that controllers write (a Deployment's ReplicaSets, a
# CronJob's Jobs) are not checked again: the pods they make are.
checked_templates contains template if {
	is_pod
	input.request.operation == "CREATE"
	some template in input.pod_templates
}

checked_templates contains template if {
	not is_pod
	input.request.operation in {"CREATE", "UPDATE"}
	not tenancy.is_trusted_requester
	some template in input.pod_templates
}

# Where a template's metadata lives: "metadata" for a Pod's "spec", "spec.template.metadata" for
# "spec.template.spec".
metadata_field(template) := concat(".", array.concat(array.slice(parts, 0, count(parts) - 1), ["metadata"])) if {
	parts := split(template.path, ".")
}

template_annotations(template) := _object(object.get(_object(object.get(template, "metadata", {})), "annotations", {}))

# The pod opts out of spot capacity (annotation labgate.io/capacity: on-demand): on its template, or,
# for a workload (a Job, a training job), on the workload's own metadata, where people also write it.
wants_on_demand(template) if template_annotations(template)[capacity_annotation] == "on-demand"

wants_on_demand(_) if _workload_wants_on_demand

_workload_wants_on_demand if {
	not is_pod
	_object(object.get(input.request, ["object", "metadata", "annotations"], {}))[capacity_annotation] == "on-demand"
}

# Where the opt-out was written, for messages: the template's metadata, else the workload's.
on_demand_field(template) := sprintf("%s.annotations", [metadata_field(template)]) if {
	template_annotations(template)[capacity_annotation] == "on-demand"
} else := "metadata.annotations"

node_pools(tenant) := _array(object.get(tenant, ["spec", "placement", "nodePools"], []))

allows_on_demand(tenant) if object.get(tenant, ["spec", "placement", "allowOnDemand"], false) == true

# Values of nodeSelector[node_pool_label] that select one of the tenant's pools: the pools' names,
# and the value a pool's own nodeSelector gives that label (so a pool labgate placed a pod on passes).
pool_label_values(tenant) := {pool.name | some pool in node_pools(tenant)} | {value |
	some pool in node_pools(tenant)
	value := _object(object.get(pool, "nodeSelector", {}))[node_pool_label]
}

spot_pools(tenant) := [pool | some pool in node_pools(tenant); object.get(pool, "spot", false) == true]

on_demand_pools(tenant) := [pool | some pool in node_pools(tenant); object.get(pool, "spot", false) != true]

# The pool labgate puts a GPU pod on when it names none: the tenant's first spot pool, or, when the
# pod asks on-demand capacity and the tenant allows it, the first pool that is not spot.
default_pool(tenant, template) := on_demand_pools(tenant)[0] if {
	wants_on_demand(template)
	allows_on_demand(tenant)
}

default_pool(tenant, template) := spot_pools(tenant)[0] if {
	not _on_demand_allowed(tenant, template)
}

_on_demand_allowed(tenant, template) if {
	wants_on_demand(template)
	allows_on_demand(tenant)
}

# Every taint key that some tenant's node pool tolerates: taints that keep pools for their tenants.
pool_taint_keys contains key if {
	some tenant in data.inventory.tenants
	some pool in node_pools(tenant)
	some toleration in _array(object.get(pool, "tolerations", []))
	key := object.get(toleration, "key", "")
	key != ""
}

# A toleration as Kubernetes reads it (operator Equal, value "" and every effect when unset).
_normal(toleration) := {
	"key": object.get(toleration, "key", ""),
	"operator": object.get(toleration, "operator", "Equal"),
	"value": object.get(toleration, "value", ""),
	"effect": object.get(toleration, "effect", ""),
}

# `toleration` tolerates no taint that `carried` does not: same key, an effect and value at least as
# narrow. A toleration without key and operator Exists tolerates every taint.
covered_by(toleration, carried) if {
	t := _normal(toleration)
	c := _normal(carried)
	t.key == c.key
	_effect_covered(t.effect, c.effect)
	_value_covered(t, c)
}

_effect_covered(_, "")

_effect_covered(effect, effect) if effect != ""

_value_covered(_, c) if c.operator == "Exists"

_value_covered(t, c) if {
	c.operator == "Equal"
	t.operator == "Equal"
	t.value == c.value
}

# The same toleration, up to defaults (and tolerationSeconds).
same_toleration(a, b) if {
	_normal(a) == _normal(b)
	object.get(a, "tolerationSeconds", null) == object.get(b, "tolerationSeconds", null)
}

# `taint "labgate.io/pool=vision:NoSchedule"`, `taint "labgate.io/spot:NoSchedule"`, for messages.
describe_toleration(toleration) := sprintf("taint %q", [concat("", [t.key, _value_text(t), _effect_text(t)])]) if {
	t := _normal(toleration)
}

_value_text(t) := "" if {
	t.operator == "Exists"
} else := concat("", ["=", t.value])

_effect_text(t) := "" if {
	t.effect == ""
} else := concat("", [":", t.effect])
