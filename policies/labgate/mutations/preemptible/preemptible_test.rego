package labgate.mutations.preemptible_test

import data.labgate.lib.testdata
import data.labgate.mutations.preemptible

_inventory := json.patch(
	testdata.gpu_inventory,
	[{"op": "add", "path": "/tenants/vision/spec/gpu/overQuota", "value": "preemptible"}],
)

_input(usage) := {
	"request": object.union(testdata.pod_request("vision", testdata.vera), {"object": {"metadata": {"name": "extra"}}}),
	"pod_templates": [{"path": "spec", "metadata": {"name": "extra"}, "replicas": 1, "spec": {
		"containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
		"nodeSelector": {"nvidia.com/gpu.product": "h100", "labgate.io/node-pool": "h100-spot"},
	}}],
	"gpu_usage": usage,
}

test_a_pod_beyond_quota_is_admitted_as_preemptible if {
	changes := preemptible.template_changes.spec with input as _input({"total": 12, "by_model": {"h100": 4}})
		with data.inventory as _inventory
	changes == [{
		"rule": "gpu-preemptible", "ops": [
			{"op": "add", "path": "/metadata/labels", "value": {"labgate.io/preemptible": "true"}},
			{"op": "add", "path": "/spec/priorityClassName", "value": "research-preemptible"},
			{"op": "add", "path": "/spec/priority", "value": -100},
		],
		"warning": concat("", [
			`[gpu-preemptible] asks 8 GPUs, uses 12 of 16 GPUs (h100: 4 of 8): `,
			`admitted as preemptible, may be evicted`,
		]),
	}]
}

test_a_pod_within_quota_is_not_marked if {
	changes := preemptible.template_changes.spec with input as _input({"total": 0, "by_model": {}})
		with data.inventory as _inventory
	changes == []
}
