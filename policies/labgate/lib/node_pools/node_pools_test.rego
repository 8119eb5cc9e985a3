package labgate.lib.node_pools_test

import data.labgate.lib.node_pools
import data.labgate.lib.testdata

test_default_pool_is_the_first_spot_pool if {
	node_pools.default_pool(testdata.vision, {"path": "spec", "spec": {}, "metadata": {}}).name == "h100-spot"
}

test_on_demand_pool_only_where_allowed if {
	on_demand := {"path": "spec", "spec": {}, "metadata": {"annotations": {"labgate.io/capacity": "on-demand"}}}
	node_pools.default_pool(testdata.speech, on_demand).name == "a100-ondemand"
	node_pools.default_pool(testdata.vision, on_demand).name == "h100-spot"
}

test_pool_label_values_include_names_and_selectors if {
	node_pools.pool_label_values(testdata.speech) == {"a100-ondemand", "a100-spot"}
}

test_pool_taint_keys_come_from_every_tenant if {
	node_pools.pool_taint_keys == {"labgate.io/pool", "labgate.io/spot"} with data.inventory as testdata.gpu_inventory
}

test_a_narrower_toleration_is_covered if {
	node_pools.covered_by(
		{"key": "labgate.io/pool", "operator": "Equal", "value": "vision", "effect": "NoSchedule"},
		{"key": "labgate.io/pool", "operator": "Exists"},
	)
	node_pools.covered_by(testdata.pool_toleration("vision"), testdata.pool_toleration("vision"))
}

test_a_wider_toleration_is_not_covered if {
	not node_pools.covered_by(
		{"key": "labgate.io/pool", "operator": "Exists", "effect": "NoSchedule"},
		testdata.pool_toleration("vision"),
	)
	not node_pools.covered_by(
		{"key": "labgate.io/pool", "operator": "Equal", "value": "vision"},
		testdata.pool_toleration("vision"),
	)
	not node_pools.covered_by(testdata.pool_toleration("speech"), testdata.pool_toleration("vision"))
}

test_metadata_field_sits_beside_the_spec if {
	node_pools._metadata_field({"path": "spec"}) == "metadata"
	cronjob := {"path": "spec.jobTemplate.spec.template.spec"}
	node_pools._metadata_field(cronjob) == "spec.jobTemplate.spec.template.metadata"
}

test_pool_models_come_from_the_selector_else_the_list if {
	node_pools.pool_models({"name": "p", "nodeSelector": {"nvidia.com/gpu.product": "h100"}, "models": ["a100"]}) == {
		"h100",
	}
	node_pools.pool_models({"name": "p", "models": ["a100", "l4"]}) == {"a100", "l4"}
	node_pools.pool_models({"name": "p"}) == set()
}

test_describe_pool_names_capacity_and_models if {
	node_pools.describe_pool({"name": "p", "spot": true, "models": ["l4", "a100"]}) == `"p" (spot: a100, l4)`
	node_pools.describe_pool({"name": "q"}) == `"q" (on-demand: any model)`
}

test_foreign_pool_owners_are_the_other_tenants_keeping_that_pool if {
	node_pools.foreign_pool_owners(testdata.vision, "a100-ondemand") == {"speech"}
		with data.inventory as testdata.gpu_inventory
	node_pools.foreign_pool_owners(testdata.vision, "h100-spot") == set() with data.inventory as testdata.gpu_inventory
	node_pools.foreign_pool_owners(testdata.vision, "cpu-shared") == set() with data.inventory as testdata.gpu_inventory
}

test_pools_by_tenant_are_each_tenants_pools if {
	node_pools.pools_by_tenant == {
		"vision": node_pools.pools(testdata.vision),
		"speech": node_pools.pools(testdata.speech),
	} with data.inventory as testdata.gpu_inventory
}

test_pools_by_tenant_leave_out_what_pools_reads_as_none if {
	tenants := {
		"listed": {"spec": {"placement": {"nodePools": [{"name": "p"}]}}},
		"empty": {"spec": {"placement": {"nodePools": []}}},
		"not-a-list": {"spec": {"placement": {"nodePools": {"name": "p"}}}},
		"none": {"spec": {}},
	}
	node_pools.pools_by_tenant == {"listed": [{"name": "p"}], "empty": []} with data.inventory.tenants as tenants
	node_pools.pools(tenants["not-a-list"]) == []
	node_pools.pools(tenants.none) == []
}
