# METADATA
# title: GPUs labgate cannot count are refused, never free
# description: |
#   Demand counts every container, init container, sidecar, the pod's overhead and its Dynamic
#   Resource Allocation claims as the scheduler does (lib.gpu, lib.dra). What cannot be counted is
#   refused: a resource of a GPU vendor's domain labgate does not know (gpu-resource-unknown), a claim
#   it cannot read or whose device class it cannot count (gpu-dra-unsupported); the same holds for
#   ResourceClaims and ResourceClaimTemplates written in tenant namespaces.
package labgate.rules.gpu_countable

import data.labgate.lib.dra
import data.labgate.lib.gpu
import data.labgate.lib.tenancy

# METADATA
# title: Resources of a GPU vendor that labgate does not count are refused, not ignored
# custom:
#   rule_id: gpu-resource-unknown
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	tenancy.namespace_tenant
	some template in gpu.checked_templates
	some unknown in gpu.unknown_resources(template.spec)
	field := sprintf("%s.%s", [template.path, unknown.field])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks %v %s, a resource of a GPU vendor that labgate does not count. Fix: ask one it counts ",
			"(%s), or ask the infra team to add %q to gpu_resources (or gpu_companion_resources) in labgate's policy ",
			"config",
		]),
		[
			rule_id, tenancy.object_ref, field, unknown.count, unknown.resource, concat(", ", sort(gpu.gpu_resources)),
			unknown.resource,
		],
	)
}

# METADATA
# title: Resources of labgate's own domain cannot be asked by a pod
# description: |
#   labgate.io/gpu-total is what Kueue counts, for a tenant's ClusterQueue, of every nvidia.com/gpu a
#   workload asks (a resource transformation, docs/infra.md): the cap of the tenant's total across its
#   pools. A pod that asks it itself (0, or any amount) replaces what Kueue would count for it, so
#   every resource of the labgate.io domain is refused in a pod spec, whatever the amount.
# custom:
#   rule_id: gpu-resource-reserved
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	tenancy.namespace_tenant
	some template in gpu.checked_templates
	some own in gpu.own_domain_resources(template.spec)
	field := sprintf("%s.%s", [template.path, own.field])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks %v %s: resources of the labgate.io domain are counted by labgate and Kueue for you (each ",
			"nvidia.com/gpu asks one labgate.io/gpu-total), never asked by a pod. Fix: remove %s from the container's ",
			"resources",
		]),
		[rule_id, tenancy.object_ref, field, own.count, own.resource, own.resource],
	)
}

_class_list := concat(", ", [sprintf("%q", [c]) | some c in sort(dra.dra_gpu_classes)])

# METADATA
# title: GPUs asked through Dynamic Resource Allocation are counted, or refused
# custom:
#   rule_id: gpu-dra-unsupported
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	tenancy.namespace_tenant
	some template in gpu.checked_templates
	some problem in dra.claim_problems(template.spec)
	field := sprintf("%s.%s", [template.path, problem.field])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s %s, so its GPUs cannot be counted against the quota. Fix: %s",
		[rule_id, tenancy.object_ref, field, problem.text, _dra_fix],
	)
}

_dra_fix := sprintf(
	concat("", [
		"name a claim (or template) that exists and asks an exact count of devices of a GPU device class labgate ",
		"counts (%s), or ask the infra team to map its device class (dra_device_classes in labgate's policy config)",
	]),
	[_class_list],
)

# --- ResourceClaims and ResourceClaimTemplates written in tenant namespaces ---

_is_claim_object if {
	input.request.kind.group == "resource.k8s.io"
	input.request.kind.kind in {"ResourceClaim", "ResourceClaimTemplate"}
	object.get(input.request, "subResource", "") == ""
	input.request.operation in {"CREATE", "UPDATE"}
}

# The claim spec and its field: a claim's spec, a template's spec.spec.
_claim_object_spec := [object.get(input.request.object, "spec", {}), "spec"] if {
	input.request.kind.kind == "ResourceClaim"
} else := [object.get(input.request.object, ["spec", "spec"], {}), "spec.spec"]

# METADATA
# title: ResourceClaims in tenant namespaces ask only device classes labgate can count
# custom:
#   rule_id: gpu-dra-unsupported
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	input.request.kind.group == "resource.k8s.io" # first, for rule indexing
	_is_claim_object
	tenancy.namespace_tenant
	not tenancy.is_trusted_requester
	[spec, prefix] := _claim_object_spec
	some request in dra.device_requests(spec)
	problem := dra.request_problem(request)
	field := concat(".", [prefix, trim_prefix(request.field, "spec.")])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s %s, so pods using it could not be counted against the GPU quota. Fix: ask an exact count of ",
			"devices of a GPU device class labgate counts (%s), or ask the infra team to map the device class ",
			"(dra_device_classes in labgate's policy config)",
		]),
		[rule_id, tenancy.object_ref, field, problem, _class_list],
	)
}
