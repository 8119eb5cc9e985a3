package labgate.mutations.namespace_label_test

import data.labgate.lib.testdata
import data.labgate.mutations.namespace_label

_namespace(name, user) := testdata.workload_input("Namespace", "", user, {
	"apiVersion": "v1",
	"kind": "Namespace",
	"metadata": {"name": name},
})

test_a_members_namespace_under_the_prefix_is_labelled if {
	changes := namespace_label.changes with input as _namespace("vision-exp", testdata.vera)
		with data.inventory as testdata.gpu_inventory
	changes == [{
		"rule": "namespace-label",
		"ops": [{"op": "add", "path": "/metadata/labels", "value": {"labgate.io/tenant": "vision"}}],
		"warning": `labgate labelled namespace "vision-exp" labgate.io/tenant=vision`,
	}]
}

# generateName: the mutating webhook sees no name yet; every name generated from the prefix is under it.
test_a_members_namespace_named_by_the_apiserver_under_the_prefix_is_labelled if {
	unnamed := json.patch(_namespace("x", testdata.vera), [
		{"op": "remove", "path": "/request/name"},
		{"op": "replace", "path": "/request/object/metadata", "value": {"generateName": "vision-exp-"}},
	])
	changes := namespace_label.changes with input as unnamed with data.inventory as testdata.gpu_inventory
	[c.ops | some c in changes] == [[{"op": "add", "path": "/metadata/labels", "value": {"labgate.io/tenant": "vision"}}]]
	short := json.patch(unnamed, [{"op": "replace", "path": "/request/object/metadata/generateName", "value": "vis"}])
	namespace_label.changes == [] with input as short with data.inventory as testdata.gpu_inventory
}

test_an_outsiders_namespace_is_not_labelled if {
	changes := namespace_label.changes with input as _namespace("vision-exp", testdata.bob)
		with data.inventory as testdata.gpu_inventory
	changes == []
}
