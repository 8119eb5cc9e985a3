package labgate.mutations.priority_class_test

import data.labgate.lib.testdata
import data.labgate.mutations.priority_class

_pod(spec) := testdata.workload_input("Pod", "team-a", testdata.alice, testdata.pod("x", spec))

test_the_default_class_is_set_where_none_is_named if {
	changes := priority_class.template_changes.spec with input as _pod({"containers": [testdata.main_container]})
		with data.inventory as testdata.inventory
	changes == [{
		"rule": "priority-class",
		"ops": [{"op": "add", "path": "/spec/priorityClassName", "value": "research-default"}],
		"warning": `labgate set priorityClassName "research-default" on pod`,
	}]
}

test_a_pod_with_a_resolved_priority_gets_no_class if {
	changes := priority_class.template_changes.spec
		with input as _pod({"priority": 0, "containers": [testdata.main_container]})
		with data.inventory as testdata.inventory
	changes == []
}
