package labgate.rules.device_visibility_test

import data.labgate.lib.testdata
import data.labgate.rules.device_visibility

image := "registry.lab.example/team-a/trainer:v1"

controller := {
	"username": "system:serviceaccount:kube-system:job-controller",
	"groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
}

container(extra) := object.union({"name": "main", "image": image}, extra)

violations_for(kind, user, obj) := violations if {
	violations := device_visibility.violation with input as testdata.workload_input(kind, "team-a", user, obj)
		with data.inventory as testdata.inventory
}

pod_violations(user, spec) := violations_for("Pod", user, testdata.pod("train-1", spec))

messages(violations) := {v.message | some v in violations}

message(object_ref, what, fix) := sprintf(
	concat("", [
		`[device-visibility] %s %s: device-selection settings choose which of the node's GPUs a container sees, `,
		`outside the GPU quota, and no tenant may set them. Fix: %s`,
	]),
	[object_ref, what, fix],
)

fix(variable) := sprintf(
	concat("", [
		"remove %s and ask for GPUs in resources.limits (e.g. nvidia.com/gpu) or through a ResourceClaim: the ",
		"device plugin or driver then shows the container exactly the GPUs it was given",
	]),
	[variable],
)

test_containers_without_device_settings_are_allowed if {
	count(pod_violations(testdata.alice, {"containers": [container({
		"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}, {"name": "NVIDIA_TF32_OVERRIDE", "value": "0"}],
		"envFrom": [{"configMapRef": {"name": "cfg"}}, {"configMapRef": {"name": "more"}, "prefix": "APP_"}],
		"volumeMounts": [{"name": "data", "mountPath": "/var/run/data"}],
		"resources": {"limits": {"nvidia.com/gpu": "1"}},
	})]})) == 0

	# Cluster admins run node tooling that sets them.
	count(pod_violations(
		testdata.cluster_admin,
		{"containers": [container({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})]},
	)) == 0
}

test_device_variables_are_refused_in_every_container_whoever_creates_the_pod if {
	spec := {
		"initContainers": [container({"name": "prep", "env": [{"name": "ROCR_VISIBLE_DEVICES", "value": "0"}]})],
		"containers": [container({"env": [{"name": "A", "value": "1"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})],
		"ephemeralContainers": [
			container({
				"name": "dbg", "env": [{"name": "ZE_AFFINITY_MASK", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}],
			}),
		],
	}
	expected := {
		message(`Pod "train-1"`, `spec.initContainers[0] ("prep") sets ROCR_VISIBLE_DEVICES`, fix("ROCR_VISIBLE_DEVICES")),
		message(`Pod "train-1"`, `spec.containers[0] ("main") sets NVIDIA_VISIBLE_DEVICES`, fix("NVIDIA_VISIBLE_DEVICES")),
		message(`Pod "train-1"`, `spec.ephemeralContainers[0] ("dbg") sets ZE_AFFINITY_MASK`, fix("ZE_AFFINITY_MASK")),
	}
	messages(pod_violations(testdata.alice, spec)) == expected
	messages(pod_violations(testdata.ann, spec)) == expected
	messages(pod_violations(controller, spec)) == expected
	{v.field | some v in pod_violations(testdata.alice, spec)} == {
		"spec.initContainers[0].env[0]", "spec.containers[0].env[1]", "spec.ephemeralContainers[0].env[0]",
	}
}

test_every_vendors_variable_is_refused if {
	every variable in device_visibility._device_variables {
		spec := {"containers": [container({"env": [{"name": variable, "value": "0"}]})]}
		messages(pod_violations(testdata.alice, spec)) == {message(
			`Pod "train-1"`,
			sprintf(`spec.containers[0] ("main") sets %s`, [variable]),
			fix(variable),
		)}
	}
	count(device_visibility._device_variables) == 8
}

test_workload_templates_are_judged if {
	job := testdata.job(
		"prep",
		1,
		{},
		{"containers": [container({"env": [{"name": "HIP_VISIBLE_DEVICES", "value": "1"}]})], "restartPolicy": "Never"},
	)
	messages(violations_for("Job", testdata.alice, job)) == {
		message(
			`Job "prep"`,
			`spec.template.spec.containers[0] ("main") sets HIP_VISIBLE_DEVICES`,
			fix("HIP_VISIBLE_DEVICES"),
		),
	}
}

test_env_from_prefixes_that_start_a_device_variable_are_refused if {
	spec := {"containers": [container({"envFrom": [{"secretRef": {"name": "s"}, "prefix": "ZE_"}]})]}
	messages(pod_violations(testdata.alice, spec)) == {
		message(
			`Pod "train-1"`,
			`spec.containers[0] ("main") takes variables with envFrom prefix "ZE_", which starts ZE_AFFINITY_MASK`,
			"choose an envFrom prefix that starts no device-selection variable (ZE_AFFINITY_MASK is one)",
		),
	}
}

test_the_device_list_mount_path_is_refused if {
	spec := {
		"containers": [container({"volumeMounts": [{"name": "d", "mountPath": "/var/run/nvidia-container-devices/all"}]})],
	}
	messages(pod_violations(testdata.alice, spec)) == {
		message(
			`Pod "train-1"`,
			concat("", [
				`spec.containers[0] ("main") mounts "/var/run/nvidia-container-devices/all", where the NVIDIA toolkit `,
				`reads the list of GPUs to show`,
			]),
			"mount the volume elsewhere, and ask for GPUs in resources.limits (e.g. nvidia.com/gpu) or through a ResourceClaim",
		),
	}
}

test_cdi_annotations_on_pod_templates_are_refused if {
	pod := json.patch(
		testdata.pod("train-1", {"containers": [container({})]}),
		[{"op": "add", "path": "/metadata/annotations", "value": {"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}}],
	)
	messages(violations_for("Pod", testdata.alice, pod)) == {
		message(
			`Pod "train-1"`,
			`metadata.annotations carries the CDI device annotation "cdi.k8s.io/gpu"`,
			"remove the annotation, and ask for GPUs in resources.limits (e.g. nvidia.com/gpu) or through a ResourceClaim",
		),
	}
}

test_config_maps_and_secrets_holding_a_device_variable_key_are_refused if {
	cm := {
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gpu-env"},
		"data": {"NVIDIA_VISIBLE_DEVICES": "all", "OTHER": "x"},
	}
	found := device_visibility.violation
		with input as {
			"request": object.union(
				testdata.request("UPDATE", "Secret", "team-a", testdata.alice, cm, cm),
				{"kind": {"group": "", "version": "v1", "kind": "ConfigMap"}},
			),
			"pod_templates": [],
		}
		with data.inventory as testdata.inventory
	messages(found) == {
		message(
			`ConfigMap "gpu-env"`,
			`data holds the key NVIDIA_VISIBLE_DEVICES, which envFrom would pass to a container as a device-selection variable`,
			"rename the key NVIDIA_VISIBLE_DEVICES",
		),
	}
	secret := {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"GPU_DEVICE_ORDINAL": "0"}}
	count(device_visibility.violation) == 1
		with input as {
			"request": testdata.request("CREATE", "Secret", "team-a", testdata.alice, secret, null), "pod_templates": [],
		}
		with data.inventory as testdata.inventory
	plain := {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"TOKEN": "0"}}
	count(device_visibility.violation) == 0
		with input as {
			"request": testdata.request("CREATE", "Secret", "team-a", testdata.alice, plain, null), "pod_templates": [],
		}
		with data.inventory as testdata.inventory
}

test_namespaces_of_no_tenant_are_not_judged if {
	found := device_visibility.violation
		with input as testdata.workload_input(
			"Pod",
			"default",
			testdata.alice,
			testdata.pod("x", {"containers": [container({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})]}),
		)
		with data.inventory as testdata.inventory
	count(found) == 0
}
