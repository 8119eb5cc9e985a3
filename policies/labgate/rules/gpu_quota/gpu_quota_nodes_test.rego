package labgate.rules.gpu_quota_test

import data.labgate.lib.testdata

# gpu-quota's Fix when the nodes of the tenant's pools are known (split from gpu_quota_test.rego,
# whose helpers they use: one package).

# Issue 22 item 6: on nodes of 8, a pod of 32 over 24 GPUs and 16 h100 was told "at most 16", then to
# wait forever: the first Fix names the largest node when it binds before any quota.
_big_pod_input(pools) := object.union(
	testdata.workload_input("Pod", "vision", testdata.vera, gpu_pod("big", "h100", {"nvidia.com/gpu": "32"})),
	pools,
)

_inventory := json.patch(testdata.gpu_inventory, [
	{"op": "replace", "path": "/tenants/vision/spec/gpu/total", "value": 24},
	{"op": "replace", "path": "/tenants/vision/spec/gpu/models/h100", "value": 16},
])

test_a_pod_larger_than_any_node_of_its_pools_is_told_the_largest_node if {
	pools := {"gpu_pools": {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}}
	[v.message | some v in gpu_violations with input as _big_pod_input(pools) with data.inventory as _inventory] == [
		concat("", [
			`[gpu-quota-node] Pod "big" asks 32 nvidia.com/gpu (h100); the largest node of your pools has 8 h100 GPUs, `,
			`so no node can ever hold it. Fix: ask at most 8 h100 GPUs per pod (more pods for more GPUs), or ask the `,
			`infra team for larger h100 nodes in your pools`,
		]),
		concat("", [
			`[gpu-quota] Pod "big" asks 32 nvidia.com/gpu (h100); tenant "vision" uses 0 of 24 GPUs (h100: 0 of 16). `,
			`Fix: ask at most 8 h100 GPUs per pod: the largest node of your pools has 8 (a larger pod is never `,
			`scheduled, so waiting cannot help)`,
		]),
	]
}

test_a_quota_smaller_than_the_largest_node_still_binds_first if {
	pools := {"gpu_pools": {"h100": {"gpus": 64, "nodes": 2, "largestNode": 32}}}
	[v.message | some v in gpu_violations with input as _big_pod_input(pools) with data.inventory as _inventory] == [
		concat("", [
			`[gpu-quota] Pod "big" asks 32 nvidia.com/gpu (h100); tenant "vision" uses 0 of 24 GPUs (h100: 0 of 16). `,
			`Fix: ask at most 16 h100 GPUs per pod (the request alone exceeds the limit, so waiting cannot help), or `,
			`ask the infra team to raise spec.gpu.models[h100] of Tenant "vision"`,
		]),
	]
}

test_nodes_of_another_model_say_nothing_of_this_one if {
	pools := {"gpu_pools": {"a100": {"gpus": 8, "nodes": 2, "largestNode": 4}}}
	[v.message | some v in gpu_violations with input as _big_pod_input(pools) with data.inventory as _inventory] == [
		concat("", [
			`[gpu-quota] Pod "big" asks 32 nvidia.com/gpu (h100); tenant "vision" uses 0 of 24 GPUs (h100: 0 of 16). `,
			`Fix: ask at most 16 h100 GPUs per pod (the request alone exceeds the limit, so waiting cannot help), or `,
			`ask the infra team to raise spec.gpu.models[h100] of Tenant "vision"`,
		]),
	]
}

# A pod that waits for its turn: the node binds as soon as the pod is larger than it.
test_a_pod_over_the_free_quota_and_larger_than_any_node_is_told_the_node_not_to_wait if {
	input_doc := object.union(
		pod_input(
			"vision",
			testdata.vera,
			gpu_pod("train-16", "h100", {"nvidia.com/gpu": "16"}),
			{"total": 8, "by_model": {"h100": 8}},
		),
		{"gpu_pools": {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}},
	)
	[v.message | some v in gpu_violations with input as input_doc with data.inventory as _inventory] == [
		concat("", [
			`[gpu-quota-node] Pod "train-16" asks 16 nvidia.com/gpu (h100); the largest node of your pools has 8 h100 `,
			`GPUs, so no node can ever hold it. Fix: ask at most 8 h100 GPUs per pod (more pods for more GPUs), or ask `,
			`the infra team for larger h100 nodes in your pools`,
		]),
		concat("", [
			`[gpu-quota] Pod "train-16" asks 16 nvidia.com/gpu (h100); tenant "vision" uses 8 of 16 h100 GPUs. Fix: `,
			`ask at most 8 h100 GPUs per pod: the largest node of your pools has 8 (a larger pod is never scheduled, `,
			`so waiting cannot help)`,
		]),
	]
}

# The legitimate pod: one node's worth is admitted; within the quota, only a pod larger than every
# node of its pools is refused, by gpu-quota-node (node_fit_test.rego).
test_a_pod_that_fits_a_node_and_the_quota_is_admitted if {
	input_doc := object.union(
		pod_input("vision", testdata.vera, gpu_pod("train-8", "h100", {"nvidia.com/gpu": "8"}), {"total": 0, "by_model": {}}),
		{"gpu_pools": {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}},
	)
	count(gpu_violations) == 0 with input as input_doc with data.inventory as _inventory
	larger := object.union(input_doc, {"gpu_pools": {"h100": {"gpus": 4, "nodes": 1, "largestNode": 4}}})
	{v.rule | some v in gpu_violations with input as larger with data.inventory as _inventory} == {"gpu-quota-node"}
}

# The same for a workload refused as a whole (gpu-quota-unfit): pods larger than any node are told
# the node first, with how many of that size fit at once.
_pools_of_8 := {"gpu_pools": {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}}

_sweep(parallelism, gpus) := testdata.job("sweep", parallelism, {}, {
	"nodeSelector": {"nvidia.com/gpu.product": "h100"},
	"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": gpus})],
})

test_a_job_of_pods_larger_than_any_node_is_told_the_node_and_how_many_fit if {
	input_doc := object.union(testdata.workload_input("Job", "vision", testdata.vera, _sweep(4, "16")), _pools_of_8)
	[v.message | some v in gpu_violations with input as input_doc with data.inventory as _inventory] == [
		concat("", [
			`[gpu-quota-unfit] Job "sweep" runs 4 pods × 16 h100 GPUs = 64; tenant "vision" has 16 h100 GPUs. Fix: ask `,
			`at most 8 h100 GPUs per pod: the largest node of your pools has 8 (a larger pod is never scheduled), and `,
			`run at most 2 pods at once (spec.parallelism)`,
		]),
		concat("", [
			`[gpu-quota-node] Job "sweep" spec.template.spec asks 16 nvidia.com/gpu (h100) per pod; the largest node `,
			`of your pools has 8 h100 GPUs, so no node can ever hold it. Fix: ask at most 8 h100 GPUs per pod (more `,
			`pods for more GPUs), or ask the infra team for larger h100 nodes in your pools`,
		]),
	]

	# Without the nodes, as before.
	without := testdata.workload_input("Job", "vision", testdata.vera, _sweep(4, "16"))
	[v.message | some v in gpu_violations with input as without with data.inventory as _inventory] == [
		concat("", [
			`[gpu-quota-unfit] Job "sweep" runs 4 pods × 16 h100 GPUs = 64; tenant "vision" has 16 h100 GPUs. Fix: run `,
			`at most 1 pod at once (spec.parallelism) or ask fewer GPUs per pod, or ask the infra team to raise `,
			`spec.gpu.models[h100] of Tenant "vision"`,
		]),
	]
}

test_a_gang_of_pods_larger_than_any_node_is_told_the_node if {
	large := json.patch(_inventory, [
		{"op": "replace", "path": "/tenants/vision/spec/gpu/total", "value": 64},
		{"op": "replace", "path": "/tenants/vision/spec/gpu/models/h100", "value": 64},
	])
	input_doc := object.union(
		testdata.workload_input("Job", "vision", testdata.vera, _indexed_job(4, 4, "32")),
		_pools_of_8,
	)
	[v.message | some v in gpu_violations with input as input_doc with data.inventory as large] == [
		concat("", [
			`[gpu-quota-node] Job "ring" spec.template.spec asks 32 nvidia.com/gpu (h100) per pod; the largest node of `,
			`your pools has 8 h100 GPUs, so no node can ever hold it. Fix: ask at most 8 h100 GPUs per pod (more pods `,
			`for more GPUs), or ask the infra team for larger h100 nodes in your pools`,
		]),
		concat("", [
			`[gpu-quota-unfit] Job "ring" runs 4 pods × 32 h100 GPUs = 128; tenant "vision" has 64 h100 GPUs. Fix: its `,
			`4 pods start together and the largest node of your pools has 8, so ask at most 8 h100 GPUs per pod`,
		]),
	]
}

test_a_job_of_pods_that_fit_a_node_and_the_quota_is_admitted if {
	input_doc := object.union(testdata.workload_input("Job", "vision", testdata.vera, _sweep(2, "8")), _pools_of_8)
	count(gpu_violations) == 0 with input as input_doc with data.inventory as _inventory
}
