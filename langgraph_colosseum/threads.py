"""`saver.threads` and `saver.run_guard`: the thread registry, sync and async.

Both savers expose the same operations (`_core/threads.py`); these classes only
choose how to run them: `ColosseumSaver.threads.get(...)` blocks,
`AsyncColosseumSaver.threads.get(...)` is awaited.

Example:
    >>> saver.threads.search(metadata={"desk": "equities"}, status="interrupted")
    >>> with saver.run_guard("t1", on_busy="reject"):
    ...     graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from langgraph_colosseum._core import io
from langgraph_colosseum._core import threads as ops
from langgraph_colosseum._core.guard import RUN_OWNER, RunFence
from langgraph_colosseum._core.threads import AuditEntry, ThreadInfo
from langgraph_colosseum._leases import arenewing, renewing

if TYPE_CHECKING:
    from langgraph_colosseum._base import ColosseumSaverBase

__all__ = ["AsyncThreads", "AuditEntry", "ThreadInfo", "Threads"]

OnBusy = Literal["reject", "wait"]
DEFAULT_LEASE = timedelta(seconds=30)


class Threads:
    """The thread registry of a blocking saver."""

    def __init__(self, saver: ColosseumSaverBase) -> None:
        self._saver = saver

    def _run(self, op: io.Operation[Any]) -> Any:
        return self._saver._run(op)

    @property
    def skipped_rows(self) -> int:
        """How many unreadable registry rows `search` has left out so far (each is
        also logged as a warning on the "langgraph_colosseum" logger)."""
        return self._saver._store.unreadable_rows.count

    def get(self, thread_id: str) -> ThreadInfo | None:
        return self._run(ops.get(thread_id, self._saver._store.codec))

    def count(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        values: Mapping[str, Any] | None = None,
        status: str | None = None,
        prefix: str | None = None,
    ) -> int:
        """How many threads `search` finds with these filters (all pages)."""
        return self._run(
            ops.count(self._saver._store.codec, metadata=metadata, values=values,
                      status=status, prefix=prefix)
        )  # fmt: skip

    def search(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        values: Mapping[str, Any] | None = None,
        status: str | None = None,
        prefix: str | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[ThreadInfo]:
        """Threads by metadata / values containment, status and id prefix, newest
        update first."""
        return self._run(
            ops.search(
                self._saver._store.codec, metadata=metadata, values=values, status=status,
                prefix=prefix, limit=limit, offset=offset,
                unreadable=self._saver._store.unreadable_rows,
            )
        )  # fmt: skip

    def update(self, thread_id: str, *, metadata: Mapping[str, Any]) -> ThreadInfo:
        return self._run(ops.update(thread_id, metadata, self._saver._store.codec))

    def delete(self, thread_id: str) -> None:
        self._saver.delete_thread(thread_id)

    def messages(
        self,
        thread_id: str,
        channel: str = "messages",
        limit: int | None = None,
        *,
        offset: int = 0,
        checkpoint_id: str | None = None,
    ) -> list[AuditEntry]:
        """Who said what: every message that entered (or left) the channel on the
        branch ending at `checkpoint_id` (default: the head), oldest first, with
        its origin (node, `__start__`, `update_state`), step and time."""
        return self._run(
            ops.messages(self._saver._store, thread_id, channel, checkpoint_id=checkpoint_id,
                         limit=limit, offset=offset)
        )  # fmt: skip

    @contextmanager
    def guard(
        self, thread_id: str, *, on_busy: OnBusy = "reject", lease: timedelta = DEFAULT_LEASE
    ) -> Iterator[int]:
        owner = uuid.uuid4().hex
        seconds = lease.total_seconds()
        token = self._run(ops.acquire(thread_id, owner, seconds, wait=on_busy == "wait"))
        context_token = RUN_OWNER.set(RunFence(thread_id, owner, token))
        try:
            with renewing(self._run, partial(ops.renew, thread_id, owner, seconds), seconds):
                yield token
        finally:
            RUN_OWNER.reset(context_token)
            self._run(ops.release(thread_id, owner))


class AsyncThreads:
    """The thread registry of an asyncio saver."""

    def __init__(self, saver: ColosseumSaverBase) -> None:
        self._saver = saver

    async def _run(self, op: io.Operation[Any]) -> Any:
        return await self._saver._arun(op)

    @property
    def skipped_rows(self) -> int:
        """How many unreadable registry rows `search` has left out so far."""
        return self._saver._store.unreadable_rows.count

    async def get(self, thread_id: str) -> ThreadInfo | None:
        return await self._run(ops.get(thread_id, self._saver._store.codec))

    async def count(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        values: Mapping[str, Any] | None = None,
        status: str | None = None,
        prefix: str | None = None,
    ) -> int:
        """How many threads `search` finds with these filters (all pages)."""
        return await self._run(
            ops.count(self._saver._store.codec, metadata=metadata, values=values,
                      status=status, prefix=prefix)
        )  # fmt: skip

    async def search(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        values: Mapping[str, Any] | None = None,
        status: str | None = None,
        prefix: str | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[ThreadInfo]:
        return await self._run(
            ops.search(
                self._saver._store.codec, metadata=metadata, values=values, status=status,
                prefix=prefix, limit=limit, offset=offset,
                unreadable=self._saver._store.unreadable_rows,
            )
        )  # fmt: skip

    async def update(self, thread_id: str, *, metadata: Mapping[str, Any]) -> ThreadInfo:
        return await self._run(ops.update(thread_id, metadata, self._saver._store.codec))

    async def delete(self, thread_id: str) -> None:
        await self._saver.adelete_thread(thread_id)

    async def messages(
        self,
        thread_id: str,
        channel: str = "messages",
        limit: int | None = None,
        *,
        offset: int = 0,
        checkpoint_id: str | None = None,
    ) -> list[AuditEntry]:
        return await self._run(
            ops.messages(self._saver._store, thread_id, channel, checkpoint_id=checkpoint_id,
                         limit=limit, offset=offset)
        )  # fmt: skip

    @asynccontextmanager
    async def guard(
        self, thread_id: str, *, on_busy: OnBusy = "reject", lease: timedelta = DEFAULT_LEASE
    ) -> AsyncIterator[int]:
        owner = uuid.uuid4().hex
        seconds = lease.total_seconds()
        token = await self._run(ops.acquire(thread_id, owner, seconds, wait=on_busy == "wait"))
        context_token = RUN_OWNER.set(RunFence(thread_id, owner, token))
        try:
            async with arenewing(self._run, partial(ops.renew, thread_id, owner, seconds), seconds):
                yield token
        finally:
            RUN_OWNER.reset(context_token)
            await self._run(ops.release(thread_id, owner))
