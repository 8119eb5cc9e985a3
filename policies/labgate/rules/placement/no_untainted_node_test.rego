package labgate.rules.placement_test

import data.labgate.lib.testdata
import data.labgate.rules.placement

# placement-no-untainted-node: said only when the Tenant's status says every node that takes pods is
# tainted, and the pod asks no GPUs and tolerates none of those taints; each paired with the pod it
# must not warn about.

_every_node_tainted := {"open_nodes": {
	"untainted": 0, "tainted": 3,
	"taint_keys": ["labgate.io/pool", "labgate.io/spot"], "more_taint_keys": 0,
}}

_an_untainted_node := {"open_nodes": object.union(_every_node_tainted.open_nodes, {"untainted": 1})}

_cpu_pod(spec, nodes) := object.union(
	testdata.workload_input("Pod", "vision", testdata.vera, testdata.pod("experiment", spec)),
	nodes,
)

_cpu_spec := {"containers": [testdata.main_container]}

# The toleration every pod gets from the apiserver (DefaultTolerationSeconds): not a taint of a pool.
_default_toleration := {
	"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300,
}

_untainted_findings(input_doc) := {v |
	some v in placement.violation with input as input_doc with data.inventory as testdata.gpu_inventory
	v.rule == "placement-no-untainted-node"
}

test_a_cpu_pod_that_no_node_takes_is_told_so if {
	spec := object.union(_cpu_spec, {"tolerations": [_default_toleration]})
	_untainted_findings(_cpu_pod(spec, _every_node_tainted)) == {{
		"rule": "placement-no-untainted-node",
		"field": "spec.tolerations",
		"if_admitted": true,
		"message": concat("", [
			`[placement-no-untainted-node] Pod "experiment" asks no GPUs, and no node takes it now: every node is `,
			`tainted (labgate.io/pool, labgate.io/spot) and it tolerates none. It pends until one does. Fix: ask the `,
			`infra team for a pool without taints for pods without GPUs (docs/infra.md, "A pool for pods without GPUs")`,
		]),
	}}
}

test_a_cpu_pod_with_an_untainted_node_is_not_told if {
	count(_untainted_findings(_cpu_pod(_cpu_spec, _an_untainted_node))) == 0
}

# A GPU pod is placed on its pools with their tolerations: other rules speak for it.
test_a_gpu_pod_is_not_told if {
	spec := {"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})]}
	count(_untainted_findings(_cpu_pod(spec, _every_node_tainted))) == 0
}

# A toleration of one of the keys may take it onto some node: not sure, so nothing is said.
test_a_cpu_pod_tolerating_one_of_the_keys_is_not_told if {
	spec := object.union(
		_cpu_spec,
		{"tolerations": [{"key": "labgate.io/spot", "operator": "Exists", "effect": "NoSchedule"}]},
	)
	count(_untainted_findings(_cpu_pod(spec, _every_node_tainted))) == 0
}

# Never said on missing or partial facts: no status yet, or keys left out of it.
test_without_the_whole_fact_nothing_is_said if {
	count(_untainted_findings(_cpu_pod(_cpu_spec, {}))) == 0
	partial := {"open_nodes": object.union(_every_node_tainted.open_nodes, {"more_taint_keys": 2})}
	count(_untainted_findings(_cpu_pod(_cpu_spec, partial))) == 0
	no_node := {"open_nodes": {"untainted": 0, "tainted": 0, "taint_keys": [], "more_taint_keys": 0}}
	count(_untainted_findings(_cpu_pod(_cpu_spec, no_node))) == 0
}

# A workload's pod template is told at apply, naming the template.
test_a_deployment_whose_pods_no_node_takes_is_told_so if {
	deployment := testdata.deployment("web", {"app": "web"}, _cpu_spec)
	input_doc := object.union(
		testdata.workload_input("Deployment", "vision", testdata.vera, deployment),
		_every_node_tainted,
	)
	[finding.message | some finding in _untainted_findings(input_doc)] == [
		concat("", [
			`[placement-no-untainted-node] Deployment "web" spec.template.spec asks no GPUs, and no node takes it now: `,
			`every node is tainted (labgate.io/pool, labgate.io/spot) and it tolerates none. It pends until one does. `,
			`Fix: ask the infra team for a pool without taints for pods without GPUs (docs/infra.md, "A pool for pods `,
			`without GPUs")`,
		]),
	]
	untainted := object.union(input_doc, _an_untainted_node)
	count(_untainted_findings(untainted)) == 0
}
