# METADATA
# title: Pods beyond GPU quota, as preemptible
# description: |
#   A tenant with spec.gpu.overQuota: preemptible gets pods beyond quota admitted instead of refused,
#   never silently: the mutation labels them labgate.io/preemptible=true and gives them the
#   preemptible priority class (config), they hold no reservation, and kubectl shows a warning.
#   A pod that carries the label by itself is refused unless its tenant allows preemptible pods and
#   the pod runs at that priority class. `is_admitted` tells rules.gpu_quota that the request's Pod
#   is such a pod (it is neither refused for the quota nor reserved in the ledger).
package labgate.rules.gpu_preemptible

import data.labgate.lib.gpu
import data.labgate.lib.tenancy

# Judged when created, and again when Kueue lets it through its gate (lib.gpu.judged_pod_template).
_pod_template := gpu.judged_pod_template

_preemptible_label := data.labgate.config.preemptible_label

_preemptible_class := data.labgate.config.preemptible_priority_class

_allows_preemptible(tenant) if tenant.spec.gpu.overQuota == "preemptible"

_is_marked_preemptible if object.get(_pod_template.metadata, ["labels", _preemptible_label], "") == "true"

# METADATA
# title: Whether the request's pod is admitted as preemptible
# description: |
#   The pod is marked preemptible, by a tenant that allows pods beyond quota (spec.gpu.overQuota
#   preemptible), at the preemptible priority class; gpu_quota then gives it no GPU demand or
#   headroom, so it holds no reservation in the ledger.
is_admitted if {
	_is_marked_preemptible
	_allows_preemptible(tenancy.namespace_tenant)
	object.get(_pod_template.spec, "priorityClassName", "") == _preemptible_class
}

# METADATA
# title: Preemptible pods run at the preemptible priority
# custom:
#   rule_id: gpu-preemptible
violation contains {"rule": rule_id, "message": msg, "field": "spec.priorityClassName"} if {
	input.request.kind.kind == "Pod" # first, for rule indexing
	input.request.kind.group == ""
	_is_marked_preemptible
	tenant := tenancy.namespace_tenant
	not is_admitted
	rule_id := rego.metadata.rule().custom.rule_id
	reason := _preemptible_refusal(tenant)
	msg := sprintf(
		"[%s] %s is labelled %s=true but %s. Fix: remove the label; labgate marks pods beyond quota itself",
		[rule_id, tenancy.object_ref, _preemptible_label, reason],
	)
}

_preemptible_refusal(tenant) := sprintf(
	"tenant %q admits no pods beyond quota (spec.gpu.overQuota is not preemptible)",
	[tenant.metadata.name],
) if {
	not _allows_preemptible(tenant)
} else := sprintf(
	"its priority class is %q, not %q",
	[object.get(_pod_template.spec, "priorityClassName", ""), _preemptible_class],
)
