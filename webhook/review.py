"""The admission.k8s.io/v1 AdmissionReview wire format, parsed once (pure).

The body is parsed in one pass (pydantic-core, from JSON) into the request's wire document, the
camelCase dict the policies read as `input.request`; `AdmissionRequest` is a typed, read-only view
of that same document for Python's readers, sharing its dicts rather than copying them.
Kubernetes payloads ignore unknown fields (the apiserver may add some); a body that is not an
AdmissionReview at all fails validation here and is answered with HTTP 400 by the app.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel
from typing_extensions import TypedDict

from labgate.core.errors import BadRequestError

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class GroupVersionKindDocument(TypedDict):
    group: NotRequired[str]
    version: str
    kind: str


class GroupVersionResourceDocument(TypedDict):
    group: NotRequired[str]
    version: str
    resource: str


class UserInfoDocument(TypedDict):
    """Who sent the request, as the apiserver authenticated them."""

    username: NotRequired[str]
    uid: NotRequired[str | None]
    groups: NotRequired[list[str]]
    extra: NotRequired[dict[str, list[str]]]


class RequestDocument(TypedDict):
    """The AdmissionRequest as Kubernetes writes it, and as the policies read it (`input.request`).
    After parsing, the defaults are filled in (group "", username "", groups [], extra {}, dryRun
    false) and fields given as null are left out."""

    uid: Annotated[str, Field(min_length=1)]
    kind: GroupVersionKindDocument
    resource: GroupVersionResourceDocument
    subResource: NotRequired[str | None]
    name: NotRequired[str | None]
    namespace: NotRequired[str | None]
    operation: Operation
    userInfo: UserInfoDocument
    object: NotRequired[dict[str, Any] | None]
    oldObject: NotRequired[dict[str, Any] | None]
    dryRun: NotRequired[bool]


class _ReviewDocument(TypedDict):
    apiVersion: Literal["admission.k8s.io/v1"]
    kind: Literal["AdmissionReview"]
    request: RequestDocument


_REVIEW: TypeAdapter[_ReviewDocument] = TypeAdapter(_ReviewDocument)
_REQUEST: TypeAdapter[RequestDocument] = TypeAdapter(RequestDocument)


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str


@dataclass(frozen=True, slots=True)
class GroupVersionResource:
    group: str
    version: str
    resource: str


@dataclass(frozen=True, slots=True)
class UserInfo:
    username: str
    uid: str | None
    groups: tuple[str, ...]
    extra: Mapping[str, list[str]]


@dataclass(frozen=True, slots=True, weakref_slot=True)
class AdmissionRequest:
    """One admission request: `document` is its wire form (what the policies read); the other
    fields are typed views of the same values, made once by `parse_request`/`parse_review`."""

    document: RequestDocument
    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    sub_resource: str | None
    name: str | None
    namespace: str | None
    operation: Operation
    user_info: UserInfo
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool

    def with_changes(self, **wire_fields: Any) -> AdmissionRequest:
        """This request with the given wire fields (camelCase) replaced, parsed again; a field given
        as None is left out (tests and the offline check derive one request from another)."""
        return parse_request({**self.document, **wire_fields})


class ResponseStatus(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    code: int
    reason: str
    message: str


class AdmissionResponse(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

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


def parse_review(body: bytes) -> AdmissionRequest:
    """The request of the AdmissionReview in `body`; MalformedReviewError when it is not one."""
    try:
        review = _REVIEW.validate_json(body)
    except ValidationError as err:
        raise _malformed(err) from err
    return _view(review["request"])


def parse_request(wire: Mapping[str, Any]) -> AdmissionRequest:
    """The AdmissionRequest whose wire form (camelCase) is `wire`; MalformedReviewError when it is
    not one. Validating a mapping copies its dicts into the new document (`parse_review`, from the
    body's bytes, has nothing to copy)."""
    try:
        document = _REQUEST.validate_python(wire)
    except ValidationError as err:
        raise _malformed(err, within="request") from err
    return _view(document)


def _malformed(err: ValidationError, within: str = "") -> MalformedReviewError:
    first = err.errors()[0]
    where = ".".join(str(p) for p in (within, *first["loc"]) if p) or "body"
    return MalformedReviewError(f"{where}: {first['msg']}")


def _view(document: RequestDocument) -> AdmissionRequest:
    """The typed view of `document`, its defaults filled in and its nulls left out first."""
    for field in _LEFT_OUT_WHEN_NULL:
        if field in document and document[field] is None:
            del document[field]
    kind, resource, user = document["kind"], document["resource"], document["userInfo"]
    kind.setdefault("group", "")
    resource.setdefault("group", "")
    user.setdefault("username", "")
    if user.get("uid", "") is None:
        del user["uid"]
    groups = user.setdefault("groups", [])
    extra = user.setdefault("extra", {})
    dry_run = document.setdefault("dryRun", False)
    return AdmissionRequest(
        document=document,
        uid=document["uid"],
        kind=GroupVersionKind(kind["group"], kind["version"], kind["kind"]),
        resource=GroupVersionResource(resource["group"], resource["version"], resource["resource"]),
        sub_resource=document.get("subResource"),
        name=document.get("name"),
        namespace=document.get("namespace"),
        operation=document["operation"],
        user_info=UserInfo(user["username"], user.get("uid"), tuple(groups), extra),
        object=document.get("object"),
        old_object=document.get("oldObject"),
        dry_run=dry_run,
    )


_LEFT_OUT_WHEN_NULL: tuple[Literal["subResource", "name", "namespace", "object", "oldObject"], ...] = (
    "subResource",
    "name",
    "namespace",
    "object",
    "oldObject",
)
