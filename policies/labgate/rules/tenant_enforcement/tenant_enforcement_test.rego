package labgate.rules.tenant_enforcement_test

import data.labgate.lib.testdata
import data.labgate.rules.tenant_enforcement

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

# --- tenant-enforcement-unknown ---

with_enforcement(enforcement) := json.patch(tenant_request("team-c", {"names": ["team-c"]}), [
	{"op": "add", "path": "/object/spec/enforcement", "value": enforcement},
])

test_enforcement_of_known_rules_is_allowed if {
	count(tenant_enforcement.violation) == 0 with input.request as with_enforcement({"gpu-quota": "warn"})
		with data.inventory as inventory
		with data.labgate.rule_ids.known as ["gpu-quota", "pod-hardening"]
}

# Regression: a misspelt rule id was accepted silently and relaxed nothing.
test_enforcement_of_an_unknown_rule_is_refused_with_the_known_ids if {
	v := tenant_enforcement.violation with input.request as with_enforcement({"gpu-qouta": "warn"})
		with data.inventory as inventory
		with data.labgate.rule_ids.known as ["gpu-quota", "pod-hardening"]
	v == {{
		"rule": "tenant-enforcement-unknown",
		"field": "spec.enforcement[gpu-qouta]",
		"message": concat("", [
			`[tenant-enforcement-unknown] Tenant "team-c" spec.enforcement names "gpu-qouta", which is not a rule id `,
			`of labgate's policies. Did you mean "gpu-quota"? Fix: use one of gpu-quota, pod-hardening`,
		]),
	}}
}

# Nothing like any rule id: no guess, only the list.
test_an_unknown_rule_like_none_gets_no_suggestion if {
	v := tenant_enforcement.violation with input.request as with_enforcement({"x": "warn"})
		with data.inventory as inventory
		with data.labgate.rule_ids.known as ["gpu-quota", "pod-hardening"]
	v == {{
		"rule": "tenant-enforcement-unknown",
		"field": "spec.enforcement[x]",
		"message": concat("", [
			`[tenant-enforcement-unknown] Tenant "team-c" spec.enforcement names "x", which is not a rule id of `,
			`labgate's policies. Fix: use one of gpu-quota, pod-hardening`,
		]),
	}}
}

# The nearest of many: a dropped letter, a swapped word.
test_the_nearest_rule_id_is_suggested if {
	known := ["gpu-quota", "gpu-quota-unfit", "pod-hardening", "placement-pool", "placement-node-name"]
	some v in tenant_enforcement.violation with input.request as with_enforcement({"pod-hardning": "warn"})
		with data.inventory as inventory
		with data.labgate.rule_ids.known as known
	contains(v.message, `Did you mean "pod-hardening"?`)
	some w in tenant_enforcement.violation with input.request as with_enforcement({"placement-pools": "warn"})
		with data.inventory as inventory
		with data.labgate.rule_ids.known as known
	contains(w.message, `Did you mean "placement-pool"?`)
}

test_generated_rule_ids_are_loaded_with_the_policies if {
	"gpu-quota" in data.labgate.rule_ids.known
	"tenant-enforcement-unknown" in data.labgate.rule_ids.known
}

# A rule id the policies no longer have: the reconciler's removal of its finalizer (the spec as it
# was) is admitted, so the Tenant can be deleted; an edit of its spec that keeps the id is refused.
finalizer_removed(request) := object.union(request, {
	"operation": "UPDATE",
	"oldObject": object.union(request.object, {"metadata": {"finalizers": ["labgate.io/cleanup"]}}),
})

test_a_finalizer_removal_is_admitted_though_a_named_rule_left_the_policies if {
	count(tenant_enforcement.violation) == 0
		with input.request as finalizer_removed(with_enforcement({"gone-rule": "warn"}))
		with data.inventory as inventory
		with data.labgate.rule_ids.known as ["gpu-quota", "pod-hardening"]
}

test_the_pair_an_edit_of_the_spec_that_keeps_the_gone_rule_is_refused if {
	edited := json.patch(finalizer_removed(with_enforcement({"gone-rule": "warn"})), [
		{"op": "add", "path": "/object/spec/members", "value": {"viewers": [{"kind": "User", "name": "v"}]}},
	])
	[v.rule | some v in tenant_enforcement.violation] == ["tenant-enforcement-unknown"]
		with input.request as edited
		with data.inventory as inventory
		with data.labgate.rule_ids.known as ["gpu-quota", "pod-hardening"]
}
