# METADATA
# title: Every container of a tenant's pod pulls its image
# description: |
#   imagePullPolicy: Always on every container (containers, initContainers, ephemeralContainers)
#   of a Pod created in a tenant's namespace, where config always_pull_images is true (the default).
#   A node shared by tenants keeps every image it pulled: with IfNotPresent (the API's default for a
#   tagged image) or Never, the kubelet starts a container from an image another tenant pulled with
#   its own credentials, and never asks the registry whether this pod's may pull it. With Always it
#   asks, with the pod's pull secrets; a digest the node holds is not downloaded again. A
#   workload's pod templates get it too when the workload is created, so the pods its controller
#   makes are born pulling always (the mutating webhook is not called for a Job controller's pod
#   that needs nothing more: webhook.registration.settled_job_pod_expression); and an ephemeral
#   container kubectl debug adds to a tenant's pod (an UPDATE of pods/ephemeralcontainers,
#   `changes`). Silent (no warning: on every pod it would say the same); the record annotation
#   lists it. Gathered by labgate.mutation; rules.image_pull refuses what it did not set.
package labgate.mutations.image_pull

import data.labgate.lib.json_patch
import data.labgate.lib.tenancy

# Each mutated template's changes, by its path: [{"rule", "ops", "warning"}].
template_changes[template.path] := _pull_changes(template) if {
	object.get(data.labgate.config, "always_pull_images", true) == true
	some template in json_patch.mutated_templates
}

# METADATA
# title: The ephemeral containers kubectl debug adds pull always
# description: |
#   An ephemeral container added to a tenant's running pod (the pods/ephemeralcontainers
#   subresource, an UPDATE) pulls always too; the containers the pod had keep theirs.
changes := [{"rule": "image-pull-always", "ops": ops, "warning": ""} |
	input.request.operation == "UPDATE"
	input.request.subResource == "ephemeralcontainers"
	input.request.kind.kind == "Pod"
	object.get(data.labgate.config, "always_pull_images", true) == true
	tenancy.namespace_tenant
	ops := [{"op": "add", "path": _policy_pointer({"path": "spec"}, "ephemeralContainers", i), "value": "Always"} |
		some i, container in _ephemeral_now
		object.get(container, "imagePullPolicy", "") != "Always"
		not container.name in _ephemeral_before
	]
	count(ops) > 0
]

_ephemeral_now := json_patch.array_or_empty(object.get(input.request.object.spec, "ephemeralContainers", []))

_ephemeral_before contains container.name if {
	some container in object.get(input.request, ["oldObject", "spec", "ephemeralContainers"], [])
}

_pull_changes(template) := [{"rule": "image-pull-always", "ops": ops, "warning": ""} |
	ops := [{"op": "add", "path": _policy_pointer(template, group, i), "value": "Always"} |
		some group in ["initContainers", "containers", "ephemeralContainers"]
		some i, container in json_patch.array_or_empty(object.get(template.spec, group, []))
		object.get(container, "imagePullPolicy", "") != "Always"
	]
	count(ops) > 0
]

_policy_pointer(template, group, i) := sprintf(
	"%s/%s/%d/imagePullPolicy",
	[json_patch.pointer(template.path), group, i],
)
