# METADATA
# title: GPU demand and node pools
# description: |
#   What a pod spec asks of GPUs and where a tenant's GPU pods may run; shared by rules.gpu_quota,
#   rules.placement and the mutation package.
#
#   A pod's demand is what the scheduler reserves for it: Kubernetes' effective request, per resource
#   r counted as GPUs (config gpu_resources, and MIG resources starting with mig_resource_prefix):
#     max(sum over containers and native sidecars (initContainers with restartPolicy Always),
#         max over each plain init container i of (i + the sidecars started before it))
#     + spec.overhead[r]
#   where a container asks limits[r], or requests[r] when there is no limit (for extended resources
#   the apiserver requires both to be equal). Whole GPUs are of the model the pod's
#   nodeSelector[gpu_model_label] names, else "unspecified"; a MIG resource is its own model:
#   "nvidia.com/mig-1g.10gb" is model "mig-1g.10gb". by_model counts units of each model; the total
#   counts each unit times its weight (config gpu_resource_weights, 1 when unset).
#   GPUs asked through Dynamic Resource Allocation (spec.resourceClaims) count too: the claims the
#   webhook gathered (input.resource_claims) name device classes that config dra_device_classes maps
#   to a model; see claim_asks and claim_problems.
package labgate.lib.gpu

import data.labgate.lib.tenancy

_config := data.labgate.config

gpu_resources := {r | some r in _config.gpu_resources}

mig_resource_prefix := _config.mig_resource_prefix

model_label := _config.gpu_model_label

node_pool_label := _config.node_pool_label

capacity_annotation := _config.capacity_annotation

unspecified_model := "unspecified"

# Resource domains of GPU vendors: a resource of one of these domains (or a subdomain) that labgate
# neither counts nor lists as a companion is refused rather than ignored (gpu-resource-unknown).
vendor_domains := {d | some d in object.get(_config, "gpu_vendor_domains", [])}

# Resources of a vendor domain that are not GPUs and are not counted (Intel's millicores, ...).
companion_resources := {r | some r in object.get(_config, "gpu_companion_resources", [])}

_weights := object.get(_config, "gpu_resource_weights", {})

# "nvidia.com/" for "nvidia.com/mig-": what is cut from a MIG resource to name its model.
_mig_domain := concat("", [concat("/", array.slice(parts, 0, count(parts) - 1)), "/"]) if {
	parts := split(mig_resource_prefix, "/")
	count(parts) > 1
} else := ""

is_mig_resource(resource) if {
	mig_resource_prefix != ""
	startswith(resource, mig_resource_prefix)
}

is_gpu_resource(resource) if resource in gpu_resources

is_gpu_resource(resource) if is_mig_resource(resource)

# What one unit of a resource counts against the tenant's total: gpu_resource_weights[resource], or
# the entry for the MIG prefix, else 1.
weight(resource) := w if {
	w := _weights[resource]
} else := w if {
	is_mig_resource(resource)
	w := _weights[mig_resource_prefix]
} else := 1

# A resource of a GPU vendor's domain that labgate does not count and does not list as a companion.
is_unknown_vendor_resource(resource) if {
	not is_gpu_resource(resource)
	not resource in companion_resources
	contains(resource, "/")
	domain := split(resource, "/")[0]
	some vendor in vendor_domains
	_in_domain(domain, vendor)
}

_in_domain(domain, domain)

_in_domain(domain, vendor) if endswith(domain, concat("", [".", vendor]))

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

# --- the effective request (Kubernetes' PodRequests) ---

# What a container asks, resource -> quantity: a limit wins over the request for the same resource.
_asked(container) := object.union(
	_object(object.get(_object(object.get(container, "resources", {})), "requests", {})),
	_object(object.get(_object(object.get(container, "resources", {})), "limits", {})),
)

_quantity(container, resource) := n if {
	n := _amount(_asked(container)[resource])
} else := 0

_containers(spec) := _array(object.get(spec, "containers", []))

_init_containers(spec) := _array(object.get(spec, "initContainers", []))

# A native sidecar: an init container that keeps running beside the app containers.
is_sidecar(container) if object.get(container, "restartPolicy", "") == "Always"

# The counted resources a pod spec names anywhere (containers, init containers, overhead).
_spec_resources(spec) := {r |
	some container in array.concat(_containers(spec), _init_containers(spec))
	some r, _ in _asked(container)
	is_gpu_resource(r)
} | {r |
	some r, _ in _object(object.get(spec, "overhead", {}))
	is_gpu_resource(r)
}

# Containers and every sidecar run together.
_running(spec, resource) := sum(array.concat(
	[_quantity(c, resource) | some c in _containers(spec)],
	[_quantity(c, resource) | some c in _init_containers(spec); is_sidecar(c)],
))

# While plain init container i runs, the sidecars before it run too.
_init_peak(spec, resource) := max(array.concat([0], [n |
	some i, c in _init_containers(spec)
	not is_sidecar(c)
	n := _quantity(c, resource) + _sidecars_before(spec, i, resource)
]))

_sidecars_before(spec, i, resource) := sum([_quantity(c, resource) |
	some j, c in _init_containers(spec)
	j < i
	is_sidecar(c)
])

_overhead(spec, resource) := n if {
	n := _amount(_object(object.get(spec, "overhead", {}))[resource])
} else := 0

# The scheduler's request of a pod spec for one resource.
effective_request(spec, resource) := max([_running(spec, resource), _init_peak(spec, resource)]) + _overhead(spec, resource)

# Every GPU ask of a pod spec's containers: {"resource", "model", "count", "gpus"} per counted
# resource, sorted by resource; count is the effective request, gpus what it weighs on the total.
asks(spec) := [{"resource": r, "model": _model(spec, r), "count": n, "gpus": n * weight(r)} |
	some r in sort(_spec_resources(spec))
	n := effective_request(spec, r)
	n > 0
]

# Resources of a GPU vendor's domain that labgate does not count, where a pod spec names them:
# [{"field", "resource", "count"}].
unknown_resources(spec) := array.concat(
	[{"field": sprintf("%s[%d].resources", [group, i]), "resource": r, "count": _quantity(c, r)} |
		some group in ["initContainers", "containers"]
		some i, c in _array(object.get(spec, group, []))
		some r, _ in _asked(c)
		is_unknown_vendor_resource(r)
	],
	[{"field": "overhead", "resource": r, "count": _amount(q)} |
		some r, q in _object(object.get(spec, "overhead", {}))
		is_unknown_vendor_resource(r)
	],
)

# --- Dynamic Resource Allocation ---

_dra_classes := _object(object.get(_config, "dra_device_classes", {}))

_dra_other_classes := {c | some c in object.get(_config, "dra_other_device_classes", [])}

# The GPU device classes labgate counts, for messages.
dra_gpu_classes := object.keys(_dra_classes)

# The model a GPU device class counts as: its mapped model, or "" (the pod's whole-GPU model).
_class_model(spec, class) := model if {
	model := object.get(_dra_classes[class], "model", "")
	model != ""
} else := whole_gpu_model(spec)

_class_weight(class) := object.get(_dra_classes[class], "weight", 1)

# Where each of a pod spec's claims comes from: {"field", "kind", "name", "key"}.
claim_refs(spec) := [{"field": sprintf("resourceClaims[%d]", [i]), "kind": kind, "name": name, "key": concat("/", [kind, name])} |
	some i, ref in _array(object.get(spec, "resourceClaims", []))
	[kind, name] := _claim_source(ref)
]

_claim_source(ref) := ["ResourceClaim", ref.resourceClaimName] if {
	is_string(ref.resourceClaimName)
} else := ["ResourceClaimTemplate", ref.resourceClaimTemplateName] if {
	is_string(ref.resourceClaimTemplateName)
} else := ["ResourceClaim", ""]

# A ResourceClaimSpec's device requests, each as its alternatives: [{"class", "mode", "count"}]
# (exactly: one; firstAvailable: each subrequest; older flat requests: the request itself).
device_requests(claim_spec) := [{"field": sprintf("spec.devices.requests[%d]", [i]), "alternatives": _alternatives(request)} |
	some i, request in _array(object.get(_object(claim_spec), ["devices", "requests"], []))
]

_alternatives(request) := [_alternative(request.exactly)] if {
	is_object(request.exactly)
} else := [_alternative(sub) | some sub in request.firstAvailable] if {
	is_array(request.firstAvailable)
} else := [_alternative(request)]

_alternative(request) := {
	"class": object.get(request, "deviceClassName", ""),
	"mode": object.get(request, "allocationMode", "ExactCount"),
	"count": object.get(request, "count", 1),
}

# Why labgate cannot count a device request, if it cannot (text; undefined when it can).
request_problem(request) := sprintf("asks device class %q, which labgate neither counts as GPUs nor allows", [unknown[0]]) if {
	unknown := [alt.class | some alt in request.alternatives; not alt.class in _dra_other_classes; not _dra_classes[alt.class]]
	count(unknown) > 0
} else := sprintf("asks every device of class %q (allocationMode All), a number labgate cannot count", [all_devices[0]]) if {
	all_devices := [alt.class | some alt in request.alternatives; _dra_classes[alt.class]; alt.mode == "All"]
	count(all_devices) > 0
} else := "offers alternatives (firstAvailable) of different GPU models, which labgate cannot count before the scheduler picks one" if {
	count({object.get(_dra_classes[alt.class], "model", "") | some alt in request.alternatives; _dra_classes[alt.class]}) > 1
}

# What a device request asks of GPUs (the largest of its GPU alternatives), when it asks any.
_request_asks(spec, request) := [{"resource": concat(" ", ["DRA", class]), "model": _class_model(spec, class), "count": n, "gpus": n * _class_weight(class)} |
	not request_problem(request)
	gpu_alternatives := [alt | some alt in request.alternatives; _dra_classes[alt.class]]
	count(gpu_alternatives) > 0
	n := max([alt.count | some alt in gpu_alternatives])
	class := [alt.class | some alt in gpu_alternatives; alt.count == n][0]
]

# The claims the webhook gathered for the request, by "<kind>/<name>": {"found": true, "spec": <a
# ResourceClaimSpec>} or {"found": false, "reason": text}.
_gathered := _object(object.get(input, "resource_claims", {}))

# GPUs a pod spec asks through its claims (each claim the pod references counts for this pod: a
# claim shared by several pods is counted once per pod, which errs towards refusing).
claim_asks(spec) := [ask |
	some ref in claim_refs(spec)
	claim := _gathered[ref.key]
	claim.found == true
	some request in device_requests(claim.spec)
	some ask in _request_asks(spec, request)
]

# Why a pod spec's claims cannot be counted: [{"field", "text"}].
claim_problems(spec) := [{"field": ref.field, "text": text} |
	some ref in claim_refs(spec)
	some text in _ref_problems(ref)
]

_ref_problems(ref) := [sprintf("names %s %q, which labgate could not read (%s)", [ref.kind, ref.name, reason])] if {
	not _gathered[ref.key].found == true
	reason := object.get(_gathered, [ref.key, "reason"], "not gathered")
} else := [sprintf("names %s %q, whose %s %s", [ref.kind, ref.name, request.field, problem]) |
	some request in device_requests(_gathered[ref.key].spec)
	problem := request_problem(request)
]

# {"total": n, "by_model": {model: n}}; {"total": 0, "by_model": {}} for a pod without GPUs.
demand(spec) := _demand_of(array.concat(asks(spec), claim_asks(spec)))

_demand_of(list) := {"total": sum([a.gpus | some a in list]), "by_model": {model: sum([a.count |
	some a in list
	a.model == model
]) |
	some ask in list
	model := ask.model
}}

# The asks and demand of each of the request's pod templates, by path: computed once per query.
template_asks[template.path] := array.concat(asks(template.spec), claim_asks(template.spec)) if some template in input.pod_templates

template_demand[path] := _demand_of(list) if some path, list in template_asks

# "8 nvidia.com/gpu (h100), 1 nvidia.com/mig-1g.10gb" for messages: per resource and model.
describe_asks(spec) := describe(array.concat(asks(spec), claim_asks(spec)))

describe(list) := concat(", ", [text |
	some key in sort({[a.resource, a.model] | some a in list})
	n := sum([a.count | some a in list; [a.resource, a.model] == key])
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
