# What labgate's mutation says, and when (issue 22): a tag it could not pin, and warnings that
# travel on the object to be said only when it is admitted. Helpers are mutation_test.rego's.
package labgate.mutation_test

import data.labgate.lib.testdata
import data.labgate.mutation

# Issue 22 item 3: a tag whose registry did not answer is not pinned, and the warning says so.
_unreachable_input := json.patch(_pin_input, [{"op": "replace", "path": "/images", "value": {
	"registry.lab.example/vision/train:v1": {
		"registry": "registry.lab.example", "digest": null, "pinned": null,
		"error": "registry registry.lab.example is unreachable (connection refused)",
	},
}}])

test_a_tag_whose_registry_did_not_answer_runs_unpinned_with_a_warning if {
	mutation.patch == [] with input as _unreachable_input
		with data.inventory as _pin_inventory({"registries": ["registry.lab.example"]})
	warnings := mutation.warnings with input as _unreachable_input
		with data.inventory as _pin_inventory({"registries": ["registry.lab.example"]})
	warnings == [
		"labgate did not pin registry.lab.example/vision/train:v1 (no digest from its registry): it runs by tag as written",
	]

	# Where a signature is required the image is refused instead: no warning about pinning.
	signed := _pin_inventory({"registries": ["registry.lab.example"], "requireSignature": true})
	count(mutation.warnings) == 0 with input as _unreachable_input with data.inventory as signed
}

# Issue 22 item 5: "labgate placed pod on spot pool ..." reached kubectl for pods then refused. The
# warnings of a change travel on the object, for the validating webhook to say when it admits.
test_the_warnings_of_a_change_travel_on_the_object_not_in_the_mutating_response if {
	input_doc := pod_input("speech", testdata.sam, {"containers": [gpu_container("1")]})
	full := mutation.patch with input as input_doc with data.inventory as testdata.gpu_inventory
	last := full[count(full) - 1]
	last.path == "/metadata/annotations"
	json.unmarshal(last.value["labgate.io/mutation-warnings"]) == mutate(input_doc).warnings
	`labgate placed pod on spot pool "a100-spot"` in mutate(input_doc).warnings
	count(mutation.warnings_now) == 0 with input as input_doc with data.inventory as testdata.gpu_inventory
}

test_the_warnings_join_annotations_already_there if {
	pod := json.patch(
		testdata.pod("train-1", {"containers": [gpu_container("1")]}),
		[{"op": "add", "path": "/metadata/annotations", "value": {"team": "x"}}],
	)
	input_doc := testdata.workload_input("Pod", "speech", testdata.sam, pod)
	full := mutation.patch with input as input_doc with data.inventory as testdata.gpu_inventory
	[op.path | some op in full; contains(op.path, "annotations")] == [
		"/metadata/annotations/labgate.io~1mutation-warnings",
		"/metadata/annotations/labgate.io~1mutations",
	]
}

test_a_namespace_label_warning_is_said_by_the_mutating_webhook if {
	input_doc := namespace_input("vision-exp", testdata.vera, {})
	w := mutation.warnings_now with input as input_doc with data.inventory as testdata.gpu_inventory
	w == mutation.warnings with input as input_doc with data.inventory as testdata.gpu_inventory
	count(w) == 1
}
