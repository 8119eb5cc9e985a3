# METADATA
# title: GPU node-pool placement
# description: |
#   A tenant that lists node pools (spec.placement.nodePools) runs its GPU pods on them only. A GPU
#   pod (lib.gpu demand above zero) may select a pool with nodeSelector[node_pool_label] only if it is
#   one of its tenant's pools (its name, or the value the pool's own nodeSelector gives that label),
#   and may tolerate taints that keep node pools for their tenants (any key some tenant's pool
#   tolerates, or every taint at once) only as its own tenant's pools do. A pod may opt out of spot
#   capacity (annotation capacity_annotation: on-demand) only if its Tenant allows on-demand capacity.
#   Tenants without node pools are not restricted, nor are pods without GPUs. Pods are checked when
#   created, whoever creates them, and when people change them (tolerations can be added to a running
#   pod); other workloads when people create or change them (lib.gpu).
#   The mutation package places GPU pods that name no pool, so most pods never meet these rules.
package labgate.rules.placement

import data.labgate.lib.gpu
import data.labgate.lib.node_pools
import data.labgate.lib.tenancy

# GPU templates of the request in a namespace of a tenant that has node pools.
_placed contains {"tenant": tenant, "template": template} if {
	tenant := tenancy.namespace_tenant
	count(node_pools.pools(tenant)) > 0
	some template in _checked_templates
	gpu.template_demand[template.path].total > 0
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
		"[%s] %s %s asks %s=%q, which is not a node pool of tenant %q (its pools: %s). Fix: select one of those pools, or remove the selector and labgate places the pod",
		[
			rule_id, tenancy.object_ref, field, node_pools.node_pool_label, value, placed.tenant.metadata.name,
			_quoted(_pool_names(placed.tenant)),
		],
	)
}

# The toleration reaches a taint that keeps some tenant's pool: its key is one, or it has no key and
# tolerates every taint.
_reaches_pool_taint(toleration) if object.get(toleration, "key", "") in node_pools.pool_taint_keys

_reaches_pool_taint(toleration) if {
	object.get(toleration, "key", "") == ""
	object.get(toleration, "operator", "Equal") == "Exists"
	count(node_pools.pool_taint_keys) > 0
}

_carried(tenant, toleration) if {
	some pool in node_pools.pools(tenant)
	some carried in object.get(pool, "tolerations", [])
	node_pools.covered_by(toleration, carried)
}

# METADATA
# title: A GPU pod tolerates other pools' taints only as its tenant's pools do
# custom:
#   rule_id: placement-pool
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some placed in _placed
	template := placed.template
	some i, toleration in object.get(template.spec, "tolerations", [])
	_reaches_pool_taint(toleration)
	not _carried(placed.tenant, toleration)
	field := sprintf("%s.tolerations[%d]", [template.path, i])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s tolerates %s, and no pool of tenant %q carries that toleration. Fix: remove it; labgate adds the tolerations of your tenant's pools itself",
		[rule_id, tenancy.object_ref, field, _toleration_text(toleration), placed.tenant.metadata.name],
	)
}

_toleration_text(toleration) := "every taint (operator Exists without a key), the ones that keep node pools for their tenants too" if {
	object.get(toleration, "key", "") == ""
} else := sprintf("%s, which keeps node pools for their tenants", [node_pools.describe_toleration(toleration)])

_spot_hint(tenant) := sprintf("remove the annotation (labgate places the pod on spot pool %q)", [node_pools.spot_pools(tenant)[0].name]) if {
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
		"[%s] %s %s asks %s=%q, but tenant %q runs GPU pods on spot capacity only (spec.placement.allowOnDemand is not true). Fix: %s, or ask the infra team to allow on-demand capacity for Tenant %q",
		[
			rule_id, tenancy.object_ref, field, node_pools.capacity_annotation, "on-demand",
			placed.tenant.metadata.name, _spot_hint(placed.tenant), placed.tenant.metadata.name,
		],
	)
}
