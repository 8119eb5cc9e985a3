package labgate.rules.gpu_quota_test

import data.labgate.lib.testdata
import data.labgate.rules.gpu_countable
import data.labgate.rules.gpu_model
import data.labgate.rules.gpu_preemptible
import data.labgate.rules.gpu_quota

# A Pod named `name` asking `limits` with the model `model` selected ("" for none).
gpu_pod(name, model, limits) := testdata.pod(name, object.union(
	{"containers": [testdata.gpu_container("main", limits)]},
	{"nodeSelector": {"nvidia.com/gpu.product": model} | model != ""},
))

pod_input(namespace, user, pod, usage) := object.union(
	testdata.workload_input("Pod", namespace, user, pod),
	{"gpu_usage": usage},
)

# Every GPU rule's findings: each test pins what all of them find together, as before the rules
# were split by concern into packages.
violations(input_doc) := v if {
	v := gpu_violations with input as input_doc
		with data.inventory as testdata.gpu_inventory
}

gpu_violations := ((gpu_quota.violation | gpu_model.violation) | gpu_preemptible.violation) | gpu_countable.violation

# The replica field comes from data.labgate.workloads (generated from the webhook's workload kinds).
_worker_set_input(group) := {
	"request": json.patch(
		testdata.request("CREATE", "Job", "speech", testdata.sam, {"metadata": {"name": "llm"}}, null),
		[{"op": "replace", "path": "/kind", "value": {"group": group, "version": "v1", "kind": "LeaderWorkerSet"}}],
	),
	"pod_templates": [{
		"path": "spec.leaderWorkerTemplate.workerTemplate.spec",
		"spec": {
			"nodeSelector": {"nvidia.com/gpu.product": "a100"},
			"containers": [testdata.gpu_container("worker", {"nvidia.com/gpu": "4"})],
		},
		"metadata": {},
		"replicas": 4,
	}],
}

# --- gpu-quota-pending: pods that will wait, announced at apply time ---

sweep(parallelism, per_pod) := testdata.job("sweep", parallelism, {}, {
	"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": per_pod})],
	"nodeSelector": {"nvidia.com/gpu.product": "h100"},
})

job_input(job, usage) := object.union(
	testdata.workload_input("Job", "vision", testdata.vera, job),
	{"gpu_usage": usage},
)

_sidecar(limits) := object.union(testdata.gpu_container("proxy", limits), {"restartPolicy": "Always"})

# --- gpu-dra-unsupported ---

_claim(requests) := {"found": true, "spec": {"devices": {"requests": requests}}}

_claims := {
	"ResourceClaimTemplate/two": _claim([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]),
	"ResourceClaimTemplate/mig": _claim([{"name": "g", "exactly": {"deviceClassName": "mig.nvidia.com"}}]),
	"ResourceClaimTemplate/gone": {"found": false, "reason": `it does not exist in namespace "speech"`},
}

_dra_pod(template) := testdata.pod("dra", {
	"containers": [object.union(testdata.main_container, {"resources": {"claims": [{"name": "gpus"}]}})],
	"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
})

_dra_input(template, usage) := object.union(
	pod_input("speech", testdata.sam, _dra_pod(template), usage),
	{"resource_claims": _claims},
)

# --- headroom: the usage up to which the pod still fits, exactly where gpu-quota starts ---

headroom_of(input_doc) := h if {
	h := gpu_quota.headroom with input as input_doc
		with data.inventory as testdata.gpu_inventory
}

quota_rules(input_doc) := {v.rule | some v in violations(input_doc); v.rule == "gpu-quota"}

# --- gpu-quota ---

test_pod_within_quota_is_allowed if {
	pod := gpu_pod("train-7", "h100", {"nvidia.com/gpu": "4"})
	count(violations(pod_input("vision", testdata.vera, pod, {"total": 12, "by_model": {"h100": 4}}))) == 0
}

test_pod_over_total_and_model_quota_is_refused if {
	pod := gpu_pod("train-7", "h100", {"nvidia.com/gpu": "8"})
	violations(pod_input("vision", testdata.vera, pod, {"total": 12, "by_model": {"h100": 4}})) == {{
		"rule": "gpu-quota",
		"field": "spec.containers",
		"message": concat("", [
			`[gpu-quota] Pod "train-7" asks 8 nvidia.com/gpu (h100); tenant "vision" uses 12 of 16 GPUs (h100: 4 of `,
			`8). Fix: lower the request or wait for running pods to finish`,
		]),
	}}
}

test_pod_over_total_quota_only_is_refused if {
	pod := gpu_pod("train-7", "a100", {"nvidia.com/gpu": "4"})
	violations(pod_input("vision", testdata.vera, pod, {"total": 14, "by_model": {"h100": 8, "a100": 2}})) == {{
		"rule": "gpu-quota",
		"field": "spec.containers",
		"message": concat("", [
			`[gpu-quota] Pod "train-7" asks 4 nvidia.com/gpu (a100); tenant "vision" uses 14 of 16 GPUs. Fix: lower `,
			`the request or wait for running pods to finish`,
		]),
	}}
}

test_pod_over_model_quota_only_is_refused if {
	pod := gpu_pod("train-7", "", {"nvidia.com/mig-1g.10gb": "2"})
	violations(pod_input("vision", testdata.vera, pod, {"total": 3, "by_model": {"mig-1g.10gb": 3}})) == {{
		"rule": "gpu-quota",
		"field": "spec.containers",
		"message": concat("", [
			`[gpu-quota] Pod "train-7" asks 2 nvidia.com/mig-1g.10gb; tenant "vision" uses 3 of 4 mig-1g.10gb GPUs. `,
			`Fix: lower the request or wait for running pods to finish`,
		]),
	}}
}

# Regression: a pod asking more than the limit itself was told to "wait for running pods to finish".
test_missing_usage_counts_as_none if {
	pod := gpu_pod("train-7", "h100", {"nvidia.com/gpu": "9"})
	violations(testdata.workload_input("Pod", "vision", testdata.vera, pod)) == {{
		"rule": "gpu-quota",
		"field": "spec.containers",
		"message": concat("", [
			`[gpu-quota] Pod "train-7" asks 9 nvidia.com/gpu (h100); tenant "vision" uses 0 of 8 h100 GPUs. Fix: ask `,
			`at most 8 h100 GPUs per pod (the request alone exceeds the limit, so waiting cannot help), or ask the `,
			`infra team to raise spec.gpu.models[h100] of Tenant "vision"`,
		]),
	}}
	count(violations(testdata.workload_input(
		"Pod",
		"vision",
		testdata.vera,
		gpu_pod("train-8", "h100", {"nvidia.com/gpu": "8"}),
	))) == 0
}

test_controller_created_pods_count_too if {
	pod := json.patch(gpu_pod("ignored", "h100", {"nvidia.com/gpu": "8"}), [
		{"op": "remove", "path": "/metadata/name"},
		{"op": "add", "path": "/metadata/generateName", "value": "sweep-"},
	])
	input_doc := json.patch(
		pod_input(
			"vision",
			testdata.job_controller,
			gpu_pod("ignored", "h100", {"nvidia.com/gpu": "8"}),
			{"total": 10, "by_model": {"h100": 2}},
		),
		[{"op": "remove", "path": "/request/name"}, {"op": "replace", "path": "/request/object", "value": pod}],
	)
	[v.message | some v in violations(input_doc)] == [
		concat("", [
			`[gpu-quota] Pod "sweep-" asks 8 nvidia.com/gpu (h100); tenant "vision" uses 10 of 16 GPUs (h100: 2 of 8). `,
			`Fix: lower the request or wait for running pods to finish`,
		]),
	]
}

test_tenant_without_gpu_limits_is_unlimited if {
	pod := gpu_pod("big", "", {"nvidia.com/gpu": "64"})
	count(violations(pod_input("team-a", testdata.alice, pod, {"total": 1000, "by_model": {}}))) == 0
}

test_model_limits_hold_without_a_total if {
	inventory := json.patch(testdata.gpu_inventory, [{"op": "remove", "path": "/tenants/speech/spec/gpu/total"}])
	pod := gpu_pod("train-1", "a100", {"nvidia.com/gpu": "4"})
	v := gpu_violations with input as pod_input("speech", testdata.sam, pod, {"total": 40, "by_model": {"a100": 6}})
		with data.inventory as inventory
	[x.message | some x in v] == [
		concat("", [
			`[gpu-quota] Pod "train-1" asks 4 nvidia.com/gpu (a100); tenant "speech" uses 6 of 8 a100 GPUs. Fix: lower `,
			`the request or wait for running pods to finish`,
		]),
	]
}

test_pod_updates_are_not_counted_again if {
	pod := gpu_pod("train-7", "h100", {"nvidia.com/gpu": "8"})
	input_doc := json.patch(pod_input("vision", testdata.vera, pod, {"total": 16, "by_model": {"h100": 8}}), [
		{"op": "replace", "path": "/request/operation", "value": "UPDATE"},
		{"op": "add", "path": "/request/oldObject", "value": pod},
	])
	count(violations(input_doc)) == 0
}

# --- demand, which the webhook reserves ---

test_demand_of_a_pod_in_a_tenant_namespace if {
	pod := gpu_pod("train-7", "h100", {"nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "1"})
	d := gpu_quota.demand with input as testdata.workload_input("Pod", "vision", testdata.vera, pod)
		with data.inventory as testdata.gpu_inventory
	d == {"total": 3, "by_model": {"h100": 2, "mig-1g.10gb": 1}}
}

test_no_demand_outside_tenant_namespaces_or_for_workloads if {
	pod := gpu_pod("train-7", "h100", {"nvidia.com/gpu": "2"})
	d1 := gpu_quota.demand with input as testdata.workload_input("Pod", "default", testdata.vera, pod)
		with data.inventory as testdata.gpu_inventory
	d1 == {"total": 0, "by_model": {}}
	job := testdata.job("sweep", 2, {}, pod.spec)
	d2 := gpu_quota.demand with input as testdata.workload_input("Job", "vision", testdata.vera, job)
		with data.inventory as testdata.gpu_inventory
	d2 == {"total": 0, "by_model": {}}
}

# --- gpu-quota-unfit ---

test_job_that_fits_is_allowed if {
	job := testdata.job("sweep", 2, {}, {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "4"})],
	})
	count(violations(testdata.workload_input("Job", "vision", testdata.vera, job))) == 0
}

test_job_that_can_never_run_is_refused_with_the_arithmetic if {
	job := testdata.job("sweep", 64, {}, {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "8"})],
	})
	violations(testdata.workload_input("Job", "vision", testdata.vera, job)) == {{
		"rule": "gpu-quota-unfit",
		"field": "spec.parallelism",
		"message": concat("", [
			`[gpu-quota-unfit] Job "sweep" runs 64 pods × 8 h100 GPUs = 512; tenant "vision" has 8 h100 GPUs. Fix: run `,
			`at most 1 pod at once (spec.parallelism) or ask fewer GPUs per pod, or ask the infra team to raise `,
			`spec.gpu.models[h100] of Tenant "vision"`,
		]),
	}}
}

test_job_over_the_total_of_several_models_is_refused if {
	job := testdata.job("sweep", 64, {}, {"containers": [testdata.gpu_container("main", {
		"nvidia.com/mig-1g.10gb": "1",
		"nvidia.com/gpu": "7",
	})]})
	input_doc := json.patch(testdata.workload_input("Job", "vision", testdata.vera, job), [{
		"op": "add",
		"path": "/pod_templates/0/spec/nodeSelector",
		"value": {"nvidia.com/gpu.product": "a100"},
	}])
	{v.message | some v in violations(input_doc)} == {
		concat("", [
			`[gpu-quota-unfit] Job "sweep" runs 64 pods × 8 GPUs = 512; tenant "vision" has 16 in total. Fix: run at `,
			`most 2 pods at once (spec.parallelism) or ask fewer GPUs per pod, or ask the infra team to raise `,
			`spec.gpu.total of Tenant "vision"`,
		]),
		concat("", [
			`[gpu-quota-unfit] Job "sweep" runs 64 pods × 7 a100 GPUs = 448; tenant "vision" has 8 a100 GPUs. Fix: run `,
			`at most 1 pod at once (spec.parallelism) or ask fewer GPUs per pod, or ask the infra team to raise `,
			`spec.gpu.models[a100] of Tenant "vision"`,
		]),
		concat("", [
			`[gpu-quota-unfit] Job "sweep" runs 64 pods × 1 mig-1g.10gb GPU = 64; tenant "vision" has 4 mig-1g.10gb `,
			`GPUs. Fix: run at most 4 pods at once (spec.parallelism) or ask fewer GPUs per pod, or ask the infra team `,
			`to raise spec.gpu.models[mig-1g.10gb] of Tenant "vision"`,
		]),
	}
}

test_deployment_pod_bigger_than_the_tenant_is_refused if {
	deployment := testdata.deployment(
		"serve",
		{},
		{"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "10"})]},
	)
	violations(testdata.workload_input("Deployment", "speech", testdata.sam, deployment)) == {{
		"rule": "gpu-quota-unfit",
		"field": "spec.replicas",
		"message": concat("", [
			`[gpu-quota-unfit] Deployment "serve" runs 1 pod × 10 GPUs = 10; tenant "speech" has 8 in total. Fix: ask `,
			`at most 8 GPUs per pod, or ask the infra team to raise spec.gpu.total of Tenant "speech"`,
		]),
	}}
}

test_training_job_sums_its_replica_templates if {
	spec := {
		"nodeSelector": {"nvidia.com/gpu.product": "a100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "4"})],
	}
	input_doc := {
		"request": json.patch(
			testdata.request("CREATE", "Job", "speech", testdata.sam, {"metadata": {"name": "llm"}}, null),
			[{"op": "replace", "path": "/kind", "value": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}}],
		),
		"pod_templates": [
			{"path": "spec.pytorchReplicaSpecs.Master.template.spec", "spec": spec, "metadata": {}, "replicas": 1},
			{"path": "spec.pytorchReplicaSpecs.Worker.template.spec", "spec": spec, "metadata": {}, "replicas": 3},
		],
	}
	violations(input_doc) == {{
		"rule": "gpu-quota-unfit",
		"field": "spec.pytorchReplicaSpecs.Master.template.spec.containers",
		"message": concat("", [
			`[gpu-quota-unfit] PyTorchJob "llm" runs 1 pod × 4 a100 GPUs + 3 pods × 4 a100 GPUs = 16; tenant "speech" `,
			`has 8 a100 GPUs. Fix: its 4 pods start together, so ask at most 2 a100 GPUs per pod, or ask the infra `,
			`team to raise spec.gpu.models[a100] of Tenant "speech"`,
		]),
	}}
}

# A gang's pods start together: running fewer at once is no fix (issue 20).
test_indexed_job_gang_is_told_fewer_gpus_per_pod_not_less_parallelism if {
	violations(testdata.workload_input("Job", "vision", testdata.vera, _indexed_job(4, 4, "4"))) == {{
		"rule": "gpu-quota-unfit",
		"field": "spec.template.spec.containers",
		"message": concat("", [
			`[gpu-quota-unfit] Job "ring" runs 4 pods × 4 h100 GPUs = 16; tenant "vision" has 8 h100 GPUs. Fix: its 4 `,
			`pods start together, so ask at most 2 h100 GPUs per pod, or ask the infra team to raise `,
			`spec.gpu.models[h100] of Tenant "vision"`,
		]),
	}}
}

test_gang_larger_than_the_quota_in_pods_is_told_to_ask_for_quota if {
	[v.message |
		some v in violations(testdata.workload_input("Job", "vision", testdata.vera, _indexed_job(16, 16, "1")))
	] == [
		concat("", [
			`[gpu-quota-unfit] Job "ring" runs 16 pods × 1 h100 GPU = 16; tenant "vision" has 8 h100 GPUs. Fix: ask `,
			`the infra team to raise spec.gpu.models[h100] of Tenant "vision" (its 16 pods start together, so even 1 `,
			`h100 GPU each is too many)`,
		]),
	]
}

test_indexed_job_running_fewer_than_its_completions_is_not_a_gang if {
	[v.message |
		some v in violations(testdata.workload_input("Job", "vision", testdata.vera, _indexed_job(4, 8, "4")))
	] == [
		concat("", [
			`[gpu-quota-unfit] Job "ring" runs 4 pods × 4 h100 GPUs = 16; tenant "vision" has 8 h100 GPUs. Fix: run at `,
			`most 2 pods at once (spec.parallelism) or ask fewer GPUs per pod, or ask the infra team to raise `,
			`spec.gpu.models[h100] of Tenant "vision"`,
		]),
	]
}

test_gang_that_fits_is_allowed if {
	count(violations(testdata.workload_input("Job", "vision", testdata.vera, _indexed_job(4, 4, "2")))) == 0
}

_indexed_job(parallelism, completions, gpus) := json.patch(
	testdata.job("ring", parallelism, {}, {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": gpus})],
	}),
	[
		{"op": "add", "path": "/spec/completionMode", "value": "Indexed"},
		{"op": "add", "path": "/spec/completions", "value": completions},
	],
)

test_a_training_kind_names_its_own_replica_field if {
	violations(_worker_set_input("leaderworkerset.x-k8s.io")) == {{
		"rule": "gpu-quota-unfit",
		"field": "spec.replicas",
		"message": concat("", [
			`[gpu-quota-unfit] LeaderWorkerSet "llm" runs 4 pods × 4 a100 GPUs = 16; tenant "speech" has 8 a100 GPUs. `,
			`Fix: run at most 2 pods at once (spec.replicas) or ask fewer GPUs per pod, or ask the infra team to raise `,
			`spec.gpu.models[a100] of Tenant "speech"`,
		]),
	}}
}

test_a_kind_of_the_same_name_in_another_group_names_no_field if {
	violations(_worker_set_input("example.com")) == {{
		"rule": "gpu-quota-unfit",
		"field": "spec.leaderWorkerTemplate.workerTemplate.spec.containers",
		"message": concat("", [
			`[gpu-quota-unfit] LeaderWorkerSet "llm" runs 4 pods × 4 a100 GPUs = 16; tenant "speech" has 8 a100 GPUs. `,
			`Fix: run at most 2 pods at once (its replica count) or ask fewer GPUs per pod, or ask the infra team to `,
			`raise spec.gpu.models[a100] of Tenant "speech"`,
		]),
	}}
}

test_workloads_of_controllers_and_unlimited_tenants_are_not_checked if {
	job := testdata.job("sweep", 64, {}, {"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "8"})]})
	count(violations(testdata.workload_input("Job", "team-a", testdata.alice, job))) == 0
	count(violations(testdata.workload_input("Job", "speech", testdata.job_controller, job))) == 0
}

# Issue 22 item 6: a pod of 32 over a total of 24 and an h100 limit of 16 was told "at most 24",
# then refused again for 16: the first Fix names the limit that binds.
test_a_pod_over_several_limits_by_itself_is_told_the_smallest if {
	pod := gpu_pod("big", "h100", {"nvidia.com/gpu": "32"})
	inventory := json.patch(testdata.gpu_inventory, [
		{"op": "replace", "path": "/tenants/vision/spec/gpu/total", "value": 24},
		{"op": "replace", "path": "/tenants/vision/spec/gpu/models/h100", "value": 16},
	])
	[v.message | some v in gpu_violations with input as testdata.workload_input("Pod", "vision", testdata.vera, pod)
		with data.inventory as inventory] == [
		concat("", [
			`[gpu-quota] Pod "big" asks 32 nvidia.com/gpu (h100); tenant "vision" uses 0 of 24 GPUs (h100: 0 of 16). `,
			`Fix: ask at most 16 h100 GPUs per pod (the request alone exceeds the limit, so waiting cannot help), or `,
			`ask the infra team to raise spec.gpu.models[h100] of Tenant "vision"`,
		]),
	]

	# The total smaller than the model's limit: the total binds.
	small_total := json.patch(inventory, [{"op": "replace", "path": "/tenants/vision/spec/gpu/total", "value": 12}])
	[v.message | some v in gpu_violations with input as testdata.workload_input("Pod", "vision", testdata.vera, pod)
		with data.inventory as small_total] == [
		concat("", [
			`[gpu-quota] Pod "big" asks 32 nvidia.com/gpu (h100); tenant "vision" uses 0 of 12 GPUs (h100: 0 of 16). `,
			`Fix: ask at most 12 GPUs per pod (the request alone exceeds the limit, so waiting cannot help), or ask `,
			`the infra team to raise spec.gpu.total of Tenant "vision"`,
		]),
	]
}

test_a_pod_over_the_total_by_itself_is_told_the_most_that_fits if {
	pod := gpu_pod("train-9", "h100", {"nvidia.com/gpu": "4"})
	inventory := json.patch(
		testdata.gpu_inventory,
		[{"op": "replace", "path": "/tenants/vision/spec/gpu/total", "value": 2}],
	)
	[v.message | some v in gpu_violations with input as testdata.workload_input("Pod", "vision", testdata.vera, pod)
		with data.inventory as inventory] == [
		concat("", [
			`[gpu-quota] Pod "train-9" asks 4 nvidia.com/gpu (h100); tenant "vision" uses 0 of 2 GPUs. Fix: ask at `,
			`most 2 GPUs per pod (the request alone exceeds the limit, so waiting cannot help), or ask the infra team `,
			`to raise spec.gpu.total of Tenant "vision"`,
		]),
	]
}

test_headroom_is_the_limit_less_the_demand if {
	pod := gpu_pod("train-7", "h100", {"nvidia.com/gpu": "3"})
	headroom_of(pod_input("vision", testdata.vera, pod, {"total": 0, "by_model": {}})) == {
		"total": 13, "by_model": {"h100": 5},
	}
}

test_headroom_ends_where_the_quota_rule_begins if {
	pod := gpu_pod("train-7", "h100", {"nvidia.com/gpu": "3"})
	at_edge := pod_input("vision", testdata.vera, pod, {"total": 13, "by_model": {"h100": 5}})
	quota_rules(at_edge) == set()
	quota_rules(pod_input("vision", testdata.vera, pod, {"total": 14, "by_model": {"h100": 5}})) == {"gpu-quota"}
	quota_rules(pod_input("vision", testdata.vera, pod, {"total": 13, "by_model": {"h100": 6}})) == {"gpu-quota"}
}

test_headroom_without_a_total_limit_is_per_model_only if {
	inventory := json.patch(testdata.gpu_inventory, [{"op": "remove", "path": "/tenants/vision/spec/gpu/total"}])
	pod := gpu_pod("train-7", "h100", {"nvidia.com/gpu": "3"})
	h := gpu_quota.headroom with input as pod_input("vision", testdata.vera, pod, {"total": 0, "by_model": {}})
		with data.inventory as inventory
	h == {"total": null, "by_model": {"h100": 5}}
}

test_no_headroom_for_a_pod_without_gpus if {
	pod := testdata.pod("cpu", {"containers": [{"name": "main", "image": "registry.lab.example/x:1"}]})
	headroom_of(pod_input("vision", testdata.vera, pod, {"total": 0, "by_model": {}})) == null
}
