package labgate.mutations.image_pinning_test

import data.labgate.lib.testdata
import data.labgate.mutations.image_pinning

_digest := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

_input(images) := {
	"request": testdata.pod_request("team-a", testdata.alice),
	"pod_templates": [{"path": "spec", "metadata": {}, "replicas": 1, "spec": {
		"containers": [{"name": "main", "image": "registry.lab.example/vision/train:v1"}],
		"volumes": [{"name": "weights", "image": {"reference": "registry.lab.example/vision/train:v1"}}],
	}}],
	"images": images,
}

_inventory(images_spec) := json.patch(
	testdata.inventory,
	[{"op": "add", "path": "/tenants/team-a/spec/images", "value": images_spec}],
)

test_containers_then_image_volumes_are_pinned if {
	pinned := concat("", ["registry.lab.example/vision/train@", _digest])
	changes := image_pinning.template_changes.spec
		with input as _input({"registry.lab.example/vision/train:v1": {"pinned": pinned}})
		with data.inventory as _inventory({"registries": ["registry.lab.example"]})
	[op | some c in changes; some op in c.ops] == [
		{"op": "add", "path": "/spec/containers/0/image", "value": pinned},
		{"op": "add", "path": "/spec/volumes/0/image/reference", "value": pinned},
	]
	{c.warning | some c in changes} == {"labgate pinned registry.lab.example/vision/train:v1 to sha256:0123456789ab"}
}

test_an_unresolved_tag_is_said_not_pinned if {
	fact := {"error": "timeout", "registry": "registry.lab.example"}
	changes := image_pinning.template_changes.spec with input as _input({"registry.lab.example/vision/train:v1": fact})
		with data.inventory as _inventory({"registries": ["registry.lab.example"]})
	changes == [{
		"rule": "image-digest-pin", "ops": [],
		"warning": concat("", [
			"labgate did not pin registry.lab.example/vision/train:v1 (no digest from its registry): it runs by tag as ",
			"written",
		]),
	}]
}
