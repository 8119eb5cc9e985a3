package labgate.rules.placement

import data.labgate.lib.tenancy

# placement-node-name, placement-runtime-class, placement-scheduler: what a tenant's pod templates
# ask of the scheduler besides a pool (one package with placement.rego, so its own helper names).
# spec.nodeName is refused (it skips the scheduler, and with it taints and node pools);
# runtimeClassName and schedulerName must be in the config's list
# (data.labgate.config.scheduling) or the Tenant's spec.scheduling. Pods are judged when created
# (these fields cannot change on a running pod), other workloads when created or changed; the
# platform (trusted requesters, so controller-made pods) is not.

_choice_is_pod if {
	input.request.kind.kind == "Pod"
	input.request.kind.group == ""
	object.get(input.request, "subResource", "") == ""
}

_choice_is_judged if {
	_choice_is_pod
	input.request.operation == "CREATE"
}

_choice_is_judged if {
	not _choice_is_pod
	input.request.kind.kind != "Pod"
	input.request.operation in {"CREATE", "UPDATE"}
}

# The templates judged here, with their tenant.
_choice_templates contains {"tenant": tenant, "template": template} if {
	_choice_is_judged
	not tenancy.is_trusted_requester
	tenant := tenancy.namespace_tenant
	some template in input.pod_templates
}

_choice_list(value) := value if {
	is_array(value)
} else := []

_choice_scheduling(tenant) := object.get(tenant, ["spec", "scheduling"], {})

_choice_quoted(names) := concat(", ", [sprintf("%q", [n]) | some n in sort(names)]) if {
	count(names) > 0
} else := "none"

_choice_field(template, key) := sprintf("%s.%s", [template.path, key])

# METADATA
# title: Pods are placed by the scheduler, not by naming a node
# custom:
#   rule_id: placement-node-name
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some t in _choice_templates
	node := t.template.spec.nodeName
	is_string(node)
	node != ""
	field := _choice_field(t.template, "nodeName")
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s names node %q: that skips the scheduler, and with it taints, node pools and quotas. Fix: ",
			"remove %s; labgate places GPU pods on your tenant's pools (or use a nodeSelector within them)",
		]),
		[rule_id, tenancy.object_ref, field, node, field],
	)
}

# --- Runtime class and scheduler: from an allowed list ---

_allowed_runtime_classes(tenant) := {c | some c in _choice_list(data.labgate.config.scheduling.runtime_classes)} | {c |
	some c in _choice_list(object.get(_choice_scheduling(tenant), "runtimeClasses", []))
}

_allowed_schedulers(tenant) := {s | some s in _choice_list(data.labgate.config.scheduling.schedulers)} | {s |
	some s in _choice_list(object.get(_choice_scheduling(tenant), "schedulers", []))
}

# METADATA
# title: Only the runtime classes the cluster or the tenant allows
# custom:
#   rule_id: placement-runtime-class
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some t in _choice_templates
	name := t.template.spec.runtimeClassName
	is_string(name)
	name != ""
	not name in _allowed_runtime_classes(t.tenant)
	field := _choice_field(t.template, "runtimeClassName")
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks RuntimeClass %q; tenant %q may use %s. Fix: remove %s, or ask the infra team to add %q to ",
			"spec.scheduling.runtimeClasses of Tenant %q",
		]),
		[
			rule_id, tenancy.object_ref, field, name, t.tenant.metadata.name,
			_choice_quoted(_allowed_runtime_classes(t.tenant)), field, name, t.tenant.metadata.name,
		],
	)
}

# METADATA
# title: Only the schedulers the cluster or the tenant allows
# custom:
#   rule_id: placement-scheduler
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some t in _choice_templates
	name := t.template.spec.schedulerName
	is_string(name)
	name != ""
	not name in _allowed_schedulers(t.tenant)
	field := _choice_field(t.template, "schedulerName")
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks scheduler %q; tenant %q may use %s. Fix: remove %s, or ask the infra team to add %q to ",
			"spec.scheduling.schedulers of Tenant %q",
		]),
		[
			rule_id, tenancy.object_ref, field, name, t.tenant.metadata.name,
			_choice_quoted(_allowed_schedulers(t.tenant)), field, name, t.tenant.metadata.name,
		],
	)
}
