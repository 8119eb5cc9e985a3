package labgate.lib.gpu_test

import data.labgate.lib.gpu
import data.labgate.lib.gpu_text
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
	gpu_text.describe_asks(spec) == "2 nvidia.com/gpu (model unspecified)"
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
	gpu_text.describe_asks(spec) == "2 amd.com/gpu (mi300x), 1 nvidia.com/gpu.shared (mi300x)"
}

test_weights_scale_the_total_not_the_model if {
	spec := {
		"containers": [testdata.gpu_container("main", {"nvidia.com/mig-7g.80gb": "2", "nvidia.com/mig-1g.10gb": "3"})],
	}
	d := gpu.demand(spec)
		with data.labgate.config.gpu_resource_weights as {"nvidia.com/mig-7g.80gb": 4, "nvidia.com/mig-": 0}
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
	gpu_text.describe_asks(spec) == "1 nvidia.com/gpu (a100), 2 nvidia.com/mig-1g.10gb, 1 nvidia.com/mig-3g.40gb"
}

test_mig_models_are_recognised if {
	gpu.is_mig_model("mig-1g.10gb")
	not gpu.is_mig_model("h100")
	gpu.mig_model("nvidia.com/mig-2g.20gb") == "mig-2g.20gb"
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
