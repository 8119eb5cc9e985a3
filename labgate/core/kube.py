"""The one door to the Kubernetes API for the webhook and the reconciler: client construction and
the list-then-watch loop that keeps a local copy of one kind of object current."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from pydantic.alias_generators import to_camel

from labgate.core.api_resources import (
    Kind,
    Object,
    kind_of,
)
from labgate.core.watch_batching import ReadBacklog, gathered
from labgate.core.watch_events import WatchEndedError, events

log = logging.getLogger(__name__)

# What callers may name without importing the client library themselves: this module is the only
# one that imports `kubernetes` (an import-linter contract in pyproject.toml holds it to that).
ApiClient = client.ApiClient
__all__ = ["ApiClient", "ApiException", "KubeApi", "Reflector", "WatchFed", "api_client", "namespace_gone"]


def namespace_gone(err: ApiException) -> bool:
    """A write refused because its namespace was deleted (404) or is being deleted (403,
    NamespaceTerminating): there is nothing left to write into."""
    if err.status == 403:
        return "NamespaceTerminating" in str(err.body)
    if err.status != 404:
        return False
    # Only the namespace's own 404 (details.kind "namespaces"): a 404 for an unknown resource type
    # (a CRD not installed) or a missing object is not a deleted namespace.
    try:
        details = json.loads(err.body or "{}").get("details") or {}
    except (TypeError, ValueError, AttributeError):
        return False
    return bool(details.get("kind") == "namespaces")


def api_client(kubeconfig: Path | None) -> client.ApiClient:
    """A client from `kubeconfig`, or from the pod's service account when None."""
    if kubeconfig is not None:
        return config.new_client_from_config(config_file=str(kubeconfig))
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)


ListFunction = Callable[..., Any]
# Lists are read in pages, so that neither the apiserver nor labgate holds a whole large collection
# (thousands of pods) in one response.
LIST_PAGE_SIZE = 500

# Every watch asks the server to end it after this many seconds and is then re-established from the
# last resourceVersion (cheap: the apiserver's watch cache serves it). A live connection therefore
# shows itself at least this often, even when nothing changes; a client read timeout a little longer
# ends a watch whose connection died silently (a partition, a peer that vanished), which would
# otherwise wait forever while the cache it feeds grows stale.
WATCH_TIMEOUT_SECONDS = 10
WATCH_READ_SLACK_SECONDS = 5


class Reflector:
    """Lists one kind of object, then follows its watch; re-lists when the watch expires (410) or fails.

    `on_list(objects)` receives the whole collection after every list; `on_event(type, object)` every
    change after that. Objects are plain dicts, as the API serves them. `age()` is how long ago the
    API last proved this copy current (a list, an event, or a watch the server ended on time).

    `batch_seconds` > 0 reads the watch a burst at a time (`labgate.core.watch_batching`): when the
    connection holds nothing more, the reader waits that long before reading again, so a busy watch
    costs a wake-up per window instead of one per event, and each event is late by at most that.
    """

    def __init__(
        self,
        name: str,
        api: client.ApiClient,
        list_function: ListFunction,
        *,
        on_list: Callable[[list[Object]], None],
        on_event: Callable[[str, Object], None],
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        batch_seconds: float = 0.0,
    ):
        self.name = name
        self._api = api
        self._list = list_function
        self._on_list = on_list
        self._on_event = on_event
        self._watch_timeout = watch_timeout_seconds
        self._batch_seconds = batch_seconds
        self._stop = threading.Event()
        self._response: Any = None  # the watch being read, while one is
        self._thread = threading.Thread(target=self._run, name=f"reflector-{name}", daemon=True)
        self.has_synced = threading.Event()
        self._last_contact = 0.0  # monotonic; 0 until the first list

    def _touch(self) -> None:
        self._last_contact = time.monotonic()

    def age(self) -> float:
        """Seconds since the API last proved this copy current (infinite before the first list)."""
        return time.monotonic() - self._last_contact if self._last_contact else float("inf")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        # The reading thread waits in the socket for the next event (up to the watch's timeout):
        # shutting the socket down ends that read now, so a process stops in a moment, not after
        # a join's timeout per reflector. Its `finally` then closes the response.
        response = self._response
        sock = getattr(getattr(response, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def as_dict(self, obj: Any) -> Object:
        return obj if isinstance(obj, dict) else dict(self._api.sanitize_for_serialization(obj))

    def _list_all(self) -> tuple[list[Object], str | None]:
        """Every object, a page of LIST_PAGE_SIZE at a time (as client-go's pager does), and the
        collection's resourceVersion to watch from."""
        items: list[Object] = []
        token: str | None = None
        while True:
            page = self.as_dict(self._list(_request_timeout=10, limit=LIST_PAGE_SIZE, _continue=token))
            items.extend(self.as_dict(item) for item in page.get("items") or [])
            metadata = page.get("metadata", {})
            token = metadata.get("continue") or None
            if token is None:
                return items, metadata.get("resourceVersion")

    def _follow(self, resource_version: str | None) -> str | None:
        """One watch from `resource_version` until the server ends it (or `stop`); each change to
        `on_event`. Returns the version of the last event, to resume from."""
        response = self._list(
            watch=True,
            resource_version=resource_version,
            timeout_seconds=self._watch_timeout,
            allow_watch_bookmarks=True,
            _request_timeout=(5, self._watch_timeout + WATCH_READ_SLACK_SECONDS),
            _preload_content=False,  # the raw response, streamed; not a body read whole and deserialized
        )
        self._response = response
        try:
            if self._stop.is_set():  # `stop` came before the response was there to shut down
                return resource_version
            for event in events(self._chunks(response)):
                obj = self.as_dict(event["object"])
                resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    self._on_event(event["type"], obj)
                self._touch()
                if self._stop.is_set():
                    break
        finally:
            self._response = None
            response.close()
            response.release_conn()
        return resource_version

    def _chunks(self, response: Any) -> Iterator[bytes]:
        """The watch's body as it arrives; a burst at a time when `batch_seconds` is set."""
        chunks: Iterator[bytes] = response.stream(amt=None, decode_content=False)
        sock = getattr(getattr(response, "connection", None), "sock", None)
        # The buffered file urllib3's chunked reading reads from (http.client's response's `fp`).
        fp = getattr(getattr(response, "_fp", None), "fp", None)
        if self._batch_seconds <= 0 or sock is None or not hasattr(fp, "peek"):
            return chunks
        # The pause is the stop event's wait: `stop` ends it at once, as it ends a read.
        return gathered(
            chunks, has_more=ReadBacklog(fp, sock), pause=lambda: self._stop.wait(self._batch_seconds)
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                items, resource_version = self._list_all()
                # The list proves the API reachable and this copy current, whatever the consumer then
                # fails at (writing it into an OPA that is down is not a stale fact).
                self._touch()
                self._on_list(items)
                self.has_synced.set()
                while not self._stop.is_set():
                    resource_version = self._follow(resource_version)
                    self._touch()  # the server ended the watch on time: the connection is alive
            except WatchEndedError as err:  # 410: the version is too old; anything else: say so
                if err.status != 410:
                    log.warning("reflector %s: watch ended with %s, re-listing", self.name, err)
                    self._stop.wait(1.0)
            except ApiException as err:
                if err.status != 410:
                    log.warning("reflector %s: API error %s, re-listing", self.name, err.status)
                    self._stop.wait(1.0)
            except Exception as err:  # a read timeout, a reset connection: list afresh
                if self._stop.is_set():
                    return  # the read `stop` ended
                log.warning("reflector %s: watch failed (%s), re-listing", self.name, err)
                self._stop.wait(1.0)


class WatchFed:
    """A cache fed by one Reflector (set as `self._reflector`): its readiness and lifecycle."""

    _reflector: Reflector

    @property
    def is_synced(self) -> bool:
        return self._reflector.has_synced.is_set()

    def age(self) -> float:
        """Seconds since the API last proved this cache current."""
        return self._reflector.age()

    def start(self) -> None:
        self._reflector.start()

    def stop(self) -> None:
        self._reflector.stop()


_RESPONSE_TYPES = {"200": "object", "201": "object", "202": "object"}


def _raw_request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: list[tuple[str, Any]] | None = None,
    body: Any = None,
    content_type: str = "application/json",
    accept: str = "application/json",
    preload: bool = True,
    timeout: Any = None,
) -> Any:
    """One REST call through the client's auth and TLS, with the client's public API only
    (`param_serialize`, `call_api`, `response_deserialize`); raises ApiException on a non-2xx
    answer. With preload=False it returns the raw streaming response (what kubernetes.watch expects)."""
    request = api.param_serialize(
        method,
        path,
        query_params=[(k, str(v).lower() if isinstance(v, bool) else v) for k, v in query or []],
        header_params={"Content-Type": content_type, "Accept": accept},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request, _request_timeout=timeout)
    if not 200 <= response.status <= 299:
        response.read()
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    if not preload:
        return response.response
    response.read()
    return api.response_deserialize(response_data=response, response_types_map=_RESPONSE_TYPES).data


class KubeApi:
    """Typed-enough REST calls for the reconciler: server-side apply under one field manager, delete,
    list, with a count of the requests made (for the reconcile benchmarks)."""

    def __init__(self, api: client.ApiClient, *, field_manager: str):
        self.api = api
        self.field_manager = field_manager
        self.requests = 0
        self.writes = 0

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, Any]] | None = None,
        content_type: str = "application/json",
        timeout: float = 10,
    ) -> Object:
        self.requests += 1
        if method != "GET":
            self.writes += 1
        result = _raw_request(
            self.api,
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            preload=True,
            timeout=timeout,
        )
        return dict(result) if isinstance(result, dict) else {}

    def apply(self, obj: Object, *, subresource: str | None = None) -> Object:
        """Server-side apply `obj` (force: labgate owns the fields it sets)."""
        kind = kind_of(obj)
        metadata = obj["metadata"]
        path = kind.path(namespace=metadata.get("namespace"), name=metadata["name"])
        if subresource:
            path += f"/{subresource}"
        return self._call(
            "PATCH",
            path,
            body=obj,
            query=[("fieldManager", self.field_manager), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )

    def json_patch(
        self, kind: Kind, name: str, patch: list[dict[str, Any]], *, namespace: str | None = None
    ) -> Object:
        return self._call(
            "PATCH",
            kind.path(namespace=namespace, name=name),
            body=patch,
            content_type="application/json-patch+json",
        )

    def create(self, kind: Kind, obj: Object, *, namespace: str | None = None) -> Object:
        return self._call("POST", kind.path(namespace=namespace), body=obj)

    def replace(self, kind: Kind, obj: Object) -> Object:
        metadata = obj["metadata"]
        return self._call(
            "PUT", kind.path(namespace=metadata.get("namespace"), name=metadata["name"]), body=obj
        )

    def replace_status(self, kind: Kind, obj: Object) -> Object:
        """PUT `obj`'s status subresource; its metadata.resourceVersion is the precondition (a version
        written since fails with `ApiException` 409)."""
        metadata = obj["metadata"]
        path = kind.path(namespace=metadata.get("namespace"), name=metadata["name"]) + "/status"
        return self._call("PUT", path, body=obj)

    def get(
        self, kind: Kind, name: str, *, namespace: str | None = None, timeout: float = 10
    ) -> Object | None:
        """One object, or None when it does not exist."""
        try:
            return self._call("GET", kind.path(namespace=namespace, name=name), timeout=timeout)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout: float = 10,
    ) -> Object:
        """Every object of `kind`, read page by page (a Reflector is for what must stay current);
        `timeout` bounds each page's request."""
        items: list[Object] = []
        for page in self.pages(kind, namespace=namespace, label_selector=label_selector, timeout=timeout):
            items.extend(page.get("items") or [])
        return {**page, "items": items}

    def pages(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        timeout: float = 10,
    ) -> Iterator[Object]:
        """The list of every object of `kind`, one page of LIST_PAGE_SIZE at a time, each page read
        when the one before it has been taken (all pages are of one snapshot: the continue token
        carries its resourceVersion), so that whoever counts them holds one page at a time."""
        base = [("labelSelector", label_selector)] if label_selector else []
        token: str | None = None
        while True:
            query = [*base, ("limit", LIST_PAGE_SIZE), *([("continue", token)] if token else [])]
            page = self._call("GET", kind.path(namespace=namespace), query=query, timeout=timeout)
            token = page.get("metadata", {}).get("continue") or None
            yield page
            if token is None:
                return

    def delete(
        self, kind: Kind, name: str, *, namespace: str | None = None, resource_version: str | None = None
    ) -> bool:
        """Delete one object; False if it was already gone. With `resource_version`, only that version
        of it: one written since (another writer's) is left, and the call raises `ApiException` 409."""
        preconditions = {"preconditions": {"resourceVersion": resource_version}} if resource_version else {}
        body = {"propagationPolicy": "Background", **preconditions}
        try:
            self._call("DELETE", kind.path(namespace=namespace, name=name), body=body)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def lister(
        self,
        kind: Kind,
        *,
        label_selector: str | None = None,
        metadata_only: bool = False,
        namespace: str | None = None,
    ) -> ListFunction:
        """A list function (for Reflector) over all namespaces, optionally filtered by labels. With
        `metadata_only`, objects come as PartialObjectMetadata (e.g. Secrets without their data)."""

        def list_objects(**kwargs: Any) -> Any:
            query: list[tuple[str, Any]] = [
                (to_camel(k), v) for k, v in kwargs.items() if not k.startswith("_") and v is not None
            ]
            if kwargs.get("_continue"):  # the generated clients' name for `continue`, a keyword
                query.append(("continue", kwargs["_continue"]))
            if label_selector:
                query.append(("labelSelector", label_selector))
            is_watch = bool(kwargs.get("watch"))
            self.requests += 1
            accept = "application/json"
            if metadata_only:
                kind_name = "PartialObjectMetadata" if is_watch else "PartialObjectMetadataList"
                accept = f"application/json;as={kind_name};g=meta.k8s.io;v=v1"
            return _raw_request(
                self.api,
                "GET",
                kind.path(namespace=namespace),
                query=query,
                accept=accept,
                preload=not is_watch,
                timeout=kwargs.get("_request_timeout", None if is_watch else 30),
            )

        return list_objects
