# METADATA
# title: Per-team namespaces
# description: |
#   A namespace labelled labgate.io/tenant=<tenant> accepts workloads only from that tenant's admins
#   and researchers (users, groups or service accounts listed in the Tenant), from service accounts
#   inside the tenant's namespaces, and from the platform itself (cluster admins, controllers).
package labgate.rules.tenant_membership

import data.labgate.lib.tenancy

_verb := {"CREATE": "create", "UPDATE": "change", "DELETE": "delete", "CONNECT": "connect to"}

_target := sprintf("%s %q", [input.request.kind.kind, object.get(input.request, "name", "")]) if {
	object.get(input.request, "name", "") != ""
} else := sprintf(
	"%s %q",
	[input.request.kind.kind, object.get(input.request.object, ["metadata", "generateName"], "")],
)

_own_tenants_hint := sprintf("apply it in a namespace of your own tenant (%s)", [concat(", ", sort(tenants))]) if {
	tenants := tenancy.tenants_of(input.request.userInfo)
	count(tenants) > 0
} else := "you are not a member of any tenant: ask the infra team to add you to one"

_admins(tenant) := concat(", ", [s.name |
	some s in object.get(tenant, ["spec", "members", "admins"], [])
])

# METADATA
# title: Only the tenant's members work in its namespaces
# custom:
#   rule_id: tenant-membership
violation contains {"rule": rule_id, "message": msg, "field": "metadata.namespace"} if {
	input.request.kind.kind != "Namespace"
	tenant := tenancy.namespace_tenant
	not tenancy.is_trusted_requester
	not tenancy.is_member(tenant, input.request.userInfo)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] user %s may not %s %s in namespace %q: it belongs to tenant %q and only its members may. Fix: %s, or ",
			"ask an admin of %q (%s) to add you",
		]),
		[
			rule_id, tenancy.describe_user(input.request.userInfo), _verb[input.request.operation], _target,
			tenancy.request_namespace, tenant.metadata.name, _own_tenants_hint, tenant.metadata.name,
			_admins(tenant),
		],
	)
}

# METADATA
# title: A namespace may only name a tenant that exists
# custom:
#   rule_id: tenant-unknown
violation contains {"rule": rule_id, "message": msg, "field": "metadata.labels"} if {
	input.request.kind.kind != "Namespace"
	name := tenancy.claimed_tenant_name
	not data.inventory.tenants[name]
	not tenancy.is_trusted_requester
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] namespace %q is labelled %s=%q but no Tenant %q exists, so nobody can work there yet. Fix: ask the ",
			"infra team to create the Tenant or correct the label",
		]),
		[rule_id, tenancy.request_namespace, tenancy.tenant_label, name, name],
	)
}
