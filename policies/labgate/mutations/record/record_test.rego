package labgate.mutations.record_test

import data.labgate.lib.testdata
import data.labgate.mutations.record

_job := testdata.job("j", 1, {}, {"containers": [testdata.main_container]})

_changes := [{"rule": "priority-class", "template": "spec.template.spec", "warning": "set", "ops": [
	{"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "research-default"},
]}]

test_the_record_and_the_warnings_go_on_the_object_and_the_record_on_the_template if {
	ops := record.ops(_changes) with input as testdata.workload_input("Job", "team-a", testdata.alice, _job)
	entry := `[{"op":"add","path":"/spec/template/spec/priorityClassName","rule":"priority-class"}]`
	ops == [
		{"op": "add", "path": "/metadata/annotations", "value": {
			"labgate.io/mutation-warnings": `["set"]`,
			"labgate.io/mutations": entry,
		}},
		{"op": "add", "path": "/spec/template/metadata/annotations/labgate.io~1mutations", "value": entry},
	]
	record.is_carried(_changes)
}

test_nothing_changed_nothing_recorded if {
	record.ops([]) == [] with input as testdata.workload_input("Job", "team-a", testdata.alice, _job)
	not record.is_carried([])
}
