package labgate.rules.gpu_quota_test

import data.labgate.lib.testdata

# gpu-quota-node: a pod, a template or a gang that no node of the tenant's pools can ever hold is
# refused when applied, within the quota or not; each paired with what it must not refuse. Uses the
# helpers of gpu_quota_test.rego and gpu_quota_nodes_test.rego (one package).

_wide_inventory := json.patch(testdata.gpu_inventory, [
	{"op": "replace", "path": "/tenants/vision/spec/gpu/total", "value": 64},
	{"op": "replace", "path": "/tenants/vision/spec/gpu/models/h100", "value": 64},
])

_with_pools(input_doc, pools) := object.union(input_doc, {"gpu_pools": pools})

_node_messages(input_doc) := [v.message |
	some v in gpu_violations with input as input_doc with data.inventory as _wide_inventory
	v.rule == "gpu-quota-node"
]

_all_rules(input_doc) := {v.rule |
	some v in gpu_violations with input as input_doc with data.inventory as _wide_inventory
}

_pod_of(gpus) := pod_input(
	"vision",
	testdata.vera,
	gpu_pod("train", "h100", {"nvidia.com/gpu": gpus}),
	{"total": 0, "by_model": {}},
)

test_a_pod_within_its_quota_but_larger_than_every_node_of_its_pools_is_refused if {
	_node_messages(_with_pools(_pod_of("16"), _pools_of_8.gpu_pools)) == [
		concat("", [
			`[gpu-quota-node] Pod "train" asks 16 nvidia.com/gpu (h100); the largest node of your pools has 8 h100 `,
			`GPUs, so no node can ever hold it. Fix: ask at most 8 h100 GPUs per pod (more pods for more GPUs), or ask `,
			`the infra team for larger h100 nodes in your pools`,
		]),
	]
	_all_rules(_with_pools(_pod_of("16"), _pools_of_8.gpu_pools)) == {"gpu-quota-node"}
}

test_a_pod_of_one_node_is_admitted if {
	count(_all_rules(_with_pools(_pod_of("8"), _pools_of_8.gpu_pools))) == 0
}

# Never refused on missing facts: no status yet, or no node of the model in it.
test_without_the_pools_nodes_nothing_is_said if {
	count(_all_rules(_pod_of("16"))) == 0
	count(_all_rules(_with_pools(_pod_of("16"), {"a100": {"gpus": 8, "nodes": 1, "largestNode": 8}}))) == 0
}

test_a_pod_naming_no_model_is_held_to_the_largest_node_of_any_model if {
	pools := {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}, "a100": {"gpus": 4, "nodes": 1, "largestNode": 4}}
	big := pod_input("vision", testdata.vera, gpu_pod("any", "", {"nvidia.com/gpu": "12"}), {"total": 0, "by_model": {}})
	_node_messages(_with_pools(big, pools)) == [
		concat("", [
			`[gpu-quota-node] Pod "any" asks 12 nvidia.com/gpu (model unspecified); the largest node of your pools has `,
			`8 GPUs, so no node can ever hold it. Fix: ask at most 8 GPUs per pod (more pods for more GPUs), or ask `,
			`the infra team for larger GPU nodes in your pools`,
		]),
	]
	fits := pod_input("vision", testdata.vera, gpu_pod("any", "", {"nvidia.com/gpu": "8"}), {"total": 0, "by_model": {}})
	count(_node_messages(_with_pools(fits, pools))) == 0
}

test_a_deployments_template_larger_than_every_node_is_refused if {
	deployment := testdata.deployment("serve", {}, {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "16"})],
	})
	refused := _with_pools(
		testdata.workload_input("Deployment", "vision", testdata.vera, deployment),
		_pools_of_8.gpu_pools,
	)
	_node_messages(refused) == [
		concat("", [
			`[gpu-quota-node] Deployment "serve" spec.template.spec asks 16 nvidia.com/gpu (h100) per pod; the largest `,
			`node of your pools has 8 h100 GPUs, so no node can ever hold it. Fix: ask at most 8 h100 GPUs per pod `,
			`(more pods for more GPUs), or ask the infra team for larger h100 nodes in your pools`,
		]),
	]
	eight := json.patch(deployment, [{"op": "replace", "path": "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu", "value": "8"}])
	count(_node_messages(_with_pools(testdata.workload_input("Deployment", "vision", testdata.vera, eight), _pools_of_8.gpu_pools))) == 0
}

# A gang: its pods start together, so pods that each fit a node but not all at once wait for ever.
test_a_gang_beyond_what_all_the_pools_nodes_hold_is_refused if {
	refused := _with_pools(
		testdata.workload_input("Job", "vision", testdata.vera, _indexed_job(3, 3, "8")),
		_pools_of_8.gpu_pools,
	)
	_node_messages(refused) == [
		concat("", [
			`[gpu-quota-node] Job "ring" runs 3 pods × 8 h100 GPUs = 24, which start together; the nodes of your pools `,
			`hold 16 h100 GPUs (2 nodes, the largest 8), room for 2 of its pods at once, so it would wait for ever. `,
			`Fix: run at most 2 pods together (fewer replicas, or fewer GPUs per pod), or ask the infra team for more `,
			`h100 nodes in your pools`,
		]),
	]
	fits := _with_pools(
		testdata.workload_input("Job", "vision", testdata.vera, _indexed_job(2, 2, "8")),
		_pools_of_8.gpu_pools,
	)
	count(_all_rules(fits)) == 0
}

# Pods of 6 on nodes of 8 take a node each: 16 GPUs hold two such pods, not 16 / 6.
test_a_gang_is_packed_in_whole_pods_per_node if {
	refused := _with_pools(
		testdata.workload_input("Job", "vision", testdata.vera, _indexed_job(3, 3, "5")),
		_pools_of_8.gpu_pools,
	)
	_node_messages(refused) == [
		concat("", [
			`[gpu-quota-node] Job "ring" runs 3 pods × 5 h100 GPUs = 15, which start together; the nodes of your pools `,
			`hold 16 h100 GPUs (2 nodes, the largest 8), room for 2 of its pods at once, so it would wait for ever. `,
			`Fix: run at most 2 pods together (fewer replicas, or fewer GPUs per pod), or ask the infra team for more `,
			`h100 nodes in your pools`,
		]),
	]
	fits := _with_pools(
		testdata.workload_input("Job", "vision", testdata.vera, _indexed_job(4, 4, "4")),
		_pools_of_8.gpu_pools,
	)
	count(_all_rules(fits)) == 0
}

# Not a gang: its pods run as nodes free up, so more of them than the nodes hold at once is no refusal.
test_a_job_whose_pods_take_turns_on_the_nodes_is_admitted if {
	input_doc := _with_pools(
		testdata.workload_input("Job", "vision", testdata.vera, _sweep(4, "8")),
		_pools_of_8.gpu_pools,
	)
	count(_all_rules(input_doc)) == 0
}
