# METADATA
# title: JSON Patch helpers for the mutations
# description: |
#   JSON pointers (RFC 6901) into input.request.object and the "add" operations the mutation packages
#   (data.labgate.mutations) build from them, with the few helpers they all use.
package labgate.lib.json_patch

import data.labgate.lib.gpu
import data.labgate.lib.tenancy

# METADATA
# title: A key as a JSON pointer token
# description: |
#   Escapes ~ and / in a map key or field name (RFC 6901), so a label such as labgate.io/pool can be
#   a step of a patch path.
escape(token) := replace(replace(token, "~", "~0"), "/", "~1")

# METADATA
# title: A JSON pointer from its steps
# description: |
#   The pointer a mutation patches at, from the list of steps to it: "/spec/template/spec" for
#   ["spec", "template", "spec"], each step escaped.
pointer_of(parts) := concat("", ["/", concat("/", [escape(p) | some p in parts])])

# METADATA
# title: A JSON pointer from a dotted template path
# description: |
#   The pointer to a pod template found in the request: "/spec/template/spec" for the dotted path
#   "spec.template.spec" the webhook gives each template.
pointer(path) := concat("", ["/", concat("/", [escape(part) | some part in split(path, ".")])])

# METADATA
# title: The pointer to a field of a pod template
# description: |
#   Where a mutation adds or replaces one field (nodeSelector, tolerations, volumes) of the pod spec
#   it changes.
field_pointer(template, field) := concat("/", [pointer(template.path), escape(field)])

# METADATA
# title: An object, or an empty one
# description: |
#   Reads a field a pod spec may leave out or set to null (nodeSelector, labels) as an object the
#   mutations can look keys up in.
object_or_empty(value) := value if {
	is_object(value)
} else := {}

# METADATA
# title: An array, or an empty one
# description: |
#   Reads a list a pod spec may leave out or set to null (tolerations, containers) as an array the
#   mutations can walk.
array_or_empty(value) := value if {
	is_array(value)
} else := []

# METADATA
# title: The patch that adds one label to the object
# description: |
#   Adds label key=value to the request's object, creating metadata.labels when it is missing (the
#   tenant label on a namespace, the Kueue queue label on a workload).
label_op(labels, key, value) := {"op": "add", "path": "/metadata/labels", "value": {key: value}} if {
	not is_object(labels)
} else := {"op": "add", "path": concat("/", ["/metadata/labels", escape(key)]), "value": value}

# METADATA
# title: A warning cut to one kubectl line
# description: |
#   Warnings end up on one kubectl line: a mutation's note of 120 characters or more is cut to 116
#   and ends with an ellipsis.
short(text) := text if {
	count(text) < 120
} else := concat("", [substring(text, 0, 116), "..."])

# METADATA
# title: What a warning calls the template it changed
# description: |
#   "pod" for a bare pod, else the template's path, so a researcher reading a mutation's warning
#   knows which template of a workload was changed.
subject(template) := "pod" if {
	gpu.is_pod
} else := sprintf("template %s", [template.path])

# METADATA
# title: The pod templates the mutations change
# description: |
#   In order, on CREATE only (a Job's template is immutable afterwards, and every pod is created, so
#   creation is where defaults belong) and in a tenant's namespace. Templates labgate built from
#   something other than a PodSpec (an Argo template, a TrainJob's trainer) are left alone: there is
#   no field at their path to patch; their pods are mutated when created.
mutated_templates := [template |
	input.request.operation == "CREATE"
	tenancy.namespace_tenant
	some template in input.pod_templates
	not object.get(template, "synthesized", false)
]
