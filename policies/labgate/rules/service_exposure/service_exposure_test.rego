package labgate.rules.service_exposure_test

import data.labgate.lib.testdata
import data.labgate.rules.service_exposure

service(name, spec) := {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}

ports := [{"port": 80}]

# team-b may use NodePort services.
inventory := json.patch(
	testdata.inventory,
	[{"op": "add", "path": "/tenants/team-b/spec/network", "value": {"allowServiceTypes": ["NodePort"]}}],
)

violations_for(operation, namespace, user, new) := violations if {
	violations := service_exposure.violation
		with input.request as testdata.request(operation, "Service", namespace, user, new, new)
		with data.inventory as inventory
}

test_cluster_ip_and_headless_services_are_allowed if {
	count(violations_for("CREATE", "team-a", testdata.alice, service("web", {"ports": ports}))) == 0
	count(violations_for(
		"UPDATE",
		"team-a",
		testdata.alice,
		service("web", {"type": "ClusterIP", "clusterIP": "None", "ports": ports}),
	)) == 0
}

test_allowed_type_is_allowed_and_platform_is_not_checked if {
	count(violations_for("CREATE", "team-b", testdata.bob, service("web", {"type": "NodePort", "ports": ports}))) == 0
	count(violations_for(
		"CREATE",
		"team-a",
		testdata.cluster_admin,
		service("lb", {"type": "LoadBalancer", "externalIPs": ["192.0.2.1"], "ports": ports}),
	)) == 0
}

test_external_ips_are_refused_whatever_the_tenant_allows if {
	violations_for(
		"UPDATE",
		"team-b",
		testdata.bob,
		service("web", {"type": "NodePort", "externalIPs": ["10.96.0.1"], "ports": ports}),
	) == {{
		"rule": "service-exposure",
		"field": "spec.externalIPs",
		"message": concat("", [
			`[service-exposure] Service "web" spec.externalIPs ["10.96.0.1"] would capture traffic that any pod of the `,
			`cluster sends to those addresses (CVE-2020-8554); no tenant may set them. Fix: remove spec.externalIPs, `,
			`and use a Service of type LoadBalancer if your Tenant allows it`,
		]),
	}}
}

test_exposing_types_are_refused_unless_the_tenant_allows_them if {
	violations_for("CREATE", "team-a", testdata.alice, service("web", {"type": "LoadBalancer", "ports": ports})) == {{
		"rule": "service-exposure",
		"field": "spec.type",
		"message": concat("", [
			`[service-exposure] Service "web" is of type LoadBalancer, which tenant "team-a" may not use `,
			`(spec.network.allowServiceTypes: none). Fix: use type ClusterIP (the default) and reach it with kubectl `,
			`port-forward, or ask the infra team to add LoadBalancer to spec.network.allowServiceTypes of Tenant `,
			`"team-a"`,
		]),
	}}
	violations_for(
		"CREATE",
		"team-b",
		testdata.bob,
		service("db", {"type": "ExternalName", "externalName": "db.team-a.svc.cluster.local"}),
	) == {{
		"rule": "service-exposure",
		"field": "spec.type",
		"message": concat("", [
			`[service-exposure] Service "db" is of type ExternalName, which tenant "team-b" may not use `,
			`(spec.network.allowServiceTypes: NodePort). Fix: use type ClusterIP (the default) and reach it with `,
			`kubectl port-forward, or ask the infra team to add ExternalName to spec.network.allowServiceTypes of `,
			`Tenant "team-b"`,
		]),
	}}
}
