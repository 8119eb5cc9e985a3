package labgate.rules.queue_wait_test

import data.labgate.lib.testdata
import data.labgate.rules.gpu_quota
import data.labgate.rules.queue_wait

# A Job of `parallelism` pods, each asking `per_pod` h100 GPUs.
sweep(parallelism, per_pod) := testdata.job("sweep", parallelism, {}, {
	"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": per_pod})],
	"nodeSelector": {"nvidia.com/gpu.product": "h100"},
})

job_input(job, usage) := object.union(
	testdata.workload_input("Job", "vision", testdata.vera, job),
	{"gpu_usage": usage},
)

# queue-wait's findings and gpu_quota's together: a workload gpu_quota refuses waits nowhere.
gpu_violations := gpu_quota.violation | queue_wait.violation

violations(input_doc) := v if {
	v := gpu_violations with input as input_doc
		with data.inventory as testdata.gpu_inventory
}

_kueue_inventory := json.patch(
	testdata.gpu_inventory,
	[{"op": "add", "path": "/tenants/vision/spec/queue", "value": {}}],
)

_queued_job(job, usage, queued) := object.union(job_input(job, usage), {"gpu_queued": queued})

_none_queued := {"workloads": 0, "gpus": 0}

_kueue_findings(input_doc) := found if {
	found := gpu_violations with input as input_doc with data.inventory as _kueue_inventory
}

test_a_queued_job_beyond_what_is_free_says_it_waits_whole_and_what_is_ahead if {
	found := _kueue_findings(_queued_job(
		sweep(4, "2"),
		{"total": 6, "by_model": {"h100": 6}},
		{"workloads": 1, "gpus": 4},
	))
	[v.message | some v in found] == [
		concat("", [
			`[queue-wait] Job "sweep" waits in LocalQueue vision/default: it runs 4 pods × 2 h100 GPUs = 8; tenant `,
			`"vision" uses 6 of 8 h100 GPUs, so it waits whole, no pod started, until 8 h100 GPUs are free (2 now); `,
			`queued ahead: 1 workload asking 4 GPUs. Fix: none, it starts by itself (watch: kubectl get workloads -n `,
			`vision)`,
		]),
	]
	[v.if_admitted | some v in found] == [true]
}

test_a_queued_job_that_fits_says_it_starts_once_admitted if {
	found := _kueue_findings(_queued_job(sweep(2, "2"), {"total": 4, "by_model": {"h100": 4}}, _none_queued))
	[v.message | some v in found] == [
		concat("", [
			`[queue-wait] Job "sweep" is queued in LocalQueue vision/default: it runs 2 pods × 2 h100 GPUs = 4; tenant `,
			`"vision" uses 4 of 8 h100 GPUs, so it fits now and starts once Kueue admits it. Fix: none, it starts by `,
			`itself (watch: kubectl get workloads -n vision)`,
		]),
	]
}

test_the_queue_the_job_names_is_said if {
	job := json.patch(
		sweep(1, "1"),
		[{"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "default"}}],
	)
	found := _kueue_findings(_queued_job(job, {"total": 0, "by_model": {}}, _none_queued))
	contains(found[_].message, "LocalQueue vision/default:")
}

test_the_total_binds_when_it_has_less_room_than_the_model if {
	found := _kueue_findings(_queued_job(sweep(2, "2"), {"total": 14, "by_model": {"h100": 0}}, _none_queued))
	[v.message | some v in found] == [
		concat("", [
			`[queue-wait] Job "sweep" waits in LocalQueue vision/default: it runs 2 pods × 2 GPUs = 4; tenant "vision" `,
			`uses 14 of 16 GPUs, so it waits whole, no pod started, until 4 GPUs are free (2 now). Fix: none, it `,
			`starts by itself (watch: kubectl get workloads -n vision)`,
		]),
	]
}

test_a_queued_job_without_gpus_says_its_queue if {
	job := testdata.job("prep", 1, {}, {"containers": [testdata.main_container]})
	found := _kueue_findings(_queued_job(job, {"total": 0, "by_model": {}}, _none_queued))
	[v.message | some v in found] == [
		concat("", [
			`[queue-wait] Job "prep" is queued in LocalQueue vision/default and starts once Kueue admits it (it asks `,
			`no GPUs). Fix: none, it starts by itself (watch: kubectl get workloads -n vision)`,
		]),
	]
}

test_no_queue_wait_outside_kueue_on_update_or_when_unfit if {
	# Not managed by Kueue: gpu-quota-pending speaks instead.
	[v.rule | some v in violations(_queued_job(sweep(4, "2"), {"total": 6, "by_model": {"h100": 6}}, _none_queued))] == [
		"gpu-quota-pending",
	]

	update := json.patch(
		_queued_job(sweep(4, "2"), {"total": 6, "by_model": {"h100": 6}}, _none_queued),
		[{"op": "replace", "path": "/request/operation", "value": "UPDATE"}],
	)
	count(_kueue_findings(update)) == 0

	# 5 × 2 = 10 h100 can never fit 8: refused, not announced.
	[v.rule | some v in _kueue_findings(_queued_job(sweep(5, "2"), {"total": 0, "by_model": {}}, _none_queued))] == [
		"gpu-quota-unfit",
	]
}

# A bare pod queued by Kueue's pod integration waits behind its gate, unscheduled: it has no pods
# to start, so "waits whole, no pod started" (a Job's words) would tell its author nothing true.
test_a_queued_pod_beyond_what_is_free_says_it_waits_behind_the_gate if {
	pod := json.patch(
		testdata.pod("train", {
			"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "2"})],
			"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		}),
		[{
			"op": "add", "path": "/spec/schedulingGates",
			"value": [{"name": "kueue.x-k8s.io/admission"}],
		}],
	)
	pod_doc := object.union(
		testdata.workload_input("Pod", "vision", testdata.vera, pod),
		{"gpu_usage": {"total": 8, "by_model": {"h100": 8}}},
	)
	input_doc := object.union(pod_doc, {"gpu_queued": _none_queued})
	found := gpu_violations with input as input_doc
		with data.inventory as _kueue_inventory
		with data.labgate.config.queue as {"default_local_queue": "default", "pod_integration": true}
	[v.message | some v in found; v.rule == "queue-wait"] == [
		concat("", [
			`[queue-wait] Pod "train" waits in LocalQueue vision/default: it runs 1 pod × 2 h100 GPUs = 2; tenant `,
			`"vision" uses 8 of 8 h100 GPUs, so it waits behind Kueue's scheduling gate, not scheduled, until 2 h100 `,
			`GPUs are free (0 now). Fix: none, it starts by itself (watch: kubectl get workloads -n vision)`,
		]),
	]
}
