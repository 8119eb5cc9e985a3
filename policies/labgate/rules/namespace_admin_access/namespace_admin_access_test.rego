package labgate.rules.namespace_admin_access_test

import data.labgate.lib.testdata
import data.labgate.rules.namespace_admin_access

_messages(violations) := {v.message | some v in violations}

namespace(labels) := {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a-x", "labels": labels}}

namespace_violations(operation, user, new, old) := violations if {
	violations := namespace_admin_access.violation
		with input.request as testdata.request(operation, "Namespace", "", user, new, old)
		with data.inventory as testdata.inventory
}

label_message(user) := sprintf(
	concat("", [
		`[namespace-admin-access] %s may not set the label resource.kubernetes.io/admin-access=true on namespace `,
		`"team-a-x": it lets claims in the namespace ask admin access to devices allocated to others, other `,
		`tenants' pods included; only cluster admins set it. Fix: remove the label`,
	]),
	[user],
)

test_the_admin_access_label_is_refused_on_tenant_namespaces if {
	labelled := namespace({"labgate.io/tenant": "team-a", "resource.kubernetes.io/admin-access": "true"})
	plain := namespace({"labgate.io/tenant": "team-a"})
	_messages(namespace_violations("CREATE", testdata.alice, labelled, null)) == {
		label_message(`"alice" (groups: team-a)`),
	}
	_messages(namespace_violations("UPDATE", testdata.ann, labelled, plain)) == {label_message(`"ann"`)}

	# Removing the tenant label in the same update does not help.
	_messages(namespace_violations(
		"UPDATE",
		testdata.ann,
		namespace({"resource.kubernetes.io/admin-access": "true"}),
		plain,
	)) == {label_message(`"ann"`)}
}

test_the_label_is_the_cluster_admins_and_kept_on_unrelated_updates if {
	labelled := namespace({"labgate.io/tenant": "team-a", "resource.kubernetes.io/admin-access": "true"})
	count(namespace_violations("CREATE", testdata.cluster_admin, labelled, null)) == 0
	count(namespace_violations(
		"UPDATE",
		testdata.alice,
		object.union(labelled, {"metadata": {"labels": {"team": "x"}}}),
		labelled,
	)) == 0
	count(namespace_violations("CREATE", testdata.alice, namespace({"labgate.io/tenant": "team-a"}), null)) == 0
}
