# METADATA
# title: labgate mutations
# entrypoint: true
# description: |
#   What the mutating webhook changes before the validating webhook decides: `patch`, a JSON Patch
#   (RFC 6902, "add" operations with whole values, pointers into input.request.object, parents before
#   children) and `warnings`, one short line per change for kubectl. The patch is idempotent: applied
#   to its own result it is empty, so the webhook may be invoked again safely.
#
#   Each concern is a package under data.labgate.mutations (policies/labgate/mutations/<concern>),
#   gathered here as admission gathers data.labgate.rules: an object's changes (`changes`) and each
#   pod template's (`template_changes[path]`), then the record of them (mutations.record). Unlike
#   the validations' set of findings, a patch is a list: the concerns are taken in the order written
#   below, which is the order of the patch.
#
#   - A Namespace created by a listed member of the one tenant whose spec.namespaces.prefix its name
#     starts with gets that tenant's label (config tenant_label).
#   - In a tenant namespace, on CREATE (a Job's template is immutable afterwards, and every pod is
#     created, so creation is where defaults belong):
#     - a GPU pod template that selects no node pool is placed on the tenant's first spot pool that
#       has the GPU model it asks (or, when it asks on-demand capacity and the Tenant allows it, the
#       first such pool that is not spot; lib.node_pools.default_pool): the pool's nodeSelector is
#       merged in (keys the template sets are kept) and its missing tolerations are appended. Where
#       no pool has the model, nothing is placed and rules.placement refuses the pod. Pods without
#       GPUs are never placed: they run on shared nodes;
#     - a template asking whole GPUs with no model selector, in a tenant that lists exactly one
#       (non-MIG) model, selects that model;
#     - automountServiceAccountToken: false where the spec does not say, unless the pod runs as a
#       service account the Tenant lists in spec.secrets.automountServiceAccountToken. On a Pod the
#       ServiceAccount admission plugin has already mounted the token by then, so its volume
#       (kube-api-access-*) and mounts are taken out too, or the token would stay mounted;
#     - imagePullPolicy: Always on every container of a Pod (config always_pull_images): a shared
#       node's image cache holds other tenants' private images (mutations.image_pull); on UPDATE,
#       on an ephemeral container kubectl debug adds to a tenant's pod;
#     - where Kueue manages the tenant (lib.kueue), an object Kueue queues gets the label
#       kueue.x-k8s.io/queue-name: <config queue.default_local_queue> when it names no queue, starts
#       suspended (a Job's spec.suspend, a Kubeflow job's spec.runPolicy.suspend: Kueue unsuspends it
#       when admitted), and a bare pod gets Kueue's scheduling gate kueue.x-k8s.io/admission;
#     - priorityClassName: config default_priority_class where none is named. Not on a pod whose
#       spec.priority is already resolved (the Priority admission plugin runs before webhooks, so on a
#       bare Pod): adding a class then would contradict that priority and the apiserver refuses it.
package labgate.mutation

import data.labgate.lib.json_patch
import data.labgate.lib.tenancy
import data.labgate.mutations.record

# The concerns that change the object itself, then those that change each pod template, in order.
_object_concerns := ["namespace_label", "queue", "image_pull"]

_template_concerns := ["placement", "token_automount", "image_pull", "priority_class", "image_pinning", "preemptible"]

# METADATA
# title: The JSON Patch the mutating webhook returns
# description: |
#   Every concern's changes, the object's then each pod template's, followed by the annotations that
#   record the template changes on the object, so its pods carry why labgate changed them.
patch := array.concat(changes_patch, record.ops(_template_change_list))

# METADATA
# title: The changes themselves, without the record of them
# description: |
#   The operations of every concern in order, what the Rego tests compare; patch adds the record
#   annotations to these.
changes_patch := [op | some change in _changes; some op in change.ops]

# METADATA
# title: One short kubectl line per change
# description: |
#   What the mutations tell the researcher they changed (a pool placed on, a model selected, a token
#   unmounted), each cut to one kubectl line.
warnings := [json_patch.short(change.warning) | some change in _changes; change.warning != ""]

# Every change as {"rule", "ops", "warning"}: the object's (the namespace's label, Kueue's), then
# each pod template's in order.
_changes := array.concat(_object_change_list, _template_change_list)

_object_change_list := [change |
	some concern in _object_concerns
	some change in data.labgate.mutations[concern].changes
]

_namespace_changes := data.labgate.mutations.namespace_label.changes

_template_change_list := [object.union(change, {"template": template.path}) |
	some template in json_patch.mutated_templates
	some concern in _template_concerns
	some change in data.labgate.mutations[concern].template_changes[template.path]
]

# METADATA
# title: The warnings the mutating webhook says itself
# description: |
#   The template changes' warnings travel on the object when the patch changes it anyway
#   (mutations.record), and the validating webhook says them when it admits; these are the rest: a
#   namespace's label, and the warnings of a request the patch does not change.
warnings_now := [json_patch.short(c.warning) | some c in _namespace_changes; c.warning != ""] if {
	record.is_carried(_template_change_list)
} else := warnings

# METADATA
# scope: document
# title: Whether the patch depends on the tenant's GPU usage
# description: |
#   Only for a tenant whose GPU pods beyond quota are admitted as preemptible. The webhook reuses a
#   mutation for an identical pod created moments later (a Job's copies) only at the same usage when
#   it does.
default reads_gpu_usage := false

reads_gpu_usage if tenancy.namespace_tenant.spec.gpu.overQuota == "preemptible"

# METADATA
# scope: document
# title: Which copy of the tenants OPA mutated with
# description: |
#   Tells the mutating webhook whether OPA still holds the inventory it pushed: null after a policy
#   reload, when OPA has dropped the pushed data.
default inventory_revision := null

inventory_revision := data.inventory.revision
