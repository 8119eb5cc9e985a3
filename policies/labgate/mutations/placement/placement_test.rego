package labgate.mutations.placement_test

import data.labgate.lib.testdata
import data.labgate.mutations.placement

_pod(spec) := testdata.workload_input("Pod", "vision", testdata.vera, testdata.pod("train-1", spec))

test_a_gpu_pod_is_placed_on_the_first_spot_pool if {
	changes := placement.template_changes.spec with input as _pod({
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "2"})],
	})
		with data.inventory as testdata.gpu_inventory
	changes == [
		{
			"rule": "placement", "ops": [
				{"op": "add", "path": "/spec/nodeSelector/labgate.io~1node-pool", "value": "h100-spot"},
				{"op": "add", "path": "/spec/tolerations", "value": [testdata.pool_toleration("vision"), testdata.spot_toleration]},
			],
			"warning": "",
		},
		{"rule": "placement", "ops": [], "warning": `labgate placed pod on spot pool "h100-spot"`},
	]
}

test_a_pod_without_gpus_is_not_placed if {
	changes := placement.template_changes.spec with input as _pod({"containers": [testdata.main_container]})
		with data.inventory as testdata.gpu_inventory
	changes == []
}
