"""The tool ledger of a deleted run: `rollback` and `delete_for_runs`.

A run's tool calls are part of what it wrote. When the run is deleted
(`delete_for_runs`, which `rollback` runs on the stopped run), the record of
each call it made goes with it, in the same transaction as its checkpoints,
and a late `complete` of a call still running stores nothing. The tool
really ran; only its record goes, so a later run that makes the same call
afresh runs it again, as the first run did.

A record stays when a checkpoint that stays still holds its call: the
checkpoint the call was made on (a run that resumed a checkpoint it did not
write, e.g. after `interrupt_before=["tools"]`), or a later checkpoint of
another run that descends from it (a copy made mid-run that went on, a run
after the deleted one). Such a state can present the same key again, and
must get the recorded output, not a second side effect. When that state is
on another thread of the lineage (a copy), the record is handed to it, as
`delete_thread` hands a deleted thread's records on.

The runs are ordered by events in their nodes and tools (no sleeps), on two
savers with pools of their own, with and without Redis where the head is read.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Annotated, Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langgraph_colosseum import ColosseumSaver, IdempotentToolNode
from langgraph_colosseum.errors import RunRolledBackError
from langgraph_colosseum.inspection import Inspector
from tests.conftest import truncate
from tests.integration.test_guards import new_thread, worker
from tests.integration.test_ledger_lifecycle import Bank, cfg, last_answer, payment_graph
from tests.integration.test_runs_stopped import in_thread, traces

WAIT = 60.0
Hold = tuple[threading.Event, threading.Event]


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class Lookup:
    """The side effect: `lookup` counts its calls; the output names the count.

    `holds` maps a query to (entered, release): its first call sets the one
    and waits for the other, inside the tool (its claim has committed)."""

    def __init__(self, holds: dict[str, Hold] | None = None) -> None:
        self.calls: list[str] = []
        self.lock = threading.Lock()
        holds = holds or {}

        @tool
        def lookup(query: str) -> str:
            """Look something up."""
            with self.lock:
                self.calls.append(query)
                n = len(self.calls)
            if query in holds and not holds[query][0].is_set():
                holds[query][0].set()
                holds[query][1].wait(WAIT)
            return f"secret-{query}-result-{n}"

        self.tool = lookup


def lookup_graph(
    saver: Any,
    lookup: Lookup,
    slow_holds: dict[str, Hold] | None = None,
    *,
    wait: timedelta = timedelta(seconds=60),
    interrupt_before: list[str] | None = None,
) -> Any:
    """agent -> tools (IdempotentToolNode) -> slow -> END. The agent asks to look
    up the last human message, the tool call id made of it (as an LLM asked
    the same would not, but a deterministic one does); `slow` of a run whose
    messages hold a query of `slow_holds` waits there, once."""
    slow_holds = slow_holds or {}

    def agent(state: Chat) -> dict:
        last = state["messages"][-1]
        if isinstance(last, HumanMessage):
            call = {"name": "lookup", "args": {"query": last.content}, "id": f"call-{last.content}"}
            return {"messages": [AIMessage("", tool_calls=[call])]}
        return {"messages": [AIMessage(f"done: {last.content}")]}

    def slow(state: Chat) -> dict:
        seen = repr(state["messages"])
        for query, (entered, release) in slow_holds.items():
            if query in seen and not entered.is_set():
                entered.set()
                release.wait(WAIT)
        return {}

    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("tools", IdempotentToolNode([lookup.tool], ledger=saver, wait=wait))
    builder.add_node("slow", slow)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", "slow")
    builder.add_edge("slow", END)
    return builder.compile(checkpointer=saver, interrupt_before=interrupt_before)


def ledger(url: str, thread_id: str) -> list[tuple[str, str, str]]:
    """(status, tool_call_id, output) of each row of the thread."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT status, tool_call_id, coalesce(output::text, '') FROM colosseum_tool_calls "
            "WHERE thread_id = %s ORDER BY started_at",
            (thread_id,),
        ).fetchall()


def ledger_view(saver: ColosseumSaver, thread_id: str) -> str:
    """What `colosseum ledger THREAD` and the web inspector show of the thread."""
    return repr(Inspector(saver).ledger(thread_id))


def tool_outputs(state: Any) -> list[str]:
    return [str(m.content) for m in state.values["messages"] if isinstance(m, ToolMessage)]


# ------------------------------------------------------------------ rollback


@pytest.mark.parametrize("hot", [False, True], ids=["postgres", "redis"])
def test_rollback_leaves_nothing_of_the_stopped_runs_tool_calls(pg_url: str, hot: bool) -> None:
    """The review's scenario: the stopped run's tool ran (its arguments and
    output hold "qa-private") and the run waits in the next node when another
    run rolls it back. Nothing of it may stay: not in colosseum_tool_calls, not
    in the ledger the CLI and the inspector show."""
    truncate(pg_url)
    tid = new_thread("ledger-rb")
    config = {"configurable": {"thread_id": tid}}
    lookup = Lookup()
    holds = {"qa-private": (threading.Event(), threading.Event())}
    with worker(pg_url, hot=hot) as first, worker(pg_url, hot=hot) as second:
        runs = first.runs(lookup_graph(first, lookup, holds), "reject")
        outcome: list[Any] = []
        a = in_thread(
            lambda: runs.invoke({"messages": [HumanMessage("qa-private")]}, config,
                                durability="sync"),
            outcome,
        )  # fmt: skip
        try:
            assert holds["qa-private"][0].wait(WAIT)  # the tool ran: its row is SUCCESS
            assert [row[0] for row in ledger(pg_url, tid)] == ["SUCCESS"]
            result = second.runs(lookup_graph(second, lookup), "reject").invoke(
                {"messages": [HumanMessage("qb")]}, config, multitask_strategy="rollback"
            )
        finally:
            holds["qa-private"][1].set()
            a.join(WAIT)
        assert isinstance(outcome[0], RunRolledBackError), outcome
        assert "qa-private" not in repr(result["messages"])
        assert traces(pg_url, tid, "qa-private") == []
        assert "qa-private" not in ledger_view(second, tid)
        assert [(status, call) for status, call, _ in ledger(pg_url, tid)] == [
            ("SUCCESS", "call-qb")
        ]


@pytest.mark.parametrize("durability", ["sync", "exit"])
def test_a_tool_still_running_at_the_rollback_stores_nothing_when_it_finishes(
    pg_url: str, durability: str
) -> None:
    """Ordered by the tool itself: the stopped run's claim has committed and
    its tool is running when the rollback commits; the tool finishes after
    the new run has ended, and its run completes the call.

    The completion finds no row (it went with the run) and stores nothing:
    the output of the first call is nowhere. The new run asks the same
    question, and its model happens to make the very same call (same
    arguments, same tool_call_id: the same idempotency key). It runs the
    tool: the thread is as it was before the stopped run, where nothing asked
    for that call, and the record of the first one went with the run that
    made it (a record kept would also answer the new call with the output
    of a run that was rolled back). Forward `current_idempotency_key()` to an
    API that deduplicates if it must see such a repeat once. With
    durability="exit" the stopped run stored nothing but its claim."""
    truncate(pg_url)
    tid = new_thread("ledger-in-flight")
    config = {"configurable": {"thread_id": tid}}
    holds = {"qa": (threading.Event(), threading.Event())}
    lookup = Lookup(holds)
    with worker(pg_url, hot=False) as first, worker(pg_url, hot=False) as second:
        # wait=: a new call that finds the stopped run's RUNNING row waits no longer
        graph = lookup_graph(first, lookup, wait=timedelta(seconds=3))
        outcome: list[Any] = []
        a = in_thread(
            lambda: first.runs(graph, "reject").invoke(
                {"messages": [HumanMessage("qa")]}, config, durability=durability
            ),
            outcome,
        )
        try:
            assert holds["qa"][0].wait(WAIT)  # claimed (RUNNING), the tool is running
            again = lookup_graph(second, lookup, wait=timedelta(seconds=3))
            result = second.runs(again).invoke(
                {"messages": [HumanMessage("qa")]},
                config,
                multitask_strategy="rollback",
                durability="sync",
            )
        finally:
            holds["qa"][1].set()  # the stopped run's tool finishes, and completes
            a.join(WAIT)
        assert isinstance(outcome[0], RunRolledBackError), outcome
        assert lookup.calls == ["qa", "qa"]
        assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == [
            "secret-qa-result-2"
        ]
        (row,) = ledger(pg_url, tid)
        assert row[0] == "SUCCESS" and "secret-qa-result-2" in row[2], row
        assert traces(pg_url, tid, "result-1") == []
        assert "result-1" not in ledger_view(second, tid)


@pytest.mark.parametrize("went_on", [True, False], ids=["copy-went-on", "copy-left-alone"])
def test_a_copy_made_mid_run_keeps_the_tool_call_it_still_shows(pg_url: str, went_on: bool) -> None:
    """The stopped run's tool ran, then the thread was copied (the copy shares
    the row: its calls are keyed by the source's lineage). `delete_for_runs`
    deletes a run wherever its rows are, copies included.

    copy-went-on: a run on the copy finished it before the rollback. Its
    checkpoints stay, and they hold the call and its output: the record is
    handed to the copy (it shows in the copy's ledger, not the source's),
    and the copy asking for the same call again gets the recorded output;
    the tool ran once for it. copy-left-alone: the copy holds nothing but
    the stopped run's steps, which go: the record goes too."""
    truncate(pg_url)
    tid, copy = new_thread("ledger-src"), new_thread("ledger-copy")
    config, copied = {"configurable": {"thread_id": tid}}, {"configurable": {"thread_id": copy}}
    lookup = Lookup()
    holds = {"qa-private": (threading.Event(), threading.Event())}
    with worker(pg_url, hot=False) as first, worker(pg_url, hot=False) as second:
        graph = lookup_graph(first, lookup, holds)
        outcome: list[Any] = []
        a = in_thread(
            lambda: first.runs(graph, "reject").invoke(
                {"messages": [HumanMessage("qa-private")]}, config, durability="sync"
            ),
            outcome,
        )
        try:
            assert holds["qa-private"][0].wait(WAIT)  # the tool ran; the run waits in `slow`
            first.copy_thread(tid, copy)
            if went_on:
                graph.invoke(None, copied)  # `slow` (not held again) -> END, on the copy
            second.runs(lookup_graph(second, lookup), "reject").invoke(
                {"messages": [HumanMessage("qb")]}, config, multitask_strategy="rollback"
            )
        finally:
            holds["qa-private"][1].set()
            a.join(WAIT)
        assert isinstance(outcome[0], RunRolledBackError), outcome
        assert traces(pg_url, tid, "qa-private") == []
        assert "qa-private" not in ledger_view(second, tid)
        if not went_on:
            assert graph.get_state(copied).values == {}
            assert ledger(pg_url, copy) == []
            return
        assert tool_outputs(graph.get_state(copied)) == ["secret-qa-private-result-1"]
        assert [(s, call) for s, call, _ in ledger(pg_url, copy)] == [
            ("SUCCESS", "call-qa-private")
        ]
        assert "secret-qa-private-result-1" in ledger_view(second, copy)
        # the copy asks for the same call again: recorded, not run again
        graph.update_state(copied, None, as_node="agent")
        graph.invoke(None, copied)
        assert tool_outputs(graph.get_state(copied))[-1] == "secret-qa-private-result-1"
        assert lookup.calls == ["qa-private", "qb"]


def test_a_rollback_of_a_run_that_resumed_a_pending_call_keeps_its_record(pg_url: str) -> None:
    """The first run stopped before `tools` (interrupt_before): its checkpoint
    holds the call, pending. The second resumed it, its tool ran, and it is
    rolled back while in `slow`. The checkpoint holding the call is the first
    run's and stays, so the thread is as before the second run: the call is
    pending. The record stays with it: the side effect happened, and the run
    that resumes the call again gets the recorded output instead of a second
    call (the record going would make "once" depend on which run is rolled
    back). So does `delete_for_runs` of the run that made the call."""
    truncate(pg_url)
    tid = new_thread("ledger-resumed")
    config = {"configurable": {"thread_id": tid}}
    lookup = Lookup()
    holds = {"qa": (threading.Event(), threading.Event())}
    with worker(pg_url, hot=False) as first, worker(pg_url, hot=False) as second:
        runs = first.runs(lookup_graph(first, lookup, holds, interrupt_before=["tools"]), "reject")
        runs.invoke({"messages": [HumanMessage("qa")]}, config, durability="sync")
        outcome: list[Any] = []
        resumer = str(uuid.uuid4())
        a = in_thread(
            lambda: runs.invoke(None, {**config, "run_id": resumer}, durability="sync"), outcome
        )
        try:
            assert holds["qa"][0].wait(WAIT)  # the tool ran; the resuming run waits in `slow`
            graph = lookup_graph(second, lookup, interrupt_before=["tools"])
            again = second.runs(graph, "reject")
            result = again.invoke(None, config, multitask_strategy="rollback", durability="sync")
        finally:
            holds["qa"][1].set()
            a.join(WAIT)
        assert isinstance(outcome[0], RunRolledBackError), outcome
        assert lookup.calls == ["qa"]
        assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == [
            "secret-qa-result-1"
        ]
        assert [s for s, _, _ in ledger(pg_url, tid)] == ["SUCCESS"]
        second.delete_for_runs([resumer])  # nothing left of it: a no-op for the ledger
        assert [s for s, _, _ in ledger(pg_url, tid)] == ["SUCCESS"]


# ------------------------------------------------- delete_for_runs, directly


def test_delete_for_runs_deletes_the_runs_tool_calls(pg_url: str) -> None:
    """The conformance API, outside any strategy: the run paid, then is deleted.
    Its ledger row goes with its checkpoints, and a new run that makes the
    same call (same key) pays for itself: the thread holds nothing that asked
    for the first payment."""
    bank = Bank()
    tid, run_id = new_thread("ledger-dfr"), str(uuid.uuid4())
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph = payment_graph(saver, bank)
        assert last_answer(graph.invoke({"messages": []}, cfg(tid, run_id=run_id))) == (
            "paid 5 (call #1)"
        )
        saver.delete_for_runs([run_id])
        assert graph.get_state(cfg(tid)).values == {}
        assert ledger(pg_url, tid) == []
        assert "paid 5" not in ledger_view(saver, tid)
        assert last_answer(graph.invoke({"messages": []}, cfg(tid))) == "paid 5 (call #2)"


def test_delete_for_runs_keeps_a_call_a_later_run_still_shows(pg_url: str) -> None:
    """The run that paid is followed by another on the thread (whose model
    asks for the same payment: the recorded one answers it). Deleting the
    first run leaves the second's checkpoints, which hold the call and its
    output: the record stays (deleting the same run again too), and a run
    asking for the call again does not pay. Deleting the second run as well
    leaves nothing that shows the call: the record goes."""
    bank = Bank()
    tid, paid, later = new_thread("ledger-dfr-later"), str(uuid.uuid4()), str(uuid.uuid4())
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph = payment_graph(saver, bank)
        graph.invoke({"messages": []}, cfg(tid, run_id=paid))
        assert last_answer(graph.invoke({"messages": []}, cfg(tid, run_id=later))) == (
            "paid 5 (call #1)"
        )
        saver.delete_for_runs([paid])
        saver.delete_for_runs([paid])
        assert [s for s, _, _ in ledger(pg_url, tid)] == ["SUCCESS"]
        assert last_answer(graph.get_state(cfg(tid)).values) == "paid 5 (call #1)"
        saver.delete_for_runs([later])
        assert graph.get_state(cfg(tid)).values == {}
        assert ledger(pg_url, tid) == []
        assert bank.calls == [("bob", 5)]
