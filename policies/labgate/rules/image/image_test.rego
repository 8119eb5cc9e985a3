package labgate.rules.image_test

import data.labgate.admission
import data.labgate.lib.testdata
import data.labgate.rules.image as image_rules

digest := "sha256:0b3a6b7a8d4f0e3b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b"

other_digest := "sha256:1111111111111111111111111111111111111111111111111111111111111111"

# team-a trusts one registry path and one key, and requires signatures; team-b sets nothing.
inventory := json.patch(testdata.inventory, [{"op": "add", "path": "/tenants/team-a/spec/images", "value": {
	"registries": ["registry.lab.example/research", "Ghcr.IO/lab-org/"],
	"requireSignature": true,
	"signingKeys": [{"name": "release", "publicKey": "PEM"}, {"name": "ci", "publicKey": "PEM"}],
}}])

trainer := "registry.lab.example/research/trainer:v1"

# The fact the webhook hands over for an image that checked out.
fact(reference, registry, repository, tag, signed_by) := {
	"reference": reference,
	"normalized": sprintf("%s/%s:%s", [registry, repository, tag]),
	"registry": registry,
	"repository": repository,
	"tag": tag,
	"digest": digest,
	"signed_by": signed_by,
	"error": null,
}

trainer_fact := fact(trainer, "registry.lab.example", "research/trainer", "v1", ["release"])

# As the validating webhook sees it: labgate's mutation made every container pull always.
pod_with(images) := testdata.pod("train-1", {"containers": [
{"name": "main", "image": image, "imagePullPolicy": "Always"} |
	some image in images
]})

violations_for(namespace, user, obj, images) := violations if {
	workload := testdata.workload_input("Pod", namespace, user, obj)
	violations := image_rules.violation with input as object.union(workload, {"images": images})
		with data.inventory as inventory
}

test_signed_image_from_allowed_registry_is_admitted if {
	count(violations_for("team-a", testdata.alice, pod_with([trainer]), {trainer: trainer_fact})) == 0
}

test_tenant_without_image_rules_is_not_restricted if {
	image := "docker.io/someone/anything:latest"
	f := fact(image, "docker.io", "someone/anything", "latest", [])
	count(violations_for("team-b", testdata.bob, pod_with([image]), {image: f})) == 0
}

test_namespace_of_no_tenant_and_the_platform_are_not_checked if {
	image := "evil.example/x:v1"
	f := fact(image, "evil.example", "x", "v1", [])
	count(violations_for("default", testdata.alice, pod_with([image]), {image: f})) == 0
	count(violations_for("team-a", testdata.cluster_admin, pod_with([image]), {image: f})) == 0
}

test_lookalike_registry_is_refused if {
	image := "registry.lab.example.evil.com/research/trainer:v1"
	f := fact(image, "registry.lab.example.evil.com", "research/trainer", "v1", ["release"])
	violations_for("team-a", testdata.alice, pod_with([image]), {image: f}) == {{
		"rule": "image-registry",
		"field": "spec.containers[0].image",
		"message": concat("", [
			`[image-registry] Pod "train-1" spec.containers[0] ("main") runs image `,
			`"registry.lab.example.evil.com/research/trainer:v1" (registry.lab.example.evil.com/research/trainer), `,
			`which is not under a registry tenant "team-a" allows (registry.lab.example/research, Ghcr.IO/lab-org/). `,
			`Fix: use an image from one of those, or ask the infra team to add its registry to spec.images.registries`,
		]),
	}}
}

test_repository_prefix_respects_path_boundaries if {
	image := "registry.lab.example/researchers/trainer:v1"
	f := fact(image, "registry.lab.example", "researchers/trainer", "v1", ["release"])
	[v.rule | some v in violations_for("team-a", testdata.alice, pod_with([image]), {image: f})] == ["image-registry"]

	nested := "registry.lab.example/research/vision/trainer:v1"
	g := fact(nested, "registry.lab.example", "research/vision/trainer", "v1", ["release"])
	count(violations_for("team-a", testdata.alice, pod_with([nested]), {nested: g})) == 0
}

test_registry_entries_are_normalised if {
	# "Ghcr.IO/lab-org/" in the tenant: host case and a trailing slash do not matter.
	image := "ghcr.io/lab-org/tool@sha256:0b3a6b7a8d4f0e3b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b"
	f := object.union(fact(image, "ghcr.io", "lab-org/tool", "", ["ci"]), {"tag": null})
	count(violations_for("team-a", testdata.alice, pod_with([image]), {image: f})) == 0
}

test_docker_hub_aliases_in_entries_match_docker_io if {
	image := "nginx"
	f := fact(image, "docker.io", "library/nginx", "latest", ["release"])
	count(image_rules.violation) == 0 with input as object.union(
		testdata.workload_input("Pod", "team-a", testdata.alice, pod_with([image])),
		{"images": {image: f}},
	)
		with data.inventory as inventory
		with data.labgate.config.allowed_registries as ["index.docker.io/library"]
}

test_cluster_wide_registries_alone_restrict_every_tenant if {
	image := "quay.io/someone/tool:v2"
	f := fact(image, "quay.io", "someone/tool", "v2", [])
	violations := image_rules.violation with input as object.union(
		testdata.workload_input("Pod", "team-b", testdata.bob, pod_with([image])),
		{"images": {image: f}},
	)
		with data.inventory as inventory
		with data.labgate.config.allowed_registries as ["registry.lab.example"]
	[v.message | some v in violations] == [
		concat("", [
			`[image-registry] Pod "train-1" spec.containers[0] ("main") runs image "quay.io/someone/tool:v2" `,
			`(quay.io/someone/tool), which is not under a registry tenant "team-b" allows (registry.lab.example). Fix: `,
			`use an image from one of those, or ask the infra team to add its registry to spec.images.registries`,
		]),
	]
}

test_unsigned_image_is_refused_naming_digest_and_keys if {
	f := object.union(trainer_fact, {"signed_by": []})
	violations_for("team-a", testdata.alice, pod_with([trainer]), {trainer: f}) == {{
		"rule": "image-signature",
		"field": "spec.containers[0].image",
		"message": `[image-signature] Pod "train-1" spec.containers[0] ("main") runs image "registry.lab.example/research/trainer:v1" (digest sha256:0b3a6b7a8d4f0e3b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b), which no key tenant "team-a" trusts has signed (trusted keys: release, ci). Fix: sign it with one of those keys (cosign sign --key <key> registry.lab.example/research/trainer@sha256:0b3a6b7a8d4f0e3b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b) or use an image one of them signed`,
	}}
}

test_signature_required_without_keys_says_so if {
	no_keys := json.patch(
		testdata.inventory,
		[{"op": "add", "path": "/tenants/team-b/spec/images", "value": {"requireSignature": true}}],
	)
	image := "registry.lab.example/b/tool:v1"
	f := fact(image, "registry.lab.example", "b/tool", "v1", [])
	violations := image_rules.violation with input as object.union(
		testdata.workload_input("Pod", "team-b", testdata.bob, pod_with([image])),
		{"images": {image: f}},
	)
		with data.inventory as no_keys
	[v.message | some v in violations] == [`[image-signature] Pod "train-1" spec.containers[0] ("main") runs image "registry.lab.example/b/tool:v1" (digest sha256:0b3a6b7a8d4f0e3b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b), which no key tenant "team-b" trusts has signed (trusted keys: none listed). Fix: ask the tenant's admins to add the signer's public key to spec.images.signingKeys`]
}

test_signing_keys_alone_require_signatures if {
	keys_only := json.patch(
		testdata.inventory,
		[{"op": "add", "path": "/tenants/team-b/spec/images", "value": {"signingKeys": [{"name": "k", "publicKey": "PEM"}]}}],
	)
	image := "registry.lab.example/b/tool:v1"
	violations := image_rules.violation with input as object.union(
		testdata.workload_input("Pod", "team-b", testdata.bob, pod_with([image])),
		{"images": {image: fact(image, "registry.lab.example", "b/tool", "v1", [])}},
	)
		with data.inventory as keys_only
	[v.rule | some v in violations] == ["image-signature"]
}

digest_inventory := json.patch(
	testdata.inventory,
	[{"op": "add", "path": "/tenants/team-b/spec/images", "value": {"requireDigest": true}}],
)

test_tag_is_refused_when_tenant_requires_digests if {
	image := "registry.lab.example/b/tool:v1"
	violations := image_rules.violation with input as object.union(
		testdata.workload_input("Pod", "team-b", testdata.bob, pod_with([image])),
		{"images": {image: fact(image, "registry.lab.example", "b/tool", "v1", [])}},
	)
		with data.inventory as digest_inventory
	violations == {{
		"rule": "image-digest",
		"field": "spec.containers[0].image",
		"message": `[image-digest] Pod "train-1" spec.containers[0] ("main") runs image "registry.lab.example/b/tool:v1", which is not pinned by digest; tenant "team-b" requires digests (spec.images.requireDigest). Fix: write it as "registry.lab.example/b/tool@sha256:0b3a6b7a8d4f0e3b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b"`,
	}}
}

test_digest_rule_needs_no_facts if {
	image := "busybox"
	violations := image_rules.violation
		with input as testdata.workload_input("Pod", "team-b", testdata.bob, pod_with([image]))
		with data.inventory as digest_inventory
	[v.message | some v in violations] == [
		concat(
			"",
			[
				concat("", [
					`[image-digest] Pod "train-1" spec.containers[0] ("main") runs image "busybox", which is not pinned by `,
					`digest; tenant "team-b" requires digests (spec.images.requireDigest). Fix: write it as `,
					`<image>@sha256:<digest> (`,
				]),
				"`crane digest <image>`", ` prints the digest)`,
			],
		),
	]
}

test_pinned_images_pass_the_digest_rule if {
	pinned := concat("@", ["registry.lab.example/b/tool", digest])
	tagged_and_pinned := concat("@", ["registry.lab.example/b/tool:v1", digest])
	violations := image_rules.violation
		with input as testdata.workload_input("Pod", "team-b", testdata.bob, pod_with([pinned, tagged_and_pinned]))
		with data.inventory as digest_inventory
	count(violations) == 0
}

test_image_with_a_fact_error_is_refused_with_the_reason if {
	f := {
		"reference": trainer, "normalized": "registry.lab.example/research/trainer:v1",
		"registry": "registry.lab.example", "repository": "research/trainer", "tag": "v1",
		"digest": null, "signed_by": [], "error": "registry registry.lab.example did not answer within 1.0s",
	}
	violations_for("team-a", testdata.alice, pod_with([trainer]), {trainer: f}) == {{
		"rule": "image-unverifiable",
		"field": "spec.containers[0].image",
		"message": concat("", [
			`[image-unverifiable] Pod "train-1" spec.containers[0] ("main") runs image `,
			`"registry.lab.example/research/trainer:v1", which labgate could not check for tenant "team-a": registry `,
			`registry.lab.example did not answer within 1.0s. Fix: check the image name and the pod's `,
			`imagePullSecrets, then retry; if it persists, tell the infra team`,
		]),
	}}
}

test_errors_refuse_even_for_tenants_without_image_rules if {
	image := "Bad/Ref"
	f := {
		"reference": image, "normalized": null, "registry": null, "repository": null, "tag": null,
		"digest": null, "signed_by": [],
		"error": "invalid image reference 'Bad/Ref': repository name must be lowercase",
	}
	[v.rule | some v in violations_for("team-b", testdata.bob, pod_with([image]), {image: f})] == ["image-unverifiable"]
}

test_missing_facts_are_refused_when_the_tenant_needs_them if {
	violations := image_rules.violation
		with input as testdata.workload_input("Pod", "team-a", testdata.alice, pod_with([trainer]))
		with data.inventory as inventory
	[v.message | some v in violations] == [
		concat("", [
			`[image-unverifiable] Pod "train-1" spec.containers[0] ("main") runs image `,
			`"registry.lab.example/research/trainer:v1", which labgate could not check for tenant "team-a": labgate `,
			`has no facts about it. Fix: check the image name and the pod's imagePullSecrets, then retry; if it `,
			`persists, tell the infra team`,
		]),
	]

	# team-b needs none.
	count(image_rules.violation) == 0
		with input as testdata.workload_input("Pod", "team-b", testdata.bob, pod_with([trainer]))
		with data.inventory as inventory
}

test_init_and_ephemeral_containers_of_templates_are_checked if {
	unsigned := "registry.lab.example/research/setup:v1"
	stranger := "docker.io/library/busybox:latest"
	deployment := testdata.deployment("web", {}, {
		"containers": [{"name": "main", "image": trainer}],
		"initContainers": [{"name": "setup", "image": unsigned}],
		"ephemeralContainers": [{"name": "debug", "image": stranger}],
	})
	images := {
		trainer: trainer_fact,
		unsigned: fact(unsigned, "registry.lab.example", "research/setup", "v1", []),
		stranger: fact(stranger, "docker.io", "library/busybox", "latest", ["release"]),
	}
	violations := image_rules.violation with input as object.union(
		testdata.workload_input("Deployment", "team-a", testdata.alice, deployment),
		{"images": images},
	)
		with data.inventory as inventory
	{[v.rule, v.field] | some v in violations} == {
		["image-signature", "spec.template.spec.initContainers[0].image"],
		["image-registry", "spec.template.spec.ephemeralContainers[0].image"],
	}
}

test_decision_applies_the_tenants_mode_to_image_signature if {
	warn := json.patch(
		inventory,
		[{"op": "add", "path": "/tenants/team-a/spec/enforcement", "value": {"image-signature": "warn"}}],
	)
	f := object.union(trainer_fact, {"signed_by": []})
	decision := admission.decision with input as object.union(
		testdata.workload_input("Pod", "team-a", testdata.alice, pod_with([trainer])),
		{"images": {trainer: f}},
	)
		with data.inventory as warn
	decision.allowed
	[w.rule | some w in decision.warnings] == ["image-signature"]
}

test_an_unreachable_registry_outside_the_allowed_ones_is_refused_for_its_registry if {
	facts := {
		"evil.example/x/y:v1": {
			"reference": "evil.example/x/y:v1", "normalized": "evil.example/x/y:v1", "registry": "evil.example",
			"repository": "x/y", "tag": "v1", "digest": null, "signed_by": [], "error": "registry evil.example did not answer",
		},
	}
	inventory := json.patch(
		testdata.inventory,
		[{"op": "add", "path": "/tenants/team-a/spec/images", "value": {"registries": ["registry.lab.example"]}}],
	)
	violations := image_rules.violation with input as {
		"request": testdata.pod_request("team-a", testdata.alice),
		"pod_templates": [{"path": "spec", "spec": {"containers": [{"name": "main", "image": "evil.example/x/y:v1"}]}}],
		"images": facts,
	}
		with data.inventory as inventory
	[v.rule | some v in violations] == ["image-registry"]
}

# Issue 22 item 3: a registries-only tenant does not depend on its registry being up. The allowlist
# is decided from the reference; an unreachable registry refuses nothing it allows.
_unreachable(image, registry, repository) := {image: {
	"reference": image, "normalized": image, "registry": registry, "repository": repository, "tag": "v1",
	"digest": null, "signed_by": [], "error": sprintf("registry %s is unreachable (connection refused)", [registry]),
}}

registries_only := json.patch(
	testdata.inventory,
	[{"op": "add", "path": "/tenants/team-a/spec/images", "value": {"registries": ["registry.lab.example"]}}],
)

test_a_registries_only_tenant_admits_allowed_images_when_the_registry_is_unreachable if {
	image := "registry.lab.example/research/trainer:v1"
	violations := image_rules.violation with input as object.union(
		testdata.workload_input("Pod", "team-a", testdata.alice, pod_with([image])),
		{
			"images": _unreachable(image, "registry.lab.example", "research/trainer"),
			"image_references": {image: reference("registry.lab.example", "research/trainer")},
		},
	)
		with data.inventory as registries_only
	count(violations) == 0

	# requireDigest: a pinned image is seen as written, the registry is not needed either.
	pinned := concat("@", ["registry.lab.example/research/trainer", digest])
	digest_only := json.patch(
		registries_only,
		[{"op": "add", "path": "/tenants/team-a/spec/images/requireDigest", "value": true}],
	)
	count(image_rules.violation) == 0 with input as object.union(
		testdata.workload_input("Pod", "team-a", testdata.alice, pod_with([pinned])),
		{"images": _unreachable(pinned, "registry.lab.example", "research/trainer")},
	)
		with data.inventory as digest_only
}

test_a_registries_only_tenant_still_refuses_other_registries_when_unreachable if {
	image := "evil.example/x/y:v1"
	violations := image_rules.violation with input as object.union(
		testdata.workload_input("Pod", "team-a", testdata.alice, pod_with([image])),
		{"images": _unreachable(image, "evil.example", "x/y"), "image_references": {image: reference("evil.example", "x/y")}},
	)
		with data.inventory as registries_only
	violations == {{
		"rule": "image-registry",
		"field": "spec.containers[0].image",
		"message": concat("", [
			`[image-registry] Pod "train-1" spec.containers[0] ("main") runs image "evil.example/x/y:v1" `,
			`(evil.example/x/y), which is not under a registry tenant "team-a" allows (registry.lab.example). Fix: use `,
			`an image from one of those, or ask the infra team to add its registry to spec.images.registries`,
		]),
	}}
}

# --- the cluster-wide allowed_registries (config), for a tenant without spec.images ---

# What the webhook's input builder reads from the reference alone, for every tenant.
reference(registry, repository) := {"registry": registry, "repository": repository, "error": null}

cluster_list_violations(image, references) := violations if {
	workload := testdata.workload_input("Pod", "team-b", testdata.bob, pod_with([image]))
	violations := image_rules.violation with input as object.union(workload, {"image_references": references})
		with data.inventory as inventory
		with data.labgate.config.allowed_registries as ["registry.lab.example"]
}

# Regression: with no registry facts (team-b has no spec.images, so the webhook asks no registry), an
# image from an allowed registry was refused as [image-unverifiable] "labgate has no facts about it".
test_cluster_allowed_registry_needs_no_registry_facts if {
	image := "registry.lab.example/team-b/train:v1"
	count(cluster_list_violations(image, {image: reference("registry.lab.example", "team-b/train")})) == 0
}

test_cluster_allowed_registries_refuse_other_registries_from_the_reference if {
	image := "docker.io/someone/miner:latest"
	cluster_list_violations(image, {image: reference("docker.io", "someone/miner")}) == {{
		"rule": "image-registry",
		"field": "spec.containers[0].image",
		"message": concat("", [
			`[image-registry] Pod "train-1" spec.containers[0] ("main") runs image "docker.io/someone/miner:latest" `,
			`(docker.io/someone/miner), which is not under a registry tenant "team-b" allows (registry.lab.example). `,
			`Fix: use an image from one of those, or ask the infra team to add its registry to spec.images.registries`,
		]),
	}}
}

test_cluster_allowed_registries_refuse_a_reference_that_does_not_parse if {
	image := "Registry.Lab.Example/UPPER:v1"
	refs := {image: {"registry": null, "repository": null, "error": "repository name must be lowercase"}}
	[v.rule | some v in cluster_list_violations(image, refs)] == ["image-unverifiable"]
}

test_no_allowed_registries_anywhere_leaves_unparsable_references_to_the_kubelet if {
	image := "Registry.Lab.Example/UPPER:v1"
	workload := testdata.workload_input("Pod", "team-b", testdata.bob, pod_with([image]))
	refs := {image: {"registry": null, "repository": null, "error": "repository name must be lowercase"}}
	v := image_rules.violation with input as object.union(workload, {"image_references": refs})
		with data.inventory as inventory
	count(v) == 0
}

# --- image volumes ---

test_image_volumes_are_judged_like_containers if {
	model := "registry.lab.example/research/weights:v3"
	unsigned := object.union(fact(model, "registry.lab.example", "research/weights", "v3", []), {"digest": other_digest})
	pod := testdata.pod("train-1", {
		"containers": [{"name": "main", "image": trainer}],
		"volumes": [{"name": "weights", "image": {"reference": model}}],
	})
	violations_for("team-a", testdata.alice, pod, {trainer: trainer_fact, model: unsigned}) == {{
		"rule": "image-signature",
		"field": "spec.volumes[0].image.reference",
		"message": concat(
			"",
			[
				concat("", [
					`[image-signature] Pod "train-1" spec.volumes[0] ("weights") runs image `,
					`"registry.lab.example/research/weights:v3" (digest `,
				]),
				other_digest,
				concat("", [
					`), which no key tenant "team-a" trusts has signed (trusted keys: release, ci). Fix: sign it with one of `,
					`those keys (cosign sign --key <key> registry.lab.example/research/weights@`,
				]),
				other_digest, `) or use an image one of them signed`,
			],
		),
	}}

	elsewhere := "quay.io/someone/weights:v1"
	{v.rule | some v in violations_for(
		"team-a", testdata.alice, testdata.pod("train-1", {
			"containers": [{"name": "main", "image": trainer}],
			"volumes": [{"name": "weights", "image": {"reference": elsewhere}}],
		}),
		{trainer: trainer_fact, elsewhere: fact(elsewhere, "quay.io", "someone/weights", "v1", ["release"])},
	)} == {"image-registry"}

	# No facts for a volume's image where signatures are required: refused, never skipped.
	{v.rule | some v in violations_for("team-a", testdata.alice, pod, {trainer: trainer_fact})} == {"image-unverifiable"}
	count(violations_for(
		"team-a",
		testdata.alice,
		pod,
		{trainer: trainer_fact, model: object.union(unsigned, {"signed_by": ["ci"]})},
	)) == 0
}
