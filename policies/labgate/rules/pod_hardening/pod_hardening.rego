# METADATA
# title: Pod hardening
# description: |
#   In a tenant's namespace, pod templates may not use the node's network, PID or IPC namespaces,
#   mount hostPath volumes, or run privileged containers (containers, initContainers and
#   ephemeralContainers), unless the Tenant grants the exception in spec.exceptions (hostNetwork,
#   hostPID which also covers hostIPC, hostPath, privileged). Pods the platform creates (a Job's or
#   ReplicaSet's controller) are not checked again: their templates were checked when the workload
#   was applied.
package labgate.rules.pod_hardening

import data.labgate.lib.tenancy

_or_exception := "or ask the infra team for an exception in the Tenant"

# What a template asks: where (for the message), the field, what it asks, which exception covers it.
_asks contains {
	"where": template.path,
	"field": sprintf("%s.%s", [template.path, key]),
	"asks": sprintf("%s: true", [key]),
	"exception": host.exception,
	"note": host.note,
	"fix": sprintf("remove %s.%s", [template.path, key]),
} if {
	some template in input.pod_templates
	some key, host in _host_namespaces
	template.spec[key] == true
}

# hostIPC has no exception of its own: the hostPID exception (sharing the node's processes) covers it.
_host_namespaces := {
	"hostNetwork": {"exception": "hostNetwork", "note": ""},
	"hostPID": {"exception": "hostPID", "note": ""},
	"hostIPC": {"exception": "hostPID", "note": " (it also covers hostIPC)"},
}

_asks contains {
	"where": sprintf("%s.volumes[%d] (%q)", [template.path, i, volume.name]),
	"field": sprintf("%s.volumes[%d].hostPath", [template.path, i]),
	"asks": sprintf("hostPath %q", [object.get(volume.hostPath, "path", "")]),
	"exception": "hostPath",
	"note": "",
	"fix": "use a persistentVolumeClaim or emptyDir volume instead",
} if {
	some template in input.pod_templates
	some i, volume in object.get(template.spec, "volumes", [])
	is_object(volume.hostPath)
}

_asks contains {
	"where": sprintf("%s.%s (%q)", [template.path, c.field, c.container.name]),
	"field": sprintf("%s.%s.securityContext.privileged", [template.path, c.field]),
	"asks": "privileged: true",
	"exception": "privileged",
	"note": "",
	"fix": "remove securityContext.privileged",
} if {
	some template in input.pod_templates
	some c in tenancy.containers(template.spec)
	c.container.securityContext.privileged == true
}

_has_exception(tenant, name) if tenant.spec.exceptions[name] == true

# METADATA
# title: No host namespaces, hostPath or privileged containers without the tenant's exception
# custom:
#   rule_id: pod-hardening
violation contains {"rule": rule_id, "message": msg, "field": ask.field} if {
	input.request.operation in {"CREATE", "UPDATE"}
	tenant := tenancy.namespace_tenant
	not tenancy.is_trusted_requester
	some ask in _asks
	not _has_exception(tenant, ask.exception)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s asks %s; tenant %q has no %s exception%s. Fix: %s, %s",
		[
			rule_id, tenancy.object_ref, ask.where, ask.asks, tenant.metadata.name, ask.exception,
			ask.note, ask.fix, _or_exception,
		],
	)
}
