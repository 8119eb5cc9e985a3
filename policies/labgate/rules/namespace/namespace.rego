# METADATA
# title: Namespace ownership
# description: |
#   Who may put a namespace under a tenant, and under which name. A namespace created with
#   labgate.io/tenant=<tenant> must come from an admin or researcher of that tenant and be named as
#   the Tenant allows (spec.namespaces.names, or spec.namespaces.prefix); a name a tenant reserves is
#   created only by that tenant, tenant members create namespaces only for a tenant, and a tenant has
#   at most so many namespaces. Who may change the labels afterwards: rules.tenant_identity.
#   Trusted requesters (the platform) are never refused here.
package labgate.rules.namespace

import data.labgate.lib.tenancy

_is_namespace if {
	input.request.kind.kind == "Namespace"
	input.request.kind.group == ""
}

_namespace_name := input.request.name if {
	object.get(input.request, "name", "") != ""
} else := object.get(input.request, ["object", "metadata", "name"], "")

# Labels or annotations (`field`) of the object or the oldObject (`side`); {} when absent.
_meta(side, field) := value if {
	value := object.get(input.request, [side, "metadata", field], {})
	is_object(value)
} else := {}

_new_tenant := _meta("object", "labels")[tenancy.tenant_label]

_old_tenant := _meta("oldObject", "labels")[tenancy.tenant_label]

# The tenant the namespace is being put under: on CREATE, or on an UPDATE that changes the label.
_claimed_tenant := _new_tenant if input.request.operation == "CREATE"

_claimed_tenant := _new_tenant if {
	input.request.operation == "UPDATE"
	_new_tenant != object.get(_meta("oldObject", "labels"), tenancy.tenant_label, "")
}

_own_tenants_hint := sprintf("label it with your own tenant (%s)", [concat(", ", sort(tenants))]) if {
	tenants := tenancy.tenants_of(input.request.userInfo)
	count(tenants) > 0
} else := "you are not a member of any tenant: ask the infra team to add you to one"

# METADATA
# title: Only a tenant's admins and researchers create its namespaces
# custom:
#   rule_id: namespace-tenant-member
violation contains {"rule": rule_id, "message": msg, "field": "metadata.labels"} if {
	input.request.kind.kind == "Namespace" # first, for rule indexing
	input.request.kind.group == ""
	_is_namespace
	input.request.operation == "CREATE"
	not tenancy.is_trusted_requester
	tenant := data.inventory.tenants[_new_tenant]
	not tenancy.is_listed_member(tenant, input.request.userInfo)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] user %s may not create namespace %q labelled %s=%q: only admins and researchers of tenant %q may. ",
			"Fix: %s, or ask an admin of %q (%s) to add you",
		]),
		[
			rule_id, tenancy.describe_user(input.request.userInfo), _namespace_name, tenancy.tenant_label,
			_new_tenant, _new_tenant, _own_tenants_hint, _new_tenant, tenancy.admin_names(tenant),
		],
	)
}

# METADATA
# title: A namespace may only be created for a tenant that exists
# custom:
#   rule_id: namespace-tenant-member
violation contains {"rule": rule_id, "message": msg, "field": "metadata.labels"} if {
	input.request.kind.kind == "Namespace" # first, for rule indexing
	input.request.kind.group == ""
	_is_namespace
	input.request.operation == "CREATE"
	not tenancy.is_trusted_requester
	not data.inventory.tenants[_new_tenant]
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] user %s may not create namespace %q labelled %s=%q: no Tenant %q exists. Fix: %s, or ask the infra ",
			"team to create the Tenant",
		]),
		[
			rule_id, tenancy.describe_user(input.request.userInfo), _namespace_name, tenancy.tenant_label,
			_new_tenant, _new_tenant, _own_tenants_hint,
		],
	)
}

_prefix(tenant) := object.get(tenant, ["spec", "namespaces", "prefix"], "")

_names(tenant) := object.get(tenant, ["spec", "namespaces", "names"], [])

_allowed_names_text(tenant) := concat(" or ", parts) if {
	parts := array.concat(
		[sprintf("names starting with %q", [_prefix(tenant)]) | _prefix(tenant) != ""],
		[sprintf("the names %s", [concat(", ", [sprintf("%q", [n]) | some n in _names(tenant)])]) |
			count(_names(tenant)) > 0
		],
	)
	count(parts) > 0
} else := "no namespace names (its spec.namespaces is empty)"

_rename_hint(tenant) := sprintf("name it %q", [concat("", [_prefix(tenant), _namespace_name])]) if {
	_prefix(tenant) != ""
} else := "use one of the tenant's names"

_name_allowed(tenant) if _namespace_name in _names(tenant)

_name_allowed(tenant) if {
	_prefix(tenant) != ""
	startswith(_namespace_name, _prefix(tenant))
}

# METADATA
# title: A tenant's namespaces are named as its Tenant says
# custom:
#   rule_id: namespace-prefix
violation contains {"rule": rule_id, "message": msg, "field": "metadata.name"} if {
	input.request.kind.kind == "Namespace" # first, for rule indexing
	input.request.kind.group == ""
	_is_namespace
	not tenancy.is_trusted_requester
	tenant := data.inventory.tenants[_claimed_tenant]
	not _name_allowed(tenant)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] namespace %q may not be labelled %s=%q: tenant %q allows %s. Fix: %s, or ask the infra team to add ",
			"%q to spec.namespaces.names of Tenant %q",
		]),
		[
			rule_id, _namespace_name, tenancy.tenant_label, _claimed_tenant, _claimed_tenant,
			_allowed_names_text(tenant), _rename_hint(tenant), _namespace_name, _claimed_tenant,
		],
	)
}

_admins_text(name) := sprintf("no Tenant %q exists", [name]) if {
	not data.inventory.tenants[name]
} else := tenancy.admin_names(data.inventory.tenants[name]) if {
	tenancy.admin_names(data.inventory.tenants[name]) != ""
} else := "it lists no admins"

# --- names reserved for a tenant, namespaces of no tenant, and how many namespaces a tenant has ---

# The namespace gets its tenant label now: created, or relabelled.
_labelled_now if input.request.operation == "CREATE"

_labelled_now if _claimed_tenant

_name_owners := {name |
	some name, tenant in data.inventory.tenants
	_namespace_name in _names(tenant)
}

_longer_prefix_matches(prefix) if {
	some tenant in data.inventory.tenants
	longer := _prefix(tenant)
	startswith(_namespace_name, longer)
	count(longer) > count(prefix)
}

_prefix_owners := {name |
	some name, tenant in data.inventory.tenants
	prefix := _prefix(tenant)
	prefix != ""
	startswith(_namespace_name, prefix)
	not _longer_prefix_matches(prefix)
}

# The tenants whose spec reserves the name: one that lists it, else the one with the longest prefix.
_reserving_tenants := _name_owners if count(_name_owners) > 0

_reserving_tenants := _prefix_owners if count(_name_owners) == 0

_reservation_text(name) := "it lists the name in spec.namespaces.names" if name in _name_owners

_reservation_text(name) := sprintf("its spec.namespaces.prefix is %q", [_prefix(data.inventory.tenants[name])]) if {
	not name in _name_owners
}

_own_prefixes := {sprintf("%q", [_prefix(data.inventory.tenants[name])]) |
	some name in tenancy.tenants_of(input.request.userInfo)
	_prefix(data.inventory.tenants[name]) != ""
}

_own_prefix_hint := sprintf(
	"name it with your tenant's prefix (%s); labgate labels it",
	[concat(", ", sort(_own_prefixes))],
) if {
	count(_own_prefixes) > 0
} else := _own_tenants_hint

# METADATA
# title: A name a tenant reserves is created only by that tenant
# custom:
#   rule_id: namespace-reserved
violation contains {"rule": rule_id, "message": msg, "field": "metadata.name"} if {
	input.request.kind.kind == "Namespace" # first, for rule indexing
	input.request.kind.group == ""
	_is_namespace
	_labelled_now
	not tenancy.is_trusted_requester
	some owner in _reserving_tenants
	object.get(_meta("object", "labels"), tenancy.tenant_label, "") != owner
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] namespace %q is reserved for tenant %q (%s): only its admins and researchers create it, labelled ",
			"%s=%s. Fix: %s, or ask an admin of %q (%s)",
		]),
		[
			rule_id, _namespace_name, owner, _reservation_text(owner), tenancy.tenant_label, owner,
			_own_prefix_hint, owner, _admins_text(owner),
		],
	)
}

# METADATA
# title: Tenant members create namespaces only for a tenant
# custom:
#   rule_id: namespace-untenanted
violation contains {"rule": rule_id, "message": msg, "field": "metadata.labels"} if {
	input.request.kind.kind == "Namespace" # first, for rule indexing
	input.request.kind.group == ""
	_is_namespace
	input.request.operation == "CREATE"
	not tenancy.is_trusted_requester
	count(tenancy.tenants_of(input.request.userInfo)) > 0
	not _is_listed_somewhere # a listed member hears it once, from namespace-orphan
	not tenancy.tenant_label in object.keys(_meta("object", "labels"))
	count(_reserving_tenants) == 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] user %s may not create namespace %q: it would belong to no tenant, and only the platform creates ",
			"those. Fix: %s, or ask the infra team for a namespace outside the tenants",
		]),
		[rule_id, tenancy.describe_user(input.request.userInfo), _namespace_name, _own_prefix_hint],
	)
}

# The requester is listed in a Tenant's members: labgate.rules.namespace_orphan refuses their
# namespace that would belong to nobody, so this package does not say it a second time.
_is_listed_somewhere if {
	some tenant in data.inventory.tenants
	tenancy.is_listed_member(tenant, input.request.userInfo)
}

_max_namespaces(tenant) := object.get(
	tenant,
	["spec", "namespaces", "maxCount"],
	data.labgate.config.max_namespaces_per_tenant,
)

_max_text(tenant) := sprintf("spec.namespaces.maxCount: %d", [tenant.spec.namespaces.maxCount]) if {
	tenant.spec.namespaces.maxCount
} else := sprintf("the cluster's default, %d", [data.labgate.config.max_namespaces_per_tenant])

# METADATA
# title: A tenant has at most so many namespaces
# custom:
#   rule_id: namespace-count
violation contains {"rule": rule_id, "message": msg, "field": "metadata.labels"} if {
	input.request.kind.kind == "Namespace" # first, for rule indexing
	input.request.kind.group == ""
	_is_namespace
	_labelled_now
	not tenancy.is_trusted_requester
	tenant := data.inventory.tenants[_new_tenant]
	existing := tenancy.tenant_namespaces(_new_tenant) - {_namespace_name}
	count(existing) >= _max_namespaces(tenant)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] tenant %q has %d namespaces, its limit (%s): namespace %q would be number %d. Fix: delete a ",
			"namespace the tenant no longer needs (kubectl delete namespace <name>), or ask the infra team to raise ",
			"spec.namespaces.maxCount of Tenant %q",
		]),
		[
			rule_id, _new_tenant, count(existing), _max_text(tenant), _namespace_name,
			count(existing) + 1, _new_tenant,
		],
	)
}
