package labgate.rules.image_test

import data.labgate.lib.testdata
import data.labgate.rules.image as image_rules

# image-digest-update: an image changed on a running pod (split from image_test.rego, whose helpers
# it uses: one package).

pinned_trainer := concat("@", ["registry.lab.example/research/trainer", digest])

retagged := "registry.lab.example/research/trainer:v2"

retagged_fact := fact(retagged, "registry.lab.example", "research/trainer", "v2", ["release"])

pod_update(user, new_images, old_images, images) := violations if {
	new := pod_with(new_images)
	request := testdata.request("UPDATE", "Pod", "team-a", user, new, pod_with(old_images))
	violations := image_rules.violation
		with input as {"request": request, "pod_templates": testdata.pod_templates("Pod", new), "images": images}
		with data.inventory as inventory
}

update_message(user_image) := sprintf(
	concat("", [
		`[image-digest-update] Pod "train-1" spec.containers[0] ("main") is set to image %q on a running pod; `,
		`tenant "team-a" requires signed images, and labgate pins a tag to the digest it verified only when a pod `,
		`is created, so a tag moved later would run unsigned. Fix: write it as `,
		`"registry.lab.example/research/trainer@%s" (or delete the pod and create it again)`,
	]),
	[user_image, digest],
)

test_a_signed_tag_set_on_a_running_pod_is_refused_for_researchers_and_admins if {
	facts := {retagged: retagged_fact, pinned_trainer: trainer_fact}
	{v.message | some v in pod_update(testdata.alice, [retagged], [pinned_trainer], facts)} == {update_message(retagged)}
	{v.message | some v in pod_update(testdata.ann, [retagged], [pinned_trainer], facts)} == {update_message(retagged)}
}

test_a_digest_set_on_a_running_pod_and_unchanged_tags_are_admitted if {
	facts := {retagged: retagged_fact, pinned_trainer: trainer_fact, trainer: trainer_fact}
	count(pod_update(testdata.alice, [pinned_trainer], [retagged], facts)) == 0

	# A label change on a pod whose tag was written before the tenant required signatures.
	count(pod_update(testdata.alice, [trainer], [trainer], facts)) == 0

	# Tenants that do not require signatures are not asked for digests on update.
	new := pod_with(["docker.io/someone/x:v2"])
	request := testdata.request("UPDATE", "Pod", "team-b", testdata.bob, new, pod_with(["docker.io/someone/x:v1"]))
	count(image_rules.violation) == 0
		with input as {"request": request, "pod_templates": testdata.pod_templates("Pod", new)}
		with data.inventory as inventory
}
