# Tenant enforcement names known rules (part of package labgate.rules.tenant_spec).
#   spec.enforcement maps rule ids to modes. A misspelt id would be accepted and do nothing (the rule
#   keeps enforcing while its admins believe it relaxed, or the other way round), so every key must
#   be a rule id of the loaded policies: data.labgate.rule_ids.known, generated from every rule's
#   custom.rule_id by `labgate policy rule-ids --write` (and checked by `labgate policy test`).
package labgate.rules.tenant_spec

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
		"[%s] Tenant %q spec.enforcement names %q, which is not a rule id of labgate's policies. Fix: use one of %s",
		[rule_id, _name, key, concat(", ", sort(_known_rule_ids))],
	)
}
