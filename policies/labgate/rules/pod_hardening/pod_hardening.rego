# METADATA
# title: Pod hardening
# description: |
#   In a tenant's namespace, pod templates meet the Pod Security Standards' baseline profile, checked
#   by labgate field by field: no host namespaces (hostNetwork, hostPID, hostIPC), hostPath volumes,
#   privileged containers, capabilities beyond the baseline set, hostPorts, Unconfined seccomp or
#   AppArmor profiles, SELinux types, users or roles beyond the container ones, an Unmasked /proc,
#   unsafe sysctls, Windows hostProcess containers or a host in a probe or lifecycle handler
#   (containers, initContainers and ephemeralContainers). Each control but the last has its own
#   exception in the Tenant's spec.exceptions (hostNetwork, hostPID, hostIPC, hostPath, privileged,
#   hostPorts, seccompUnconfined, appArmorUnconfined, seLinux, procMount, windowsHostProcess: true;
#   capabilities and sysctls: the names allowed), and an exception relaxes exactly its control and
#   nothing else. The lists (baseline capabilities, safe sysctls, SELinux types) are
#   data.labgate.config.pod_security.
#   Pods the platform creates (a Job's or ReplicaSet's controller) are not checked again: their
#   templates were checked when the workload was applied.
package labgate.rules.pod_hardening

import data.labgate.lib.tenancy

_or_exception := "or ask the infra team for an exception in the Tenant"

_config := data.labgate.config.pod_security

# An ask: where (for the message), the field, what it asks, the exception that covers it (null for a
# control no exception relaxes), its value for list exceptions (capabilities, sysctls; null for the
# others) and how to fix it.
_ask(where, field, asks, exception, value, fix) := {
	"where": where,
	"field": field,
	"asks": asks,
	"exception": exception,
	"value": value,
	"fix": fix,
}

_object(value) := value if {
	is_object(value)
} else := {}

_array(value) := value if {
	is_array(value)
} else := []

# --- Host namespaces: each its own exception ---

_asks contains _ask(
	template.path,
	sprintf("%s.%s", [template.path, key]),
	sprintf("%s: true", [key]),
	key,
	null,
	sprintf("remove %s.%s", [template.path, key]),
) if {
	some template in input.pod_templates
	some key in ["hostNetwork", "hostPID", "hostIPC"]
	template.spec[key] == true
}

# --- hostPath volumes ---

_asks contains _ask(
	sprintf("%s.volumes[%d] (%q)", [template.path, i, volume.name]),
	sprintf("%s.volumes[%d].hostPath", [template.path, i]),
	sprintf("hostPath %q", [object.get(volume.hostPath, "path", "")]),
	"hostPath",
	null,
	"use a persistentVolumeClaim or emptyDir volume instead",
) if {
	some template in input.pod_templates
	some i, volume in _array(object.get(template.spec, "volumes", []))
	is_object(volume.hostPath)
}

# --- Container controls ---

_container_where(template, c) := sprintf("%s.%s (%q)", [template.path, c.field, c.container.name])

_container_field(template, c, rest) := sprintf("%s.%s.%s", [template.path, c.field, rest])

_asks contains _ask(
	_container_where(template, c),
	_container_field(template, c, "securityContext.privileged"),
	"privileged: true",
	"privileged",
	null,
	"remove securityContext.privileged",
) if {
	some template in input.pod_templates
	some c in tenancy.containers(template.spec)
	c.container.securityContext.privileged == true
}

_asks contains _ask(
	_container_where(template, c),
	_container_field(template, c, sprintf("securityContext.capabilities.add[%d]", [i])),
	sprintf("capability %q", [capability]),
	"capabilities",
	capability,
	sprintf(
		"remove %q from securityContext.capabilities.add (the baseline allows %s)",
		[capability, concat(", ", _config.baseline_capabilities)],
	),
) if {
	some template in input.pod_templates
	some c in tenancy.containers(template.spec)
	some i, capability in _array(object.get(c.container, ["securityContext", "capabilities", "add"], []))
	not capability in {cap | some cap in _config.baseline_capabilities}
}

# A hostPort equal to its containerPort under hostNetwork is what the apiserver writes itself (it
# defaults hostPort to containerPort there): the hostNetwork exception covers it.
_asks contains object.union(
	_ask(
		_container_where(template, c),
		_container_field(template, c, sprintf("ports[%d].hostPort", [i])),
		sprintf("hostPort %d", [port.hostPort]),
		"hostPorts",
		null,
		sprintf("remove ports[%d].hostPort and reach the pod through a Service", [i]),
	),
	{"also_covered_by": _host_network_port(template, port)},
) if {
	some template in input.pod_templates
	some c in tenancy.containers(template.spec)
	some i, port in _array(object.get(c.container, "ports", []))
	object.get(port, "hostPort", 0) != 0
}

_host_network_port(template, port) := "hostNetwork" if {
	template.spec.hostNetwork == true
	port.hostPort == object.get(port, "containerPort", null)
} else := ""

_asks contains _ask(
	_container_where(template, c),
	_container_field(template, c, "securityContext.procMount"),
	sprintf("procMount %q", [proc_mount]),
	"procMount",
	null,
	"remove securityContext.procMount (or set it to Default)",
) if {
	some template in input.pod_templates
	some c in tenancy.containers(template.spec)
	proc_mount := c.container.securityContext.procMount
	not proc_mount in {"Default", "", null}
}

# --- Pod and container security contexts alike ---

# Every securityContext of a template: the pod's (container null) and each container's.
_contexts(template) := array.concat(
	[{"container": null, "context": _object(object.get(template.spec, "securityContext", {}))}],
	[{"container": c, "context": _object(object.get(c.container, "securityContext", {}))} |
		some c in tenancy.containers(template.spec)
	],
)

# Where a securityContext is, for the message, and its field: written out only for one that asks
# something, not for every container of every template.
_context_where(template, ctx) := template.path if ctx.container == null

_context_where(template, ctx) := _container_where(template, ctx.container) if ctx.container != null

_context_field(template, ctx) := sprintf("%s.securityContext", [template.path]) if ctx.container == null

_context_field(template, ctx) := _container_field(template, ctx.container, "securityContext") if {
	ctx.container != null
}

_asks contains _ask(
	_context_where(template, ctx),
	sprintf("%s.seccompProfile.type", [_context_field(template, ctx)]),
	"seccompProfile Unconfined",
	"seccompUnconfined",
	null,
	"use seccompProfile RuntimeDefault (or remove it)",
) if {
	some template in input.pod_templates
	some ctx in _contexts(template)
	ctx.context.seccompProfile.type == "Unconfined"
}

_asks contains _ask(
	_context_where(template, ctx),
	sprintf("%s.appArmorProfile.type", [_context_field(template, ctx)]),
	"appArmorProfile Unconfined",
	"appArmorUnconfined",
	null,
	"use appArmorProfile RuntimeDefault (or remove it)",
) if {
	some template in input.pod_templates
	some ctx in _contexts(template)
	ctx.context.appArmorProfile.type == "Unconfined"
}

_apparmor_annotation_prefix := "container.apparmor.security.beta.kubernetes.io/"

_asks contains _ask(
	template.path,
	sprintf("%s.annotations[%s]", [_metadata_path(template), key]),
	sprintf("AppArmor profile %q", [value]),
	"appArmorUnconfined",
	null,
	sprintf("remove the annotation %s (or set it to runtime/default)", [key]),
) if {
	some template in input.pod_templates
	some key, value in _object(object.get(_object(template.metadata), "annotations", {}))
	startswith(key, _apparmor_annotation_prefix)
	value != "runtime/default"
	not startswith(value, "localhost/")
}

# "metadata" for a Pod's "spec", "spec.template.metadata" for "spec.template.spec".
_metadata_path(template) := concat(".", array.concat(array.slice(parts, 0, count(parts) - 1), ["metadata"])) if {
	parts := split(template.path, ".")
}

_asks contains _ask(
	_context_where(template, ctx),
	sprintf("%s.seLinuxOptions.type", [_context_field(template, ctx)]),
	sprintf("SELinux type %q", [selinux_type]),
	"seLinux",
	null,
	sprintf("remove seLinuxOptions.type or use one of %s", [concat(", ", _config.selinux_types)]),
) if {
	some template in input.pod_templates
	some ctx in _contexts(template)
	selinux_type := ctx.context.seLinuxOptions.type
	selinux_type != ""
	not selinux_type in {t | some t in _config.selinux_types}
}

_asks contains _ask(
	_context_where(template, ctx),
	sprintf("%s.seLinuxOptions.%s", [_context_field(template, ctx), key]),
	sprintf("SELinux %s %q", [key, value]),
	"seLinux",
	null,
	sprintf("remove seLinuxOptions.%s", [key]),
) if {
	some template in input.pod_templates
	some ctx in _contexts(template)
	some key in ["user", "role"]
	value := ctx.context.seLinuxOptions[key]
	value != ""
}

_asks contains _ask(
	_context_where(template, ctx),
	sprintf("%s.windowsOptions.hostProcess", [_context_field(template, ctx)]),
	"windowsOptions.hostProcess: true",
	"windowsHostProcess",
	null,
	"remove windowsOptions.hostProcess",
) if {
	some template in input.pod_templates
	some ctx in _contexts(template)
	ctx.context.windowsOptions.hostProcess == true
}

_asks contains _ask(
	template.path,
	sprintf("%s.securityContext.sysctls[%d]", [template.path, i]),
	sprintf("sysctl %q", [sysctl.name]),
	"sysctls",
	sysctl.name,
	sprintf("remove the sysctl (the baseline allows %s)", [concat(", ", _config.safe_sysctls)]),
) if {
	some template in input.pod_templates
	some i, sysctl in _array(object.get(template.spec, ["securityContext", "sysctls"], []))
	not sysctl.name in {s | some s in _config.safe_sysctls}
}

# --- Hosts in probes and lifecycle handlers: no exception ---

# A host in an httpGet or tcpSocket probe or lifecycle handler makes the kubelet connect there from
# the node, past the tenant's NetworkPolicies: to another tenant's pods, node-local services, the
# metadata address. Pod Security's baseline refuses it from Kubernetes 1.34 (an empty host is
# allowed). No exception relaxes it: no workload needs it, since without a host the kubelet connects
# to the pod's own IP, and a check of another address belongs in the container (an exec probe).
_handlers := [
	["livenessProbe"],
	["readinessProbe"],
	["startupProbe"],
	["lifecycle", "postStart"],
	["lifecycle", "preStop"],
]

_asks contains _ask(
	_container_where(template, c),
	_container_field(template, c, field),
	sprintf("%s %q", [field, host]),
	null,
	null,
	sprintf(
		concat("", [
			"remove %s (the kubelet then connects to the pod's own IP; check other addresses from inside the ",
			"container, e.g. with an exec probe)",
		]),
		[field],
	),
) if {
	some template in input.pod_templates
	some c in tenancy.containers(template.spec)
	some handler in _handlers
	object.get(c.container, handler, null) != null # only handlers the container has, before each action
	some action in ["httpGet", "tcpSocket"]
	host := object.get(c.container, array.concat(handler, [action, "host"]), "")
	not host in {"", null}
	field := concat(".", array.concat(handler, [action, "host"]))
}

# --- Exceptions ---

_exceptions(tenant) := _object(object.get(tenant, ["spec", "exceptions"], {}))

_is_excepted(tenant, ask) if {
	ask.value == null
	_exceptions(tenant)[ask.exception] == true
}

_is_excepted(tenant, ask) if {
	ask.value != null
	ask.value in _array(_exceptions(tenant)[ask.exception])
}

_is_excepted(tenant, ask) if {
	covered_by := object.get(ask, "also_covered_by", "")
	covered_by != ""
	_exceptions(tenant)[covered_by] == true
}

_exception_text(ask) := sprintf("%s exception", [ask.exception]) if {
	ask.value == null
} else := sprintf("%s exception for %q", [ask.exception, ask.value])

# Why the ask is refused, and its fix: the exception the tenant lacks and how to ask for it, or, for
# a control no exception relaxes, only the fix.
_refusal(tenant, ask) := sprintf(
	"tenant %q has no %s. Fix: %s, %s",
	[tenant.metadata.name, _exception_text(ask), ask.fix, _or_exception],
) if {
	ask.exception != null
} else := sprintf("no Tenant exception allows it. Fix: %s", [ask.fix])

# METADATA
# title: >-
#   Pod Security baseline, control by control, each relaxed only by its own exception
#   (hosts in probes and lifecycle handlers by none)
# custom:
#   rule_id: pod-hardening
violation contains {"rule": rule_id, "message": msg, "field": ask.field} if {
	input.request.operation in {"CREATE", "UPDATE"}
	tenant := tenancy.namespace_tenant
	not tenancy.is_trusted_requester
	some ask in _asks
	not _is_excepted(tenant, ask)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s asks %s; %s",
		[rule_id, tenancy.object_ref, ask.where, ask.asks, _refusal(tenant, ask)],
	)
}
