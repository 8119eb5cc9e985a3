"""The admission.k8s.io/v1 AdmissionReview wire format, typed (pure).

Kubernetes payloads ignore unknown fields (the apiserver may add some); a body that is not an
AdmissionReview at all fails validation here and is answered with HTTP 400 by the app.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from labgate.core.errors import BadRequestError

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class _KubeModel(BaseModel):
    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True, frozen=True)


class GroupVersionKind(_KubeModel):
    group: str = ""
    version: str
    kind: str


class GroupVersionResource(_KubeModel):
    group: str = ""
    version: str
    resource: str


class UserInfo(_KubeModel):
    """Who sent the request, as the apiserver authenticated them."""

    username: str = ""
    uid: str | None = None
    groups: list[str] = Field(default_factory=list)
    extra: dict[str, list[str]] = Field(default_factory=dict)


class AdmissionRequest(_KubeModel):
    uid: str = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str | None = None
    name: str | None = None
    namespace: str | None = None
    operation: Operation
    user_info: UserInfo
    object: dict[str, Any] | None = None
    old_object: dict[str, Any] | None = None
    dry_run: bool = False


class AdmissionReview(_KubeModel):
    api_version: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: AdmissionRequest


class ResponseStatus(_KubeModel):
    code: int
    reason: str
    message: str


class AdmissionResponse(_KubeModel):
    uid: str
    allowed: bool
    status: ResponseStatus | None = None
    warnings: list[str] | None = None
    patch_type: Literal["JSONPatch"] | None = None
    patch: str | None = None  # base64 of a JSON Patch document

    def to_review(self) -> dict[str, Any]:
        """The AdmissionReview the apiserver expects back."""
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": self.model_dump(by_alias=True, exclude_none=True),
        }


class MalformedReviewError(BadRequestError):
    """A body that is not an AdmissionReview: HTTP 400 with the first field that is wrong and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, content={"error": "malformed AdmissionReview", "reason": reason})
        self.reason = reason


def parse_review(body: bytes) -> AdmissionReview:
    """The AdmissionReview in `body`; MalformedReviewError when it is not one."""
    try:
        return AdmissionReview.model_validate_json(body)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise MalformedReviewError(f"{where}: {first['msg']}") from err
