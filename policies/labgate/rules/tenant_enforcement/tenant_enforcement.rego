# METADATA
# title: Tenant enforcement names known rules
# description: |
#   spec.enforcement maps rule ids to modes. A misspelt id would be accepted and do nothing (the rule
#   keeps enforcing while its admins believe it relaxed, or the other way round), so every key must
#   be a rule id of the loaded policies: data.labgate.rule_ids.known, generated from every rule's
#   custom.rule_id by `labgate policy rule-ids --write` (and checked by `labgate policy test`).
package labgate.rules.tenant_enforcement

import data.labgate.lib.tenancy

# A CREATE, or an UPDATE that changes the spec (see tenancy.tenant_spec_written).
_is_tenant_write if tenancy.tenant_spec_written

_name := tenancy.object_name

_known_rule_ids := {id | some id in data.labgate.rule_ids.known}

# METADATA
# title: spec.enforcement names only known rule ids
# custom:
#   rule_id: tenant-enforcement-unknown
violation contains {"rule": rule_id, "message": msg, "field": sprintf("spec.enforcement[%s]", [key])} if {
	input.request.kind.kind == "Tenant" # first, for rule indexing
	input.request.kind.group == "labgate.io"
	_is_tenant_write
	count(_known_rule_ids) > 0
	some key, _ in object.get(input.request.object, ["spec", "enforcement"], {})
	not key in _known_rule_ids
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] Tenant %q spec.enforcement names %q, which is not a rule id of labgate's policies.%s Fix: use one of %s",
		[rule_id, _name, key, _suggestion(key), concat(", ", sort(_known_rule_ids))],
	)
}

# " Did you mean "gpu-quota"?" for the known rule id most like `key` (the share of two-letter pieces the
# two have in common, at least half), else nothing.
default _suggestion(_) := ""

_suggestion(key) := sprintf(" Did you mean %q?", [_nearest(key)]) if _nearest(key)

_nearest(key) := nearest if {
	scores := {id: _likeness(key, id) | some id in _known_rule_ids}
	best := max([score | some score in scores])
	best >= 0.5
	nearest := min({id | some id, score in scores; score == best})
}

default _pairs(_) := set()

_pairs(word) := {substring(word, i, 2) | some i in numbers.range(0, count(word) - 2)} if count(word) >= 2

default _likeness(_, _) := 0

_likeness(a, b) := (2 * count(_pairs(a) & _pairs(b))) / (count(_pairs(a)) + count(_pairs(b))) if {
	count(_pairs(a)) + count(_pairs(b)) > 0
}
