# METADATA
# title: Kueue helpers
# description: |
#   Which tenants Kueue manages (the reconciler gives each a ClusterQueue of its GPU quota and a
#   LocalQueue `default_local_queue` in each of its namespaces), which objects Kueue queues there,
#   where each says it is suspended, and who Kueue's controller is. Reads data.labgate.config.queue:
#     managed_by_kueue  Kueue runs beside labgate: every tenant is managed (else only Tenants that
#                       set spec.queue);
#     default_local_queue  the LocalQueue labgate provisions in every namespace of such a tenant;
#     kueue_users       the user names Kueue's controller writes as (its exemptions are per field);
#     pod_integration   Kueue's pod integration is on: bare pods that ask GPUs or name a queue wait
#                       behind its scheduling gate (off: a bare GPU pod is refused, queue-bare-pod).
package labgate.lib.kueue

import data.labgate.lib.gpu
import data.labgate.lib.tenancy

_config := object.get(data.labgate.config, "queue", {})

queue_label := "kueue.x-k8s.io/queue-name"

admission_gate := gpu.kueue_admission_gate

priority_label := "kueue.x-k8s.io/priority-class"

default_queue := object.get(_config, "default_local_queue", "default")

# The LocalQueues a tenant owns in each of its namespaces (labgate provisions them).
owned_queues := {default_queue}

# The tenant of the request's namespace, when Kueue manages it: every tenant where Kueue runs beside
# labgate (config queue.managed_by_kueue, set with the reconciler's --kueue), and a Tenant that sets
# spec.queue (its queue's settings) in any case.
managed_tenant := tenant if {
	object.get(_config, "managed_by_kueue", false) == true
	tenant := tenancy.namespace_tenant
}

managed_tenant := tenant if {
	tenant := tenancy.namespace_tenant
	is_object(tenant.spec.queue)
}

# Kueue's controller, by user name: exempt for the fields it sets at admission, never wholesale.
is_kueue_controller if input.request.userInfo.username in object.get(_config, "kueue_users", [])

# Where each kind Kueue manages says it is suspended ([group, kind] -> path).
suspend_paths := {
	["batch", "Job"]: ["spec", "suspend"],
	["jobset.x-k8s.io", "JobSet"]: ["spec", "suspend"],
	["ray.io", "RayJob"]: ["spec", "suspend"],
	["ray.io", "RayCluster"]: ["spec", "suspend"],
	["trainer.kubeflow.org", "TrainJob"]: ["spec", "suspend"],
	["kubeflow.org", "PyTorchJob"]: ["spec", "runPolicy", "suspend"],
	["kubeflow.org", "TFJob"]: ["spec", "runPolicy", "suspend"],
	["kubeflow.org", "MPIJob"]: ["spec", "runPolicy", "suspend"],
	["kubeflow.org", "XGBoostJob"]: ["spec", "runPolicy", "suspend"],
	["kubeflow.org", "PaddleJob"]: ["spec", "runPolicy", "suspend"],
}

_kind := [input.request.kind.group, input.request.kind.kind]

is_pod if _kind == ["", "Pod"]

# The request's object is one of a kind Kueue suspends.
is_suspendable if suspend_paths[_kind]

# A controller-owned object whose owner Kueue queues (a JobSet's Jobs, a RayJob's RayCluster, a
# Job's pods) is admitted with its owner, never queued on its own. Only when a controller makes it:
# a member writes ownerReferences at will (a Job "owned" by one's own suspended JobSet would run
# unqueued), so what a member of the tenant creates is judged on its own.
_owned_by_queued_kind(obj) if {
	not _by_a_member
	_names_a_queued_owner(obj)
}

_by_a_member if tenancy.is_member(tenancy.namespace_tenant, input.request.userInfo)

_names_a_queued_owner(obj) if {
	some ref in object.get(obj, ["metadata", "ownerReferences"], [])
	object.get(ref, "controller", false) == true
	some key, _ in suspend_paths
	key[1] == ref.kind
	startswith(ref.apiVersion, _api_prefix(key[0]))
}

_api_prefix("batch") := "batch/"

_api_prefix(group) := sprintf("%s/", [group]) if group != "batch"

_has_controller(obj) if {
	not _by_a_member
	some ref in object.get(obj, ["metadata", "ownerReferences"], [])
	object.get(ref, "controller", false) == true
}

# The request's object must wait in the tenant's queue: a kind Kueue suspends (not one its queued
# owner made), or, with Kueue's pod integration, a pod that asks GPUs or names a queue and that no
# queued owner made: a bare pod (a pod a member creates is bare whatever owner it names) and the pod
# of a kind Kueue does not queue (a ReplicaSet's, a StatefulSet's), which Kueue's pod webhook gates
# as it gates a bare one (pkg/controller/jobs/pod: every pod whose controller is no integration of it).
is_queued(obj) if {
	is_suspendable
	not _owned_by_queued_kind(obj)
}

is_queued(obj) if {
	has_pod_integration
	is_pod
	not _owned_by_queued_kind(obj)
	_asks_gpus_or_names_a_queue(obj)
}

# Kueue's pod integration is on (config queue.pod_integration): bare pods queue behind its gate.
# Without it, a bare GPU pod has no queue to wait in (rules.queue refuses it: queue-bare-pod).
has_pod_integration if object.get(_config, "pod_integration", false) == true

# Kinds whose objects run nothing themselves but make objects Kueue queues (a CronJob's Jobs).
_runs_through_queued := {["batch", "CronJob"]}

# The request's object is a workload of a kind Kueue does not queue (a Deployment, StatefulSet,
# ReplicaSet, LeaderWorkerSet, Argo Workflow, ...): a kind of the workload catalog
# (data.labgate.workloads.kinds, generated from labgate/core/workload_catalog.py) that Kueue neither
# suspends nor reaches through the objects it makes. Its pods are queued only by Kueue's pod
# integration (has_pod_integration), which gates every pod whose owner Kueue does not manage.
is_unqueued_workload if {
	some k in data.labgate.workloads.kinds
	[k.group, k.kind] == _kind
	not suspend_paths[_kind]
	not _kind in _runs_through_queued
}

# A pod a controller made for an owner Kueue queues (a Job's pod): admitted with its owner.
is_owned_by_queued_kind(obj) if _owned_by_queued_kind(obj)

# The kind and name of an object's controller owner, for messages: ReplicaSet "web-5d8".
controller_owner_text(obj) := sprintf("%s %q", [ref.kind, ref.name]) if {
	some ref in object.get(obj, ["metadata", "ownerReferences"], [])
	object.get(ref, "controller", false) == true
}

# A pod no controller made (a member's pod is bare whatever owner it names).
is_bare_pod(obj) if {
	is_pod
	not _has_controller(obj)
}

asks_gpus if {
	some t in input.pod_templates
	gpu.template_demand[t.path].total > 0
}

_asks_gpus_or_names_a_queue(obj) if obj.metadata.labels[queue_label]

_asks_gpus_or_names_a_queue(_) if asks_gpus

queue_of(obj) := object.get(obj, ["metadata", "labels", queue_label], "")

is_suspended(obj) if object.get(obj, suspend_paths[_kind], false) == true

is_gated(obj) if gpu.is_behind_admission_gate(obj)
