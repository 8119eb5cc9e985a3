# METADATA
# title: Tenants whose namespaces would collide
# description: |
#   Checks on Tenant objects themselves, beyond the CRD schema: two tenants may not claim the same
#   namespace, nor overlapping namespace prefixes, since either would hand one team the other's work;
#   nor the platform's namespaces (kube-*, labgate's own), which labgate's webhooks do not judge.
#   Applies to everyone, the infra team included: a collision is a mistake, not a permission.
#   A Tenant's GPU quota: rules.tenant_quota; its spec.enforcement: rules.tenant_enforcement.
package labgate.rules.tenant_namespace

import data.labgate.lib.tenancy

# A CREATE, or an UPDATE that changes the spec (see tenancy.tenant_spec_written).
_is_tenant_write if tenancy.tenant_spec_written

_name := tenancy.object_name

_others := {name: tenant |
	some name, tenant in data.inventory.tenants
	name != _name
}

# Who holds `namespace` besides this tenant, and the fix that frees it: another Tenant that lists it,
# or, listed by none, another live tenant whose label it carries (a cluster admin moved it there;
# the reconciler does not take it back, rbac/tenant_controller.held_by_other_tenants).
_holder_of_namespace(namespace) := [owner, fix] if {
	some owner, tenant in _others
	namespace in object.get(tenant, ["spec", "namespaces", "names"], [])
	fix := sprintf("choose another namespace, or remove it from Tenant %q first", [owner])
} else := [owner, fix] if {
	owner := data.inventory.namespaces[namespace].labels[data.labgate.config.tenant_label]
	owner != _name
	_others[owner]
	fix := sprintf(
		concat("", [
			"it carries the label %s=%s: remove it from this Tenant's spec.namespaces.names, or have a cluster ",
			"admin move it back once its work is done (kubectl label --overwrite namespace %s %s=%s)",
		]),
		[data.labgate.config.tenant_label, owner, namespace, data.labgate.config.tenant_label, _name],
	)
}

# METADATA
# title: A namespace belongs to one tenant
# custom:
#   rule_id: tenant-namespace-conflict
violation contains {"rule": rule_id, "message": msg, "field": sprintf("spec.namespaces.names[%d]", [i])} if {
	input.request.kind.kind == "Tenant" # first, for rule indexing
	input.request.kind.group == "labgate.io"
	_is_tenant_write
	some i, namespace in object.get(input.request.object, ["spec", "namespaces", "names"], [])
	[owner, fix] := _holder_of_namespace(namespace)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] Tenant %q spec.namespaces.names[%d] %q already belongs to tenant %q. Fix: %s",
		[rule_id, _name, i, namespace, owner, fix],
	)
}

# METADATA
# title: Namespace prefixes do not overlap
# custom:
#   rule_id: tenant-namespace-conflict
violation contains {"rule": rule_id, "message": msg, "field": "spec.namespaces.prefix"} if {
	input.request.kind.kind == "Tenant" # first, for rule indexing
	input.request.kind.group == "labgate.io"
	_is_tenant_write
	prefix := input.request.object.spec.namespaces.prefix
	some owner, tenant in _others
	theirs := tenant.spec.namespaces.prefix
	_overlap(prefix, theirs)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] Tenant %q spec.namespaces.prefix %q overlaps the prefix %q of tenant %q: researchers of both could ",
			"create the same namespaces. Fix: choose a prefix neither starts the other",
		]),
		[rule_id, _name, prefix, theirs, owner],
	)
}

_overlap(a, b) if startswith(a, b)

_overlap(a, b) if startswith(b, a)

# METADATA
# title: A tenant does not take the platform's namespaces
# description: |
#   kube-system and every other kube- namespace, the namespace labgate runs in, and the ones its
#   chart exempts (webhook.exemptNamespaces) are the platform's: labgate's webhooks do not judge
#   them (an outage of labgate must not stop them), so a tenant holding one would give its members
#   rights there that nothing checks (labgate's own service accounts run in its namespace), and the
#   reconciler would force Pod Security baseline on kube-system's privileged pods.
# custom:
#   rule_id: tenant-namespace-conflict
violation contains {"rule": rule_id, "message": msg, "field": sprintf("spec.namespaces.names[%d]", [i])} if {
	input.request.kind.kind == "Tenant" # first, for rule indexing
	input.request.kind.group == "labgate.io"
	_is_tenant_write
	some i, namespace in object.get(input.request.object, ["spec", "namespaces", "names"], [])
	_is_platform_namespace(namespace)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] Tenant %q spec.namespaces.names[%d] %q is the platform's: labgate's webhooks do not judge what ",
			"happens in it, so no tenant may hold it. Fix: remove it, and give the tenant a namespace of its own",
		]),
		[rule_id, _name, i, namespace],
	)
}

_is_platform_namespace(namespace) if startswith(namespace, "kube-")

_is_platform_namespace(namespace) if namespace == data.inventory.platform.namespace

_is_platform_namespace(namespace) if namespace in object.get(data.inventory.platform, "exempt_namespaces", [])
