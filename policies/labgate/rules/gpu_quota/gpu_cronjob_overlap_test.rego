package labgate.rules.gpu_quota_test

import data.labgate.lib.testdata

# gpu-cronjob-overlap's tests (split from gpu_quota_test.rego, whose helpers they use: one package).

# --- gpu-cronjob-overlap (issue 22 item 7) ---

_nightly(policy) := {
	"apiVersion": "batch/v1",
	"kind": "CronJob",
	"metadata": {"name": "nightly"},
	"spec": object.union(
		{"schedule": "0 2 * * *", "jobTemplate": {"spec": {"parallelism": 2, "template": {"spec": {
			"nodeSelector": {"nvidia.com/gpu.product": "h100"},
			"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "2"})],
		}}}}},
		policy,
	),
}

test_a_cronjob_whose_gpu_runs_may_overlap_says_so if {
	violations(testdata.workload_input("CronJob", "vision", testdata.vera, _nightly({}))) == {{
		"rule": "gpu-cronjob-overlap",
		"field": "spec.concurrencyPolicy",
		"message": concat("", [
			`[gpu-cronjob-overlap] CronJob "nightly" runs 2 pods × 2 GPUs = 4 per run with concurrencyPolicy Allow: a `,
			`run that starts before the last one ends adds its GPUs to tenant "vision"'s usage, and its pods wait or `,
			`are refused at the quota. Fix: set spec.concurrencyPolicy: Forbid (skip a run while one is active) or `,
			`Replace`,
		]),
	}}
	[v.rule |
		some v in violations(testdata.workload_input(
			"CronJob",
			"vision",
			testdata.vera,
			_nightly({"concurrencyPolicy": "Allow"}),
		))
	] == ["gpu-cronjob-overlap"]
}

test_a_cronjob_that_cannot_overlap_or_asks_no_gpus_says_nothing if {
	count(violations(testdata.workload_input(
		"CronJob",
		"vision",
		testdata.vera,
		_nightly({"concurrencyPolicy": "Forbid"}),
	))) == 0
	count(violations(testdata.workload_input(
		"CronJob",
		"vision",
		testdata.vera,
		_nightly({"concurrencyPolicy": "Replace"}),
	))) == 0
	cpu_only := json.patch(
		_nightly({}),
		[{"op": "replace", "path": "/spec/jobTemplate/spec/template/spec/containers/0", "value": testdata.main_container}],
	)
	count(violations(testdata.workload_input("CronJob", "vision", testdata.vera, cpu_only))) == 0

	# The CronJob controller's Jobs are not judged again (their pods are).
	count(violations(testdata.workload_input("CronJob", "vision", testdata.job_controller, _nightly({})))) == 0
}
