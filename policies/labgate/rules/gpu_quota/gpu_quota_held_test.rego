package labgate.rules.gpu_quota_test

import data.labgate.lib.testdata

# What a gpu-quota refusal says of the GPUs held by admitted pods the scheduler has not bound yet
# (input.gpu_held, from the Tenant's status; split from gpu_quota_test.rego, whose helpers it uses:
# one package).

# Issue 22 item 6: "uses 16 of 16" hid that 8 were held by a pod still waiting for a node.
test_a_refusal_says_what_pods_not_yet_scheduled_hold if {
	pod := gpu_pod("train-8", "h100", {"nvidia.com/gpu": "8"})
	input_doc := object.union(
		pod_input("vision", testdata.vera, pod, {"total": 16, "by_model": {"h100": 8}}),
		{"gpu_held": {"gpus": 8, "pods": ["gpu-experiment-dzjhx"]}},
	)
	[v.message | some v in violations(input_doc)] == [
		concat("", [
			`[gpu-quota] Pod "train-8" asks 8 nvidia.com/gpu (h100); tenant "vision" uses 16 of 16 GPUs (h100: 8 of `,
			`8), 8 held by 1 pod not yet scheduled: gpu-experiment-dzjhx. Fix: lower the request, wait for running `,
			`pods to finish, or delete a pod that waits for a node`,
		]),
	]
}

# A status names the first ten pods that hold quota unscheduled; their count is not how many hold it.
test_a_refusal_does_not_count_the_pods_a_status_names_as_all_that_hold_quota if {
	pod := gpu_pod("train-8", "h100", {"nvidia.com/gpu": "8"})
	names := [sprintf("job-r1-%d", [i]) | some i in numbers.range(1, 10)]
	input_doc := object.union(
		pod_input("vision", testdata.vera, pod, {"total": 16, "by_model": {"h100": 8}}),
		{"gpu_held": {"gpus": 12, "pods": names, "all_named": false}},
	)
	[v.message | some v in violations(input_doc)] == [
		concat("", [
			`[gpu-quota] Pod "train-8" asks 8 nvidia.com/gpu (h100); tenant "vision" uses 16 of 16 GPUs (h100: 8 of `,
			`8), 12 held by pods not yet scheduled, among them job-r1-1, job-r1-2, job-r1-3, job-r1-4, job-r1-5, `,
			`job-r1-6, job-r1-7, job-r1-8, job-r1-9, job-r1-10. Fix: lower the request, wait for running pods to `,
			`finish, or delete a pod that waits for a node`,
		]),
	]
}
