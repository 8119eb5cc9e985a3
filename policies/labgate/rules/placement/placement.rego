# METADATA
# title: Node-pool placement
# description: |
#   Node pools (spec.placement.nodePools) belong to their tenants, against every other tenant and
#   every pod, GPU or not. In a tenant namespace no pod may select another tenant's pool with
#   nodeSelector[node_pool_label] (its name, or the value the pool's own nodeSelector gives that
#   label), nor tolerate the taints that keep pools for their tenants (any key some tenant's pool
#   tolerates) beyond what its own tenant's pools carry; wildcard tolerations (operator Exists
#   without a key, which tolerates every taint, or Exists on a pool taint key, which tolerates
#   every tenant's pool) are refused unless a pool of the tenant carries exactly that. A required
#   node selection (nodeSelector, required nodeAffinity terms) is judged by what it can ever select
#   (lib.node_selection): no term may select a node of another tenant's pool whose taints the pod
#   tolerates or that has none, unless the term is confined to the tenant's own pools.
#   A tenant that lists node pools runs its GPU pods (lib.gpu demand above zero) on them only: such
#   a pod selects one of them, or none (the mutation package places it), and the pool must have the
#   GPU model the pod asks (lib.node_pools.pool_models); where no pool labgate may place it on has
#   that model, the pod is refused naming the pools and their models. A pod may opt out of spot
#   capacity (annotation capacity_annotation: on-demand) only if its Tenant allows on-demand capacity.
#   Pods are checked when created, whoever creates them, and when people change them (tolerations
#   can be added to a running pod); other workloads when people create or change them (lib.gpu).
package labgate.rules.placement

import data.labgate.lib.gpu
import data.labgate.lib.node_pools
import data.labgate.lib.node_selection
import data.labgate.lib.tenancy

# Every template of the request in a tenant namespace, GPU or not: none may reach another tenant's pool.
_judged contains {"tenant": tenant, "template": template} if {
	tenant := tenancy.namespace_tenant
	some template in _checked_templates
}

# GPU templates in a namespace of a tenant that has node pools: confined to those pools.
_placed contains judged if {
	some judged in _judged
	_is_confined(judged)
}

_is_confined(judged) if {
	count(node_pools.pools(judged.tenant)) > 0
	gpu.template_demand[judged.template.path].total > 0
}

# What the GPU rules check, and a running Pod that people change: tolerations may be added to it.
_checked_templates := gpu.checked_templates | {template |
	gpu.is_pod
	input.request.operation == "UPDATE"
	not tenancy.is_trusted_requester
	some template in input.pod_templates
}

_quoted(names) := concat(", ", [sprintf("%q", [n]) | some n in sort(names)])

_pool_names(tenant) := {pool.name | some pool in node_pools.pools(tenant)}

# METADATA
# title: A GPU pod selects only its tenant's node pools
# custom:
#   rule_id: placement-pool
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some placed in _placed
	template := placed.template
	value := template.spec.nodeSelector[node_pools.node_pool_label]
	not value in node_pools.pool_label_values(placed.tenant)
	field := sprintf("%s.nodeSelector", [template.path])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks %s=%q, which is not a node pool of tenant %q (its pools: %s). Fix: select one of those ",
			"pools, or remove the selector and labgate places the pod",
		]),
		[
			rule_id, tenancy.object_ref, field, node_pools.node_pool_label, value, placed.tenant.metadata.name,
			_quoted(_pool_names(placed.tenant)),
		],
	)
}

# METADATA
# title: A pod without GPUs, or of a tenant without pools, selects no other tenant's pool
# custom:
#   rule_id: placement-pool
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some judged in _judged
	not _is_confined(judged)
	template := judged.template
	value := template.spec.nodeSelector[node_pools.node_pool_label]
	owners := node_pools.foreign_pool_owners(judged.tenant, value)
	count(owners) > 0
	field := sprintf("%s.nodeSelector", [template.path])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s asks %s=%q, a node pool of tenant %s: node pools belong to their tenants, whatever a pod asks. Fix: %s",
		[
			rule_id, tenancy.object_ref, field, node_pools.node_pool_label, value, _quoted(owners),
			_own_pools_fix(judged.tenant),
		],
	)
}

_own_pools_fix(tenant) := sprintf(
	"remove the selector, or select one of tenant %q's pools (%s)",
	[tenant.metadata.name, _quoted(_pool_names(tenant))],
) if {
	count(node_pools.pools(tenant)) > 0
} else := sprintf(
	"remove the selector (tenant %q has no node pools of its own; its pods run on shared nodes)",
	[tenant.metadata.name],
)

_is_wildcard(toleration) if {
	object.get(toleration, "key", "") == ""
	object.get(toleration, "operator", "Equal") == "Exists"
}

_carried(tenant, toleration) if {
	some pool in node_pools.pools(tenant)
	some carried in object.get(pool, "tolerations", [])
	node_pools.covered_by(toleration, carried)
}

# METADATA
# title: No pod tolerates every taint
# custom:
#   rule_id: placement-pool
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some judged in _judged
	template := judged.template
	some i, toleration in object.get(template.spec, "tolerations", [])
	_is_wildcard(toleration)
	field := sprintf("%s.tolerations[%d]", [template.path, i])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s is operator: Exists without a key: it tolerates every taint, the ones that keep node pools for ",
			"their tenants too. Fix: remove it, or give it the key of the one taint it is for; labgate adds the ",
			"tolerations of your tenant's pools itself",
		]),
		[rule_id, tenancy.object_ref, field],
	)
}

# METADATA
# title: A pod tolerates pool taints only as its tenant's pools do
# custom:
#   rule_id: placement-pool
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some judged in _judged
	template := judged.template
	some i, toleration in object.get(template.spec, "tolerations", [])
	not _is_wildcard(toleration)
	object.get(toleration, "key", "") in node_pools.pool_taint_keys
	not _carried(judged.tenant, toleration)
	field := sprintf("%s.tolerations[%d]", [template.path, i])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s tolerates %s, and no pool of tenant %q carries that toleration. Fix: remove it; labgate adds ",
			"the tolerations of your tenant's pools itself",
		]),
		[rule_id, tenancy.object_ref, field, _toleration_text(toleration), judged.tenant.metadata.name],
	)
}

_toleration_text(toleration) := sprintf(
	"taint %q with operator: Exists, whatever its value: every tenant's pool that taint keeps",
	[toleration.key],
) if {
	object.get(toleration, "operator", "Equal") == "Exists"
} else := sprintf("%s, which keeps node pools for their tenants", [node_pools.describe_toleration(toleration)])

_pools_text(tenant) := concat(", ", [node_pools.describe_pool(pool) | some pool in node_pools.pools(tenant)])

# METADATA
# title: A GPU pod selects a pool that has its GPU model
# custom:
#   rule_id: placement-pool
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some placed in _placed
	template := placed.template
	value := template.spec.nodeSelector[node_pools.node_pool_label]
	pool := node_pools.selected_pool(placed.tenant, value)
	not node_pools.fits(pool, placed.tenant, template)
	model := node_pools.asked_model(placed.tenant, template)
	field := sprintf("%s.nodeSelector", [template.path])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks %s=%q for GPU model %q, which that pool does not have; tenant %q's pools: %s. Fix: select ",
			"a pool with %q, or remove the selector and labgate places the pod on one",
		]),
		[
			rule_id, tenancy.object_ref, field, node_pools.node_pool_label, value, model,
			placed.tenant.metadata.name, _pools_text(placed.tenant), model,
		],
	)
}

# The tenant says which models its pools have (else labgate cannot tell a pod that fits none).
_describes_models(tenant) if {
	some pool in node_pools.pools(tenant)
	count(node_pools.pool_models(pool)) > 0
}

# METADATA
# title: A GPU pod that selects no pool asks a model some pool labgate may place it on has
# custom:
#   rule_id: placement-pool
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some placed in _placed
	template := placed.template
	not _selects_pool(template)
	_describes_models(placed.tenant)
	model := node_pools.asked_model(placed.tenant, template)
	not node_pools.default_pool(placed.tenant, template)
	field := _model_field(template)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks GPU model %q, and no node pool of tenant %q that labgate may place it on has it; its ",
			"pools: %s. Fix: ask a model one of those pools has (labgate places a pod on spot pools, on on-demand ones ",
			"when it asks %s=on-demand and the Tenant allows it), or ask the infra team for a pool with %q",
		]),
		[
			rule_id, tenancy.object_ref, field, model, placed.tenant.metadata.name,
			_pools_text(placed.tenant), node_pools.capacity_annotation, model,
		],
	)
}

_selects_pool(template) if template.spec.nodeSelector[node_pools.node_pool_label]

_model_field(template) := sprintf("%s.nodeSelector", [template.path]) if {
	template.spec.nodeSelector[gpu.model_label]
} else := template.path

_spot_hint(tenant) := sprintf(
	"remove the annotation (labgate places the pod on spot pool %q)",
	[node_pools.spot_pools(tenant)[0].name],
) if {
	count(node_pools.spot_pools(tenant)) > 0
} else := "remove the annotation"

# METADATA
# title: GPU pods opt out of spot capacity only where the tenant allows it
# custom:
#   rule_id: placement-on-demand
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some placed in _placed
	node_pools.wants_on_demand(placed.template)
	not node_pools.allows_on_demand(placed.tenant)
	field := node_pools.on_demand_field(placed.template)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks %s=%q, but tenant %q runs GPU pods on spot capacity only (spec.placement.allowOnDemand is ",
			"not true). Fix: %s, or ask the infra team to allow on-demand capacity for Tenant %q",
		]),
		[
			rule_id, tenancy.object_ref, field, node_pools.capacity_annotation, "on-demand",
			placed.tenant.metadata.name, _spot_hint(placed.tenant), placed.tenant.metadata.name,
		],
	)
}

# --- Required node selection into another tenant's pool ---
#
# A pool's taints keep out the pods that do not tolerate them (the rules above guard tolerations);
# a pool whose taints a pod tolerates, or a pool without taints, is kept from it by the pod's own
# required node selection alone. So that selection is judged by what it can ever select
# (lib.node_selection), against every other tenant's pool the pod tolerates: the taints each pool
# stands for are the ones its tolerations tolerate (PreferNoSchedule keeps no pod out). A pool the
# tenant lists too (the same selector) is its own, and so is every node of its own pools: a selection
# confined to them is never refused, whatever other pools' selectors could also match those nodes.

_foreign_pools(tenant) := [{"tenant": name, "pool": pool} |
	some name, listed in node_pools.pools_by_tenant
	name != tenant.metadata.name
	some pool in listed
	not node_selection.pool_selector(pool) in _own_selectors(tenant)
]

_own_selectors(tenant) := {node_selection.pool_selector(pool) | some pool in node_pools.pools(tenant)}

# The pod tolerates every taint the pool stands for with tolerations the rules above let it keep
# (its own pools carry them too): a pool it could enter only with a refused toleration is refused
# as such already.
_tolerates_pool(judged, pool) if {
	every carried in object.get(pool, "tolerations", []) {
		_tolerated(judged, carried)
	}
}

_keeps_nothing_out(carried) if object.get(carried, "effect", "") == "PreferNoSchedule"

_tolerated(_, carried) if _keeps_nothing_out(carried)

_tolerated(judged, carried) if {
	some toleration in object.get(judged.template.spec, "tolerations", [])
	not _is_wildcard(toleration)
	_carried(judged.tenant, toleration)
	node_pools.covered_by(carried, toleration)
}

# The nodeSelector rules above already refuse a pool label naming a pool that is not the tenant's.
_refused_by_pool_label(judged) if {
	value := judged.template.spec.nodeSelector[node_pools.node_pool_label]
	not value in node_pools.pool_label_values(judged.tenant)
	_is_confined(judged)
}

_refused_by_pool_label(judged) if {
	value := judged.template.spec.nodeSelector[node_pools.node_pool_label]
	count(node_pools.foreign_pool_owners(judged.tenant, value)) > 0
}

# `labgate.io/node-pool NotIn ["b-spot"]`: a requirement that keeps the pod off the pool.
_exclusion(pool) := sprintf("%s NotIn [%q]", [key, node_selection.pool_selector(pool)[key]]) if {
	key := node_pools.node_pool_label
	node_selection.pool_selector(pool)[key]
} else := sprintf("%s NotIn [%q]", [key, node_selection.pool_selector(pool)[key]]) if {
	key := sort(object.keys(node_selection.pool_selector(pool)))[0]
}

# METADATA
# title: A pod's required node selection reaches no other tenant's pool
# custom:
#   rule_id: placement-pool
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some judged in _judged
	template := judged.template
	node_selection.has_required_selection(template)
	not _refused_by_pool_label(judged)
	some alternative in node_selection.alternatives(template)
	not node_selection.confined_to(alternative.requirements, node_pools.pools(judged.tenant))
	some foreign in _foreign_pools(judged.tenant)
	_tolerates_pool(judged, foreign.pool)
	node_selection.can_select(alternative.requirements, foreign.pool)
	field := alternative.field
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s can select nodes of node pool %q of tenant %q (nodeSelector %s), and no taint of that pool ",
			"keeps this pod out: node pools belong to their tenants. Fix: %s, or add the requirement %s",
		]),
		[
			rule_id, tenancy.object_ref, field, foreign.pool.name, foreign.tenant,
			json.marshal(node_selection.pool_selector(foreign.pool)), _own_pools_fix(judged.tenant), _exclusion(foreign.pool),
		],
	)
}
