# METADATA
# title: Tenants whose node pools would collide
# description: |
#   A pool name stands for one set of nodes across the cluster: Kueue's ResourceFlavor of a pool is
#   named by it (one flavor per name, shared by every tenant that lists the pool), and the placement
#   rules read it as a value of the pool label. Two Tenants that give one name different nodeSelectors
#   or tolerations would have the flavor describe one tenant's nodes for the other's queue (its pods
#   then wait for ever, or are made and refused); the two names labgate gives its own flavors are
#   not pool names. Applies to everyone, the infra team included: a collision is a mistake.
package labgate.rules.tenant_pool

import data.labgate.lib.tenancy

# A CREATE, or an UPDATE that changes the spec (see tenancy.tenant_spec_written).
_is_tenant_write if tenancy.tenant_spec_written

_name := tenancy.object_name

_pools := object.get(input.request.object, ["spec", "placement", "nodePools"], [])

# What makes a pool's nodes: the labels that select them and the taints its pods tolerate.
_nodes_of(pool) := {
	"nodeSelector": object.get(pool, "nodeSelector", {}),
	"tolerations": {t | some t in object.get(pool, "tolerations", [])},
}

# labgate's own flavors (rbac/queues.py: ANY_NODE_FLAVOR, TOTAL_FLAVOR).
_reserved := {"labgate-any-node", "labgate-tenant-total"}

# METADATA
# title: A pool name means the same nodes in every Tenant
# custom:
#   rule_id: tenant-pool-conflict
violation contains {"rule": rule_id, "message": msg, "field": sprintf("spec.placement.nodePools[%d]", [i])} if {
	input.request.kind.kind == "Tenant" # first, for rule indexing
	_is_tenant_write
	some i, pool in _pools
	some owner, tenant in data.inventory.tenants
	owner != _name
	some theirs in object.get(tenant, ["spec", "placement", "nodePools"], [])
	theirs.name == pool.name
	_nodes_of(theirs) != _nodes_of(pool)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] Tenant %q spec.placement.nodePools[%d] %q is also a pool of tenant %q, with other nodeSelector or ",
			"tolerations: one name is one set of nodes (Kueue's flavor is named by it). Fix: give it tenant %q's ",
			"nodeSelector %s and tolerations %s if these are the same nodes, or another name",
		]),
		[
			rule_id, _name, i, pool.name, owner, owner, json.marshal(object.get(theirs, "nodeSelector", {})),
			json.marshal(object.get(theirs, "tolerations", [])),
		],
	)
}

# METADATA
# title: A pool does not take the name of labgate's own flavors
# custom:
#   rule_id: tenant-pool-conflict
violation contains {"rule": rule_id, "message": msg, "field": sprintf("spec.placement.nodePools[%d].name", [i])} if {
	input.request.kind.kind == "Tenant" # first, for rule indexing
	_is_tenant_write
	some i, pool in _pools
	pool.name in _reserved
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] Tenant %q spec.placement.nodePools[%d] is named %q, a name labgate gives its own Kueue flavors. ",
			"Fix: name the pool otherwise",
		]),
		[rule_id, _name, i, pool.name],
	)
}
