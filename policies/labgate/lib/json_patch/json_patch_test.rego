package labgate.lib.json_patch_test

import data.labgate.lib.json_patch
import data.labgate.lib.testdata

test_pointers_escape_their_tokens if {
	json_patch.pointer("spec.template.spec") == "/spec/template/spec"
	json_patch.pointer_of(["metadata", "labels", "labgate.io/tenant"]) == "/metadata/labels/labgate.io~1tenant"
	json_patch.escape("a~b/c") == "a~0b~1c"
	json_patch.field_pointer({"path": "spec.template.spec"}, "nodeSelector") == "/spec/template/spec/nodeSelector"
}

test_a_label_is_added_to_the_labels_or_with_them if {
	json_patch.label_op(null, "k/x", "v") == {"op": "add", "path": "/metadata/labels", "value": {"k/x": "v"}}
	json_patch.label_op({"a": "b"}, "k/x", "v") == {"op": "add", "path": "/metadata/labels/k~1x", "value": "v"}
}

test_warnings_are_cut_to_one_line if {
	json_patch.short("short") == "short"
	long := concat("", [x | some _ in numbers.range(1, 130); x := "a"])
	count(json_patch.short(long)) == 119
	endswith(json_patch.short(long), "...")
}

test_the_subject_is_the_pod_or_the_template if {
	json_patch.subject({"path": "spec"}) == "pod"
		with input as testdata.workload_input("Pod", "team-a", testdata.alice, testdata.pod("x", {}))
	json_patch.subject({"path": "spec.template.spec"}) == "template spec.template.spec"
		with input as testdata.workload_input("Job", "team-a", testdata.alice, testdata.job("j", 1, {}, {}))
}

test_values_of_another_type_are_empty if {
	json_patch.object_or_empty([]) == {}
	json_patch.array_or_empty({}) == []
	json_patch.array_or_empty([1]) == [1]
}
