# METADATA
# title: Tenant network isolation
# description: |
#   NetworkPolicies a tenant writes in its namespaces may not open them to other tenants. Every
#   ingress `from` and egress `to` peer with a namespaceSelector is evaluated against the namespaces
#   labgate knows (matchLabels and matchExpressions In, NotIn, Exists, DoesNotExist); it may select
#   namespaces of its own tenant, of tenants in spec.network.allowIngressFromTenants (ingress), or of
#   tenants that accept ingress from this one (egress). Namespaces of no tenant (kube-system's DNS, an
#   ingress controller) are not another tenant's and stay selectable. A rule with no peers allows
#   every source or destination and is judged like an empty namespaceSelector (and, for egress, an
#   ipBlock). ipBlock egress peers are refused when the Tenant says spec.network.allowEgress: false.
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
namespace_selector_matches(selector, labels) if {
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

# Tenants whose namespaces this tenant's policies may select, per direction.
_allowed_tenants(tenant, "ingress") := {tenant.metadata.name} | {name |
	some name in object.get(tenant, ["spec", "network", "allowIngressFromTenants"], [])
}

_allowed_tenants(tenant, "egress") := {tenant.metadata.name} | {name |
	some name, other in data.inventory.tenants
	tenant.metadata.name in object.get(other, ["spec", "network", "allowIngressFromTenants"], [])
}

# Every peer of the policy as {direction, field, peer, shown, explicit}. A rule without peers allows
# every source (ingress) or every destination (egress), so it stands for an empty namespaceSelector
# (and, for egress, an ipBlock of every address).
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

_peers contains {
	"direction": direction,
	"field": sprintf("spec.%s[%d]", [direction, i]),
	"peer": {"ingress": {"namespaceSelector": {}}, "egress": {"namespaceSelector": {}, "ipBlock": {"cidr": "0.0.0.0/0"}}}[direction],
	"shown": sprintf("no %q peers: %s", [key, {"ingress": "every source", "egress": "every destination"}[direction]]),
	"explicit": false,
} if {
	some direction, key in _peer_keys
	some i, rule in object.get(input.request.object, ["spec", direction], [])
	not _has_peers(rule, key)
}

_peer_keys := {"ingress": "from", "egress": "to"}

_has_peers(rule, key) if {
	is_array(rule[key])
	count(rule[key]) > 0
}

# Namespaces labgate knows that belong to a tenant outside `allowed` and that `selector` selects,
# shown as `"team-b" (tenant "team-b")`.
_foreign_namespaces(selector, allowed) := {sprintf("%q (tenant %q)", [name, owner]) |
	some name, namespace in data.inventory.namespaces
	labels := object.get(namespace, "labels", {})
	owner := labels[tenancy.tenant_label]
	not owner in allowed
	namespace_selector_matches(selector, labels)
}

_applies(operations) := tenant if {
	_is_network_policy
	input.request.operation in operations
	tenant := tenancy.namespace_tenant
	not tenancy.is_trusted_requester
}

_selector_fix(tenant) := sprintf("list peers that select only your tenant's namespaces (namespaceSelector matchLabels %s: %q)", [
	tenancy.tenant_label, tenant.metadata.name,
])

_opening_fix(tenant, "ingress") := sprintf("ask the infra team to add the other tenant to spec.network.allowIngressFromTenants of Tenant %q", [tenant.metadata.name])

_opening_fix(tenant, "egress") := sprintf("ask the infra team to add %q to the other Tenant's spec.network.allowIngressFromTenants", [tenant.metadata.name])

_opens := {"ingress": "ingress from", "egress": "egress to"}

# METADATA
# title: A tenant's NetworkPolicies do not open it to other tenants' namespaces
# custom:
#   rule_id: network-policy-peer
violation contains {"rule": rule_id, "message": msg, "field": p.field} if {
	tenant := _applies({"CREATE", "UPDATE"})
	some p in _peers
	is_object(p.peer.namespaceSelector)
	foreign := _foreign_namespaces(p.peer.namespaceSelector, _allowed_tenants(tenant, p.direction))
	count(foreign) > 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] NetworkPolicy %q %s (%s) would open %s namespaces of other tenants: %s. Fix: %s, or %s",
		[
			rule_id, input.request.name, p.field, p.shown, _opens[p.direction], concat(", ", sort(foreign)),
			_selector_fix(tenant), _opening_fix(tenant, p.direction),
		],
	)
}

_ip_fix(p, _) := "remove the ipBlock peer" if p.explicit

_ip_fix(p, tenant) := _selector_fix(tenant) if not p.explicit

# METADATA
# title: No egress to IP blocks for a tenant without egress
# custom:
#   rule_id: network-policy-peer
violation contains {"rule": rule_id, "message": msg, "field": p.field} if {
	tenant := _applies({"CREATE", "UPDATE"})
	object.get(tenant, ["spec", "network", "allowEgress"], true) == false
	some p in _peers
	p.direction == "egress"
	is_object(p.peer.ipBlock)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] NetworkPolicy %q %s (%s) would open egress to IP addresses, but tenant %q has spec.network.allowEgress: false. Fix: %s, or ask the infra team to allow egress in Tenant %q",
		[rule_id, input.request.name, p.field, p.shown, tenant.metadata.name, _ip_fix(p, tenant), tenant.metadata.name],
	)
}

_is_baseline(obj) if obj.metadata.labels[_managed_by_label] == "labgate"

# METADATA
# title: labgate's baseline NetworkPolicies are the platform's
# custom:
#   rule_id: network-policy-baseline
violation contains {"rule": rule_id, "message": msg, "field": sprintf("metadata.labels[%s]", [_managed_by_label])} if {
	_is_network_policy
	not tenancy.is_trusted_requester
	some side in ["object", "oldObject"]
	_is_baseline(input.request[side])
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] user %s may not %s NetworkPolicy %q in namespace %q: it is labelled %s=labgate, a baseline labgate's reconciler owns. Fix: leave the baseline as it is and add a NetworkPolicy of your own beside it (policies add up), or ask the infra team to change the Tenant's spec.network",
		[
			rule_id, tenancy.describe_user(input.request.userInfo), _verb[input.request.operation],
			input.request.name, input.request.namespace, _managed_by_label,
		],
	)
}
