package labgate.rules.queue_test

import data.labgate.lib.testdata
import data.labgate.rules.queue

# queue-unmanaged-kind and queue-unmanaged-pod: without Kueue's pod integration (the default).

no_pod_integration := object.remove(kueue_config, ["pod_integration"])

refusals(input_doc) := v if {
	v := queue.violation with input as input_doc
		with data.inventory as kueue_inventory
		with data.labgate.config.queue as no_pod_integration
}

gpu_spec := {
	"nodeSelector": {"nvidia.com/gpu.product": "h100"},
	"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
}

cpu_spec := {"containers": [testdata.main_container]}

# A Deployment, StatefulSet or ReplicaSet named `name` running `replicas` pods of `spec`.
apps_object(kind, name, replicas, spec) := {
	"apiVersion": "apps/v1",
	"kind": kind,
	"metadata": {"name": name},
	"spec": {"replicas": replicas, "template": {"metadata": {}, "spec": spec}},
}

apps_input(operation, user, new, old) := {
	"request": json.patch(testdata.request(operation, "Deployment", "vision", user, new, old), [
		{"op": "replace", "path": "/kind", "value": {"group": "apps", "version": "v1", "kind": new.kind}},
		{
			"op": "replace", "path": "/resource",
			"value": {"group": "apps", "version": "v1", "resource": lower(sprintf("%ss", [new.kind]))},
		},
	]),
	"pod_templates": [
		{"path": "spec.template.spec", "spec": new.spec.template.spec, "metadata": {}, "replicas": new.spec.replicas},
	],
}

unmanaged_kind_message(kind, name, asks) := sprintf(
	concat("", [
		`[queue-unmanaged-kind] %s %q asks %s outside Kueue; tenant "vision"'s GPU work waits in LocalQueue `,
		`"default", which takes Jobs (Kueue queues no %s here). Fix: run it as a Job with label `,
		`kueue.x-k8s.io/queue-name: default (or none: labgate sets it), or ask no GPUs`,
	]),
	[kind, name, asks, kind],
)

rs_controller := object.union(
	testdata.job_controller,
	{"username": "system:serviceaccount:kube-system:replicaset-controller"},
)

# --- queue-unmanaged-kind ---

test_a_gpu_deployment_is_refused_and_a_cpu_one_is_not if {
	refusals(apps_input("CREATE", testdata.vera, apps_object("Deployment", "web", 6, gpu_spec), null)) == {{
		"rule": "queue-unmanaged-kind",
		"field": "spec.template.spec",
		"message": unmanaged_kind_message("Deployment", "web", "6 × 1 nvidia.com/gpu (h100)"),
	}}
	count(refusals(apps_input("CREATE", testdata.vera, apps_object("Deployment", "web", 6, cpu_spec), null))) == 0
}

test_a_gpu_statefulset_at_zero_replicas_is_refused if {
	messages := {v.message |
		some v in refusals(apps_input("CREATE", testdata.vera, apps_object("StatefulSet", "db", 0, gpu_spec), null))
	}
	messages == {unmanaged_kind_message("StatefulSet", "db", "0 × 1 nvidia.com/gpu (h100)")}
}

test_raising_a_gpu_templates_replicas_is_refused_and_shrinking_it_is_not if {
	zero := apps_object("StatefulSet", "db", 0, gpu_spec)
	twelve := apps_object("StatefulSet", "db", 12, gpu_spec)
	four := apps_object("StatefulSet", "db", 4, gpu_spec)
	[v.rule | some v in refusals(apps_input("UPDATE", testdata.vera, twelve, zero))] == ["queue-unmanaged-kind"]
	count(refusals(apps_input("UPDATE", testdata.vera, four, twelve))) == 0
	count(refusals(apps_input("UPDATE", testdata.vera, twelve, twelve))) == 0
	count(refusals(apps_input("UPDATE", testdata.vera, apps_object("StatefulSet", "db", 0, cpu_spec), zero))) == 0
}

test_adding_gpus_to_a_template_is_refused_even_at_zero_replicas if {
	before := apps_object("Deployment", "web", 0, cpu_spec)
	after := apps_object("Deployment", "web", 0, gpu_spec)
	[v.rule | some v in refusals(apps_input("UPDATE", testdata.vera, after, before))] == ["queue-unmanaged-kind"]
	count(refusals(apps_input("UPDATE", testdata.vera, apps_object("Deployment", "web", 3, cpu_spec), before))) == 0
}

# A controller acting on a tenant's template is the tenant: a pre-existing Deployment's new ReplicaSet.
test_a_controllers_gpu_replicaset_is_refused if {
	rs := apps_object("ReplicaSet", "web-5d8", 2, gpu_spec)
	[v.rule | some v in refusals(apps_input("CREATE", testdata.job_controller, rs, null))] == ["queue-unmanaged-kind"]
}

test_with_kueues_pod_integration_a_gpu_deployment_queues_its_pods if {
	count(queue.violation) == 0
		with input as apps_input("CREATE", testdata.vera, apps_object("Deployment", "web", 6, gpu_spec), null)
		with data.inventory as kueue_inventory
		with data.labgate.config.queue as kueue_config
}

test_a_tenant_kueue_does_not_manage_runs_gpu_deployments if {
	doc := json.patch(
		apps_input("CREATE", testdata.sam, apps_object("Deployment", "web", 6, gpu_spec), null),
		[{"op": "replace", "path": "/request/namespace", "value": "speech"}],
	)
	count(refusals(doc)) == 0
}

test_a_gpu_cronjob_queues_through_its_jobs if {
	cron := {
		"metadata": {"name": "nightly"},
		"spec": {"jobTemplate": {"spec": {"parallelism": 2, "template": {"spec": gpu_spec}}}},
	}
	count(refusals(testdata.workload_input("CronJob", "vision", testdata.vera, cron))) == 0
}

# --- queue-unmanaged-pod ---

owned_pod(name, kind, owner, spec) := object.union(
	testdata.pod(name, spec),
	{"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": kind, "name": owner, "controller": true}]}},
)

test_a_replicasets_gpu_pod_is_refused_whoever_creates_it if {
	pod := owned_pod("web-5d8-x2", "ReplicaSet", "web-5d8", gpu_spec)
	refusals(testdata.workload_input("Pod", "vision", rs_controller, pod)) == {{
		"rule": "queue-unmanaged-pod",
		"field": "metadata.ownerReferences",
		"message": concat("", [
			`[queue-unmanaged-pod] Pod "web-5d8-x2" of ReplicaSet "web-5d8" asks 1 nvidia.com/gpu (h100) outside `,
			`Kueue; tenant "vision"'s GPU work waits in LocalQueue "default", which takes Jobs. Fix: scale ReplicaSet `,
			`"web-5d8" (or the workload that owns it) to 0 or delete it, and run the work as a Job with label `,
			`kueue.x-k8s.io/queue-name: default`,
		]),
	}}
	[v.rule |
		some v in refusals(testdata.workload_input(
			"Pod",
			"vision",
			testdata.cluster_admin,
			owned_pod("node-agent-1", "DaemonSet", "node-agent", gpu_spec),
		))
	] == ["queue-unmanaged-pod"]
}

test_a_jobs_pod_and_a_replicasets_cpu_pod_are_admitted if {
	job_pod := object.union(
		testdata.pod("train-0", gpu_spec),
		{"metadata": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": true}]}},
	)
	count(refusals(testdata.workload_input("Pod", "vision", testdata.job_controller, job_pod))) == 0
	count(refusals(testdata.workload_input(
		"Pod",
		"vision",
		rs_controller,
		owned_pod("web-5d8-x2", "ReplicaSet", "web-5d8", cpu_spec),
	))) == 0
}

# A member's pod is bare whatever owner it names: queue-bare-pod's, not this rule's.
test_a_members_gpu_pod_naming_a_replicaset_is_a_bare_pod if {
	pod := owned_pod("stowaway", "ReplicaSet", "web-5d8", gpu_spec)
	[v.rule | some v in refusals(testdata.workload_input("Pod", "vision", testdata.vera, pod))] == ["queue-bare-pod"]
}

test_with_kueues_pod_integration_a_replicasets_gpu_pod_waits_behind_the_gate if {
	pod := object.union(owned_pod("web-5d8-x2", "ReplicaSet", "web-5d8", gpu_spec), {"metadata": {"labels": queued}})
	count(violations(testdata.workload_input("Pod", "vision", rs_controller, pod))) == 0
}

# --- queue-unmanaged-scale ---

# `kubectl scale <kind>/<name> --replicas=<after>` from <before>, the workload's template as the
# webhook reads it.
scale_input(kind, name, before, after, spec) := {
	"request": {
		"uid": "test-uid",
		"operation": "UPDATE",
		"kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
		"resource": {"group": "apps", "version": "v1", "resource": lower(sprintf("%ss", [kind]))},
		"subResource": "scale",
		"namespace": "vision",
		"name": name,
		"userInfo": testdata.vera,
		"object": {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name}, "spec": {"replicas": after}},
		"oldObject": {
			"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": name}, "spec": {"replicas": before},
		},
	},
	"pod_templates": [],
	"scaled_workload": {
		"kind": kind, "pod_templates": [{"path": "spec.template.spec", "spec": spec, "metadata": {}, "replicas": before}],
	},
}

test_scaling_up_a_gpu_deployment_outside_kueue_is_refused_and_down_is_not if {
	refusals(scale_input("Deployment", "web", 0, 5, gpu_spec)) == {{
		"rule": "queue-unmanaged-scale",
		"field": "spec.replicas",
		"message": concat("", [
			`[queue-unmanaged-scale] Deployment "web" scaled from 0 to 5 pods of 1 nvidia.com/gpu (h100) outside `,
			`Kueue; tenant "vision"'s GPU work waits in LocalQueue "default", which takes Jobs. Fix: scale it to 0 and `,
			`run the work as a Job with label kueue.x-k8s.io/queue-name: default`,
		]),
	}}
	count(refusals(scale_input("Deployment", "web", 5, 0, gpu_spec))) == 0
	count(refusals(scale_input("StatefulSet", "db", 2, 2, gpu_spec))) == 0
	count(refusals(scale_input("StatefulSet", "db", 0, 12, cpu_spec))) == 0
}

# The webhook could not read the workload (input.scaled_workload.error): a scale up is refused, as
# gpu-quota-scale refuses it where Kueue does not manage the tenant; a scale down passes.
unreadable_scale(before, after) := json.patch(scale_input("Deployment", "web", before, after, gpu_spec), [{
	"op": "replace", "path": "/scaled_workload",
	"value": {"kind": "Deployment", "error": "timed out reading apps/v1 deployments web"},
}])

test_scaling_up_a_workload_labgate_cannot_read_is_refused_and_down_is_not if {
	refusals(unreadable_scale(0, 5)) == {{
		"rule": "queue-unmanaged-scale",
		"field": "spec.replicas",
		"message": concat("", [
			`[queue-unmanaged-scale] Deployment "web" scaled from 0 to 5 pods, but labgate could not read it to tell `,
			`whether its pods ask GPUs, which tenant "vision" runs through Kueue (timed out reading apps/v1 deployments `,
			`web). Fix: try again; if it persists, tell the infra team`,
		]),
	}}
	count(refusals(unreadable_scale(5, 2))) == 0
}

test_with_kueues_pod_integration_a_scale_up_queues_its_pods if {
	count(queue.violation) == 0 with input as scale_input("StatefulSet", "db", 0, 12, gpu_spec)
		with data.inventory as kueue_inventory
		with data.labgate.config.queue as kueue_config
}
