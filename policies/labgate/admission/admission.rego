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

# METADATA
# title: Every finding of every rule package, with its enforcement mode
# description: |
#   Gathers the violation set of each package under data.labgate.rules (a new rule folder needs no
#   registration) and marks each finding enforce, warn or dry-run for the request's tenant.
findings contains finding if {
	some package_name
	some violation in data.labgate.rules[package_name].violation
	finding := object.union(violation, {"mode": mode(violation.rule)})
}

_modes := {"enforce", "warn", "dry-run"}

# METADATA
# title: How a rule is enforced for the request's tenant
# description: |
#   The tenant's mode for the rule (Tenant.spec.enforcement[rule_id]), else the rule's default mode
#   for every tenant (config rule_modes[rule_id]: a new rule starts in dry-run or warn), else
#   enforce.
mode(rule_id) := m if {
	m := tenancy.namespace_tenant.spec.enforcement[rule_id]
	m in _modes
} else := m if {
	m := data.labgate.config.rule_modes[rule_id]
	m in _modes
} else := "enforce"

# METADATA
# title: The findings that refuse the request
# description: |
#   Findings in enforce mode; the webhook joins their messages into the one refusal a researcher
#   reads.
denials := [f | some f in findings; f.mode == "enforce"]

# METADATA
# title: The findings said as kubectl warnings
# description: |
#   Findings in warn mode. One marked `if_admitted` says what happens to an admitted object (pods
#   that will wait): it is said only when nothing refuses the request, and without the mark.
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

# METADATA
# title: The findings only recorded
# description: |
#   Findings in dry-run mode: neither refused nor shown to the researcher, recorded in the decision
#   log so the infra team sees what a new rule would refuse before enforcing it.
dry_run := [f | some f in findings; f.mode == "dry-run"]

# METADATA
# title: The verdict on one admission request
# description: |
#   What the webhook asks OPA for each request: allowed, the denials, warnings and dry-run findings,
#   the tenant, the inventory revision OPA decided with, and the pod's GPU demand and headroom that
#   the quota ledger reserves against.
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

# METADATA
# title: Verdicts on a batch of admission requests
# description: |
#   One decision per element of input.batch, in order, in one evaluation. The webhook decides a
#   tenant's batch of GPU pods this way, each input carrying the GPU usage the pod is to be decided
#   against (what the pods before it in the batch leave).
decisions := [d | some item in input.batch; d := decision with input as item]

# METADATA
# scope: document
# title: The tenant the request belongs to
# description: |
#   The tenant the request's namespace is labelled for (for a Namespace being created, the one its
#   own label claims), whether or not such a Tenant exists; null when there is none. Returned with
#   the decision.
default tenant_name := null

tenant_name := tenancy.claimed_tenant_name

# METADATA
# scope: document
# title: Which copy of the tenants OPA decided with
# description: |
#   The revision of the inventory the webhook pushed; null when OPA holds none (it drops pushed data
#   when it reloads its policies), so the webhook pushes it again instead of deciding without
#   tenants.
default inventory_revision := null

inventory_revision := data.inventory.revision
