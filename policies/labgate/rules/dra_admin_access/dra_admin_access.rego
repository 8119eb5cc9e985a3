# METADATA
# title: No tenant claim gets admin access to devices
# description: |
#   A Dynamic Resource Allocation request with adminAccess: true is given devices even when they are
#   allocated to other pods (for monitoring and maintenance), so with it one tenant's pod reaches the
#   GPUs another tenant's pod holds. Kubernetes admits such claims only in namespaces labelled
#   resource.kubernetes.io/admin-access=true. In a tenant's namespace, labgate refuses:
#   - a ResourceClaim or ResourceClaimTemplate whose requests (spec.devices.requests[], their
#     `exactly` and their firstAvailable subrequests; a template's spec.spec) ask adminAccess: true;
#   - a pod template that names (spec.resourceClaims) a claim or template that asks it, read through
#     by the webhook into input.resource_claims (a claim made before this rule);
#   The namespace label that lets claims ask it: rules.namespace_admin_access.
#   Judged for every requester but cluster admins (system:masters), and not while an object is
#   being deleted.
package labgate.rules.dra_admin_access

import data.labgate.lib.tenancy

# METADATA
# title: The namespace label that lets claims ask admin access
# description: |
#   Kubernetes lets a ResourceClaim in a namespace with this label ask adminAccess to devices
#   allocated to others; namespace_admin_access keeps tenants from setting it.
admin_access_label := "resource.kubernetes.io/admin-access"

_is_cluster_admin if "system:masters" in input.request.userInfo.groups

_is_judged if {
	input.request.operation in {"CREATE", "UPDATE"}
	not _is_cluster_admin
	not input.request.object.metadata.deletionTimestamp
}

# Where each request of a ResourceClaimSpec asks admin access: {"field", "request"}.
_admin_requests(spec, prefix) := {{"field": sprintf("%s.devices.requests[%d]%s", [prefix, i, where]), "request": name} |
	some i, request in object.get(spec, ["devices", "requests"], [])
	some [where, name] in _asks(request)
}

_asks(request) := {[where, name] |
	some [where, name, asked] in [
		["", request.name, object.get(request, "adminAccess", false)],
		[".exactly", request.name, object.get(request, ["exactly", "adminAccess"], false)],
	]
	asked == true
} | {[sprintf(".firstAvailable[%d]", [j]), sprintf("%s/%s", [request.name, sub.name])] |
	some j, sub in object.get(request, "firstAvailable", [])
	sub.adminAccess == true
}

_claim_spec := input.request.object.spec if {
	input.request.kind.kind == "ResourceClaim"
} else := input.request.object.spec.spec if {
	input.request.kind.kind == "ResourceClaimTemplate"
}

_claim_prefix := "spec" if input.request.kind.kind == "ResourceClaim"

_claim_prefix := "spec.spec" if input.request.kind.kind == "ResourceClaimTemplate"

_why := "admin access reaches devices allocated to other pods, other tenants' included, and no tenant may ask for it"

# METADATA
# title: No admin access to devices in tenant claims
# custom:
#   rule_id: dra-admin-access
violation contains {"rule": rule_id, "message": msg, "field": ask.field} if {
	_is_judged
	tenancy.namespace_tenant
	input.request.kind.group == "resource.k8s.io"
	some ask in _admin_requests(_claim_spec, _claim_prefix)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s (request %q) asks adminAccess: true: %s. Fix: remove adminAccess from the request; monitoring ",
			"that needs it is the infra team's",
		]),
		[rule_id, tenancy.object_ref, ask.field, ask.request, _why],
	)
}

# METADATA
# title: No pod names a claim that asks admin access
# custom:
#   rule_id: dra-admin-access
violation contains {"rule": rule_id, "message": msg, "field": sprintf("%s.resourceClaims", [template.path])} if {
	_is_judged
	tenancy.namespace_tenant
	some template in input.pod_templates
	some ref in object.get(template.spec, "resourceClaims", [])
	[kind, name] := _reference(ref)
	fact := input.resource_claims[sprintf("%s/%s", [kind, name])]
	fact.found
	some ask in _admin_requests(fact.spec, "spec")
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s.resourceClaims names %s %q, whose request %q asks adminAccess: true: %s. Fix: name a claim ",
			"without adminAccess",
		]),
		[rule_id, tenancy.object_ref, template.path, kind, name, ask.request, _why],
	)
}

_reference(ref) := ["ResourceClaim", ref.resourceClaimName] if {
	is_string(ref.resourceClaimName)
} else := ["ResourceClaimTemplate", ref.resourceClaimTemplateName] if {
	is_string(ref.resourceClaimTemplateName)
}
