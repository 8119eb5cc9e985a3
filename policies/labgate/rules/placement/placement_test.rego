package labgate.rules.placement_test

import data.labgate.lib.testdata
import data.labgate.rules.placement

# A Pod asking one h100 (or `gpus` of them), with extra spec fields and annotations.
gpu_pod(gpus, extra, annotations) := object.union(
	testdata.pod("train-1", object.union(
		{
			"nodeSelector": {"nvidia.com/gpu.product": "h100"},
			"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": gpus})],
		},
		extra,
	)),
	{"metadata": {"annotations": annotations}},
)

violations(namespace, user, pod) := v if {
	v := placement.violation with input as testdata.workload_input("Pod", namespace, user, pod)
		with data.inventory as testdata.gpu_inventory
}

# --- placement-pool ---

test_pod_on_its_tenants_pool_with_its_tolerations_is_allowed if {
	pod := gpu_pod(
		"1", {
			"nodeSelector": {"nvidia.com/gpu.product": "h100", "labgate.io/node-pool": "h100-spot"},
			"tolerations": [testdata.pool_toleration("vision"), testdata.spot_toleration, {"key": "nvidia.com/gpu", "operator": "Exists"}],
		},
		{},
	)
	count(violations("vision", testdata.vera, pod)) == 0
}

test_pool_named_by_its_selector_value_is_allowed if {
	inventory := json.patch(testdata.gpu_inventory, [{
		"op": "replace",
		"path": "/tenants/vision/spec/placement/nodePools/1/nodeSelector",
		"value": {"labgate.io/node-pool": "gpu-spot-1"},
	}])
	pod := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "h100", "labgate.io/node-pool": "gpu-spot-1"}}, {})
	count(placement.violation) == 0 with input as testdata.workload_input("Pod", "vision", testdata.vera, pod)
		with data.inventory as inventory
}

test_pod_on_another_pool_is_refused if {
	pod := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "h100", "labgate.io/node-pool": "a100-ondemand"}}, {})
	violations("vision", testdata.vera, pod) == {{
		"rule": "placement-pool",
		"field": "spec.nodeSelector",
		"message": `[placement-pool] Pod "train-1" spec.nodeSelector asks labgate.io/node-pool="a100-ondemand", which is not a node pool of tenant "vision" (its pools: "h100-reserved", "h100-spot"). Fix: select one of those pools, or remove the selector and labgate places the pod`,
	}}
}

test_toleration_of_another_tenants_pool_is_refused if {
	pod := gpu_pod("1", {"tolerations": [testdata.spot_toleration, testdata.pool_toleration("speech")]}, {})
	violations("vision", testdata.vera, pod) == {{
		"rule": "placement-pool",
		"field": "spec.tolerations[1]",
		"message": `[placement-pool] Pod "train-1" spec.tolerations[1] tolerates taint "labgate.io/pool=speech:NoSchedule", which keeps node pools for their tenants, and no pool of tenant "vision" carries that toleration. Fix: remove it; labgate adds the tolerations of your tenant's pools itself`,
	}}
}

test_toleration_wider_than_the_pools_is_refused if {
	pod := gpu_pod("1", {"tolerations": [{"key": "labgate.io/pool", "operator": "Exists"}]}, {})
	[v.message | some v in violations("vision", testdata.vera, pod)] == [`[placement-pool] Pod "train-1" spec.tolerations[0] tolerates taint "labgate.io/pool", which keeps node pools for their tenants, and no pool of tenant "vision" carries that toleration. Fix: remove it; labgate adds the tolerations of your tenant's pools itself`]
}

test_toleration_of_every_taint_is_refused if {
	job := testdata.job("sweep", 1, {}, {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
		"tolerations": [{"operator": "Exists"}],
	})
	v := placement.violation with input as testdata.workload_input("Job", "vision", testdata.vera, job)
		with data.inventory as testdata.gpu_inventory
	v == {{
		"rule": "placement-pool",
		"field": "spec.template.spec.tolerations[0]",
		"message": `[placement-pool] Job "sweep" spec.template.spec.tolerations[0] tolerates every taint (operator Exists without a key), the ones that keep node pools for their tenants too, and no pool of tenant "vision" carries that toleration. Fix: remove it; labgate adds the tolerations of your tenant's pools itself`,
	}}
}

test_pods_without_gpus_and_tenants_without_pools_are_not_restricted if {
	foreign := {"nodeSelector": {"labgate.io/node-pool": "a100-ondemand"}, "tolerations": [testdata.pool_toleration("speech")]}
	cpu_pod := testdata.pod("etl", object.union(foreign, {"containers": [testdata.main_container]}))
	count(violations("vision", testdata.vera, cpu_pod)) == 0
	count(violations("team-a", testdata.alice, gpu_pod("1", foreign, {}))) == 0
	count(violations("default", testdata.alice, gpu_pod("1", foreign, {}))) == 0
}

# --- placement-on-demand ---

test_on_demand_where_the_tenant_allows_it_is_allowed if {
	pod := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "a100"}}, {"labgate.io/capacity": "on-demand"})
	count(violations("speech", testdata.sam, pod)) == 0
}

test_on_demand_where_the_tenant_does_not_allow_it_is_refused if {
	pod := gpu_pod("1", {}, {"labgate.io/capacity": "on-demand"})
	violations("vision", testdata.vera, pod) == {{
		"rule": "placement-on-demand",
		"field": "metadata.annotations",
		"message": `[placement-on-demand] Pod "train-1" metadata.annotations asks labgate.io/capacity="on-demand", but tenant "vision" runs GPU pods on spot capacity only (spec.placement.allowOnDemand is not true). Fix: remove the annotation (labgate places the pod on spot pool "h100-spot"), or ask the infra team to allow on-demand capacity for Tenant "vision"`,
	}}
}

test_on_demand_in_a_job_template_is_refused_when_applied if {
	job := testdata.job("sweep", 1, {"labgate.io/capacity": "on-demand"}, {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
	})
	v := placement.violation with input as testdata.workload_input("Job", "vision", testdata.vera, job)
		with data.inventory as testdata.gpu_inventory
	[[x.rule, x.field] | some x in v] == [["placement-on-demand", "spec.template.metadata.annotations"]]
}

# --- a running pod changed by people ---

test_toleration_added_to_a_running_pod_is_refused if {
	old := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "h100", "labgate.io/node-pool": "h100-spot"}}, {})
	new := json.patch(old, [{"op": "add", "path": "/spec/tolerations", "value": [testdata.pool_toleration("speech")]}])
	request := testdata.request("UPDATE", "Pod", "vision", testdata.vera, new, old)
	violations := placement.violation with input as {"request": request, "pod_templates": testdata.pod_templates("Pod", new)}
		with data.inventory as testdata.gpu_inventory
	{v.field | some v in violations} == {"spec.tolerations[0]"}
	count(placement.violation) == 0 with input as {"request": request, "pod_templates": testdata.pod_templates("Pod", old)}
		with data.inventory as testdata.gpu_inventory
}

test_the_platform_changing_a_running_pod_is_not_checked if {
	pod := gpu_pod("1", {"tolerations": [testdata.pool_toleration("speech")]}, {})
	request := testdata.request("UPDATE", "Pod", "vision", testdata.job_controller, pod, pod)
	count(placement.violation) == 0 with input as {"request": request, "pod_templates": testdata.pod_templates("Pod", pod)}
		with data.inventory as testdata.gpu_inventory
}
