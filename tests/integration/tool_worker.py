"""Graphs and tools for the IdempotentToolNode fault tests, and a worker process.

The tests import the builders from here; `test_tool_faults.py` also runs this
file as a separate process (``python tool_worker.py MODE URL THREAD KIND``) that
it kills with SIGKILL while a tool is in flight.

Every tool counts its side effects in an external witness table through its
own autocommit connection, never through the ledger, so the tests can check
how often a side effect really happened.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import psycopg
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool
from langgraph.graph import END, START, MessagesState, StateGraph

from langgraph_colosseum import (
    AsyncColosseumSaver,
    ColosseumSaver,
    IdempotentToolNode,
    current_idempotency_key,
)

WITNESS_DDL = """
CREATE TABLE IF NOT EXISTS witness_tool_effects (
    id serial PRIMARY KEY,
    thread_id text NOT NULL,
    tool text NOT NULL,
    key text,
    note text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
)
"""
WITNESS_INSERT = (
    "INSERT INTO witness_tool_effects (thread_id, tool, key, note) VALUES (%s, %s, %s, %s)"
)
WITNESS_COUNT = "SELECT count(*) FROM witness_tool_effects WHERE thread_id = %s AND tool = %s"


def ensure_witness(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(WITNESS_DDL)


def witness(url: str, tid: str, tool: str, note: str) -> int:
    """Record one side effect; return how many `tool` has had on this thread so far."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(WITNESS_INSERT, (tid, tool, current_idempotency_key(), note))
        row = conn.execute(WITNESS_COUNT, (tid, tool)).fetchone()
        assert row is not None
        return int(row[0])


async def awitness(url: str, tid: str, tool: str, note: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(WITNESS_INSERT, (tid, tool, current_idempotency_key(), note))
        cur = await conn.execute(WITNESS_COUNT, (tid, tool))
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


def _tool(name: str, func: Callable[..., Any], coroutine: Callable[..., Any]) -> StructuredTool:
    return StructuredTool.from_function(
        func=func, coroutine=coroutine, name=name, description=f"the {name} test tool"
    )


def make_tools(
    url: str,
    *,
    slow_seconds: float = 0.0,
    hang_seconds: float = 0.0,
    pay_seconds: float = 0.0,
    slow_until: threading.Event | None = None,
) -> dict[str, StructuredTool]:
    """The test tools; sleeping times come from here, never from the tool args
    (the args are part of the idempotency key and fixed by the checkpointed AIMessage).
    With `slow_until`, `slow` returns only once the test sets the event (or
    after 60 s, so a test whose timeout failed ends instead of hanging)."""

    def slow_wait() -> None:
        if slow_until is None:
            time.sleep(slow_seconds)
        else:
            slow_until.wait(60)

    def pay(tid: str, amount: int) -> str:
        witness(url, tid, "pay", f"paid {amount}")
        time.sleep(pay_seconds)
        return f"paid {amount}"

    async def apay(tid: str, amount: int) -> str:
        await awitness(url, tid, "pay", f"paid {amount}")
        await asyncio.sleep(pay_seconds)
        return f"paid {amount}"

    def slow(tid: str) -> str:
        witness(url, tid, "slow", "started")
        slow_wait()
        return "slow done"

    async def aslow(tid: str) -> str:
        await awitness(url, tid, "slow", "started")
        await asyncio.to_thread(slow_wait)
        return "slow done"

    def charge(tid: str) -> str:
        witness(url, tid, "charge", "started")
        time.sleep(hang_seconds)
        return "charged"

    async def acharge(tid: str) -> str:
        await awitness(url, tid, "charge", "started")
        await asyncio.sleep(hang_seconds)
        return "charged"

    def flaky(tid: str) -> str:
        if witness(url, tid, "flaky", "call") == 1:
            raise RuntimeError("flaky fails on its first call")
        return "flaky ok"

    async def aflaky(tid: str) -> str:
        if await awitness(url, tid, "flaky", "call") == 1:
            raise RuntimeError("flaky fails on its first call")
        return "flaky ok"

    def whoami(tid: str) -> str:
        key = current_idempotency_key()
        witness(url, tid, "whoami", f"key={key}")
        return f"key={key}"

    async def awhoami(tid: str) -> str:
        key = current_idempotency_key()
        await awitness(url, tid, "whoami", f"key={key}")
        return f"key={key}"

    return {
        "pay": _tool("pay", pay, apay),
        "slow": _tool("slow", slow, aslow),
        "charge": _tool("charge", charge, acharge),
        "flaky": _tool("flaky", flaky, aflaky),
        "whoami": _tool("whoami", whoami, awhoami),
    }


def build_graph(
    checkpointer: Any,
    tools: Mapping[str, StructuredTool],
    calls: Sequence[tuple[str, dict[str, Any]]],
    *,
    interrupt_before: Sequence[str] | None = None,
    **node_kwargs: Any,
) -> Any:
    """agent (one AIMessage with `calls` as parallel tool calls) -> tools -> finish.

    Tool call ids are deterministic: ``call-<i>-<name>``; every call gets the
    thread id as its `tid` arg so the tool can label its witness rows.
    """

    def agent(state: MessagesState, config: RunnableConfig) -> dict:
        tid = config["configurable"]["thread_id"]
        tool_calls = [
            {"name": name, "args": {"tid": tid, **args}, "id": f"call-{i}-{name}"}
            for i, (name, args) in enumerate(calls)
        ]
        return {"messages": [AIMessage(content="", tool_calls=tool_calls, id="ai-calls")]}

    def finish(state: MessagesState) -> dict:
        return {"messages": [AIMessage(content="done", id="ai-done")]}

    used = {name for name, _ in calls}
    node = IdempotentToolNode([tools[name] for name in sorted(used)], **node_kwargs)
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_node("finish", finish)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", "finish")
    builder.add_edge("finish", END)
    return builder.compile(
        checkpointer=checkpointer,
        interrupt_before=list(interrupt_before) if interrupt_before else None,
    )


START_INPUT = {"messages": [HumanMessage(content="go", id="human-1")]}

# Worker scenarios: what the killed process runs.
SCENARIOS: dict[str, dict[str, Any]] = {
    # pay finishes at once; slow keeps the tools step open so nothing is checkpointed.
    "pay_and_slow": {
        "calls": [("pay", {"amount": 100}), ("slow", {})],
        "tools": {"slow_seconds": 3600.0},
        "node": {"on_unknown": {"slow": "retry"}, "lease": timedelta(seconds=2)},
    },
    # charge starts and never returns.
    "hang": {
        "calls": [("charge", {})],
        "tools": {"hang_seconds": 3600.0},
        "node": {"lease": timedelta(seconds=1)},
    },
}


def main(argv: list[str]) -> None:
    scenario_name, url, tid, kind = argv
    scenario = SCENARIOS[scenario_name]
    tools = make_tools(url, **scenario["tools"])
    config = {"configurable": {"thread_id": tid}}
    if kind == "sync":
        with ColosseumSaver.from_conn_string(url, pool_size=4) as saver:
            graph = build_graph(saver, tools, scenario["calls"], **scenario["node"])
            graph.invoke(START_INPUT, config)
    else:

        async def run() -> None:
            async with AsyncColosseumSaver.from_conn_string(url, pool_size=4) as saver:
                graph = build_graph(saver, tools, scenario["calls"], **scenario["node"])
                await graph.ainvoke(START_INPUT, config)

        asyncio.run(run())


if __name__ == "__main__":
    main(sys.argv[1:])
