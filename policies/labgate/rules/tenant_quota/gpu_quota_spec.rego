package labgate.rules.tenant_quota

import data.labgate.lib.gpu
import data.labgate.lib.tenancy

# tenant-quota-below-usage and tenant-quota-beyond-pools: a Tenant's own GPU quota (spec.gpu) judged
# when the Tenant is written, against what it uses and what its pools' nodes hold. Announced, not
# refused. One package with tenant_quota.rego (the quota of a tenant's pods), so its own helper names.

_tenant_name := tenancy.object_name

# --- A quota lowered below what the tenant uses ---

# The limits of the updated Tenant that its usage (input.gpu_usage, the webhook reads the Tenant's
# quota ledger on UPDATE) is above: [{"field", "used", "limit", "word"}], the total first.
_lowered_below_usage := array.concat(
	[{"field": "spec.gpu.total", "used": used, "limit": limit, "word": "GPUs"} |
		limit := input.request.object.spec.gpu.total
		is_number(limit)
		_is_lowered(["spec", "gpu", "total"], limit)
		used := object.get(input.gpu_usage, "total", 0)
		used > limit
	],
	[{"field": sprintf("spec.gpu.models[%s]", [model]), "used": used, "limit": limit, "word": model} |
		models := object.get(input.request.object, ["spec", "gpu", "models"], {})
		some model in sort(object.keys(models))
		limit := models[model]
		_is_lowered(["spec", "gpu", "models", model], limit)
		used := object.get(input.gpu_usage, ["by_model", model], 0)
		used > limit
	],
)

# Said when the limit changes (set or lowered), not on every later update of a Tenant still above it.
_is_lowered(path, limit) if object.get(object.get(input.request, "oldObject", {}), path, null) != limit

# METADATA
# title: A quota lowered below the tenant's usage says what happens to its pods
# description: |
#   Announced, not refused (config rule_modes gives it warn): the infra team may lower a quota at
#   any time; running pods are not evicted, and new ones are refused until usage is below the limit.
# custom:
#   rule_id: tenant-quota-below-usage
violation contains {"rule": rule_id, "message": msg, "field": over.field} if {
	input.request.kind.kind == "Tenant" # first, for rule indexing
	input.request.kind.group == "labgate.io"
	input.request.operation == "UPDATE"
	object.get(input.request, "subResource", "") == "" # the reconciler's status writes say nothing
	is_object(input.gpu_usage)
	some over in _lowered_below_usage
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] Tenant %q uses %v %s, above the new limit %v (%s): running pods stay, new ones are refused until ",
			"usage is below it. Fix: none needed; to free GPUs now, delete some of its pods",
		]),
		[rule_id, _tenant_name, over.used, over.word, over.limit, over.field],
	)
}

# --- A quota the nodes of the tenant's pools can never hold ---

# What the nodes of the Tenant's pools hold per model: as the webhook read them when the Tenant was
# applied (input.tenant_pool_gpus, on CREATE and UPDATE, of the pools the object names), else as its
# status says it (the reconciler writes status.gpu.pools from the nodes it watches) when that status is
# of the pools the update keeps: the old object's status, of its current generation, with the same
# nodeSelectors. Undefined else.
_pool_capacity := input.tenant_pool_gpus if {
	is_object(input.tenant_pool_gpus)
} else := capacity if {
	old := input.request.oldObject
	old.status.observedGeneration == old.metadata.generation
	_pool_selectors(old) == _pool_selectors(input.request.object)
	capacity := old.status.gpu.pools
	is_object(capacity)
	count(capacity) > 0
}

_pool_selectors(tenant) := [object.get(pool, "nodeSelector", {}) |
	some pool in object.get(tenant, ["spec", "placement", "nodePools"], [])
]

_pool_gpus(model) := object.get(_pool_capacity, [model, "gpus"], 0)

_pool_text(model) := sprintf("%v %s (%v %s, the largest %v)", [
	held.gpus, model, held.nodes, _nodes_word(held.nodes), held.largestNode,
]) if {
	held := _pool_capacity[model]
} else := sprintf("no %s", [model])

_waiting_text(model) := sprintf("its pods beyond %v", [_pool_gpus(model)]) if {
	_pool_gpus(model) > 0
} else := sprintf("its %s pods", [model])

_nodes_word(1) := "node"

_nodes_word(n) := "nodes" if n != 1

# METADATA
# title: A quota the nodes of the tenant's pools can never hold says so when applied
# description: |
#   Announced, not refused (config rule_modes gives it warn): the nodes may be on their way. Pods
#   beyond what the pools' nodes hold wait for a node, and the reconciler's QuotaFitsPools condition
#   says the same. Judged on a create or an update, against the nodes the object's pools select as
#   the webhook reads them then; when it could not read them, on an update whose pools are the ones
#   the old status measured. Nothing is said when labgate cannot tell.
# custom:
#   rule_id: tenant-quota-beyond-pools
violation contains {"rule": rule_id, "message": msg, "field": sprintf("spec.gpu.models[%s]", [model])} if {
	input.request.kind.kind == "Tenant" # first, for rule indexing
	input.request.kind.group == "labgate.io"
	tenancy.tenant_spec_written
	object.get(input.request, "subResource", "") == ""
	_pool_capacity
	some model, quota in object.get(input.request.object, ["spec", "gpu", "models"], {})
	not gpu.is_mig_model(model)
	quota > _pool_gpus(model)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] Tenant %q spec.gpu.models[%s] is %v, but the nodes of its pools hold %s: %s wait for a node. Fix: ",
			"lower spec.gpu.models[%s] to %v, or add %s nodes to its pools",
		]),
		[rule_id, _tenant_name, model, quota, _pool_text(model), _waiting_text(model), model, _pool_gpus(model), model],
	)
}
