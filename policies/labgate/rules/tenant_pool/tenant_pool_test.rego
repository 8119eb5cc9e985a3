package labgate.rules.tenant_pool_test

import data.labgate.lib.testdata
import data.labgate.rules.tenant_pool

_tenant_request(name, pools) := {
	"operation": "CREATE",
	"kind": {"group": "labgate.io", "version": "v1alpha1", "kind": "Tenant"},
	"name": name,
	"userInfo": {"username": "infra", "groups": ["system:masters"]},
	"object": {"metadata": {"name": name}, "spec": {"members": {}, "placement": {"nodePools": pools}}},
}

# vision's h100-spot (testdata): its nodeSelector and tolerations.
_vision_spot := testdata.vision.spec.placement.nodePools[1]

_violations(name, pools) := v if {
	v := tenant_pool.violation with input.request as _tenant_request(name, pools)
		with data.inventory as testdata.gpu_inventory
}

test_a_pool_name_another_tenant_gives_other_nodes_is_refused if {
	theirs := object.union(_vision_spot, {"nodeSelector": {"labgate.io/node-pool": "robotics-h100"}})
	_violations("robotics", [theirs]) == {{
		"rule": "tenant-pool-conflict",
		"field": "spec.placement.nodePools[0]",
		"message": concat("", [
			`[tenant-pool-conflict] Tenant "robotics" spec.placement.nodePools[0] "h100-spot" is also a pool of `,
			`tenant "vision", with other nodeSelector or tolerations: one name is one set of nodes (Kueue's flavor `,
			`is named by it). Fix: give it tenant "vision"'s nodeSelector {"labgate.io/node-pool":"h100-spot"} and `,
			`tolerations [{"effect":"NoSchedule","key":"labgate.io/pool","operator":"Equal","value":"vision"},`,
			`{"effect":"NoSchedule","key":"labgate.io/spot","operator":"Exists"}] if these are the same nodes, `,
			`or another name`,
		]),
	}}
	other_taints := object.union(_vision_spot, {"tolerations": [testdata.spot_toleration]})
	[v.rule | some v in _violations("robotics", [other_taints])] == ["tenant-pool-conflict"]
}

test_the_same_pool_in_two_tenants_and_a_tenants_own_pools_are_admitted if {
	count(_violations("robotics", [_vision_spot])) == 0
	count(_violations("vision", testdata.vision.spec.placement.nodePools)) == 0
	own := {"name": "robotics-a100", "nodeSelector": {"labgate.io/node-pool": "robotics-a100"}}
	count(_violations("robotics", [own])) == 0
}

test_a_pool_named_like_labgates_own_flavors_is_refused if {
	fields := {v.field |
		some v in _violations("robotics", [{"name": "labgate-any-node"}, {"name": "ok"}, {"name": "labgate-tenant-total"}])
	}
	fields == {"spec.placement.nodePools[0].name", "spec.placement.nodePools[2].name"}
}
