package labgate.admission_test

# An object created with metadata.generateName reaches the webhook without request.name (the
# apiserver names it after the request is made, and the field is left out when empty); the validating
# webhook finds the generated name in the object. Every refusal must hold for it as for a named
# object, and name the object by its generated name; the same kind of object that breaks no rule is
# still admitted.

import data.labgate.admission
import data.labgate.lib.testdata

# A CREATE of `obj` (metadata: generateName and the name the apiserver generated) as it arrives.
generated(kind, namespace, user, obj) := object.remove(
	testdata.request("CREATE", kind, namespace, user, obj, null),
	["name"],
)

_decision(request, extra) := d if {
	d := admission.decision with input as object.union({"request": request, "pod_templates": []}, extra)
		with data.inventory as testdata.inventory
}

_refusals(d) := {[f.rule, contains(f.message, `"open-x7k2p"`)] | some f in d.denials}

_metadata(prefix) := {"generateName": sprintf("%s-", [prefix]), "name": sprintf("%s-x7k2p", [prefix])}

_network_policy(spec, labels) := {
	"apiVersion": "networking.k8s.io/v1",
	"kind": "NetworkPolicy",
	"metadata": object.union(_metadata("open"), {"labels": labels}),
	"spec": spec,
}

test_a_network_policy_opening_a_tenant_to_every_namespace_is_refused_without_a_request_name if {
	open := {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}], "egress": [{}]}
	d := _decision(generated("NetworkPolicy", "team-a", testdata.alice, _network_policy(open, {})), {})
	not d.allowed
	_refusals(d) == {["network-policy-peer", true], ["network-policy-metadata", true]}
}

test_a_baseline_network_policy_made_by_a_researcher_is_refused_without_a_request_name if {
	labels := {"app.kubernetes.io/managed-by": "labgate"}
	own := {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}
	d := _decision(generated("NetworkPolicy", "team-a", testdata.alice, _network_policy(own, labels)), {})
	_refusals(d) == {["network-policy-baseline", true]}
}

test_a_network_policy_within_the_tenant_is_admitted_without_a_request_name if {
	own := {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}
	d := _decision(generated("NetworkPolicy", "team-a", testdata.alice, _network_policy(own, {})), {})
	d.allowed
	d.denials == []
}

_claim(volume_name) := {
	"apiVersion": "v1",
	"kind": "PersistentVolumeClaim",
	"metadata": _metadata("data"),
	"spec": object.union(
		{"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
		{"volumeName": volume_name},
	),
}

_volume(tenant) := {"name": "pv-1", "exists": true, "labels": {"labgate.io/tenant": tenant}, "claimRef": null}

test_a_claim_binding_another_tenants_volume_is_refused_without_a_request_name if {
	request := generated("PersistentVolumeClaim", "team-a", testdata.alice, _claim("pv-1"))
	d := _decision(request, {"persistent_volume": _volume("team-b")})
	not d.allowed
	[[f.rule, contains(f.message, `"data-x7k2p"`)] | some f in d.denials] == [["volume-claim", true]]
	own := _decision(request, {"persistent_volume": _volume("team-a")})
	own.allowed
}

_service(spec) := {"apiVersion": "v1", "kind": "Service", "metadata": _metadata("dns"), "spec": spec}

test_a_service_with_external_ips_or_a_node_port_is_refused_without_a_request_name if {
	spec := {"type": "NodePort", "externalIPs": ["10.0.0.53"], "ports": [{"port": 53}]}
	d := _decision(generated("Service", "team-a", testdata.alice, _service(spec)), {})
	not d.allowed
	{[f.rule, contains(f.message, `"dns-x7k2p"`)] | some f in d.denials} == {["service-exposure", true]}
	count(d.denials) == 2
	plain := _decision(generated("Service", "team-a", testdata.alice, _service({"ports": [{"port": 53}]})), {})
	plain.allowed
}

_namespace(labels) := {"apiVersion": "v1", "kind": "Namespace", "metadata": object.union(
	_metadata("team-a"),
	{"labels": object.union({"labgate.io/tenant": "team-a"}, labels)},
)}

test_a_tenant_namespace_with_dra_admin_access_is_refused_without_a_request_name if {
	admin := {"resource.kubernetes.io/admin-access": "true"}
	request := object.remove(generated("Namespace", "", testdata.alice, _namespace(admin)), ["namespace"])
	d := _decision(request, {})
	not d.allowed
	some f in d.denials
	f.rule == "namespace-admin-access"
	contains(f.message, `"team-a-x7k2p"`)
}
