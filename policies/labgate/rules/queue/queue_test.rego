package labgate.rules.queue_test

import data.labgate.lib.testdata
import data.labgate.mutation
import data.labgate.rules.queue

kueue_config := {"default_local_queue": "default", "kueue_users": ["kueue"], "pod_integration": true}

# The GPU tenants, vision managed by Kueue (spec.queue) and listing class research-batch, and two
# WorkloadPriorityClasses.
kueue_inventory := json.patch(testdata.gpu_inventory, [
	{"op": "add", "path": "/tenants/vision/spec/queue", "value": {}},
	{"op": "add", "path": "/tenants/vision/spec/scheduling", "value": {"priorityClasses": ["research-batch"]}},
	{
		"op": "add", "path": "/workload_priority_classes",
		"value": {"research-batch": {"value": 1000}, "research-default": {"value": 0}},
	},
])

kueue_user := {"username": "kueue", "groups": ["system:authenticated"]}

violations(input_doc) := v if {
	v := queue.violation with input as input_doc
		with data.inventory as kueue_inventory
		with data.labgate.config.queue as kueue_config
}

messages(input_doc) := {v.message | some v in violations(input_doc)}

job(labels, suspend) := object.union(
	testdata.job("train", 1, {}, {"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})]}),
	{"metadata": {"name": "train", "labels": labels}, "spec": {"suspend": suspend}},
)

job_input(operation, user, new, old) := {
	"request": testdata.request(operation, "Job", "vision", user, new, old),
	"pod_templates": testdata.pod_templates("Job", new),
}

queued := {"kueue.x-k8s.io/queue-name": "default"}

# --- queue-name ---

test_job_in_its_tenants_queue_is_admitted if {
	count(violations(job_input("CREATE", testdata.vera, job(queued, true), null))) == 0
}

test_job_in_another_queue_is_refused if {
	violations(job_input("CREATE", testdata.vera, job({"kueue.x-k8s.io/queue-name": "speech-fast"}, true), null)) == {{
		"rule": "queue-name",
		"field": "metadata.labels[kueue.x-k8s.io/queue-name]",
		"message": concat("", [
			`[queue-name] Job "train" names LocalQueue "speech-fast" (label kueue.x-k8s.io/queue-name); tenant `,
			`"vision"'s workloads wait in its own LocalQueue here ("default"). Fix: set label `,
			`kueue.x-k8s.io/queue-name: default, or leave it out and labgate sets it`,
		]),
	}}
}

test_job_created_without_a_queue_past_the_mutation_is_refused if {
	messages(job_input("CREATE", testdata.cluster_admin, job({}, true), null)) == {
		concat("", [
			`[queue-name] Job "train" names no LocalQueue (label kueue.x-k8s.io/queue-name); tenant "vision"'s `,
			`workloads wait in its own LocalQueue here ("default"). Fix: set label kueue.x-k8s.io/queue-name: default, `,
			`or leave it out and labgate sets it`,
		]),
	}
}

test_an_old_job_without_a_queue_can_still_be_updated if {
	count(violations(job_input("UPDATE", testdata.vera, job({}, false), job({}, false)))) == 0
}

test_nothing_is_queued_in_a_tenant_kueue_does_not_manage if {
	count(queue.violation) == 0
		with input as job_input("CREATE", testdata.vera, job({"kueue.x-k8s.io/queue-name": "x"}, false), null)
		with data.inventory as testdata.gpu_inventory
	patch := mutation.changes_patch with input as job_input("CREATE", testdata.vera, job({}, false), null)
		with data.inventory as testdata.gpu_inventory
	[op | some op in patch; op.path in {"/metadata/labels", "/spec/suspend"}] == []
}

jobset_child := object.union(
	job({}, false),
	{
		"metadata": {
			"ownerReferences": [
				{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "ring", "controller": true},
			],
		},
	},
)

test_a_jobsets_own_jobs_are_not_queued_on_their_own if {
	count(violations(job_input("CREATE", testdata.job_controller, jobset_child, null))) == 0
}

# Regression: a member naming a queued owner in ownerReferences would have run a Job unqueued.
test_a_member_cannot_skip_the_queue_by_naming_an_owner if {
	{v.rule | some v in violations(job_input("CREATE", testdata.vera, jobset_child, null))} == {
		"queue-name", "queue-unsuspend",
	}
	pod := object.union(
		testdata.pod("stowaway", {"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})]}),
		{"metadata": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": true}]}},
	)
	[v.rule | some v in violations(testdata.workload_input("Pod", "vision", testdata.vera, pod))] == ["queue-name"]
}

# A bare GPU pod waits in the queue too; a Job's pods are admitted with their Job.
test_bare_gpu_pod_without_a_queue_is_refused_and_a_jobs_pod_is_not if {
	pod := testdata.pod("solo", {"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})]})
	[v.rule | some v in violations(testdata.workload_input("Pod", "vision", testdata.vera, pod))] == ["queue-name"]
	owned := object.union(
		pod,
		{"metadata": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": true}]}},
	)
	count(violations(testdata.workload_input("Pod", "vision", testdata.job_controller, owned))) == 0
	plain := testdata.pod("shell", {"containers": [testdata.main_container]})
	count(violations(testdata.workload_input("Pod", "vision", testdata.vera, plain))) == 0
}

# Without Kueue's pod integration a bare GPU pod has no queue: refused, and pointed at a Job.
test_bare_gpu_pod_without_pod_integration_is_refused if {
	pod := testdata.pod("solo", {
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
	})
	found := queue.violation with input as testdata.workload_input("Pod", "vision", testdata.vera, pod)
		with data.inventory as kueue_inventory
		with data.labgate.config.queue as object.remove(kueue_config, ["pod_integration"])
	found == {{
		"rule": "queue-bare-pod",
		"field": "spec.containers",
		"message": concat("", [
			`[queue-bare-pod] Pod "solo" asks 1 nvidia.com/gpu (h100) outside any queue; tenant "vision"'s GPU work `,
			`waits in its Kueue queue, which takes Jobs, not bare pods. Fix: run it as a Job (kubectl create job), `,
			`which labgate puts in LocalQueue "default"`,
		]),
	}}
	plain := testdata.pod("shell", {"containers": [testdata.main_container]})
	count(queue.violation) == 0 with input as testdata.workload_input("Pod", "vision", testdata.vera, plain)
		with data.inventory as kueue_inventory
		with data.labgate.config.queue as object.remove(kueue_config, ["pod_integration"])
}

# --- queue-change ---

test_moving_a_job_to_another_queue_is_refused if {
	violations(job_input("UPDATE", testdata.vera, job({}, true), job(queued, true))) == {{
		"rule": "queue-change",
		"field": "metadata.labels[kueue.x-k8s.io/queue-name]",
		"message": concat("", [
			`[queue-change] Job "train" moves from LocalQueue "default" to none (label kueue.x-k8s.io/queue-name); a `,
			`queued workload stays in the queue it was created in. Fix: keep the label kueue.x-k8s.io/queue-name: `,
			`default, or delete it and create it anew`,
		]),
	}}
}

# --- queue-unsuspend ---

test_researcher_cannot_unsuspend_a_queued_job if {
	violations(job_input("UPDATE", testdata.vera, job(queued, false), job(queued, true))) == {{
		"rule": "queue-unsuspend",
		"field": "spec.suspend",
		"message": concat("", [
			`[queue-unsuspend] Job "train" sets spec.suspend to false; only Kueue starts a queued workload, when its `,
			`queue admits it. Fix: leave spec.suspend true and wait for admission (kubectl get workloads -n vision)`,
		]),
	}}
}

test_cluster_admin_cannot_unsuspend_a_queued_job_either if {
	[v.rule |
		some v in violations(job_input("UPDATE", testdata.cluster_admin, job(queued, false), job(queued, true)))
	] == ["queue-unsuspend"]
}

test_kueue_unsuspends_an_admitted_job_and_researchers_may_suspend if {
	count(violations(job_input("UPDATE", kueue_user, job(queued, false), job(queued, true)))) == 0
	count(violations(job_input("UPDATE", testdata.vera, job(queued, true), job(queued, false)))) == 0
}

test_kueues_exemption_is_per_field if {
	# Kueue's controller moving a workload to another queue is refused like anyone's.
	[v.rule |
		some v in violations(job_input(
			"UPDATE",
			kueue_user,
			job({"kueue.x-k8s.io/queue-name": "other"}, false),
			job(queued, true),
		))
	] == ["queue-change", "queue-name"]
}

test_a_kubeflow_job_is_suspended_in_its_run_policy if {
	obj := {"metadata": {"name": "llm", "labels": queued}, "spec": {"runPolicy": {"suspend": false}}}
	old := json.patch(obj, [{"op": "replace", "path": "/spec/runPolicy/suspend", "value": true}])
	input_doc := {
		"request": json.patch(
			testdata.request("UPDATE", "Job", "vision", testdata.vera, obj, old),
			[{"op": "replace", "path": "/kind", "value": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}}],
		),
		"pod_templates": [],
	}
	messages(input_doc) == {
		concat("", [
			`[queue-unsuspend] PyTorchJob "llm" sets spec.runPolicy.suspend to false; only Kueue starts a queued `,
			`workload, when its queue admits it. Fix: leave spec.runPolicy.suspend true and wait for admission `,
			`(kubectl get workloads -n vision)`,
		]),
	}
}

# --- queue-gate and queue-placement ---

gated_pod(selector) := testdata.pod("solo", {
	"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
	"nodeSelector": selector,
	"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
})

pod_update(user, new, old) := {
	"request": testdata.request(
		"UPDATE",
		"Pod",
		"vision",
		user,
		object.union(new, {"metadata": {"labels": queued}}),
		object.union(old, {"metadata": {"labels": queued}}),
	),
	"pod_templates": testdata.pod_templates("Pod", new),
}

test_researcher_cannot_remove_kueues_gate if {
	ungated := json.remove(gated_pod({}), ["spec/schedulingGates"])
	violations(pod_update(testdata.vera, ungated, gated_pod({}))) == {{
		"rule": "queue-gate",
		"field": "spec.schedulingGates",
		"message": concat("", [
			`[queue-gate] Pod "solo" removes scheduling gate kueue.x-k8s.io/admission; only Kueue removes it, when its `,
			`queue admits the pod. Fix: keep the gate and wait for admission (kubectl get workloads -n vision)`,
		]),
	}}
	count(violations(pod_update(kueue_user, ungated, gated_pod({})))) == 0
}

test_node_selector_of_a_waiting_workload_is_kueues_to_set if {
	pool := {"labgate.io/node-pool": "h100-reserved"}
	violations(pod_update(testdata.vera, gated_pod(pool), gated_pod({}))) == {{
		"rule": "queue-placement",
		"field": "spec.nodeSelector",
		"message": concat("", [
			`[queue-placement] Pod "solo" changes spec.nodeSelector while it waits in its queue; Kueue sets where it `,
			`runs when it admits it (the flavor's node selector). Fix: leave spec.nodeSelector as it was, or delete `,
			`the workload and create it anew`,
		]),
	}}
	count(violations(pod_update(kueue_user, gated_pod(pool), gated_pod({})))) == 0
	suspended := job(queued, true)
	moved := json.patch(suspended, [{"op": "add", "path": "/spec/template/spec/nodeSelector", "value": pool}])
	[v.field | some v in violations(job_input("UPDATE", testdata.vera, moved, suspended))] == [
		"spec.template.spec.nodeSelector",
	]
}

# --- queue-priority ---

test_workload_priority_above_the_ceiling_is_refused if {
	urgent := job(object.union(queued, {"kueue.x-k8s.io/priority-class": "research-batch"}), true)
	violations(job_input("CREATE", testdata.vera, urgent, null)) == {{
		"rule": "queue-priority",
		"field": "metadata.labels[kueue.x-k8s.io/priority-class]",
		"message": concat("", [
			`[queue-priority] Job "train" asks WorkloadPriorityClass "research-batch" (label `,
			`kueue.x-k8s.io/priority-class), priority 1000, above tenant "vision"'s ceiling of 0. Fix: name one of the `,
			`tenant's classes at or below priority 0, or leave the label out`,
		]),
	}}
	count(violations(job_input(
		"CREATE",
		testdata.vera,
		job(object.union(queued, {"kueue.x-k8s.io/priority-class": "research-default"}), true),
		null,
	))) == 0
}

test_workload_priority_class_not_the_tenants_is_refused if {
	vip := job(object.union(queued, {"kueue.x-k8s.io/priority-class": "vip"}), true)
	[v.message | some v in violations(job_input("CREATE", testdata.vera, vip, null))] == [
		concat("", [
			`[queue-priority] Job "train" asks WorkloadPriorityClass "vip" (label kueue.x-k8s.io/priority-class), `,
			`which tenant "vision" may not use (its classes: "research-batch", "research-default", `,
			`"research-preemptible"). Fix: name one of the tenant's classes at or below priority 0, or leave the label `,
			`out`,
		]),
	]
}

# --- the mutation: a Job that names no queue gets the tenant's, suspended ---

mutate(input_doc) := {"patch": p, "warnings": w} if {
	p := mutation.changes_patch with input as input_doc with data.inventory as kueue_inventory
		with data.labgate.config.queue as kueue_config
	w := mutation.warnings with input as input_doc with data.inventory as kueue_inventory
		with data.labgate.config.queue as kueue_config
}

test_job_without_a_queue_gets_the_default_queue_and_is_suspended if {
	plain := object.remove(testdata.job("train", 1, {}, {"containers": [testdata.main_container]}), [])
	result := mutate(job_input("CREATE", testdata.vera, plain, null))
	[op | some op in result.patch; not contains(op.path, "/template/")] == [
		{"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "default"}},
		{"op": "add", "path": "/spec/suspend", "value": true},
	]
	`labgate queued it in LocalQueue "default" (kueue.x-k8s.io/queue-name)` in result.warnings
	patched := json.patch(plain, result.patch)
	count(violations(job_input("CREATE", testdata.vera, patched, null))) == 0
}

test_a_named_queue_is_kept_and_a_bare_gpu_pod_is_gated if {
	pod := object.union(
		testdata.pod("solo", {"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})]}),
		{"metadata": {"labels": queued}},
	)
	[op |
		some op in mutate(testdata.workload_input("Pod", "vision", testdata.vera, pod)).patch
		startswith(op.path, "/spec/schedulingGates")
	] == [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": "kueue.x-k8s.io/admission"}]}]
	[op |
		some op in mutate(testdata.workload_input("Pod", "vision", testdata.vera, pod)).patch
		startswith(op.path, "/metadata/labels")
	] == []
}

test_a_kubeflow_job_without_a_run_policy_gets_one if {
	obj := {"metadata": {"name": "llm", "labels": queued}, "spec": {}}
	input_doc := {
		"request": json.patch(
			testdata.request("CREATE", "Job", "vision", testdata.vera, obj, null),
			[{"op": "replace", "path": "/kind", "value": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}}],
		),
		"pod_templates": [],
	}
	mutate(input_doc).patch == [{"op": "add", "path": "/spec/runPolicy", "value": {"suspend": true}}]
}

# Where Kueue runs beside labgate (reconcile --kueue), every tenant is managed, spec.queue or not.
test_every_tenant_is_managed_where_kueue_runs if {
	refused := job_input(
		"CREATE",
		testdata.sam,
		object.union(job({"kueue.x-k8s.io/queue-name": "x"}, true), {"metadata": {"namespace": "speech"}}),
		null,
	)
	doc := json.patch(refused, [{"op": "replace", "path": "/request/namespace", "value": "speech"}])
	count(queue.violation) == 0 with input as doc with data.inventory as kueue_inventory
	[v.rule | some v in queue.violation] == ["queue-name"] with input as doc
		with data.inventory as kueue_inventory
		with data.labgate.config.queue as object.union(kueue_config, {"managed_by_kueue": true})
}
