package labgate.lib.dra_test

import data.labgate.lib.dra
import data.labgate.lib.gpu
import data.labgate.lib.gpu_text
import data.labgate.lib.testdata

claim_spec(requests) := {"devices": {"requests": requests}}

exactly(name, class, n) := {"name": name, "exactly": {"deviceClassName": class, "count": n}}

_claims := {
	"ResourceClaimTemplate/two-gpus": {"found": true, "spec": claim_spec([exactly("g", "gpu.nvidia.com", 2)])},
	"ResourceClaim/shared": {
		"found": true, "spec": claim_spec([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]),
	},
	"ResourceClaim/everything": {
		"found": true,
		"spec": claim_spec([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}}]),
	},
	"ResourceClaim/nic": {"found": true, "spec": claim_spec([exactly("n", "rdma.example.com", 1)])},
	"ResourceClaim/missing": {"found": false, "reason": "it does not exist in namespace \"vision\""},
}

_claim_pod(refs) := {
	"nodeSelector": {"nvidia.com/gpu.product": "h100"},
	"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
	"resourceClaims": refs,
}

test_gpus_claimed_through_dra_count if {
	spec := _claim_pod([
		{"name": "a", "resourceClaimTemplateName": "two-gpus"},
		{"name": "b", "resourceClaimName": "shared"},
	])
	gpu.demand(spec) == {"total": 4, "by_model": {"h100": 4}} with input.resource_claims as _claims
	gpu_text.describe_asks(spec) == "3 DRA gpu.nvidia.com (h100), 1 nvidia.com/gpu (h100)"
		with input.resource_claims as _claims
	dra.claim_problems(spec) == [] with input.resource_claims as _claims
}

test_a_mapped_device_class_names_its_model if {
	spec := _claim_pod([{"name": "a", "resourceClaimTemplateName": "two-gpus"}])
	d := gpu.demand(spec) with input.resource_claims as _claims
		with data.labgate.config.dra_device_classes as {"gpu.nvidia.com": {"model": "a100", "weight": 2}}
	d == {"total": 5, "by_model": {"h100": 1, "a100": 2}}
}

test_claims_that_cannot_be_counted_are_problems if {
	spec := _claim_pod([
		{"name": "a", "resourceClaimName": "everything"},
		{"name": "b", "resourceClaimName": "nic"},
		{"name": "c", "resourceClaimName": "missing"},
		{"name": "d", "resourceClaimTemplateName": "not-gathered"},
	])
	dra.claim_problems(spec) == [
		{
			"field": "resourceClaims[0]",
			"text": concat("", [
				`names ResourceClaim "everything", whose spec.devices.requests[0] asks every device of class `,
				`"gpu.nvidia.com" (allocationMode All), a number labgate cannot count`,
			]),
		},
		{
			"field": "resourceClaims[1]",
			"text": concat("", [
				`names ResourceClaim "nic", whose spec.devices.requests[0] asks device class "rdma.example.com", which `,
				`labgate neither counts as GPUs nor allows`,
			]),
		},
		{
			"field": "resourceClaims[2]",
			"text": `names ResourceClaim "missing", which labgate could not read (it does not exist in namespace "vision")`,
		},
		{
			"field": "resourceClaims[3]",
			"text": `names ResourceClaimTemplate "not-gathered", which labgate could not read (not gathered)`,
		},
	] with input.resource_claims as _claims
	gpu.demand(spec) == {"total": 1, "by_model": {"h100": 1}} with input.resource_claims as _claims
}

test_allowed_other_device_classes_are_free if {
	spec := _claim_pod([{"name": "b", "resourceClaimName": "nic"}])
	dra.claim_problems(spec) == [] with input.resource_claims as _claims
		with data.labgate.config.dra_other_device_classes as ["rdma.example.com"]
}

test_first_available_counts_the_largest_alternative_of_one_model if {
	request := {"name": "g", "firstAvailable": [
		{"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
		{"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 2},
	]}
	claims := {"ResourceClaim/fa": {"found": true, "spec": claim_spec([request])}}
	spec := _claim_pod([{"name": "a", "resourceClaimName": "fa"}])
	gpu.demand(spec).total == 5 with input.resource_claims as claims
}

test_first_available_of_different_models_is_a_problem if {
	request := {"name": "g", "firstAvailable": [
		{"name": "h", "deviceClassName": "gpu.nvidia.com", "count": 1},
		{"name": "a", "deviceClassName": "a100.nvidia.com", "count": 1},
	]}
	problem := dra.request_problem({
		"field": "x", "alternatives": dra.device_requests(claim_spec([request]))[0].alternatives,
	})
		with data.labgate.config.dra_device_classes as {
			"gpu.nvidia.com": {"model": ""},
			"a100.nvidia.com": {"model": "a100"},
		}
	problem == concat("", [
		"offers alternatives (firstAvailable) of different GPU models, which labgate cannot count before the ",
		"scheduler picks one",
	])
}
