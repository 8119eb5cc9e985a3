# METADATA
# title: Node pools and tolerations
# description: |
#   Where a tenant's GPU pods may run: its node pools (spec.placement.nodePools), spot or on-demand,
#   the GPU models each has, the pool labgate puts a pod on, which tenant a pool belongs to, and the
#   taints and tolerations that keep pools for their tenants; shared by rules.placement and the
#   mutation package.
package labgate.lib.node_pools

import data.labgate.lib.gpu

# METADATA
# title: The node label that names a node pool
# description: |
#   The label (config node_pool_label) a pod's nodeSelector sets to land on one node pool; its
#   value must select a pool of the pod's own tenant.
node_pool_label := data.labgate.config.node_pool_label

# METADATA
# title: The annotation that asks on-demand capacity
# description: |
#   The annotation (config capacity_annotation, labgate.io/capacity) by which a pod or workload
#   opts out of spot capacity with the value on-demand.
capacity_annotation := data.labgate.config.capacity_annotation

_object(value) := value if {
	is_object(value)
} else := {}

_array(value) := value if {
	is_array(value)
} else := []

# Where a template's metadata lives: "metadata" for a Pod's "spec", "spec.template.metadata" for
# "spec.template.spec".
_metadata_field(template) := concat(".", array.concat(array.slice(parts, 0, count(parts) - 1), ["metadata"])) if {
	parts := split(template.path, ".")
}

_template_annotations(template) := _object(object.get(_object(object.get(template, "metadata", {})), "annotations", {}))

# METADATA
# scope: document
# title: A pod that asks on-demand capacity
# description: |
#   The pod opts out of spot capacity (annotation labgate.io/capacity: on-demand): on its template,
#   or, for a workload (a Job, a training job), on the workload's own metadata, where people write it too.
wants_on_demand(template) if _template_annotations(template)[capacity_annotation] == "on-demand"

wants_on_demand(_) if _workload_wants_on_demand

_workload_wants_on_demand if {
	not gpu.is_pod
	_object(object.get(input.request, ["object", "metadata", "annotations"], {}))[capacity_annotation] == "on-demand"
}

# METADATA
# title: Where the on-demand opt-out was written
# description: |
#   The field a message names for the on-demand annotation: the template's metadata.annotations,
#   else the workload's.
on_demand_field(template) := sprintf("%s.annotations", [_metadata_field(template)]) if {
	_template_annotations(template)[capacity_annotation] == "on-demand"
} else := "metadata.annotations"

# METADATA
# title: A tenant's node pools
# description: |
#   The node pools a tenant's GPU pods may run on (spec.placement.nodePools), or none when the
#   Tenant lists none.
pools(tenant) := _array(object.get(tenant, ["spec", "placement", "nodePools"], []))

# METADATA
# title: Every tenant's node pools
# description: |
#   pools(tenant) of each tenant of the inventory that lists some, by tenant name, for the rules that
#   look at every tenant's pools. Read field by field: handing each Tenant of the inventory whole to
#   pools() makes OPA convert all of it, which costs more than the rest of the scan.
pools_by_tenant[name] := listed if {
	some name, tenant in data.inventory.tenants
	listed := tenant.spec.placement.nodePools
	is_array(listed)
}

# METADATA
# title: A tenant that may use on-demand pools
# description: |
#   Whether a tenant lets its pods ask on-demand capacity (spec.placement.allowOnDemand), so they
#   may be placed on its pools that are not spot.
allows_on_demand(tenant) if object.get(tenant, ["spec", "placement", "allowOnDemand"], false) == true

# METADATA
# title: The pool label values that select a tenant's pools
# description: |
#   Values of nodeSelector[node_pool_label] that select one of the tenant's pools: the pools' names,
#   and the value a pool's own nodeSelector gives that label (so a pod labgate placed passes).
pool_label_values(tenant) := {value |
	some pool in pools(tenant)
	some value in pool_label_values_of(pool)
}

# METADATA
# title: The pool label values that select one pool
# description: |
#   Values of nodeSelector[node_pool_label] that select this pool: its name, and the value its own
#   nodeSelector gives that label. The one place that says so: a tenant's own pools, the pool a value
#   selects and the other tenants' pools it selects are all read through it, so they cannot disagree.
pool_label_values_of(pool) := {pool.name} | {value |
	value := _object(object.get(pool, "nodeSelector", {}))[node_pool_label]
}

# METADATA
# title: A tenant's spot pools
# description: |
#   The tenant's node pools of spot capacity, where labgate puts its GPU pods by default.
spot_pools(tenant) := [pool | some pool in pools(tenant); object.get(pool, "spot", false) == true]

_on_demand_pools(tenant) := [pool | some pool in pools(tenant); object.get(pool, "spot", false) != true]

# METADATA
# title: The GPU models of a node pool
# description: |
#   The GPU models a pool's nodes have: the model its nodeSelector names (gpu.model_label), else its
#   models list. Empty when the pool says neither: labgate does not know, and any model may go there.
pool_models(pool) := {model} if {
	model := _object(object.get(pool, "nodeSelector", {}))[gpu.model_label]
	is_string(model)
} else := {m | some m in _array(object.get(pool, "models", [])); is_string(m)}

# METADATA
# title: The GPU model a pod template asks
# description: |
#   The whole-GPU model a template asks: its nodeSelector's, else the tenant's one (non-MIG) model,
#   which the mutation selects. Undefined without whole GPUs or when it names none of several models.
asked_model(tenant, template) := model if {
	_asks_whole_gpus(template)
	model := gpu.whole_gpu_model(template.spec)
	model != gpu.unspecified_model
} else := model if {
	_asks_whole_gpus(template)
	models := object.keys(_object(object.get(tenant, ["spec", "gpu", "models"], {})))
	count(models) == 1
	some model in models
	not gpu.is_mig_model(model)
}

_asks_whole_gpus(template) if {
	some ask in gpu.template_asks[template.path]
	not gpu.is_mig_model(ask.model)
}

# METADATA
# scope: document
# title: A node pool that fits a pod template
# description: |
#   Whether a pool has the GPU model the template asks, or labgate cannot tell (no model asked, or
#   the pool names none).
fits(_, tenant, template) if not asked_model(tenant, template)

fits(pool, _, _) if count(pool_models(pool)) == 0

fits(pool, tenant, template) if asked_model(tenant, template) in pool_models(pool)

# The pools labgate may put a GPU pod on when it names none: the tenant's spot pools, or, when the
# pod asks on-demand capacity and the tenant allows it, its pools that are not spot.
_candidate_pools(tenant, template) := _on_demand_pools(tenant) if {
	_on_demand_allowed(tenant, template)
} else := spot_pools(tenant)

# METADATA
# title: The pool labgate places a GPU pod on
# description: |
#   The pool labgate puts a GPU pod on when it names none: the first of the tenant's candidate pools
#   with the model it asks. Undefined when none has it (rules.placement refuses the pod then).
default_pool(tenant, template) := [pool |
	some pool in _candidate_pools(tenant, template)
	fits(pool, tenant, template)
][0]

_on_demand_allowed(tenant, template) if {
	wants_on_demand(template)
	allows_on_demand(tenant)
}

# METADATA
# title: The tenant's pool a pod selects
# description: |
#   The tenant's pool that nodeSelector[node_pool_label] = value selects, by name or by the value
#   the pool's own nodeSelector gives that label.
selected_pool(tenant, value) := [pool |
	some pool in pools(tenant)
	value in pool_label_values_of(pool)
][0]

# METADATA
# title: The other tenants owning a selected pool
# description: |
#   The other tenants whose pool nodeSelector[node_pool_label] = value selects, where it selects
#   none of the tenant's own: a node pool belongs to its tenant against every other tenant.
foreign_pool_owners(tenant, value) := {name |
	not value in pool_label_values(tenant)
	some name, listed in pools_by_tenant
	name != tenant.metadata.name
	some pool in listed
	value in pool_label_values_of(pool)
}

# METADATA
# title: A node pool, for messages
# description: |
#   A pool's name, capacity and GPU models as a denial names them: "h100-spot" (spot: h100).
describe_pool(pool) := sprintf("%q (%s: %s)", [pool.name, _capacity(pool), _models_text(pool_models(pool))])

_capacity(pool) := "spot" if {
	object.get(pool, "spot", false) == true
} else := "on-demand"

_models_text(models) := "any model" if {
	count(models) == 0
} else := concat(", ", sort(models))

# METADATA
# title: The taint keys that keep pools for their tenants
# description: |
#   Every taint key some tenant's node pool tolerates. A complete set, built at most once per
#   evaluation (only when a GPU pod carries a toleration), then looked up for every toleration.
pool_taint_keys := {key |
	some listed in pools_by_tenant
	some pool in listed
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

# METADATA
# title: A toleration no wider than a pool's
# description: |
#   Whether a toleration tolerates no taint that the carried one does not: the same key, an effect
#   and value at least as narrow, so a pod cannot reach another tenant's pool through it.
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

# METADATA
# title: Two tolerations that are the same
# description: |
#   Whether two tolerations are the same up to Kubernetes' defaults, tolerationSeconds included.
same_toleration(a, b) if {
	_normal(a) == _normal(b)
	object.get(a, "tolerationSeconds", null) == object.get(b, "tolerationSeconds", null)
}

# METADATA
# title: A toleration, for messages
# description: |
#   The taint a toleration tolerates as a denial names it: taint "labgate.io/pool=vision:NoSchedule".
describe_toleration(toleration) := sprintf("taint %q", [concat("", [t.key, _value_text(t), _effect_text(t)])]) if {
	t := _normal(toleration)
}

_value_text(t) := "" if {
	t.operator == "Exists"
} else := concat("", ["=", t.value])

_effect_text(t) := "" if {
	t.effect == ""
} else := concat("", [":", t.effect])
