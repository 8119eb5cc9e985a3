# METADATA
# title: Priority classes
# description: |
#   What a tenant's pod templates may ask of the scheduler. Priority classes: only labgate's research
#   classes (data.labgate.config.scheduling.research_priority_classes) and those the Tenant lists in
#   spec.scheduling.priorityClasses; never the cluster's system-* classes; never a priority above the
#   tenant's ceiling (spec.scheduling.maxPriority, else config max_priority), whether it comes from
#   the class or from an explicit spec.priority; and no preemptionPolicy PreemptLowerPriority on a
#   class configured Never. Class values come from data.inventory.priority_classes (the webhook
#   watches PriorityClasses); without those facts only names and explicit numbers are judged.
#   Node choice, runtime class and scheduler: rules.placement (node_choice.rego).
#   Pods are judged when created (these fields cannot change on a running pod), other workloads
#   when created or changed; the platform (trusted requesters, so controller-made pods) is not.
package labgate.rules.priority_class

import data.labgate.lib.tenancy

_config := data.labgate.config.scheduling

_is_pod if {
	input.request.kind.kind == "Pod"
	input.request.kind.group == ""
	object.get(input.request, "subResource", "") == ""
}

_judged if {
	_is_pod
	input.request.operation == "CREATE"
}

_judged if {
	not _is_pod
	input.request.kind.kind != "Pod"
	input.request.operation in {"CREATE", "UPDATE"}
}

# The templates judged here, with their tenant.
_templates contains {"tenant": tenant, "template": template} if {
	_judged
	not tenancy.is_trusted_requester
	tenant := tenancy.namespace_tenant
	some template in input.pod_templates
}

_array(value) := value if {
	is_array(value)
} else := []

_scheduling(tenant) := object.get(tenant, ["spec", "scheduling"], {})

_quoted(names) := concat(", ", [sprintf("%q", [n]) | some n in sort(names)]) if {
	count(names) > 0
} else := "none"

# --- Priority ---

# A system-* class is never allowed, whatever a list says.
_allowed_classes(tenant) := {c |
	some c in array.concat(
		_config.research_priority_classes,
		_array(object.get(_scheduling(tenant), "priorityClasses", [])),
	)
	not _is_system_class(c)
}

_ceiling(tenant) := object.get(_scheduling(tenant), "maxPriority", _config.max_priority)

_class_name(template) := name if {
	name := template.spec.priorityClassName
	is_string(name)
	name != ""
}

_is_system_class(name) if startswith(name, "system-")

# Classes judged by their value: allowed by name (a refused name is reported once, as such).
_is_judged_by_value(_, template) if not _class_name(template)

_is_judged_by_value(tenant, template) if _class_name(template) in _allowed_classes(tenant)

_has_class_facts if is_object(data.inventory.priority_classes)

# The priorities the template's pods run at, and where each comes from: the class's value, and an
# explicit spec.priority (on a Pod, the one the Priority admission plugin resolved from its class).
_priorities(template) := {p |
	name := _class_name(template)
	p := {"value": data.inventory.priority_classes[name].value, "from": sprintf("PriorityClass %q", [name])}
} | {p |
	is_number(template.spec.priority)
	p := {"value": template.spec.priority, "from": _explicit_from(template)}
}

_explicit_from(template) := sprintf("PriorityClass %q", [name]) if {
	_is_pod
	name := _class_name(template)
} else := sprintf("%s.priority", [template.path])

_field(template, key) := sprintf("%s.%s", [template.path, key])

_fix_classes(tenant) := sprintf("remove %s (labgate sets %q) or use one of tenant %q's classes (%s)", [
	"priorityClassName", data.labgate.config.default_priority_class, tenant.metadata.name,
	_quoted(_allowed_classes(tenant)),
])

# METADATA
# title: The cluster's system priority classes are not for tenants
# custom:
#   rule_id: priority-class
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some t in _templates
	name := _class_name(t.template)
	_is_system_class(name)
	field := _field(t.template, "priorityClassName")
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks PriorityClass %q, which is reserved for the cluster's own components (it would preempt ",
			"other tenants' pods and be the last evicted). Fix: %s",
		]),
		[rule_id, tenancy.object_ref, field, name, _fix_classes(t.tenant)],
	)
}

# METADATA
# title: Only the tenant's priority classes
# custom:
#   rule_id: priority-class
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some t in _templates
	name := _class_name(t.template)
	not _is_system_class(name)
	not name in _allowed_classes(t.tenant)
	field := _field(t.template, "priorityClassName")
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks PriorityClass %q, which tenant %q may not use. Fix: %s, or ask the infra team to add %q ",
			"to spec.scheduling.priorityClasses of Tenant %q",
		]),
		[
			rule_id, tenancy.object_ref, field, name, t.tenant.metadata.name, _fix_classes(t.tenant), name,
			t.tenant.metadata.name,
		],
	)
}

# METADATA
# title: No priority above the tenant's ceiling
# custom:
#   rule_id: priority-class
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some t in _templates
	_is_judged_by_value(t.tenant, t.template)
	some priority in _priorities(t.template)
	priority.value > _ceiling(t.tenant)
	field := _field(t.template, _value_field(priority))
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s runs at priority %v (%s), above tenant %q's ceiling of %v. Fix: use a priority class at or below ",
			"it (tenant %q's classes: %s), or ask the infra team to raise spec.scheduling.maxPriority of Tenant %q",
		]),
		[
			rule_id, tenancy.object_ref, priority.value, priority.from, t.tenant.metadata.name,
			_ceiling(t.tenant), t.tenant.metadata.name, _quoted(_allowed_classes(t.tenant)), t.tenant.metadata.name,
		],
	)
}

_value_field(priority) := "priorityClassName" if {
	startswith(priority.from, "PriorityClass")
} else := "priority"

# METADATA
# title: A workload names only priority classes that exist
# custom:
#   rule_id: priority-class
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	not _is_pod
	_has_class_facts
	some t in _templates
	name := _class_name(t.template)
	name in _allowed_classes(t.tenant)
	not data.inventory.priority_classes[name]
	field := _field(t.template, "priorityClassName")
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks PriorityClass %q, which does not exist, so none of its pods could be created. Fix: %s, or ",
			"ask the infra team to create it",
		]),
		[rule_id, tenancy.object_ref, field, name, _fix_classes(t.tenant)],
	)
}

# The priority a workload's pods get from their class: the named class's value, else the cluster's
# globalDefault class's, else 0 (what the Priority admission plugin computes).
_class_priority(template) := {"value": class.value, "class": sprintf("PriorityClass %q", [name])} if {
	name := _class_name(template)
	class := data.inventory.priority_classes[name]
} else := {"value": class.value, "class": sprintf("the default PriorityClass %q", [name])} if {
	not _class_name(template)
	some name, class in data.inventory.priority_classes
	class.globalDefault == true
} else := {"value": 0, "class": "no PriorityClass"} if {
	not _class_name(template)
}

# METADATA
# title: A workload's explicit priority matches its class
# custom:
#   rule_id: priority-class
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	not _is_pod
	_has_class_facts
	some t in _templates
	is_number(t.template.spec.priority)
	expected := _class_priority(t.template)
	t.template.spec.priority != expected.value
	field := _field(t.template, "priority")
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s is %v, but %s gives %v: the apiserver would refuse every pod made from it. Fix: remove %s (the ",
			"class sets the priority)",
		]),
		[rule_id, tenancy.object_ref, field, t.template.spec.priority, expected.class, expected.value, field],
	)
}

# METADATA
# title: No preempting under a class configured not to
# custom:
#   rule_id: priority-class
violation contains {"rule": rule_id, "message": msg, "field": field} if {
	some t in _templates
	t.template.spec.preemptionPolicy == "PreemptLowerPriority"
	name := _class_name(t.template)
	data.inventory.priority_classes[name].preemptionPolicy == "Never"
	field := _field(t.template, "preemptionPolicy")
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s %s asks PreemptLowerPriority, but PriorityClass %q is configured Never (its pods wait, they do ",
			"not evict others). Fix: remove %s",
		]),
		[rule_id, tenancy.object_ref, field, name, field],
	)
}
