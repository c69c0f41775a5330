"""`saver.runs`: runs on a thread with a multitask strategy (double texting).

`saver.runs(graph)` wraps a compiled graph whose checkpointer is the saver;
each `invoke` / `ainvoke` / `stream` / `astream` is a recorded run that takes
the thread as its `multitask_strategy` says (see _core/multitask.py):

    >>> runs = saver.runs(graph, multitask_strategy="enqueue")
    >>> runs.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "t1"}})
    >>> runs.invoke(more, config, multitask_strategy="interrupt")  # per call
    >>> saver.runs.list("t1", status="interrupted")

The blocking methods and their `a`-prefixed awaitables work on both savers.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig

from langgraph_colosseum._core import multitask as ops
from langgraph_colosseum._core import threads as thread_ops
from langgraph_colosseum._core.guard import RUN_OWNER, RunFence
from langgraph_colosseum._core.multitask import MultitaskStrategy, RunInfo
from langgraph_colosseum._leases import arenewing, renewing
from langgraph_colosseum.errors import ColosseumError, InvalidConfigError, RunNotFoundError

if TYPE_CHECKING:
    from langgraph_colosseum._base import ColosseumSaverBase

__all__ = ["GraphRuns", "MultitaskStrategy", "RunInfo", "Runs"]

DEFAULT_LEASE = timedelta(seconds=30)
DEFAULT_QUEUE_TIMEOUT = timedelta(minutes=10)


def holder() -> str:
    """This process, as a run record names it."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Runs:
    """`saver.runs`: make graph runners, and read, cancel or wait for runs."""

    def __init__(self, saver: ColosseumSaverBase) -> None:
        self._saver = saver

    def __call__(
        self,
        graph: Any,
        multitask_strategy: MultitaskStrategy = "enqueue",
        *,
        lease: timedelta = DEFAULT_LEASE,
        queue_timeout: timedelta | None = DEFAULT_QUEUE_TIMEOUT,
    ) -> GraphRuns:
        """Runs of `graph` on their threads; `multitask_strategy` is the default
        for every call (LangGraph Platform's default, "enqueue", unless given)."""
        return GraphRuns(self._saver, graph, multitask_strategy, lease, queue_timeout)

    def get(self, run_id: str) -> RunInfo | None:
        """The run's record, None for an unknown run. A run whose lease lapsed
        (its process died, or is paused past it) reads as `error`.

        Example:
            >>> saver.runs.get(run_id).status
            'success'
        """
        return self._saver._run(ops.get(str(run_id)))

    async def aget(self, run_id: str) -> RunInfo | None:
        return await self._saver._arun(ops.get(str(run_id)))

    def list(self, thread_id: str, *, status: str | None = None, limit: int = 100) -> list[RunInfo]:
        """The thread's runs in arrival order, optionally only those with `status`."""
        return self._saver._run(ops.list_runs(thread_id, status, limit))

    async def alist(
        self, thread_id: str, *, status: str | None = None, limit: int = 100
    ) -> list[RunInfo]:
        return await self._saver._arun(ops.list_runs(thread_id, status, limit))

    def cancel(self, run_id: str | None = None, *, thread_id: str | None = None) -> list[str]:
        """Stop one run, or every pending and running run of `thread_id`; the ids stopped.

        Example:
            >>> saver.runs.cancel(thread_id="t1")
        """
        thread, run = self._target(run_id, thread_id, self.get)
        return self._saver._run(ops.cancel(thread, run))

    async def acancel(
        self, run_id: str | None = None, *, thread_id: str | None = None
    ) -> list[str]:
        if run_id is not None and thread_id is None:
            info = await self.aget(run_id)
            if info is None:
                raise RunNotFoundError(run_id)
            thread_id = info.thread_id
        thread, run = self._target(run_id, thread_id, None)
        return await self._saver._arun(ops.cancel(thread, run))

    def join(self, run_id: str, *, timeout: float | None = None) -> RunInfo:
        """Wait for the run to end; its final record (a RunInfo: status, error,
        times), not its state: `saver.runs(graph).join(run_id)` returns that.
        TimeoutError after `timeout` seconds.

        Example:
            >>> saver.runs.join(run_id, timeout=60).status
            'success'
        """
        return self._saver._run(ops.join(str(run_id), timeout))

    async def ajoin(self, run_id: str, *, timeout: float | None = None) -> RunInfo:
        return await self._saver._arun(ops.join(str(run_id), timeout))

    @staticmethod
    def _target(run_id: str | None, thread_id: str | None, lookup: Any) -> tuple[str, str | None]:
        if run_id is None and thread_id is None:
            raise InvalidConfigError("cancel needs a run_id or thread_id=")
        if thread_id is None:
            info = lookup(run_id)
            if info is None:
                raise RunNotFoundError(str(run_id))
            thread_id = info.thread_id
        assert thread_id is not None
        return thread_id, None if run_id is None else str(run_id)


class GraphRuns:
    """A compiled graph whose every call is a recorded run with a multitask strategy."""

    def __init__(
        self,
        saver: ColosseumSaverBase,
        graph: Any,
        strategy: MultitaskStrategy,
        lease: timedelta,
        queue_timeout: timedelta | None,
    ) -> None:
        if getattr(graph, "checkpointer", None) in (None, False, True):
            raise InvalidConfigError(
                "saver.runs(graph) needs a graph compiled with this saver as its "
                "checkpointer: builder.compile(checkpointer=saver)"
            )
        self.saver = saver
        self.graph = graph
        self.multitask_strategy = ops.checked_strategy(strategy)
        self._lease = lease.total_seconds()
        self._queue_timeout = None if queue_timeout is None else queue_timeout.total_seconds()

    # The run's life: start under the strategy, write under its fence, end.

    def _begin(
        self, config: RunnableConfig | None, strategy: str | None
    ) -> tuple[RunnableConfig, str, str, Any]:
        config = dict(config or {})
        thread_id = (config.get("configurable") or {}).get("thread_id")
        if thread_id is None:
            raise InvalidConfigError(
                'a run needs a thread: pass {"configurable": {"thread_id": ...}}'
            )
        run_id = config.get("run_id") or uuid.uuid4()
        config["run_id"] = run_id
        # In `configurable`, LangGraph copies it into each checkpoint's metadata
        # (the run_id column, which rollback's delete_for_runs finds them by).
        # LangGraph also copies it into the config's metadata, so the thread's
        # registry metadata shows the last run's run_id (a rollback puts the
        # one before back, like any key the stopped run set).
        config["configurable"] = {**config["configurable"], "run_id": str(run_id)}
        start = ops.start(
            self.saver._store, str(thread_id), str(run_id),
            ops.checked_strategy(strategy or self.multitask_strategy), holder(),
            self._lease, self._queue_timeout,
        )  # fmt: skip
        return config, str(thread_id), str(run_id), start

    def _queued(self, strategy: str | None, exc: BaseException) -> bool:
        """Did a queued run stop waiting for a reason of its caller's (cancelled,
        interrupted, a broken connection)? Our own errors already recorded why."""
        return (strategy or self.multitask_strategy) == "enqueue" and not isinstance(
            exc, ColosseumError
        )

    def _end(self, thread_id: str, run_id: str, token: int, exc: BaseException | None) -> Any:
        status = "success" if exc is None else "error"
        error = None if exc is None else f"{type(exc).__name__}: {exc}"[:2000]
        if exc is not None and self.saver.encryption is not None:
            # A message may quote the state, and this column is plaintext; a
            # node's error itself is kept sealed (its __error__ pending write).
            error = f"{type(exc).__name__} (its message is not stored: encryption= is on)"
        return ops.finish(thread_id, run_id, token, status, error)

    @contextmanager
    def _running(
        self, config: RunnableConfig | None, strategy: str | None
    ) -> Iterator[RunnableConfig]:
        config, thread_id, run_id, start = self._begin(config, strategy)
        try:
            token = self.saver._run(start)
        except BaseException as exc:
            if self._queued(strategy, exc):
                self.saver._run(ops.leave_queue(thread_id, run_id, _left(exc)))
            raise
        fence = RUN_OWNER.set(RunFence(thread_id, run_id, token))
        renew = partial(thread_ops.renew, thread_id, run_id, self._lease)
        failure: BaseException | None = None
        try:
            with renewing(self.saver._run, renew, self._lease):
                yield config
        except BaseException as exc:
            failure = exc
        finally:
            RUN_OWNER.reset(fence)
        ended, status, by = self.saver._run(self._end(thread_id, run_id, token, failure))
        _outcome(thread_id, run_id, failure, ended, status, by)

    @asynccontextmanager
    async def _arunning(
        self, config: RunnableConfig | None, strategy: str | None
    ) -> AsyncIterator[RunnableConfig]:
        config, thread_id, run_id, start = self._begin(config, strategy)
        try:
            token = await self.saver._arun(start)
        except BaseException as exc:
            if self._queued(strategy, exc):
                leave = ops.leave_queue(thread_id, run_id, _left(exc))
                await asyncio.shield(self.saver._arun(leave))
            raise
        fence = RUN_OWNER.set(RunFence(thread_id, run_id, token))
        renew = partial(thread_ops.renew, thread_id, run_id, self._lease)
        failure: BaseException | None = None
        try:
            async with arenewing(self.saver._arun, renew, self._lease):
                yield config
        except BaseException as exc:
            failure = exc
        finally:
            RUN_OWNER.reset(fence)
        ended, status, by = await self.saver._arun(self._end(thread_id, run_id, token, failure))
        _outcome(thread_id, run_id, failure, ended, status, by)

    # The graph's four ways to run.

    def invoke(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        multitask_strategy: MultitaskStrategy | None = None,
        **kwargs: Any,
    ) -> Any:
        """`graph.invoke` as a run on the config's thread.

        Raises ThreadBusyError (reject), RunQueueTimeoutError (enqueue),
        RunInterruptedError / RunRolledBackError (another run stopped this one).
        """
        with self._running(config, multitask_strategy) as run_config:
            return self.graph.invoke(input, run_config, **kwargs)

    async def ainvoke(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        multitask_strategy: MultitaskStrategy | None = None,
        **kwargs: Any,
    ) -> Any:
        async with self._arunning(config, multitask_strategy) as run_config:
            return await self.graph.ainvoke(input, run_config, **kwargs)

    def stream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        multitask_strategy: MultitaskStrategy | None = None,
        **kwargs: Any,
    ) -> Iterator[Any]:
        """`graph.stream` as a run; a caller that stops reading ends it as an error."""
        with self._running(config, multitask_strategy) as run_config:
            yield from self.graph.stream(input, run_config, **kwargs)

    async def astream(
        self,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        multitask_strategy: MultitaskStrategy | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        async with self._arunning(config, multitask_strategy) as run_config:
            async for chunk in self.graph.astream(input, run_config, **kwargs):
                yield chunk

    def join(self, run_id: str, *, timeout: float | None = None) -> Any:
        """Wait for the run to end; the graph state at its last stored checkpoint
        (a StateSnapshot), or None when it stored none (rolled back, rejected
        from the queue). Its record: `saver.runs.get(run_id)`.

        Example:
            >>> state = runs.join(run_id, timeout=60)
            >>> state.values["messages"][-1]
        """
        info = self.saver.runs.join(run_id, timeout=timeout)
        config, last = self._last_checkpoint(info.thread_id, str(run_id))
        found = next(iter(self.saver.list(config, **last)), None)
        return None if found is None else self.graph.get_state(found.config)

    async def ajoin(self, run_id: str, *, timeout: float | None = None) -> Any:
        info = await self.saver.runs.ajoin(run_id, timeout=timeout)
        config, last = self._last_checkpoint(info.thread_id, str(run_id))
        found = [t async for t in self.saver.alist(config, **last)]
        return None if not found else await self.graph.aget_state(found[0].config)

    @staticmethod
    def _last_checkpoint(thread_id: str, run_id: str) -> tuple[Any, dict[str, Any]]:
        """list() arguments for the run's newest root checkpoint."""
        config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        return config, {"filter": {"run_id": run_id}, "limit": 1}

    def get_state(self, config: RunnableConfig) -> Any:
        return self.graph.get_state(config)

    async def aget_state(self, config: RunnableConfig) -> Any:
        return await self.graph.aget_state(config)


def _left(exc: BaseException) -> str:
    return f"it never ran: its caller stopped waiting ({type(exc).__name__})"[:2000]


def _outcome(
    thread_id: str,
    run_id: str,
    failure: BaseException | None,
    ended: bool,
    status: str | None,
    by: str | None,
) -> None:
    """Raise what the run's caller must see once it has ended (or was stopped)."""
    if not ended:
        # Stopped by another run or by cancel: never a success, whatever it returned.
        raise ops.stopped_error(thread_id, run_id, status, by) from failure
    if failure is not None:
        raise failure
