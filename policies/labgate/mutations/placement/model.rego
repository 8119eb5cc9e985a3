package labgate.mutations.placement

import data.labgate.lib.gpu
import data.labgate.lib.json_patch

# The tenant's one model, for a template that asks whole GPUs of none and gets no model from its pool.
_model_selector(tenant, template) := {gpu.model_label: model |
	models := object.keys(json_patch.object_or_empty(object.get(tenant, ["spec", "gpu", "models"], {})))
	count(models) == 1
	some model in models
	not gpu.is_mig_model(model)
	some ask in gpu.template_asks[template.path]
	ask.model == gpu.unspecified_model
	not gpu.model_label in object.keys(_pool_selector(tenant, template))
}

_model_warning(tenant, template) := sprintf(
	"labgate selected GPU model %q (%s) for %s",
	[model, gpu.model_label, json_patch.subject(template)],
) if {
	model := _model_selector(tenant, template)[gpu.model_label]
} else := ""
