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
	pod := testdata.pod(
		"train-1",
		{"containers": [object.union(testdata.main_container, {"securityContext": {"privileged": false}})]},
	)
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

test_tenant_exceptions_allow_host_network_and_pid if {
	pod := testdata.pod("train-1", {"hostNetwork": true, "hostPID": true, "containers": [testdata.main_container]})
	count(violations_for("Pod", "team-b", testdata.bob, pod)) == 0
}

test_privileged_container_is_refused if {
	pod := testdata.pod("x", {"containers": [privileged_container]})
	violations_for("Pod", "team-a", testdata.alice, pod) == {{
		"rule": "pod-hardening",
		"field": "spec.containers[0].securityContext.privileged",
		"message": concat("", [
			`[pod-hardening] Pod "x" spec.containers[0] ("main") asks privileged: true; tenant "team-a" has no `,
			`privileged exception. Fix: remove securityContext.privileged, or ask the infra team for an exception in `,
			`the Tenant`,
		]),
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
		concat("", [
			`[pod-hardening] Deployment "web" spec.template.spec.initContainers[0] ("setup") asks privileged: true; `,
			`tenant "team-b" has no privileged exception. Fix: remove securityContext.privileged, or ask the infra `,
			`team for an exception in the Tenant`,
		]),
		concat("", [
			`[pod-hardening] Deployment "web" spec.template.spec.ephemeralContainers[0] ("debug") asks privileged: `,
			`true; tenant "team-b" has no privileged exception. Fix: remove securityContext.privileged, or ask the `,
			`infra team for an exception in the Tenant`,
		]),
	}
}

test_host_namespaces_are_refused_without_exception if {
	pod := testdata.pod("x", {"hostNetwork": true, "hostIPC": true, "containers": [testdata.main_container]})
	violations_for("Pod", "team-a", testdata.alice, pod) == {
		{
			"rule": "pod-hardening",
			"field": "spec.hostNetwork",
			"message": concat("", [
				`[pod-hardening] Pod "x" spec asks hostNetwork: true; tenant "team-a" has no hostNetwork exception. Fix: `,
				`remove spec.hostNetwork, or ask the infra team for an exception in the Tenant`,
			]),
		},
		{
			"rule": "pod-hardening",
			"field": "spec.hostIPC",
			"message": concat("", [
				`[pod-hardening] Pod "x" spec asks hostIPC: true; tenant "team-a" has no hostIPC exception. Fix: remove `,
				`spec.hostIPC, or ask the infra team for an exception in the Tenant`,
			]),
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
		"message": concat("", [
			`[pod-hardening] Pod "x" spec.volumes[1] ("docker") asks hostPath "/var/run/docker.sock"; tenant "team-b" `,
			`has no hostPath exception. Fix: use a persistentVolumeClaim or emptyDir volume instead, or ask the infra `,
			`team for an exception in the Tenant`,
		]),
	}}
}

test_host_path_exception_allows_host_path if {
	inventory := json.patch(
		testdata.inventory,
		[{"op": "add", "path": "/tenants/team-b/spec/exceptions/hostPath", "value": true}],
	)
	pod := testdata.pod(
		"x",
		{"containers": [testdata.main_container], "volumes": [{"name": "d", "hostPath": {"path": "/data"}}]},
	)
	count(pod_hardening.violation) == 0 with input as testdata.workload_input("Pod", "team-b", testdata.bob, pod)
		with data.inventory as inventory
}

test_decision_applies_the_tenants_mode_to_pod_hardening if {
	pod := testdata.pod("x", {"containers": [privileged_container]})
	inventory := json.patch(
		testdata.inventory,
		[{"op": "add", "path": "/tenants/team-b/spec/enforcement/pod-hardening", "value": "warn"}],
	)
	decision := admission.decision with input as testdata.workload_input("Pod", "team-b", testdata.bob, pod)
		with data.inventory as inventory
	decision.allowed
	[f.rule | some f in decision.warnings] == ["pod-hardening"]
}

# --- One exception relaxes one control ---

with_exceptions(exceptions) := json.patch(
	testdata.inventory,
	[{"op": "add", "path": "/tenants/team-a/spec/exceptions", "value": exceptions}],
)

messages_with(exceptions, pod) := {v.message |
	some v in pod_hardening.violation with input as testdata.workload_input("Pod", "team-a", testdata.alice, pod)
		with data.inventory as with_exceptions(exceptions)
}

container_with(security_context) := object.union(testdata.main_container, {"securityContext": security_context})

test_host_pid_exception_does_not_cover_host_ipc if {
	pod := testdata.pod("x", {"hostPID": true, "hostIPC": true, "containers": [testdata.main_container]})
	violations_for("Pod", "team-b", testdata.bob, pod) == {{
		"rule": "pod-hardening",
		"field": "spec.hostIPC",
		"message": concat("", [
			`[pod-hardening] Pod "x" spec asks hostIPC: true; tenant "team-b" has no hostIPC exception. Fix: remove `,
			`spec.hostIPC, or ask the infra team for an exception in the Tenant`,
		]),
	}}
}

test_host_network_exception_relaxes_nothing_else if {
	pod := testdata.pod("x", {
		"hostNetwork": true,
		"containers": [container_with({"capabilities": {"add": ["NET_ADMIN"]}, "seccompProfile": {"type": "Unconfined"}})],
	})
	violations_for("Pod", "team-b", testdata.bob, pod) == {
		{
			"rule": "pod-hardening",
			"field": "spec.containers[0].securityContext.capabilities.add[0]",
			"message": concat("", [
				`[pod-hardening] Pod "x" spec.containers[0] ("main") asks capability "NET_ADMIN"; tenant "team-b" has no `,
				`capabilities exception for "NET_ADMIN". Fix: remove "NET_ADMIN" from securityContext.capabilities.add `,
				`(the baseline allows AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, `,
				`SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT), or ask the infra team for an exception in the Tenant`,
			]),
		},
		{
			"rule": "pod-hardening",
			"field": "spec.containers[0].securityContext.seccompProfile.type",
			"message": concat("", [
				`[pod-hardening] Pod "x" spec.containers[0] ("main") asks seccompProfile Unconfined; tenant "team-b" has `,
				`no seccompUnconfined exception. Fix: use seccompProfile RuntimeDefault (or remove it), or ask the infra `,
				`team for an exception in the Tenant`,
			]),
		},
	}
}

test_baseline_capabilities_are_allowed if {
	pod := testdata.pod(
		"x",
		{"containers": [container_with({"capabilities": {"add": ["CHOWN", "NET_BIND_SERVICE"], "drop": ["ALL"]}})]},
	)
	count(violations_for("Pod", "team-a", testdata.alice, pod)) == 0
}

test_capability_exception_allows_the_named_capability_only if {
	pod := testdata.pod("x", {"containers": [container_with({"capabilities": {"add": ["NET_ADMIN", "SYS_ADMIN"]}})]})
	messages_with({"capabilities": ["NET_ADMIN"]}, pod) == {
		concat("", [
			`[pod-hardening] Pod "x" spec.containers[0] ("main") asks capability "SYS_ADMIN"; tenant "team-a" has no `,
			`capabilities exception for "SYS_ADMIN". Fix: remove "SYS_ADMIN" from securityContext.capabilities.add `,
			`(the baseline allows AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, `,
			`SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT), or ask the infra team for an exception in the Tenant`,
		]),
	}
}

test_host_port_is_refused if {
	pod := testdata.pod(
		"x",
		{
			"containers": [
				object.union(
					testdata.main_container,
					{"ports": [{"containerPort": 8080}, {"containerPort": 22, "hostPort": 2222}]},
				),
			],
		},
	)
	violations_for("Pod", "team-a", testdata.alice, pod) == {{
		"rule": "pod-hardening",
		"field": "spec.containers[0].ports[1].hostPort",
		"message": concat("", [
			`[pod-hardening] Pod "x" spec.containers[0] ("main") asks hostPort 2222; tenant "team-a" has no hostPorts `,
			`exception. Fix: remove ports[1].hostPort and reach the pod through a Service, or ask the infra team for `,
			`an exception in the Tenant`,
		]),
	}}
}

test_host_network_exception_covers_the_host_ports_the_apiserver_defaults if {
	container := object.union(testdata.main_container, {"ports": [{"containerPort": 8080, "hostPort": 8080}]})
	defaulted := testdata.pod("x", {"hostNetwork": true, "containers": [container]})
	count(violations_for("Pod", "team-b", testdata.bob, defaulted)) == 0
	other := object.union(testdata.main_container, {"ports": [{"containerPort": 8080, "hostPort": 80}]})
	{v.field |
		some v in violations_for(
			"Pod",
			"team-b",
			testdata.bob,
			testdata.pod("x", {"hostNetwork": true, "containers": [other]}),
		)
	} == {"spec.containers[0].ports[0].hostPort"}
}

test_host_ports_exception_allows_host_ports if {
	pod := testdata.pod(
		"x",
		{"containers": [object.union(testdata.main_container, {"ports": [{"containerPort": 22, "hostPort": 2222}]})]},
	)
	messages_with({"hostPorts": true}, pod) == set()
}

test_pod_level_seccomp_and_apparmor_unconfined_are_refused if {
	pod := testdata.pod("x", {
		"securityContext": {"seccompProfile": {"type": "Unconfined"}, "appArmorProfile": {"type": "Unconfined"}},
		"containers": [testdata.main_container],
	})
	messages_with({"seccompUnconfined": true}, pod) == {
		concat("", [
			`[pod-hardening] Pod "x" spec asks appArmorProfile Unconfined; tenant "team-a" has no appArmorUnconfined `,
			`exception. Fix: use appArmorProfile RuntimeDefault (or remove it), or ask the infra team for an exception `,
			`in the Tenant`,
		]),
	}
	messages_with({"seccompUnconfined": true, "appArmorUnconfined": true}, pod) == set()
}

test_runtime_default_and_localhost_profiles_are_allowed if {
	pod := testdata.pod("x", {
		"securityContext": {
			"seccompProfile": {"type": "RuntimeDefault"}, "appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-x"},
		},
		"containers": [container_with({"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}})],
	})
	count(violations_for("Pod", "team-a", testdata.alice, pod)) == 0
}

test_apparmor_unconfined_annotation_is_refused_on_templates if {
	deployment := object.union(
		testdata.deployment("web", {}, {"containers": [testdata.main_container]}),
		{
			"spec": {
				"template": {"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}}},
			},
		},
	)
	violations_for("Deployment", "team-a", testdata.alice, deployment) == {{
		"rule": "pod-hardening",
		"field": "spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/main]",
		"message": concat("", [
			`[pod-hardening] Deployment "web" spec.template.spec asks AppArmor profile "unconfined"; tenant "team-a" `,
			`has no appArmorUnconfined exception. Fix: remove the annotation `,
			`container.apparmor.security.beta.kubernetes.io/main (or set it to runtime/default), or ask the infra team `,
			`for an exception in the Tenant`,
		]),
	}}
}

test_selinux_beyond_container_types_is_refused if {
	pod := testdata.pod("x", {
		"securityContext": {"seLinuxOptions": {"type": "spc_t"}},
		"containers": [container_with({"seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2", "user": "system_u"}})],
	})
	violations_for("Pod", "team-a", testdata.alice, pod) == {
		{
			"rule": "pod-hardening",
			"field": "spec.securityContext.seLinuxOptions.type",
			"message": concat("", [
				`[pod-hardening] Pod "x" spec asks SELinux type "spc_t"; tenant "team-a" has no seLinux exception. Fix: `,
				`remove seLinuxOptions.type or use one of container_t, container_init_t, container_kvm_t, `,
				`container_engine_t, or ask the infra team for an exception in the Tenant`,
			]),
		},
		{
			"rule": "pod-hardening",
			"field": "spec.containers[0].securityContext.seLinuxOptions.user",
			"message": concat("", [
				`[pod-hardening] Pod "x" spec.containers[0] ("main") asks SELinux user "system_u"; tenant "team-a" has no `,
				`seLinux exception. Fix: remove seLinuxOptions.user, or ask the infra team for an exception in the Tenant`,
			]),
		},
	}
}

test_unmasked_proc_mount_is_refused_and_default_allowed if {
	unmasked := testdata.pod("x", {"containers": [container_with({"procMount": "Unmasked"})]})
	messages_with({}, unmasked) == {
		concat("", [
			`[pod-hardening] Pod "x" spec.containers[0] ("main") asks procMount "Unmasked"; tenant "team-a" has no `,
			`procMount exception. Fix: remove securityContext.procMount (or set it to Default), or ask the infra team `,
			`for an exception in the Tenant`,
		]),
	}
	messages_with({"procMount": true}, unmasked) == set()
	count(violations_for(
		"Pod",
		"team-a",
		testdata.alice,
		testdata.pod("x", {"containers": [container_with({"procMount": "Default"})]}),
	)) == 0
}

test_unsafe_sysctls_are_refused_unless_excepted_by_name if {
	pod := testdata.pod("x", {
		"securityContext": {"sysctls": [
			{"name": "net.ipv4.tcp_syncookies", "value": "1"},
			{"name": "net.core.somaxconn", "value": "4096"},
			{"name": "kernel.msgmax", "value": "65536"},
		]},
		"containers": [testdata.main_container],
	})
	messages_with({"sysctls": ["net.core.somaxconn"]}, pod) == {
		concat("", [
			`[pod-hardening] Pod "x" spec asks sysctl "kernel.msgmax"; tenant "team-a" has no sysctls exception for `,
			`"kernel.msgmax". Fix: remove the sysctl (the baseline allows kernel.shm_rmid_forced, `,
			`net.ipv4.ip_local_port_range, net.ipv4.ip_unprivileged_port_start, net.ipv4.tcp_syncookies, `,
			`net.ipv4.ping_group_range, net.ipv4.ip_local_reserved_ports, net.ipv4.tcp_keepalive_time, `,
			`net.ipv4.tcp_fin_timeout, net.ipv4.tcp_keepalive_intvl, net.ipv4.tcp_keepalive_probes, net.ipv4.tcp_rmem, `,
			`net.ipv4.tcp_wmem), or ask the infra team for an exception in the Tenant`,
		]),
	}
}

# Kubernetes 1.32 added the TCP buffer sizes to the baseline's safe sysctls.
test_tcp_buffer_sysctls_are_safe if {
	pod := testdata.pod("x", {
		"securityContext": {"sysctls": [
			{"name": "net.ipv4.tcp_rmem", "value": "4096 87380 16777216"},
			{"name": "net.ipv4.tcp_wmem", "value": "4096 65536 16777216"},
		]},
		"containers": [testdata.main_container],
	})
	count(violations_for("Pod", "team-a", testdata.alice, pod)) == 0
}

test_windows_host_process_is_refused if {
	pod := testdata.pod(
		"x",
		{"securityContext": {"windowsOptions": {"hostProcess": true}}, "containers": [testdata.main_container]},
	)
	violations_for("Pod", "team-a", testdata.alice, pod) == {{
		"rule": "pod-hardening",
		"field": "spec.securityContext.windowsOptions.hostProcess",
		"message": concat("", [
			`[pod-hardening] Pod "x" spec asks windowsOptions.hostProcess: true; tenant "team-a" has no `,
			`windowsHostProcess exception. Fix: remove windowsOptions.hostProcess, or ask the infra team for an `,
			`exception in the Tenant`,
		]),
	}}
}

test_ephemeral_container_added_to_a_running_pod_is_checked if {
	debug := {"name": "debugger", "image": "busybox", "securityContext": {"privileged": true}}
	old := testdata.pod("x", {"containers": [testdata.main_container]})
	new := testdata.pod("x", {"containers": [testdata.main_container], "ephemeralContainers": [debug]})
	request := object.union(
		testdata.request("UPDATE", "Pod", "team-a", testdata.alice, new, old),
		{"subResource": "ephemeralcontainers"},
	)
	violations := pod_hardening.violation
		with input as {"request": request, "pod_templates": testdata.pod_templates("Pod", new)}
		with data.inventory as testdata.inventory
	{v.field | some v in violations} == {"spec.ephemeralContainers[0].securityContext.privileged"}
}

# --- Hosts in probes and lifecycle handlers ---

test_probes_and_handlers_without_a_host_are_allowed if {
	container := object.union(testdata.main_container, {
		"livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
		"readinessProbe": {"tcpSocket": {"port": 8080, "host": ""}},
		"startupProbe": {"exec": {"command": ["cat", "/tmp/ready"]}},
		"lifecycle": {
			"preStop": {"httpGet": {"path": "/drain", "port": 8080, "host": null}}, "postStart": {"sleep": {"seconds": 1}},
		},
	})
	count(violations_for("Pod", "team-a", testdata.alice, testdata.pod("x", {"containers": [container]}))) == 0
}

test_probe_host_is_refused if {
	container := object.union(testdata.main_container, {"livenessProbe": {"httpGet": {"host": "10.96.0.1", "port": 443}}})
	violations_for("Pod", "team-a", testdata.alice, testdata.pod("x", {"containers": [container]})) == {{
		"rule": "pod-hardening",
		"field": "spec.containers[0].livenessProbe.httpGet.host",
		"message": concat("", [
			`[pod-hardening] Pod "x" spec.containers[0] ("main") asks livenessProbe.httpGet.host "10.96.0.1"; no `,
			`Tenant exception allows it. Fix: remove livenessProbe.httpGet.host (the kubelet then connects to the `,
			`pod's own IP; check other addresses from inside the container, e.g. with an exec probe)`,
		]),
	}}
}

test_every_probe_and_handler_host_is_refused_in_every_container if {
	sidecar := {
		"name": "proxy",
		"image": "registry.lab.example/research/proxy:v1",
		"restartPolicy": "Always",
		"readinessProbe": {"tcpSocket": {"host": "169.254.169.254", "port": 80}},
		"startupProbe": {"httpGet": {"host": "node.local", "port": 10250}},
	}
	main := object.union(testdata.main_container, {"lifecycle": {
		"postStart": {"httpGet": {"host": "team-b.svc", "port": 80}},
		"preStop": {"tcpSocket": {"host": "::1", "port": 2379}},
	}})
	debug := {
		"name": "debug", "image": "busybox", "targetContainerName": "main",
		"livenessProbe": {"tcpSocket": {"host": "127.0.0.1", "port": 10255}},
	}
	deployment := testdata.deployment(
		"web",
		{},
		{"containers": [main], "initContainers": [sidecar], "ephemeralContainers": [debug]},
	)
	{v.field | some v in violations_for("Deployment", "team-a", testdata.alice, deployment)} == {
		"spec.template.spec.initContainers[0].readinessProbe.tcpSocket.host",
		"spec.template.spec.initContainers[0].startupProbe.httpGet.host",
		"spec.template.spec.containers[0].lifecycle.postStart.httpGet.host",
		"spec.template.spec.containers[0].lifecycle.preStop.tcpSocket.host",
		"spec.template.spec.ephemeralContainers[0].livenessProbe.tcpSocket.host",
	}
}

test_lifecycle_host_is_refused_with_its_fix if {
	container := object.union(
		testdata.main_container,
		{"lifecycle": {"preStop": {"tcpSocket": {"host": "::1", "port": 2379}}}},
	)
	violations_for("Pod", "team-b", testdata.bob, testdata.pod("x", {"containers": [container]})) == {{
		"rule": "pod-hardening",
		"field": "spec.containers[0].lifecycle.preStop.tcpSocket.host",
		"message": concat("", [
			`[pod-hardening] Pod "x" spec.containers[0] ("main") asks lifecycle.preStop.tcpSocket.host "::1"; no `,
			`Tenant exception allows it. Fix: remove lifecycle.preStop.tcpSocket.host (the kubelet then connects to `,
			`the pod's own IP; check other addresses from inside the container, e.g. with an exec probe)`,
		]),
	}}
}

test_no_exception_relaxes_probe_hosts if {
	every_exception := {
		"hostPath": true, "hostNetwork": true, "hostPID": true, "hostIPC": true, "privileged": true,
		"hostPorts": true, "capabilities": ["NET_ADMIN"], "sysctls": ["net.core.somaxconn"],
		"seccompUnconfined": true, "appArmorUnconfined": true, "seLinux": true, "procMount": true,
		"windowsHostProcess": true,
	}
	container := object.union(testdata.main_container, {"readinessProbe": {"httpGet": {"host": "10.0.0.7", "port": 8080}}})
	pod := testdata.pod("x", {"hostNetwork": true, "containers": [container]})
	messages_with(every_exception, pod) == {
		concat("", [
			`[pod-hardening] Pod "x" spec.containers[0] ("main") asks readinessProbe.httpGet.host "10.0.0.7"; no `,
			`Tenant exception allows it. Fix: remove readinessProbe.httpGet.host (the kubelet then connects to the `,
			`pod's own IP; check other addresses from inside the container, e.g. with an exec probe)`,
		]),
	}
}
