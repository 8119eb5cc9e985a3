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

test_an_outsiders_namespace_is_not_labelled if {
	changes := namespace_label.changes with input as _namespace("vision-exp", testdata.bob)
		with data.inventory as testdata.gpu_inventory
	changes == []
}
