package labgate.rules.pod_hardening_test

import data.labgate.admission
import data.labgate.lib.testdata
import data.labgate.rules.pod_hardening

privileged_container := object.union(testdata.main_container, {"securityContext": {"privileged": true}})

violations_for(kind, namespace, user, obj) := violations if {
	violations := pod_hardening.violation with input as testdata.workload_input(kind, namespace, user, obj)
		with data.inventory as testdata.inventory
}

test_plain_pod_is_allowed if {
	pod := testdata.pod("train-1", {"containers": [object.union(testdata.main_container, {"securityContext": {"privileged": false}})]})
	count(violations_for("Pod", "team-a", testdata.alice, pod)) == 0
}

test_namespace_of_no_tenant_is_not_checked if {
	pod := testdata.pod("train-1", {"hostNetwork": true, "containers": [privileged_container]})
	count(violations_for("Pod", "default", testdata.alice, pod)) == 0
}

test_platform_is_not_checked if {
	pod := testdata.pod("train-1", {"hostPID": true, "containers": [privileged_container]})
	count(violations_for("Pod", "team-a", testdata.cluster_admin, pod)) == 0
}

test_tenant_exceptions_allow_host_network_pid_and_ipc if {
	pod := testdata.pod("train-1", {"hostNetwork": true, "hostPID": true, "hostIPC": true, "containers": [testdata.main_container]})
	count(violations_for("Pod", "team-b", testdata.bob, pod)) == 0
}

test_privileged_container_is_refused if {
	pod := testdata.pod("x", {"containers": [privileged_container]})
	violations_for("Pod", "team-a", testdata.alice, pod) == {{
		"rule": "pod-hardening",
		"field": "spec.containers[0].securityContext.privileged",
		"message": `[pod-hardening] Pod "x" spec.containers[0] ("main") asks privileged: true; tenant "team-a" has no privileged exception. Fix: remove securityContext.privileged, or ask the infra team for an exception in the Tenant`,
	}}
}

test_privileged_init_and_ephemeral_containers_are_refused_in_templates if {
	init := object.union(privileged_container, {"name": "setup"})
	debug := object.union(privileged_container, {"name": "debug"})
	deployment := testdata.deployment("web", {}, {
		"containers": [testdata.main_container],
		"initContainers": [init],
		"ephemeralContainers": [debug],
	})
	violations := violations_for("Deployment", "team-b", testdata.bob, deployment)
	{v.message | some v in violations} == {
		`[pod-hardening] Deployment "web" spec.template.spec.initContainers[0] ("setup") asks privileged: true; tenant "team-b" has no privileged exception. Fix: remove securityContext.privileged, or ask the infra team for an exception in the Tenant`,
		`[pod-hardening] Deployment "web" spec.template.spec.ephemeralContainers[0] ("debug") asks privileged: true; tenant "team-b" has no privileged exception. Fix: remove securityContext.privileged, or ask the infra team for an exception in the Tenant`,
	}
}

test_host_namespaces_are_refused_without_exception if {
	pod := testdata.pod("x", {"hostNetwork": true, "hostIPC": true, "containers": [testdata.main_container]})
	violations_for("Pod", "team-a", testdata.alice, pod) == {
		{
			"rule": "pod-hardening",
			"field": "spec.hostNetwork",
			"message": `[pod-hardening] Pod "x" spec asks hostNetwork: true; tenant "team-a" has no hostNetwork exception. Fix: remove spec.hostNetwork, or ask the infra team for an exception in the Tenant`,
		},
		{
			"rule": "pod-hardening",
			"field": "spec.hostIPC",
			"message": `[pod-hardening] Pod "x" spec asks hostIPC: true; tenant "team-a" has no hostPID exception (it also covers hostIPC). Fix: remove spec.hostIPC, or ask the infra team for an exception in the Tenant`,
		},
	}
}

test_host_path_volume_is_refused if {
	pod := testdata.pod("x", {
		"containers": [testdata.main_container],
		"volumes": [{"name": "scratch", "emptyDir": {}}, {"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}],
	})
	violations_for("Pod", "team-b", testdata.bob, pod) == {{
		"rule": "pod-hardening",
		"field": "spec.volumes[1].hostPath",
		"message": `[pod-hardening] Pod "x" spec.volumes[1] ("docker") asks hostPath "/var/run/docker.sock"; tenant "team-b" has no hostPath exception. Fix: use a persistentVolumeClaim or emptyDir volume instead, or ask the infra team for an exception in the Tenant`,
	}}
}

test_host_path_exception_allows_host_path if {
	inventory := json.patch(testdata.inventory, [{"op": "add", "path": "/tenants/team-b/spec/exceptions/hostPath", "value": true}])
	pod := testdata.pod("x", {"containers": [testdata.main_container], "volumes": [{"name": "d", "hostPath": {"path": "/data"}}]})
	count(pod_hardening.violation) == 0 with input as testdata.workload_input("Pod", "team-b", testdata.bob, pod)
		with data.inventory as inventory
}

test_decision_applies_the_tenants_mode_to_pod_hardening if {
	pod := testdata.pod("x", {"containers": [privileged_container]})
	inventory := json.patch(testdata.inventory, [{"op": "add", "path": "/tenants/team-b/spec/enforcement/pod-hardening", "value": "warn"}])
	decision := admission.decision with input as testdata.workload_input("Pod", "team-b", testdata.bob, pod)
		with data.inventory as inventory
	decision.allowed
	[f.rule | some f in decision.warnings] == ["pod-hardening"]
}
