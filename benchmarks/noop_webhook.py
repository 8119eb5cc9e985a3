"""A webhook that admits everything at once: the floor for FastAPI + uvicorn + TLS on this machine.

python -m benchmarks.noop_webhook PORT CERT KEY
"""

from __future__ import annotations

import sys

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

app = FastAPI()


@app.post("/validate")
async def validate(request: Request) -> JSONResponse:
    review = await request.json()
    uid = review["request"]["uid"]
    return JSONResponse(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True},
        }
    )


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


if __name__ == "__main__":
    port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        ssl_certfile=cert,
        ssl_keyfile=key,
        log_level="warning",
        access_log=False,
    )
