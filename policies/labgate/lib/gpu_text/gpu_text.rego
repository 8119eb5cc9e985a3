# METADATA
# title: GPU asks as text
# description: |
#   How messages name what a pod asks of GPUs ("8 nvidia.com/gpu (h100), 1 nvidia.com/mig-1g.10gb")
#   and counts of things ("1 GPU", "8 GPUs"); for the GPU rules' messages.
package labgate.lib.gpu_text

import data.labgate.lib.gpu

# "8 nvidia.com/gpu (h100), 1 nvidia.com/mig-1g.10gb" for messages: per resource and model.
describe_asks(spec) := describe(gpu.all_asks(spec))

describe(list) := concat(", ", [text |
	some key in sort({[a.resource, a.model] | some a in list})
	n := sum([a.count | some a in list; [a.resource, a.model] == key])
	text := sprintf("%v %s%s", [n, key[0], _model_note(key[0], key[1])])
])

_model_note(resource, _) := "" if gpu.is_mig_resource(resource)

_model_note(resource, model) := " (model unspecified)" if {
	not gpu.is_mig_resource(resource)
	model == gpu.unspecified_model
}

_model_note(resource, model) := sprintf(" (%s)", [model]) if {
	not gpu.is_mig_resource(resource)
	model != gpu.unspecified_model
}

# "1 GPU", "8 GPUs".
plural(n, word) := sprintf("%v %s", [n, word]) if {
	n == 1
} else := sprintf("%v %ss", [n, word])
