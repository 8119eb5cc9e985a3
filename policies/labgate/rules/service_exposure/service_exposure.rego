# METADATA
# title: Service exposure
# description: |
#   Services in a tenant's namespaces stay inside the cluster unless the Tenant says otherwise.
#   spec.externalIPs is refused for everyone but the platform: a Service with external IPs
#   captures traffic meant for those addresses from every pod of the cluster (CVE-2020-8554).
#   Types LoadBalancer, NodePort and ExternalName (which reach or redirect outside the tenant) are
#   allowed only when listed in the Tenant's spec.network.allowServiceTypes (default: none).
#   Trusted requesters are never refused here.
package labgate.rules.service_exposure

import data.labgate.lib.tenancy

_exposing_types := {"LoadBalancer", "NodePort", "ExternalName"}

_service := input.request.object if {
	input.request.kind.kind == "Service"
	input.request.kind.group == ""
	input.request.operation in {"CREATE", "UPDATE"}
	not tenancy.is_trusted_requester
}

_allowed_types(tenant) := {t | some t in object.get(tenant, ["spec", "network", "allowServiceTypes"], [])}

_allowed_text(tenant) := concat(", ", sort(_allowed_types(tenant))) if {
	count(_allowed_types(tenant)) > 0
} else := "none"

# METADATA
# title: No external IPs on Services
# custom:
#   rule_id: service-exposure
violation contains {"rule": rule_id, "message": msg, "field": "spec.externalIPs"} if {
	input.request.kind.kind == "Service" # first, for rule indexing
	input.request.kind.group == ""
	service := _service
	tenancy.namespace_tenant
	ips := object.get(service, ["spec", "externalIPs"], [])
	count(ips) > 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] Service %q spec.externalIPs %s would capture traffic that any pod of the cluster sends to those ",
			"addresses (CVE-2020-8554); no tenant may set them. Fix: remove spec.externalIPs, and use a Service of ",
			"type LoadBalancer if your Tenant allows it",
		]),
		[rule_id, tenancy.object_name, json.marshal(ips)],
	)
}

# METADATA
# title: Services reach outside the cluster only as the Tenant allows
# custom:
#   rule_id: service-exposure
violation contains {"rule": rule_id, "message": msg, "field": "spec.type"} if {
	input.request.kind.kind == "Service" # first, for rule indexing
	input.request.kind.group == ""
	service := _service
	tenant := tenancy.namespace_tenant
	kind := object.get(service, ["spec", "type"], "ClusterIP")
	kind in _exposing_types
	not kind in _allowed_types(tenant)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] Service %q is of type %s, which tenant %q may not use (spec.network.allowServiceTypes: %s). Fix: use ",
			"type ClusterIP (the default) and reach it with kubectl port-forward, or ask the infra team to add %s to ",
			"spec.network.allowServiceTypes of Tenant %q",
		]),
		[rule_id, tenancy.object_name, kind, tenant.metadata.name, _allowed_text(tenant), kind, tenant.metadata.name],
	)
}
