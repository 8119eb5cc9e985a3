package labgate.mutation_test

import data.labgate.lib.testdata
import data.labgate.mutation

# The mutation's tests of placing a pod on a pool that has its model, and of pinning image volumes
# (split from mutation_test.rego, whose helpers they use: one package).

# --- the pool that has the model (issue 22) ---

_two_spot_pools := json.patch(testdata.gpu_inventory, [{
	"op": "add", "path": "/tenants/vision/spec/placement/nodePools/-",
	"value": {
		"name": "a100-spot", "models": ["a100"], "spot": true,
		"nodeSelector": {"labgate.io/node-pool": "a100-spot"},
		"tolerations": [testdata.pool_toleration("vision"), testdata.spot_toleration],
	},
}])

# Regression: an a100 pod was put on the first spot pool, whose nodes are all h100, and stayed Pending.
test_a_pod_goes_to_the_first_spot_pool_that_has_its_model if {
	input_doc := pod_input("vision", testdata.vera, {
		"serviceAccountName": "operator", "priorityClassName": "urgent",
		"nodeSelector": {"nvidia.com/gpu.product": "a100"},
		"containers": [gpu_container("1")],
	})
	p := mutation.changes_patch with input as input_doc with data.inventory as _two_spot_pools
	p[0] == {"op": "add", "path": "/spec/nodeSelector/labgate.io~1node-pool", "value": "a100-spot"}
	h100 := json.patch(input_doc, [{"op": "replace", "path": "/pod_templates/0/spec/nodeSelector/nvidia.com~1gpu.product", "value": "h100"}])
	q := mutation.changes_patch with input as h100 with data.inventory as _two_spot_pools
	q[0] == {"op": "add", "path": "/spec/nodeSelector/labgate.io~1node-pool", "value": "h100-spot"}
}

test_a_pod_whose_model_no_pool_has_is_not_placed if {
	input_doc := pod_input("vision", testdata.vera, {
		"serviceAccountName": "operator", "priorityClassName": "urgent",
		"nodeSelector": {"nvidia.com/gpu.product": "a100"},
		"containers": [gpu_container("1")],
	})
	mutate(input_doc) == {"patch": [], "warnings": []}
}

test_pods_without_gpus_are_never_placed if {
	input_doc := pod_input("vision", testdata.vera, {
		"serviceAccountName": "operator", "priorityClassName": "urgent",
		"containers": [testdata.main_container],
	})
	mutate(input_doc) == {"patch": [], "warnings": []}
}

test_image_volumes_are_pinned_like_containers if {
	reference := "registry.lab.example/vision/weights:v3"
	pinned := concat("", ["registry.lab.example/vision/weights@", _pin_digest])
	template := object.union(
		_pin_input.pod_templates[0],
		{"spec": {"volumes": [{"name": "weights", "image": {"reference": reference}}]}},
	)
	with_volume := object.union(_pin_input, {"pod_templates": [template], "images": {reference: {"pinned": pinned}}})
	result := mutation.changes_patch with input as with_volume
		with data.inventory as _pin_inventory({"requireSignature": true})
	{"op": "add", "path": "/spec/volumes/0/image/reference", "value": pinned} in result
	{
		"op": "add", "path": "/spec/containers/0/image",
		"value": concat("", ["registry.lab.example/vision/train@", _pin_digest]),
	} in result
}
