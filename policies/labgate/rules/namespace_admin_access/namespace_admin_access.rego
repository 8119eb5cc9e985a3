# METADATA
# title: The admin-access namespace label is the cluster admins'
# description: |
#   Kubernetes admits Dynamic Resource Allocation claims asking adminAccess: true (devices even when
#   allocated to other pods, other tenants' included) only in namespaces labelled
#   resource.kubernetes.io/admin-access=true (rules.dra_admin_access refuses such claims in tenant
#   namespaces). Setting that label on a tenant's namespace (CREATE, or an UPDATE that adds or changes
#   it) is refused for every requester but cluster admins (system:masters), and not judged while the
#   namespace is being deleted.
package labgate.rules.namespace_admin_access

import data.labgate.lib.tenancy
import data.labgate.rules.dra_admin_access

_is_cluster_admin if "system:masters" in input.request.userInfo.groups

_is_judged if {
	input.request.operation in {"CREATE", "UPDATE"}
	not _is_cluster_admin
	not input.request.object.metadata.deletionTimestamp
}

_new_label := input.request.object.metadata.labels[dra_admin_access.admin_access_label]

_is_label_changed if input.request.operation == "CREATE"

_is_label_changed if {
	input.request.operation == "UPDATE"
	not input.request.oldObject.metadata.labels[dra_admin_access.admin_access_label] == _new_label
}

# A tenant's namespace: labelled for a tenant now or before.
_is_tenant_namespace if input.request.object.metadata.labels[tenancy.tenant_label]

_is_tenant_namespace if input.request.oldObject.metadata.labels[tenancy.tenant_label]

# METADATA
# title: The admin-access namespace label is the cluster admins'
# custom:
#   rule_id: namespace-admin-access
violation contains {"rule": rule_id, "message": msg, "field": "metadata.labels"} if {
	_is_judged
	input.request.kind.group == ""
	input.request.kind.kind == "Namespace"
	_is_tenant_namespace
	_new_label
	_is_label_changed
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s may not set the label %s=%s on namespace %q: it lets claims in the namespace ask admin access to ",
			"devices allocated to others, other tenants' pods included; only cluster admins set it. Fix: remove the ",
			"label",
		]),
		[
			rule_id, tenancy.describe_user(input.request.userInfo), dra_admin_access.admin_access_label, _new_label,
			tenancy.object_name,
		],
	)
}
