package labgate.rules.placement_test

import data.labgate.lib.testdata
import data.labgate.rules.placement

# placement-pool by required node selection (nodeSelector, node affinity) into another tenant's pool
# that no taint keeps (split from placement_test.rego, whose helpers it uses: one package).

# speech's pools without taints: only a pod's own node selection keeps it off them.
untainted_inventory := json.patch(testdata.gpu_inventory, [
	{"op": "replace", "path": "/tenants/speech/spec/placement/nodePools/0/tolerations", "value": []},
	{"op": "replace", "path": "/tenants/speech/spec/placement/nodePools/1/tolerations", "value": []},
])

required(terms) := {
	"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}},
}

expression(key, operator, values) := {"key": key, "operator": operator, "values": values}

untainted_violations(operation, user, pod) := v if {
	request := testdata.workload_input("Pod", "vision", user, pod)
	v := placement.violation
		with input as json.patch(request, [{"op": "replace", "path": "/request/operation", "value": operation}])
		with data.inventory as untainted_inventory
}

_affinity_field := "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"

test_required_affinity_into_an_untainted_pool_of_another_tenant_is_refused if {
	pod := cpu_pod(required([{"matchExpressions": [expression("labgate.io/node-pool", "In", ["a100-ondemand"])]}]))
	some operation in ["CREATE", "UPDATE"]
	some user in [testdata.vera, {"username": "vic", "groups": ["system:authenticated"]}]
	found := untainted_violations(operation, user, pod)
	{v.field | some v in found} == {sprintf("%s[0]", [_affinity_field])}
	{"rule": "placement-pool", "field": sprintf("%s[0]", [_affinity_field]), "message": `[placement-pool] Pod "etl" spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0] can select nodes of node pool "a100-ondemand" of tenant "speech" (nodeSelector {"labgate.io/node-pool":"a100-ondemand"}), and no taint of that pool keeps this pod out: node pools belong to their tenants. Fix: remove the selector, or select one of tenant "vision"'s pools ("h100-reserved", "h100-spot"), or add the requirement labgate.io/node-pool NotIn ["a100-ondemand"]`} in found

	# a node may carry both labels: speech's other pool, keyed on another label, is reachable too
	count(found) == 2
}

test_one_term_of_several_reaching_the_pool_is_refused if {
	pod := cpu_pod(required([
		{"matchExpressions": [expression("labgate.io/node-pool", "In", ["h100-spot"])]},
		{"matchExpressions": [expression("cloud.example/pool", "Exists", [])]},
	]))
	fields := {v.field | some v in untainted_violations("CREATE", testdata.vera, pod)}
	fields == {sprintf("%s[1]", [_affinity_field])}
}

test_node_selector_on_an_unrelated_label_reaches_an_untainted_pool if {
	pod := cpu_pod({"nodeSelector": {"kubernetes.io/arch": "amd64"}})
	{v.field | some v in untainted_violations("CREATE", testdata.vera, pod)} == {"spec.nodeSelector"}
	{v.message | some v in untainted_violations("CREATE", testdata.vera, pod)} == {
		concat("", [
			`[placement-pool] Pod "etl" spec.nodeSelector can select nodes of node pool "a100-ondemand" of tenant `,
			`"speech" (nodeSelector {"labgate.io/node-pool":"a100-ondemand"}), and no taint of that pool keeps this `,
			`pod out: node pools belong to their tenants. Fix: remove the selector, or select one of tenant "vision"'s `,
			`pools ("h100-reserved", "h100-spot"), or add the requirement labgate.io/node-pool NotIn ["a100-ondemand"]`,
		]),
		concat("", [
			`[placement-pool] Pod "etl" spec.nodeSelector can select nodes of node pool "a100-spot" of tenant "speech" `,
			`(nodeSelector {"cloud.example/pool":"speech-a100-spot"}), and no taint of that pool keeps this pod out: `,
			`node pools belong to their tenants. Fix: remove the selector, or select one of tenant "vision"'s pools `,
			`("h100-reserved", "h100-spot"), or add the requirement cloud.example/pool NotIn ["speech-a100-spot"]`,
		]),
	}
}

test_node_selector_on_an_unrelated_label_is_allowed_where_taints_keep_pools if {
	pod := cpu_pod({"nodeSelector": {"kubernetes.io/arch": "amd64"}})
	count(violations("vision", testdata.vera, pod)) == 0
}

test_selection_of_its_own_pools_is_allowed if {
	some operation in ["CREATE", "UPDATE"]
	some user in [testdata.vera, {"username": "vic", "groups": ["system:authenticated"]}]
	some spec in [
		{"nodeSelector": {"labgate.io/node-pool": "h100-spot", "kubernetes.io/arch": "amd64"}},
		required([{"matchExpressions": [expression("labgate.io/node-pool", "In", ["h100-spot", "h100-reserved"])]}]),
		object.union(
			{"nodeSelector": {"labgate.io/node-pool": "h100-spot"}},
			required([{"matchExpressions": [expression("disktype", "In", ["ssd"])]}]),
		),
	]
	count(untainted_violations(operation, user, cpu_pod(spec))) == 0
}

test_selection_that_excludes_the_other_pools_is_allowed if {
	some spec in [
		required([{"matchExpressions": [
			expression("labgate.io/node-pool", "NotIn", ["a100-ondemand"]),
			expression("cloud.example/pool", "DoesNotExist", []),
		]}]),
		{"nodeSelector": {"labgate.io/node-pool": "shared-cpu"}},
		required([{"matchExpressions": [expression("labgate.io/node-pool", "In", ["shared-cpu"])]}, {}]),
	]
	count(untainted_violations("CREATE", testdata.vera, cpu_pod(spec))) == 0
}

test_pod_without_a_required_selection_is_left_to_taints if {
	count(untainted_violations("CREATE", testdata.vera, cpu_pod({}))) == 0
}

test_a_pool_label_of_another_tenant_is_refused_once if {
	pod := cpu_pod({"nodeSelector": {"labgate.io/node-pool": "a100-ondemand"}})
	{v.message | some v in untainted_violations("CREATE", testdata.vera, pod)} == {
		concat("", [
			`[placement-pool] Pod "etl" spec.nodeSelector asks labgate.io/node-pool="a100-ondemand", a node pool of `,
			`tenant "speech": node pools belong to their tenants, whatever a pod asks. Fix: remove the selector, or `,
			`select one of tenant "vision"'s pools ("h100-reserved", "h100-spot")`,
		]),
	}
}

test_workload_template_reaching_an_untainted_pool_is_refused if {
	job := testdata.job("prep", 1, {}, {
		"containers": [testdata.main_container],
		"affinity": required([{"matchFields": [expression("metadata.name", "In", ["node-7"])]}]).affinity,
	})
	some operation in ["CREATE", "UPDATE"]
	request := testdata.workload_input("Job", "vision", testdata.vera, job)
	found := placement.violation
		with input as json.patch(request, [{"op": "replace", "path": "/request/operation", "value": operation}])
		with data.inventory as untainted_inventory
	{v.field | some v in found} == {"spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"}
	count(found) == 2
}
