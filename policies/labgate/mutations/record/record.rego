# METADATA
# title: The record of the mutations, on the object
# description: |
#   Annotation labgate.io/mutations on the object lists every patch and the mutation that made it, as
#   compact JSON ([{"rule", "op", "path"}], like Kyverno's last-applied-patches), so `kubectl get -o
#   yaml` explains why a pod landed on a pool. A workload's pod templates get the record of their own
#   changes too, so the pods made from them carry it. A namespace's label is not recorded (the label
#   says it, and labgate.io/ annotations on namespaces are for their admins to change).
#
#   The template changes' warnings ("labgate placed pod on spot pool ...") describe an object that
#   exists only if the validating webhook admits it: the mutating webhook's warnings reach kubectl
#   even when the request is then refused. So, when the patch changes the object anyway, they travel
#   on it in annotation labgate.io/mutation-warnings (a JSON list of lines), and the validating webhook says
#   them when it admits a CREATE (webhook.admission.build_response). labgate.mutation calls these
#   functions with the template changes it gathered ([{"rule", "ops", "warning", "template"}]).
package labgate.mutations.record

import data.labgate.lib.gpu
import data.labgate.lib.json_patch

_record_annotation := "labgate.io/mutations"

_warnings_annotation := "labgate.io/mutation-warnings"

_record(changes) := json.marshal([{"rule": c.rule, "op": op.op, "path": op.path} |
	some c in changes
	some op in c.ops
])

_ops_of(changes) := [op | some c in changes; some op in c.ops]

# METADATA
# title: The patch operations that record the template changes
# description: |
#   Writes the record of `changes` (and the warnings carried to the validating webhook) on the
#   object, and each template's own record on that template, so the pods made from it carry it.
ops(changes) := array.concat(
	[op | count(_ops_of(changes)) > 0; some op in _annotation_ops([], _object_annotations(changes))],
	[op |
		not gpu.is_pod
		some template in input.pod_templates
		mine := [c | some c in changes; c.template == template.path]
		count(_ops_of(mine)) > 0
		some op in _annotation_ops(_metadata_parts(template), {_record_annotation: _record(mine)})
	],
)

# METADATA
# title: Whether the template changes' warnings travel on the object
# description: |
#   True when the patch changes the object anyway: the warnings then ride in an annotation and the
#   validating webhook says them only if it admits the object.
is_carried(changes) if count(_ops_of(changes)) > 0

_carried_warnings(changes) := [json_patch.short(c.warning) | is_carried(changes); some c in changes; c.warning != ""]

_object_annotations(changes) := object.union(
	{_record_annotation: _record(changes)},
	{_warnings_annotation: json.marshal(_carried_warnings(changes)) | count(_carried_warnings(changes)) > 0},
)

# ["spec", "template"] for a template at "spec.template.spec": where its metadata sits.
_metadata_parts(template) := array.slice(parts, 0, count(parts) - 1) if parts := split(template.path, ".")

# Add the annotations (key -> value) at <parts>/metadata, creating what is missing (a parent before
# its child).
_annotation_ops(parts, values) := [
	{"op": "add", "path": json_patch.pointer_of(array.concat(parts, ["metadata"])), "value": {"annotations": values}},
] if {
	not is_object(object.get(input.request.object, array.concat(parts, ["metadata"]), null))
} else := [
	{"op": "add", "path": json_patch.pointer_of(array.concat(parts, ["metadata", "annotations"])), "value": values},
] if {
	not is_object(object.get(input.request.object, array.concat(parts, ["metadata", "annotations"]), null))
} else := [{
	"op": "add", "path": json_patch.pointer_of(array.concat(parts, ["metadata", "annotations", key])), "value": value,
} |
	some key in sort(object.keys(values))
	value := values[key]
]
