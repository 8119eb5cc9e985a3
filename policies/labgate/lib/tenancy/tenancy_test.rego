package labgate.lib.tenancy_test

import data.labgate.lib.tenancy
import data.labgate.lib.testdata

team_a := testdata.inventory.tenants["team-a"]

team_b := testdata.inventory.tenants["team-b"]

# A service account's user as the apiserver names it, with its groups.
service_account(namespace, name) := {
	"username": sprintf("system:serviceaccount:%s:%s", [namespace, name]),
	"groups": ["system:serviceaccounts", sprintf("system:serviceaccounts:%s", [namespace]), "system:authenticated"],
}

namespace_create(user, name, labels) := testdata.request(
	"CREATE",
	"Namespace",
	"",
	user,
	{"metadata": {"name": name, "labels": labels}},
	null,
)

# --- who owns the request's namespace ---

test_a_namespaced_request_is_owned_by_its_namespaces_tenant if {
	request := testdata.pod_request("team-a-data", testdata.alice)
	tenancy.request_namespace == "team-a-data" with input.request as request
	tenancy.claimed_tenant_name == "team-a" with input.request as request with data.inventory as testdata.inventory
	tenancy.namespace_tenant == team_a with input.request as request with data.inventory as testdata.inventory
	tenancy.namespace_tenant_name == "team-a" with input.request as request with data.inventory as testdata.inventory
}

test_a_namespace_request_is_owned_by_the_label_it_carries if {
	request := namespace_create(testdata.alice, "team-a-new", {"labgate.io/tenant": "team-a"})
	tenancy.request_namespace == "team-a-new" with input.request as request
	tenancy._namespace_labels == {"labgate.io/tenant": "team-a"} with input.request as request
	tenancy.namespace_tenant == team_a with input.request as request with data.inventory as testdata.inventory
}

test_a_label_naming_no_tenant_claims_one_that_does_not_exist if {
	request := testdata.pod_request("orphan", testdata.alice)
	tenancy.claimed_tenant_name == "ghost" with input.request as request with data.inventory as testdata.inventory
	not tenancy.namespace_tenant with input.request as request with data.inventory as testdata.inventory
}

test_a_namespace_of_no_tenant_has_none if {
	request := testdata.pod_request("default", testdata.alice)
	not tenancy.claimed_tenant_name with input.request as request with data.inventory as testdata.inventory
	tenancy.namespace_tenant_name == "" with input.request as request with data.inventory as testdata.inventory
	unseen := testdata.pod_request("not-yet-seen", testdata.alice)
	tenancy.namespace_tenant_name == "" with input.request as unseen with data.inventory as testdata.inventory
}

# --- the platform ---

test_trusted_users_groups_and_labgates_own_service_accounts_are_the_platform if {
	tenancy.is_trusted_requester with input.request as testdata.pod_request("team-a", testdata.cluster_admin)
	tenancy.is_trusted_requester
		with input.request as testdata.pod_request("team-a", {"username": "system:kube-scheduler", "groups": []})
	reconciler := service_account("labgate-system", "labgate-reconciler")
	tenancy.is_trusted_requester with input.request as testdata.pod_request("team-a", reconciler)
		with data.inventory as object.union(testdata.inventory, {"platform": {"namespace": "labgate-system"}})
	not tenancy.is_trusted_requester with input.request as testdata.pod_request("team-a", reconciler)
		with data.inventory as object.union(testdata.inventory, {"platform": {"namespace": "elsewhere"}})
	not tenancy.is_trusted_requester with input.request as testdata.pod_request("team-a", testdata.alice)
}

# --- members ---

test_listed_users_groups_and_service_accounts_are_members if {
	tenancy.is_member(team_a, testdata.alice)
	tenancy.is_member(team_a, testdata.ann)
	tenancy.is_member(team_b, service_account("ci", "runner"))
	not tenancy.is_member(team_a, testdata.bob)
	not tenancy.is_member(team_b, service_account("ci", "other"))
}

test_service_accounts_living_in_the_tenants_namespaces_are_members if {
	tenancy.is_member(team_a, service_account("team-a-data", "trainer")) with data.inventory as testdata.inventory
	not tenancy.is_member(team_a, service_account("team-b", "trainer")) with data.inventory as testdata.inventory
	not tenancy.is_member(team_a, service_account("not-yet-seen", "trainer")) with data.inventory as testdata.inventory
	not tenancy.is_listed_member(team_a, service_account("team-a-data", "trainer"))
}

test_a_namespace_is_the_tenants_by_its_label if {
	tenancy._is_tenant_namespace("team-a-data", "team-a") with data.inventory as testdata.inventory
	not tenancy._is_tenant_namespace("team-b", "team-a") with data.inventory as testdata.inventory
	not tenancy._is_tenant_namespace("default", "team-a") with data.inventory as testdata.inventory
	not tenancy._is_tenant_namespace("missing", "team-a") with data.inventory as testdata.inventory
	tenancy.tenant_namespaces("team-a") == {"team-a", "team-a-data"} with data.inventory as testdata.inventory
}

test_tenants_of_a_user_are_those_it_is_a_member_of if {
	tenancy.tenants_of(testdata.alice) == {"team-a"} with data.inventory as testdata.inventory
	tenancy.tenants_of(service_account("ci", "runner")) == {"team-b"} with data.inventory as testdata.inventory
	tenancy.tenants_of({"username": "eve", "groups": []}) == set() with data.inventory as testdata.inventory
}

test_admins_are_listed_admins_only if {
	tenancy.is_admin(team_a, testdata.ann)
	not tenancy.is_admin(team_a, testdata.alice)
	tenancy.admin_names(team_a) == "ann"
	tenancy.admin_names({"metadata": {"name": "x"}, "spec": {}}) == ""
	tenancy._subject_name({"kind": "ServiceAccount", "namespace": "ci", "name": "runner"}) == "ci/runner"
	tenancy._subject_name({"kind": "Group", "name": "team-a"}) == "team-a"
}

# --- text for messages ---

test_users_are_described_without_system_groups if {
	tenancy.describe_user(testdata.alice) == `"alice" (groups: team-a)`
	tenancy.describe_user(testdata.carol) == `"carol"`
}

test_the_object_is_named_by_its_kind_and_name_or_generate_name if {
	tenancy.object_ref == `Pod "train-1"` with input.request as testdata.pod_request("team-a", testdata.alice)

	# generateName: no request.name; the mutating webhook sees no name yet, the validating webhook
	# the one the apiserver generated.
	unnamed := json.patch(testdata.pod_request("team-a", testdata.alice), [
		{"op": "remove", "path": "/name"},
		{"op": "remove", "path": "/object/metadata/name"},
		{"op": "add", "path": "/object/metadata/generateName", "value": "sweep-"},
	])
	tenancy.object_ref == `Pod "sweep-"` with input.request as unnamed
	tenancy.object_name == "sweep-" with input.request as unnamed
	generated := json.patch(unnamed, [{"op": "add", "path": "/object/metadata/name", "value": "sweep-x7k2p"}])
	tenancy.object_ref == `Pod "sweep-x7k2p"` with input.request as generated
	tenancy.object_name == "sweep-x7k2p" with input.request as generated
	tenancy.object_name == "train-1" with input.request as testdata.pod_request("team-a", testdata.alice)
}

test_containers_of_every_kind_are_listed_with_their_field if {
	spec := {
		"containers": [{"name": "main"}, {"name": "side"}],
		"initContainers": [{"name": "init"}],
		"ephemeralContainers": [{"name": "debug"}],
	}
	{c.field | some c in tenancy.containers(spec)} == {
		"containers[0]", "containers[1]", "initContainers[0]", "ephemeralContainers[0]",
	}
	count(tenancy.containers({})) == 0
}

tenant_write(operation, spec, old) := {
	"operation": operation,
	"kind": {"group": "labgate.io", "version": "v1alpha1", "kind": "Tenant"},
	"object": {"metadata": {"name": "team-a"}, "spec": spec},
	"oldObject": old,
}

test_a_tenants_spec_is_written_by_a_create_and_by_an_update_that_changes_it if {
	tenancy.tenant_spec_written with input.request as tenant_write("CREATE", {"gpu": {"total": 8}}, null)
	tenancy.tenant_spec_written with input.request as tenant_write(
		"UPDATE", {"gpu": {"total": 8}},
		{"metadata": {"name": "team-a"}, "spec": {"gpu": {"total": 4}}},
	)
}

test_an_update_that_leaves_the_spec_writes_nothing_the_spec_rules_judge if {
	not tenancy.tenant_spec_written with input.request as tenant_write(
		"UPDATE", {"gpu": {"total": 8}},
		{"metadata": {"name": "team-a", "finalizers": ["labgate.io/cleanup"]}, "spec": {"gpu": {"total": 8}}},
	)
}

# A request straight at the webhook port without oldObject is judged, never let through.
test_an_update_without_its_old_object_is_judged if {
	request := object.remove(tenant_write("UPDATE", {"gpu": {"total": 8}}, null), ["oldObject"])
	tenancy.tenant_spec_written with input.request as request
}
