# METADATA
# title: GPU demand and node pools
# description: |
#   What a pod spec asks of GPUs, and which of the request's pod templates the GPU rules check; shared
#   by the GPU rules, rules.placement and the mutation package (and mirrored in Python by
#   labgate/gpu_accounting/demand.py).
#
#   A pod's demand is what the scheduler reserves for it: Kubernetes' effective request, per resource
#   r counted as GPUs (config gpu_resources, and MIG resources starting with mig_resource_prefix):
#     max(sum over containers and native sidecars (initContainers with restartPolicy Always),
#         max over each plain init container i of (i + the sidecars started before it))
#     + spec.overhead[r]
#   where a container asks limits[r], or requests[r] when there is no limit (for extended resources
#   the apiserver requires both to be equal). No pod-level term: spec.resources (Kubernetes 1.34's
#   pod-level resources) supports cpu, memory and hugepages only, and the apiserver refuses a pod
#   (or a built-in workload's template) naming a GPU there before any webhook sees it.
#   Whole GPUs are of the model the pod's
#   nodeSelector[gpu_model_label] names, else "unspecified"; a MIG resource is its own model:
#   "nvidia.com/mig-1g.10gb" is model "mig-1g.10gb". by_model counts units of each model; the total
#   counts each unit times its weight (config gpu_resource_weights, 1 when unset).
#   GPUs asked through Dynamic Resource Allocation (spec.resourceClaims) count too (lib.dra).
package labgate.lib.gpu

import data.labgate.lib.dra
import data.labgate.lib.tenancy

_config := data.labgate.config

gpu_resources := {r | some r in _config.gpu_resources}

mig_resource_prefix := _config.mig_resource_prefix

model_label := _config.gpu_model_label

unspecified_model := "unspecified"

# Resource domains of GPU vendors: a resource of one of these domains (or a subdomain) that labgate
# neither counts nor lists as a companion is refused rather than ignored (gpu-resource-unknown).
_vendor_domains := {d | some d in object.get(_config, "gpu_vendor_domains", [])}

# Resources of a vendor domain that are not GPUs and are not counted (Intel's millicores, ...).
_companion_resources := {r | some r in object.get(_config, "gpu_companion_resources", [])}

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
_is_unknown_vendor_resource(resource) if {
	not is_gpu_resource(resource)
	not resource in _companion_resources
	contains(resource, "/")
	domain := split(resource, "/")[0]
	some vendor in _vendor_domains
	_in_domain(domain, vendor)
}

_in_domain(domain, vendor) if domain == vendor

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
effective_request(spec, resource) := max([
	_running(spec, resource),
	_init_peak(spec, resource),
]) + _overhead(spec, resource)

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
		_is_unknown_vendor_resource(r)
	],
	[{"field": "overhead", "resource": r, "count": _amount(q)} |
		some r, q in _object(object.get(spec, "overhead", {}))
		_is_unknown_vendor_resource(r)
	],
)

# Resources of labgate's own domain (labgate.io/...) a pod spec asks: [{"field", "resource", "count"}].
# They are counted for labgate by others (Kueue asks labgate.io/gpu-total for every nvidia.com/gpu a
# workload asks, rbac/queues.py), and a pod that asks one itself changes that count.
own_domain_resources(spec) := [{
	"field": sprintf("%s[%d].resources", [group, i]), "resource": r, "count": _quantity(c, r),
} |
	some group in ["initContainers", "containers"]
	some i, c in _array(object.get(spec, group, []))
	some r, _ in _asked(c)
	startswith(r, "labgate.io/")
]

# Every GPU ask of a pod spec: its containers' (asks) and its claims' (lib.dra).
all_asks(spec) := array.concat(asks(spec), dra.claim_asks(spec, whole_gpu_model(spec)))

# {"total": n, "by_model": {model: n}}; {"total": 0, "by_model": {}} for a pod without GPUs.
demand(spec) := _demand_of(all_asks(spec))

_demand_of(list) := {"total": sum([a.gpus | some a in list]), "by_model": {model: sum([a.count |
	some a in list
	a.model == model
]) |
	some ask in list
	model := ask.model
}}

# The asks and demand of each of the request's pod templates, by path: computed once per query.
template_asks[template.path] := all_asks(template.spec) if some template in input.pod_templates

template_demand[path] := _demand_of(list) if some path, list in template_asks

# The request's kind is a bare Pod (not a subresource of one).
is_pod if {
	input.request.kind.kind == "Pod"
	input.request.kind.group == ""
	object.get(input.request, "subResource", "") == ""
}

# The request's Pod in a tenant namespace, being created: what the webhook reserves when it admits.
created_pod_template := template if {
	is_pod
	input.request.operation == "CREATE"
	tenancy.namespace_tenant
	some template in input.pod_templates
	template.path == "spec"
}

# Kueue's scheduling gate: a pod behind it cannot be scheduled, so it holds no GPUs until Kueue
# admits it and removes the gate (lib.kueue names it too; rules.queue lets only Kueue remove it
# where Kueue queues the tenant's pods).
kueue_admission_gate := "kueue.x-k8s.io/admission"

is_behind_admission_gate(obj) if {
	some gate in object.get(obj, ["spec", "schedulingGates"], [])
	gate.name == kueue_admission_gate
}

# The request's Pod in a tenant namespace whose GPU demand is judged now: when it is created, and when
# Kueue's admission gate is removed from it (from then on it can be scheduled).
judged_pod_template := created_pod_template

judged_pod_template := template if {
	is_pod
	input.request.operation == "UPDATE"
	is_behind_admission_gate(input.request.oldObject)
	not is_behind_admission_gate(input.request.object)
	tenancy.namespace_tenant
	some template in input.pod_templates
	template.path == "spec"
}

# Of that Pod, what the webhook reserves when it admits: not while it waits behind Kueue's gate (it
# is reserved when the gate is removed). One quota, two enforcers: docs/architecture.md.
reserved_pod_template := template if {
	template := judged_pod_template
	not is_behind_admission_gate(input.request.object)
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
