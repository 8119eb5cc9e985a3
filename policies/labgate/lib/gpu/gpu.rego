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
import data.labgate.lib.quantity
import data.labgate.lib.tenancy

_config := data.labgate.config

# METADATA
# title: The resources counted as whole GPUs
# description: |
#   The extended resources (config gpu_resources, such as nvidia.com/gpu) whose units a tenant's
#   GPU quota counts as whole GPUs of the model the pod's node selector names.
gpu_resources := {r | some r in _config.gpu_resources}

_mig_resource_prefix := _config.mig_resource_prefix

# METADATA
# title: The node label that names a GPU model
# description: |
#   The label (config gpu_model_label) a pod's nodeSelector sets to pick a GPU product; its value
#   is the model the pod's whole GPUs count against in the tenant's quota.
model_label := _config.gpu_model_label

# METADATA
# title: The model of GPUs asked without one
# description: |
#   What whole GPUs count as when the pod's nodeSelector names no GPU model, so quota and messages
#   can still say which GPUs a pod asked.
unspecified_model := "unspecified"

# Resource domains of GPU vendors: a resource of one of these domains (or a subdomain) that labgate
# neither counts nor lists as a companion is refused rather than ignored (gpu-resource-unknown).
_vendor_domains := {d | some d in object.get(_config, "gpu_vendor_domains", [])}

# Resources of a vendor domain that are not GPUs and are not counted (Intel's millicores, ...).
_companion_resources := {r | some r in object.get(_config, "gpu_companion_resources", [])}

_weights := object.get(_config, "gpu_resource_weights", {})

# "nvidia.com/" for "nvidia.com/mig-": what is cut from a MIG resource to name its model.
_mig_domain := concat("", [concat("/", array.slice(parts, 0, count(parts) - 1)), "/"]) if {
	parts := split(_mig_resource_prefix, "/")
	count(parts) > 1
} else := ""

# METADATA
# title: A MIG slice resource
# description: |
#   Whether a resource is a MIG slice of a GPU (its name starts with config mig_resource_prefix),
#   counted as its own model in the tenant's quota.
is_mig_resource(resource) if {
	_mig_resource_prefix != ""
	startswith(resource, _mig_resource_prefix)
}

_is_gpu_resource(resource) if resource in gpu_resources

_is_gpu_resource(resource) if is_mig_resource(resource)

# What one unit of a resource counts against the tenant's total: gpu_resource_weights[resource], or
# the entry for the MIG prefix, else 1.
_weight(resource) := w if {
	w := _weights[resource]
} else := w if {
	is_mig_resource(resource)
	w := _weights[_mig_resource_prefix]
} else := 1

# A resource of a GPU vendor's domain that labgate does not count and does not list as a companion.
_is_unknown_vendor_resource(resource) if {
	not _is_gpu_resource(resource)
	not resource in _companion_resources
	contains(resource, "/")
	domain := split(resource, "/")[0]
	some vendor in _vendor_domains
	_in_domain(domain, vendor)
}

_in_domain(domain, vendor) if domain == vendor

_in_domain(domain, vendor) if endswith(domain, concat("", [".", vendor]))

# METADATA
# title: The model a MIG resource counts as
# description: |
#   The MIG profile a MIG resource names, "mig-1g.10gb" for "nvidia.com/mig-1g.10gb": the model
#   key of spec.gpu.models its units count against.
mig_model(resource) := trim_prefix(resource, _mig_domain)

# METADATA
# title: A quota model that is a MIG profile
# description: |
#   Whether a model name (a key of a tenant's spec.gpu.models) is a MIG profile rather than a GPU
#   product, so rules can tell slices from whole GPUs.
is_mig_model(model) if startswith(concat("", [_mig_domain, model]), _mig_resource_prefix)

# METADATA
# title: The model of a pod's whole GPUs
# description: |
#   The GPU product a pod spec selects with nodeSelector[gpu_model_label], else "unspecified": the
#   model its whole GPUs count against in the tenant's quota.
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
_amount(q) := quantity.number(q)

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

# METADATA
# title: A native sidecar container
# description: |
#   An init container with restartPolicy Always, which keeps running beside the app containers,
#   so its GPUs add to theirs in the pod's demand.
is_sidecar(container) if object.get(container, "restartPolicy", "") == "Always"

# The counted resources a pod spec names anywhere (containers, init containers, overhead).
_spec_resources(spec) := {r |
	some container in array.concat(_containers(spec), _init_containers(spec))
	some r, _ in _asked(container)
	_is_gpu_resource(r)
} | {r |
	some r, _ in _object(object.get(spec, "overhead", {}))
	_is_gpu_resource(r)
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
_effective_request(spec, resource) := max([
	_running(spec, resource),
	_init_peak(spec, resource),
]) + _overhead(spec, resource)

# Every GPU ask of a pod spec's containers: {"resource", "model", "count", "gpus"} per counted
# resource, sorted by resource; count is the effective request, gpus what it weighs on the total.
_asks(spec) := [{"resource": r, "model": _model(spec, r), "count": n, "gpus": n * _weight(r)} |
	some r in sort(_spec_resources(spec))
	n := _effective_request(spec, r)
	n > 0
]

# METADATA
# title: GPU vendor resources labgate does not count
# description: |
#   Resources of a GPU vendor's domain that are neither counted nor listed as companions, where a
#   pod spec names them: [{"field", "resource", "count"}]; gpu-resource-unknown refuses them.
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

# METADATA
# title: labgate's own resources a pod asks
# description: |
#   Resources of labgate.io/ a pod spec asks itself: [{"field", "resource", "count"}]. Kueue counts
#   them for labgate (labgate.io/gpu-total per nvidia.com/gpu, rbac/queues.py), so a pod asking one
#   would change the tenant's GPU count.
own_domain_resources(spec) := [{
	"field": sprintf("%s[%d].resources", [group, i]), "resource": r, "count": _quantity(c, r),
} |
	some group in ["initContainers", "containers"]
	some i, c in _array(object.get(spec, group, []))
	some r, _ in _asked(c)
	startswith(r, "labgate.io/")
]

# METADATA
# title: Every GPU ask of a pod spec
# description: |
#   The GPUs a pod spec asks through its containers and through its resource claims (lib.dra), one
#   {"resource", "model", "count", "gpus"} per ask.
all_asks(spec) := array.concat(_asks(spec), dra.claim_asks(spec, whole_gpu_model(spec)))

# METADATA
# title: A pod spec's GPU demand
# description: |
#   What a pod spec takes from its tenant's GPU quota: {"total": n, "by_model": {model: n}}, the
#   total weighted, and {"total": 0, "by_model": {}} for a pod without GPUs.
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

# METADATA
# title: The GPU demand of each pod template
# description: |
#   The GPU demand of each of the request's pod templates, by template path, computed once per
#   query for the quota rules.
template_demand[path] := _demand_of(list) if some path, list in template_asks

# METADATA
# title: The request is for a Pod
# description: |
#   Whether the admission request's kind is a bare Pod (not a subresource of one), the object whose
#   GPUs are reserved against the tenant's quota.
is_pod if {
	input.request.kind.kind == "Pod"
	input.request.kind.group == ""
	object.get(input.request, "subResource", "") == ""
}

# METADATA
# title: The Pod being created in a tenant namespace
# description: |
#   The pod template of a Pod created in a tenant's namespace: the GPUs the webhook reserves on the
#   tenant's quota ledger when it admits.
created_pod_template := template if {
	is_pod
	input.request.operation == "CREATE"
	tenancy.namespace_tenant
	some template in input.pod_templates
	template.path == "spec"
}

# METADATA
# title: Kueue's admission scheduling gate
# description: |
#   The scheduling gate Kueue puts on a queued pod: behind it the pod cannot be scheduled, so it
#   holds no GPUs until Kueue admits it and removes the gate (rules.queue lets only Kueue remove it).
kueue_admission_gate := "kueue.x-k8s.io/admission"

# METADATA
# title: A pod waiting behind Kueue's gate
# description: |
#   Whether a pod still carries Kueue's admission scheduling gate, so its GPUs are not yet taken
#   from the tenant's quota.
is_behind_admission_gate(obj) if {
	some gate in object.get(obj, ["spec", "schedulingGates"], [])
	gate.name == kueue_admission_gate
}

# METADATA
# scope: document
# title: The Pod whose GPU demand is judged now
# description: |
#   The request's Pod in a tenant namespace whose GPUs are judged against the quota now: when it is
#   created, and when Kueue's admission gate is removed from it (from then on it can be scheduled).
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

# METADATA
# title: The Pod whose GPUs the webhook reserves
# description: |
#   Of the judged Pod, the one the webhook reserves GPUs for on the tenant's ledger when it admits:
#   not while it waits behind Kueue's gate. One quota, two enforcers: docs/architecture.md.
reserved_pod_template := template if {
	template := judged_pod_template
	not is_behind_admission_gate(input.request.object)
}

# METADATA
# scope: document
# title: The pod templates the GPU rules check
# description: |
#   A Pod when it is created, whoever creates it (a Job's pods count against the quota too); other
#   workloads when people create or change them, so what can never run is refused when applied.
#   Workloads controllers write (a Deployment's ReplicaSets) are not checked again: their pods are.
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
