package labgate.lib.gpu_test

import data.labgate.lib.gpu
import data.labgate.lib.testdata

# --- demand ---

test_pod_without_gpus_demands_nothing if {
	gpu.demand({"containers": [testdata.main_container]}) == {"total": 0, "by_model": {}}
}

test_whole_gpus_count_limits_of_the_selected_model if {
	spec := {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [
			testdata.gpu_container("main", {"nvidia.com/gpu": "4"}),
			testdata.gpu_container("sidecar", {"nvidia.com/gpu": 2, "cpu": "2"}),
		],
	}
	gpu.demand(spec) == {"total": 6, "by_model": {"h100": 6}}
}

test_requests_count_when_there_is_no_limit if {
	container := object.union(testdata.main_container, {"resources": {"requests": {"nvidia.com/gpu": "2"}}})
	gpu.demand({"containers": [container]}) == {"total": 2, "by_model": {"unspecified": 2}}
}

test_limits_win_over_requests if {
	container := object.union(testdata.main_container, {"resources": {
		"requests": {"nvidia.com/gpu": "1"},
		"limits": {"nvidia.com/gpu": "3"},
	}})
	gpu.demand({"containers": [container]}).total == 3
}

# --- the effective request: init containers, sidecars, overhead ---

_init(name, limits) := testdata.gpu_container(name, limits)

_sidecar(name, limits) := object.union(testdata.gpu_container(name, limits), {"restartPolicy": "Always"})

test_an_init_container_asking_more_than_the_app_containers_counts if {
	spec := {
		"initContainers": [_init("warmup", {"nvidia.com/gpu": "8"})],
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
	}
	gpu.demand(spec) == {"total": 8, "by_model": {"unspecified": 8}}
}

test_init_containers_run_one_at_a_time if {
	spec := {
		"initContainers": [_init("a", {"nvidia.com/gpu": "2"}), _init("b", {"nvidia.com/gpu": "3"})],
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
	}
	gpu.demand(spec).total == 3
}

test_a_pod_with_gpus_only_in_an_init_container_asks_them if {
	spec := {"initContainers": [_init("warmup", {"nvidia.com/gpu": "2"})], "containers": [testdata.main_container]}
	gpu.demand(spec).total == 2
	gpu.describe_asks(spec) == "2 nvidia.com/gpu (model unspecified)"
}

test_native_sidecars_add_to_the_app_containers if {
	spec := {
		"initContainers": [_sidecar("proxy", {"nvidia.com/gpu": "2"})],
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
	}
	gpu.demand(spec).total == 3
}

test_plain_init_containers_run_beside_the_sidecars_started_before_them if {
	spec := {
		"initContainers": [
			_sidecar("proxy", {"nvidia.com/gpu": "2"}),
			_init("warmup", {"nvidia.com/gpu": "4"}),
			_sidecar("late", {"nvidia.com/gpu": "1"}),
		],
		"containers": [testdata.main_container],
	}

	# warmup runs with proxy (2 + 4); afterwards proxy, late and main run (2 + 1 + 0).
	gpu.demand(spec).total == 6
}

test_pod_overhead_adds_to_the_request if {
	spec := {
		"overhead": {"nvidia.com/gpu": "1"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "2"})],
	}
	gpu.demand(spec).total == 3
}

test_requests_count_in_init_containers_too if {
	container := object.union(testdata.main_container, {"resources": {"requests": {"nvidia.com/gpu": "5"}}})
	gpu.demand({"initContainers": [container], "containers": [testdata.main_container]}).total == 5
}

# --- every GPU resource of the config ---

test_other_vendors_whole_gpus_count_as_the_selected_model if {
	spec := {
		"nodeSelector": {"nvidia.com/gpu.product": "mi300x"},
		"containers": [testdata.gpu_container("main", {"amd.com/gpu": "2", "gpu.intel.com/millicores": "500"})],
		"initContainers": [_sidecar("share", {"nvidia.com/gpu.shared": "1"})],
	}
	gpu.demand(spec) == {"total": 3, "by_model": {"mi300x": 3}}
	gpu.describe_asks(spec) == "2 amd.com/gpu (mi300x), 1 nvidia.com/gpu.shared (mi300x)"
}

test_weights_scale_the_total_not_the_model if {
	spec := {"containers": [testdata.gpu_container("main", {"nvidia.com/mig-7g.80gb": "2", "nvidia.com/mig-1g.10gb": "3"})]}
	d := gpu.demand(spec) with data.labgate.config.gpu_resource_weights as {"nvidia.com/mig-7g.80gb": 4, "nvidia.com/mig-": 0}
	d == {"total": 8, "by_model": {"mig-7g.80gb": 2, "mig-1g.10gb": 3}}
}

test_unknown_resources_of_gpu_vendors_are_found if {
	spec := {
		"initContainers": [_init("i", {"nvidia.com/gpu.fake": "1"})],
		"containers": [testdata.gpu_container("main", {
			"gpu.intel.com/tiles": "1",
			"cpu": "1",
			"example.com/fpga": "1",
			"sub.amd.com/gpu": 2,
		})],
		"overhead": {"amd.com/xgmi": "1"},
	}
	{u | some u in gpu.unknown_resources(spec)} == {
		{"field": "initContainers[0].resources", "resource": "nvidia.com/gpu.fake", "count": 1},
		{"field": "containers[0].resources", "resource": "sub.amd.com/gpu", "count": 2},
		{"field": "overhead", "resource": "amd.com/xgmi", "count": 1},
	}
}

# --- Dynamic Resource Allocation ---

claim_spec(requests) := {"devices": {"requests": requests}}

exactly(name, class, n) := {"name": name, "exactly": {"deviceClassName": class, "count": n}}

_claims := {
	"ResourceClaimTemplate/two-gpus": {"found": true, "spec": claim_spec([exactly("g", "gpu.nvidia.com", 2)])},
	"ResourceClaim/shared": {"found": true, "spec": claim_spec([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}])},
	"ResourceClaim/everything": {"found": true, "spec": claim_spec([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}])},
	"ResourceClaim/nic": {"found": true, "spec": claim_spec([exactly("n", "rdma.example.com", 1)])},
	"ResourceClaim/missing": {"found": false, "reason": "it does not exist in namespace \"vision\""},
}

_claim_pod(refs) := {
	"nodeSelector": {"nvidia.com/gpu.product": "h100"},
	"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
	"resourceClaims": refs,
}

test_gpus_claimed_through_dra_count if {
	spec := _claim_pod([
		{"name": "a", "resourceClaimTemplateName": "two-gpus"},
		{"name": "b", "resourceClaimName": "shared"},
	])
	gpu.demand(spec) == {"total": 4, "by_model": {"h100": 4}} with input.resource_claims as _claims
	gpu.describe_asks(spec) == "3 DRA gpu.nvidia.com (h100), 1 nvidia.com/gpu (h100)" with input.resource_claims as _claims
	gpu.claim_problems(spec) == [] with input.resource_claims as _claims
}

test_a_mapped_device_class_names_its_model if {
	spec := _claim_pod([{"name": "a", "resourceClaimTemplateName": "two-gpus"}])
	d := gpu.demand(spec) with input.resource_claims as _claims
		with data.labgate.config.dra_device_classes as {"gpu.nvidia.com": {"model": "a100", "weight": 2}}
	d == {"total": 5, "by_model": {"h100": 1, "a100": 2}}
}

test_claims_that_cannot_be_counted_are_problems if {
	spec := _claim_pod([
		{"name": "a", "resourceClaimName": "everything"},
		{"name": "b", "resourceClaimName": "nic"},
		{"name": "c", "resourceClaimName": "missing"},
		{"name": "d", "resourceClaimTemplateName": "not-gathered"},
	])
	gpu.claim_problems(spec) == [
		{"field": "resourceClaims[0]", "text": `names ResourceClaim "everything", whose spec.devices.requests[0] asks every device of class "gpu.nvidia.com" (allocationMode All), a number labgate cannot count`},
		{"field": "resourceClaims[1]", "text": `names ResourceClaim "nic", whose spec.devices.requests[0] asks device class "rdma.example.com", which labgate neither counts as GPUs nor allows`},
		{"field": "resourceClaims[2]", "text": `names ResourceClaim "missing", which labgate could not read (it does not exist in namespace "vision")`},
		{"field": "resourceClaims[3]", "text": `names ResourceClaimTemplate "not-gathered", which labgate could not read (not gathered)`},
	] with input.resource_claims as _claims
	gpu.demand(spec) == {"total": 1, "by_model": {"h100": 1}} with input.resource_claims as _claims
}

test_allowed_other_device_classes_are_free if {
	spec := _claim_pod([{"name": "b", "resourceClaimName": "nic"}])
	gpu.claim_problems(spec) == [] with input.resource_claims as _claims
		with data.labgate.config.dra_other_device_classes as ["rdma.example.com"]
}

test_first_available_counts_the_largest_alternative_of_one_model if {
	request := {"name": "g", "firstAvailable": [
		{"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
		{"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 2},
	]}
	claims := {"ResourceClaim/fa": {"found": true, "spec": claim_spec([request])}}
	spec := _claim_pod([{"name": "a", "resourceClaimName": "fa"}])
	gpu.demand(spec).total == 5 with input.resource_claims as claims
}

test_first_available_of_different_models_is_a_problem if {
	request := {"name": "g", "firstAvailable": [
		{"name": "h", "deviceClassName": "gpu.nvidia.com", "count": 1},
		{"name": "a", "deviceClassName": "a100.nvidia.com", "count": 1},
	]}
	problem := gpu.request_problem({"field": "x", "alternatives": gpu.device_requests(claim_spec([request]))[0].alternatives}) with data.labgate.config.dra_device_classes as {
		"gpu.nvidia.com": {"model": ""},
		"a100.nvidia.com": {"model": "a100"},
	}
	problem == "offers alternatives (firstAvailable) of different GPU models, which labgate cannot count before the scheduler picks one"
}

test_mig_slices_are_their_own_models if {
	spec := {
		"nodeSelector": {"nvidia.com/gpu.product": "a100"},
		"containers": [testdata.gpu_container("main", {
			"nvidia.com/gpu": "1",
			"nvidia.com/mig-1g.10gb": "2",
			"nvidia.com/mig-3g.40gb": "1",
		})],
	}
	gpu.demand(spec) == {"total": 4, "by_model": {"a100": 1, "mig-1g.10gb": 2, "mig-3g.40gb": 1}}
	gpu.describe_asks(spec) == "1 nvidia.com/gpu (a100), 2 nvidia.com/mig-1g.10gb, 1 nvidia.com/mig-3g.40gb"
}

test_asks_name_the_model_or_its_absence if {
	spec := {"containers": [
		testdata.gpu_container("a", {"nvidia.com/gpu": "2"}),
		testdata.gpu_container("b", {"nvidia.com/gpu": "6"}),
	]}
	gpu.describe_asks(spec) == "8 nvidia.com/gpu (model unspecified)"
}

test_mig_models_are_recognised if {
	gpu.is_mig_model("mig-1g.10gb")
	not gpu.is_mig_model("h100")
	gpu.mig_model("nvidia.com/mig-2g.20gb") == "mig-2g.20gb"
}

# --- node pools ---

test_default_pool_is_the_first_spot_pool if {
	gpu.default_pool(testdata.vision, {"path": "spec", "spec": {}, "metadata": {}}).name == "h100-spot"
}

test_on_demand_pool_only_where_allowed if {
	on_demand := {"path": "spec", "spec": {}, "metadata": {"annotations": {"labgate.io/capacity": "on-demand"}}}
	gpu.default_pool(testdata.speech, on_demand).name == "a100-ondemand"
	gpu.default_pool(testdata.vision, on_demand).name == "h100-spot"
}

test_pool_label_values_include_names_and_selectors if {
	gpu.pool_label_values(testdata.speech) == {"a100-ondemand", "a100-spot"}
}

test_pool_taint_keys_come_from_every_tenant if {
	gpu.pool_taint_keys == {"labgate.io/pool", "labgate.io/spot"} with data.inventory as testdata.gpu_inventory
}

test_a_narrower_toleration_is_covered if {
	gpu.covered_by(
		{"key": "labgate.io/pool", "operator": "Equal", "value": "vision", "effect": "NoSchedule"},
		{"key": "labgate.io/pool", "operator": "Exists"},
	)
	gpu.covered_by(testdata.pool_toleration("vision"), testdata.pool_toleration("vision"))
}

test_a_wider_toleration_is_not_covered if {
	not gpu.covered_by({"key": "labgate.io/pool", "operator": "Exists", "effect": "NoSchedule"}, testdata.pool_toleration("vision"))
	not gpu.covered_by({"key": "labgate.io/pool", "operator": "Equal", "value": "vision"}, testdata.pool_toleration("vision"))
	not gpu.covered_by(testdata.pool_toleration("speech"), testdata.pool_toleration("vision"))
}

test_metadata_field_sits_beside_the_spec if {
	gpu.metadata_field({"path": "spec"}) == "metadata"
	gpu.metadata_field({"path": "spec.jobTemplate.spec.template.spec"}) == "spec.jobTemplate.spec.template.metadata"
}

# --- which templates the rules check ---

test_pods_are_checked_on_create_whoever_creates_them if {
	pod := testdata.pod("train-1", {"containers": [testdata.main_container]})
	count(gpu.checked_templates) == 1 with input as testdata.workload_input("Pod", "vision", testdata.job_controller, pod)
}

test_workloads_written_by_controllers_are_not_checked_again if {
	job := testdata.job("sweep", 2, {}, {"containers": [testdata.main_container]})
	count(gpu.checked_templates) == 1 with input as testdata.workload_input("Job", "vision", testdata.vera, job)
	count(gpu.checked_templates) == 0 with input as testdata.workload_input("Job", "vision", testdata.job_controller, job)
}
