package labgate.lib.kueue_test

import data.labgate.lib.kueue
import data.labgate.lib.testdata

# The Kueue helpers the queue rules stand on: which tenants Kueue manages, what it queues, which
# workloads it never queues, and what counts as a controller's object.

with_queue := json.patch(testdata.gpu_inventory, [{"op": "add", "path": "/tenants/vision/spec/queue", "value": {}}])

gpu_spec := {"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})]}

owned_by(kind, api_version) := {"metadata": {"name": "p", "ownerReferences": [{
	"apiVersion": api_version,
	"kind": kind,
	"name": "owner",
	"controller": true,
}]}}

pod_input(user, obj) := {
	"request": testdata.request("CREATE", "Pod", "vision", user, obj, null),
	"pod_templates": [{"path": "spec", "spec": object.get(obj, "spec", {}), "metadata": {}, "replicas": 1}],
}

test_a_tenant_is_managed_by_the_config_or_by_its_own_spec_queue if {
	in_vision := testdata.workload_input("Pod", "vision", testdata.vera, testdata.pod("p", gpu_spec))
	kueue.managed_tenant.metadata.name == "vision" with input as in_vision
		with data.inventory as with_queue
		with data.labgate.config.queue as {}
	kueue.managed_tenant.metadata.name == "vision" with input as in_vision
		with data.inventory as testdata.gpu_inventory
		with data.labgate.config.queue as {"managed_by_kueue": true}
	not kueue.managed_tenant with input as in_vision
		with data.inventory as testdata.gpu_inventory
		with data.labgate.config.queue as {}
}

test_a_job_is_queued_and_a_deployment_is_a_workload_kueue_never_queues if {
	job := testdata.job("train", 1, {}, gpu_spec)
	kueue.is_queued(job) with input as testdata.workload_input("Job", "vision", testdata.vera, job)
	not kueue.is_unqueued_workload with input as testdata.workload_input("Job", "vision", testdata.vera, job)
	deployment := testdata.deployment("web", {}, gpu_spec)
	kueue.is_unqueued_workload with input as testdata.workload_input("Deployment", "vision", testdata.vera, deployment)
	not kueue.is_queued(deployment)
		with input as testdata.workload_input("Deployment", "vision", testdata.vera, deployment)
}

test_a_cronjob_runs_through_the_jobs_kueue_queues if {
	cronjob := {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"}, "spec": {}}
	not kueue.is_unqueued_workload with input as testdata.workload_input("CronJob", "vision", testdata.vera, cronjob)
}

# A Job's pod made by the job controller is admitted with its Job; the same ownerReference written by
# a member is not believed (a member's pod is bare whatever owner it names).
test_a_controllers_pod_of_a_job_is_owned_by_a_queued_kind_and_a_members_is_bare if {
	pod := object.union(owned_by("Job", "batch/v1"), {"spec": gpu_spec})
	kueue.is_owned_by_queued_kind(pod) with input as pod_input(testdata.job_controller, pod)
		with data.inventory as with_queue
	not kueue.is_bare_pod(pod) with input as pod_input(testdata.job_controller, pod)
		with data.inventory as with_queue
	not kueue.is_owned_by_queued_kind(pod) with input as pod_input(testdata.vera, pod)
		with data.inventory as with_queue
	kueue.is_bare_pod(pod) with input as pod_input(testdata.vera, pod)
		with data.inventory as with_queue
}

test_with_the_pod_integration_a_replicasets_gpu_pod_is_queued_and_without_it_not if {
	pod := object.union(owned_by("ReplicaSet", "apps/v1"), {"spec": gpu_spec})
	kueue.is_queued(pod) with input as pod_input(testdata.job_controller, pod)
		with data.inventory as with_queue
		with data.labgate.config.queue as {"pod_integration": true}
	not kueue.is_queued(pod) with input as pod_input(testdata.job_controller, pod)
		with data.inventory as with_queue
		with data.labgate.config.queue as {}
	not kueue.is_owned_by_queued_kind(pod) with input as pod_input(testdata.job_controller, pod)
		with data.inventory as with_queue
}

test_the_controller_owner_is_named_for_messages if {
	kueue.controller_owner_text(owned_by("ReplicaSet", "apps/v1")) == `ReplicaSet "owner"`
}
