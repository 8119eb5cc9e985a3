package labgate.lib.node_selection_test

import data.labgate.lib.node_selection

pool := {"name": "b-spot", "nodeSelector": {"labgate.io/node-pool": "b-spot", "nvidia.com/gpu.product": "h100"}}

req(key, operator, values) := {"key": key, "operator": operator, "values": values}

test_a_pool_without_a_selector_is_its_name_on_the_pool_label if {
	node_selection.pool_selector({"name": "b-open"}) == {"labgate.io/node-pool": "b-open"}
}

test_requirements_that_allow_the_pools_values_can_select_it if {
	node_selection.can_select([req("labgate.io/node-pool", "In", ["a-spot", "b-spot"])], pool)
	node_selection.can_select([req("disktype", "In", ["ssd"])], pool)
	node_selection.can_select([req("nvidia.com/gpu.product", "NotIn", ["a100"])], pool)
}

test_requirements_that_exclude_the_pool_cannot_select_it if {
	not node_selection.can_select([req("labgate.io/node-pool", "In", ["a-spot"])], pool)
	not node_selection.can_select([req("labgate.io/node-pool", "NotIn", ["b-spot"])], pool)
	not node_selection.can_select([req("nvidia.com/gpu.product", "DoesNotExist", [])], pool)
	not node_selection.can_select([req("nvidia.com/gpu.product", "Gt", ["3"])], pool)
	not node_selection.can_select([req("disktype", "In", ["ssd"]), req("disktype", "NotIn", ["ssd"])], pool)
}

test_alternatives_are_the_terms_each_with_the_node_selector if {
	template := {"path": "spec", "spec": {
		"nodeSelector": {"disktype": "ssd"},
		"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
			{},
			{"matchExpressions": [req("labgate.io/node-pool", "In", ["a-spot"])]},
		]}}},
	}}
	node_selection.alternatives(template) == [{
		"field": "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1]",
		"requirements": [req("disktype", "In", ["ssd"]), req("labgate.io/node-pool", "In", ["a-spot"])],
	}]
}

test_confined_to_its_own_pools if {
	own := [
		{"name": "a-spot"},
		{"name": "a-h100", "nodeSelector": {"labgate.io/node-pool": "a-h100", "nvidia.com/gpu.product": "h100"}},
	]
	node_selection.confined_to([req("labgate.io/node-pool", "In", ["a-spot"])], own)
	node_selection.confined_to(
		[req("labgate.io/node-pool", "In", ["a-h100"]), req("nvidia.com/gpu.product", "In", ["h100"])],
		own,
	)
	not node_selection.confined_to([req("labgate.io/node-pool", "In", ["a-h100"])], own)
	not node_selection.confined_to([req("labgate.io/node-pool", "In", ["a-spot", "b-spot"])], own)
}
