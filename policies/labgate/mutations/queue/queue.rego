# METADATA
# title: Kueue's queue label, suspension and scheduling gate
# description: |
#   Where Kueue manages the tenant (lib.kueue), an object Kueue queues, on CREATE, gets the label
#   kueue.x-k8s.io/queue-name: <config queue.default_local_queue> when it names no queue, starts
#   suspended (a Job's spec.suspend, a Kubeflow job's spec.runPolicy.suspend: Kueue unsuspends it
#   when admitted), and a bare pod gets Kueue's scheduling gate kueue.x-k8s.io/admission
#   (rules.queue refuses the rest). Gathered by labgate.mutation.
package labgate.mutations.queue

import data.labgate.lib.json_patch
import data.labgate.lib.kueue

# METADATA
# title: What a workload Kueue queues gets on creation
# description: |
#   The changes ({rule, ops, warning}) in order: the default LocalQueue label when it names none,
#   the suspension Kueue lifts when it admits the workload, and Kueue's scheduling gate on a bare
#   pod; only where Kueue manages the tenant.
changes := [change |
	input.request.operation == "CREATE"
	kueue.managed_tenant
	kueue.is_queued(input.request.object)
	some change in array.flatten([_queue_label_change, _suspend_change, _gate_change])
]

_queue_label_change := [{"rule": "queue-name", "ops": [op], "warning": warning} |
	labels := object.get(input.request.object, ["metadata", "labels"], null)
	not kueue.queue_label in object.keys(json_patch.object_or_empty(labels))
	op := json_patch.label_op(labels, kueue.queue_label, kueue.default_queue)
	warning := sprintf("labgate queued it in LocalQueue %q (%s)", [kueue.default_queue, kueue.queue_label])
]

_suspend_change := [{"rule": "queue-unsuspend", "ops": [op], "warning": ""} |
	kueue.is_suspendable
	not kueue.is_suspended(input.request.object)
	path := kueue.suspend_paths[[input.request.kind.group, input.request.kind.kind]]
	op := _suspend_op(path)
]

# spec.suspend, or spec.runPolicy.suspend (creating runPolicy when it is missing).
_suspend_op(path) := {"op": "add", "path": json_patch.pointer_of(path), "value": true} if {
	is_object(object.get(input.request.object, array.slice(path, 0, count(path) - 1), null))
} else := {
	"op": "add", "path": json_patch.pointer_of(array.slice(path, 0, count(path) - 1)),
	"value": {path[count(path) - 1]: true},
}

_gate_change := [{"rule": "queue-gate", "ops": [op], "warning": ""} |
	kueue.is_pod
	not kueue.is_gated(input.request.object)
	gates := object.get(input.request.object, ["spec", "schedulingGates"], null)
	op := _gate_op(gates)
]

_gate_op(gates) := {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": kueue.admission_gate}} if {
	is_array(gates)
} else := {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": kueue.admission_gate}]}
