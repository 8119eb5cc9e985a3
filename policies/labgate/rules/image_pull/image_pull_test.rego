package labgate.rules.image_pull_test

import data.labgate.lib.testdata
import data.labgate.rules.image_pull

_container(name, image, policy) := object.union(
	{"name": name, "image": image},
	{"imagePullPolicy": policy | policy != null},
)

_trainer := "registry.lab.example/team-a/trainer:v1"

_private := "registry.lab.example/team-b/private-model:v3"

_pod(spec) := testdata.pod("notebook", spec)

_create(user, namespace, spec) := testdata.request("CREATE", "Pod", namespace, user, _pod(spec), null)

_update(user, new_spec, old_spec) := testdata.request("UPDATE", "Pod", "team-a", user, _pod(new_spec), _pod(old_spec))

_violations(request) := found if {
	found := image_pull.violation with input.request as request with data.inventory as testdata.inventory
}

# On CREATE (after labgate's mutation): every container pulls always, or the pod is refused. One
# without a policy is no Pod the API would send (it defaults the field first): not judged.
test_a_created_pod_whose_containers_do_not_all_pull_always_is_refused if {
	spec := {
		"initContainers": [_container("fetch", _trainer, "Always")],
		"containers": [_container("main", _private, "IfNotPresent"), _container("bare", _trainer, null)],
	}
	{v.field | some v in _violations(_create(testdata.alice, "team-a", spec))} == {"spec.containers[0].imagePullPolicy"}
}

# The same pod pulling always is admitted; so is any pod outside a tenant, or a cluster admin's.
test_a_pod_that_pulls_always_and_pods_of_no_tenant_are_admitted if {
	pulling := {"containers": [_container("main", _private, "Always")]}
	count(_violations(_create(testdata.alice, "team-a", pulling))) == 0
	cached := {"containers": [_container("main", _private, "IfNotPresent")]}
	count(_violations(_create(testdata.alice, "default", cached))) == 0
	count(_violations(_create(testdata.cluster_admin, "team-a", cached))) == 0
	count(image_pull.violation) == 0 with input.request as _create(testdata.alice, "team-a", cached)
		with data.inventory as testdata.inventory
		with data.labgate.config.always_pull_images as false
}

# On UPDATE: a pod made before the rule runs on; a new image, or a new ephemeral container, that does
# not pull always is refused; kubectl debug is told its flag.
test_on_update_only_what_starts_a_new_image_is_judged if {
	old := {"containers": [_container("main", _trainer, "IfNotPresent")]}
	count(_violations(_update(testdata.alice, old, old))) == 0
	swapped := {"containers": [_container("main", _private, "IfNotPresent")]}
	[v.field | some v in _violations(_update(testdata.alice, swapped, old))] == ["spec.containers[0].imagePullPolicy"]
	debug := object.union(old, {"ephemeralContainers": [_container("debugger-x", "busybox:1.36", "IfNotPresent")]})
	refusals := [v.message | some v in _violations(_update(testdata.alice, debug, old))]
	count(refusals) == 1
	endswith(refusals[0], "Fix: add --image-pull-policy=Always to kubectl debug")
	pulling_debug := object.union(old, {"ephemeralContainers": [_container("debugger-x", "busybox:1.36", "Always")]})
	count(_violations(_update(testdata.alice, pulling_debug, old))) == 0
}
