package labgate.rules.gpu_countable_test

import data.labgate.lib.testdata
import data.labgate.rules.gpu_countable
import data.labgate.rules.gpu_model
import data.labgate.rules.gpu_preemptible
import data.labgate.rules.gpu_quota

pod_input(namespace, user, pod, usage) := object.union(
	testdata.workload_input("Pod", namespace, user, pod),
	{"gpu_usage": usage},
)

# Every GPU rule's findings: each test pins what all of them find together, as before the rules
# were split by concern into packages.
violations(input_doc) := v if {
	v := gpu_violations with input as input_doc
		with data.inventory as testdata.gpu_inventory
}

gpu_violations := ((gpu_quota.violation | gpu_model.violation) | gpu_preemptible.violation) | gpu_countable.violation

# --- gpu-dra-unsupported ---

_claim(requests) := {"found": true, "spec": {"devices": {"requests": requests}}}

_claims := {
	"ResourceClaimTemplate/two": _claim([{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]),
	"ResourceClaimTemplate/mig": _claim([{"name": "g", "exactly": {"deviceClassName": "mig.nvidia.com"}}]),
	"ResourceClaimTemplate/gone": {"found": false, "reason": `it does not exist in namespace "speech"`},
}

_dra_pod(template) := testdata.pod("dra", {
	"containers": [object.union(testdata.main_container, {"resources": {"claims": [{"name": "gpus"}]}})],
	"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
})

_dra_input(template, usage) := object.union(
	pod_input("speech", testdata.sam, _dra_pod(template), usage),
	{"resource_claims": _claims},
)

_claim_object_input(kind, operation, obj) := {"request": {
	"uid": "u",
	"operation": operation,
	"kind": {"group": "resource.k8s.io", "version": "v1", "kind": kind},
	"resource": {"group": "resource.k8s.io", "version": "v1", "resource": lower(concat("", [kind, "s"]))},
	"namespace": "speech",
	"name": obj.metadata.name,
	"userInfo": testdata.sam,
	"object": obj,
}}

_template_object(name, class, mode) := {
	"apiVersion": "resource.k8s.io/v1",
	"kind": "ResourceClaimTemplate",
	"metadata": {"name": name},
	"spec": {
		"spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": class, "allocationMode": mode}}]}},
	},
}

# --- gpu-resource-unknown ---

test_an_unknown_resource_of_a_gpu_vendor_is_refused if {
	pod := testdata.pod("fake", {
		"containers": [testdata.main_container],
		"initContainers": [testdata.gpu_container("warmup", {"nvidia.com/gpu.fake": "2"})],
	})
	violations(testdata.workload_input("Pod", "speech", testdata.sam, pod)) == {{
		"rule": "gpu-resource-unknown",
		"field": "spec.initContainers[0].resources",
		"message": concat("", [
			`[gpu-resource-unknown] Pod "fake" spec.initContainers[0].resources asks 2 nvidia.com/gpu.fake, a resource `,
			`of a GPU vendor that labgate does not count. Fix: ask one it counts (amd.com/gpu, gpu.intel.com/i915, `,
			`gpu.intel.com/xe, nvidia.com/gpu, nvidia.com/gpu.shared), or ask the infra team to add `,
			`"nvidia.com/gpu.fake" to gpu_resources (or gpu_companion_resources) in labgate's policy config`,
		]),
	}}
}

test_companions_and_other_domains_are_not_refused if {
	pod := testdata.pod("fine", {
		"nodeSelector": {"nvidia.com/gpu.product": "a100"},
		"containers": [
			testdata.gpu_container(
				"main",
				{"gpu.intel.com/i915": "1", "gpu.intel.com/millicores": "100", "example.com/fpga": "1"},
			),
		],
	})
	count(violations(testdata.workload_input("Pod", "speech", testdata.sam, pod))) == 0
}

test_unknown_vendor_resources_in_a_deployment_update_are_refused if {
	deployment := testdata.deployment(
		"serve",
		{"app": "serve"},
		{"containers": [testdata.gpu_container("main", {"amd.com/gpu-partition": "1"})]},
	)
	input_doc := json.patch(testdata.workload_input("Deployment", "speech", testdata.sam, deployment), [
		{"op": "replace", "path": "/request/operation", "value": "UPDATE"},
		{
			"op": "add", "path": "/request/oldObject",
			"value": testdata.deployment("serve", {"app": "serve"}, {"containers": [testdata.main_container]}),
		},
	])
	[v.rule | some v in violations(input_doc)] == ["gpu-resource-unknown"]
}

# --- gpu-resource-reserved ---

# Kueue counts labgate.io/gpu-total for every nvidia.com/gpu; a pod asking it (0 too) would replace
# that count, and a tenant's Jobs could pass its total across pools.
test_a_pod_asking_labgates_own_resource_is_refused_whatever_the_amount if {
	pod := testdata.pod("sneak", {
		"nodeSelector": {"nvidia.com/gpu.product": "a100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "8", "labgate.io/gpu-total": "0"})],
	})
	violations(testdata.workload_input("Pod", "speech", testdata.sam, pod)) == {{
		"rule": "gpu-resource-reserved",
		"field": "spec.containers[0].resources",
		"message": concat("", [
			`[gpu-resource-reserved] Pod "sneak" spec.containers[0].resources asks 0 labgate.io/gpu-total: resources `,
			`of the labgate.io domain are counted by labgate and Kueue for you (each nvidia.com/gpu asks one `,
			`labgate.io/gpu-total), never asked by a pod. Fix: remove labgate.io/gpu-total from the container's `,
			`resources`,
		]),
	}}
}

test_labgates_own_resource_in_a_job_template_is_refused_and_the_same_job_without_it_admitted if {
	job := testdata.job("train", 2, {}, {
		"nodeSelector": {"nvidia.com/gpu.product": "a100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1", "labgate.io/gpu-total": "1"})],
	})
	[v.rule | some v in violations(testdata.workload_input("Job", "speech", testdata.sam, job))] == [
		"gpu-resource-reserved",
	]
	clean := testdata.job("train", 2, {}, {
		"nodeSelector": {"nvidia.com/gpu.product": "a100"},
		"containers": [testdata.gpu_container("main", {"nvidia.com/gpu": "1"})],
	})
	count(violations(testdata.workload_input("Job", "speech", testdata.sam, clean))) == 0
}

test_a_claim_of_an_unmapped_device_class_is_refused if {
	violations(_dra_input("mig", {})) == {{
		"rule": "gpu-dra-unsupported",
		"field": "spec.resourceClaims[0]",
		"message": concat("", [
			`[gpu-dra-unsupported] Pod "dra" spec.resourceClaims[0] names ResourceClaimTemplate "mig", whose `,
			`spec.devices.requests[0] asks device class "mig.nvidia.com", which labgate neither counts as GPUs nor `,
			`allows, so its GPUs cannot be counted against the quota. Fix: name a claim (or template) that exists and `,
			`asks an exact count of devices of a GPU device class labgate counts ("gpu.amd.com", "gpu.intel.com", `,
			`"gpu.nvidia.com"), or ask the infra team to map its device class (dra_device_classes in labgate's policy `,
			`config)`,
		]),
	}}
}

test_a_claim_that_cannot_be_read_is_refused if {
	[v.message | some v in violations(_dra_input("gone", {}))] == [
		concat("", [
			`[gpu-dra-unsupported] Pod "dra" spec.resourceClaims[0] names ResourceClaimTemplate "gone", which labgate `,
			`could not read (it does not exist in namespace "speech"), so its GPUs cannot be counted against the `,
			`quota. Fix: name a claim (or template) that exists and asks an exact count of devices of a GPU device `,
			`class labgate counts ("gpu.amd.com", "gpu.intel.com", "gpu.nvidia.com"), or ask the infra team to map its `,
			`device class (dra_device_classes in labgate's policy config)`,
		]),
	]
}

test_claim_templates_of_counted_classes_are_allowed if {
	count(violations(_claim_object_input("ResourceClaimTemplate", "CREATE", _template_object("t", "gpu.nvidia.com", "ExactCount")))) == 0
}

test_claim_templates_asking_every_gpu_are_refused if {
	template := _template_object("t", "gpu.nvidia.com", "All")
	violations(_claim_object_input("ResourceClaimTemplate", "CREATE", template)) == {{
		"rule": "gpu-dra-unsupported",
		"field": "spec.spec.devices.requests[0]",
		"message": concat("", [
			`[gpu-dra-unsupported] ResourceClaimTemplate "t" spec.spec.devices.requests[0] asks every device of class `,
			`"gpu.nvidia.com" (allocationMode All), a number labgate cannot count, so pods using it could not be `,
			`counted against the GPU quota. Fix: ask an exact count of devices of a GPU device class labgate counts `,
			`("gpu.amd.com", "gpu.intel.com", "gpu.nvidia.com"), or ask the infra team to map the device class `,
			`(dra_device_classes in labgate's policy config)`,
		]),
	}}
}

test_claims_of_unknown_classes_are_refused if {
	claim := {
		"apiVersion": "resource.k8s.io/v1",
		"kind": "ResourceClaim",
		"metadata": {"name": "c"},
		"spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
	}
	[v.field | some v in violations(_claim_object_input("ResourceClaim", "CREATE", claim))] == ["spec.devices.requests[0]"]
	[v.field | some v in violations(_claim_object_input("ResourceClaim", "UPDATE", claim))] == ["spec.devices.requests[0]"]
	count(violations(json.patch(_claim_object_input("ResourceClaim", "CREATE", claim), [{"op": "replace", "path": "/request/userInfo", "value": testdata.job_controller}]))) == 0
}
