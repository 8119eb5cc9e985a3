package labgate.rules.network_policy_test

import data.labgate.lib.testdata
import data.labgate.rules.network_policy

policy(name, labels, spec) := {
	"apiVersion": "networking.k8s.io/v1",
	"kind": "NetworkPolicy",
	"metadata": {"name": name, "labels": labels},
	"spec": object.union({"podSelector": {}}, spec),
}

tenant_selector(tenant) := {"namespaceSelector": {"matchLabels": {"labgate.io/tenant": tenant}}}

violations_for(operation, namespace, user, new, old) := violations if {
	violations := network_policy.violation
		with input.request as testdata.request(operation, "NetworkPolicy", namespace, user, new, old)
		with input.pod_templates as []
		with data.inventory as testdata.inventory
}

# --- the label-selector semantics ---

test_namespace_selector_semantics if {
	labels := {"labgate.io/tenant": "team-a", "purpose": "data"}
	network_policy._namespace_selector_matches({}, labels)
	network_policy._namespace_selector_matches({"matchLabels": {"purpose": "data"}}, labels)
	not network_policy._namespace_selector_matches({"matchLabels": {"purpose": "data", "x": "y"}}, labels)
	network_policy._namespace_selector_matches({"matchExpressions": [{"key": "purpose", "operator": "In", "values": ["data", "ci"]}]}, labels)
	not network_policy._namespace_selector_matches({"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}, labels)
	not network_policy._namespace_selector_matches({"matchExpressions": [{"key": "purpose", "operator": "NotIn", "values": ["data"]}]}, labels)
	network_policy._namespace_selector_matches({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, labels)
	network_policy._namespace_selector_matches({"matchExpressions": [{"key": "purpose", "operator": "Exists"}]}, labels)
	not network_policy._namespace_selector_matches({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, labels)
	network_policy._namespace_selector_matches({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, labels)
	not network_policy._namespace_selector_matches({"matchExpressions": [{"key": "purpose", "operator": "DoesNotExist"}]}, labels)
	not network_policy._namespace_selector_matches(
		{
			"matchLabels": {"purpose": "data"},
			"matchExpressions": [{"key": "labgate.io/tenant", "operator": "In", "values": ["team-b"]}],
		},
		labels,
	)
}

# --- what a selector can ever select ---

test_selects_outside_is_judged_on_the_selector if {
	allowed := {"team-a", "team-b"}
	network_policy.selects_outside({"matchLabels": {"labgate.io/tenant": "team-a"}}, allowed) == set()
	network_policy.selects_outside(
		{"matchExpressions": [{"key": "labgate.io/tenant", "operator": "In", "values": ["team-a", "team-b"]}]},
		allowed,
	) == set()
	network_policy.selects_outside({"matchLabels": {"labgate.io/tenant": "team-c"}}, allowed) == {
		"namespaces of other tenants",
	}
	network_policy.selects_outside({"matchLabels": {"purpose": "data"}}, allowed) == {
		"namespaces of other tenants", "namespaces of no tenant",
	}
	network_policy.selects_outside(
		{"matchExpressions": [{"key": "labgate.io/tenant", "operator": "Exists"}]},
		allowed,
	) == {"namespaces of other tenants"}
	network_policy.selects_outside(
		{"matchExpressions": [{"key": "labgate.io/tenant", "operator": "DoesNotExist"}]},
		allowed,
	) == {"namespaces of no tenant"}
	network_policy.selects_outside(
		{"matchExpressions": [{"key": "labgate.io/tenant", "operator": "NotIn", "values": ["team-c"]}]},
		allowed,
	) == {"namespaces of other tenants", "namespaces of no tenant"}

	# In with NotIn removing the other tenant's value leaves only allowed ones.
	network_policy.selects_outside(
		{"matchExpressions": [
			{"key": "labgate.io/tenant", "operator": "In", "values": ["team-a", "team-c"]},
			{"key": "labgate.io/tenant", "operator": "NotIn", "values": ["team-c"]},
		]},
		allowed,
	) == set()

	# A selector that can select nothing (contradictions) selects nothing outside either.
	network_policy.selects_outside(
		{"matchLabels": {"purpose": "data"}, "matchExpressions": [{"key": "purpose", "operator": "DoesNotExist"}]},
		allowed,
	) == set()
	network_policy.selects_outside(
		{
			"matchLabels": {"labgate.io/tenant": "team-c"},
			"matchExpressions": [{"key": "labgate.io/tenant", "operator": "In", "values": ["team-a"]}],
		},
		allowed,
	) == set()

	# Platform namespaces, pinned by name, are selectable; a tenant's own namespace by name alone is not.
	network_policy.selects_outside({"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}, allowed) == set()
	network_policy.selects_outside({"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}, allowed) == {
		"namespaces of other tenants", "namespaces of no tenant",
	}
	network_policy.selects_outside(
		{"matchLabels": {"kubernetes.io/metadata.name": "team-a", "labgate.io/tenant": "team-a"}},
		allowed,
	) == set()
}

# --- network-policy-peer ---

test_peers_within_the_tenant_and_allowed_tenants_are_allowed if {
	np := policy("mine", {}, {
		"ingress": [
			{"from": [tenant_selector("team-a"), tenant_selector("team-b"), {"podSelector": {"matchLabels": {"app": "ui"}}}]},
		],
		"egress": [{"to": [
			tenant_selector("team-a"),
			{
				"namespaceSelector": {
					"matchExpressions": [
						{"key": "labgate.io/tenant", "operator": "In", "values": ["team-a"]},
						{"key": "purpose", "operator": "In", "values": ["ci", "data"]},
					],
				},
			},
			{
				"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
				"podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
			},
		]}],
	})
	count(violations_for("CREATE", "team-a", testdata.alice, np, null)) == 0
}

test_egress_to_a_tenant_that_accepts_ingress_is_allowed if {
	np := policy(
		"to-a",
		{},
		{"egress": [{"to": [tenant_selector("team-a")]}, {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]},
	)
	count(violations_for("CREATE", "team-b", testdata.bob, np, null)) == 0
}

test_namespace_of_no_tenant_and_platform_are_not_checked if {
	np := policy("open", {}, {"ingress": [{}]})
	count(violations_for("CREATE", "default", testdata.alice, np, null)) == 0
	count(violations_for("CREATE", "team-a", testdata.cluster_admin, np, null)) == 0
}

test_empty_namespace_selector_is_refused if {
	np := policy("allow-all", {}, {"ingress": [{"from": [{"podSelector": {}}, {"namespaceSelector": {}}]}]})
	violations_for("CREATE", "team-a", testdata.alice, np, null) == {{
		"rule": "network-policy-peer",
		"field": "spec.ingress[0].from[1]",
		"message": concat("", [
			`[network-policy-peer] NetworkPolicy "allow-all" spec.ingress[0].from[1] (namespaceSelector {}) would open `,
			`ingress from namespaces that are not tenant "team-a"'s (nor an allowed tenant's): it selects namespaces `,
			`of no tenant and namespaces of other tenants, now or once created; today: "ci" (no tenant), "default" (no `,
			`tenant), "orphan" (tenant "ghost"). Fix: list peers that select only your tenant's namespaces `,
			`(namespaceSelector matchLabels labgate.io/tenant: "team-a"), or ask the infra team to add the other `,
			`tenant to spec.network.allowIngressFromTenants of Tenant "team-a"`,
		]),
	}}
}

# Selected nothing foreign when it was admitted, but would select a namespace another tenant labels
# purpose=data tomorrow.
test_selector_on_an_ordinary_label_is_refused_even_when_it_selects_only_own_namespaces_today if {
	np := policy("data", {}, {"ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"purpose": "data"}}}]}]})
	violations_for("CREATE", "team-a", testdata.alice, np, null) == {{
		"rule": "network-policy-peer",
		"field": "spec.ingress[0].from[0]",
		"message": concat("", [
			`[network-policy-peer] NetworkPolicy "data" spec.ingress[0].from[0] (namespaceSelector `,
			`{"matchLabels":{"purpose":"data"}}) would open ingress from namespaces that are not tenant "team-a"'s `,
			`(nor an allowed tenant's): it selects namespaces of no tenant and namespaces of other tenants, now or `,
			`once created. Fix: list peers that select only your tenant's namespaces (namespaceSelector matchLabels `,
			`labgate.io/tenant: "team-a"), or ask the infra team to add the other tenant to `,
			`spec.network.allowIngressFromTenants of Tenant "team-a"`,
		]),
	}}
}

test_not_in_selector_to_other_tenants_is_refused if {
	selector := {"matchExpressions": [{"key": "labgate.io/tenant", "operator": "NotIn", "values": ["team-a"]}]}
	np := policy("out", {}, {"egress": [{"to": [tenant_selector("team-a")]}, {"to": [{"namespaceSelector": selector}]}]})
	violations_for("UPDATE", "team-a", testdata.alice, np, np) == {{
		"rule": "network-policy-peer",
		"field": "spec.egress[1].to[0]",
		"message": `[network-policy-peer] NetworkPolicy "out" spec.egress[1].to[0] (namespaceSelector {"matchExpressions":[{"key":"labgate.io/tenant","operator":"NotIn","values":["team-a"]}]}) would open egress to namespaces that are not tenant "team-a"'s (nor an allowed tenant's): it selects namespaces of no tenant and namespaces of other tenants, now or once created; today: "ci" (no tenant), "default" (no tenant), "orphan" (tenant "ghost"), "team-b" (tenant "team-b"). Fix: list peers that select only your tenant's namespaces (namespaceSelector matchLabels labgate.io/tenant: "team-a"), or ask the infra team to add "team-a" to the other Tenant's spec.network.allowIngressFromTenants`,
	}}
}

test_ip_block_egress_is_refused_without_allow_egress if {
	np := policy("web", {}, {"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]})
	violations_for("CREATE", "team-a", testdata.alice, np, null) == {{
		"rule": "network-policy-peer",
		"field": "spec.egress[0].to[0]",
		"message": concat("", [
			`[network-policy-peer] NetworkPolicy "web" spec.egress[0].to[0] (ipBlock {"cidr":"10.0.0.0/8"}) would open `,
			`egress to IP addresses, but tenant "team-a" has spec.network.allowEgress: false. Fix: remove the ipBlock `,
			`peer, or ask the infra team to allow egress in Tenant "team-a"`,
		]),
	}}
}

test_ip_block_ingress_is_judged_like_egress if {
	np := policy("from-web", {}, {"ingress": [{"from": [{"ipBlock": {"cidr": "203.0.113.0/24"}}]}]})
	violations_for("CREATE", "team-a", testdata.alice, np, null) == {{
		"rule": "network-policy-peer",
		"field": "spec.ingress[0].from[0]",
		"message": concat("", [
			`[network-policy-peer] NetworkPolicy "from-web" spec.ingress[0].from[0] (ipBlock `,
			`{"cidr":"203.0.113.0/24"}) would open ingress from IP addresses, but tenant "team-a" has `,
			`spec.network.allowEgress: false. Fix: remove the ipBlock peer, or ask the infra team to allow egress in `,
			`Tenant "team-a"`,
		]),
	}}

	# team-b allows egress: the same ingress peer is admitted there.
	count(violations_for("CREATE", "team-b", testdata.bob, np, null)) == 0
}

test_rule_without_peers_opens_everything if {
	np := policy("anywhere", {}, {"egress": [{"ports": [{"port": 443}]}]})
	violations_for("CREATE", "team-a", testdata.alice, np, null) == {
		{
			"rule": "network-policy-peer",
			"field": "spec.egress[0]",
			"message": concat("", [
				`[network-policy-peer] NetworkPolicy "anywhere" spec.egress[0] (no "to" peers: every destination) would `,
				`open egress to namespaces that are not tenant "team-a"'s (nor an allowed tenant's): it selects `,
				`namespaces of no tenant and namespaces of other tenants, now or once created; today: "ci" (no tenant), `,
				`"default" (no tenant), "orphan" (tenant "ghost"), "team-b" (tenant "team-b"). Fix: list peers that `,
				`select only your tenant's namespaces (namespaceSelector matchLabels labgate.io/tenant: "team-a"), or ask `,
				`the infra team to add "team-a" to the other Tenant's spec.network.allowIngressFromTenants`,
			]),
		},
		{
			"rule": "network-policy-peer",
			"field": "spec.egress[0]",
			"message": concat("", [
				`[network-policy-peer] NetworkPolicy "anywhere" spec.egress[0] (no "to" peers: every destination) would `,
				`open egress to IP addresses, but tenant "team-a" has spec.network.allowEgress: false. Fix: list peers `,
				`that select only your tenant's namespaces (namespaceSelector matchLabels labgate.io/tenant: "team-a"), `,
				`or ask the infra team to allow egress in Tenant "team-a"`,
			]),
		},
		{
			"rule": "network-policy-metadata",
			"field": "spec.egress[0]",
			"message": concat("", [
				`[network-policy-metadata] NetworkPolicy "anywhere" spec.egress[0] (no "to" peers: every destination) `,
				`would open egress to the cloud metadata address 169.254.169.254, fd00:ec2::254, which holds the node's `,
				`credentials and no tenant may reach. Fix: list "to" peers instead, e.g. ipBlock {"cidr": "0.0.0.0/0", `,
				`"except": ["169.254.169.254/32"]}`,
			]),
		},
	}
}

test_ingress_rule_without_peers_in_team_b_names_team_a_namespaces if {
	np := policy("open", {}, {"ingress": [{}]})
	violations := violations_for("CREATE", "team-b", testdata.bob, np, null)
	[v.message | some v in violations] == [
		concat("", [
			`[network-policy-peer] NetworkPolicy "open" spec.ingress[0] (no "from" peers: every source) would open `,
			`ingress from namespaces that are not tenant "team-b"'s (nor an allowed tenant's): it selects namespaces `,
			`of no tenant and namespaces of other tenants, now or once created; today: "ci" (no tenant), "default" (no `,
			`tenant), "orphan" (tenant "ghost"), "team-a" (tenant "team-a"), "team-a-data" (tenant "team-a"). Fix: `,
			`list peers that select only your tenant's namespaces (namespaceSelector matchLabels labgate.io/tenant: `,
			`"team-b"), or ask the infra team to add the other tenant to spec.network.allowIngressFromTenants of `,
			`Tenant "team-b"`,
		]),
	]
}

# --- network-policy-metadata ---

test_metadata_address_is_refused_whatever_the_egress_setting if {
	np := policy(
		"web",
		{},
		{
			"egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::/64"]}}]}],
		},
	)
	violations_for("CREATE", "team-b", testdata.bob, np, null) == {{
		"rule": "network-policy-metadata",
		"field": "spec.egress[0].to[0]",
		"message": concat("", [
			`[network-policy-metadata] NetworkPolicy "web" spec.egress[0].to[0] (ipBlock {"cidr":"0.0.0.0/0"}) would `,
			`open egress to the cloud metadata address 169.254.169.254, which holds the node's credentials and no `,
			`tenant may reach. Fix: add the address to the ipBlock's except ("169.254.169.254/32")`,
		]),
	}}
}

test_ipv6_metadata_address_is_refused if {
	np := policy(
		"v6",
		{},
		{
			"egress": [
				{
					"to": [
						{"ipBlock": {"cidr": "fd00::/8", "except": ["fd00:ec2::254/127"]}}, {"ipBlock": {"cidr": "fd00:ec2::/112"}},
					],
				},
			],
		},
	)
	[v.message | some v in violations_for("UPDATE", "team-b", testdata.bob, np, np)] == [
		concat("", [
			`[network-policy-metadata] NetworkPolicy "v6" spec.egress[0].to[1] (ipBlock {"cidr":"fd00:ec2::/112"}) `,
			`would open egress to the cloud metadata address fd00:ec2::254, which holds the node's credentials and no `,
			`tenant may reach. Fix: add the address to the ipBlock's except ("fd00:ec2::254/128")`,
		]),
	]
}

test_ip_blocks_that_except_or_miss_the_metadata_address_are_allowed if {
	np := policy("web", {}, {
		"egress": [{"to": [
			{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
			{"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128", "::ffff:0:0/96"]}},
			{"ipBlock": {"cidr": "169.254.0.0/16", "except": ["169.254.169.0/24"]}},
			{"ipBlock": {"cidr": "10.0.0.0/8"}},
		]}],
		# An ingress source at the metadata address reaches nothing.
		"ingress": [{"from": [tenant_selector("team-b")]}, {"from": [{"ipBlock": {"cidr": "169.254.0.0/16"}}]}],
	})
	count(violations_for("CREATE", "team-b", testdata.bob, np, null)) == 0
}

# --- network-policy-baseline ---

baseline := policy(
	"labgate-baseline",
	{"app.kubernetes.io/managed-by": "labgate"},
	{"ingress": [{"from": [tenant_selector("team-a")]}]},
)

test_platform_manages_baseline if {
	count(violations_for("CREATE", "team-a", testdata.cluster_admin, baseline, null)) == 0
	count(violations_for("DELETE", "team-a", testdata.cluster_admin, null, baseline)) == 0
}

test_researcher_deletes_own_policy if {
	np := policy("mine", {}, {"ingress": [{"from": [tenant_selector("team-a")]}]})
	count(violations_for("DELETE", "team-a", testdata.alice, null, np)) == 0
}

test_researcher_may_not_delete_baseline if {
	violations_for("DELETE", "team-a", testdata.alice, null, baseline) == {{
		"rule": "network-policy-baseline",
		"field": "metadata.labels[app.kubernetes.io/managed-by]",
		"message": concat("", [
			`[network-policy-baseline] user "alice" (groups: team-a) may not delete NetworkPolicy "labgate-baseline" `,
			`in namespace "team-a": it is labelled app.kubernetes.io/managed-by=labgate, a baseline labgate's `,
			`reconciler owns. Fix: leave the baseline as it is and add a NetworkPolicy of your own beside it (policies `,
			`add up), or ask the infra team to change the Tenant's spec.network`,
		]),
	}}
}

test_researcher_may_not_unlabel_or_create_baseline if {
	unlabelled := json.patch(baseline, [{"op": "remove", "path": "/metadata/labels/app.kubernetes.io~1managed-by"}])
	[v.rule | some v in violations_for("UPDATE", "team-a", testdata.alice, unlabelled, baseline)] == [
		"network-policy-baseline",
	]
	[v.rule | some v in violations_for("CREATE", "team-a", testdata.alice, baseline, null)] == ["network-policy-baseline"]
}
