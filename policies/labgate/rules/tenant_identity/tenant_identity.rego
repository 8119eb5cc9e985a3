# METADATA
# title: Tenant identity
# description: |
#   Who may change labgate's own labels, which say what belongs to which tenant. labgate.io/* labels
#   and annotations on a namespace change only by the tenant's admins or the platform; a namespace
#   leaves its tenant (its tenant label removed, or set to another tenant) only by the platform's
#   hand. A namespaced object may not carry labgate.io/tenant
#   naming a tenant other than its namespace's (nor may its pod templates, so that a
#   controller-created pod cannot inherit a false identity).
#   Trusted requesters (the platform) are never refused here.
package labgate.rules.tenant_identity

import data.labgate.lib.tenancy

_protected_prefix := "labgate.io/"

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

# labgate.io/* keys whose value an UPDATE changes, adds or removes, as "label k: "a" -> "b"".
_protected_changes contains {"field": sprintf("metadata.%s", [field]), "text": text} if {
	input.request.operation == "UPDATE"
	some field in ["labels", "annotations"]
	old := _meta("oldObject", field)
	new := _meta("object", field)
	some key in (object.keys(old) | object.keys(new))
	startswith(key, _protected_prefix)
	object.get(old, key, null) != object.get(new, key, null)
	text := sprintf("%s %s: %s -> %s", [
		trim_suffix(field, "s"), key,
		_show(object.get(old, key, null)), _show(object.get(new, key, null)),
	])
}

_show(value) := sprintf("%q", [value]) if {
	is_string(value)
} else := "(none)"

_changes_text := concat("; ", sort([c.text | some c in _protected_changes]))

_changes_field := f if {
	fields := {c.field | some c in _protected_changes}
	count(fields) == 1
	some f in fields
} else := "metadata"

# The tenants whose admins must agree: the namespace's, and the one a namespace of no tenant would
# join (a namespace leaving its tenant, unlabelled or moved, is namespace-release's: the platform's).
_approving_tenants contains _old_tenant

_approving_tenants contains _new_tenant

_admins_text(name) := sprintf("no Tenant %q exists", [name]) if {
	not data.inventory.tenants[name]
} else := tenancy.admin_names(data.inventory.tenants[name]) if {
	tenancy.admin_names(data.inventory.tenants[name]) != ""
} else := "it lists no admins"

_is_tenant_admin(name) if tenancy.is_admin(data.inventory.tenants[name], input.request.userInfo)

# METADATA
# title: Only the tenant's admins change labgate.io/ labels and annotations of its namespaces
# custom:
#   rule_id: tenant-label-protected
violation contains {"rule": rule_id, "message": msg, "field": _changes_field} if {
	input.request.kind.kind == "Namespace" # first, for rule indexing
	input.request.kind.group == ""
	_is_namespace
	count(_protected_changes) > 0
	not tenancy.is_trusted_requester
	not _is_release # namespace-release says what to do instead
	some name in _approving_tenants
	not _is_tenant_admin(name)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] user %s may not change %s on namespace %q: labgate.io/ labels and annotations are changed only by ",
			"admins of tenant %q (%s) and the platform. Fix: leave the labgate.io/ keys as they were, or ask an admin ",
			"of tenant %q or the infra team to make the change",
		]),
		[
			rule_id, tenancy.describe_user(input.request.userInfo), _changes_text, _namespace_name,
			name, _admins_text(name), name,
		],
	)
}

# The tenant label of a namespace that had one taken off, or set to another tenant (an UPDATE): the
# pods and workloads in it run on, and its controllers go on making pods, while the namespace leaves
# its tenant's quotas (the webhook counts the pods of a tenant's namespaces) and, without the label,
# labgate's admission (its webhooks select tenant namespaces); moved, they join the other tenant's
# count with no quota check (admins of two tenants could fill one quota twice).
_is_release if {
	input.request.operation == "UPDATE"
	_old_tenant
	not _new_tenant
}

_is_release if {
	input.request.operation == "UPDATE"
	_new_tenant != _old_tenant
}

_release_text := sprintf(
	concat("", [
		"remove label %s=%q from namespace %q: without it the namespace leaves tenant %q's quotas and labgate's ",
		"admission",
	]),
	[tenancy.tenant_label, _old_tenant, _namespace_name, _old_tenant],
) if {
	not _new_tenant
} else := sprintf(
	concat("", [
		"change label %s of namespace %q from %q to %q: the namespace would leave tenant %q's quotas and join ",
		"tenant %q's with no quota check",
	]),
	[tenancy.tenant_label, _namespace_name, _old_tenant, _new_tenant, _old_tenant, _new_tenant],
)

# METADATA
# title: Only the platform takes a namespace out of its tenant
# custom:
#   rule_id: namespace-release
violation contains {"rule": rule_id, "message": msg, "field": "metadata.labels"} if {
	input.request.kind.kind == "Namespace" # first, for rule indexing
	input.request.kind.group == ""
	_is_namespace
	_is_release
	not tenancy.is_trusted_requester
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] user %s may not %s, while the pods and workloads in it run on. ",
			"Fix: keep the label; to give the namespace up, delete it once its work is done, or ask the infra team ",
			"to release it or move it to another tenant",
		]),
		[rule_id, tenancy.describe_user(input.request.userInfo), _release_text],
	)
}

# METADATA
# title: Only the platform puts labgate.io/ labels and annotations on a namespace of no tenant
# custom:
#   rule_id: tenant-label-protected
violation contains {"rule": rule_id, "message": msg, "field": _changes_field} if {
	input.request.kind.kind == "Namespace" # first, for rule indexing
	input.request.kind.group == ""
	_is_namespace
	count(_protected_changes) > 0
	not tenancy.is_trusted_requester
	count(_approving_tenants) == 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] user %s may not change %s on namespace %q: it belongs to no tenant, so only the platform changes its ",
			"labgate.io/ labels and annotations. Fix: leave the labgate.io/ keys as they were, or ask the infra team ",
			"to make the change",
		]),
		[rule_id, tenancy.describe_user(input.request.userInfo), _changes_text, _namespace_name],
	)
}

# Where labels that become objects' identity live: the object's metadata, and the metadata beside
# every nested spec on the way to a pod template (a Deployment's spec.template.metadata, a CronJob's
# spec.jobTemplate.metadata and spec.jobTemplate.spec.template.metadata).
_metadata_paths contains ["metadata"]

_metadata_paths contains path if {
	some template in input.pod_templates
	parts := [_path_part(p) | some p in split(template.path, ".")]
	some i, part in parts
	i > 0
	part == "spec"
	path := array.concat(array.slice(parts, 0, i), ["metadata"])
}

# A list index in a template path ("spec.replicatedJobs.0.template") is a number in an object.get path.
_path_part(part) := to_number(part) if regex.match(`^[0-9]+$`, part)

_path_part(part) := part if not regex.match(`^[0-9]+$`, part)

_namespace_owner_text := sprintf("belongs to tenant %q", [tenancy.namespace_tenant_name]) if {
	tenancy.namespace_tenant_name != ""
} else := "belongs to no tenant"

_identity_fix := sprintf("remove the %s label (labgate derives the tenant from the namespace) or set it to %q", [
	tenancy.tenant_label, tenancy.namespace_tenant_name,
]) if {
	tenancy.namespace_tenant_name != ""
} else := sprintf("remove the %s label (labgate derives the tenant from the namespace)", [tenancy.tenant_label])

# METADATA
# title: An object may not claim another tenant's identity
# custom:
#   rule_id: tenant-identity-claim
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	not _is_namespace
	input.request.operation in {"CREATE", "UPDATE"}
	object.get(input.request, "namespace", "") != ""
	not tenancy.is_trusted_requester
	some path in _metadata_paths
	claimed := object.get(input.request, array.flatten(["object", path, "labels", tenancy.tenant_label]), null)
	claimed != null
	claimed != tenancy.namespace_tenant_name
	field := concat(".", [sprintf("%v", [p]) | some p in array.concat(path, ["labels"])])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s carries %s=%q, but namespace %q %s: an object may not claim another tenant's identity. Fix: %s",
		[
			rule_id, tenancy.object_ref, field, tenancy.tenant_label, claimed, input.request.namespace,
			_namespace_owner_text, _identity_fix,
		],
	)
}
