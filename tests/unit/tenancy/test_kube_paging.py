"""Lists are read in pages and every page is kept (the door and the reflectors alike)."""

from __future__ import annotations

from typing import Any

from labgate.core.api_resources import NAMESPACE
from labgate.core.kube import LIST_PAGE_SIZE, KubeApi, Reflector

ALL = [{"metadata": {"name": f"pod-{i}"}} for i in range(2 * LIST_PAGE_SIZE + 7)]


def _page(limit: int, token: str | None) -> dict[str, Any]:
    start = int(token or 0)
    items = ALL[start : start + limit]
    more = start + limit < len(ALL)
    return {
        "metadata": {"resourceVersion": "42", **({"continue": str(start + limit)} if more else {})},
        "items": items,
    }


class PagedKubeApi(KubeApi):
    def __init__(self) -> None:
        super().__init__(None, field_manager="test")  # no client: _call is faked
        self.calls: list[list[tuple[str, Any]]] = []

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        query = dict(kwargs.get("query") or [])
        self.calls.append(kwargs.get("query") or [])
        return _page(int(query["limit"]), query.get("continue"))


def test_the_door_lists_every_page() -> None:
    kube = PagedKubeApi()
    listing = kube.list(NAMESPACE, label_selector="a=b")
    assert [item["metadata"]["name"] for item in listing["items"]] == [o["metadata"]["name"] for o in ALL]
    assert len(kube.calls) == 3
    assert all(("labelSelector", "a=b") in call for call in kube.calls)


def test_a_reflector_lists_every_page_and_watches_from_the_lists_version() -> None:
    seen: list[dict[str, Any]] = []

    def list_function(**kwargs: Any) -> dict[str, Any]:
        return _page(kwargs["limit"], kwargs.get("_continue"))

    reflector = Reflector("pods", None, list_function, on_list=seen.extend, on_event=lambda *_: None)
    items, version = reflector._list_all()
    assert len(items) == len(ALL)
    assert version == "42"
