package labgate.mutation_test

import data.labgate.lib.testdata
import data.labgate.mutation

# The mutation's output for `input_doc`: {"patch", "warnings"}, without the image pull policy (every
# container of every pod gets one: mutations/image_pull's tests, and
# test_every_change_is_recorded_on_the_pod_with_its_rule below, show it among the others).
mutate(input_doc) := {"patch": p, "warnings": w} if {
	p := mutation.changes_patch with input as input_doc with data.inventory as testdata.gpu_inventory
		with data.labgate.config.always_pull_images as false
	w := mutation.warnings with input as input_doc with data.inventory as testdata.gpu_inventory
		with data.labgate.config.always_pull_images as false
}

# The input the webhook would send for the patched object: the patch applied, templates found again.
patched(input_doc) := object.union(input_doc, {
	"request": object.union(input_doc.request, {"object": obj}),
	"pod_templates": [object.union(t, {"spec": object.get(obj, split(t.path, "."), {})}) |
		some t in input_doc.pod_templates
	],
}) if {
	obj := json.patch(input_doc.request.object, mutate(input_doc).patch)
}

# Applied to its own result, the patch is empty; and parents come before children.
is_idempotent(input_doc) if {
	count(mutate(input_doc).patch) > 0
	mutate(patched(input_doc)) == {"patch": [], "warnings": []}
	every i, op in mutate(input_doc).patch {
		op.op == "add"
		every later in array.slice(mutate(input_doc).patch, i + 1, count(mutate(input_doc).patch)) {
			not startswith(op.path, concat("", [later.path, "/"]))
		}
	}
	every w in mutate(input_doc).warnings {
		count(w) < 120
	}
}

gpu_container(n) := testdata.gpu_container("main", {"nvidia.com/gpu": n})

pod_input(namespace, user, spec) := testdata.workload_input("Pod", namespace, user, testdata.pod("train-1", spec))

# --- Namespace: the tenant label ---

namespace_input(name, user, labels) := testdata.workload_input("Namespace", "", user, {
	"apiVersion": "v1",
	"kind": "Namespace",
	"metadata": object.union({"name": name}, {"labels": labels | labels != null}),
})

test_member_namespace_under_prefix_gets_the_tenant_label if {
	mutate(namespace_input("vision-exp", testdata.vera, null)) == {
		"patch": [{"op": "add", "path": "/metadata/labels", "value": {"labgate.io/tenant": "vision"}}],
		"warnings": [`labgate labelled namespace "vision-exp" labgate.io/tenant=vision`],
	}
	is_idempotent(namespace_input("vision-exp", testdata.vera, null))
}

test_label_is_added_beside_existing_labels if {
	input_doc := namespace_input("team-a-exp", testdata.alice, {"purpose": "ablation"})
	mutate(input_doc).patch == [{"op": "add", "path": "/metadata/labels/labgate.io~1tenant", "value": "team-a"}]
	is_idempotent(input_doc)
}

test_namespace_is_not_labelled_for_outsiders_platform_or_ambiguous_prefixes if {
	mutate(namespace_input("vision-exp", testdata.alice, null)).patch == []
	mutate(namespace_input("vision-exp", testdata.cluster_admin, null)).patch == []
	mutate(namespace_input("scratch", testdata.vera, null)).patch == []
	mutate(namespace_input("vision-exp", testdata.vera, {"labgate.io/tenant": "team-a"})).patch == []
	overlapping := json.patch(
		testdata.gpu_inventory,
		[{"op": "add", "path": "/tenants/team-a/spec/namespaces/prefix", "value": "vision-e"}],
	)
	count(mutation.patch) == 0 with input as namespace_input("vision-exp", testdata.vera, null)
		with data.inventory as overlapping
}

# --- GPU placement ---

test_gpu_pod_is_placed_on_the_first_spot_pool if {
	input_doc := pod_input("vision", testdata.vera, {
		"serviceAccountName": "operator",
		"priorityClassName": "urgent",
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"containers": [gpu_container("2")],
	})
	mutate(input_doc) == {
		"patch": [
			{"op": "add", "path": "/spec/nodeSelector/labgate.io~1node-pool", "value": "h100-spot"},
			{"op": "add", "path": "/spec/tolerations", "value": [testdata.pool_toleration("vision"), testdata.spot_toleration]},
		],
		"warnings": [`labgate placed pod on spot pool "h100-spot"`],
	}
	is_idempotent(input_doc)
}

test_a_pod_with_gpus_in_an_init_container_only_is_placed_and_given_the_model if {
	input_doc := pod_input("speech", testdata.sam, {
		"automountServiceAccountToken": false,
		"priorityClassName": "urgent",
		"containers": [testdata.main_container],
		"initContainers": [testdata.gpu_container("warmup", {"nvidia.com/gpu": "2"})],
	})
	mutate(input_doc) == {
		"patch": [
			{
				"op": "add", "path": "/spec/nodeSelector",
				"value": {"cloud.example/pool": "speech-a100-spot", "nvidia.com/gpu.product": "a100"},
			},
			{"op": "add", "path": "/spec/tolerations", "value": [testdata.pool_toleration("speech"), testdata.spot_toleration]},
		],
		"warnings": [
			`labgate placed pod on spot pool "a100-spot"`,
			`labgate selected GPU model "a100" (nvidia.com/gpu.product) for pod`,
		],
	}
	is_idempotent(input_doc)
}

test_missing_tolerations_are_appended if {
	input_doc := pod_input("vision", testdata.vera, {
		"serviceAccountName": "operator",
		"priorityClassName": "urgent",
		"nodeSelector": {"nvidia.com/gpu.product": "h100"},
		"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}, testdata.pool_toleration("vision")],
		"containers": [gpu_container("2")],
	})
	mutate(input_doc).patch == [
		{"op": "add", "path": "/spec/nodeSelector/labgate.io~1node-pool", "value": "h100-spot"},
		{"op": "add", "path": "/spec/tolerations/-", "value": testdata.spot_toleration},
	]
	is_idempotent(input_doc)
}

test_on_demand_pod_goes_to_the_first_on_demand_pool_where_allowed if {
	input_doc := json.patch(
		pod_input("speech", testdata.sam, {"containers": [gpu_container("1")]}),
		[{"op": "add", "path": "/pod_templates/0/metadata", "value": {"annotations": {"labgate.io/capacity": "on-demand"}}}],
	)
	p := mutate(input_doc).patch
	p[0] == {
		"op": "add", "path": "/spec/nodeSelector",
		"value": {"labgate.io/node-pool": "a100-ondemand", "nvidia.com/gpu.product": "a100"},
	}
	p[1] == {"op": "add", "path": "/spec/tolerations", "value": [testdata.pool_toleration("speech")]}
	mutate(input_doc).warnings[0] == `labgate placed pod on on-demand pool "a100-ondemand"`
	is_idempotent(input_doc)
}

test_on_demand_pod_stays_on_spot_where_not_allowed if {
	input_doc := json.patch(
		pod_input(
			"vision",
			testdata.vera,
			{"nodeSelector": {"nvidia.com/gpu.product": "h100"}, "containers": [gpu_container("1")]},
		),
		[{"op": "add", "path": "/pod_templates/0/metadata", "value": {"annotations": {"labgate.io/capacity": "on-demand"}}}],
	)
	mutate(input_doc).patch[0] == {"op": "add", "path": "/spec/nodeSelector/labgate.io~1node-pool", "value": "h100-spot"}
}

test_single_model_is_selected_with_the_pool if {
	input_doc := pod_input("speech", testdata.sam, {"containers": [gpu_container("1")]})
	mutate(input_doc) == {
		"patch": [
			{
				"op": "add", "path": "/spec/nodeSelector",
				"value": {"cloud.example/pool": "speech-a100-spot", "nvidia.com/gpu.product": "a100"},
			},
			{"op": "add", "path": "/spec/tolerations", "value": [testdata.pool_toleration("speech"), testdata.spot_toleration]},
			{"op": "add", "path": "/spec/automountServiceAccountToken", "value": false},
			{"op": "add", "path": "/spec/priorityClassName", "value": "research-default"},
		],
		"warnings": [
			`labgate placed pod on spot pool "a100-spot"`,
			`labgate selected GPU model "a100" (nvidia.com/gpu.product) for pod`,
			`labgate turned off token automount (service account "default") for pod`,
			`labgate set priorityClassName "research-default" on pod`,
		],
	}
	is_idempotent(input_doc)
}

test_single_model_is_selected_for_a_pod_that_chose_its_pool if {
	input_doc := pod_input("speech", testdata.sam, {
		"serviceAccountName": "default",
		"automountServiceAccountToken": true,
		"priorityClassName": "urgent",
		"nodeSelector": {"labgate.io/node-pool": "a100-ondemand"},
		"containers": [gpu_container("1")],
	})
	mutate(input_doc) == {
		"patch": [{"op": "add", "path": "/spec/nodeSelector/nvidia.com~1gpu.product", "value": "a100"}],
		"warnings": [`labgate selected GPU model "a100" (nvidia.com/gpu.product) for pod`],
	}
	is_idempotent(input_doc)
}

test_pods_without_gpus_are_not_placed if {
	input_doc := pod_input(
		"speech",
		testdata.sam,
		{"priorityClassName": "urgent", "containers": [testdata.main_container]},
	)
	mutate(input_doc).patch == [{"op": "add", "path": "/spec/automountServiceAccountToken", "value": false}]
}

test_job_template_is_placed_at_its_path if {
	job := testdata.job(
		"sweep",
		4,
		{},
		{"nodeSelector": {"nvidia.com/gpu.product": "h100"}, "containers": [gpu_container("8")]},
	)
	input_doc := testdata.workload_input("Job", "vision", testdata.vera, job)
	mutate(input_doc) == {
		"patch": [
			{"op": "add", "path": "/spec/template/spec/nodeSelector/labgate.io~1node-pool", "value": "h100-spot"},
			{
				"op": "add", "path": "/spec/template/spec/tolerations",
				"value": [testdata.pool_toleration("vision"), testdata.spot_toleration],
			},
			{"op": "add", "path": "/spec/template/spec/automountServiceAccountToken", "value": false},
			{"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "research-default"},
		],
		"warnings": [
			`labgate placed template spec.template.spec on spot pool "h100-spot"`,
			`labgate turned off token automount (service account "default") for template spec.template.spec`,
			`labgate set priorityClassName "research-default" on template spec.template.spec`,
		],
	}
	is_idempotent(input_doc)
}

test_training_resource_templates_are_each_mutated if {
	spec := {"serviceAccountName": "operator", "containers": [gpu_container("4")]}
	input_doc := {
		"request": json.patch(
			testdata.request(
				"CREATE", "Job", "speech", testdata.sam, {"metadata": {"name": "llm"}, "spec": {"pytorchReplicaSpecs": {
					"Master": {"replicas": 1, "template": {"spec": spec}},
					"Worker": {"replicas": 3, "template": {"spec": spec}},
				}}},
				null,
			),
			[{"op": "replace", "path": "/kind", "value": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"}}],
		),
		"pod_templates": [
			{"path": "spec.pytorchReplicaSpecs.Master.template.spec", "spec": spec, "metadata": {}, "replicas": 1},
			{"path": "spec.pytorchReplicaSpecs.Worker.template.spec", "spec": spec, "metadata": {}, "replicas": 3},
		],
	}
	[op.path | some op in mutate(input_doc).patch] == [
		"/spec/pytorchReplicaSpecs/Master/template/spec/nodeSelector",
		"/spec/pytorchReplicaSpecs/Master/template/spec/tolerations",
		"/spec/pytorchReplicaSpecs/Master/template/spec/automountServiceAccountToken",
		"/spec/pytorchReplicaSpecs/Master/template/spec/priorityClassName",
		"/spec/pytorchReplicaSpecs/Worker/template/spec/nodeSelector",
		"/spec/pytorchReplicaSpecs/Worker/template/spec/tolerations",
		"/spec/pytorchReplicaSpecs/Worker/template/spec/automountServiceAccountToken",
		"/spec/pytorchReplicaSpecs/Worker/template/spec/priorityClassName",
	]

	# Long warnings are cut to fit one kubectl line.
	mutate(input_doc).warnings[2] == concat("", [
		`labgate turned off token automount (service account "operator") for template `,
		`spec.pytorchReplicaSpecs.Master.templat...`,
	])
	is_idempotent(input_doc)
}

# --- Service-account token automount ---

test_listed_service_account_keeps_its_token if {
	input_doc := pod_input(
		"vision",
		testdata.vera,
		{"serviceAccountName": "operator", "containers": [testdata.main_container]},
	)
	mutate(input_doc).patch == [{"op": "add", "path": "/spec/priorityClassName", "value": "research-default"}]
}

test_explicit_automount_is_left_alone if {
	input_doc := pod_input("team-a", testdata.alice, {
		"automountServiceAccountToken": true,
		"priorityClassName": "urgent",
		"containers": [testdata.main_container],
	})
	mutate(input_doc) == {"patch": [], "warnings": []}
}

test_token_already_mounted_on_a_pod_is_taken_out if {
	token := {"name": "kube-api-access-x7k2p", "projected": {"sources": [
		{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
		{"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
	]}}
	token_mount := {
		"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true,
	}
	data_mount := {"name": "data", "mountPath": "/data"}
	input_doc := pod_input("team-a", testdata.alice, {
		"serviceAccountName": "default",
		"priorityClassName": "urgent",
		"volumes": [{"name": "data", "emptyDir": {}}, token],
		"initContainers": [object.union(testdata.main_container, {"name": "fetch", "volumeMounts": [token_mount]})],
		"containers": [
			object.union(testdata.main_container, {"volumeMounts": [data_mount, token_mount]}),
			object.union(testdata.main_container, {"name": "quiet"}),
		],
	})
	mutate(input_doc) == {
		"patch": [
			{"op": "add", "path": "/spec/automountServiceAccountToken", "value": false},
			{"op": "add", "path": "/spec/volumes", "value": [{"name": "data", "emptyDir": {}}]},
			{"op": "add", "path": "/spec/initContainers/0/volumeMounts", "value": []},
			{"op": "add", "path": "/spec/containers/0/volumeMounts", "value": [data_mount]},
		],
		"warnings": [`labgate turned off token automount (service account "default") for pod`],
	}
	is_idempotent(input_doc)
}

# --- Priority class ---

test_pod_with_resolved_priority_gets_no_class if {
	input_doc := pod_input(
		"team-a",
		testdata.alice,
		{"automountServiceAccountToken": false, "priority": 0, "containers": [testdata.main_container]},
	)
	mutate(input_doc).patch == []
}

test_default_priority_class_is_set_on_templates if {
	deployment := testdata.deployment(
		"serve",
		{},
		{"automountServiceAccountToken": false, "containers": [testdata.main_container]},
	)
	input_doc := testdata.workload_input("Deployment", "team-a", testdata.alice, deployment)
	mutate(input_doc) == {
		"patch": [{"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "research-default"}],
		"warnings": [`labgate set priorityClassName "research-default" on template spec.template.spec`],
	}
	is_idempotent(input_doc)
}

# --- Where nothing changes ---

test_no_mutation_outside_tenant_namespaces if {
	spec := {"containers": [gpu_container("8")]}
	mutate(pod_input("default", testdata.alice, spec)) == {"patch": [], "warnings": []}
	mutate(pod_input("ci", testdata.bob, spec)) == {"patch": [], "warnings": []}
	mutate(pod_input("orphan", testdata.alice, spec)) == {"patch": [], "warnings": []}
}

test_no_mutation_on_update if {
	pod := testdata.pod("train-1", {"containers": [gpu_container("8")]})
	input_doc := {
		"request": testdata.request("UPDATE", "Pod", "vision", testdata.vera, pod, pod),
		"pod_templates": testdata.pod_templates("Pod", pod),
	}
	mutate(input_doc) == {"patch": [], "warnings": []}
}

test_tenant_without_pools_gets_only_the_defaults if {
	input_doc := pod_input("team-a", testdata.alice, {"containers": [gpu_container("8")]})
	[op.path | some op in mutate(input_doc).patch] == ["/spec/automountServiceAccountToken", "/spec/priorityClassName"]
	is_idempotent(input_doc)
}

# --- image pinning ---

_pin_digest := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

_pin_images := {
	"registry.lab.example/vision/train:v1": {"pinned": concat("", ["registry.lab.example/vision/train@", _pin_digest])},
}

_pin_inventory(images_spec) := json.patch(
	testdata.inventory,
	[{"op": "add", "path": "/tenants/team-a/spec/images", "value": images_spec}],
)

_pin_input := {
	"request": testdata.pod_request("team-a", testdata.alice),
	"pod_templates": [
		{
			"path": "spec",
			"spec": {
				# Pulled always already: these tests are about the image's digest alone.
				"containers": [{"name": "main", "image": "registry.lab.example/vision/train:v1", "imagePullPolicy": "Always"}],
				"automountServiceAccountToken": false, "priority": 0,
			},
			"metadata": {}, "replicas": 1,
		},
	],
	"images": _pin_images,
}

test_tags_are_pinned_to_the_resolved_digest if {
	result := mutation.changes_patch with input as _pin_input
		with data.inventory as _pin_inventory({"registries": ["registry.lab.example"]})
	result == [
		{
			"op": "add", "path": "/spec/containers/0/image",
			"value": concat("", ["registry.lab.example/vision/train@", _pin_digest]),
		},
	]
	warnings := mutation.warnings with input as _pin_input
		with data.inventory as _pin_inventory({"registries": ["registry.lab.example"]})
	warnings == ["labgate pinned registry.lab.example/vision/train:v1 to sha256:0123456789ab"]
}

test_a_pinned_image_is_left_alone if {
	pinned := concat("", ["registry.lab.example/vision/train@", _pin_digest])
	pinned_input := json.patch(_pin_input, [
		{"op": "replace", "path": "/pod_templates/0/spec/containers/0/image", "value": pinned},
		{"op": "replace", "path": "/images", "value": {pinned: {"pinned": pinned}}},
	])
	mutation.patch == [] with input as pinned_input
		with data.inventory as _pin_inventory({"registries": ["registry.lab.example"]})
}

test_tenants_that_require_pinned_images_are_not_rewritten if {
	mutation.patch == [] with input as _pin_input
		with data.inventory as _pin_inventory({"requireDigest": true})
}

# --- the record of every change, on the object ---

# Regression: nothing on a pod said why labgate put it on a spot pool.
test_every_change_is_recorded_on_the_pod_with_its_rule if {
	as_written := object.union(gpu_container("1"), {"imagePullPolicy": "IfNotPresent"})
	input_doc := pod_input("speech", testdata.sam, {"containers": [as_written]})
	full := mutation.patch with input as input_doc with data.inventory as testdata.gpu_inventory
	last := full[count(full) - 1]
	last.path == "/metadata/annotations"
	json.unmarshal(last.value["labgate.io/mutations"]) == [
		{"rule": "placement", "op": "add", "path": "/spec/nodeSelector"},
		{"rule": "placement", "op": "add", "path": "/spec/tolerations"},
		{"rule": "token-automount", "op": "add", "path": "/spec/automountServiceAccountToken"},
		{"rule": "image-pull-always", "op": "add", "path": "/spec/containers/0/imagePullPolicy"},
		{"rule": "priority-class", "op": "add", "path": "/spec/priorityClassName"},
	]
}

test_a_jobs_template_carries_its_record_so_its_pods_do if {
	job := testdata.job("sweep", 1, {"team": "x"}, {"containers": [gpu_container("1")]})
	input_doc := testdata.workload_input("Job", "speech", testdata.sam, job)
	full := mutation.patch with input as input_doc with data.inventory as testdata.gpu_inventory
	paths := [op.path | some op in full; contains(op.path, "annotations")]
	paths == ["/metadata/annotations", "/spec/template/metadata/annotations/labgate.io~1mutations"]
	patched := json.patch(job, full)
	record := json.unmarshal(patched.spec.template.metadata.annotations["labgate.io/mutations"])
	{r.rule | some r in record} == {"placement", "token-automount", "priority-class"}
	patched.spec.template.metadata.annotations.team == "x"
}

test_nothing_changed_nothing_recorded if {
	input_doc := pod_input("speech", testdata.sam, {
		"automountServiceAccountToken": true, "priorityClassName": "p",
		"containers": [{"name": "main", "image": "x", "imagePullPolicy": "Always"}],
	})
	p := mutation.patch with input as input_doc with data.inventory as testdata.gpu_inventory
	p == []
}
