# METADATA
# title: JSON Patch helpers for the mutations
# description: |
#   JSON pointers (RFC 6901) into input.request.object and the "add" operations the mutation packages
#   (data.labgate.mutations) build from them, with the few helpers they all use.
package labgate.lib.json_patch

import data.labgate.lib.gpu
import data.labgate.lib.tenancy

escape(token) := replace(replace(token, "~", "~0"), "/", "~1")

# "/spec/template/spec" for ["spec", "template", "spec"].
pointer_of(parts) := concat("", ["/", concat("/", [escape(p) | some p in parts])])

# "/spec/template/spec" for "spec.template.spec".
pointer(path) := concat("", ["/", concat("/", [escape(part) | some part in split(path, ".")])])

field_pointer(template, field) := concat("/", [pointer(template.path), escape(field)])

object_or_empty(value) := value if {
	is_object(value)
} else := {}

array_or_empty(value) := value if {
	is_array(value)
} else := []

# Add label key=value to the request's object, creating metadata.labels when it is missing.
label_op(labels, key, value) := {"op": "add", "path": "/metadata/labels", "value": {key: value}} if {
	not is_object(labels)
} else := {"op": "add", "path": concat("/", ["/metadata/labels", escape(key)]), "value": value}

# Warnings end up on one kubectl line.
short(text) := text if {
	count(text) < 120
} else := concat("", [substring(text, 0, 116), "..."])

# What a warning calls the template it changed.
subject(template) := "pod" if {
	gpu.is_pod
} else := sprintf("template %s", [template.path])

# The pod templates the mutations change, in order: on CREATE (a Job's template is immutable
# afterwards, and every pod is created, so creation is where defaults belong), in a tenant namespace.
# Templates labgate built from something else than a PodSpec (an Argo template, a TrainJob's trainer)
# are left alone: there is no field at their path to patch; their pods are mutated when created.
mutated_templates := [template |
	input.request.operation == "CREATE"
	tenancy.namespace_tenant
	some template in input.pod_templates
	not object.get(template, "synthesized", false)
]
