# METADATA
# title: Dynamic Resource Allocation
# description: |
#   GPUs a pod asks through Dynamic Resource Allocation (spec.resourceClaims): the claims the webhook
#   gathered (input.resource_claims) name device classes that config dra_device_classes maps to a
#   model and weight; what cannot be counted (a claim not read, an unmapped class, allocationMode All,
#   alternatives of different models) is a problem, which rules.gpu_countable refuses. lib.gpu adds
#   claim_asks to a pod's demand.
package labgate.lib.dra

_config := data.labgate.config

_object(value) := value if {
	is_object(value)
} else := {}

_array(value) := value if {
	is_array(value)
} else := []

_dra_classes := _object(object.get(_config, "dra_device_classes", {}))

_dra_other_classes := {c | some c in object.get(_config, "dra_other_device_classes", [])}

# METADATA
# title: The GPU device classes labgate counts
# description: |
#   The device classes dra_device_classes maps to GPUs, named in the messages that tell a researcher
#   which classes a claim may ask.
dra_gpu_classes := object.keys(_dra_classes)

# The model a GPU device class counts as: its mapped model, else `whole_model` (the model of the
# pod's whole GPUs, as lib.gpu names it).
_class_model(class, whole_model) := model if {
	model := object.get(_dra_classes[class], "model", "")
	model != ""
} else := whole_model

_class_weight(class) := object.get(_dra_classes[class], "weight", 1)

# Where each of a pod spec's claims comes from: {"field", "kind", "name", "key"}.
_claim_refs(spec) := [{
	"field": sprintf("resourceClaims[%d]", [i]), "kind": kind, "name": name, "key": concat("/", [kind, name]),
} |
	some i, ref in _array(object.get(spec, "resourceClaims", []))
	[kind, name] := _claim_source(ref)
]

_claim_source(ref) := ["ResourceClaim", ref.resourceClaimName] if {
	is_string(ref.resourceClaimName)
} else := ["ResourceClaimTemplate", ref.resourceClaimTemplateName] if {
	is_string(ref.resourceClaimTemplateName)
} else := ["ResourceClaim", ""]

# METADATA
# title: A ResourceClaim's device requests, each with its alternatives
# description: |
#   Every spec.devices.requests entry of a claim, with its field for messages and the devices it may
#   be satisfied by, [{"class", "mode", "count"}]: exactly, one; firstAvailable, each subrequest;
#   older flat requests, the request itself.
device_requests(claim_spec) := [{
	"field": sprintf("spec.devices.requests[%d]", [i]), "alternatives": _alternatives(request),
} |
	some i, request in _array(object.get(_object(claim_spec), ["devices", "requests"], []))
]

_alternatives(request) := [_alternative(request.exactly)] if {
	is_object(request.exactly)
} else := [_alternative(sub) | some sub in request.firstAvailable] if {
	is_array(request.firstAvailable)
} else := [_alternative(request)]

_alternative(request) := {
	"class": object.get(request, "deviceClassName", ""),
	"mode": object.get(request, "allocationMode", "ExactCount"),
	"count": object.get(request, "count", 1),
}

# METADATA
# title: Why labgate cannot count a device request
# description: |
#   Text for the message when a request asks a class labgate neither counts nor allows, every device
#   of a class (allocationMode All), or alternatives of different GPU models; undefined when it can
#   be counted against the GPU quota.
request_problem(request) := sprintf(
	"asks device class %q, which labgate neither counts as GPUs nor allows",
	[unknown[0]],
) if {
	unknown := [alt.class |
		some alt in request.alternatives
		not alt.class in _dra_other_classes
		not _dra_classes[alt.class]
	]
	count(unknown) > 0
} else := sprintf(
	"asks every device of class %q (allocationMode All), a number labgate cannot count",
	[all_devices[0]],
) if {
	all_devices := [alt.class | some alt in request.alternatives; _dra_classes[alt.class]; alt.mode == "All"]
	count(all_devices) > 0
} else := concat("", [
	"offers alternatives (firstAvailable) of different GPU models, which labgate cannot count before the ",
	"scheduler picks one",
]) if {
	models := {object.get(_dra_classes[alt.class], "model", "") |
		some alt in request.alternatives
		_dra_classes[alt.class]
	}
	count(models) > 1
}

# What a device request asks of GPUs (the largest of its GPU alternatives), when it asks any.
_request_asks(request, whole_model) := [{
	"resource": concat(" ", ["DRA", class]), "model": _class_model(class, whole_model), "count": n,
	"gpus": n * _class_weight(class),
} |
	not request_problem(request)
	gpu_alternatives := [alt | some alt in request.alternatives; _dra_classes[alt.class]]
	count(gpu_alternatives) > 0
	n := max([alt.count | some alt in gpu_alternatives])
	class := [alt.class | some alt in gpu_alternatives; alt.count == n][0]
]

# The claims the webhook gathered for the request, by "<kind>/<name>": {"found": true, "spec": <a
# ResourceClaimSpec>} or {"found": false, "reason": text}.
_gathered := _object(object.get(input, "resource_claims", {}))

# METADATA
# title: The GPUs a pod spec asks through its ResourceClaims
# description: |
#   Each claim the pod references counts for this pod: a claim shared by several pods is counted
#   once per pod, which errs towards refusing. A device class mapped to no model counts as
#   `whole_model`.
claim_asks(spec, whole_model) := [ask |
	some ref in _claim_refs(spec)
	claim := _gathered[ref.key]
	claim.found == true
	some request in device_requests(claim.spec)
	some ask in _request_asks(request, whole_model)
]

# METADATA
# title: Why a pod spec's claims cannot be counted
# description: |
#   One {field, text} per claim the webhook could not read or whose requests labgate cannot count,
#   so gpu-dra-unsupported can refuse the pod before it escapes the GPU quota.
claim_problems(spec) := [{"field": ref.field, "text": text} |
	some ref in _claim_refs(spec)
	some text in _ref_problems(ref)
]

_ref_problems(ref) := [sprintf("names %s %q, which labgate could not read (%s)", [ref.kind, ref.name, reason])] if {
	not _gathered[ref.key].found == true
	reason := object.get(_gathered, [ref.key, "reason"], "not gathered")
} else := [sprintf("names %s %q, whose %s %s", [ref.kind, ref.name, request.field, problem]) |
	some request in device_requests(_gathered[ref.key].spec)
	problem := request_problem(request)
]
