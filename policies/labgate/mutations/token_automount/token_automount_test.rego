package labgate.mutations.token_automount_test

import data.labgate.lib.testdata
import data.labgate.mutations.token_automount

_pod(spec) := testdata.workload_input("Pod", "team-a", testdata.alice, testdata.pod("x", spec))

test_the_token_is_turned_off_where_the_spec_does_not_say if {
	changes := token_automount.template_changes.spec with input as _pod({"containers": [testdata.main_container]})
		with data.inventory as testdata.inventory
	changes == [{
		"rule": "token-automount",
		"ops": [{"op": "add", "path": "/spec/automountServiceAccountToken", "value": false}],
		"warning": `labgate turned off token automount (service account "default") for pod`,
	}]
}

test_an_explicit_automount_is_left_alone if {
	changes := token_automount.template_changes.spec
		with input as _pod({"automountServiceAccountToken": true, "containers": [testdata.main_container]})
		with data.inventory as testdata.inventory
	changes == []
}
