# METADATA
# title: GPU asks as text
# description: |
#   How messages name what a pod asks of GPUs ("8 nvidia.com/gpu (h100), 1 nvidia.com/mig-1g.10gb")
#   and counts of things ("1 GPU", "8 GPUs"); for the GPU rules' messages.
package labgate.lib.gpu_text

import data.labgate.lib.gpu

# METADATA
# title: A pod spec's GPU asks as text
# description: |
#   What a denial says a pod asks of GPUs: "8 nvidia.com/gpu (h100), 1 nvidia.com/mig-1g.10gb", per
#   resource and model, every container and claim counted.
describe_asks(spec) := describe(gpu.all_asks(spec))

# METADATA
# title: GPU asks as text
# description: |
#   Sums a list of asks ({resource, model, count}) per resource and model and names each, with its
#   model unless the resource is a MIG slice that names its own.
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

# METADATA
# title: A count with its noun
# description: |
#   "1 GPU", "8 GPUs": how the quota messages count pods and GPUs.
plural(n, word) := sprintf("%v %s", [n, word]) if {
	n == 1
} else := sprintf("%v %ss", [n, word])
