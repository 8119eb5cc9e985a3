package labgate.mutations.queue_test

import data.labgate.lib.testdata
import data.labgate.mutations.queue

_kueue_inventory := json.patch(
	testdata.gpu_inventory,
	[{"op": "add", "path": "/tenants/vision/spec/queue", "value": {}}],
)

_job := testdata.job("sweep", 1, {}, {"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})]})

test_a_job_kueue_queues_gets_the_default_queue_and_starts_suspended if {
	changes := queue.changes with input as testdata.workload_input("Job", "vision", testdata.vera, _job)
		with data.inventory as _kueue_inventory
	[c.rule | some c in changes] == ["queue-name", "queue-unsuspend"]
	changes[0].ops == [{"op": "add", "path": "/metadata/labels", "value": {"kueue.x-k8s.io/queue-name": "default"}}]
	changes[1].ops == [{"op": "add", "path": "/spec/suspend", "value": true}]
}

test_nothing_changes_where_kueue_does_not_manage_the_tenant if {
	changes := queue.changes with input as testdata.workload_input("Job", "vision", testdata.vera, _job)
		with data.inventory as testdata.gpu_inventory
	changes == []
}
