# METADATA
# title: Tenant CPU, memory and pod-count limits
# description: |
#   A tenant's CPU, memory and pod count are limited across all its namespaces by spec.limits
#   (cpu, memory, pods), or, for a limit the Tenant does not set, by the infra team's default
#   (config tenant_limits; a limit set nowhere is no limit). A Pod created in a tenant namespace
#   (by anyone: a Job's pods count too, and so do pods admitted as preemptible beyond the GPU quota)
#   is refused when what it asks plus what the tenant's live pods already ask (input.tenant_usage,
#   which the reconciler sums from the pods it watches and writes into the tenant's ledger) exceeds
#   a limit. What a pod asks is the scheduler's count (Kubernetes' PodRequests): per resource, the
#   effective request
#     the pod-level request (spec.resources), where the pod sets one, else
#     max(sum over containers and native sidecars, max over each plain init container i of
#         (i + the sidecars started before it))
#     + spec.overhead
#   where a container asks requests[r], or limits[r] when it has no request (the apiserver's
#   defaulting), and the pod-level request is spec.resources.requests[r], or spec.resources.limits[r]
#   when no container names r (the apiserver's defaulting; when one does, the containers' count
#   stands); CPU in millicores and memory in bytes; every pod counts one against pods.
#   The usage lags the pods by the reconciler's settling (a pod event, then a ledger write): pods created in
#   that window are each checked against the same usage, and the native ResourceQuota the reconciler
#   puts in every namespace (the same limits) bounds what such a burst can take (docs/architecture.md).
package labgate.rules.tenant_quota

import data.labgate.lib.gpu
import data.labgate.lib.quantity
import data.labgate.lib.tenancy

# METADATA
# title: The resources a tenant's limits cover
# description: |
#   CPU, memory and pods, in the order refusals name them.
resources := ["cpu", "memory", "pods"]

_usage := object.get(input, "tenant_usage", {})

_used(resource) := object.get(_usage, resource, 0)

_defaults := object.get(data.labgate.config, "tenant_limits", {})

# METADATA
# title: A tenant's limit of one resource
# description: |
#   In counting units (millicores, bytes, pods): the Tenant's own spec.limits, else the infra team's
#   default tenant_limits; undefined when neither sets one.
limit(tenant, resource) := _units(resource, q) if {
	q := tenant.spec.limits[resource]
	q != null
} else := _units(resource, q) if {
	q := _defaults[resource]
	q != null
}

_limit_source(tenant, resource) := sprintf("spec.limits.%s of Tenant %q", [resource, tenant.metadata.name]) if {
	tenant.spec.limits[resource] != null
} else := sprintf(
	"the default tenant_limits.%s (or set spec.limits.%s of Tenant %q)",
	[resource, resource, tenant.metadata.name],
)

# A quantity ("500m", "8", 8, "64Gi") in counting units: millicores for cpu, bytes for memory.
_units("cpu", q) := ceil(_number(q) * 1000)

_units("memory", q) := ceil(_number(q))

_units("pods", q) := round(_number(q))

_number(q) := quantity.number(q)

# --- what a pod spec asks: the scheduler's effective request ---

_object(value) := value if {
	is_object(value)
} else := {}

_array(value) := value if {
	is_array(value)
} else := []

# A container's request of `resource` (a request wins over a limit; a limit alone is the request).
_quantity(container, resource) := _units(resource, q) if {
	resources_doc := _object(object.get(container, "resources", {}))
	q := object.union(
		_object(object.get(resources_doc, "limits", {})),
		_object(object.get(resources_doc, "requests", {})),
	)[resource]
} else := 0

_containers(spec) := _array(object.get(spec, "containers", []))

_init_containers(spec) := _array(object.get(spec, "initContainers", []))

_running(spec, resource) := sum(array.concat(
	[_quantity(c, resource) | some c in _containers(spec)],
	[_quantity(c, resource) | some c in _init_containers(spec); gpu.is_sidecar(c)],
))

_init_peak(spec, resource) := max(array.concat([0], [n |
	some i, c in _init_containers(spec)
	not gpu.is_sidecar(c)
	n := _quantity(c, resource) + sum([_quantity(s, resource) |
		some j, s in _init_containers(spec)
		j < i
		gpu.is_sidecar(s)
	])
]))

_overhead(spec, resource) := _units(resource, q) if {
	q := _object(object.get(spec, "overhead", {}))[resource]
} else := 0

_pod_level(spec, part) := _object(object.get(_object(object.get(spec, "resources", {})), part, {}))

_names(container, resource) if {
	resources_doc := _object(object.get(container, "resources", {}))
	some part in ["requests", "limits"]
	resource in object.keys(_object(object.get(resources_doc, part, {})))
}

# The pod-level request of `resource` (spec.resources: Kubernetes' PodLevelResources, cpu and
# memory), undefined when the pod leaves it to its containers. A pod-level limit without a request
# is the request when no container names the resource, as the apiserver defaults it.
_pod_level_request(spec, resource) := _units(resource, q) if {
	q := _pod_level(spec, "requests")[resource]
} else := _units(resource, q) if {
	q := _pod_level(spec, "limits")[resource]
	not _containers_name(spec, resource)
}

_containers_name(spec, resource) if {
	some c in array.concat(_containers(spec), _init_containers(spec))
	_names(c, resource)
}

_has_pod_level_request(spec, resource) if {
	resource != "pods"
	_pod_level_request(spec, resource) >= 0
}

# Before the overhead: the pod-level request where set, else what the containers ask together.
_request(spec, resource) := n if {
	n := _pod_level_request(spec, resource)
} else := max([_running(spec, resource), _init_peak(spec, resource)])

# METADATA
# scope: document
# title: What a pod spec asks of one resource
# description: |
#   In counting units, as the quota counts it: a pod is one pod; CPU and memory are the pod-level
#   request if set, else the larger of the running containers' sum and the init peak, plus the pod
#   overhead.
asks(_, "pods") := 1

asks(spec, resource) := _request(spec, resource) + _overhead(spec, resource) if {
	resource != "pods"
}

# --- text ---

# METADATA
# scope: document
# title: An amount as a Kubernetes quantity
# description: |
#   "8" or "500m" CPUs, "8Gi", "512Mi" or bytes of memory, a number of pods: how refusals write
#   amounts so researchers can paste them into their specs.
quantity_text("cpu", n) := sprintf("%v", [n / 1000]) if {
	n % 1000 == 0
} else := sprintf("%vm", [n])

quantity_text("memory", n) := sprintf("%vGi", [n / 1073741824]) if {
	n > 0
	n % 1073741824 == 0
} else := sprintf("%vMi", [n / 1048576]) if {
	n > 0
	n % 1048576 == 0
} else := sprintf("%v", [n])

quantity_text("pods", n) := sprintf("%v", [n])

# METADATA
# title: An amount with its noun
# description: |
#   "1 CPU", "8 CPUs", "500m CPU", "8Gi memory", "1 pod", "3 pods": what the tenant-quota refusals
#   say a pod asks, uses and may use.
text(resource, n) := concat(" ", [quantity_text(resource, n), _noun(resource, n)])

_noun("cpu", n) := "CPUs" if {
	n % 1000 == 0
	n != 1000
} else := "CPU"

_noun("memory", _) := "memory"

_noun("pods", 1) := "pod"

_noun("pods", n) := "pods" if n != 1

_fix(tenant, resource, asked, lim) := sprintf(
	"ask less per pod (the pod alone exceeds the limit, so waiting cannot help), or ask the infra team to raise %s",
	[_limit_source(tenant, resource)],
) if {
	asked > lim
} else := sprintf(
	concat("", [
		"lower the request, delete pods you no longer need or wait for running ones to finish, or ask the infra ",
		"team to raise %s",
	]),
	[_limit_source(tenant, resource)],
)

# METADATA
# title: A tenant's pods fit its CPU, memory and pod-count limits across all its namespaces
# custom:
#   rule_id: tenant-quota
violation contains {"rule": rule_id, "message": msg, "field": _field(template.spec, resource)} if {
	input.request.kind.kind == "Pod" # first, for rule indexing
	template := gpu.created_pod_template
	tenant := tenancy.namespace_tenant
	some resource in resources
	lim := limit(tenant, resource)
	asked := asks(template.spec, resource)
	asked > 0
	used := _used(resource)
	used + asked > lim
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s asks %s%s; tenant %q uses %s of %s across its namespaces. Fix: %s",
		[
			rule_id, tenancy.object_ref, text(resource, asked), _where(template.spec, resource),
			tenant.metadata.name, quantity_text(resource, used), text(resource, lim),
			_fix(tenant, resource, asked, lim),
		],
	)
}

# Where the count comes from, when it is not the containers: the pod-level request.
_where(spec, resource) := " (spec.resources)" if {
	_has_pod_level_request(spec, resource)
} else := ""

_field(_, "pods") := "spec"

_field(spec, resource) := "spec.resources" if _has_pod_level_request(spec, resource)

_field(spec, resource) := "spec.containers" if {
	resource != "pods"
	not _has_pod_level_request(spec, resource)
}
