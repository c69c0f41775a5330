"""A statement that committed, and whose reply never arrived, is sent again.

After a connection breaks (a Postgres restart, a dropped socket), a saver on a
pool sends the request again on a fresh connection (`_driver.py`). The break
may come after Postgres committed the statement and before its reply reached
the client: the retry then meets its own earlier success, and must recognise
it rather than take it for another worker's (the README, Operations).

The break is real: right after the statement returned, its backend is
terminated from another connection (`pg_terminate_backend`, waiting until it
is gone) and the next use of the connection fails as a lost reply does. The
caller never sees the first result.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, IdempotentToolNode, _driver
from langgraph_colosseum._core.io import Query
from tests.conftest import truncate
from tests.integration.test_drivers import counter_graph, thread
from tests.integration.test_runs import echo_graph


def _sql(request: Any) -> str:
    if isinstance(request, Query):
        return request.sql
    return "\n".join(q.sql for q in getattr(request, "queries", ()))


def _kill(pg_url: str, pid: int) -> None:
    with psycopg.connect(pg_url, autocommit=True) as killer:
        assert killer.execute("SELECT pg_terminate_backend(%s, 10000)", [pid]).fetchone()[0]


@contextmanager
def reply_lost(pg_url: str, fragment: str) -> Iterator[list[int]]:
    """The first request whose SQL holds `fragment` commits, then its connection
    dies before the caller reads the reply. Yields the list of killed backends."""
    sync_perform, async_perform = _driver._perform, _driver._aperform
    killed: list[int] = []

    def perform(conn: psycopg.Connection, request: Any) -> Any:
        result = sync_perform(conn, request)
        if not killed and fragment in _sql(request):
            killed.append(conn.info.backend_pid)
            _kill(pg_url, killed[0])
            conn.execute("SELECT 1")  # the dead connection: OperationalError
            raise AssertionError("the terminated connection answered")
        return result

    async def aperform(conn: psycopg.AsyncConnection, request: Any) -> Any:
        result = await async_perform(conn, request)
        if not killed and fragment in _sql(request):
            killed.append(conn.info.backend_pid)
            _kill(pg_url, killed[0])
            await conn.execute("SELECT 1")
            raise AssertionError("the terminated connection answered")
        return result

    # The asyncio saver's hot requests share round trips (_coalesce.py): the
    # batch that carries the request loses its connection, so all of it is retried.
    async_batch = _driver.alean_batch

    async def alean_batch(conn: psycopg.AsyncConnection, batch: list) -> Any:
        outcomes = await async_batch(conn, batch)
        if not killed and any(fragment in _sql(request) for request, _ in batch):
            killed.append(conn.info.backend_pid)
            _kill(pg_url, killed[0])
            await conn.execute("SELECT 1")
            raise AssertionError("the terminated connection answered")
        return outcomes

    _driver._perform, _driver._aperform = perform, aperform
    _driver.alean_batch = alean_batch
    try:
        yield killed
    finally:
        _driver._perform, _driver._aperform = sync_perform, async_perform
        _driver.alean_batch = async_batch


def rows(pg_url: str, sql: str, *params: Any) -> list[tuple]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


# ----------------------------------------------------------------- tool CLAIM


class Messages(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def payment_graph(saver: Any, calls: list[int]) -> Any:
    @tool
    def pay(to: str, amount: int) -> str:
        """Pay someone."""
        calls.append(amount)
        return f"paid {amount} to {to}"

    def agent(state: Messages) -> dict:
        call = {"name": "pay", "args": {"to": "bob", "amount": 5}, "id": "call-1"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    builder = StateGraph(Messages)
    builder.add_node("agent", agent)
    # A short lease: the fault this test keeps out waited for its own lease to lapse.
    builder.add_node("tools", IdempotentToolNode([pay], lease=timedelta(seconds=2)))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=saver)


def test_a_claim_whose_reply_was_lost_runs_the_tool_once(pg_url: str) -> None:
    truncate(pg_url)
    calls: list[int] = []
    tid = f"claim-{uuid.uuid4().hex[:8]}"
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        graph = payment_graph(saver, calls)
        with reply_lost(pg_url, "INSERT INTO colosseum_tool_calls") as killed:
            out = graph.invoke({"messages": []}, {"configurable": {"thread_id": tid}})
    assert killed, "the claim's connection was not broken"
    assert calls == [5]
    answer = out["messages"][-1]
    assert isinstance(answer, ToolMessage) and answer.content == "paid 5 to bob"
    assert rows(
        pg_url, "SELECT status, attempts FROM colosseum_tool_calls WHERE thread_id = %s", tid
    ) == [("SUCCESS", 1)]


# ----------------------------------------------------------- run_guard ACQUIRE


def test_a_guard_whose_acquire_reply_was_lost_holds_the_thread(pg_url: str) -> None:
    truncate(pg_url)
    tid = f"guard-{uuid.uuid4().hex[:8]}"
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        graph = echo_graph(saver)
        with reply_lost(pg_url, "-- OWN_ACQUIRE") as killed:
            with saver.run_guard(tid, on_busy="reject") as token:
                assert saver.threads.get(tid).status == "busy"
                graph.invoke({"messages": ["hi"]}, {"configurable": {"thread_id": tid}})
        assert killed, "the acquire's connection was not broken"
        assert token == 1  # the retry did not count as a second acquire
        assert saver.threads.get(tid).status == "idle"
        with saver.run_guard(tid, on_busy="reject"):  # let go: free for the next
            pass


async def test_an_async_guard_whose_acquire_reply_was_lost_holds_the_thread(
    pg_url: str,
) -> None:
    truncate(pg_url)
    tid = f"aguard-{uuid.uuid4().hex[:8]}"
    async with AsyncColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        with reply_lost(pg_url, "-- OWN_ACQUIRE") as killed:
            async with saver.run_guard(tid, on_busy="reject") as token:
                assert (await saver.threads.get(tid)).status == "busy"
        assert killed, "the acquire's connection was not broken"
        assert token == 1
        assert (await saver.threads.get(tid)).status == "idle"


# ------------------------------------------------------- runs: TAKE and FINISH


TAKE = "taken AS ("
ENQUEUE = "'enqueue', 'pending'"


@pytest.mark.parametrize(
    ("strategy", "lost"),
    [("reject", TAKE), ("enqueue", TAKE), ("enqueue", ENQUEUE), ("interrupt", TAKE)],
)
def test_a_run_whose_take_reply_was_lost_runs(pg_url: str, strategy: str, lost: str) -> None:
    truncate(pg_url)
    tid = f"take-{strategy}-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": tid}}
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        runs = saver.runs(echo_graph(saver), strategy)
        with reply_lost(pg_url, lost) as killed:
            out = runs.invoke({"messages": ["a"]}, config)
        assert killed, "the take's connection was not broken"
        assert out["messages"] == ["a", "a:answer"]
        assert [(r.status, r.stopped_by) for r in saver.runs.list(tid)] == [("success", None)]
        assert saver.threads.get(tid).status == "idle"
        # The thread was let go: the next run takes it at once.
        assert (
            runs.invoke({"messages": ["b"]}, config, multitask_strategy="reject")["messages"][-1]
            == "b:answer"
        )


def test_a_run_whose_finish_reply_was_lost_ends_as_success(pg_url: str) -> None:
    truncate(pg_url)
    tid = f"finish-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": tid}}
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        runs = saver.runs(echo_graph(saver), "reject")
        with reply_lost(pg_url, "stopped_by = NULL") as killed:
            out = runs.invoke({"messages": ["a"]}, config)
        assert killed, "the finish's connection was not broken"
        assert out["messages"] == ["a", "a:answer"]
        assert [r.status for r in saver.runs.list(tid)] == ["success"]


# ------------------------------------------------------- put and put_writes


@pytest.mark.parametrize("lost", ["early_writes_gone AS (", "inserted AS ("])
def test_a_step_whose_write_reply_was_lost_is_stored_once(
    saver: ColosseumSaver, pg_url: str, lost: str
) -> None:
    """PUT and PUT_WRITES insert if absent: sent again, they find their rows."""
    graph = counter_graph(saver)
    with reply_lost(pg_url, lost) as killed:
        graph.invoke({"total": 0, "log": []}, thread("step"))
    assert killed, "the write's connection was not broken"
    graph.invoke({"total": 0, "log": []}, thread("step"))
    assert graph.get_state(thread("step")).values == {"total": 2, "log": ["step0", "step1"]}
    assert len(list(graph.get_state_history(thread("step")))) == 6


@pytest.mark.parametrize("lost", ["early_writes_gone AS (", "inserted AS ("])
async def test_a_step_whose_write_reply_was_lost_is_stored_once_async(
    asaver: AsyncColosseumSaver, pg_url: str, lost: str
) -> None:
    """The same through the asyncio saver, whose writes share round trips."""
    graph = counter_graph(asaver)
    with reply_lost(pg_url, lost) as killed:
        await graph.ainvoke({"total": 0, "log": []}, thread("step-async"))
    assert killed, "the write's connection was not broken"
    await graph.ainvoke({"total": 0, "log": []}, thread("step-async"))
    state = await graph.aget_state(thread("step-async"))
    assert state.values == {"total": 2, "log": ["step0", "step1"]}
    assert len([s async for s in graph.aget_state_history(thread("step-async"))]) == 6
