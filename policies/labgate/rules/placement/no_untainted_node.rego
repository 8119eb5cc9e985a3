package labgate.rules.placement

import data.labgate.lib.gpu
import data.labgate.lib.tenancy

# placement-no-untainted-node: a pod without GPUs that no node of the cluster takes (split from
# placement.rego: one package). Said from what the Tenant's status says of the cluster's nodes as a
# pod without tolerations sees them (input.open_nodes, rbac.node_taints); nothing without it.

# METADATA
# title: A pod without GPUs that no node takes says so when applied
# description: |
#   Announced, not refused (config rule_modes gives it warn): an autoscaler may add an untainted
#   node. labgate places only GPU pods on its tenant's pools (the mutation adds their tolerations);
#   a pod asking no GPUs keeps its own tolerations, and where every Ready, uncordoned node of the
#   cluster carries a NoSchedule or NoExecute taint it tolerates none of, it pends for ever. Said
#   when it is sure: the status names every such taint key (no moreTaintKeys), no toleration of the
#   pod has one of those keys or none (which may tolerate them), and the pod names no
#   ResourceClaims (its devices' claims choose its node). A pod tolerating some keys, but not every
#   taint of any node, is not told (the status keeps keys, not each node's taints). Only on CREATE,
#   in a tenant namespace, when admitted (`if_admitted`).
# custom:
#   rule_id: placement-no-untainted-node
violation contains {"rule": rule_id, "message": msg, "field": field, "if_admitted": true} if {
	input.request.operation == "CREATE"
	tenancy.namespace_tenant
	nodes := input.open_nodes
	nodes.untainted == 0
	nodes.tainted > 0
	object.get(nodes, "more_taint_keys", 0) == 0
	keys := {key | some key in nodes.taint_keys}
	some template in input.pod_templates
	not gpu.template_demand[template.path].total > 0
	count(object.get(template.spec, "resourceClaims", [])) == 0
	not _may_tolerate_any(template, keys)
	field := sprintf("%s.tolerations", [template.path])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] %s asks no GPUs, and no node takes it now: every node is tainted (%s) and it tolerates none. It ",
			"pends until one does. Fix: ask the infra team for a pool without taints for pods without GPUs ",
			"(docs/infra.md, \"A pool for pods without GPUs\")",
		]),
		[rule_id, _subject(template), concat(", ", sort(keys))],
	)
}

# A toleration that may tolerate one of the keys: it has that key, or none (operator Exists
# without a key tolerates every taint).
_may_tolerate_any(template, keys) if {
	some toleration in object.get(template.spec, "tolerations", [])
	object.get(toleration, "key", "") in (keys | {""})
}

_subject(template) := tenancy.object_ref if {
	gpu.is_pod
} else := sprintf("%s %s", [tenancy.object_ref, template.path])
