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

test_init_containers_do_not_count if {
	spec := {
		"initContainers": [testdata.gpu_container("warmup", {"nvidia.com/gpu": "8"})],
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
	}
	gpu.demand(spec).total == 1
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
	[a.field | some a in gpu.asks(spec)] == ["containers[0].resources", "containers[1].resources"]
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
