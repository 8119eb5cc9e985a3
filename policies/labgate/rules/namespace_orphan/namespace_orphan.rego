# METADATA
# title: Researchers create namespaces only under their own tenant's names
# description: |
#   A namespace a tenant member creates without a tenant label belongs to nobody: no Tenant lists it,
#   so no member can use it and only the platform can delete it. A researcher or admin of any tenant
#   (a listed member, not the platform) may therefore create a namespace only under a tenant they
#   belong to: one of its spec.namespaces.names or a name starting with its spec.namespaces.prefix
#   (the mutation then labels it). A name under another tenant's prefix is refused too. A namespace
#   that carries the tenant label is judged by labgate.rules.namespace instead.
#   People who are members of no tenant are not restricted here (the RBAC labgate provisions gives
#   researchers namespace creation; others get it from the cluster's own RBAC).
package labgate.rules.namespace_orphan

import data.labgate.lib.tenancy

_is_namespace_create if {
	input.request.kind.kind == "Namespace"
	input.request.kind.group == ""
	input.request.operation == "CREATE"
}

_name := object.get(input.request, ["object", "metadata", "name"], "")

_is_labelled if object.get(input.request, ["object", "metadata", "labels", tenancy.tenant_label], null) != null

_user := input.request.userInfo

# The tenants the requester is listed in (admins, researchers).
_own := {name |
	some name, tenant in data.inventory.tenants
	tenancy.is_listed_member(tenant, _user)
}

_prefix(tenant) := object.get(tenant, ["spec", "namespaces", "prefix"], "")

_is_tenants(name) if _name in object.get(data.inventory.tenants[name], ["spec", "namespaces", "names"], [])

_is_tenants(name) if {
	prefix := _prefix(data.inventory.tenants[name])
	prefix != ""
	startswith(_name, prefix)
}

_is_checked if {
	_is_namespace_create
	not _is_labelled
	not tenancy.is_trusted_requester
	count(_own) > 0
}

_is_own if {
	some name in _own
	_is_tenants(name)
}

_foreign := {name |
	some name, _ in data.inventory.tenants
	not name in _own
	_is_tenants(name)
}

_own_prefixes := concat(", ", sort([sprintf("%q", [p]) |
	some name in _own
	p := _prefix(data.inventory.tenants[name])
	p != ""
]))

_fix := sprintf(
	"name it with your tenant's prefix (%s), e.g. %q",
	[_own_prefixes, concat("", [_first_prefix, _name])],
) if {
	_own_prefixes != ""
} else := "ask an admin of your tenant or the infra team to add the name to spec.namespaces.names"

_first_prefix := min({p |
	some name in _own
	p := _prefix(data.inventory.tenants[name])
	p != ""
})

# METADATA
# title: A researcher's namespace is under a tenant they belong to
# custom:
#   rule_id: namespace-orphan
violation contains {"rule": rule_id, "message": msg, "field": "metadata.name"} if {
	input.request.kind.kind == "Namespace" # first, for rule indexing
	input.request.kind.group == ""
	_is_checked
	not _is_own
	count(_foreign) > 0
	rule_id := rego.metadata.rule().custom.rule_id
	owner := min(_foreign)
	msg := sprintf(
		"[%s] user %s may not create namespace %q: it is under tenant %q's names, and you are not a member of %q. Fix: %s",
		[rule_id, tenancy.describe_user(_user), _name, owner, owner, _fix],
	)
}

# METADATA
# title: A researcher's namespace does not belong to nobody
# custom:
#   rule_id: namespace-orphan
violation contains {"rule": rule_id, "message": msg, "field": "metadata.name"} if {
	input.request.kind.kind == "Namespace" # first, for rule indexing
	input.request.kind.group == ""
	_is_checked
	not _is_own
	count(_foreign) == 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] user %s may not create namespace %q: it would belong to no tenant, so nobody could use or delete it. Fix: %s",
		[rule_id, tenancy.describe_user(_user), _name, _fix],
	)
}
