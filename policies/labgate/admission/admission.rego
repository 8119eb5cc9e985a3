# METADATA
# title: labgate admission entry point
# entrypoint: true
# description: |
#   The one query the webhook makes per admission request: data.labgate.admission.decision.
#   It gathers the `violation` set of every package under data.labgate.rules, applies each rule's
#   enforcement mode for the tenant (enforce, warn or dry-run; enforce when unset), and returns
#   denials, warnings and dry-run findings. The webhook turns denials into one refusal message.
#   gpu_demand is what the request's Pod asks of GPUs ({"total", "by_model"}; zero for anything else),
#   which the webhook reserves in the quota ledger when the verdict is to admit; gpu_headroom the usage
#   up to which that Pod still fits the GPU quota (null when it asks none).
package labgate.admission

import data.labgate.lib.tenancy
import data.labgate.rules.gpu_quota

findings contains finding if {
	some package_name
	some violation in data.labgate.rules[package_name].violation
	finding := object.union(violation, {"mode": mode(violation.rule)})
}

_modes := {"enforce", "warn", "dry-run"}

# The tenant's mode for a rule (Tenant.spec.enforcement[rule_id]), else the rule's default mode for
# every tenant (config rule_modes[rule_id]: a new rule starts in dry-run or warn), else enforce.
mode(rule_id) := m if {
	m := tenancy.namespace_tenant.spec.enforcement[rule_id]
	m in _modes
} else := m if {
	m := data.labgate.config.rule_modes[rule_id]
	m in _modes
} else := "enforce"

denials := [f | some f in findings; f.mode == "enforce"]

# A finding marked `if_admitted` says what happens to an admitted object (pods that will wait): said
# only when nothing refuses the request, and without the mark.
warnings := [object.remove(f, ["if_admitted"]) |
	some f in findings
	f.mode == "warn"
	_is_said(f)
]

_is_said(finding) if not finding.if_admitted

_is_said(finding) if {
	finding.if_admitted
	count(denials) == 0
}

dry_run := [f | some f in findings; f.mode == "dry-run"]

decision := {
	"allowed": count(denials) == 0,
	"denials": denials,
	"warnings": warnings,
	"dry_run": dry_run,
	"tenant": tenant_name,
	"inventory_revision": inventory_revision,
	"gpu_demand": gpu_quota.demand,
	"gpu_headroom": gpu_quota.headroom,
}

# Several inputs decided in one evaluation: one `decision` per element of input.batch, in order.
# The webhook decides a tenant's batch of GPU pods this way, each input carrying the GPU usage the
# pod is to be decided against (what the pods before it in the batch leave).
decisions := [d | some item in input.batch; d := decision with input as item]

default tenant_name := null

tenant_name := tenancy.claimed_tenant_name

# Which copy of the tenants OPA holds; null when it holds none (it drops pushed data when it reloads
# its policies), so the webhook pushes them again instead of deciding without tenants.
default inventory_revision := null

inventory_revision := data.inventory.revision
