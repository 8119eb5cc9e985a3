# METADATA
# title: The default priority class
# description: |
#   priorityClassName: config default_priority_class where none is named. Not on a pod whose
#   spec.priority is already resolved (the Priority admission plugin runs before webhooks, so on a
#   bare Pod): adding a class then would contradict that priority and the apiserver refuses it.
#   Gathered by labgate.mutation.
package labgate.mutations.priority_class

import data.labgate.lib.json_patch

# Each mutated template's changes, by its path: [{"rule", "ops", "warning"}].
template_changes[template.path] := _priority_changes(template) if {
	some template in json_patch.mutated_templates
}

_default_priority_class := object.get(data.labgate.config, "default_priority_class", "")

_priority_changes(template) := [{"rule": "priority-class", "ops": [op], "warning": warning} |
	_default_priority_class != ""
	object.get(template.spec, "priorityClassName", "") in {"", null}
	object.get(template.spec, "priority", null) == null
	op := {"op": "add", "path": json_patch.field_pointer(template, "priorityClassName"), "value": _default_priority_class}
	warning := sprintf("labgate set priorityClassName %q on %s", [_default_priority_class, json_patch.subject(template)])
]
