# METADATA
# title: labgate mutations
# description: |
#   What the mutating webhook changes before the validating webhook decides: `patch`, a JSON Patch
#   (RFC 6902, "add" operations with whole values, pointers into input.request.object, parents before
#   children) and `warnings`, one short line per change for kubectl. The patch is idempotent: applied
#   to its own result it is empty, so the webhook may be invoked again safely.
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
#     - where Kueue manages the tenant (lib.kueue), an object Kueue queues gets the label
#       kueue.x-k8s.io/queue-name: <config queue.default_local_queue> when it names no queue, starts
#       suspended (a Job's spec.suspend, a Kubeflow job's spec.runPolicy.suspend: Kueue unsuspends it
#       when admitted), and a bare pod gets Kueue's scheduling gate kueue.x-k8s.io/admission;
#     - priorityClassName: config default_priority_class where none is named. Not on a pod whose
#       spec.priority is already resolved (the Priority admission plugin runs before webhooks, so on a
#       bare Pod): adding a class then would contradict that priority and the apiserver refuses it.
package labgate.mutation

import data.labgate.lib.gpu
import data.labgate.lib.gpu_text
import data.labgate.lib.kueue
import data.labgate.lib.node_pools
import data.labgate.lib.tenancy
import data.labgate.rules.gpu_quota

patch := array.concat(changes_patch, _record_ops)

# The changes themselves, without the record of them (what the Rego tests compare).
changes_patch := [op | some change in _changes; some op in change.ops]

warnings := [_short(change.warning) | some change in _changes; change.warning != ""]

# Every change as {"rule", "ops", "warning"}: the namespace's label, then each pod template's in order.
# Templates labgate built from something else than a PodSpec (an Argo template, a TrainJob's trainer)
# are left alone: there is no field at their path to patch; their pods are mutated when created.
_changes := array.concat(array.concat(_namespace_changes, _queue_changes), [change |
	some change in _template_change_list
])

_template_change_list := [object.union(change, {"template": template.path}) |
	input.request.operation == "CREATE"
	tenant := tenancy.namespace_tenant
	some template in input.pod_templates
	not object.get(template, "synthesized", false)
	some change in _template_changes(tenant, template)
]

# --- The record: every change labgate made, on the object itself ---

# Annotation record_annotation on the object lists every patch and the mutation that made it, as
# compact JSON ([{"rule", "op", "path"}], like Kyverno's last-applied-patches), so `kubectl get -o
# yaml` explains why a pod landed on a pool. A workload's pod templates get the record of their own
# changes too, so the pods made from them carry it. A namespace's label is not recorded (the label
# says it, and labgate.io/ annotations on namespaces are for their admins to change).
record_annotation := "labgate.io/mutations"

_record(changes) := json.marshal([{"rule": c.rule, "op": op.op, "path": op.path} |
	some c in changes
	some op in c.ops
])

_ops_of(changes) := [op | some c in changes; some op in c.ops]

_record_ops := array.concat(
	[op | count(_ops_of(_template_change_list)) > 0; some op in _annotation_ops([], _object_annotations)],
	[op |
		not gpu.is_pod
		some template in input.pod_templates
		mine := [c | some c in _template_change_list; c.template == template.path]
		count(_ops_of(mine)) > 0
		some op in _annotation_ops(_metadata_parts(template), {record_annotation: _record(mine)})
	],
)

# --- Warnings said when the object is admitted ---

# The template changes' warnings ("labgate placed pod on spot pool ...") describe an object that
# exists only if the validating webhook admits it: the mutating webhook's warnings reach kubectl
# even when the request is then refused. So, when the patch changes the object anyway, they travel
# on it in annotation warnings_annotation (a JSON list of lines), and the validating webhook says
# them when it admits a CREATE (webhook.admission.build_response). `warnings_now` are those the
# mutating webhook says itself: a namespace's label, and warnings of a request it does not change.
warnings_annotation := "labgate.io/mutation-warnings"

_is_carried if count(_ops_of(_template_change_list)) > 0

_carried_warnings := [_short(c.warning) | _is_carried; some c in _template_change_list; c.warning != ""]

_object_annotations := object.union(
	{record_annotation: _record(_template_change_list)},
	{warnings_annotation: json.marshal(_carried_warnings) | count(_carried_warnings) > 0},
)

warnings_now := [_short(c.warning) | some c in _namespace_changes; c.warning != ""] if {
	_is_carried
} else := warnings

# ["spec", "template"] for a template at "spec.template.spec": where its metadata sits.
_metadata_parts(template) := array.slice(parts, 0, count(parts) - 1) if parts := split(template.path, ".")

# Add the annotations (key -> value) at <parts>/metadata, creating what is missing (a parent before
# its child).
_annotation_ops(parts, values) := [{"op": "add", "path": _pointer_of(array.concat(parts, ["metadata"])), "value": {"annotations": values}}] if {
	not is_object(object.get(input.request.object, array.concat(parts, ["metadata"]), null))
} else := [{"op": "add", "path": _pointer_of(array.concat(parts, ["metadata", "annotations"])), "value": values}] if {
	not is_object(object.get(input.request.object, array.concat(parts, ["metadata", "annotations"]), null))
} else := [{"op": "add", "path": _pointer_of(array.concat(parts, ["metadata", "annotations", key])), "value": value} |
	some key in sort(object.keys(values))
	value := values[key]
]

_pointer_of(parts) := concat("", ["/", concat("/", [_escape(p) | some p in parts])])

_template_changes(tenant, template) := array.concat(
	array.concat(
		array.concat(_placement_changes(tenant, template), _automount_changes(tenant, template)),
		_priority_changes(template),
	),
	array.concat(
		array.concat(_pinning_changes(tenant, template), _volume_pinning_changes(tenant, template)),
		_preemptible_changes(tenant, template),
	),
)

# --- JSON pointers ---

_escape(token) := replace(replace(token, "~", "~0"), "/", "~1")

# "/spec/template/spec" for "spec.template.spec".
_pointer(path) := concat("", ["/", concat("/", [_escape(part) | some part in split(path, ".")])])

_field_pointer(template, field) := concat("/", [_pointer(template.path), _escape(field)])

_object(value) := value if {
	is_object(value)
} else := {}

_array(value) := value if {
	is_array(value)
} else := []

# Warnings end up on one kubectl line.
_short(text) := text if {
	count(text) < 120
} else := concat("", [substring(text, 0, 116), "..."])

_subject(template) := "pod" if {
	gpu.is_pod
} else := sprintf("template %s", [template.path])

# --- Namespace: the tenant label ---

_is_namespace_create if {
	input.request.kind.kind == "Namespace"
	input.request.kind.group == ""
	input.request.operation == "CREATE"
}

_namespace_name := object.get(input.request, ["object", "metadata", "name"], "")

_prefix_tenants := {name |
	some name, tenant in data.inventory.tenants
	prefix := object.get(tenant, ["spec", "namespaces", "prefix"], "")
	prefix != ""
	startswith(_namespace_name, prefix)
}

_namespace_changes := [{"rule": "namespace-label", "ops": [op], "warning": warning} |
	_is_namespace_create
	not tenancy.is_trusted_requester
	count(_prefix_tenants) == 1
	some name in _prefix_tenants
	tenancy.is_listed_member(data.inventory.tenants[name], input.request.userInfo)
	labels := object.get(input.request.object, ["metadata", "labels"], null)
	not tenancy.tenant_label in object.keys(_object(labels))
	op := _label_op(labels, name)
	warning := sprintf("labgate labelled namespace %q %s=%s", [_namespace_name, tenancy.tenant_label, name])
]

# --- Kueue: a queued object waits in the tenant's queue (rules.queue refuses the rest) ---

_queue_changes := [change |
	input.request.operation == "CREATE"
	kueue.managed_tenant
	kueue.is_queued(input.request.object)
	some change in array.concat(array.concat(_queue_label_change, _suspend_change), _gate_change)
]

_queue_label_change := [{"rule": "queue-name", "ops": [op], "warning": warning} |
	labels := object.get(input.request.object, ["metadata", "labels"], null)
	not kueue.queue_label in object.keys(_object(labels))
	op := _label_op_of(labels, kueue.queue_label, kueue.default_queue)
	warning := sprintf("labgate queued it in LocalQueue %q (%s)", [kueue.default_queue, kueue.queue_label])
]

_suspend_change := [{"rule": "queue-unsuspend", "ops": [op], "warning": ""} |
	kueue.is_suspendable
	not kueue.is_suspended(input.request.object)
	path := kueue.suspend_paths[[input.request.kind.group, input.request.kind.kind]]
	op := _suspend_op(path)
]

# spec.suspend, or spec.runPolicy.suspend (creating runPolicy when it is missing).
_suspend_op(path) := {"op": "add", "path": _pointer_of(path), "value": true} if {
	is_object(object.get(input.request.object, array.slice(path, 0, count(path) - 1), null))
} else := {"op": "add", "path": _pointer_of(array.slice(path, 0, count(path) - 1)), "value": {path[count(path) - 1]: true}}

_gate_change := [{"rule": "queue-gate", "ops": [op], "warning": ""} |
	kueue.is_pod
	not kueue.is_gated(input.request.object)
	gates := object.get(input.request.object, ["spec", "schedulingGates"], null)
	op := _gate_op(gates)
]

_gate_op(gates) := {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": kueue.admission_gate}} if {
	is_array(gates)
} else := {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": kueue.admission_gate}]}

_label_op_of(labels, key, value) := {"op": "add", "path": "/metadata/labels", "value": {key: value}} if {
	not is_object(labels)
} else := {"op": "add", "path": concat("/", ["/metadata/labels", _escape(key)]), "value": value}

_label_op(labels, name) := {"op": "add", "path": "/metadata/labels", "value": {tenancy.tenant_label: name}} if {
	not is_object(labels)
} else := {"op": "add", "path": concat("/", ["/metadata/labels", _escape(tenancy.tenant_label)]), "value": name}

# --- GPU placement: node pool and model ---

_selector(template) := _object(object.get(template.spec, "nodeSelector", {}))

# The pool labgate places a GPU template on: only when it selects none itself.
_pool(tenant, template) := pool if {
	gpu.template_demand[template.path].total > 0
	not node_pools.node_pool_label in object.keys(_selector(template))
	pool := node_pools.default_pool(tenant, template)
}

_pool_selector(tenant, template) := {key: value |
	some key, value in _object(object.get(_pool(tenant, template), "nodeSelector", {}))
	not key in object.keys(_selector(template))
}

# The tenant's one model, for a template that asks whole GPUs of none and gets no model from its pool.
_model_selector(tenant, template) := {gpu.model_label: model |
	models := object.keys(_object(object.get(tenant, ["spec", "gpu", "models"], {})))
	count(models) == 1
	some model in models
	not gpu.is_mig_model(model)
	some ask in gpu.template_asks[template.path]
	ask.model == gpu.unspecified_model
	not gpu.model_label in object.keys(_pool_selector(tenant, template))
}

_selector_ops(template, additions) := [] if {
	count(additions) == 0
} else := [{"op": "add", "path": _field_pointer(template, "nodeSelector"), "value": additions}] if {
	not is_object(object.get(template.spec, "nodeSelector", null))
} else := [{"op": "add", "path": concat("/", [_field_pointer(template, "nodeSelector"), _escape(key)]), "value": additions[key]} |
	some key in sort(object.keys(additions))
]

_missing_tolerations(tenant, template) := [toleration |
	some toleration in _array(object.get(_pool(tenant, template), "tolerations", []))
	not _has_toleration(template, toleration)
]

_has_toleration(template, toleration) if {
	some existing in _array(object.get(template.spec, "tolerations", []))
	node_pools.same_toleration(existing, toleration)
}

_toleration_ops(template, missing) := [] if {
	count(missing) == 0
} else := [{"op": "add", "path": _field_pointer(template, "tolerations"), "value": missing}] if {
	not is_array(object.get(template.spec, "tolerations", null))
} else := [{"op": "add", "path": concat("/", [_field_pointer(template, "tolerations"), "-"]), "value": t} | some t in missing]

_pool_kind(pool) := "spot" if {
	object.get(pool, "spot", false) == true
} else := "on-demand"

# One change with the ops (the pool's and the model's selectors go into one nodeSelector), and one
# without ops for each warning.
_placement_changes(tenant, template) := array.concat(
	[{"rule": "placement", "ops": ops, "warning": ""} |
		ops := array.concat(
			_selector_ops(template, object.union(_pool_selector(tenant, template), _model_selector(tenant, template))),
			_toleration_ops(template, _missing_tolerations(tenant, template)),
		)
		count(ops) > 0
	],
	[{"rule": "placement", "ops": [], "warning": warning} |
		some warning in [_pool_warning(tenant, template), _model_warning(tenant, template)]
		warning != ""
	],
)

_pool_warning(tenant, template) := sprintf("labgate placed %s on %s pool %q", [_subject(template), _pool_kind(pool), pool.name]) if {
	count(_pool_selector(tenant, template)) + count(_missing_tolerations(tenant, template)) > 0
	pool := _pool(tenant, template)
} else := ""

_model_warning(tenant, template) := sprintf("labgate selected GPU model %q (%s) for %s", [model, gpu.model_label, _subject(template)]) if {
	model := _model_selector(tenant, template)[gpu.model_label]
} else := ""

# --- Service-account token automount ---

_runs_as(spec) := name if {
	name := object.get(spec, "serviceAccountName", "")
	is_string(name)
	name != ""
} else := name if {
	name := object.get(spec, "serviceAccount", "")
	is_string(name)
	name != ""
} else := "default"

_keeps_token(tenant, spec) if _runs_as(spec) in object.get(tenant, ["spec", "secrets", "automountServiceAccountToken"], [])

_automount_changes(tenant, template) := [{"rule": "token-automount", "ops": ops, "warning": warning} |
	not is_boolean(object.get(template.spec, "automountServiceAccountToken", null))
	not _keeps_token(tenant, template.spec)
	ops := array.concat(
		[{"op": "add", "path": _field_pointer(template, "automountServiceAccountToken"), "value": false}],
		_token_volume_ops(template),
	)
	warning := sprintf("labgate turned off token automount (service account %q) for %s", [_runs_as(template.spec), _subject(template)])
]

# The token volume the ServiceAccount admission plugin adds to a Pod: kube-api-access-<random>,
# projected from a serviceAccountToken.
_is_token_volume(volume) if {
	startswith(volume.name, "kube-api-access-")
	some source in volume.projected.sources
	is_object(source.serviceAccountToken)
}

_token_volumes(template) := {volume.name |
	gpu.is_pod
	some volume in _array(object.get(template.spec, "volumes", []))
	_is_token_volume(volume)
}

_token_volume_ops(template) := [] if {
	count(_token_volumes(template)) == 0
} else := array.concat(
	[{"op": "add", "path": _field_pointer(template, "volumes"), "value": [v |
		some v in template.spec.volumes
		not v.name in _token_volumes(template)
	]}],
	[{"op": "add", "path": sprintf("%s/%s/%d/volumeMounts", [_pointer(template.path), group, i]), "value": [m |
		some m in container.volumeMounts
		not m.name in _token_volumes(template)
	]} |
		some group in ["initContainers", "containers"]
		some i, container in _array(object.get(template.spec, group, []))
		_mounts_token(container, _token_volumes(template))
	],
)

_mounts_token(container, names) if {
	some m in _array(object.get(container, "volumeMounts", []))
	m.name in names
}

# --- Priority class ---

_default_priority_class := object.get(data.labgate.config, "default_priority_class", "")

_priority_changes(template) := [{"rule": "priority-class", "ops": [op], "warning": warning} |
	_default_priority_class != ""
	object.get(template.spec, "priorityClassName", "") in {"", null}
	object.get(template.spec, "priority", null) == null
	op := {"op": "add", "path": _field_pointer(template, "priorityClassName"), "value": _default_priority_class}
	warning := sprintf("labgate set priorityClassName %q on %s", [_default_priority_class, _subject(template)])
]

# --- Beyond GPU quota, as preemptible ---

# A pod that waits behind Kueue's admission gate (it carries it, or this mutation gates it) runs when
# Kueue admits it, not now: what the tenant uses now says nothing about its quota then, and it holds
# no GPUs until then (lib.gpu.reserved_pod_template).
_waits_behind_admission_gate if gpu.is_behind_admission_gate(input.request.object)

_waits_behind_admission_gate if {
	kueue.is_pod
	count(_queue_changes) > 0 # a queued pod: gated by _gate_change when it is not already
}

# A tenant with spec.gpu.overQuota: preemptible gets a GPU pod that would exceed its quota admitted
# at the preemptible priority (input.gpu_usage is the tenant's usage). The Priority admission plugin
# has already resolved spec.priority on the Pod, so the class and its value are set together.
_preemptible_changes(tenant, template) := [{"rule": "gpu-preemptible", "ops": ops, "warning": warning} |
	gpu.is_pod
	template.path == "spec"
	not _waits_behind_admission_gate
	tenant.spec.gpu.overQuota == "preemptible"
	d := gpu.template_demand[template.path]
	d.total > 0
	gpu_quota.exceeds(tenant, d)
	label := data.labgate.config.preemptible_label
	object.get(template.metadata, ["labels", label], "") != "true"
	class := data.labgate.config.preemptible_priority_class
	labels := object.union(_object(object.get(template.metadata, "labels", {})), {label: "true"})
	ops := [
		{"op": "add", "path": "/metadata/labels", "value": labels},
		{"op": "add", "path": "/spec/priorityClassName", "value": class},
		{"op": "add", "path": "/spec/priority", "value": data.labgate.config.preemptible_priority_value},
	]

	# The rule and the numbers, under 120 characters: "[gpu-preemptible] asks 8 GPUs, uses 12 of 16 GPUs
	# (h100: 4 of 8): admitted as preemptible, may be evicted".
	warning := sprintf(
		"[gpu-preemptible] asks %s, uses %s: admitted as preemptible, may be evicted",
		[gpu_text.plural(d.total, "GPU"), gpu_quota.overrun_text(tenant, d)],
	)
]

# --- Image digests ---

# Each image the webhook resolved (input.images[ref].pinned, for tenants with spec.images) runs by
# digest: what was checked is what runs, even if the tag moves later. A tenant that requires images
# to come pinned (spec.images.requireDigest) gets a refusal (image-digest) instead of a rewrite.
_pins(tenant, template) := [{"rule": "image-digest-pin", "ops": [op], "warning": warning} |
	not tenant.spec.images.requireDigest
	some field in ["containers", "initContainers", "ephemeralContainers"]
	some i, container in _array(object.get(template.spec, field, []))
	pinned := input.images[container.image].pinned
	is_string(pinned)
	pinned != container.image
	op := {"op": "add", "path": sprintf("%s/%d/image", [_field_pointer(template, field), i]), "value": pinned}
	warning := sprintf("labgate pinned %s to %s", [container.image, substring(split(pinned, "@")[1], 0, 19)])
]

_pinning_changes(tenant, template) := array.concat(_pins(tenant, template), _unpinned(tenant, template))

# A tag labgate could not resolve (its registry did not answer) runs as written: said, not refused.
# Not where a signature is required: that image is refused [image-unverifiable] instead.
_unpinned(tenant, template) := [{"rule": "image-digest-pin", "ops": [], "warning": warning} |
	not tenant.spec.images.requireDigest
	not _requires_signature(tenant)
	some field in ["containers", "initContainers", "ephemeralContainers"]
	some container in _array(object.get(template.spec, field, []))
	fact := input.images[container.image]
	is_string(fact.error)
	is_string(fact.registry)
	warning := sprintf("labgate did not pin %s (no digest from its registry): it runs by tag as written", [container.image])
]

_requires_signature(tenant) if tenant.spec.images.requireSignature == true

_requires_signature(tenant) if count(object.get(tenant.spec.images, "signingKeys", [])) > 0

# Image volumes (spec.volumes[].image.reference) are pinned like containers' images.
_volume_pinning_changes(tenant, template) := [{"rule": "image-digest-pin", "ops": [op], "warning": warning} |
	not tenant.spec.images.requireDigest
	some i, volume in _array(object.get(template.spec, "volumes", []))
	reference := volume.image.reference
	pinned := input.images[reference].pinned
	is_string(pinned)
	pinned != reference
	op := {"op": "add", "path": sprintf("%s/%d/image/reference", [_field_pointer(template, "volumes"), i]), "value": pinned}
	warning := sprintf("labgate pinned %s to %s", [reference, substring(split(pinned, "@")[1], 0, 19)])
]

# Whether the patch depends on input.gpu_usage: only for a tenant whose GPU pods beyond quota are
# admitted as preemptible. The webhook reuses a mutation for an identical pod created moments later
# (a Job's copies) only at the same usage when it does.
default reads_gpu_usage := false

reads_gpu_usage if tenancy.namespace_tenant.spec.gpu.overQuota == "preemptible"

# Tells the webhook whether OPA still holds the inventory it pushed (null after a policy reload).
inventory_revision := data.inventory.revision

default inventory_revision := null
