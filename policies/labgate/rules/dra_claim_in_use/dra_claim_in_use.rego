# METADATA
# title: Claims a live pod names are not swapped under it
# description: |
#   A pod's GPUs asked through Dynamic Resource Allocation are judged at its admission from the
#   ResourceClaims and ResourceClaimTemplates it names (rules.gpu_quota, lib.dra). A claim's spec is
#   immutable, but a claim can be deleted and created again under the same name asking more devices
#   while the pod waits (a scheduling gate, a pending pod): the scheduler allocates what the new
#   claim asks, and no admission sees it. So in a tenant namespace, a ResourceClaim or
#   ResourceClaimTemplate that a live pod of the namespace names (spec.resourceClaims, or a claim
#   generated for it: status.resourceClaimStatuses) may be neither deleted nor created again, by
#   anyone of the tenant, admins included. Live: not Succeeded or Failed and not being deleted. The
#   webhook gathers those pods for claim CREATE and DELETE requests (input.claim_users:
#   {"pods": [{"name", "field", "phase", "is_deleting"}]}, or {"error": text} when it could not list
#   them, which refuses); without the fact this rule finds nothing. The platform (the namespace
#   controller, the claim controller that generates and removes claims) is never refused here.
package labgate.rules.dra_claim_in_use

import data.labgate.lib.tenancy

_is_claim_change if {
	input.request.kind.group == "resource.k8s.io"
	input.request.kind.kind in {"ResourceClaim", "ResourceClaimTemplate"}
	object.get(input.request, "subResource", "") == ""
	input.request.operation in {"CREATE", "DELETE"}
}

_claim_name := input.request.name if {
	is_string(input.request.name)
	input.request.name != ""
} else := object.get(input.request, ["object", "metadata", "name"], "")

_claim_ref := sprintf("%s %q in namespace %q", [input.request.kind.kind, _claim_name, input.request.namespace])

_is_live(pod) if {
	not pod.phase in {"Succeeded", "Failed"}
	not pod.is_deleting == true
}

# The live pods that name the claim, sorted by name.
_live_users := sort([pod.name | some pod in input.claim_users.pods; _is_live(pod)])

_users_text(names) := sprintf("pod %q", [names[0]]) if {
	count(names) == 1
} else := sprintf("pods %s", [concat(", ", [sprintf("%q", [n]) | some n in array.slice(names, 0, 5)])]) if {
	count(names) <= 5
} else := sprintf("pods %s and %d more", [
	concat(", ", [sprintf("%q", [n]) | some n in array.slice(names, 0, 5)]),
	count(names) - 5,
])

_which_text(names) := "has" if count(names) == 1

else := "have"

_verb := {"CREATE": "create", "DELETE": "delete"}[input.request.operation]

_why := concat("", [
	"deleting it would let a claim of the same name, asking other devices, be allocated to them without being ",
	"judged against the GPU quota",
]) if {
	input.request.operation == "DELETE"
} else := concat("", [
	"they were judged against the claim they named when admitted (or against none), and the scheduler would ",
	"allocate what this one asks without it being judged against the GPU quota",
])

_fix(names) := sprintf("delete %s first (kubectl delete pod %s -n %s) or wait for %s to finish, then %s the %s", [
	_users_text(names), concat(" ", array.slice(names, 0, 5)), input.request.namespace,
	_pronoun(names), _verb, input.request.kind.kind,
])

_pronoun(names) := "it" if count(names) == 1

else := "them"

# METADATA
# title: A claim a live pod names is neither deleted nor created again
# custom:
#   rule_id: dra-claim-in-use
violation contains {"rule": rule_id, "message": msg, "field": "metadata.name"} if {
	input.request.kind.group == "resource.k8s.io" # first, for rule indexing
	_is_claim_change
	tenancy.namespace_tenant
	not tenancy.is_trusted_requester
	names := _live_users
	count(names) > 0
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		"[%s] user %s may not %s %s: %s %s it (%s) and %s not finished; %s. Fix: %s",
		[
			rule_id, tenancy.describe_user(input.request.userInfo), _verb, _claim_ref, _users_text(names),
			_name_verb(names), _fields(names), _which_text(names), _why, _fix(names),
		],
	)
}

_name_verb(names) := "names" if count(names) == 1

else := "name"

# Where the pods name the claim: "pod train-1 spec.resourceClaims[0]", at most five.
_fields(names) := concat(", ", [sprintf("%s %s", [pod.name, pod.field]) |
	some name in array.slice(names, 0, 5)
	some pod in input.claim_users.pods
	pod.name == name
])

# METADATA
# title: A claim whose users labgate could not list is neither deleted nor created again
# custom:
#   rule_id: dra-claim-in-use
violation contains {"rule": rule_id, "message": msg, "field": "metadata.name"} if {
	input.request.kind.group == "resource.k8s.io" # first, for rule indexing
	_is_claim_change
	tenancy.namespace_tenant
	not tenancy.is_trusted_requester
	reason := input.claim_users.error
	is_string(reason)
	rule_id := rego.metadata.rule().custom.rule_id
	msg := sprintf(
		concat("", [
			"[%s] user %s may not %s %s now: labgate could not list the pods of namespace %q to see whether a live pod ",
			"names it (%s). Fix: retry; if it persists, tell the infra team",
		]),
		[rule_id, tenancy.describe_user(input.request.userInfo), _verb, _claim_ref, input.request.namespace, reason],
	)
}
