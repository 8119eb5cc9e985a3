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

# METADATA
# title: The label that names a Kueue LocalQueue
# description: |
#   The label (kueue.x-k8s.io/queue-name) by which a workload names the LocalQueue it waits in;
#   the mutation sets it to the tenant's queue.
queue_label := "kueue.x-k8s.io/queue-name"

# METADATA
# title: Kueue's admission scheduling gate
# description: |
#   The gate Kueue puts on the pods it queues, named here for the queue rules (lib.gpu owns the
#   value): only Kueue may remove it from a tenant's pods.
admission_gate := gpu.kueue_admission_gate

# METADATA
# title: The label that names a Kueue priority class
# description: |
#   The label (kueue.x-k8s.io/priority-class) by which a workload asks a WorkloadPriorityClass for
#   its place in the tenant's queue.
priority_label := "kueue.x-k8s.io/priority-class"

# METADATA
# title: The LocalQueue labgate provisions per namespace
# description: |
#   The name of the LocalQueue labgate provisions in each namespace of a Kueue-managed tenant
#   (config queue.default_local_queue, "default" when unset).
default_queue := object.get(_config, "default_local_queue", "default")

# METADATA
# title: The LocalQueues a tenant owns
# description: |
#   The LocalQueues a tenant owns in each of its namespaces, which labgate provisions; a workload
#   may name only these.
owned_queues := {default_queue}

# METADATA
# scope: document
# title: The tenant whose workloads Kueue queues
# description: |
#   The tenant of the request's namespace when Kueue manages it: every tenant where Kueue runs
#   beside labgate (config queue.managed_by_kueue, the reconciler's --kueue), and any Tenant that sets
#   spec.queue.
managed_tenant := tenant if {
	object.get(_config, "managed_by_kueue", false) == true
	tenant := tenancy.namespace_tenant
}

managed_tenant := tenant if {
	tenant := tenancy.namespace_tenant
	is_object(tenant.spec.queue)
}

# METADATA
# title: The request comes from Kueue's controller
# description: |
#   Whether the requester is Kueue's controller (config queue.kueue_users): exempt for the fields
#   it sets at admission, never wholesale.
is_kueue_controller if input.request.userInfo.username in object.get(_config, "kueue_users", [])

# METADATA
# title: Where each queued kind says it is suspended
# description: |
#   The field by which each kind Kueue manages says it is suspended, [group, kind] -> path: where
#   Kueue holds a workload until its ClusterQueue has the quota.
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

# METADATA
# title: The request is for a Pod
# description: |
#   Whether the admission request's kind is a Pod, which Kueue queues only through its pod
#   integration.
is_pod if _kind == ["", "Pod"]

# METADATA
# title: The request's kind is one Kueue suspends
# description: |
#   Whether the request's object is of a kind Kueue holds suspended until its ClusterQueue admits
#   it (a Job, JobSet, RayJob, a Kubeflow job).
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

# METADATA
# scope: document
# title: An object that must wait in the tenant's queue
# description: |
#   A kind Kueue suspends (not one its queued owner made), or, with Kueue's pod integration, a pod
#   asking GPUs or naming a queue that no queued owner made: a bare pod, or the pod of a kind Kueue does
#   not queue (a ReplicaSet's), which Kueue's pod webhook gates as it gates a bare one.
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

# METADATA
# title: Kueue's pod integration is on
# description: |
#   Whether Kueue queues bare pods behind its gate (config queue.pod_integration). Without it a
#   bare GPU pod has no queue to wait in, and rules.queue refuses it (queue-bare-pod).
has_pod_integration if object.get(_config, "pod_integration", false) == true

# Kinds whose objects run nothing themselves but make objects Kueue queues (a CronJob's Jobs).
_runs_through_queued := {["batch", "CronJob"]}

# METADATA
# title: A workload of a kind Kueue does not queue
# description: |
#   A kind of the workload catalog (a Deployment, StatefulSet, LeaderWorkerSet, ...) that Kueue
#   neither suspends nor reaches through the objects it makes: its pods wait in the tenant's queue
#   only through Kueue's pod integration.
is_unqueued_workload if {
	some k in data.labgate.workloads.kinds
	[k.group, k.kind] == _kind
	not suspend_paths[_kind]
	not _kind in _runs_through_queued
}

# METADATA
# title: An object made for an owner Kueue queues
# description: |
#   An object a controller made for an owner Kueue queues (a Job's pod, a JobSet's Job): admitted
#   with its owner, never queued on its own.
is_owned_by_queued_kind(obj) if _owned_by_queued_kind(obj)

# METADATA
# title: An object's controller owner, for messages
# description: |
#   The kind and name of the controller that owns an object, as a denial names it: ReplicaSet
#   "web-5d8".
controller_owner_text(obj) := sprintf("%s %q", [ref.kind, ref.name]) if {
	some ref in object.get(obj, ["metadata", "ownerReferences"], [])
	object.get(ref, "controller", false) == true
}

# METADATA
# title: A bare pod
# description: |
#   A Pod no controller made, which Kueue can queue only through its pod integration (a member's
#   pod is bare whatever owner it names).
is_bare_pod(obj) if {
	is_pod
	not _has_controller(obj)
}

# METADATA
# title: The request asks GPUs
# description: |
#   Whether any of the request's pod templates asks GPUs, which makes a bare pod one Kueue must
#   queue against the tenant's quota.
asks_gpus if {
	some t in input.pod_templates
	gpu.template_demand[t.path].total > 0
}

_asks_gpus_or_names_a_queue(obj) if obj.metadata.labels[queue_label]

_asks_gpus_or_names_a_queue(_) if asks_gpus

# METADATA
# title: The LocalQueue an object names
# description: |
#   The LocalQueue an object names in its queue label, or "" when it names none.
queue_of(obj) := object.get(obj, ["metadata", "labels", queue_label], "")

# METADATA
# title: An object Kueue holds suspended
# description: |
#   Whether an object of a kind Kueue manages says it is suspended, as Kueue keeps it until the
#   tenant's ClusterQueue admits it.
is_suspended(obj) if object.get(obj, suspend_paths[_kind], false) == true

# METADATA
# title: A pod behind Kueue's gate
# description: |
#   Whether a pod carries Kueue's admission scheduling gate, so it waits in the tenant's queue and
#   holds no GPUs yet.
is_gated(obj) if gpu.is_behind_admission_gate(obj)
