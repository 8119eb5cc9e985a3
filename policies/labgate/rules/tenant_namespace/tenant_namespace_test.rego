package labgate.rules.tenant_namespace_test

import data.labgate.lib.testdata
import data.labgate.rules.tenant_namespace

tenant_request(name, namespaces) := {
	"operation": "CREATE",
	"kind": {"group": "labgate.io", "version": "v1alpha1", "kind": "Tenant"},
	"name": name,
	"userInfo": {"username": "infra", "groups": ["system:masters"]},
	"object": {"metadata": {"name": name}, "spec": {"members": {}, "namespaces": namespaces}},
}

inventory := json.patch(testdata.inventory, [
	{"op": "add", "path": "/tenants/team-a/spec/namespaces", "value": {"names": ["team-a"], "prefix": "team-a-"}},
])

test_new_tenant_with_its_own_namespaces_is_allowed if {
	count(tenant_namespace.violation) == 0
		with input.request as tenant_request("team-c", {"names": ["team-c"], "prefix": "team-c-"})
		with data.inventory as inventory
}

test_updating_a_tenant_with_its_own_namespace_is_allowed if {
	count(tenant_namespace.violation) == 0
		with input.request as tenant_request("team-a", {"names": ["team-a"], "prefix": "team-a-"})
		with data.inventory as inventory
}

test_namespace_named_by_another_tenant_is_refused if {
	violations := tenant_namespace.violation
		with input.request as tenant_request("team-c", {"names": ["team-c", "team-a"]})
		with data.inventory as inventory
	violations == {{
		"rule": "tenant-namespace-conflict",
		"field": "spec.namespaces.names[1]",
		"message": concat("", [
			`[tenant-namespace-conflict] Tenant "team-c" spec.namespaces.names[1] "team-a" already belongs to tenant `,
			`"team-a". Fix: choose another namespace, or remove it from Tenant "team-a" first`,
		]),
	}}
}

# A cluster admin moved namespace team-a-old (still listed by team-a) to team-b: an update of team-a
# that keeps it is refused with the fix that applies (the label, not another Tenant's list), and the
# update that drops it is admitted.
moved_inventory := json.patch(inventory, [{
	"op": "add",
	"path": "/namespaces/team-a-old",
	"value": {"labels": {"labgate.io/tenant": "team-b"}},
}])

test_a_listed_namespace_moved_to_another_tenant_is_refused_with_the_fix_for_a_label if {
	violations := tenant_namespace.violation
		with input.request as tenant_request("team-a", {"names": ["team-a", "team-a-old"], "prefix": "team-a-"})
		with data.inventory as moved_inventory
	violations == {{
		"rule": "tenant-namespace-conflict",
		"field": "spec.namespaces.names[1]",
		"message": concat("", [
			`[tenant-namespace-conflict] Tenant "team-a" spec.namespaces.names[1] "team-a-old" already belongs to `,
			`tenant "team-b". Fix: it carries the label labgate.io/tenant=team-b: remove it from this Tenant's `,
			`spec.namespaces.names, or have a cluster admin move it back once its work is done `,
			`(kubectl label --overwrite namespace team-a-old labgate.io/tenant=team-a)`,
		]),
	}}
}

test_the_pair_the_update_that_drops_the_moved_namespace_is_admitted if {
	count(tenant_namespace.violation) == 0
		with input.request as tenant_request("team-a", {"names": ["team-a"], "prefix": "team-a-"})
		with data.inventory as moved_inventory
}

# A Tenant manifest with only generateName, as `labgate check` submits it (no name anywhere yet):
# its namespaces are still checked against every other tenant's.
test_a_tenant_named_only_by_generate_name_is_checked_all_the_same if {
	unnamed := json.patch(tenant_request("team-c", {"names": ["team-a"]}), [
		{"op": "remove", "path": "/name"},
		{"op": "replace", "path": "/object/metadata", "value": {"generateName": "team-"}},
	])
	violations := tenant_namespace.violation with input.request as unnamed with data.inventory as inventory
	[[v.rule, v.field] | some v in violations] == [["tenant-namespace-conflict", "spec.namespaces.names[0]"]]
}

# kube-* and labgate's own namespace are exempt from its webhooks: no Tenant may list them.
test_the_platforms_namespaces_are_refused_and_the_tenants_own_admitted if {
	platform := object.union(inventory, {"platform": {"namespace": "labgate-system"}})
	violations := tenant_namespace.violation
		with input.request as tenant_request("ops", {"names": ["ops", "kube-system", "labgate-system", "kube-public"]})
		with data.inventory as platform
	{[v.field, v.message] | some v in violations} == {
		[
			"spec.namespaces.names[1]",
			concat("", [
				`[tenant-namespace-conflict] Tenant "ops" spec.namespaces.names[1] "kube-system" is the platform's: `,
				`labgate's webhooks do not judge what happens in it, so no tenant may hold it. Fix: remove it, and `,
				`give the tenant a namespace of its own`,
			]),
		],
		["spec.namespaces.names[2]", concat("", [
			`[tenant-namespace-conflict] Tenant "ops" spec.namespaces.names[2] "labgate-system" is the platform's: `,
			`labgate's webhooks do not judge what happens in it, so no tenant may hold it. Fix: remove it, and `,
			`give the tenant a namespace of its own`,
		])],
		["spec.namespaces.names[3]", concat("", [
			`[tenant-namespace-conflict] Tenant "ops" spec.namespaces.names[3] "kube-public" is the platform's: `,
			`labgate's webhooks do not judge what happens in it, so no tenant may hold it. Fix: remove it, and `,
			`give the tenant a namespace of its own`,
		])],
	}
	count(tenant_namespace.violation) == 0
		with input.request as tenant_request("ops", {"names": ["ops", "kubeflow-ops"], "prefix": "ops-"})
		with data.inventory as platform
}

# The chart's webhook.exemptNamespaces are left out of the webhook registrations as well: refused
# too; a namespace whose name only begins like one is the tenant's to hold.
test_the_charts_exempt_namespaces_are_refused_and_similar_names_admitted if {
	platform := object.union(inventory, {"platform": {"namespace": "labgate-system", "exempt_namespaces": ["monitoring"]}})
	violations := tenant_namespace.violation
		with input.request as tenant_request("ops", {"names": ["ops", "monitoring"]})
		with data.inventory as platform
	[[v.rule, v.field] | some v in violations] == [["tenant-namespace-conflict", "spec.namespaces.names[1]"]]
	count(tenant_namespace.violation) == 0
		with input.request as tenant_request("ops", {"names": ["ops", "monitoring-ops"]})
		with data.inventory as platform
}

test_namespace_labelled_for_another_tenant_is_refused if {
	violations := tenant_namespace.violation with input.request as tenant_request("team-c", {"names": ["team-b"]})
		with data.inventory as inventory
	[v.rule | some v in violations] == ["tenant-namespace-conflict"]
}

test_overlapping_prefix_is_refused if {
	violations := tenant_namespace.violation with input.request as tenant_request("team-c", {"prefix": "team-a-x-"})
		with data.inventory as inventory
	violations == {{
		"rule": "tenant-namespace-conflict",
		"field": "spec.namespaces.prefix",
		"message": concat("", [
			`[tenant-namespace-conflict] Tenant "team-c" spec.namespaces.prefix "team-a-x-" overlaps the prefix `,
			`"team-a-" of tenant "team-a": researchers of both could create the same namespaces. Fix: choose a prefix `,
			`neither starts the other`,
		]),
	}}
}

# Deleting Tenant team-a while it still lists the namespace moved to team-b: the reconciler's
# removal of its finalizer changes no spec and is admitted (refused, the Tenant would never go).
test_a_finalizer_removal_is_admitted_while_a_listed_namespace_is_held_elsewhere if {
	request := tenant_request("team-a", {"names": ["team-a", "team-a-old"], "prefix": "team-a-"})
	finalizer_removed := object.union(request, {
		"operation": "UPDATE",
		"oldObject": object.union(request.object, {"metadata": {"finalizers": ["labgate.io/cleanup"]}}),
	})
	count(tenant_namespace.violation) == 0 with input.request as finalizer_removed with data.inventory as moved_inventory
}
