"""The thread registry (`saver.threads`) and the run guard (`saver.run_guard`).

Everything runs real LangGraph graphs against real Postgres, through both the
blocking saver (`saver`) and the asyncio one (`asaver`):

1. status: interrupted / idle / error / busy, and what a released guard settles on;
2. run metadata from `config["metadata"]`, `update` merging, `get`'s head id;
3. `search` by metadata, by state values, by status, combined, and paged;
4. double-texting: a rejected and a waited second guard, an unguarded run
   refused while another run holds the thread, the holder's own run allowed;
5. a SIGKILLed guard holder (`threads_worker.py`) lets go when its lease lapses;
6. the audit trail `threads.messages`: who said what, at which step and checkpoint,
   across turns, on a fork, with `limit`;
7. `threads.delete` removes the registry row and every checkpoint.

Each test runs on Postgres alone, with the Redis hot head, and through PgBouncer
in transaction mode (the guard's lease and fencing token are rows, checked by
the statements that write).
"""

from __future__ import annotations

import asyncio
import contextvars
import operator
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from typing_extensions import TypedDict

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._core.threads import STATUSES
from langgraph_colosseum.errors import CorruptRowError, ThreadBusyError
from langgraph_colosseum.threads import AuditEntry, ThreadInfo
from tests.conftest import CONNECTION_MODES, saver_fixtures
from tests.integration.processes import sigkill, spawn

WORKER = Path(__file__).with_name("threads_worker.py")

saver, asaver = saver_fixtures(CONNECTION_MODES)

# ------------------------------------------------------------------ graphs


class DealState(TypedDict, total=False):
    ticker: str
    decision: str
    seen: Annotated[list[str], operator.add]


def _quote(state: DealState) -> dict:
    return {"seen": [state["ticker"]]}


def ticker_graph(saver: Any) -> Any:
    """START -> quote -> END; `ticker` is a small root channel (searchable value)."""
    builder = StateGraph(DealState)
    builder.add_node("quote", _quote)
    builder.add_edge(START, "quote")
    builder.add_edge("quote", END)
    return builder.compile(checkpointer=saver)


def approval_graph(saver: Any) -> Any:
    """START -> quote -> approve (interrupt) -> END."""

    def approve(state: DealState) -> dict:
        answer = interrupt({"approve": state["ticker"]})
        return {"decision": answer}

    builder = StateGraph(DealState)
    builder.add_node("quote", _quote)
    builder.add_node("approve", approve)
    builder.add_edge(START, "quote")
    builder.add_edge("quote", "approve")
    builder.add_edge("approve", END)
    return builder.compile(checkpointer=saver)


class Boom(RuntimeError):
    pass


def flaky_graph(saver: Any, switch: dict[str, bool]) -> Any:
    """START -> quote -> book -> END; `book` raises while switch["fail"] is set."""

    def book(state: DealState) -> dict:
        if switch["fail"]:
            raise Boom(f"booking {state['ticker']} failed")
        return {"decision": "booked"}

    builder = StateGraph(DealState)
    builder.add_node("quote", _quote)
    builder.add_node("book", book)
    builder.add_edge(START, "quote")
    builder.add_edge("quote", "book")
    builder.add_edge("book", END)
    return builder.compile(checkpointer=saver)


class DeskState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def _turn(state: dict) -> int:
    return sum(isinstance(m, HumanMessage) for m in state["messages"])


def _said(node: str, state: dict, text: str) -> dict:
    """One AIMessage with a deterministic id (the node and the human turn it answers).

    A node's write is stored as the node returned it; an id-less message would get
    its id from the `add_messages` reducer only afterwards.
    """
    human = [m for m in state["messages"] if isinstance(m, HumanMessage)][-1]
    return {"messages": [AIMessage(f"{node} t{_turn(state)}: {text}", id=f"{node}@{human.id}")]}


def desk_graph(saver: Any) -> Any:
    """supervisor -> analyst -> (Send) risk -> approver; each appends one AIMessage."""

    def supervisor(state: DeskState) -> dict:
        return _said("supervisor", state, "route to analyst")

    def analyst(state: DeskState) -> dict:
        return _said("analyst", state, "fair value 190")

    def to_risk(state: DeskState) -> list[Send]:
        return [Send("risk", {"messages": state["messages"]})]

    def risk(state: DeskState) -> dict:
        return _said("risk", state, "within limits")

    def approver(state: DeskState) -> dict:
        return _said("approver", state, "approved")

    builder = StateGraph(DeskState)
    builder.add_node("supervisor", supervisor)
    builder.add_node("analyst", analyst)
    builder.add_node("risk", risk)
    builder.add_node("approver", approver)
    builder.add_edge(START, "supervisor")
    builder.add_edge("supervisor", "analyst")
    builder.add_conditional_edges("analyst", to_risk, ["risk"])
    builder.add_edge("risk", "approver")
    builder.add_edge("approver", END)
    return builder.compile(checkpointer=saver)


def human(text: str, id: str) -> dict:
    return {"messages": [HumanMessage(text, id=id)]}


DESK_NODES = ["__start__", "supervisor", "analyst", "risk", "approver"]


# ----------------------------------------------------------------- helpers


def cfg(tid: str, **metadata: Any) -> dict:
    config: dict[str, Any] = {"configurable": {"thread_id": tid}}
    if metadata:
        config["metadata"] = metadata
    return config


def counts(url: str, tid: str) -> tuple[int, int, int]:
    """(checkpoints, writes, channel values) stored for the thread, in any namespace."""
    with psycopg.connect(url, autocommit=True) as conn:
        return tuple(  # type: ignore[return-value]
            conn.execute(f"SELECT count(*) FROM {table} WHERE thread_id = %s", (tid,)).fetchone()[0]
            for table in ("colosseum_checkpoints", "colosseum_writes", "colosseum_channel_values")
        )


def registry_rows(url: str, tid: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM colosseum_threads WHERE thread_id = %s", (tid,)
        ).fetchone()
        assert row is not None
        return int(row[0])


def held_by_live_owner(url: str, tid: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT run_owner IS NOT NULL AND run_lease_until > now() "
            "FROM colosseum_threads WHERE thread_id = %s",
            (tid,),
        ).fetchone()
        return bool(row and row[0])


def head_id(graph: Any, tid: str) -> str:
    return graph.get_state(cfg(tid)).config["configurable"]["checkpoint_id"]


async def ahead_id(graph: Any, tid: str) -> str:
    return (await graph.aget_state(cfg(tid))).config["configurable"]["checkpoint_id"]


def ids(infos: list[ThreadInfo]) -> list[str]:
    return [info.thread_id for info in infos]


def check_desk_audit(
    entries: list[AuditEntry], state_messages: list[BaseMessage], history_ids: set[str]
) -> None:
    """The audit trail matches the state's messages, one entry each, in order."""
    assert [e.message.id for e in entries] == [m.id for m in state_messages]
    assert [e.message.content for e in entries] == [m.content for m in state_messages]
    assert [type(e.message) for e in entries] == [type(m) for m in state_messages]
    steps = [e.step for e in entries]
    assert all(isinstance(s, int) for s in steps), steps
    assert steps == sorted(steps) and len(set(steps)) == len(steps), steps
    for e in entries:
        assert e.checkpoint_id in history_ids, e
    stamps = [datetime.fromisoformat(e.created_at) for e in entries]
    assert all(s.tzinfo is not None for s in stamps)
    assert stamps == sorted(stamps)


def wait_until(check: Callable[[], bool], *, timeout: float, what: str, proc: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"worker exited (rc {proc.returncode}) before: {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {what}")
        time.sleep(0.05)


def spawn_holder(url: str, tid: str, lease_seconds: float, log: Path) -> subprocess.Popen:
    return spawn(WORKER, url, tid, str(lease_seconds), log=log)


def log_text(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""


# ==================================================================== 1. status


def test_status_interrupt_resume_sync(saver: ColosseumSaver) -> None:
    graph = approval_graph(saver)
    tid = "status-interrupt"
    graph.invoke({"ticker": "AAPL"}, cfg(tid))
    assert graph.get_state(cfg(tid)).next == ("approve",)
    info = saver.threads.get(tid)
    assert info is not None and info.status == "interrupted"

    out = graph.invoke(Command(resume="yes"), cfg(tid))
    assert out["decision"] == "yes"
    info = saver.threads.get(tid)
    assert info is not None and info.status == "idle"
    assert info.head_checkpoint_id == head_id(graph, tid)


async def test_status_interrupt_resume_async(asaver: AsyncColosseumSaver) -> None:
    graph = approval_graph(asaver)
    tid = "astatus-interrupt"
    await graph.ainvoke({"ticker": "AAPL"}, cfg(tid))
    info = await asaver.threads.get(tid)
    assert info is not None and info.status == "interrupted"

    out = await graph.ainvoke(Command(resume="no"), cfg(tid))
    assert out["decision"] == "no"
    info = await asaver.threads.get(tid)
    assert info is not None and info.status == "idle"
    assert info.head_checkpoint_id == await ahead_id(graph, tid)


def test_status_error_then_rerun_sync(saver: ColosseumSaver) -> None:
    switch = {"fail": True}
    graph = flaky_graph(saver, switch)
    tid = "status-error"
    with pytest.raises(Boom):
        graph.invoke({"ticker": "AAPL"}, cfg(tid))
    info = saver.threads.get(tid)
    assert info is not None and info.status == "error"
    assert ids(saver.threads.search(status="error")) == [tid]

    switch["fail"] = False
    out = graph.invoke(None, cfg(tid))  # re-run from where it failed
    assert out["decision"] == "booked"
    info = saver.threads.get(tid)
    assert info is not None and info.status == "idle"
    assert info.head_checkpoint_id == head_id(graph, tid)


async def test_status_error_then_rerun_async(asaver: AsyncColosseumSaver) -> None:
    switch = {"fail": True}
    graph = flaky_graph(asaver, switch)
    tid = "astatus-error"
    with pytest.raises(Boom):
        await graph.ainvoke({"ticker": "AAPL"}, cfg(tid))
    info = await asaver.threads.get(tid)
    assert info is not None and info.status == "error"

    switch["fail"] = False
    out = await graph.ainvoke(None, cfg(tid))
    assert out["decision"] == "booked"
    info = await asaver.threads.get(tid)
    assert info is not None and info.status == "idle"


def test_status_busy_inside_guard_then_settles_sync(saver: ColosseumSaver) -> None:
    # A new thread: busy while guarded, idle after.
    with saver.run_guard("busy-new"):
        info = saver.threads.get("busy-new")
        assert info is not None and info.status == "busy"
    info = saver.threads.get("busy-new")
    assert info is not None and info.status == "idle"

    # A run that interrupts inside the guard: busy throughout, interrupted after.
    graph = approval_graph(saver)
    tid = "busy-interrupt"
    with saver.run_guard(tid):
        graph.invoke({"ticker": "AAPL"}, cfg(tid))
        info = saver.threads.get(tid)
        assert info is not None and info.status == "busy"
    info = saver.threads.get(tid)
    assert info is not None and info.status == "interrupted"

    # Resume inside the guard: busy, then idle.
    with saver.run_guard(tid):
        graph.invoke(Command(resume="ok"), cfg(tid))
        assert saver.threads.get(tid).status == "busy"  # type: ignore[union-attr]
    assert saver.threads.get(tid).status == "idle"  # type: ignore[union-attr]

    # A failed thread guarded without running anything stays failed.
    switch = {"fail": True}
    flaky = flaky_graph(saver, switch)
    with pytest.raises(Boom):
        flaky.invoke({"ticker": "MSFT"}, cfg("busy-error"))
    with saver.run_guard("busy-error"):
        assert saver.threads.get("busy-error").status == "busy"  # type: ignore[union-attr]
    assert saver.threads.get("busy-error").status == "error"  # type: ignore[union-attr]

    # ... and a failing run inside the guard leaves it failed too.
    with saver.run_guard("busy-error2"):
        with pytest.raises(Boom):
            flaky.invoke({"ticker": "MSFT"}, cfg("busy-error2"))
        assert saver.threads.get("busy-error2").status == "busy"  # type: ignore[union-attr]
    assert saver.threads.get("busy-error2").status == "error"  # type: ignore[union-attr]


async def test_status_busy_inside_guard_then_settles_async(asaver: AsyncColosseumSaver) -> None:
    graph = approval_graph(asaver)
    tid = "abusy-interrupt"
    async with asaver.run_guard(tid):
        await graph.ainvoke({"ticker": "AAPL"}, cfg(tid))
        info = await asaver.threads.get(tid)
        assert info is not None and info.status == "busy"
    info = await asaver.threads.get(tid)
    assert info is not None and info.status == "interrupted"

    async with asaver.run_guard(tid):
        await graph.ainvoke(Command(resume="ok"), cfg(tid))
        assert (await asaver.threads.get(tid)).status == "busy"  # type: ignore[union-attr]
    assert (await asaver.threads.get(tid)).status == "idle"  # type: ignore[union-attr]


# LangGraph hands `put` (the new checkpoint) and `put_writes` (the interrupt or
# error recorded against it) to background workers, so on a pooled saver they
# can reach Postgres at the same time. The status must not depend on which one
# commits first; one thread per attempt, many attempts, so a lost status shows.
RACE_ATTEMPTS = 30


def test_status_not_lost_to_concurrent_put_sync(saver: ColosseumSaver) -> None:
    approval = approval_graph(saver)
    flaky = flaky_graph(saver, {"fail": True})
    wrong: list[tuple[str, str]] = []
    for i in range(RACE_ATTEMPTS):
        approval.invoke({"ticker": "AAPL"}, cfg(f"race-int-{i}"))
        with pytest.raises(Boom):
            flaky.invoke({"ticker": "AAPL"}, cfg(f"race-err-{i}"))
    for i in range(RACE_ATTEMPTS):
        for tid, expected in ((f"race-int-{i}", "interrupted"), (f"race-err-{i}", "error")):
            info = saver.threads.get(tid)
            assert info is not None
            if info.status != expected:
                wrong.append((tid, info.status))
    assert not wrong, f"{len(wrong)} of {2 * RACE_ATTEMPTS} threads have a wrong status: {wrong}"


async def test_status_not_lost_to_concurrent_put_async(asaver: AsyncColosseumSaver) -> None:
    approval = approval_graph(asaver)
    flaky = flaky_graph(asaver, {"fail": True})
    wrong: list[tuple[str, str]] = []
    for i in range(RACE_ATTEMPTS):
        await approval.ainvoke({"ticker": "AAPL"}, cfg(f"arace-int-{i}"))
        with pytest.raises(Boom):
            await flaky.ainvoke({"ticker": "AAPL"}, cfg(f"arace-err-{i}"))
    for i in range(RACE_ATTEMPTS):
        for tid, expected in ((f"arace-int-{i}", "interrupted"), (f"arace-err-{i}", "error")):
            info = await asaver.threads.get(tid)
            assert info is not None
            if info.status != expected:
                wrong.append((tid, info.status))
    assert not wrong, f"{len(wrong)} of {2 * RACE_ATTEMPTS} threads have a wrong status: {wrong}"


# ================================================================== 2. metadata


def test_metadata_update_and_head_sync(saver: ColosseumSaver) -> None:
    graph = ticker_graph(saver)
    tid = "meta-1"
    graph.invoke({"ticker": "AAPL"}, cfg(tid, desk="equities", priority=2))
    info = saver.threads.get(tid)
    assert info is not None
    assert info.thread_id == tid
    assert info.metadata == {"desk": "equities", "priority": 2}
    assert info.head_checkpoint_id == head_id(graph, tid)
    latest = next(iter(saver.list(cfg(tid), limit=1)))
    assert info.head_checkpoint_id == latest.config["configurable"]["checkpoint_id"]
    assert info.created_at <= info.updated_at

    updated = saver.threads.update(tid, metadata={"priority": 3, "owner": "bob"})
    assert updated.metadata == {"desk": "equities", "priority": 3, "owner": "bob"}
    assert updated.updated_at >= info.updated_at
    assert updated.head_checkpoint_id == info.head_checkpoint_id
    assert saver.threads.get(tid) == updated

    # A later run merges its metadata in and moves the head.
    graph.invoke({"ticker": "MSFT"}, cfg(tid, region="emea"))
    again = saver.threads.get(tid)
    assert again is not None
    assert again.metadata == {"desk": "equities", "priority": 3, "owner": "bob", "region": "emea"}
    assert again.head_checkpoint_id == head_id(graph, tid)
    assert again.head_checkpoint_id != info.head_checkpoint_id
    assert again.created_at == info.created_at

    assert saver.threads.get("no-such-thread") is None


async def test_metadata_update_and_head_async(asaver: AsyncColosseumSaver) -> None:
    graph = ticker_graph(asaver)
    tid = "ameta-1"
    await graph.ainvoke({"ticker": "AAPL"}, cfg(tid, desk="equities", priority=2))
    info = await asaver.threads.get(tid)
    assert info is not None
    assert info.metadata == {"desk": "equities", "priority": 2}
    assert info.head_checkpoint_id == await ahead_id(graph, tid)

    updated = await asaver.threads.update(tid, metadata={"priority": 5})
    assert updated.metadata == {"desk": "equities", "priority": 5}
    assert await asaver.threads.get(tid) == updated
    assert await asaver.threads.get("no-such-thread") is None


# ==================================================================== 3. search


def _seed_search_threads(saver: ColosseumSaver) -> None:
    ticker = ticker_graph(saver)
    approval = approval_graph(saver)
    flaky = flaky_graph(saver, {"fail": True})
    ticker.invoke({"ticker": "AAPL"}, cfg("s-eq-aapl", desk="equities", priority=1))
    ticker.invoke({"ticker": "MSFT"}, cfg("s-eq-msft", desk="equities", priority=2))
    approval.invoke({"ticker": "AAPL"}, cfg("s-eq-wait", desk="equities", priority=2))
    ticker.invoke({"ticker": "AAPL"}, cfg("s-rates-aapl", desk="rates", priority=1))
    with pytest.raises(Boom):
        flaky.invoke({"ticker": "TSLA"}, cfg("s-rates-err", desk="rates", priority=3))


def test_search_finds_root_values_up_to_1_kb_each(saver: ColosseumSaver) -> None:
    """README: the registry keeps "the root channel values of up to 1 KB each,
    for search": a value whose JSON text is 1,024 bytes is found, one byte
    more is not, and a value that grows past the bound leaves the index."""
    ticker = ticker_graph(saver)
    at_bound, over = "A" * 1022, "B" * 1023  # JSON text: 1,024 and 1,025 bytes
    ticker.invoke({"ticker": at_bound}, cfg("kb-at"))
    ticker.invoke({"ticker": over}, cfg("kb-over"))
    ticker.invoke({"ticker": "small"}, cfg("kb-grows"))
    search = saver.threads.search
    assert ids(search(values={"ticker": at_bound})) == ["kb-at"]
    assert ids(search(values={"ticker": over})) == []
    assert ids(search(values={"ticker": "small"})) == ["kb-grows"]
    ticker.invoke({"ticker": over}, cfg("kb-grows"))
    assert ids(search(values={"ticker": "small"})) == []
    assert ids(search(values={"ticker": over})) == []


def test_search_filters_sync(saver: ColosseumSaver) -> None:
    _seed_search_threads(saver)
    search = saver.threads.search

    def found(**kw: Any) -> set[str]:
        return set(ids(search(limit=100, **kw)))

    everything = {"s-eq-aapl", "s-eq-msft", "s-eq-wait", "s-rates-aapl", "s-rates-err"}
    assert found() == everything
    # metadata containment
    assert found(metadata={"desk": "equities"}) == {"s-eq-aapl", "s-eq-msft", "s-eq-wait"}
    assert found(metadata={"desk": "equities", "priority": 2}) == {"s-eq-msft", "s-eq-wait"}
    assert found(metadata={"desk": "fx"}) == set()
    # values containment: the latest ticker
    assert found(values={"ticker": "AAPL"}) == {"s-eq-aapl", "s-eq-wait", "s-rates-aapl"}
    info = saver.threads.get("s-eq-aapl")
    assert info is not None and info.values["ticker"] == "AAPL"
    assert not any(k.startswith("__") or ":" in k for k in info.values)
    # status
    assert found(status="interrupted") == {"s-eq-wait"}
    assert found(status="error") == {"s-rates-err"}
    assert found(status="idle") == {"s-eq-aapl", "s-eq-msft", "s-rates-aapl"}
    # combined
    assert found(metadata={"desk": "equities"}, values={"ticker": "AAPL"}) == {
        "s-eq-aapl",
        "s-eq-wait",
    }
    assert found(metadata={"desk": "equities"}, values={"ticker": "AAPL"}, status="idle") == {
        "s-eq-aapl"
    }
    assert found(metadata={"desk": "rates"}, status="interrupted") == set()

    # The thread moves to MSFT: it no longer matches AAPL, and does match MSFT.
    # (updated_at moves at most once a second, so let one pass for the order.)
    time.sleep(1.1)
    ticker_graph(saver).invoke({"ticker": "MSFT"}, cfg("s-eq-aapl"))
    assert found(values={"ticker": "AAPL"}) == {"s-eq-wait", "s-rates-aapl"}
    assert found(values={"ticker": "MSFT"}) == {"s-eq-aapl", "s-eq-msft"}
    # newest update first
    assert ids(search(values={"ticker": "MSFT"})) == ["s-eq-aapl", "s-eq-msft"]


def test_updated_at_moves_at_most_once_a_second(saver: ColosseumSaver, pg_url: str) -> None:
    """README: `updated_at` (search's order) moves at most once a second, so the
    other puts of a run leave the indexed column alone. Set by hand instead
    of waiting (no timing to race): a stamp newer than a second ago (here,
    ahead of the clock) stays, one 2 s old moves."""
    graph = ticker_graph(saver)
    graph.invoke({"ticker": "AAPL"}, cfg("stamp"))

    def stamp_after_a_put(age: str) -> tuple[Any, Any]:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            before = conn.execute(
                "UPDATE colosseum_threads SET updated_at = now() - %s::interval "
                "WHERE thread_id = 'stamp' RETURNING updated_at",
                [age],
            ).fetchone()[0]
            graph.invoke({"ticker": "MSFT"}, cfg("stamp"))
            after = conn.execute(
                "SELECT updated_at FROM colosseum_threads WHERE thread_id = 'stamp'"
            ).fetchone()[0]
        return before, after

    before, after = stamp_after_a_put("-10 seconds")
    assert after == before
    before, after = stamp_after_a_put("2 seconds")
    assert after > before
    assert saver.threads.get("stamp").updated_at == after


async def test_search_filters_async(asaver: AsyncColosseumSaver) -> None:
    ticker = ticker_graph(asaver)
    approval = approval_graph(asaver)
    await ticker.ainvoke({"ticker": "AAPL"}, cfg("as-1", desk="equities"))
    await approval.ainvoke({"ticker": "AAPL"}, cfg("as-2", desk="equities"))
    await ticker.ainvoke({"ticker": "MSFT"}, cfg("as-3", desk="rates"))

    async def found(**kw: Any) -> list[str]:
        return ids(await asaver.threads.search(limit=100, **kw))

    assert await found(values={"ticker": "AAPL"}) == ["as-2", "as-1"]
    assert await found(metadata={"desk": "equities"}, status="interrupted") == ["as-2"]
    assert await found(metadata={"desk": "rates"}, values={"ticker": "MSFT"}) == ["as-3"]

    await asyncio.sleep(1.1)  # updated_at moves at most once a second
    await ticker.ainvoke({"ticker": "MSFT"}, cfg("as-1"))
    assert await found(values={"ticker": "AAPL"}) == ["as-2"]
    assert await found(values={"ticker": "MSFT"}) == ["as-1", "as-3"]


def test_search_paging_sync(saver: ColosseumSaver) -> None:
    graph = ticker_graph(saver)
    created = [f"page-{i:02d}" for i in range(25)]
    for tid in created:
        graph.invoke({"ticker": "AAPL"}, cfg(tid, batch="paging"))
    graph.invoke({"ticker": "AAPL"}, cfg("not-in-batch", batch="other"))

    pages = [
        saver.threads.search(metadata={"batch": "paging"}, limit=10, offset=offset)
        for offset in (0, 10, 20, 30)
    ]
    assert [len(p) for p in pages] == [10, 10, 5, 0]
    seen = [info.thread_id for page in pages for info in page]
    assert len(seen) == len(set(seen)) == 25  # no duplicates, no gaps
    assert seen == list(reversed(created))  # newest update first
    stamps = [info.updated_at for page in pages for info in page]
    assert stamps == sorted(stamps, reverse=True)

    # Touching the oldest thread moves it to the front.
    saver.threads.update("page-00", metadata={"touched": True})
    first = saver.threads.search(metadata={"batch": "paging"}, limit=3)
    assert ids(first) == ["page-00", "page-24", "page-23"]


# Newest first, by how many seconds ago each was updated (lapse-04 and
# lapse-05 at the same instant: the order is then thread_id's). `plain`: the
# status its row says; `live` / `lapsed`: the row says busy, its lease live /
# past (`no-lease`: none at all); then what its head left.
LAPSE_ROWS = [
    ("lapse-01", 1, "plain", "idle"),
    ("lapse-02", 2, "plain", "error"),
    ("lapse-03", 3, "live", "idle"),
    ("lapse-04", 4, "lapsed", "idle"),
    ("lapse-05", 4, "plain", "idle"),
    ("lapse-06", 6, "lapsed", "error"),
    ("lapse-07", 7, "plain", "idle"),
    ("lapse-08", 8, "live", "error"),
    ("lapse-09", 9, "lapsed", "interrupted"),
    ("lapse-10", 10, "no-lease", "idle"),
    ("lapse-11", 11, "plain", "interrupted"),
    ("lapse-12", 12, "live", "interrupted"),
]


def test_search_and_count_read_each_row_as_its_lease_says_on_every_page(
    saver: ColosseumSaver, pg_url: str
) -> None:
    """A row left busy by a holder whose lease lapsed reads as its head (idle,
    interrupted, error) in search and count, with or without a status filter,
    on every page, wherever it falls among the rows that say their status; a
    live lease reads busy. Rows are set by hand (no timing to race): the
    pages where such a row falls before the last row of those that say the
    status, after it, level with it, and after a short page are all here
    (_core/threads.py: _quick_page)."""
    ticker, approval = ticker_graph(saver), approval_graph(saver)
    flaky = flaky_graph(saver, {"fail": True})
    for tid, _, _, head in LAPSE_ROWS:
        if head == "idle":
            ticker.invoke({"ticker": "AAPL"}, cfg(tid))
        elif head == "interrupted":
            approval.invoke({"ticker": "AAPL"}, cfg(tid))
        else:
            with pytest.raises(Boom):
                flaky.invoke({"ticker": "AAPL"}, cfg(tid))
    lease = {"live": "now() + interval '1 hour'", "lapsed": "now() - interval '1 second'",
             "no-lease": "NULL"}  # fmt: skip
    with psycopg.connect(pg_url, autocommit=True) as conn:
        (now,) = conn.execute("SELECT now()").fetchone()  # type: ignore[misc]
        for tid, age, row, _ in LAPSE_ROWS:
            conn.execute(
                "UPDATE colosseum_threads SET updated_at = %s WHERE thread_id = %s",
                (now - timedelta(seconds=age), tid),
            )
            if row != "plain":
                conn.execute(
                    f"UPDATE colosseum_threads SET status = 'busy', run_lease_until = {lease[row]},"
                    " run_owner = CASE WHEN %s THEN 'gone' END WHERE thread_id = %s",
                    (row != "no-lease", tid),
                )
    reads_as = {tid: "busy" if row == "live" else head for tid, _, row, head in LAPSE_ROWS}
    assert {tid: saver.threads.get(tid).status for tid in reads_as} == reads_as  # type: ignore[union-attr]
    for status in (None, *STATUSES):
        expected = [(tid, s) for tid, s in reads_as.items() if status in (None, s)]
        assert saver.threads.count(status=status, prefix="lapse-") == len(expected), status
        for limit in (1, 2, 3, 100):
            read: list[tuple[str, str]] = []
            for offset in range(0, len(LAPSE_ROWS) + 1, limit):
                page = saver.threads.search(
                    status=status, prefix="lapse-", limit=limit, offset=offset
                )
                assert len(page) <= limit
                read += [(t.thread_id, t.status) for t in page]
            assert read == expected, (status, limit)


async def test_search_paging_async(asaver: AsyncColosseumSaver) -> None:
    graph = ticker_graph(asaver)
    created = [f"apage-{i:02d}" for i in range(25)]
    for tid in created:
        await graph.ainvoke({"ticker": "MSFT"}, cfg(tid, batch="apaging"))
    seen: list[str] = []
    offset = 0
    while page := await asaver.threads.search(
        metadata={"batch": "apaging"}, limit=7, offset=offset
    ):
        seen += ids(page)
        offset += 7
    assert seen == list(reversed(created))


# ============================================================ 4. double-texting


def test_second_guard_rejected_sync(saver: ColosseumSaver) -> None:
    tid = "dt-reject"
    with saver.run_guard(tid) as token:
        assert isinstance(token, int)
        with pytest.raises(ThreadBusyError) as busy:
            with saver.run_guard(tid, on_busy="reject"):
                raise AssertionError("the second guard must not be entered")
        assert busy.value.thread_id == tid
        assert repr(tid) in str(busy.value)
    # Once released, a new guard gets the thread.
    with saver.run_guard(tid, on_busy="reject") as token2:
        assert token2 > token


async def test_second_guard_rejected_async(asaver: AsyncColosseumSaver) -> None:
    tid = "adt-reject"
    async with asaver.run_guard(tid):
        with pytest.raises(ThreadBusyError) as busy:
            async with asaver.run_guard(tid, on_busy="reject"):
                raise AssertionError("the second guard must not be entered")
        assert busy.value.thread_id == tid
        assert repr(tid) in str(busy.value)
    async with asaver.run_guard(tid):
        pass


def test_second_guard_waits_sync(saver: ColosseumSaver) -> None:
    tid = "dt-wait"
    graph = ticker_graph(saver)
    log: list[str] = []
    lock = threading.Lock()
    trying, acquired = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def note(event: str) -> None:
        with lock:
            log.append(event)

    def second() -> None:
        try:
            trying.set()
            with saver.run_guard(tid, on_busy="wait"):
                note("b acquired")
                acquired.set()
                graph.invoke({"ticker": "MSFT"}, cfg(tid))
                note("b ran")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            acquired.set()

    with saver.run_guard(tid, on_busy="reject"):
        note("a acquired")
        graph.invoke({"ticker": "AAPL"}, cfg(tid))
        # A fresh context: the second run is not this guard's holder.
        waiter = threading.Thread(target=contextvars.Context().run, args=(second,))
        waiter.start()
        assert trying.wait(10)
        assert not acquired.wait(0.5), "the second guard got in while the first held the thread"
        note("a releasing")
    assert acquired.wait(10)
    waiter.join(20)
    assert not waiter.is_alive()
    assert not errors, errors
    assert log == ["a acquired", "a releasing", "b acquired", "b ran"]
    assert graph.get_state(cfg(tid)).values["seen"] == ["AAPL", "MSFT"]
    assert saver.threads.get(tid).status == "idle"  # type: ignore[union-attr]


async def test_second_guard_waits_async(asaver: AsyncColosseumSaver) -> None:
    tid = "adt-wait"
    graph = ticker_graph(asaver)
    log: list[str] = []
    trying, acquired = asyncio.Event(), asyncio.Event()

    async def second() -> None:
        trying.set()
        async with asaver.run_guard(tid, on_busy="wait"):
            log.append("b acquired")
            acquired.set()
            await graph.ainvoke({"ticker": "MSFT"}, cfg(tid))
            log.append("b ran")

    async with asaver.run_guard(tid):
        log.append("a acquired")
        await graph.ainvoke({"ticker": "AAPL"}, cfg(tid))
        task = asyncio.get_running_loop().create_task(second(), context=contextvars.Context())
        await asyncio.wait_for(trying.wait(), 10)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(acquired.wait()), 0.5)
        log.append("a releasing")
    await asyncio.wait_for(task, 20)
    assert log == ["a acquired", "a releasing", "b acquired", "b ran"]
    assert (await graph.aget_state(cfg(tid))).values["seen"] == ["AAPL", "MSFT"]


def test_unguarded_run_refused_while_held_sync(saver: ColosseumSaver, pg_url: str) -> None:
    tid = "dt-unguarded"
    graph = ticker_graph(saver)
    graph.invoke({"ticker": "AAPL"}, cfg(tid, desk="equities"))
    before = counts(pg_url, tid)
    head_before = head_id(graph, tid)

    holding, release, released = threading.Event(), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def holder() -> None:
        try:
            with saver.run_guard(tid):
                holding.set()
                release.wait(30)
        except BaseException as exc:
            errors.append(exc)
        finally:
            holding.set()
            released.set()

    other = threading.Thread(target=contextvars.Context().run, args=(holder,))
    other.start()
    try:
        assert holding.wait(10) and not errors, errors
        with pytest.raises(ThreadBusyError) as busy:
            graph.invoke({"ticker": "MSFT"}, cfg(tid, desk="rates", intruder=True))
        assert busy.value.thread_id == tid
        assert counts(pg_url, tid) == before  # nothing written
        info = saver.threads.get(tid)
        assert info is not None and info.status == "busy"
        assert info.metadata == {"desk": "equities"}
        assert info.head_checkpoint_id == head_before
        assert info.values["ticker"] == "AAPL"
    finally:
        release.set()
        assert released.wait(10)
        other.join(10)
    assert not errors, errors
    assert counts(pg_url, tid) == before
    assert head_id(graph, tid) == head_before
    assert graph.get_state(cfg(tid)).values["seen"] == ["AAPL"]
    assert saver.threads.get(tid).status == "idle"  # type: ignore[union-attr]

    # The holder's own run inside the guard works.
    with saver.run_guard(tid):
        out = graph.invoke({"ticker": "MSFT"}, cfg(tid))
        assert out["seen"] == ["AAPL", "MSFT"]
    assert counts(pg_url, tid)[0] > before[0]
    info = saver.threads.get(tid)
    assert info is not None and info.status == "idle"
    assert info.head_checkpoint_id == head_id(graph, tid)
    assert info.values["ticker"] == "MSFT"


async def test_unguarded_run_refused_while_held_async(
    asaver: AsyncColosseumSaver, pg_url: str
) -> None:
    tid = "adt-unguarded"
    graph = ticker_graph(asaver)
    await graph.ainvoke({"ticker": "AAPL"}, cfg(tid))
    before = counts(pg_url, tid)

    holding, release = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with asaver.run_guard(tid):
            holding.set()
            await release.wait()

    task = asyncio.get_running_loop().create_task(holder(), context=contextvars.Context())
    try:
        await asyncio.wait_for(holding.wait(), 10)
        with pytest.raises(ThreadBusyError) as busy:
            await graph.ainvoke({"ticker": "MSFT"}, cfg(tid))
        assert busy.value.thread_id == tid
        assert counts(pg_url, tid) == before
    finally:
        release.set()
        await asyncio.wait_for(task, 10)
    assert counts(pg_url, tid) == before
    assert (await asaver.threads.get(tid)).status == "idle"  # type: ignore[union-attr]

    async with asaver.run_guard(tid):
        out = await graph.ainvoke({"ticker": "MSFT"}, cfg(tid))
        assert out["seen"] == ["AAPL", "MSFT"]
    assert counts(pg_url, tid)[0] > before[0]


# ======================================================= 5. a killed guard holder


def test_killed_holder_releases_sync(saver: ColosseumSaver, pg_url: str, tmp_path: Path) -> None:
    tid = "killed-holder"
    graph = ticker_graph(saver)
    log = tmp_path / "holder.log"
    proc = spawn_holder(pg_url, tid, 1.0, log)
    try:
        wait_until(
            lambda: held_by_live_owner(pg_url, tid) and "HELD" in log_text(log),
            timeout=30, what="the worker holds the thread", proc=proc,
        )  # fmt: skip
        # Past its 1 s lease, the heartbeat still keeps the thread held.
        time.sleep(1.3)
        assert proc.poll() is None, log_text(log)
        with pytest.raises(ThreadBusyError):
            with saver.run_guard(tid, on_busy="reject"):
                pass
        with pytest.raises(ThreadBusyError):
            graph.invoke({"ticker": "AAPL"}, cfg(tid))
        assert counts(pg_url, tid)[0] == 0
    finally:
        sigkill(proc)
    killed_at = time.monotonic()
    with saver.run_guard(tid, on_busy="wait", lease=timedelta(seconds=5)):
        waited = time.monotonic() - killed_at
        out = graph.invoke({"ticker": "AAPL"}, cfg(tid))
    assert waited < 5, f"the dead holder kept the thread for {waited:.1f}s"
    assert out["seen"] == ["AAPL"]
    info = saver.threads.get(tid)
    assert info is not None and info.status == "idle"
    assert info.head_checkpoint_id == head_id(graph, tid)


async def test_killed_holder_releases_async(
    asaver: AsyncColosseumSaver, pg_url: str, tmp_path: Path
) -> None:
    tid = "akilled-holder"
    graph = ticker_graph(asaver)
    log = tmp_path / "holder.log"
    proc = spawn_holder(pg_url, tid, 1.0, log)
    try:
        deadline = time.monotonic() + 30
        while not (held_by_live_owner(pg_url, tid) and "HELD" in log_text(log)):
            assert proc.poll() is None, log_text(log)
            assert time.monotonic() < deadline, "the worker never held the thread"
            await asyncio.sleep(0.05)
        with pytest.raises(ThreadBusyError):
            async with asaver.run_guard(tid, on_busy="reject"):
                pass
    finally:
        sigkill(proc)
    killed_at = time.monotonic()
    async with asaver.run_guard(tid, on_busy="wait"):
        waited = time.monotonic() - killed_at
        out = await graph.ainvoke({"ticker": "MSFT"}, cfg(tid))
    assert waited < 5, f"the dead holder kept the thread for {waited:.1f}s"
    assert out["seen"] == ["MSFT"]
    assert (await asaver.threads.get(tid)).status == "idle"  # type: ignore[union-attr]


# ============================================================== 6. audit trail


def test_audit_trail_sync(saver: ColosseumSaver) -> None:
    graph = desk_graph(saver)
    tid = "audit-1"
    graph.invoke(human("buy 100 AAPL?", "h1"), cfg(tid))

    def history_ids() -> set[str]:
        return {
            s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg(tid))
        }

    turn1 = saver.threads.messages(tid)
    state = graph.get_state(cfg(tid))
    assert len(turn1) == 5
    assert [e.node for e in turn1] == DESK_NODES
    assert [e.message.content for e in turn1] == [
        "buy 100 AAPL?",
        "supervisor t1: route to analyst",
        "analyst t1: fair value 190",
        "risk t1: within limits",
        "approver t1: approved",
    ]
    assert [e.message.id for e in turn1] == [
        "h1", "supervisor@h1", "analyst@h1", "risk@h1", "approver@h1"
    ]  # fmt: skip
    check_desk_audit(turn1, state.values["messages"], history_ids())
    # The last message was produced by the head checkpoint.
    assert turn1[-1].checkpoint_id == state.config["configurable"]["checkpoint_id"]
    assert turn1[-1].step == state.metadata["step"]
    end_of_turn1 = state.config

    # A second turn: both turns' messages, in order.
    graph.invoke(human("and MSFT?", "h2"), cfg(tid))
    both = saver.threads.messages(tid)
    state2 = graph.get_state(cfg(tid))
    assert len(both) == 10
    assert [e.node for e in both] == DESK_NODES * 2
    assert both[:5] == turn1
    assert [e.message.content for e in both[5:]] == [
        "and MSFT?",
        "supervisor t2: route to analyst",
        "analyst t2: fair value 190",
        "risk t2: within limits",
        "approver t2: approved",
    ]
    check_desk_audit(both, state2.values["messages"], history_ids())

    # limit
    assert saver.threads.messages(tid, limit=3) == both[:3]
    assert saver.threads.messages(tid, limit=100) == both
    assert saver.threads.messages(tid, limit=0) == []

    # A fork from the end of turn 1: only the current branch's messages.
    graph.invoke(human("what about TSLA?", "h2-fork"), end_of_turn1)
    forked = saver.threads.messages(tid)
    state3 = graph.get_state(cfg(tid))
    contents = [e.message.content for e in forked]
    assert "and MSFT?" not in contents
    assert [e.node for e in forked] == DESK_NODES * 2
    assert forked[:5] == turn1
    assert contents[5:] == [
        "what about TSLA?",
        "supervisor t2: route to analyst",
        "analyst t2: fair value 190",
        "risk t2: within limits",
        "approver t2: approved",
    ]
    assert {e.message.id for e in forked[5:]}.isdisjoint({e.message.id for e in both[5:]})
    check_desk_audit(forked, state3.values["messages"], history_ids())
    info = saver.threads.get(tid)
    assert (
        info is not None
        and info.head_checkpoint_id == state3.config["configurable"]["checkpoint_id"]
    )
    assert forked[-1].checkpoint_id == info.head_checkpoint_id

    # Another channel, and a thread with no history.
    assert saver.threads.messages(tid, channel="no_such_channel") == []
    assert saver.threads.messages("audit-nothing") == []


async def test_audit_trail_async(asaver: AsyncColosseumSaver) -> None:
    graph = desk_graph(asaver)
    tid = "aaudit-1"
    await graph.ainvoke(human("buy 100 AAPL?", "h1"), cfg(tid))
    end_of_turn1 = (await graph.aget_state(cfg(tid))).config
    await graph.ainvoke(human("and MSFT?", "h2"), cfg(tid))

    history = {
        s.config["configurable"]["checkpoint_id"] async for s in graph.aget_state_history(cfg(tid))
    }
    both = await asaver.threads.messages(tid)
    state = await graph.aget_state(cfg(tid))
    assert [e.node for e in both] == DESK_NODES * 2
    check_desk_audit(both, state.values["messages"], history)
    assert await asaver.threads.messages(tid, limit=4) == both[:4]

    await graph.ainvoke(human("what about TSLA?", "h2-fork"), end_of_turn1)
    forked = await asaver.threads.messages(tid)
    assert [e.message.content for e in forked[:5]] == [e.message.content for e in both[:5]]
    assert forked[5].message.content == "what about TSLA?"
    assert "and MSFT?" not in [e.message.content for e in forked]
    assert [e.node for e in forked] == DESK_NODES * 2
    history = {
        s.config["configurable"]["checkpoint_id"] async for s in graph.aget_state_history(cfg(tid))
    }
    check_desk_audit(forked, (await graph.aget_state(cfg(tid))).values["messages"], history)


# ==================================================================== 7. delete


def test_delete_sync(saver: ColosseumSaver, pg_url: str) -> None:
    graph = approval_graph(saver)
    graph.invoke({"ticker": "AAPL"}, cfg("del-1", desk="equities"))  # with pending writes
    ticker_graph(saver).invoke({"ticker": "AAPL"}, cfg("del-keep", desk="equities"))
    assert registry_rows(pg_url, "del-1") == 1
    assert all(n > 0 for n in counts(pg_url, "del-1"))
    keep = counts(pg_url, "del-keep")

    saver.threads.delete("del-1")
    assert saver.threads.get("del-1") is None
    assert registry_rows(pg_url, "del-1") == 0
    assert counts(pg_url, "del-1") == (0, 0, 0)
    assert list(saver.list(cfg("del-1"))) == []
    assert saver.threads.messages("del-1") == []
    assert ids(saver.threads.search(metadata={"desk": "equities"})) == ["del-keep"]
    # The other thread is untouched.
    assert counts(pg_url, "del-keep") == keep
    assert saver.threads.get("del-keep") is not None

    # The thread id can start over.
    graph.invoke({"ticker": "MSFT"}, cfg("del-1"))
    info = saver.threads.get("del-1")
    assert info is not None and info.status == "interrupted" and info.metadata == {}


async def test_delete_async(asaver: AsyncColosseumSaver, pg_url: str) -> None:
    graph = desk_graph(asaver)
    await graph.ainvoke(human("hi", "h1"), cfg("adel-1"))
    assert registry_rows(pg_url, "adel-1") == 1
    await asaver.threads.delete("adel-1")
    assert await asaver.threads.get("adel-1") is None
    assert registry_rows(pg_url, "adel-1") == 0
    assert counts(pg_url, "adel-1") == (0, 0, 0)
    assert [c async for c in asaver.alist(cfg("adel-1"))] == []


# ============================================= 8. registry rows are plain JSON


def _tamper_registry(url: str, tid: str, metadata: str) -> None:
    """Overwrite a registry row's metadata as someone with table access could."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE colosseum_threads SET metadata = %s::jsonb WHERE thread_id = %s",
            (metadata, tid),
        )


# Run metadata spelled like the codec's tag, then a run whose metadata fills
# the rest of a tagged form: stored through the codec, the first hid the
# thread's other metadata and the second made every search fail.
TAG_RUNS = [{"desk": "equities"}, {"$t": "x"}, {"v": 1}, {"$t": "dict"}]
TAG_METADATA = {"desk": "equities", "$t": "dict", "v": 1}


def test_run_metadata_spelled_like_a_tag_sync(saver: ColosseumSaver) -> None:
    graph = ticker_graph(saver)
    graph.invoke({"ticker": "IBM"}, cfg("tag-other", desk="equities"))
    for metadata in TAG_RUNS:
        graph.invoke({"ticker": "AAPL"}, cfg("tag-1", **metadata))
        assert "tag-1" in ids(saver.threads.search(limit=100))
    info = saver.threads.get("tag-1")
    assert info is not None and info.metadata == TAG_METADATA
    assert set(ids(saver.threads.search(metadata={"desk": "equities"}))) == {"tag-1", "tag-other"}
    assert ids(saver.threads.search(metadata={"$t": "dict"})) == ["tag-1"]
    assert ids(saver.threads.search(metadata={"v": 1, "desk": "equities"})) == ["tag-1"]
    # update merges the same way
    updated = saver.threads.update("tag-1", metadata={"$t": {"nested": [1, 2]}})
    assert updated.metadata == {**TAG_METADATA, "$t": {"nested": [1, 2]}}
    assert ids(saver.threads.search(metadata={"$t": {"nested": [1, 2]}})) == ["tag-1"]


async def test_run_metadata_spelled_like_a_tag_async(asaver: AsyncColosseumSaver) -> None:
    graph = ticker_graph(asaver)
    await graph.ainvoke({"ticker": "IBM"}, cfg("atag-other", desk="equities"))
    for metadata in TAG_RUNS:
        await graph.ainvoke({"ticker": "AAPL"}, cfg("atag-1", **metadata))
        assert "atag-1" in ids(await asaver.threads.search(limit=100))
    info = await asaver.threads.get("atag-1")
    assert info is not None and info.metadata == TAG_METADATA
    found = await asaver.threads.search(metadata={"desk": "equities"})
    assert set(ids(found)) == {"atag-1", "atag-other"}
    assert ids(await asaver.threads.search(metadata={"$t": "dict"})) == ["atag-1"]


# An allowlist miss, a malformed tag, and a value that is not an object at all.
TAMPERED = [
    '{"desk": "equities", "k": {"$t": "model", "cls": "os:system", "v": {}}}',
    '{"desk": "equities", "k": {"$t": "int", "v": "not a number"}}',
    '["desk", "equities"]',
]


@pytest.mark.parametrize("metadata", TAMPERED)
def test_tampered_registry_row_is_skipped_and_reported_sync(
    saver: ColosseumSaver, pg_url: str, metadata: str, caplog: pytest.LogCaptureFixture
) -> None:
    graph = ticker_graph(saver)
    for tid in ("bad-a", "bad-b", "bad-c"):
        graph.invoke({"ticker": "AAPL"}, cfg(tid, desk="equities"))
    _tamper_registry(pg_url, "bad-b", metadata)
    with caplog.at_level("WARNING", logger="langgraph_colosseum"):
        found = saver.threads.search(limit=100)
    assert set(ids(found)) == {"bad-a", "bad-c"}
    assert saver.threads.skipped_rows == 1  # a fresh saver: counted once
    assert any("bad-b" in r.getMessage() for r in caplog.records), caplog.records
    # Asked for by id, the row is an error naming the thread, not a silent gap.
    with pytest.raises(CorruptRowError, match="bad-b"):
        saver.threads.get("bad-b")
    assert saver.threads.get("bad-a") is not None


async def test_tampered_registry_row_is_skipped_and_reported_async(
    asaver: AsyncColosseumSaver, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    graph = ticker_graph(asaver)
    for tid in ("abad-a", "abad-b"):
        await graph.ainvoke({"ticker": "AAPL"}, cfg(tid, desk="equities"))
    _tamper_registry(pg_url, "abad-b", TAMPERED[0])
    with caplog.at_level("WARNING", logger="langgraph_colosseum"):
        found = await asaver.threads.search(metadata={"desk": "equities"}, limit=100)
    assert ids(found) == ["abad-a"]
    assert asaver.threads.skipped_rows == 1
    assert any("abad-b" in r.getMessage() for r in caplog.records)
    with pytest.raises(CorruptRowError, match="abad-b"):
        await asaver.threads.get("abad-b")
