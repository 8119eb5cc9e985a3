package labgate.rules.placement_test

import data.labgate.lib.testdata
import data.labgate.rules.placement

# placement-no-node: said only when the Tenant's status says what its pools' nodes hold, and none of
# them has the pod's model; each paired with the pod it must not warn about.

_pod_on_pools(model, pools) := object.union(
	testdata.workload_input("Pod", "vision", testdata.vera, testdata.pod("train-1", {
		"nodeSelector": {"nvidia.com/gpu.product": model},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
	})),
	pools,
)

_no_node_findings(input_doc) := {v |
	some v in placement.violation with input as input_doc with data.inventory as _any_model_inventory
	v.rule == "placement-no-node"
}

# vision's pools say no model (any model may go there): the pod is placed, and only the nodes can tell.
_any_model_inventory := json.patch(testdata.gpu_inventory, [
	{"op": "remove", "path": "/tenants/vision/spec/placement/nodePools/0/models"},
	{"op": "remove", "path": "/tenants/vision/spec/placement/nodePools/1/models"},
])

test_a_gpu_pod_whose_pools_have_no_node_of_its_model_is_told_so if {
	input_doc := _pod_on_pools("a100", {"gpu_pools": {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}})
	_no_node_findings(input_doc) == {{
		"rule": "placement-no-node",
		"field": "spec.nodeSelector",
		"if_admitted": true,
		"message": concat("", [
			`[placement-no-node] Pod "train-1" spec.nodeSelector asks GPU model "a100", and no node of tenant `,
			`"vision"'s pools has it now (their nodes have h100): it pends until one does. Fix: ask model h100, or ask `,
			`the infra team for "a100" nodes in your pools`,
		]),
	}}
}

test_a_gpu_pod_whose_pools_have_a_node_of_its_model_is_not_told if {
	input_doc := _pod_on_pools("h100", {"gpu_pools": {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}})
	count(_no_node_findings(input_doc)) == 0
}

# Never said on missing facts: no status of the pools' nodes yet.
test_without_the_pools_nodes_nothing_is_said if {
	count(_no_node_findings(_pod_on_pools("a100", {}))) == 0
}
