"""How `labgate serve` runs its servers in one process: the admission server (TLS) and the probe
server, on one event loop, uvloop's.

The loop is chosen for memory. The standard library's TLS protocol gives every connection a
256 KiB read buffer (`asyncio.sslproto.SSLProtocol.max_size`) that the allocator keeps after the
connection closes: 1,000 TLS connections held open cost 284 MB, and closing them gave none of it
back. uvloop's costs 31 MB for the same 1,000 (measured on loopback, docs/benchmarks.md "Memory
under an open-loop flood"). The apiserver opens a connection per concurrent call to a webhook
replica (HTTP/1.1: docs/benchmarks.md "HTTP/2"), so a burst is many connections.
"""

from __future__ import annotations

import asyncio

import uvicorn

# The loop `labgate serve` runs on (uvicorn's name for it); tests/unit/admission/test_serve_memory.py
# holds a served replica's memory per connection to it.
EVENT_LOOP = "uvloop"


def run_servers(servers: list[uvicorn.Server]) -> None:
    """Serve until a signal stops them: the first server (the admission port) starts first and is
    stopped first; uvicorn hands the signal on, and the others (the probes) stop after it."""

    async def run() -> None:
        tasks = [asyncio.create_task(servers[0].serve())]
        while not servers[0].started and not tasks[0].done():
            await asyncio.sleep(0.05)
        tasks += [asyncio.create_task(server.serve()) for server in servers[1:]]
        await tasks[0]
        for server in servers[1:]:
            server.should_exit = True
        await asyncio.gather(*tasks[1:])

    with asyncio.Runner(loop_factory=servers[0].config.get_loop_factory()) as runner:
        runner.run(run())
