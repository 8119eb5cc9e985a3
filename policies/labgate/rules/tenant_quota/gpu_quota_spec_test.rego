package labgate.rules.tenant_quota_test

import data.labgate.lib.testdata
import data.labgate.rules.tenant_quota

_spec_inventory := json.patch(testdata.inventory, [
	{"op": "add", "path": "/tenants/team-a/spec/namespaces", "value": {"names": ["team-a"], "prefix": "team-a-"}},
])

# Issue 22 item 7: lowering a quota below the usage was silent.
_update_quota(gpu, usage) := {
	"request": {
		"operation": "UPDATE",
		"kind": {"group": "labgate.io", "version": "v1alpha1", "kind": "Tenant"},
		"name": "team-a",
		"userInfo": {"username": "infra", "groups": ["system:masters"]},
		"object": {"metadata": {"name": "team-a"}, "spec": {"members": {}, "namespaces": {"names": ["team-a"]}, "gpu": gpu}},
	},
	"gpu_usage": usage,
}

test_a_quota_lowered_below_the_usage_says_what_happens_to_running_pods if {
	violations := tenant_quota.violation
		with input as _update_quota({"total": 16, "models": {"h100": 2}}, {"total": 5, "by_model": {"h100": 5}})
		with data.inventory as _spec_inventory
	violations == {{
		"rule": "tenant-quota-below-usage",
		"field": "spec.gpu.models[h100]",
		"message": concat("", [
			`[tenant-quota-below-usage] Tenant "team-a" uses 5 h100, above the new limit 2 (spec.gpu.models[h100]): `,
			`running pods stay, new ones are refused until usage is below it. Fix: none needed; to free GPUs now, `,
			`delete some of its pods`,
		]),
	}}
}

test_a_quota_at_or_above_the_usage_says_nothing if {
	count(tenant_quota.violation) == 0
		with input as _update_quota({"total": 5, "models": {"h100": 5}}, {"total": 5, "by_model": {"h100": 5}})
		with data.inventory as _spec_inventory

	# An update that leaves the limit as it was (members, say) does not say it again.
	unchanged := json.patch(
		_update_quota({"total": 16, "models": {"h100": 2}}, {"total": 5, "by_model": {"h100": 5}}),
		[
			{
				"op": "add", "path": "/request/oldObject",
				"value": {"metadata": {"name": "team-a"}, "spec": {"gpu": {"total": 16, "models": {"h100": 2}}}},
			},
		],
	)
	count(tenant_quota.violation) == 0 with input as unchanged with data.inventory as _spec_inventory

	# Without the usage (a CREATE, or the ledger unreadable), nothing is said.
	no_usage := json.remove(_update_quota({"total": 1}, {"total": 5}), ["gpu_usage"])
	count(tenant_quota.violation) == 0 with input as no_usage with data.inventory as _spec_inventory
}

test_a_quota_below_the_usage_is_a_warning_not_a_refusal if {
	d := data.labgate.admission.decision with input as _update_quota({"total": 4}, {"total": 5, "by_model": {}})
		with data.inventory as _spec_inventory
	d.allowed
	[w.message | some w in d.warnings] == [
		concat("", [
			`[tenant-quota-below-usage] Tenant "team-a" uses 5 GPUs, above the new limit 4 (spec.gpu.total): running `,
			`pods stay, new ones are refused until usage is below it. Fix: none needed; to free GPUs now, delete some `,
			`of its pods`,
		]),
	]
}

# Issue 22 item 6: a quota the nodes of the tenant's pools can never hold was silent.
_pools := [
	{
		"name": "h100-spot", "spot": true, "nodeSelector": {"labgate.io/pool": "h100-spot", "nvidia.com/gpu.product": "h100"},
	},
]

_tenant(generation, models, pools) := {
	"metadata": {"name": "team-a", "generation": generation},
	"spec": {
		"members": {}, "namespaces": {"names": ["team-a"]}, "gpu": {"models": models}, "placement": {"nodePools": pools},
	},
}

# An update of team-a from an h100 quota of 16 to `models`, its status saying its pools hold 16 h100
# on 2 nodes of 8.
_update_pools(models, pools) := {"request": {
	"operation": "UPDATE",
	"kind": {"group": "labgate.io", "version": "v1alpha1", "kind": "Tenant"},
	"name": "team-a",
	"userInfo": {"username": "infra", "groups": ["system:masters"]},
	"oldObject": object.union(_tenant(3, {"h100": 16}, _pools), {"status": {
		"observedGeneration": 3,
		"gpu": {"pools": {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}},
	}}),
	"object": _tenant(3, models, pools),
}}

test_a_quota_beyond_what_the_pools_hold_says_so if {
	violations := tenant_quota.violation with input as _update_pools({"h100": 24, "a100": 4, "mig-1g.10gb": 8}, _pools)
		with data.inventory as _spec_inventory
	violations == {
		{
			"rule": "tenant-quota-beyond-pools",
			"field": "spec.gpu.models[h100]",
			"message": concat("", [
				`[tenant-quota-beyond-pools] Tenant "team-a" spec.gpu.models[h100] is 24, but the nodes of its pools hold `,
				`16 h100 (2 nodes, the largest 8): its pods beyond 16 wait for a node. Fix: lower spec.gpu.models[h100] `,
				`to 16, or add h100 nodes to its pools`,
			]),
		},
		{
			"rule": "tenant-quota-beyond-pools",
			"field": "spec.gpu.models[a100]",
			"message": concat("", [
				`[tenant-quota-beyond-pools] Tenant "team-a" spec.gpu.models[a100] is 4, but the nodes of its pools hold `,
				`no a100: its a100 pods wait for a node. Fix: lower spec.gpu.models[a100] to 0, or add a100 nodes to its `,
				`pools`,
			]),
		},
	}
	d := data.labgate.admission.decision
		with input as _update_pools({"h100": 24}, _pools)
		with data.inventory as _spec_inventory
	d.allowed # a warning: the nodes may be on their way
	count(d.warnings) == 1
}

test_a_quota_the_pools_hold_says_nothing if {
	count(tenant_quota.violation) == 0
		with input as _update_pools({"h100": 16}, _pools)
		with data.inventory as _spec_inventory
}

test_pools_the_status_did_not_measure_say_nothing if {
	# Other pools in the update: the status's nodes are not theirs.
	other := [json.patch(_pools[0], [{"op": "replace", "path": "/nodeSelector/labgate.io~1pool", "value": "h100-big"}])]
	count(tenant_quota.violation) == 0
		with input as _update_pools({"h100": 24}, other)
		with data.inventory as _spec_inventory

	# A status of an older generation (the reconciler has not caught up), or without pools.
	stale := json.patch(
		_update_pools({"h100": 24}, _pools),
		[{"op": "replace", "path": "/request/oldObject/status/observedGeneration", "value": 2}],
	)
	count(tenant_quota.violation) == 0 with input as stale with data.inventory as _spec_inventory
	unknown := json.remove(_update_pools({"h100": 24}, _pools), ["/request/oldObject/status/gpu/pools"])
	count(tenant_quota.violation) == 0 with input as unknown with data.inventory as _spec_inventory

	# The reconciler's own status write says nothing.
	status_write := json.patch(
		_update_pools({"h100": 24}, _pools),
		[{"op": "add", "path": "/request/subResource", "value": "status"}],
	)
	count(tenant_quota.violation) == 0 with input as status_write with data.inventory as _spec_inventory
}

# A new Tenant has no status: the webhook reads the nodes its pools select (input.tenant_pool_gpus).
_create_pools(models, capacity) := object.union(
	{"request": {
		"operation": "CREATE",
		"kind": {"group": "labgate.io", "version": "v1alpha1", "kind": "Tenant"},
		"name": "team-n",
		"userInfo": {"username": "infra", "groups": ["system:masters"]},
		"object": json.patch(_tenant(1, models, _pools), [
			{"op": "replace", "path": "/metadata/name", "value": "team-n"},
			{"op": "replace", "path": "/spec/namespaces/names", "value": ["team-n"]},
		]),
	}},
	capacity,
)

_read := {"tenant_pool_gpus": {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}}

test_a_new_tenant_beyond_what_its_pools_nodes_hold_says_so if {
	violations := tenant_quota.violation
		with input as _create_pools({"h100": 24}, _read)
		with data.inventory as _spec_inventory
	violations == {{
		"rule": "tenant-quota-beyond-pools",
		"field": "spec.gpu.models[h100]",
		"message": concat("", [
			`[tenant-quota-beyond-pools] Tenant "team-n" spec.gpu.models[h100] is 24, but the nodes of its pools hold `,
			`16 h100 (2 nodes, the largest 8): its pods beyond 16 wait for a node. Fix: lower spec.gpu.models[h100] to `,
			`16, or add h100 nodes to its pools`,
		]),
	}}
	d := data.labgate.admission.decision
		with input as _create_pools({"h100": 24}, _read)
		with data.inventory as _spec_inventory
	d.allowed
	count(d.warnings) == 1

	# Pools whose nodes hold no GPUs at all (none yet): every whole-GPU model is said.
	none := tenant_quota.violation
		with input as _create_pools({"h100": 8}, {"tenant_pool_gpus": {}})
		with data.inventory as _spec_inventory
	[v.message | some v in none] == [
		concat("", [
			`[tenant-quota-beyond-pools] Tenant "team-n" spec.gpu.models[h100] is 8, but the nodes of its pools hold `,
			`no h100: its h100 pods wait for a node. Fix: lower spec.gpu.models[h100] to 0, or add h100 nodes to its `,
			`pools`,
		]),
	]
}

test_a_new_tenant_its_pools_nodes_hold_says_nothing if {
	count(tenant_quota.violation) == 0
		with input as _create_pools({"h100": 16}, _read)
		with data.inventory as _spec_inventory
}

test_a_new_tenant_whose_nodes_were_not_read_says_nothing if {
	# The webhook could not read them, or cannot tell (a pool selecting any node): no key, no warning.
	count(tenant_quota.violation) == 0 with input as _create_pools({"h100": 24}, {}) with data.inventory as _spec_inventory
}

test_an_update_to_other_pools_is_judged_by_the_nodes_read_then if {
	# The status measured the old pools (16 h100); the new pools' nodes, read live, hold 8.
	other := [json.patch(_pools[0], [{"op": "replace", "path": "/nodeSelector/labgate.io~1pool", "value": "h100-small"}])]
	live := object.union(
		_update_pools({"h100": 16}, other),
		{"tenant_pool_gpus": {"h100": {"gpus": 8, "nodes": 1, "largestNode": 8}}},
	)
	[v.message | some v in tenant_quota.violation] == [
		concat("", [
			`[tenant-quota-beyond-pools] Tenant "team-a" spec.gpu.models[h100] is 16, but the nodes of its pools hold `,
			`8 h100 (1 node, the largest 8): its pods beyond 8 wait for a node. Fix: lower spec.gpu.models[h100] to 8, `,
			`or add h100 nodes to its pools`,
		]),
	]
		with input as live
		with data.inventory as _spec_inventory

	# What was read live wins over the old status, both ways.
	fits := object.union(
		_update_pools({"h100": 24}, _pools),
		{"tenant_pool_gpus": {"h100": {"gpus": 32, "nodes": 4, "largestNode": 8}}},
	)
	count(tenant_quota.violation) == 0 with input as fits with data.inventory as _spec_inventory
}
