# METADATA
# title: The GPU models a tenant may use
# description: |
#   A tenant that lists models (spec.gpu.models) gets only those: a pod asking another model, or
#   naming none while several are listed, is refused (a Pod when it is created, other workloads when
#   people apply them: lib.gpu checked_templates). A MIG resource is its own model.
package labgate.rules.gpu_model

import data.labgate.lib.gpu
import data.labgate.lib.tenancy

_models(tenant) := m if {
	m := tenant.spec.gpu.models
	is_object(m)
} else := {}

_quoted(names) := concat(", ", [sprintf("%q", [n]) | some n in sort(names)])

_unknown_model_fix(template, resource, _, _) := sprintf(
	"select one with %s.nodeSelector %s: <model>",
	[template.path, gpu.model_label],
) if {
	not gpu.is_mig_resource(resource)
}

# A MIG profile the tenant has a model of: ask that one, or have the infra team add this one.
_unknown_model_fix(_, resource, tenant_name, models) := sprintf(
	concat("", [
		"ask the MIG resource of one of those models instead (model %s is resource %s), or ask the infra team to ",
		"add model %q to spec.gpu.models of Tenant %q",
	]),
	[mig, concat("", [_mig_domain(resource), mig]), gpu.mig_model(resource), tenant_name],
) if {
	gpu.is_mig_resource(resource)
	mig := min({m | some m, _ in models; gpu.is_mig_model(m)})
}

# No MIG model at all: only the infra team can offer one.
_unknown_model_fix(_, resource, tenant_name, models) := sprintf(
	"ask the infra team to add model %q (resource %s) to spec.gpu.models of Tenant %q",
	[gpu.mig_model(resource), resource, tenant_name],
) if {
	gpu.is_mig_resource(resource)
	count({m | some m, _ in models; gpu.is_mig_model(m)}) == 0
}

# "nvidia.com/" of "nvidia.com/mig-3g.40gb".
_mig_domain(resource) := trim_suffix(resource, gpu.mig_model(resource))

_unknown_model_field(template, resource) := sprintf("%s.nodeSelector", [template.path]) if {
	not gpu.is_mig_resource(resource)
} else := sprintf("%s.containers", [template.path])

_is_unknown_model(models, model) if {
	model != gpu.unspecified_model
	not model in object.keys(models)
}

# Without a model a pod could land on any of several; with one listed, the mutation selects it.
_is_unknown_model(models, model) if {
	model == gpu.unspecified_model
	count(models) > 1
}

# METADATA
# title: A tenant that lists GPU models gets only those
# custom:
#   rule_id: gpu-model-unknown
violation contains {"rule": rule_id, "message": msg, "field": _unknown_model_field(template, resource)} if {
	tenant := tenancy.namespace_tenant
	models := _models(tenant)
	count(models) > 0
	some template in gpu.checked_templates
	some [resource, model] in {[a.resource, a.model] | some a in gpu.template_asks[template.path]}
	_is_unknown_model(models, model)
	asked := sum([a.count | some a in gpu.template_asks[template.path]; a.resource == resource; a.model == model])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] %s %s asks %v %s%s; tenant %q has GPU models %s only. Fix: %s",
		[
			rule_id, tenancy.object_ref, template.path, asked, resource, _model_note(resource, model),
			tenant.metadata.name, _quoted(object.keys(models)),
			_unknown_model_fix(template, resource, tenant.metadata.name, models),
		],
	)
}

_model_note(resource, _) := "" if gpu.is_mig_resource(resource)

_model_note(resource, model) := sprintf(" (%s)", [_model_name(model)]) if not gpu.is_mig_resource(resource)

_model_name(model) := "model unspecified" if {
	model == gpu.unspecified_model
} else := model
