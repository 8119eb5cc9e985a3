"""What one admission request costs the webhook in the layers around labgate's decision, apart from
the network: FastAPI's routing, dependency solving, request and response objects, and a plain
Starlette route in the same FastAPI app (labgate's admission routes), against a bare ASGI callable
that reads the same body and sends the same answer (all driven in-process, no sockets, no
server), and reading the AdmissionReview: labgate's `parse_review`, the pydantic
validation inside it, and orjson's parse alone of the same bytes.

    .venv/bin/python -m benchmarks.webhook_layers            # about 15 seconds

Prints microseconds of CPU per request (the best of 5 repeats) for each."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Annotated, Any

import orjson
from fastapi import Depends, FastAPI, Request, Response

from webhook.review import _REVIEW, parse_review

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ANSWER = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true}}'
)


def review_body() -> bytes:
    """The AdmissionReview of a Job's 1-GPU pod as kube-apiserver sends it to a webhook."""
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": "train-",
            "namespace": "team-a",
            "labels": {
                "batch.kubernetes.io/controller-uid": "0f6c7a4e-2b61-4f43-9a0e-5d2f7d5a8c11",
                "batch.kubernetes.io/job-name": "train",
                "controller-uid": "0f6c7a4e-2b61-4f43-9a0e-5d2f7d5a8c11",
                "job-name": "train",
            },
            "annotations": {"labgate.io/mutations": "placement,token-automount,priority-class"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "train",
                    "uid": "0f6c7a4e-2b61-4f43-9a0e-5d2f7d5a8c11",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": ["batch.kubernetes.io/job-tracking"],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.lab.internal/research/trainer@sha256:" + "ab" * 32,
                    "command": ["python", "-m", "train", "--epochs", "3"],
                    "env": [{"name": "WANDB_MODE", "value": "offline"}, {"name": "SEED", "value": "7"}],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"},
                        "requests": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"},
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "nodeSelector": {"labgate.io/node-pool": "team-a-spot"},
            "automountServiceAccountToken": False,
            "serviceAccountName": "experiment",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "labgate.io/pool",
                    "operator": "Equal",
                    "value": "team-a-spot",
                    "effect": "NoSchedule",
                },
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            ],
            "priorityClassName": "labgate-research",
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {},
    }
    request = {
        "uid": "7d9b3c2e-61f0-4a55-8e3e-2c9a4b1f0d77",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "team-a",
        "operation": "CREATE",
        "userInfo": {
            "username": "system:serviceaccount:kube-system:job-controller",
            "uid": "5b0e7f8a-0c1d-4e2f-9a3b-4c5d6e7f8a9b",
            "groups": [
                "system:serviceaccounts",
                "system:serviceaccounts:kube-system",
                "system:authenticated",
            ],
        },
        "object": pod,
        "oldObject": None,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    return orjson.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request})


async def bare_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Reads the whole body and sends the answer: what any ASGI server needs, and no more."""
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


class _Replica:
    """Stands for labgate's per-process state, handed to the route by a dependency as labgate's is."""


_REPLICA = _Replica()


async def _get_replica() -> _Replica:
    # async, as labgate's: a plain `def` dependency would run in a worker thread
    return _REPLICA


def fastapi_app() -> FastAPI:
    """One POST route shaped as labgate's admission routes (webhook/app.py): a Request and a replica
    from a dependency in, the body read, a Response out."""
    app = FastAPI()

    async def route(request: Request, replica: Annotated[_Replica, Depends(_get_replica)]) -> Response:
        await request.body()
        return Response(content=ANSWER, media_type="application/json")

    app.add_api_route("/validate", route, methods=["POST"])
    return app


def starlette_route_app() -> FastAPI:
    """The same route as a plain Starlette endpoint in the FastAPI app, the replica read from the
    app's state as labgate's admission routes do (webhook/app.py `_admission_route`)."""
    app = FastAPI()
    app.state.replica = _REPLICA

    async def route(request: Request) -> Response:
        replica = await _get_replica_of(request)
        assert replica is _REPLICA
        await request.body()
        return Response(content=ANSWER, media_type="application/json")

    app.router.add_route("/validate", route, methods=["POST"])
    return app


async def _get_replica_of(request: Request) -> _Replica:
    replica: _Replica = request.app.state.replica
    return replica


def _scope(body: bytes) -> Scope:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https",
        "path": "/validate",
        "raw_path": b"/validate",
        "root_path": "",
        "query_string": b"timeout=10s",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8443),
    }


async def _requests(app: ASGIApp, body: bytes, count: int) -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    for _ in range(count):
        delivered = False

        async def receive() -> Message:
            nonlocal delivered
            if delivered:
                return {"type": "http.disconnect"}
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        sent.clear()
        await app(_scope(body), receive, send)
        if sent[0]["status"] != 200 or sent[-1]["body"] != ANSWER:
            raise RuntimeError(f"the app answered {sent[0]['status']}: {sent[-1].get('body', b'')!r}")


def per_request_us(run: Callable[[], None], count: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return best / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    body = review_body()
    count, repeats = args.requests, args.repeats
    loop = asyncio.new_event_loop()
    fastapi = fastapi_app()

    def through(app: ASGIApp) -> Callable[[], None]:
        return lambda: loop.run_until_complete(_requests(app, body, count))

    bare = per_request_us(through(bare_app), count, repeats)
    framework = per_request_us(through(fastapi), count, repeats)
    plain_route = per_request_us(through(starlette_route_app()), count, repeats)
    loop.close()

    def each(parse: Callable[[bytes], object]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(count):
                parse(body)

        return run

    labgate_parse = per_request_us(each(parse_review), count, repeats)
    pydantic_parse = per_request_us(each(_REVIEW.validate_json), count, repeats)
    orjson_parse = per_request_us(each(orjson.loads), count, repeats)
    print(f"AdmissionReview of a Job's 1-GPU pod: {len(body):,} bytes; {count:,} requests, best of {repeats}")
    print("| layer | µs CPU / request |")
    print("| --- | ---: |")
    print(f"| bare ASGI callable (body read, answer sent) | {bare:.1f} |")
    print(f"| FastAPI route shaped as labgate's | {framework:.1f} |")
    print(f"| FastAPI's own share (the difference) | {framework - bare:.1f} |")
    print(f"| a plain Starlette route in the FastAPI app (labgate's admission routes) | {plain_route:.1f} |")
    print(f"| labgate `parse_review` | {labgate_parse:.1f} |")
    print(f"| of which pydantic `validate_json` | {pydantic_parse:.1f} |")
    print(f"| orjson `loads` of the same bytes | {orjson_parse:.1f} |")


if __name__ == "__main__":
    main()
