# METADATA
# title: Tenant network isolation
# description: |
#   NetworkPolicies a tenant writes in its namespaces may not open them to other tenants. Every
#   ingress `from` and egress `to` peer with a namespaceSelector is judged by what it can ever
#   select, not by today's namespaces: it must select only namespaces labelled with its own tenant,
#   with a tenant in spec.network.allowIngressFromTenants (ingress), or with a tenant that accepts
#   ingress from this one (egress), or platform namespaces named in config
#   network_peer_platform_namespaces by their kubernetes.io/metadata.name (matchLabels and
#   matchExpressions In, NotIn, Exists, DoesNotExist). A policy admitted now therefore never starts
#   selecting a namespace another tenant creates later. A rule with no peers allows every source or
#   destination and is judged like an empty namespaceSelector (and an ipBlock of every address).
#   ipBlock peers, ingress and egress alike, are refused when the Tenant says
#   spec.network.allowEgress: false; and no egress peer may reach the cloud metadata address
#   (config metadata_addresses) unless its ipBlock's `except` covers it, whatever the Tenant says.
#   labgate's baseline policies (app.kubernetes.io/managed-by: labgate) are created, changed and
#   deleted only by the platform. Trusted requesters are never refused here.
package labgate.rules.network_policy

import data.labgate.lib.tenancy

_is_network_policy if {
	input.request.kind.kind == "NetworkPolicy"
	input.request.kind.group == "networking.k8s.io"
}

_managed_by_label := "app.kubernetes.io/managed-by"

_verb := {"CREATE": "create", "UPDATE": "change", "DELETE": "delete"}

# Kubernetes label-selector semantics; a selector without requirements selects every namespace.
_namespace_selector_matches(selector, labels) if {
	every key, value in object.get(selector, "matchLabels", {}) {
		labels[key] == value
	}
	every expression in object.get(selector, "matchExpressions", []) {
		_expression_matches(expression, labels)
	}
}

_expression_matches(expression, labels) if {
	expression.operator == "In"
	labels[expression.key] in object.get(expression, "values", [])
}

# NotIn also matches a namespace without the key, as in Kubernetes.
_expression_matches(expression, labels) if {
	expression.operator == "NotIn"
	not object.get(labels, expression.key, null) in object.get(expression, "values", [])
}

_expression_matches(expression, labels) if {
	expression.operator == "Exists"
	expression.key in object.keys(labels)
}

_expression_matches(expression, labels) if {
	expression.operator == "DoesNotExist"
	not expression.key in object.keys(labels)
}

# --- what a selector can ever select ---
#
# Labels are independent keys, so a selector can select some namespace with a property iff each key
# it constrains can take a value (or be absent) as that property needs. Every namespace carries
# kubernetes.io/metadata.name = its name; the platform namespaces carry no tenant label.

_expressions(selector, key) := [e |
	some e in object.get(selector, "matchExpressions", [])
	e.key == key
]

_match_labels(selector) := object.get(selector, "matchLabels", {})

# Sets of values the key must be one of (matchLabels, In).
_value_sets(selector, key) := {{v} | v := _match_labels(selector)[key]} | {{v | some v in object.get(e, "values", [])} |
	some e in _expressions(selector, key)
	e.operator == "In"
}

_not_in_values(selector, key) := {v |
	some e in _expressions(selector, key)
	e.operator == "NotIn"
	some v in object.get(e, "values", [])
}

_requires_present(selector, key) if count(_value_sets(selector, key)) > 0

_requires_present(selector, key) if {
	some e in _expressions(selector, key)
	e.operator == "Exists"
}

_requires_absent(selector, key) if {
	some e in _expressions(selector, key)
	e.operator == "DoesNotExist"
}

_may_be_absent(selector, key) if {
	not _requires_present(selector, key)
}

# The key can carry a value outside `excluded` (a finite set) and the selector still select it.
_may_have_value_outside(selector, key, _) if {
	not _requires_absent(selector, key)
	count(_value_sets(selector, key)) == 0
}

_may_have_value_outside(selector, key, excluded) if {
	not _requires_absent(selector, key)
	sets := _value_sets(selector, key)
	count(sets) > 0
	some v in intersection(sets)
	not v in excluded
	not v in _not_in_values(selector, key)
}

_satisfiable(selector, key) if _may_be_absent(selector, key)

_satisfiable(selector, key) if _may_have_value_outside(selector, key, set())

_name_label := data.labgate.config.namespace_name_label

_platform_namespaces := {n | some n in data.labgate.config.network_peer_platform_namespaces}

_constrained_keys(selector) := object.keys(_match_labels(selector)) | {e.key |
	some e in object.get(selector, "matchExpressions", [])
}

# Every key other than the tenant and name labels can be satisfied (else the selector selects nothing).
_others_satisfiable(selector) if {
	every key in _constrained_keys(selector) - {tenancy.tenant_label, _name_label} {
		_satisfiable(selector, key)
	}
}

# A namespace that is neither a platform namespace nor unnamed (every namespace has the name label).
_selects_ordinary_namespace(selector) if {
	_may_have_value_outside(selector, _name_label, _platform_namespaces)
	_others_satisfiable(selector)
}

# METADATA
# title: What a namespace selector reaches beyond the allowed tenants
# description: |
#   The subset of {"namespaces of other tenants", "namespaces of no tenant"} that `selector` can
#   select, now or once such namespaces are created, that the tenant names in `allowed` do not
#   cover.
selects_outside(selector, allowed) := {kind | some kind in _outside_kinds; _selects(selector, allowed, kind)}

_outside_kinds := {"namespaces of other tenants", "namespaces of no tenant"}

_selects(selector, allowed, "namespaces of other tenants") if {
	_may_have_value_outside(selector, tenancy.tenant_label, allowed)
	_selects_ordinary_namespace(selector)
}

_selects(selector, _, "namespaces of no tenant") if {
	_may_be_absent(selector, tenancy.tenant_label)
	_selects_ordinary_namespace(selector)
}

# Tenants whose namespaces this tenant's policies may select, per direction.
_allowed_tenants(tenant, "ingress") := {tenant.metadata.name} | {name |
	some name in object.get(tenant, ["spec", "network", "allowIngressFromTenants"], [])
}

_allowed_tenants(tenant, "egress") := {tenant.metadata.name} | {name |
	some name, other in data.inventory.tenants
	tenant.metadata.name in object.get(other, ["spec", "network", "allowIngressFromTenants"], [])
}

# Every peer of the policy as {direction, field, peer, shown, explicit}. A rule without peers allows
# every source or destination, so it stands for an empty namespaceSelector and an ipBlock of every
# address (IPv4 and IPv6).
_peers contains {
	"direction": direction,
	"field": sprintf("spec.%s[%d].%s[%d]", [direction, i, key, j]),
	"peer": peer,
	"shown": concat(", ", [sprintf("%s %s", [k, json.marshal(peer[k])]) |
		some k in ["namespaceSelector", "ipBlock"]
		is_object(peer[k])
	]),
	"explicit": true,
} if {
	some direction, key in _peer_keys
	some i, rule in object.get(input.request.object, ["spec", direction], [])
	some j, peer in object.get(rule, key, [])
}

_everyone := {"ingress": "every source", "egress": "every destination"}

_peers contains {
	"direction": direction,
	"field": sprintf("spec.%s[%d]", [direction, i]),
	"peer": {"namespaceSelector": {}, "ipBlocks": [{"cidr": "0.0.0.0/0"}, {"cidr": "::/0"}]},
	"shown": sprintf("no %q peers: %s", [key, everyone]),
	"explicit": false,
} if {
	some direction, key in _peer_keys
	some i, rule in object.get(input.request.object, ["spec", direction], [])
	not _has_peers(rule, key)
	everyone := _everyone[direction]
}

_peer_keys := {"ingress": "from", "egress": "to"}

_has_peers(rule, key) if {
	is_array(rule[key])
	count(rule[key]) > 0
}

# The ipBlocks a peer stands for.
_ip_blocks(peer) := [peer.ipBlock] if is_object(peer.ipBlock)

_ip_blocks(peer) := peer.ipBlocks if is_array(peer.ipBlocks)

# Namespaces labgate knows today that belong to a tenant outside `allowed`, or to none, and that
# `selector` selects, shown as `"team-b" (tenant "team-b")`: an example for the message.
_selected_today(selector, allowed) := {_show_namespace(name, labels) |
	some name, namespace in data.inventory.namespaces
	labels := object.union(object.get(namespace, "labels", {}), {_name_label: name})
	not object.get(labels, tenancy.tenant_label, null) in allowed
	not _is_platform_namespace(name, labels)
	_namespace_selector_matches(selector, labels)
}

_is_platform_namespace(name, labels) if {
	name in _platform_namespaces
	not tenancy.tenant_label in object.keys(labels)
}

_show_namespace(name, labels) := sprintf("%q (tenant %q)", [name, labels[tenancy.tenant_label]])

_show_namespace(name, labels) := sprintf("%q (no tenant)", [name]) if not tenancy.tenant_label in object.keys(labels)

_today_text(selected) := sprintf("; today: %s", [concat(", ", sort(selected))]) if count(selected) > 0

_today_text(selected) := "" if count(selected) == 0

_applies(operations) := tenant if {
	_is_network_policy
	input.request.operation in operations
	tenant := tenancy.namespace_tenant
	not tenancy.is_trusted_requester
}

_selector_fix(tenant) := sprintf(
	"list peers that select only your tenant's namespaces (namespaceSelector matchLabels %s: %q)",
	[tenancy.tenant_label, tenant.metadata.name],
)

_opening_fix(tenant, "ingress") := sprintf(
	"ask the infra team to add the other tenant to spec.network.allowIngressFromTenants of Tenant %q",
	[tenant.metadata.name],
)

_opening_fix(tenant, "egress") := sprintf(
	"ask the infra team to add %q to the other Tenant's spec.network.allowIngressFromTenants",
	[tenant.metadata.name],
)

_opens := {"ingress": "ingress from", "egress": "egress to"}

# METADATA
# title: A tenant's NetworkPolicies do not open it to other tenants' namespaces, now or later
# custom:
#   rule_id: network-policy-peer
violation contains {"rule": rule_id, "message": msg, "field": p.field} if {
	input.request.kind.kind == "NetworkPolicy" # first, for rule indexing
	input.request.kind.group == "networking.k8s.io"
	tenant := _applies({"CREATE", "UPDATE"})
	some p in _peers
	is_object(p.peer.namespaceSelector)
	allowed := _allowed_tenants(tenant, p.direction)
	outside := selects_outside(p.peer.namespaceSelector, allowed)
	count(outside) > 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] NetworkPolicy %q %s (%s) would open %s namespaces that are not tenant %q's (nor an allowed ",
			"tenant's): it selects %s, now or once created%s. Fix: %s, or %s",
		]),
		[
			rule_id, tenancy.object_name, p.field, p.shown, _opens[p.direction], tenant.metadata.name,
			concat(" and ", sort(outside)), _today_text(_selected_today(p.peer.namespaceSelector, allowed)),
			_selector_fix(tenant), _opening_fix(tenant, p.direction),
		],
	)
}

_ip_fix(p, _) := "remove the ipBlock peer" if p.explicit

_ip_fix(p, tenant) := _selector_fix(tenant) if not p.explicit

_addresses := {"ingress": "from IP addresses", "egress": "to IP addresses"}

# METADATA
# title: No ipBlock peers for a tenant closed to the outside
# custom:
#   rule_id: network-policy-peer
violation contains {"rule": rule_id, "message": msg, "field": p.field} if {
	input.request.kind.kind == "NetworkPolicy" # first, for rule indexing
	input.request.kind.group == "networking.k8s.io"
	tenant := _applies({"CREATE", "UPDATE"})
	object.get(tenant, ["spec", "network", "allowEgress"], true) == false
	some p in _peers
	count(_ip_blocks(p.peer)) > 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] NetworkPolicy %q %s (%s) would open %s %s, but tenant %q has spec.network.allowEgress: false. Fix: ",
			"%s, or ask the infra team to allow egress in Tenant %q",
		]),
		[
			rule_id, tenancy.object_name, p.field, p.shown, p.direction, _addresses[p.direction],
			tenant.metadata.name, _ip_fix(p, tenant), tenant.metadata.name,
		],
	)
}

# The metadata addresses an ipBlock lets through: inside its cidr and outside every `except`.
_open_metadata_addresses(block) := {address |
	some address in data.labgate.config.metadata_addresses
	net.cidr_contains(block.cidr, address)
	not _excepted(block, address)
}

_excepted(block, address) if {
	some excepted in object.get(block, "except", [])
	net.cidr_contains(excepted, address)
}

_metadata_fix(p) := sprintf("add the address to the ipBlock's except (%s)", [
	concat(", ", [sprintf("%q", [_host_cidr(a)]) | some a in sort(_reachable_metadata(p))]),
]) if {
	p.explicit
} else := sprintf(
	`list "to" peers instead, e.g. ipBlock {"cidr": "0.0.0.0/0", "except": [%q]}`,
	[_host_cidr(data.labgate.config.metadata_addresses[0])],
)

_host_cidr(address) := sprintf("%s/128", [address]) if contains(address, ":")

_host_cidr(address) := sprintf("%s/32", [address]) if not contains(address, ":")

_reachable_metadata(p) := {a |
	some block in _ip_blocks(p.peer)
	some a in _open_metadata_addresses(block)
}

# METADATA
# title: No egress to the cloud metadata address, whatever the tenant's egress setting
# custom:
#   rule_id: network-policy-metadata
violation contains {"rule": rule_id, "message": msg, "field": p.field} if {
	input.request.kind.kind == "NetworkPolicy" # first, for rule indexing
	input.request.kind.group == "networking.k8s.io"
	_applies({"CREATE", "UPDATE"})
	some p in _peers
	p.direction == "egress"
	reachable := _reachable_metadata(p)
	count(reachable) > 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] NetworkPolicy %q %s (%s) would open egress to the cloud metadata address %s, which holds the node's ",
			"credentials and no tenant may reach. Fix: %s",
		]),
		[rule_id, tenancy.object_name, p.field, p.shown, concat(", ", sort(reachable)), _metadata_fix(p)],
	)
}

_is_baseline(obj) if obj.metadata.labels[_managed_by_label] == "labgate"

# METADATA
# title: labgate's baseline NetworkPolicies are the platform's
# custom:
#   rule_id: network-policy-baseline
violation contains {"rule": rule_id, "message": msg, "field": sprintf("metadata.labels[%s]", [_managed_by_label])} if {
	input.request.kind.kind == "NetworkPolicy" # first, for rule indexing
	input.request.kind.group == "networking.k8s.io"
	_is_network_policy
	not tenancy.is_trusted_requester
	some side in ["object", "oldObject"]
	_is_baseline(input.request[side])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] user %s may not %s NetworkPolicy %q in namespace %q: it is labelled %s=labgate, a baseline labgate's ",
			"reconciler owns. Fix: leave the baseline as it is and add a NetworkPolicy of your own beside it (policies ",
			"add up), or ask the infra team to change the Tenant's spec.network",
		]),
		[
			rule_id, tenancy.describe_user(input.request.userInfo), _verb[input.request.operation],
			tenancy.object_name, input.request.namespace, _managed_by_label,
		],
	)
}
