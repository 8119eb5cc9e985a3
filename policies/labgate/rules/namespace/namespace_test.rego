package labgate.rules.namespace_test

import data.labgate.lib.testdata
import data.labgate.rules.namespace as namespace_rules
import data.labgate.rules.tenant_identity

namespace(name, labels, annotations) := {
	"apiVersion": "v1",
	"kind": "Namespace",
	"metadata": {"name": name, "labels": labels, "annotations": annotations},
}

create_namespace(user, name, labels) := testdata.request(
	"CREATE",
	"Namespace",
	"",
	user,
	namespace(name, labels, {}),
	null,
)

update_namespace(user, old, new) := testdata.request("UPDATE", "Namespace", "", user, new, old)

# Both rule packages about namespaces and labgate's labels: each test pins what they find together,
# as before they were split by concern.
namespace_violations := namespace_rules.violation | tenant_identity.violation

violations_for(request) := violations if {
	violations := namespace_violations with input.request as request
		with input.pod_templates as []
		with data.inventory as testdata.inventory
}

# --- namespace-tenant-member and namespace-prefix (CREATE) ---

test_researcher_creates_namespace_under_prefix if {
	count(violations_for(create_namespace(testdata.alice, "team-a-sweep", {"labgate.io/tenant": "team-a"}))) == 0
}

test_admin_creates_explicitly_named_namespace if {
	count(violations_for(create_namespace(testdata.carol, "team-b", {"labgate.io/tenant": "team-b"}))) == 0
}

test_namespace_of_no_tenant_by_someone_of_no_tenant_is_not_checked if {
	count(violations_for(create_namespace({"username": "ops", "groups": ["ops"]}, "scratch", {"purpose": "play"}))) == 0
}

test_platform_creates_any_tenant_namespace if {
	count(violations_for(create_namespace(testdata.cluster_admin, "odd-name", {"labgate.io/tenant": "team-a"}))) == 0
}

test_viewer_may_not_create_tenant_namespace if {
	violations := violations_for(create_namespace(
		{"username": "victor", "groups": []},
		"team-a-x",
		{"labgate.io/tenant": "team-a"},
	))
	violations == {{
		"rule": "namespace-tenant-member",
		"field": "metadata.labels",
		"message": concat("", [
			`[namespace-tenant-member] user "victor" may not create namespace "team-a-x" labelled `,
			`labgate.io/tenant="team-a": only admins and researchers of tenant "team-a" may. Fix: you are not a member `,
			`of any tenant: ask the infra team to add you to one, or ask an admin of "team-a" (ann) to add you`,
		]),
	}}
}

test_outsider_may_not_create_namespace_for_another_tenant if {
	violations := violations_for(create_namespace(testdata.alice, "team-b-mine", {"labgate.io/tenant": "team-b"}))
	violations == {
		{
			"rule": "namespace-tenant-member",
			"field": "metadata.labels",
			"message": concat("", [
				`[namespace-tenant-member] user "alice" (groups: team-a) may not create namespace "team-b-mine" labelled `,
				`labgate.io/tenant="team-b": only admins and researchers of tenant "team-b" may. Fix: label it with your `,
				`own tenant (team-a), or ask an admin of "team-b" (carol) to add you`,
			]),
		},
		{
			"rule": "namespace-prefix",
			"field": "metadata.name",
			"message": concat("", [
				`[namespace-prefix] namespace "team-b-mine" may not be labelled labgate.io/tenant="team-b": tenant `,
				`"team-b" allows the names "team-b". Fix: use one of the tenant's names, or ask the infra team to add `,
				`"team-b-mine" to spec.namespaces.names of Tenant "team-b"`,
			]),
		},
	}
}

test_namespace_for_missing_tenant_is_refused if {
	violations := violations_for(create_namespace(testdata.alice, "ghost-1", {"labgate.io/tenant": "ghost"}))
	violations == {{
		"rule": "namespace-tenant-member",
		"field": "metadata.labels",
		"message": concat("", [
			`[namespace-tenant-member] user "alice" (groups: team-a) may not create namespace "ghost-1" labelled `,
			`labgate.io/tenant="ghost": no Tenant "ghost" exists. Fix: label it with your own tenant (team-a), or ask `,
			`the infra team to create the Tenant`,
		]),
	}}
}

test_member_may_not_create_namespace_outside_prefix if {
	violations := violations_for(create_namespace(testdata.alice, "scratch", {"labgate.io/tenant": "team-a"}))
	violations == {{
		"rule": "namespace-prefix",
		"field": "metadata.name",
		"message": concat("", [
			`[namespace-prefix] namespace "scratch" may not be labelled labgate.io/tenant="team-a": tenant "team-a" `,
			`allows names starting with "team-a-" or the names "team-a". Fix: name it "team-a-scratch", or ask the `,
			`infra team to add "scratch" to spec.namespaces.names of Tenant "team-a"`,
		]),
	}}
}

test_tenant_without_namespace_spec_allows_no_names if {
	inventory := json.patch(testdata.inventory, [{"op": "remove", "path": "/tenants/team-b/spec/namespaces"}])
	violations := namespace_violations
		with input.request as create_namespace(testdata.bob, "team-b", {"labgate.io/tenant": "team-b"})
		with input.pod_templates as []
		with data.inventory as inventory
	[v.message | some v in violations] == [
		concat("", [
			`[namespace-prefix] namespace "team-b" may not be labelled labgate.io/tenant="team-b": tenant "team-b" `,
			`allows no namespace names (its spec.namespaces is empty). Fix: use one of the tenant's names, or ask the `,
			`infra team to add "team-b" to spec.namespaces.names of Tenant "team-b"`,
		]),
	]
}

# --- namespace-untenanted, namespace-reserved, namespace-count ---

# A listed member hears it once, from namespace-orphan (it said the same as namespace-untenanted).
test_a_listed_members_namespace_of_no_tenant_is_left_to_namespace_orphan if {
	violations_for(create_namespace(testdata.alice, "scratch", {"purpose": "play"})) == set()
}

# A tenant's service account (a member through its namespace, listed nowhere) is refused here.
test_a_tenant_service_account_may_not_create_a_namespace_of_no_tenant if {
	ci := {
		"username": "system:serviceaccount:team-a:ci", "groups": ["system:serviceaccounts", "system:serviceaccounts:team-a"],
	}
	violations_for(create_namespace(ci, "scratch", {"purpose": "play"})) == {{
		"rule": "namespace-untenanted",
		"field": "metadata.labels",
		"message": concat("", [
			`[namespace-untenanted] user "system:serviceaccount:team-a:ci" may not create namespace "scratch": it `,
			`would belong to no tenant, and only the platform creates those. Fix: name it with your tenant's prefix `,
			`("team-a-"); labgate labels it, or ask the infra team for a namespace outside the tenants`,
		]),
	}}
}

test_name_under_another_tenants_prefix_is_reserved_for_it if {
	# Unlabelled (the mutation labels only for the prefix's own members), by a member of another tenant.
	violations_for(create_namespace(testdata.bob, "team-a-squat", {})) == {{
		"rule": "namespace-reserved",
		"field": "metadata.name",
		"message": concat("", [
			`[namespace-reserved] namespace "team-a-squat" is reserved for tenant "team-a" (its spec.namespaces.prefix `,
			`is "team-a-"): only its admins and researchers create it, labelled labgate.io/tenant=team-a. Fix: label `,
			`it with your own tenant (team-b), or ask an admin of "team-a" (ann)`,
		]),
	}}

	# By someone of no tenant, and for a name a tenant lists.
	[v.rule | some v in violations_for(create_namespace({"username": "ops", "groups": ["ops"]}, "team-b", {}))] == [
		"namespace-reserved",
	]
}

test_longest_prefix_reserves_the_name if {
	inventory := json.patch(
		testdata.inventory,
		[{"op": "add", "path": "/tenants/team-b/spec/namespaces/prefix", "value": "team-a-b-"}],
	)
	refused := namespace_violations
		with input.request as create_namespace(testdata.alice, "team-a-b-x", {"labgate.io/tenant": "team-a"})
		with input.pod_templates as []
		with data.inventory as inventory
	[v.rule | some v in refused] == ["namespace-reserved"]
	admitted := namespace_violations
		with input.request as create_namespace(testdata.bob, "team-a-b-x", {"labgate.io/tenant": "team-b"})
		with input.pod_templates as []
		with data.inventory as inventory
	count(admitted) == 0
}

test_namespace_count_is_bounded if {
	# team-a has two namespaces (team-a, team-a-data).
	inventory := json.patch(
		testdata.inventory,
		[{"op": "add", "path": "/tenants/team-a/spec/namespaces/maxCount", "value": 2}],
	)
	refused := namespace_violations
		with input.request as create_namespace(testdata.alice, "team-a-three", {"labgate.io/tenant": "team-a"})
		with input.pod_templates as []
		with data.inventory as inventory
	refused == {{
		"rule": "namespace-count",
		"field": "metadata.labels",
		"message": concat("", [
			`[namespace-count] tenant "team-a" has 2 namespaces, its limit (spec.namespaces.maxCount: 2): namespace `,
			`"team-a-three" would be number 3. Fix: delete a namespace the tenant no longer needs (kubectl delete `,
			`namespace <name>), or ask the infra team to raise spec.namespaces.maxCount of Tenant "team-a"`,
		]),
	}}

	# The cluster's default applies without maxCount.
	by_default := namespace_violations
		with input.request as create_namespace(testdata.alice, "team-a-three", {"labgate.io/tenant": "team-a"})
		with input.pod_templates as []
		with data.inventory as testdata.inventory
		with data.labgate.config.max_namespaces_per_tenant as 2
	[v.message | some v in by_default] == [
		concat("", [
			`[namespace-count] tenant "team-a" has 2 namespaces, its limit (the cluster's default, 2): namespace `,
			`"team-a-three" would be number 3. Fix: delete a namespace the tenant no longer needs (kubectl delete `,
			`namespace <name>), or ask the infra team to raise spec.namespaces.maxCount of Tenant "team-a"`,
		]),
	]

	# Under the limit, and the platform beyond it.
	count(namespace_violations) == 0
		with input.request as create_namespace(testdata.alice, "team-a-three", {"labgate.io/tenant": "team-a"})
		with input.pod_templates as []
		with data.inventory as testdata.inventory
	count(namespace_violations) == 0
		with input.request as create_namespace(testdata.cluster_admin, "team-a-three", {"labgate.io/tenant": "team-a"})
		with input.pod_templates as []
		with data.inventory as inventory
}
