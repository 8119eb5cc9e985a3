"""Every path in is guarded: each kind and subresource a member's RBAC can write, and that can carry a
pod spec, an identity, a secret reference, a network path or a node choice, reaches labgate's
validating webhook. The kinds come from the RBAC itself (`kubectl auth can-i --list` as the member,
in a tenant namespace), and the registration from the live ValidatingWebhookConfiguration, so a new
role rule or a kind dropped from the registration fails here.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest

from devcluster.stack import LabgateStack
from tests.e2e.conftest import Researcher, TenantFactory
from tests.e2e.training_kinds import install_training_crds
from webhook.registration import VALIDATING_WEBHOOK_NAME

pytestmark = [pytest.mark.tenancy]

_WRITES = {"create": "CREATE", "update": "UPDATE", "patch": "UPDATE"}

# What members may write that carries none of a pod spec, an identity, a secret reference, a network
# path or a node choice, with the reason. Anything else writable must be intercepted.
NOT_JUDGED = {
    # Streams into a container the member's own pod already runs (CONNECT): no new spec or identity.
    "pods/exec": "a stream into a running container of one's own pod",
    "pods/attach": "a stream into a running container of one's own pod",
    "pods/portforward": "a stream to a port of one's own pod",
    # Reviews every authenticated user may ask about themselves (system:basic-user): nothing is stored.
    "selfsubjectaccessreviews.authorization.k8s.io": "a question about one's own permissions",
    "selfsubjectrulesreviews.authorization.k8s.io": "a question about one's own permissions",
    "selfsubjectreviews.authentication.k8s.io": "a question about one's own identity",
}


def writable_resources(member: Researcher, namespace: str) -> dict[str, set[str]]:
    """resource[.group][/subresource] -> the admission operations the member's RBAC allows on it."""
    listing = member.kubectl("auth", "can-i", "--list", "-n", namespace)
    assert listing.returncode == 0, listing.stderr
    writable: dict[str, set[str]] = {}
    for line in listing.stdout.splitlines()[1:]:
        columns = re.split(r"\s{2,}", line.strip())
        if len(columns) < 2 or columns[0].startswith("["):  # non-resource URLs
            continue
        resource, verbs = columns[0], columns[-1].strip("[]").split()
        operations = {_WRITES[v] for v in verbs if v in _WRITES}
        if "*" in verbs:
            operations = {"CREATE", "UPDATE"}
        if operations:
            writable.setdefault(resource, set()).update(operations)
    return writable


def intercepted(stack: LabgateStack) -> set[tuple[str, str, str]]:
    """(group, resource[/subresource], operation) the live validating webhook is called for."""
    configuration = json.loads(stack.admin_kubectl("get", "validatingwebhookconfigurations", "-o", "json"))
    found = set()
    for item in configuration["items"]:
        for webhook in item["webhooks"]:
            if not webhook["name"].endswith(VALIDATING_WEBHOOK_NAME):
                continue
            for rule in webhook["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for operation in rule["operations"]:
                            found.add((group, resource, operation))
    return found


def is_intercepted(registered: set[tuple[str, str, str]], resource: str, operation: str) -> bool:
    """Whether a rule matches, as the apiserver matches them ("*" any; "pods/*", "*/*" subresources)."""
    name, _, subresource = resource.partition("/")
    plural, _, group = name.partition(".")
    wanted = {f"{plural}/{subresource}", f"{plural}/*", "*/*"} if subresource else {plural, "*"}
    return any(g in (group, "*") and r in wanted and o in (operation, "*") for g, r, o in registered)


@pytest.mark.parametrize("who", ["researcher", "admin"])
def test_every_kind_a_member_can_write_reaches_the_webhook(
    stack: LabgateStack, tenants: TenantFactory, who: str
) -> None:
    install_training_crds(stack)
    name = f"cov-{uuid.uuid4().hex[:6]}"
    # With a prefix, so that the members' right to create namespaces is in the listing too.
    tenant = tenants.create(name=name, spec_extra={"namespaces": {"names": [name], "prefix": f"{name}-"}})
    member = {"researcher": tenant.researcher, "admin": tenant.admin}[who]
    writable = writable_resources(member, tenant.namespace)
    # The listing is what the member really holds: the training kinds and pods among them.
    assert {"pods", "jobs.batch", "jobsets.jobset.x-k8s.io", "namespaces"} <= set(writable), writable
    registered = intercepted(stack)
    missing = sorted(
        f"{resource} {operation}"
        for resource, operations in writable.items()
        if resource not in NOT_JUDGED
        for operation in sorted(operations)
        if not is_intercepted(registered, resource, operation)
    )
    assert missing == [], f"{who} can write these, and the validating webhook never sees them"
