"""The one door to the Kubernetes API for the webhook and the reconciler: client construction and
the list-then-watch loop that keeps a local copy of one kind of object current."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

TENANT_GROUP = "labgate.io"
TENANT_VERSION = "v1alpha1"
TENANT_PLURAL = "tenants"

Object = dict[str, Any]


def api_client(kubeconfig: Path | None) -> client.ApiClient:
    """A client from `kubeconfig`, or from the pod's service account when None."""
    if kubeconfig is not None:
        return config.new_client_from_config(config_file=str(kubeconfig))
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)


ListFunction = Callable[..., Any]


class Reflector:
    """Lists one kind of object, then follows its watch; re-lists when the watch expires (410) or fails.

    `on_list(objects)` receives the whole collection after every list; `on_event(type, object)` every
    change after that. Objects are plain dicts, as the API serves them.
    """

    def __init__(
        self,
        name: str,
        api: client.ApiClient,
        list_function: ListFunction,
        *,
        on_list: Callable[[list[Object]], None],
        on_event: Callable[[str, Object], None],
        watch_timeout_seconds: int = 240,
    ):
        self.name = name
        self._api = api
        self._list = list_function
        self._on_list = on_list
        self._on_event = on_event
        self._watch_timeout = watch_timeout_seconds
        self._stop = threading.Event()
        self._watch: watch.Watch | None = None
        self._thread = threading.Thread(target=self._run, name=f"reflector-{name}", daemon=True)
        self.has_synced = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        self._thread.join(timeout=5)

    def as_dict(self, obj: Any) -> Object:
        return obj if isinstance(obj, dict) else dict(self._api.sanitize_for_serialization(obj))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listing = self.as_dict(self._list(_request_timeout=10))
                self._on_list([self.as_dict(item) for item in listing.get("items", [])])
                self.has_synced.set()
                resource_version = listing.get("metadata", {}).get("resourceVersion")
                while not self._stop.is_set():
                    self._watch = watch.Watch()
                    for event in self._watch.stream(
                        self._list,
                        resource_version=resource_version,
                        timeout_seconds=self._watch_timeout,
                        allow_watch_bookmarks=True,
                    ):
                        obj = self.as_dict(event["object"])
                        resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            self._on_event(event["type"], obj)
            except ApiException as err:
                if err.status != 410:
                    log.warning("reflector %s: API error %s, re-listing", self.name, err.status)
                    self._stop.wait(1.0)
            except Exception:
                log.exception("reflector %s failed, re-listing", self.name)
                self._stop.wait(1.0)
