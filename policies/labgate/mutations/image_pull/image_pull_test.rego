package labgate.mutations.image_pull_test

import data.labgate.lib.testdata
import data.labgate.mutations.image_pull

_container(name, policy) := object.union(
	{"name": name, "image": "registry.lab.example/research/trainer:v1"},
	{"imagePullPolicy": policy | policy != null},
)

_pod(spec) := testdata.workload_input("Pod", "team-a", testdata.alice, testdata.pod("x", spec))

_spec := {
	"initContainers": [_container("fetch", "IfNotPresent")],
	"containers": [_container("main", "Never"), _container("side", "Always"), _container("bare", null)],
}

test_every_container_of_a_tenants_pod_pulls_always if {
	changes := image_pull.template_changes.spec with input as _pod(_spec) with data.inventory as testdata.inventory
	changes == [{"rule": "image-pull-always", "warning": "", "ops": [
		{"op": "add", "path": "/spec/initContainers/0/imagePullPolicy", "value": "Always"},
		{"op": "add", "path": "/spec/containers/0/imagePullPolicy", "value": "Always"},
		{"op": "add", "path": "/spec/containers/2/imagePullPolicy", "value": "Always"},
	]}]
}

test_a_pod_that_pulls_always_already_is_left_alone if {
	spec := {"containers": [_container("main", "Always")]}
	image_pull.template_changes.spec == [] with input as _pod(spec) with data.inventory as testdata.inventory
}

test_the_infra_team_may_turn_it_off if {
	not image_pull.template_changes.spec with input as _pod(_spec) with data.inventory as testdata.inventory
		with data.labgate.config.always_pull_images as false
}

# A workload's pod templates pull always from the workload's creation, so the pods its controller
# makes are born so; anything outside a tenant's namespace is left alone.
test_a_workloads_template_pulls_always_and_no_tenants_pods_are_left_alone if {
	job := testdata.workload_input("Job", "team-a", testdata.alice, testdata.job("sweep", 1, {}, _spec))
	changes := image_pull.template_changes["spec.template.spec"] with input as job
		with data.inventory as testdata.inventory
	[op.path | some c in changes; some op in c.ops] == [
		"/spec/template/spec/initContainers/0/imagePullPolicy",
		"/spec/template/spec/containers/0/imagePullPolicy",
		"/spec/template/spec/containers/2/imagePullPolicy",
	]
	elsewhere := testdata.workload_input("Pod", "default", testdata.alice, testdata.pod("x", _spec))
	count(image_pull.template_changes) == 0 with input as elsewhere with data.inventory as testdata.inventory
}

# kubectl debug: the ephemeral container it adds to a tenant's running pod pulls always; one the pod
# already had is left as it is, and so is a pod of no tenant.
test_an_ephemeral_container_kubectl_debug_adds_pulls_always if {
	old := testdata.pod("x", {
		"containers": [_container("main", "Always")],
		"ephemeralContainers": [_container("old", "IfNotPresent")],
	})
	added := _container("debugger", "IfNotPresent")
	new := json.patch(old, [{"op": "add", "path": "/spec/ephemeralContainers/-", "value": added}])
	debug := object.union(
		testdata.request("UPDATE", "Pod", "team-a", testdata.alice, new, old),
		{"subResource": "ephemeralcontainers"},
	)
	image_pull.changes == [{"rule": "image-pull-always", "warning": "", "ops": [
		{"op": "add", "path": "/spec/ephemeralContainers/1/imagePullPolicy", "value": "Always"},
	]}] with input.request as debug with data.inventory as testdata.inventory
	elsewhere := object.union(debug, {"namespace": "default"})
	image_pull.changes == [] with input.request as elsewhere with data.inventory as testdata.inventory
	plain_update := object.remove(debug, ["subResource"])
	image_pull.changes == [] with input.request as plain_update with data.inventory as testdata.inventory
}
