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
			"tolerations": [
				testdata.pool_toleration("vision"), testdata.spot_toleration, {"key": "nvidia.com/gpu", "operator": "Exists"},
			],
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
		"message": concat("", [
			`[placement-pool] Pod "train-1" spec.nodeSelector asks labgate.io/node-pool="a100-ondemand", which is not `,
			`a node pool of tenant "vision" (its pools: "h100-reserved", "h100-spot"). Fix: select one of those pools, `,
			`or remove the selector and labgate places the pod`,
		]),
	}}
}

test_toleration_of_another_tenants_pool_is_refused if {
	pod := gpu_pod("1", {"tolerations": [testdata.spot_toleration, testdata.pool_toleration("speech")]}, {})
	violations("vision", testdata.vera, pod) == {{
		"rule": "placement-pool",
		"field": "spec.tolerations[1]",
		"message": concat("", [
			`[placement-pool] Pod "train-1" spec.tolerations[1] tolerates taint "labgate.io/pool=speech:NoSchedule", `,
			`which keeps node pools for their tenants, and no pool of tenant "vision" carries that toleration. Fix: `,
			`remove it; labgate adds the tolerations of your tenant's pools itself`,
		]),
	}}
}

# Regression (issue 22): the toleration forms that reach every pool are named, with the fix.
test_toleration_of_a_pool_taint_key_with_exists_is_refused if {
	pod := gpu_pod("1", {"tolerations": [{"key": "labgate.io/pool", "operator": "Exists"}]}, {})
	[v.message | some v in violations("vision", testdata.vera, pod)] == [
		concat("", [
			`[placement-pool] Pod "train-1" spec.tolerations[0] tolerates taint "labgate.io/pool" with operator: `,
			`Exists, whatever its value: every tenant's pool that taint keeps, and no pool of tenant "vision" carries `,
			`that toleration. Fix: remove it; labgate adds the tolerations of your tenant's pools itself`,
		]),
	]
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
		"message": concat("", [
			`[placement-pool] Job "sweep" spec.template.spec.tolerations[0] is operator: Exists without a key: it `,
			`tolerates every taint, the ones that keep node pools for their tenants too. Fix: remove it, or give it `,
			`the key of the one taint it is for; labgate adds the tolerations of your tenant's pools itself`,
		]),
	}}
}

# --- every pod, GPU or not, of every tenant (issue 19) ---

cpu_pod(extra) := testdata.pod("etl", object.union({"containers": [testdata.main_container]}, extra))

test_a_cpu_pod_tolerating_another_tenants_pool_is_refused if {
	pod := cpu_pod({"tolerations": [testdata.pool_toleration("speech")]})
	violations("vision", testdata.vera, pod) == {{
		"rule": "placement-pool",
		"field": "spec.tolerations[0]",
		"message": concat("", [
			`[placement-pool] Pod "etl" spec.tolerations[0] tolerates taint "labgate.io/pool=speech:NoSchedule", which `,
			`keeps node pools for their tenants, and no pool of tenant "vision" carries that toleration. Fix: remove `,
			`it; labgate adds the tolerations of your tenant's pools itself`,
		]),
	}}
}

test_a_cpu_pod_selecting_another_tenants_pool_is_refused if {
	pod := cpu_pod({"nodeSelector": {"labgate.io/node-pool": "a100-ondemand"}})
	violations("vision", testdata.vera, pod) == {{
		"rule": "placement-pool",
		"field": "spec.nodeSelector",
		"message": concat("", [
			`[placement-pool] Pod "etl" spec.nodeSelector asks labgate.io/node-pool="a100-ondemand", a node pool of `,
			`tenant "speech": node pools belong to their tenants, whatever a pod asks. Fix: remove the selector, or `,
			`select one of tenant "vision"'s pools ("h100-reserved", "h100-spot")`,
		]),
	}}
}

test_a_tenant_without_pools_may_not_enter_another_tenants_pool if {
	foreign := {
		"nodeSelector": {"labgate.io/node-pool": "h100-spot"},
		"tolerations": [testdata.pool_toleration("vision"), testdata.spot_toleration],
	}
	violations("team-a", testdata.alice, gpu_pod("1", foreign, {})) == {
		{
			"rule": "placement-pool",
			"field": "spec.nodeSelector",
			"message": concat("", [
				`[placement-pool] Pod "train-1" spec.nodeSelector asks labgate.io/node-pool="h100-spot", a node pool of `,
				`tenant "vision": node pools belong to their tenants, whatever a pod asks. Fix: remove the selector `,
				`(tenant "team-a" has no node pools of its own; its pods run on shared nodes)`,
			]),
		},
		{
			"rule": "placement-pool",
			"field": "spec.tolerations[0]",
			"message": concat("", [
				`[placement-pool] Pod "train-1" spec.tolerations[0] tolerates taint "labgate.io/pool=vision:NoSchedule", `,
				`which keeps node pools for their tenants, and no pool of tenant "team-a" carries that toleration. Fix: `,
				`remove it; labgate adds the tolerations of your tenant's pools itself`,
			]),
		},
		{
			"rule": "placement-pool",
			"field": "spec.tolerations[1]",
			"message": concat("", [
				`[placement-pool] Pod "train-1" spec.tolerations[1] tolerates taint "labgate.io/spot" with operator: `,
				`Exists, whatever its value: every tenant's pool that taint keeps, and no pool of tenant "team-a" carries `,
				`that toleration. Fix: remove it; labgate adds the tolerations of your tenant's pools itself`,
			]),
		},
	}
	[v.field | some v in violations("team-a", testdata.alice, cpu_pod({"tolerations": [{"operator": "Exists"}]}))] == [
		"spec.tolerations[0]",
	]
}

test_own_pools_shared_nodes_and_other_taints_are_allowed_for_every_pod if {
	# A CPU pod on its own pool with the pool's tolerations, or on a pool no tenant keeps.
	count(violations("vision", testdata.vera, cpu_pod({
		"nodeSelector": {"labgate.io/node-pool": "h100-reserved"},
		"tolerations": [testdata.pool_toleration("vision")],
	}))) == 0
	count(violations("vision", testdata.vera, cpu_pod({"nodeSelector": {"labgate.io/node-pool": "cpu-shared"}}))) == 0
	count(violations("team-a", testdata.alice, cpu_pod({"nodeSelector": {"labgate.io/node-pool": "cpu-shared"}}))) == 0

	# Taints that keep no pool, and a CPU pod that chooses nothing.
	maintenance := {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}
	count(violations("team-a", testdata.alice, cpu_pod({"tolerations": [maintenance]}))) == 0
	count(violations("vision", testdata.vera, cpu_pod({}))) == 0
}

test_namespaces_of_no_tenant_are_not_restricted if {
	foreign := {
		"nodeSelector": {"labgate.io/node-pool": "a100-ondemand"},
		"tolerations": [testdata.pool_toleration("speech"), {"operator": "Exists"}],
	}
	count(violations("default", testdata.alice, gpu_pod("1", foreign, {}))) == 0
	count(violations("default", testdata.alice, cpu_pod(foreign))) == 0
}

test_a_cpu_pods_toleration_added_while_it_runs_is_refused if {
	old := cpu_pod({})
	new := json.patch(old, [{"op": "add", "path": "/spec/tolerations", "value": [{"operator": "Exists"}]}])
	request := testdata.request("UPDATE", "Pod", "vision", testdata.vera, new, old)
	v := placement.violation with input as {"request": request, "pod_templates": testdata.pod_templates("Pod", new)}
		with data.inventory as testdata.gpu_inventory
	{x.field | some x in v} == {"spec.tolerations[0]"}
}

# --- the GPU model of the pool (issue 22) ---

test_a_pod_selecting_its_pool_without_its_model_is_refused if {
	pod := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "a100", "labgate.io/node-pool": "h100-spot"}}, {})
	violations("vision", testdata.vera, pod) == {{
		"rule": "placement-pool",
		"field": "spec.nodeSelector",
		"message": concat("", [
			`[placement-pool] Pod "train-1" spec.nodeSelector asks labgate.io/node-pool="h100-spot" for GPU model `,
			`"a100", which that pool does not have; tenant "vision"'s pools: "h100-reserved" (on-demand: h100), `,
			`"h100-spot" (spot: h100). Fix: select a pool with "a100", or remove the selector and labgate places the `,
			`pod on one`,
		]),
	}}
}

# A pool whose nodeSelector does not give labgate.io/node-pool (or that has none) is selected by its
# name: its model is checked all the same, and another tenant's pool named so is still refused.
test_a_pool_selected_by_its_name_alone_has_its_model_checked if {
	name_only := json.patch(testdata.gpu_inventory, [
		{"op": "remove", "path": "/tenants/vision/spec/placement/nodePools/1/nodeSelector"},
		{"op": "add", "path": "/tenants/speech/spec/placement/nodePools/1/models", "value": ["a100"]},
	])
	a100 := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "a100", "labgate.io/node-pool": "h100-spot"}}, {})
	{[x.rule, x.field] | some x in placement.violation} == {["placement-pool", "spec.nodeSelector"]}
		with input as testdata.workload_input("Pod", "vision", testdata.vera, a100)
		with data.inventory as name_only
	h100 := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "h100", "labgate.io/node-pool": "h100-spot"}}, {})
	count(placement.violation) == 0 with input as testdata.workload_input("Pod", "vision", testdata.vera, h100)
		with data.inventory as name_only
	on_a100_spot := {"nodeSelector": {"nvidia.com/gpu.product": "h100", "labgate.io/node-pool": "a100-spot"}}
	on_speech := gpu_pod("1", on_a100_spot, {})
	[x.message | some x in placement.violation] == [concat("", [
		`[placement-pool] Pod "train-1" spec.nodeSelector asks labgate.io/node-pool="a100-spot" for GPU model `,
		`"h100", which that pool does not have; tenant "speech"'s pools: "a100-ondemand" (on-demand: a100), `,
		`"a100-spot" (spot: a100). Fix: select a pool with "h100", or remove the selector and labgate places the `,
		`pod on one`,
	])] with input as testdata.workload_input("Pod", "speech", testdata.sam, on_speech)
		with data.inventory as name_only
	foreign := {x.rule | some x in placement.violation}
		with input as testdata.workload_input("Pod", "vision", testdata.vera, on_speech)
		with data.inventory as name_only
	foreign == {"placement-pool"}
}

test_a_pod_whose_model_no_pool_has_is_refused if {
	pod := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "a100"}}, {})
	violations("vision", testdata.vera, pod) == {{
		"rule": "placement-pool",
		"field": "spec.nodeSelector",
		"message": concat("", [
			`[placement-pool] Pod "train-1" spec.nodeSelector asks GPU model "a100", and no node pool of tenant `,
			`"vision" that labgate may place it on has it; its pools: "h100-reserved" (on-demand: h100), "h100-spot" `,
			`(spot: h100). Fix: ask a model one of those pools has (labgate places a pod on spot pools, on on-demand `,
			`ones when it asks labgate.io/capacity=on-demand and the Tenant allows it), or ask the infra team for a `,
			`pool with "a100"`,
		]),
	}}
}

# speech: a100-ondemand has a100; a100-spot names no model (any may go there).
test_a_pool_that_names_no_model_takes_any if {
	pod := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "h100"}}, {})
	count(violations("speech", testdata.sam, pod)) == 0
	on_pool := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "h100", "labgate.io/node-pool": "a100-spot"}}, {})
	count(violations("speech", testdata.sam, on_pool)) == 0
}

test_an_on_demand_pod_is_refused_where_no_on_demand_pool_has_its_model if {
	only_a100 := json.patch(
		testdata.gpu_inventory,
		[{"op": "add", "path": "/tenants/speech/spec/placement/nodePools/1/models", "value": ["a100"]}],
	)
	pod := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "h100"}}, {"labgate.io/capacity": "on-demand"})
	v := placement.violation with input as testdata.workload_input("Pod", "speech", testdata.sam, pod)
		with data.inventory as only_a100
	[x.message | some x in v] == [
		concat("", [
			`[placement-pool] Pod "train-1" spec.nodeSelector asks GPU model "h100", and no node pool of tenant `,
			`"speech" that labgate may place it on has it; its pools: "a100-ondemand" (on-demand: a100), "a100-spot" `,
			`(spot: a100). Fix: ask a model one of those pools has (labgate places a pod on spot pools, on on-demand `,
			`ones when it asks labgate.io/capacity=on-demand and the Tenant allows it), or ask the infra team for a `,
			`pool with "h100"`,
		]),
	]
	a100 := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "a100"}}, {"labgate.io/capacity": "on-demand"})
	count(placement.violation) == 0 with input as testdata.workload_input("Pod", "speech", testdata.sam, a100)
		with data.inventory as only_a100
}

test_a_pod_on_its_pool_with_its_model_is_allowed if {
	count(violations(
		"vision",
		testdata.vera,
		gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "h100", "labgate.io/node-pool": "h100-reserved"}}, {}),
	)) == 0
	count(violations("vision", testdata.vera, gpu_pod("1", {}, {}))) == 0
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
		"message": concat("", [
			`[placement-on-demand] Pod "train-1" metadata.annotations asks labgate.io/capacity="on-demand", but tenant `,
			`"vision" runs GPU pods on spot capacity only (spec.placement.allowOnDemand is not true). Fix: remove the `,
			`annotation (labgate places the pod on spot pool "h100-spot"), or ask the infra team to allow on-demand `,
			`capacity for Tenant "vision"`,
		]),
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

# Regression: the opt-out written on the Job's own metadata (not its template's) was ignored.
test_on_demand_on_a_jobs_own_metadata_is_refused_where_not_allowed if {
	job := json.patch(
		testdata.job("sweep", 1, {}, {
			"nodeSelector": {"nvidia.com/gpu.product": "h100"},
			"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
		}),
		[{"op": "add", "path": "/metadata/annotations", "value": {"labgate.io/capacity": "on-demand"}}],
	)
	v := placement.violation with input as testdata.workload_input("Job", "vision", testdata.vera, job)
		with data.inventory as testdata.gpu_inventory
	[[x.rule, x.field] | some x in v] == [["placement-on-demand", "metadata.annotations"]]
}

# --- a running pod changed by people ---

test_toleration_added_to_a_running_pod_is_refused if {
	old := gpu_pod("1", {"nodeSelector": {"nvidia.com/gpu.product": "h100", "labgate.io/node-pool": "h100-spot"}}, {})
	new := json.patch(old, [{"op": "add", "path": "/spec/tolerations", "value": [testdata.pool_toleration("speech")]}])
	request := testdata.request("UPDATE", "Pod", "vision", testdata.vera, new, old)
	violations := placement.violation
		with input as {"request": request, "pod_templates": testdata.pod_templates("Pod", new)}
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

# --- GPUs from any container: init containers, sidecars, claims ---

_gpus_elsewhere(selector) := testdata.pod("train-1", {
	"nodeSelector": object.union({"nvidia.com/gpu.product": "h100"}, selector),
	"containers": [testdata.main_container],
	"initContainers": [
		object.union(testdata.gpu_container("proxy", {"nvidia.com/gpu": "1"}), {"restartPolicy": "Always"}),
	],
})

test_a_pod_with_gpus_in_a_sidecar_only_is_placed_like_any_gpu_pod if {
	violations("vision", testdata.vera, _gpus_elsewhere({"labgate.io/node-pool": "a100-ondemand"})) == {{
		"rule": "placement-pool",
		"field": "spec.nodeSelector",
		"message": concat("", [
			`[placement-pool] Pod "train-1" spec.nodeSelector asks labgate.io/node-pool="a100-ondemand", which is not `,
			`a node pool of tenant "vision" (its pools: "h100-reserved", "h100-spot"). Fix: select one of those pools, `,
			`or remove the selector and labgate places the pod`,
		]),
	}}
	count(violations("vision", testdata.vera, _gpus_elsewhere({"labgate.io/node-pool": "h100-spot"}))) == 0
}

test_a_pod_with_gpus_through_a_claim_only_is_placed_like_any_gpu_pod if {
	pod := testdata.pod("train-1", {
		"nodeSelector": {"labgate.io/node-pool": "a100-ondemand"},
		"containers": [testdata.main_container],
		"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "one"}],
	})
	claims := {
		"ResourceClaimTemplate/one": {
			"found": true, "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
		},
	}
	v := placement.violation
		with input as object.union(testdata.workload_input("Pod", "vision", testdata.vera, pod), {"resource_claims": claims})
		with data.inventory as testdata.gpu_inventory
	[x.rule | some x in v] == ["placement-pool"]
}

# --- workloads changed by people, and by the platform ---

test_a_deployment_update_that_tolerates_another_pool_is_refused if {
	old := testdata.deployment("serve", {}, {"containers": [testdata.main_container]})
	new := testdata.deployment(
		"serve",
		{},
		{"containers": [testdata.main_container], "tolerations": [testdata.pool_toleration("speech")]},
	)
	request := testdata.request(
		"UPDATE",
		"Deployment",
		"vision",
		{"username": "vic", "groups": ["system:authenticated"]},
		new,
		old,
	)
	v := placement.violation with input as {"request": request, "pod_templates": testdata.pod_templates("Deployment", new)}
		with data.inventory as testdata.gpu_inventory
	[x.message | some x in v] == [
		concat("", [
			`[placement-pool] Deployment "serve" spec.template.spec.tolerations[0] tolerates taint `,
			`"labgate.io/pool=speech:NoSchedule", which keeps node pools for their tenants, and no pool of tenant `,
			`"vision" carries that toleration. Fix: remove it; labgate adds the tolerations of your tenant's pools `,
			`itself`,
		]),
	]
	count(placement.violation) == 0
		with input as {"request": request, "pod_templates": testdata.pod_templates("Deployment", old)}
		with data.inventory as testdata.gpu_inventory
}

# A controller creating a tenant's pod from its template acts for the tenant.
test_a_pod_the_job_controller_creates_is_judged if {
	pod := cpu_pod({"tolerations": [{"operator": "Exists"}]})
	[v.field | some v in violations("vision", testdata.job_controller, pod)] == ["spec.tolerations[0]"]
	count(violations("vision", testdata.job_controller, cpu_pod({}))) == 0
}
