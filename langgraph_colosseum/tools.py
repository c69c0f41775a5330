"""`IdempotentToolNode`: LangGraph's ToolNode whose tools run once per idempotency key.

LangGraph re-runs a whole node when a worker dies before the node's writes are
checkpointed, and when a thread is resumed twice. For `send_payment` that means
a second payment. This node records every tool call in a ledger table with a
UNIQUE idempotency key (see `_core/ledger.py` for the protocol), so a re-run
returns the recorded result instead of calling the tool again.

Example:
    >>> from langgraph_colosseum import IdempotentToolNode, current_idempotency_key
    >>> @tool
    ... def send_payment(to: str, amount: int) -> str:
    ...     # forward the key to an API that deduplicates on it
    ...     return bank.pay(to, amount, idempotency_key=current_idempotency_key())
    >>> tools = IdempotentToolNode([send_payment, lookup], ledger=saver,
    ...                            on_unknown="raise", lease=timedelta(seconds=30))
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import timedelta
from functools import partial
from typing import Any, NamedTuple

import psycopg
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest

from langgraph_colosseum._base import ColosseumSaverBase
from langgraph_colosseum._core import io
from langgraph_colosseum._core.io import Overran, Request, RunTool
from langgraph_colosseum._core.ledger import (
    CallSite,
    OnFailed,
    OnUnknown,
    ToolCallIdentity,
    ToolCallPlan,
    ToolPolicy,
    default_key,
    execute_once,
    heartbeat,
    is_claim,
    lineage_of,
)
from langgraph_colosseum._core.runs import RunWrites
from langgraph_colosseum._core.store import _run_id_of, seen_of
from langgraph_colosseum._leases import arenewing, renewing
from langgraph_colosseum.errors import (
    CheckpointDeletedError,
    ColosseumError,
    CorruptRowError,
    LedgerMissingError,
    ToolFailedError,
    ToolOutcomeUnknownError,
    ToolWaitTimeoutError,
)

__all__ = ["IdempotentToolNode", "ToolCallIdentity", "ToolPolicy", "current_idempotency_key"]

_CURRENT_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "colosseum_idempotency_key", default=None
)


def current_idempotency_key() -> str | None:
    """The idempotency key of the tool call running now (None outside one).

    Forward it to an external API that deduplicates requests, so even the
    at-least-once path (`on_unknown="retry"`) stays exactly-once there.
    """
    return _CURRENT_KEY.get()


class IdempotentToolNode(ToolNode):
    """A drop-in `ToolNode` that runs each tool call once per idempotency key.

    Args:
        tools: as for ToolNode.
        ledger: the Colosseum saver that keeps the ledger; by default the
            graph's checkpointer, which must then be a Colosseum saver.
        on_unknown: when a worker died mid-call: "raise" (ToolOutcomeUnknownError)
            or "retry" (run again: at-least-once). A dict maps tool names to a policy.
        on_failed: when an earlier attempt raised: "raise" or "retry"; per tool too.
        lease: how long a claim lives without a heartbeat.
        wait: how long to wait for another worker holding the same call.
        timeouts: per-tool timeouts; a tool that exceeds its timeout is TIMED_OUT.
        key: derives the idempotency key from a ToolCallIdentity (default:
            `default_key`; `key_without_call_id` also dedups LLM re-issues).
        **kwargs: everything else ToolNode takes.
    """

    def __init__(
        self,
        tools: Sequence[BaseTool | Callable],
        *,
        ledger: ColosseumSaverBase | None = None,
        on_unknown: OnUnknown | Mapping[str, OnUnknown] = "raise",
        on_failed: OnFailed | Mapping[str, OnFailed] = "raise",
        lease: timedelta = timedelta(seconds=30),
        wait: timedelta = timedelta(seconds=60),
        timeouts: Mapping[str, timedelta] | None = None,
        key: Callable[[ToolCallIdentity], str] = default_key,
        **kwargs: Any,
    ) -> None:
        if "wrap_tool_call" in kwargs or "awrap_tool_call" in kwargs:
            raise TypeError(
                "IdempotentToolNode wraps tool calls itself; wrap_tool_call is not supported"
            )
        super().__init__(
            tools, wrap_tool_call=self._wrap_sync, awrap_tool_call=self._wrap_async, **kwargs
        )
        self._ledger = ledger
        self._on_unknown = on_unknown
        self._on_failed = on_failed
        self._lease = lease
        self._wait = wait
        self._timeouts = dict(timeouts or {})
        self._key = key

    # -------------------------------------------------------------- planning

    def _policy(self, tool_name: str) -> ToolPolicy:
        def pick(setting: Any) -> Any:
            return setting.get(tool_name, "raise") if isinstance(setting, Mapping) else setting

        timeout = self._timeouts.get(tool_name)
        return ToolPolicy(
            on_unknown=pick(self._on_unknown),
            on_failed=pick(self._on_failed),
            lease_seconds=self._lease.total_seconds(),
            wait_seconds=self._wait.total_seconds(),
            timeout=timeout.total_seconds() if timeout is not None else None,
        )

    def _ledger_of(self, request: ToolCallRequest) -> tuple[ColosseumSaverBase, str]:
        config = request.runtime.config or {}
        configurable = config.get("configurable", {})
        ledger = self._ledger or configurable.get("__pregel_checkpointer")
        if not isinstance(ledger, ColosseumSaverBase):
            raise LedgerMissingError(
                "IdempotentToolNode needs a Colosseum saver for its ledger: pass "
                "ledger=ColosseumSaver(...) or compile the graph with one as checkpointer "
                f"(found {type(ledger).__name__})"
            )
        thread_id = configurable.get("thread_id")
        if thread_id is None:
            raise LedgerMissingError("IdempotentToolNode runs need configurable.thread_id")
        return ledger, str(thread_id)

    def _plan(
        self,
        request: ToolCallRequest,
        ledger: ColosseumSaverBase,
        thread_id: str,
        lineage: str | None,
    ) -> ToolCallPlan:
        config = request.runtime.config or {}
        configurable = config.get("configurable", {})
        call = request.tool_call
        identity = ToolCallIdentity(
            thread_id=thread_id,
            checkpoint_ns=_stable_namespace(configurable.get("checkpoint_ns", "")),
            tool_name=call["name"],
            args=call.get("args", {}),
            tool_call_id=call.get("id"),
            lineage=lineage,
        )
        plan = ToolCallPlan(
            identity=identity,
            key=self._key(identity),
            task_id=configurable.get("__pregel_task_id"),
            policy=self._policy(call["name"]),
            site=_call_site(ledger, config, thread_id),
        )
        return plan

    # -------------------------------------------------------------- drivers

    # ToolNode turns exceptions from a wrapper into error ToolMessages for the
    # LLM when handle_tool_errors allows. The ledger's own errors (no ledger,
    # outcome unknown, another worker holding the call, an earlier failure that
    # propagated) are for the graph and its operators, not the model: the
    # wrappers hand them back as `_LedgerError`, and these re-raise them.

    def _run_one(self, *args: Any, **kwargs: Any) -> Any:
        return _raise_ledger_error(super()._run_one(*args, **kwargs))

    async def _arun_one(self, *args: Any, **kwargs: Any) -> Any:
        return _raise_ledger_error(await super()._arun_one(*args, **kwargs))

    def _wrap_sync(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> Any:
        try:
            ledger, thread_id = self._ledger_of(request)
        except _FOR_THE_GRAPH as exc:
            return _LedgerError(exc)
        plan = self._plan(request, ledger, thread_id, ledger._run(lineage_of(thread_id)))
        run = _run_of(ledger, request)

        def perform(req: Request) -> Any:
            if isinstance(req, RunTool):
                return _run_tool_sync(ledger, req, lambda: execute(request))
            claim = is_claim(req)
            if claim:
                _claim_begins(run, plan)
            try:
                return ledger._run(io.single(req))
            except psycopg.errors.UniqueViolation:
                return _lost_claim(req)
            finally:
                if claim:
                    _claim_ends(run)

        try:
            return io.run(execute_once(plan, ledger._store.codec), perform)
        except _FOR_THE_GRAPH as exc:
            return _LedgerError(exc)

    async def _wrap_async(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Any]
    ) -> Any:
        try:
            ledger, thread_id = self._ledger_of(request)
        except _FOR_THE_GRAPH as exc:
            return _LedgerError(exc)
        lineage = await ledger._arun(lineage_of(thread_id))
        plan = self._plan(request, ledger, thread_id, lineage)
        run = _run_of(ledger, request)

        async def perform(req: Request) -> Any:
            if isinstance(req, RunTool):
                return await _run_tool_async(ledger, req, lambda: execute(request))
            claim = is_claim(req)
            if claim:
                _claim_begins(run, plan)
            try:
                return await ledger._arun(io.single(req))
            except psycopg.errors.UniqueViolation:
                return _lost_claim(req)
            finally:
                if claim:
                    _claim_ends(run)

        try:
            return await io.arun(execute_once(plan, ledger._store.codec), perform)
        except _FOR_THE_GRAPH as exc:
            return _LedgerError(exc)


# Ledger errors that bypass handle_tool_errors. A tool that overran its timeout
# (ToolTimeoutError) is a tool failure like any other, and is not among them. A
# ledger row that cannot be read (altered, or sealed with a key not configured)
# is refused to the caller, not handed to the model as a tool's error.
_FOR_THE_GRAPH = (
    CheckpointDeletedError,
    CorruptRowError,
    LedgerMissingError,
    ToolOutcomeUnknownError,
    ToolWaitTimeoutError,
    ToolFailedError,
)


class _LedgerError(NamedTuple):
    error: ColosseumError


def _raise_ledger_error(result: Any) -> Any:
    if isinstance(result, _LedgerError):
        raise result.error
    return result


def _lost_claim(request: Request) -> list:
    """The answer to a UniqueViolation: a claim that lost a race finds no row.

    The key is unique twice over (the primary key starts with thread_id, as
    every table's does, and idempotency_key is UNIQUE on its own), and ON
    CONFLICT guards only one index, so a concurrent claim can trip the other.
    The claim was lost either way; answering "no row" makes the protocol look
    again and find the winner's row. Any other statement's violation is raised.
    """
    if not is_claim(request):
        raise  # the UniqueViolation our caller is handling
    return [None, []]  # the write lock's result, the claim's rows


# A claim is a write of its run, as its puts are (see _core/runs.py): it is
# not sent once the run was refused as deleted, and it counts as in flight.
# It carries the deletion stamp its run's first read saw (ledger.CLAIM), so no
# claim is recorded once its thread was deleted since; one recorded before the
# deletion is deleted with the thread's rows (or handed to a surviving thread
# of its lineage, see sql.REHOME_TOOL_CALLS), so none outlives its thread. A
# claim records its run and its call site (CallSite): delete_for_runs deletes
# it with the run, unless a checkpoint that stays holds the call
# (sql.DELETE_RUNS_TOOL_CALLS).


def _run_of(ledger: ColosseumSaverBase, request: ToolCallRequest) -> RunWrites | None:
    return ledger._store.runs.of(request.runtime.config or {})  # type: ignore[arg-type]


def _claim_begins(run: RunWrites | None, plan: ToolCallPlan) -> None:
    if run is not None and not run.begin():
        site = plan.site
        raise CheckpointDeletedError(
            thread_id=plan.identity.thread_id,
            checkpoint_ns=site.checkpoint_ns,
            checkpoint_id=site.checkpoint_id or "",
            deleted_id=None,
            operation=f"the claim of tool call {plan.identity.tool_name!r} "
            f"({plan.identity.tool_call_id})",
        )


def _claim_ends(run: RunWrites | None) -> None:
    if run is not None:
        run.end()


def _call_site(ledger: ColosseumSaverBase, config: Mapping[str, Any], thread_id: str) -> CallSite:
    """The checkpoint the tools task writes to, and what it descends from (see
    ledger.CLAIM): LangGraph names the checkpoint of each enclosing namespace in
    `checkpoint_map`; the task's own is its parent namespace's."""
    configurable = config.get("configurable") or {}
    task_ns = str(configurable.get("checkpoint_ns") or "")
    parent_ns = task_ns.rsplit("|", 1)[0] if "|" in task_ns else ""
    checkpoint_map = configurable.get("checkpoint_map")
    if not isinstance(checkpoint_map, Mapping):
        checkpoint_map = {}
    lineage = {(str(ns), str(cid)) for ns, cid in checkpoint_map.items() if cid is not None}
    # The checkpoints this run stored on the thread: a thread deleted after
    # them is deleted for this run's later steps too, whose puts (sent in the
    # background) may not have been refused yet when the tools run.
    run = ledger._store.runs.of(config)  # type: ignore[arg-type]
    if run is not None:
        lineage.update((ns, cid) for tid, ns, cid in run.stored_checkpoints() if tid == thread_id)
    checkpoint_id = checkpoint_map.get(parent_ns)
    checkpoint_id = None if checkpoint_id is None else str(checkpoint_id)
    return CallSite(
        checkpoint_ns=parent_ns,
        checkpoint_id=checkpoint_id,
        lineage=tuple(sorted(lineage)),
        run_id=_run_id_of(config),  # type: ignore[arg-type]
        # A run with durability="exit" stored nothing a deletion could record:
        # the deletion stamp its first read saw is what refuses the claim.
        seen=seen_of(run, thread_id),
    )


def _stable_namespace(checkpoint_ns: str) -> str:
    """The namespace without task ids ("outer:1a2b|tools:3c4d" -> "outer|tools")."""
    return (
        "|".join(part.split(":", 1)[0] for part in checkpoint_ns.split("|"))
        if checkpoint_ns
        else ""
    )


def _run_tool_sync(
    ledger: ColosseumSaverBase, req: RunTool, call: Callable[[], Any]
) -> tuple[bool, Any]:
    renew = partial(heartbeat, req.key, req.owner, req.lease_seconds)
    token = _CURRENT_KEY.set(req.key)
    try:
        with renewing(ledger._run, renew, req.lease_seconds):
            return True, _call_with_timeout(call, req.timeout)
    except Exception as exc:
        return False, exc
    finally:
        _CURRENT_KEY.reset(token)


def _call_with_timeout(call: Callable[[], Any], timeout: float | None) -> Any:
    if timeout is None:
        return call()
    # A blocking tool cannot be interrupted: run it aside and stop waiting.
    context = contextvars.copy_context()
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(context.run, call)
    pool.shutdown(wait=False)
    done, _ = wait([future], timeout=timeout)
    if not done:
        raise Overran(f"still running after {timeout}s")
    return future.result()


async def _run_tool_async(
    ledger: ColosseumSaverBase, req: RunTool, call: Callable[[], Any]
) -> tuple[bool, Any]:
    renew = partial(heartbeat, req.key, req.owner, req.lease_seconds)
    token = _CURRENT_KEY.set(req.key)
    try:
        async with arenewing(ledger._arun, renew, req.lease_seconds):
            task = asyncio.ensure_future(call())
            try:
                done, _ = await asyncio.wait([task], timeout=req.timeout)
            finally:
                if not task.done():  # overran, or this run was cancelled
                    task.cancel()
            if not done:
                return False, Overran(f"still running after {req.timeout}s")
            return True, task.result()
    except Exception as exc:
        return False, exc
    finally:
        _CURRENT_KEY.reset(token)
