"""Keeping a lease alive while work runs: one helper for tool calls and run guards.

A lease row (a tool call's claim, a thread's run guard) lapses unless renewed.
These run the renewing operation every third of the lease, in a daemon thread
(blocking drivers) or a task (asyncio), for as long as the `with` block runs.
A missed renewal is not an error: it only shortens the lease.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from langgraph_colosseum._core.io import Operation


@contextmanager
def renewing(
    run: Callable[[Operation[Any]], Any], renew: Callable[[], Operation[Any]], lease_seconds: float
) -> Iterator[None]:
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(lease_seconds / 3):
            try:
                run(renew())
            except Exception:  # a missed renewal only shortens the lease
                pass

    threading.Thread(target=beat, name="colosseum-lease", daemon=True).start()
    try:
        yield
    finally:
        stop.set()


@asynccontextmanager
async def arenewing(
    arun: Callable[[Operation[Any]], Awaitable[Any]],
    renew: Callable[[], Operation[Any]],
    lease_seconds: float,
) -> AsyncIterator[None]:
    async def beat() -> None:
        while True:
            await asyncio.sleep(lease_seconds / 3)
            try:
                await arun(renew())
            except Exception:  # a missed renewal only shortens the lease
                pass

    beater = asyncio.ensure_future(beat())
    try:
        yield
    finally:
        beater.cancel()
