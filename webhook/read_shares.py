"""Reads through to the Kubernetes API, shared fairly between tenants.

What a request reads through (DRA claims, the PersistentVolumes of claim templates) runs in the
replica's shared thread pool. Without a share, one tenant's burst of requests, each reading its
bounded number of objects, fills every thread and queues in front of another tenant's one read
(issue 19, finding 8). Each tenant reads at most READS_PER_TENANT objects at once; its other reads
wait their turn here, not in the pool, so every other tenant's reads find threads free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

Result = TypeVar("Result")

# A quarter of the pool a replica gives blocking calls (READ_THREADS, webhook/replica.py).
READS_PER_TENANT = 8


class Read(Protocol):
    """Run one blocking read in the shared pool, within the request's tenant's share."""

    def __call__(self, read: Callable[..., Result], /, *args: Any) -> Awaitable[Result]: ...


class ReadShares:
    """One semaphore per tenant over the reads it has in the shared thread pool."""

    def __init__(self, per_tenant: int = READS_PER_TENANT):
        self.per_tenant = per_tenant
        self._shares: dict[str, asyncio.Semaphore] = {}

    async def read(self, tenant: str, read: Callable[..., Result], /, *args: Any) -> Result:
        """`read(*args)` in the shared pool, once `tenant` has fewer than its share running."""
        share = self._shares.get(tenant)
        if share is None:
            share = self._shares[tenant] = asyncio.Semaphore(self.per_tenant)
        async with share:
            return await asyncio.to_thread(read, *args)

    def of(self, tenant: str) -> Read:
        """The read function of `tenant`'s requests."""

        def read(fn: Callable[..., Result], /, *args: Any) -> Awaitable[Result]:
            return self.read(tenant, fn, *args)

        return read


async def unshared(read: Callable[..., Result], /, *args: Any) -> Result:
    """A read without a share (callers that serve one tenant, tests)."""
    return await asyncio.to_thread(read, *args)
