package labgate.rules.gpu_quota_test

import data.labgate.lib.testdata
import data.labgate.rules.gpu_quota

# What counts against the GPU quota beyond the app containers' limits: init containers, native
# sidecars, other vendors' GPUs and DRA claims (split from gpu_quota_test.rego, whose helpers it
# uses: one package).

test_gpus_in_an_init_container_count_against_the_quota if {
	pod := testdata.pod("warm", {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.main_container],
		"initContainers": [testdata.gpu_container("warmup", {"nvidia.com/gpu": "8"})],
	})
	violations(pod_input("vision", testdata.vera, pod, {"total": 4, "by_model": {"h100": 4}})) == {{
		"rule": "gpu-quota",
		"field": "spec.containers",
		"message": concat("", [
			`[gpu-quota] Pod "warm" asks 8 nvidia.com/gpu (h100); tenant "vision" uses 4 of 8 h100 GPUs. Fix: lower `,
			`the request or wait for running pods to finish`,
		]),
	}}
	small := json.patch(
		pod,
		[{"op": "replace", "path": "/spec/initContainers/0/resources/limits/nvidia.com~1gpu", "value": "4"}],
	)
	count(violations(pod_input("vision", testdata.vera, small, {"total": 4, "by_model": {"h100": 4}}))) == 0
}

test_gpus_in_a_native_sidecar_add_to_the_app_containers if {
	pod := testdata.pod("side", {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "4"})],
		"initContainers": [_sidecar({"nvidia.com/gpu": "4"})],
	})
	violations(pod_input("vision", testdata.vera, pod, {"total": 1, "by_model": {"h100": 1}})) == {{
		"rule": "gpu-quota",
		"field": "spec.containers",
		"message": concat("", [
			`[gpu-quota] Pod "side" asks 8 nvidia.com/gpu (h100); tenant "vision" uses 1 of 8 h100 GPUs. Fix: lower `,
			`the request or wait for running pods to finish`,
		]),
	}}
	d := gpu_quota.demand with input as pod_input("vision", testdata.vera, pod, {})
		with data.inventory as testdata.gpu_inventory
	d == {"total": 8, "by_model": {"h100": 8}}
}

test_a_job_whose_init_container_can_never_fit_is_refused if {
	job := testdata.job("sweep", 2, {}, {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.main_container],
		"initContainers": [testdata.gpu_container("warmup", {"nvidia.com/gpu": "8"})],
	})
	[v.message | some v in violations(testdata.workload_input("Job", "vision", testdata.vera, job))] == [
		concat("", [
			`[gpu-quota-unfit] Job "sweep" runs 2 pods × 8 h100 GPUs = 16; tenant "vision" has 8 h100 GPUs. Fix: run `,
			`at most 1 pod at once (spec.parallelism) or ask fewer GPUs per pod, or ask the infra team to raise `,
			`spec.gpu.models[h100] of Tenant "vision"`,
		]),
	]
}

test_other_vendors_gpus_count_against_the_quota if {
	pod := testdata.pod("amd", {
		"nodeSelector": {"nvidia.com/gpu.product": "a100"},
		"containers": [testdata.gpu_container("main", {"amd.com/gpu": "4"})],
	})
	[v.message | some v in violations(pod_input("speech", testdata.sam, pod, {"total": 6, "by_model": {"a100": 6}}))] == [
		concat("", [
			`[gpu-quota] Pod "amd" asks 4 amd.com/gpu (a100); tenant "speech" uses 6 of 8 GPUs (a100: 6 of 8). Fix: `,
			`lower the request or wait for running pods to finish`,
		]),
	]
	count(violations(pod_input("speech", testdata.sam, pod, {"total": 4, "by_model": {"a100": 4}}))) == 0
}

test_gpus_claimed_through_dra_count_against_the_quota if {
	count(violations(_dra_input("two", {"total": 6, "by_model": {"a100": 6}}))) == 0
	d := gpu_quota.demand with input as _dra_input("two", {})
		with data.inventory as testdata.gpu_inventory
	d == {"total": 2, "by_model": {"unspecified": 2}}
	[v.message | some v in violations(_dra_input("two", {"total": 7, "by_model": {"a100": 7}}))] == [
		concat("", [
			`[gpu-quota] Pod "dra" asks 2 DRA gpu.nvidia.com (model unspecified); tenant "speech" uses 7 of 8 GPUs. `,
			`Fix: lower the request or wait for running pods to finish`,
		]),
	]
}
