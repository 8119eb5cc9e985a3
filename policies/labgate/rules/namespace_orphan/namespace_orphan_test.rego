package labgate.rules.namespace_orphan_test

import data.labgate.lib.testdata
import data.labgate.rules.namespace_orphan

namespace(name, labels) := {
	"apiVersion": "v1", "kind": "Namespace",
	"metadata": object.union({"name": name}, {"labels": labels | count(labels) > 0}),
}

# team-b gets a prefix too.
inventory := json.patch(
	testdata.inventory,
	[{"op": "add", "path": "/tenants/team-b/spec/namespaces/prefix", "value": "team-b-"}],
)

violations(user, obj) := v if {
	v := namespace_orphan.violation with input.request as testdata.request("CREATE", "Namespace", "", user, obj, null)
		with data.inventory as inventory
}

dave := {"username": "dave", "groups": ["system:authenticated"]}

test_namespace_under_own_prefix_is_allowed if {
	count(violations(testdata.alice, namespace("team-a-exp1", {}))) == 0
}

test_namespace_listed_in_own_tenant_is_allowed if {
	count(violations(testdata.alice, namespace("team-a", {}))) == 0
}

# Regression: a researcher could create a namespace of no tenant, which nobody can use or delete.
test_namespace_outside_every_prefix_is_refused if {
	violations(testdata.alice, namespace("scratch", {})) == {{
		"rule": "namespace-orphan",
		"field": "metadata.name",
		"message": concat("", [
			`[namespace-orphan] user "alice" (groups: team-a) may not create namespace "scratch": it would belong to `,
			`no tenant, so nobody could use or delete it. Fix: name it with your tenant's prefix ("team-a-"), e.g. `,
			`"team-a-scratch"`,
		]),
	}}
}

# Regression: ... and one under another tenant's prefix, which the mutation does not label for them.
test_namespace_under_another_tenants_prefix_is_refused if {
	violations(testdata.alice, namespace("team-b-x", {})) == {{
		"rule": "namespace-orphan",
		"field": "metadata.name",
		"message": concat("", [
			`[namespace-orphan] user "alice" (groups: team-a) may not create namespace "team-b-x": it is under tenant `,
			`"team-b"'s names, and you are not a member of "team-b". Fix: name it with your tenant's prefix `,
			`("team-a-"), e.g. "team-a-team-b-x"`,
		]),
	}}
}

test_labelled_namespaces_are_left_to_namespace_ownership if {
	count(violations(testdata.alice, namespace("scratch", {"labgate.io/tenant": "team-a"}))) == 0
}

test_platform_and_people_of_no_tenant_are_not_restricted if {
	count(violations(testdata.cluster_admin, namespace("scratch", {}))) == 0
	count(violations(dave, namespace("scratch", {}))) == 0
}
