package labgate.rules.gpu_quota_test

import data.labgate.lib.testdata

# gpu-quota-pending: a workload whose pods will wait for GPUs is announced when applied, about the
# limit that binds, and only then (split from gpu_quota_test.rego, whose helpers it uses: one
# package).

# Regression: a Job that fits the quota but not what is free now was created silently; its pods then
# looped on FailedCreate in the Job's events.
test_job_whose_pods_will_wait_is_announced_with_current_usage if {
	violations(job_input(sweep(4, "2"), {"total": 6, "by_model": {"h100": 6}})) == {{
		"rule": "gpu-quota-pending",
		"field": "spec.parallelism",
		"if_admitted": true,
		"message": concat("", [
			`[gpu-quota-pending] Job "sweep" runs 4 pods × 2 h100 GPUs = 8; tenant "vision" uses 6 of 8 h100 GPUs now, `,
			`so only 1 pod can start now and the rest wait (events: FailedCreate) until GPUs are free. Fix: wait for `,
			`running pods to finish, or run fewer pods at once (spec.parallelism)`,
		]),
	}}
}

# Issue 22 item 5: a 20-pod Deployment was told "only 16 pods can start now" (the total) and then
# refused [gpu-quota-unfit] (h100): a refused workload gets no "will wait", and the limit said is the
# one that binds.
_web := testdata.deployment("serve", {}, {
	"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
	"nodeSelector": {"nvidia.com/gpu.product": "h100"},
})

_web_input(replicas, usage) := object.union(
	testdata.workload_input(
		"Deployment",
		"vision",
		testdata.vera,
		json.patch(_web, [{"op": "add", "path": "/spec/replicas", "value": replicas}]),
	),
	{"gpu_usage": usage},
)

_roomy := json.patch(testdata.gpu_inventory, [{"op": "replace", "path": "/tenants/vision/spec/gpu/total", "value": 32}])

test_a_workload_refused_as_unfit_is_not_also_announced_as_waiting if {
	found := gpu_violations with input as _web_input(20, {"total": 16, "by_model": {"h100": 0}})
		with data.inventory as _roomy
	[v.rule | some v in found] == ["gpu-quota-unfit"]
}

test_the_waiting_announcement_names_the_limit_that_binds if {
	# total: 16 of 32 free lets 16 pods start; h100: 2 of 8 free lets 2: the h100 limit binds.
	found := gpu_violations with input as _web_input(8, {"total": 16, "by_model": {"h100": 6}})
		with data.inventory as _roomy
	[v.message | some v in found] == [
		concat("", [
			`[gpu-quota-pending] Deployment "serve" runs 8 pods × 1 h100 GPU = 8; tenant "vision" uses 6 of 8 h100 `,
			`GPUs now, so only 2 pods can start now and the rest wait (events: FailedCreate) until GPUs are free. Fix: `,
			`wait for running pods to finish, or run fewer pods at once (spec.replicas)`,
		]),
	]

	# total: 4 of 32 free binds before h100's 8 of 8 (which is not even pending).
	by_total := gpu_violations with input as _web_input(8, {"total": 28, "by_model": {"h100": 0}})
		with data.inventory as _roomy
	[v.message | some v in by_total] == [
		concat("", [
			`[gpu-quota-pending] Deployment "serve" runs 8 pods × 1 GPU = 8; tenant "vision" uses 28 of 32 GPUs now, `,
			`so only 4 pods can start now and the rest wait (events: FailedCreate) until GPUs are free. Fix: wait for `,
			`running pods to finish, or run fewer pods at once (spec.replicas)`,
		]),
	]

	# Both pending: total lets 3 start, h100 lets 5: the total binds.
	both := gpu_violations with input as _web_input(8, {"total": 29, "by_model": {"h100": 3}})
		with data.inventory as _roomy
	[v.message | some v in both] == [
		concat("", [
			`[gpu-quota-pending] Deployment "serve" runs 8 pods × 1 GPU = 8; tenant "vision" uses 29 of 32 GPUs now, `,
			`so only 3 pods can start now and the rest wait (events: FailedCreate) until GPUs are free. Fix: wait for `,
			`running pods to finish, or run fewer pods at once (spec.replicas)`,
		]),
	]
}

# Under Kueue the Job waits suspended in its queue, not in FailedCreate events (issue 20): queue-wait
# says so.
test_job_queued_in_kueue_is_not_announced if {
	count(violations(job_input(sweep(4, "2"), {"total": 6, "by_model": {"h100": 6}}))) == 1
	queued := gpu_violations with input as job_input(sweep(4, "2"), {"total": 6, "by_model": {"h100": 6}})
		with data.inventory as json.patch(
			testdata.gpu_inventory,
			[{"op": "add", "path": "/tenants/vision/spec/queue", "value": {}}],
		)
	count(queued) == 0 # queue-wait says where it waits instead (rules/queue_wait)
}

test_job_that_fits_what_is_free_is_not_announced if {
	count(violations(job_input(sweep(2, "2"), {"total": 4, "by_model": {"h100": 4}}))) == 0
}

test_job_without_usage_given_is_not_announced if {
	count(violations(testdata.workload_input("Job", "vision", testdata.vera, sweep(4, "2")))) == 0
}

test_job_that_can_never_fit_is_refused_not_announced if {
	[v.rule | some v in violations(job_input(sweep(5, "2"), {"total": 6, "by_model": {"h100": 6}}))] == ["gpu-quota-unfit"]
}

test_an_updated_job_is_not_announced if {
	update := json.patch(
		job_input(sweep(4, "2"), {"total": 6, "by_model": {"h100": 6}}),
		[{"op": "replace", "path": "/request/operation", "value": "UPDATE"}],
	)
	count(violations(update)) == 0
}
