"""IdempotentToolNode: a drop-in ToolNode whose tools run once per idempotency key.

Functional tests against the real Postgres ledger, sync and async:

* drop-in equivalence with `ToolNode` (same final messages for the same graph);
* once only: replaying a checkpoint before the tools node does not call the tool again;
* idempotency keys: default, `key_without_call_id`, custom, `current_idempotency_key()`;
* ledger rows: their columns, `delete_thread`, `prune`, the status CHECK;
* configuration errors: `LedgerMissingError`, `wrap_tool_call`.

Crashes, leases and races are covered in `test_tool_faults.py`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode
from langgraph.runtime import DEFAULT_RUNTIME
from langgraph.types import Command, Send
from psycopg.rows import dict_row

from langgraph_colosseum import (
    AsyncColosseumSaver,
    ColosseumSaver,
    IdempotentToolNode,
    LedgerMissingError,
    current_idempotency_key,
)
from langgraph_colosseum._core.ledger import ToolCallIdentity, default_key, key_without_call_id
from tests.conftest import connection_options

MODES = ["sync", "async"]

TRUNCATE = (
    "TRUNCATE colosseum_checkpoints, colosseum_channel_values, colosseum_writes, "
    "colosseum_delta_histories, colosseum_tool_calls, colosseum_tombstones, "
    "colosseum_deleted_threads, colosseum_deleted_runs, colosseum_thread_lineage"
)

# ----------------------------------------------------------------- tools

# Every tool execution is recorded here (not through the ledger), so a test can
# tell whether the tool really ran.
CALLS: list[tuple[str, Any]] = []
_CALLS_LOCK = threading.Lock()


def record(name: str, args: Any) -> None:
    with _CALLS_LOCK:
        CALLS.append((name, args))


def calls_of(name: str) -> list[Any]:
    return [args for n, args in CALLS if n == name]


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    CALLS.clear()


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    record("add", (a, b))
    return a + b


@tool
def shout(text: str) -> str:
    """Upper-case a text."""
    record("shout", text)
    return text.upper()


@tool
def boom(x: int) -> str:
    """Always fails."""
    record("boom", x)
    raise ValueError(f"boom {x}")


@tool
def set_note(note: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command:
    """Set the note and answer with a ToolMessage, through a Command."""
    record("set_note", note)
    return Command(
        update={
            "note": note,
            "messages": [ToolMessage(f"note set to {note}", tool_call_id=tool_call_id)],
        }
    )


@tool
def peek(prefix: str, state: Annotated[dict, InjectedState]) -> str:
    """Describe the state it was given."""
    record("peek", prefix)
    kinds = ",".join(m.type for m in state["messages"])
    return f"{prefix}: {len(state['messages'])} messages ({kinds}) note={state.get('note')}"


def _whoami_sync(label: str) -> str:
    record("whoami", label)
    return f"{label}={current_idempotency_key()}"


async def _whoami_async(label: str) -> str:
    record("whoami", label)
    await asyncio.sleep(0)
    return f"{label}={current_idempotency_key()}"


whoami = StructuredTool.from_function(
    func=_whoami_sync,
    coroutine=_whoami_async,
    name="whoami",
    description="Report the idempotency key of this call.",
)

ALL_TOOLS = [add, shout, boom, set_note, peek, whoami]


def call(name: str, args: dict, call_id: str) -> dict:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def ai(msg_id: str, *calls: dict) -> AIMessage:
    return AIMessage("", id=msg_id, tool_calls=[dict(c) for c in calls])


DONE = AIMessage("done", id="ai-done")

# ----------------------------------------------------------------- graphs


class State(MessagesState):
    note: str


def _agent(script: list[AIMessage]) -> Callable[[State], dict]:
    """An "LLM" that answers with the next scripted AI message."""

    def agent(state: State) -> dict:
        n = sum(isinstance(m, AIMessage) for m in state["messages"])
        return {"messages": [script[n] if n < len(script) else DONE]}

    return agent


def agent_graph(
    tools_node: ToolNode,
    checkpointer: Any,
    script: list[AIMessage],
    *,
    via: str = "edge",
) -> Any:
    """agent -> tools -> agent ... -> END, with the tools node reached by

    * "edge": a plain edge (the node gets the state dict);
    * "send": one Send per tool call carrying a ToolCallWithContext (as create_agent does);
    * "subgraph": a compiled subgraph `inner` whose only node is the tools node.
    """
    target = "inner" if via == "subgraph" else "tools"

    def route(state: State) -> Any:
        last = state["messages"][-1]
        if not last.tool_calls:
            return END
        if via == "send":
            return [
                Send(
                    "tools",
                    {"__type": "tool_call_with_context", "tool_call": c, "state": state},
                )
                for c in last.tool_calls
            ]
        return target

    builder = StateGraph(State)
    builder.add_node("agent", _agent(script))
    if via == "subgraph":
        inner = StateGraph(State)
        inner.add_node("tools", tools_node)
        inner.add_edge(START, "tools")
        inner.add_edge("tools", END)
        builder.add_node("inner", inner.compile())
    else:
        builder.add_node("tools", tools_node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, [target, END])
    builder.add_edge(target, "agent")
    return builder.compile(checkpointer=checkpointer)


def tools_then_end(tools_node: ToolNode, checkpointer: Any, message: AIMessage) -> Any:
    """agent (one AI message) -> tools -> END."""
    builder = StateGraph(State)
    builder.add_node("agent", lambda state: {"messages": [message]})
    builder.add_node("tools", tools_node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=checkpointer)


START_INPUT = {"messages": [HumanMessage("go", id="human-1")]}


def thread(tid: str) -> dict:
    return {"configurable": {"thread_id": tid}}


def normalise(messages: list[BaseMessage]) -> list[dict]:
    """Messages as comparable data; generated ToolMessage ids are dropped."""
    out = []
    for m in messages:
        item: dict[str, Any] = {"type": m.type, "content": m.content}
        if isinstance(m, ToolMessage):
            item.update(tool_call_id=m.tool_call_id, name=m.name, status=m.status)
        else:
            item["id"] = m.id
        if isinstance(m, AIMessage):
            item["tool_calls"] = [(c["name"], c["args"], c["id"]) for c in m.tool_calls]
        out.append(item)
    return out


def comparable(values: dict) -> dict:
    return {"messages": normalise(values["messages"]), "note": values.get("note")}


# ----------------------------------------------------------------- environment


@dataclass
class Env:
    """One saver and the graph API of one mode (blocking or asyncio)."""

    mode: str
    saver: Any
    url: str

    async def invoke(self, graph: Any, input: Any, config: dict) -> Any:
        if self.mode == "sync":
            return graph.invoke(input, config)
        return await graph.ainvoke(input, config)

    async def node_invoke(self, node: Any, input: Any, config: dict) -> Any:
        if self.mode == "sync":
            return node.invoke(input, config)
        return await node.ainvoke(input, config)

    async def state(self, graph: Any, config: dict) -> Any:
        if self.mode == "sync":
            return graph.get_state(config)
        return await graph.aget_state(config)

    async def history(self, graph: Any, config: dict) -> list:
        if self.mode == "sync":
            return list(graph.get_state_history(config))
        return [s async for s in graph.aget_state_history(config)]

    async def delete_thread(self, tid: str) -> None:
        if self.mode == "sync":
            self.saver.delete_thread(tid)
        else:
            await self.saver.adelete_thread(tid)

    async def prune(self, tids: list[str]) -> None:
        if self.mode == "sync":
            self.saver.prune(tids)
        else:
            await self.saver.aprune(tids)

    def rows(self, tid: str | None = None) -> list[dict]:
        return ledger_rows(self.url, tid)


def ledger_rows(url: str, tid: str | None = None) -> list[dict]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        if tid is None:
            return conn.execute(
                "SELECT * FROM colosseum_tool_calls ORDER BY thread_id, tool_call_id"
            ).fetchall()
        return conn.execute(
            "SELECT * FROM colosseum_tool_calls WHERE thread_id = %s ORDER BY tool_call_id",
            (tid,),
        ).fetchall()


@pytest.fixture(params=[f"{m}-{via}" for via in ("postgres", "pgbouncer") for m in MODES])
async def env(request: pytest.FixtureRequest, pg_url: str) -> AsyncIterator[Env]:
    """Each driver on Postgres, and through PgBouncer in transaction mode (the ledger's
    claims and leases are rows, so a tool still runs once)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(TRUNCATE)
    mode, via = request.param.split("-")
    url, options = connection_options(via, pg_url, request)
    if mode == "sync":
        with ColosseumSaver.from_conn_string(url, pool_size=4, **options) as saver:
            yield Env("sync", saver, pg_url)
    else:
        async with AsyncColosseumSaver.from_conn_string(url, pool_size=4, **options) as saver:
            yield Env("async", saver, pg_url)


# ============================================================ 1. drop-in equivalence

SCENARIOS: dict[str, dict[str, Any]] = {
    "single": {"script": [ai("ai-1", call("add", {"a": 2, "b": 3}, "c1"))]},
    "parallel": {
        "script": [
            ai(
                "ai-1",
                call("add", {"a": 1, "b": 1}, "c1"),
                call("shout", {"text": "hey"}, "c2"),
                call("add", {"a": 5, "b": 7}, "c3"),
                call("peek", {"prefix": "p"}, "c4"),
            )
        ]
    },
    "command": {
        "script": [
            ai("ai-1", call("set_note", {"note": "blue"}, "c1")),
            ai("ai-2", call("peek", {"prefix": "after"}, "c2")),
        ]
    },
    "command_and_message_in_parallel": {
        "script": [
            ai(
                "ai-1",
                call("set_note", {"note": "green"}, "c1"),
                call("add", {"a": 4, "b": 4}, "c2"),
            )
        ]
    },
    # The default handler answers invalid arguments with an error ToolMessage.
    "invalid_args_default_handler": {
        "script": [
            ai(
                "ai-1",
                call("add", {"a": "not a number", "b": 2}, "c1"),
                call("add", {"a": 1, "b": 2}, "c2"),
            )
        ]
    },
    # handle_tool_errors=True answers any exception with an error ToolMessage.
    "error_handled": {
        "options": {"handle_tool_errors": True},
        "script": [ai("ai-1", call("boom", {"x": 1}, "c1"), call("add", {"a": 1, "b": 2}, "c2"))],
    },
    "error_message_string": {
        "options": {"handle_tool_errors": "the tool broke"},
        "script": [ai("ai-1", call("boom", {"x": 2}, "c1"))],
    },
    "unknown_tool": {"script": [ai("ai-1", call("no_such_tool", {"q": 1}, "c1"))]},
    "injected_state": {
        "script": [
            ai("ai-1", call("peek", {"prefix": "first"}, "c1")),
            ai("ai-2", call("peek", {"prefix": "second"}, "c2")),
        ]
    },
    "send": {
        "via": "send",
        "script": [
            ai(
                "ai-1",
                call("add", {"a": 10, "b": 20}, "c1"),
                call("peek", {"prefix": "sent"}, "c2"),
                call("set_note", {"note": "sent"}, "c3"),
            )
        ],
    },
    "subgraph": {
        "via": "subgraph",
        "script": [
            ai("ai-1", call("add", {"a": 3, "b": 4}, "c1"), call("peek", {"prefix": "s"}, "c2")),
            ai("ai-2", call("set_note", {"note": "deep"}, "c3")),
        ],
    },
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_drop_in_equivalence(env: Env, scenario: str) -> None:
    spec = SCENARIOS[scenario]
    via, options = spec.get("via", "edge"), spec.get("options", {})
    reference = agent_graph(
        ToolNode(ALL_TOOLS, **options), InMemorySaver(), spec["script"], via=via
    )
    subject = agent_graph(
        IdempotentToolNode(ALL_TOOLS, **options), env.saver, spec["script"], via=via
    )
    tid = f"equiv-{scenario}"

    expected = await env.invoke(reference, START_INPUT, thread(tid))
    reference_calls = list(CALLS)
    CALLS.clear()
    got = await env.invoke(subject, START_INPUT, thread(tid))

    assert comparable(got) == comparable(expected)
    assert sorted(CALLS, key=repr) == sorted(reference_calls, key=repr)
    # The persisted state agrees with the returned one.
    assert comparable((await env.state(subject, thread(tid))).values) == comparable(expected)
    # One ledger row per tool call (an unknown tool name too: ToolNode lets the
    # wrapper see it). A call answered with an error ToolMessage is FAILED.
    rows = {r["tool_call_id"]: r for r in env.rows(tid)}
    answers = {m.tool_call_id: m for m in got["messages"] if isinstance(m, ToolMessage)}
    assert set(rows) == set(answers)
    for call_id, row in rows.items():
        failed = answers[call_id].status == "error"
        assert row["status"] == ("FAILED" if failed else "SUCCESS"), call_id
        assert row["attempts"] == 1
        if failed:
            assert row["error"] == answers[call_id].content


@pytest.mark.parametrize("handling", ["default", "disabled"])
async def test_equivalence_tool_error_propagates(env: Env, handling: str) -> None:
    """The default handler re-raises a tool's own exception; False never handles."""
    options = {} if handling == "default" else {"handle_tool_errors": False}
    script = [ai("ai-1", call("boom", {"x": 7}, "c1"))]
    reference = agent_graph(ToolNode(ALL_TOOLS, **options), InMemorySaver(), script)
    subject = agent_graph(IdempotentToolNode(ALL_TOOLS, **options), env.saver, script)
    with pytest.raises(ValueError) as expected:
        await env.invoke(reference, START_INPUT, thread("raise"))
    with pytest.raises(ValueError) as got:
        await env.invoke(subject, START_INPUT, thread("raise"))
    assert type(got.value) is type(expected.value)
    assert str(got.value) == str(expected.value) == "boom 7"
    assert calls_of("boom") == [7, 7]
    [row] = env.rows("raise")
    assert row["status"] == "FAILED"
    assert row["error"] == "ValueError: boom 7"
    assert row["output"] is None
    assert row["completed_at"] is not None


async def test_equivalence_custom_error_handler(env: Env) -> None:
    def handler(e: ValueError) -> str:
        return f"handled: {e}"

    script = [ai("ai-1", call("boom", {"x": 3}, "c1"))]
    reference = agent_graph(
        ToolNode(ALL_TOOLS, handle_tool_errors=handler), InMemorySaver(), script
    )
    subject = agent_graph(
        IdempotentToolNode(ALL_TOOLS, handle_tool_errors=handler), env.saver, script
    )
    expected = await env.invoke(reference, START_INPUT, thread("handler"))
    got = await env.invoke(subject, START_INPUT, thread("handler"))
    assert comparable(got) == comparable(expected)
    assert got["messages"][2].content == "handled: boom 3"
    assert got["messages"][2].status == "error"


async def test_direct_invocation_input_forms(env: Env) -> None:
    """The node invoked on its own: list of messages, {"messages": [...]}, list of tool calls."""
    message = ai("ai-1", call("add", {"a": 1, "b": 2}, "d1"), call("shout", {"text": "x"}, "d2"))
    inputs = {
        "messages_list": [HumanMessage("hi", id="h"), message],
        "messages_dict": {"messages": [HumanMessage("hi", id="h"), message]},
        "tool_calls": [call("add", {"a": 1, "b": 2}, "d1"), call("shout", {"text": "x"}, "d2")],
    }
    reference = ToolNode(ALL_TOOLS)
    subject = IdempotentToolNode(ALL_TOOLS, ledger=env.saver)
    for form, value in inputs.items():
        tid = f"direct-{form}"
        # Outside a graph, ToolNode needs a Runtime in the config (plain ToolNode too).
        config = {"configurable": {"thread_id": tid, "__pregel_runtime": DEFAULT_RUNTIME}}
        CALLS.clear()
        expected = await env.node_invoke(reference, value, config)
        got = await env.node_invoke(subject, value, config)
        assert type(got) is type(expected), form
        if isinstance(expected, dict):
            assert set(got) == set(expected) == {"messages"}
            expected, got = expected["messages"], got["messages"]
        assert normalise(got) == normalise(expected), form
        assert [m.content for m in got] == ["3", "X"]
        assert len(calls_of("add")) == 2  # once by each node
        # Invoking again is answered from the ledger.
        again = await env.node_invoke(subject, value, config)
        if isinstance(again, dict):
            again = again["messages"]
        assert normalise(again) == normalise(got)
        assert len(calls_of("add")) == 2
        rows = env.rows(tid)
        assert [(r["tool_call_id"], r["checkpoint_ns"], r["task_id"]) for r in rows] == [
            ("d1", "", None),
            ("d2", "", None),
        ]


async def test_subgraph_ledger_namespace_has_no_task_ids(env: Env) -> None:
    script = SCENARIOS["subgraph"]["script"]
    graph = agent_graph(IdempotentToolNode(ALL_TOOLS), env.saver, script, via="subgraph")
    await env.invoke(graph, START_INPUT, thread("sub"))
    rows = env.rows("sub")
    assert [r["tool_call_id"] for r in rows] == ["c1", "c2", "c3"]
    assert {r["checkpoint_ns"] for r in rows} == {"inner|tools"}
    for r in rows:
        identity = ToolCallIdentity(
            "sub", "inner|tools", r["tool_name"], r["input"], r["tool_call_id"]
        )
        assert r["idempotency_key"] == default_key(identity)


async def test_top_level_ledger_namespace_is_node_name(env: Env) -> None:
    graph = tools_then_end(
        IdempotentToolNode(ALL_TOOLS), env.saver, ai("ai-1", call("add", {"a": 1, "b": 1}, "c1"))
    )
    await env.invoke(graph, START_INPUT, thread("top"))
    [row] = env.rows("top")
    assert row["checkpoint_ns"] == "tools"


# ============================================================ 2. once only on replay


def _snapshot_before_tools(history: list) -> Any:
    [before] = [s for s in history if s.next == ("tools",)]
    return before


async def test_replay_before_tools_does_not_call_again(env: Env) -> None:
    message = ai(
        "ai-1",
        call("add", {"a": 20, "b": 22}, "c1"),
        call("set_note", {"note": "once"}, "c2"),
        call("whoami", {"label": "k"}, "c3"),
    )
    graph = tools_then_end(IdempotentToolNode(ALL_TOOLS), env.saver, message)
    first = await env.invoke(graph, START_INPUT, thread("replay"))
    assert len(CALLS) == 3
    rows_before = env.rows("replay")

    before = _snapshot_before_tools(await env.history(graph, thread("replay")))
    replayed = await env.invoke(graph, None, before.config)

    assert len(CALLS) == 3, CALLS  # no tool ran again
    assert comparable(replayed) == comparable(first)
    assert replayed["note"] == "once"
    assert [m.content for m in replayed["messages"][2:]] == [
        "42",
        "note set to once",
        first["messages"][4].content,
    ]
    # The ledger still has one finished attempt per call.
    rows_after = env.rows("replay")
    assert [(r["idempotency_key"], r["attempts"], r["status"]) for r in rows_after] == [
        (r["idempotency_key"], 1, "SUCCESS") for r in rows_before
    ]
    # The fork is the thread's latest state.
    assert comparable((await env.state(graph, thread("replay"))).values) == comparable(first)


@pytest.mark.parametrize(
    "case",
    [
        # handle_tool_errors=True: the tool raised, the model got an error ToolMessage.
        ("handled", {"handle_tool_errors": True}, call("boom", {"x": 9}, "c1")),
        # The default handler: invalid arguments, answered with an error ToolMessage.
        ("invalid_args", {}, call("add", {"a": "nine", "b": 1}, "c1")),
    ],
    ids=lambda case: case[0],
)
async def test_replay_of_handled_error_returns_recorded_error(env: Env, case: tuple) -> None:
    """A replay gives the graph what the first run gave it, an error answer included."""
    name, options, tool_call = case
    graph = tools_then_end(
        IdempotentToolNode(ALL_TOOLS, **options), env.saver, ai("ai-1", tool_call)
    )
    tid = f"replay-err-{name}"
    first = await env.invoke(graph, START_INPUT, thread(tid))
    assert first["messages"][-1].status == "error"
    calls_after_first = list(CALLS)
    [row] = env.rows(tid)
    assert row["status"] == "FAILED"

    before = _snapshot_before_tools(await env.history(graph, thread(tid)))
    replayed = await env.invoke(graph, None, before.config)
    assert CALLS == calls_after_first
    assert comparable(replayed) == comparable(first)


async def test_replay_in_subgraph_does_not_call_again(env: Env) -> None:
    script = [ai("ai-1", call("add", {"a": 1, "b": 2}, "c1"))]
    graph = agent_graph(IdempotentToolNode(ALL_TOOLS), env.saver, script, via="subgraph")
    first = await env.invoke(graph, START_INPUT, thread("replay-sub"))
    history = await env.history(graph, thread("replay-sub"))
    [before] = [s for s in history if s.next == ("inner",)]
    replayed = await env.invoke(graph, None, before.config)
    assert calls_of("add") == [(1, 2)]
    assert comparable(replayed) == comparable(first)


async def test_plain_tool_node_does_call_again_on_replay(env: Env) -> None:
    """The control: without the ledger, the same replay runs the tool twice."""
    graph = tools_then_end(
        ToolNode(ALL_TOOLS), env.saver, ai("ai-1", call("add", {"a": 1, "b": 2}, "c1"))
    )
    await env.invoke(graph, START_INPUT, thread("control"))
    before = _snapshot_before_tools(await env.history(graph, thread("control")))
    await env.invoke(graph, None, before.config)
    assert calls_of("add") == [(1, 2), (1, 2)]
    assert env.rows("control") == []


# ============================================================ 3. idempotency keys


async def test_default_key_differs_per_tool_call_id(env: Env) -> None:
    message = ai("ai-1", call("add", {"a": 1, "b": 2}, "c1"), call("add", {"a": 1, "b": 2}, "c2"))
    graph = tools_then_end(IdempotentToolNode(ALL_TOOLS), env.saver, message)
    out = await env.invoke(graph, START_INPUT, thread("keys"))
    assert calls_of("add") == [(1, 2), (1, 2)]
    assert [(m.tool_call_id, m.content) for m in out["messages"][2:]] == [
        ("c1", "3"),
        ("c2", "3"),
    ]
    rows = env.rows("keys")
    assert len({r["idempotency_key"] for r in rows}) == 2
    for r in rows:
        assert r["idempotency_key"] == default_key(
            ToolCallIdentity("keys", "tools", "add", {"a": 1, "b": 2}, r["tool_call_id"])
        )
    # The same call in another thread is another key.
    await env.invoke(graph, START_INPUT, thread("keys-other"))
    assert len(calls_of("add")) == 4
    assert not {r["idempotency_key"] for r in rows} & {
        r["idempotency_key"] for r in env.rows("keys-other")
    }


async def test_key_without_call_id_dedups_llm_reissue(env: Env) -> None:
    script = [
        ai("ai-1", call("add", {"a": 2, "b": 2}, "first-id")),
        # The "LLM" retries: same tool and args, a new tool_call_id, in a later step.
        ai("ai-2", call("add", {"a": 2, "b": 2}, "retry-id")),
    ]
    node = IdempotentToolNode(ALL_TOOLS, key=key_without_call_id)
    out = await env.invoke(agent_graph(node, env.saver, script), START_INPUT, thread("reissue"))

    assert calls_of("add") == [(2, 2)]  # ran once
    tool_messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    # Each AI tool call is answered by a ToolMessage carrying its own id, with the
    # recorded output as content.
    assert [(m.tool_call_id, m.content, m.name) for m in tool_messages] == [
        ("first-id", "4", "add"),
        ("retry-id", "4", "add"),
    ]
    [row] = env.rows("reissue")
    assert row["tool_call_id"] == "first-id"
    assert row["idempotency_key"] == key_without_call_id(
        ToolCallIdentity("reissue", "tools", "add", {"a": 2, "b": 2}, None)
    )
    assert row["attempts"] == 1


async def test_key_without_call_id_still_runs_different_args(env: Env) -> None:
    script = [
        ai("ai-1", call("add", {"a": 2, "b": 2}, "x1")),
        ai("ai-2", call("add", {"a": 2, "b": 3}, "x2")),
    ]
    node = IdempotentToolNode(ALL_TOOLS, key=key_without_call_id)
    out = await env.invoke(agent_graph(node, env.saver, script), START_INPUT, thread("diff"))
    assert calls_of("add") == [(2, 2), (2, 3)]
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == ["4", "5"]
    assert len(env.rows("diff")) == 2


async def test_custom_key_callable_is_used(env: Env) -> None:
    seen: list[ToolCallIdentity] = []

    def my_key(identity: ToolCallIdentity) -> str:
        seen.append(identity)
        return f"custom/{identity.thread_id}/{identity.tool_name}/{identity.tool_call_id}"

    message = ai("ai-1", call("whoami", {"label": "me"}, "k1"), call("shout", {"text": "a"}, "k2"))
    graph = tools_then_end(IdempotentToolNode(ALL_TOOLS, key=my_key), env.saver, message)
    out = await env.invoke(graph, START_INPUT, thread("custom"))

    rows = env.rows("custom")
    assert [r["idempotency_key"] for r in rows] == [
        "custom/custom/whoami/k1",
        "custom/custom/shout/k2",
    ]
    assert out["messages"][2].content == "me=custom/custom/whoami/k1"
    assert sorted((i.tool_name, i.checkpoint_ns, i.tool_call_id) for i in seen) == [
        ("shout", "tools", "k2"),
        ("whoami", "tools", "k1"),
    ]
    assert {repr(i.args) for i in seen} == {repr({"label": "me"}), repr({"text": "a"})}


async def test_current_idempotency_key_inside_and_outside(env: Env) -> None:
    assert current_idempotency_key() is None
    message = ai(
        "ai-1",
        call("whoami", {"label": "one"}, "w1"),
        call("whoami", {"label": "two"}, "w2"),
    )
    graph = tools_then_end(IdempotentToolNode(ALL_TOOLS), env.saver, message)
    out = await env.invoke(graph, START_INPUT, thread("current"))
    rows = {r["tool_call_id"]: r["idempotency_key"] for r in env.rows("current")}
    answers = {m.tool_call_id: m.content for m in out["messages"] if isinstance(m, ToolMessage)}
    assert answers == {"w1": f"one={rows['w1']}", "w2": f"two={rows['w2']}"}
    assert rows["w1"] != rows["w2"]
    assert current_idempotency_key() is None  # reset after the call

    # A plain ToolNode sets no key.
    plain = tools_then_end(ToolNode(ALL_TOOLS), InMemorySaver(), message)
    out = await env.invoke(plain, START_INPUT, thread("current-plain"))
    assert [m.content for m in out["messages"][2:]] == ["one=None", "two=None"]
    assert current_idempotency_key() is None


# ============================================================ 4. ledger rows


async def test_ledger_row_columns(env: Env) -> None:
    message = ai("ai-1", call("add", {"a": 6, "b": 7}, "r1"), call("shout", {"text": "row"}, "r2"))
    graph = tools_then_end(IdempotentToolNode(ALL_TOOLS), env.saver, message)
    await env.invoke(graph, START_INPUT, thread("rows"))
    history = await env.history(graph, thread("rows"))
    before = _snapshot_before_tools(history)
    [tools_task] = before.tasks

    rows = env.rows("rows")
    assert [r["tool_call_id"] for r in rows] == ["r1", "r2"]
    for row, (name, args, content) in zip(
        rows, [("add", {"a": 6, "b": 7}, "13"), ("shout", {"text": "row"}, "ROW")]
    ):
        assert row["thread_id"] == "rows"
        assert row["checkpoint_ns"] == "tools"
        assert row["task_id"] == tools_task.id
        assert row["tool_name"] == name
        assert row["input"] == args
        assert row["output"] is not None
        assert content in repr(row["output"])
        assert row["status"] == "SUCCESS"
        assert row["attempts"] == 1
        assert row["error"] is None
        assert row["lease_owner"]
        assert row["started_at"] is not None
        assert row["completed_at"] is not None
        assert row["started_at"] <= row["completed_at"]
        assert row["idempotency_key"] == default_key(
            ToolCallIdentity("rows", "tools", name, args, row["tool_call_id"])
        )


async def test_delete_thread_deletes_ledger_rows_prune_keeps_them(env: Env) -> None:
    node = IdempotentToolNode(ALL_TOOLS)
    script = [
        ai("ai-1", call("add", {"a": 1, "b": 1}, "p1")),
        ai("ai-2", call("shout", {"text": "p"}, "p2")),
    ]
    graph = agent_graph(node, env.saver, script)
    for tid in ("keep", "gone", "pruned"):
        await env.invoke(graph, START_INPUT, thread(tid))
        assert len(env.rows(tid)) == 2

    await env.delete_thread("gone")
    assert env.rows("gone") == []
    assert len(env.rows("keep")) == 2
    assert len(env.rows("pruned")) == 2

    history_len = len(await env.history(graph, thread("pruned")))
    await env.prune(["pruned"])
    assert len(await env.history(graph, thread("pruned"))) < history_len  # prune did prune
    assert len(env.rows("pruned")) == 2  # but the ledger stays
    assert len(env.rows("keep")) == 2

    # After delete_thread the same calls run again (the ledger forgot them).
    CALLS.clear()
    await env.invoke(graph, START_INPUT, thread("gone"))
    assert calls_of("add") == [(1, 1)]
    assert calls_of("shout") == ["p"]


def test_ledger_status_check_constraint(saver: ColosseumSaver, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(
                "INSERT INTO colosseum_tool_calls (thread_id, idempotency_key, tool_name, status) "
                "VALUES ('t', 'bogus-key', 'add', 'DONE')"
            )
        conn.execute(
            "INSERT INTO colosseum_tool_calls (thread_id, idempotency_key, tool_name, status) "
            "VALUES ('t', 'good-key', 'add', 'PENDING')"
        )
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(
                "UPDATE colosseum_tool_calls SET status = 'success' WHERE idempotency_key = 'good-key'"
            )
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO colosseum_tool_calls (thread_id, idempotency_key, tool_name, status) "
                "VALUES ('other-thread', 'good-key', 'add', 'PENDING')"
            )
        rows = conn.execute("SELECT idempotency_key, status FROM colosseum_tool_calls").fetchall()
    assert rows == [("good-key", "PENDING")]


# ============================================================ 5. LedgerMissingError


async def test_ledger_missing_with_in_memory_checkpointer(env: Env) -> None:
    graph = tools_then_end(
        IdempotentToolNode(ALL_TOOLS),
        InMemorySaver(),
        ai("ai-1", call("add", {"a": 1, "b": 1}, "m1")),
    )
    with pytest.raises(LedgerMissingError, match="InMemorySaver"):
        await env.invoke(graph, START_INPUT, thread("missing"))
    assert calls_of("add") == []
    assert env.rows() == []


async def test_ledger_errors_reach_the_graph_whatever_handle_tool_errors(env: Env) -> None:
    """handle_tool_errors turns tool errors into messages for the model; a missing
    ledger is the operator's to fix, so it is raised, never shown to the LLM."""
    node = IdempotentToolNode(ALL_TOOLS, handle_tool_errors=True)
    message = ai("ai-1", call("add", {"a": 1, "b": 1}, "m1"))
    with pytest.raises(LedgerMissingError, match="InMemorySaver"):
        await env.invoke(tools_then_end(node, InMemorySaver(), message), START_INPUT, thread("h"))
    assert calls_of("add") == []


async def test_ledger_missing_without_error_handling(env: Env) -> None:
    message = ai("ai-1", call("add", {"a": 1, "b": 1}, "m1"))
    node = IdempotentToolNode(ALL_TOOLS, handle_tool_errors=False)
    with pytest.raises(LedgerMissingError, match="InMemorySaver"):
        await env.invoke(tools_then_end(node, InMemorySaver(), message), START_INPUT, thread("m"))
    # No checkpointer at all.
    with pytest.raises(LedgerMissingError, match="NoneType"):
        await env.invoke(tools_then_end(node, None, message), START_INPUT, thread("m"))
    # A ledger but no thread_id.
    direct = IdempotentToolNode(ALL_TOOLS, ledger=env.saver, handle_tool_errors=False)
    with pytest.raises(LedgerMissingError, match="thread_id"):
        await env.node_invoke(
            direct,
            [call("add", {"a": 1, "b": 1}, "m1")],
            {"configurable": {"__pregel_runtime": DEFAULT_RUNTIME}},
        )
    assert calls_of("add") == []
    assert env.rows() == []


async def test_explicit_ledger_with_in_memory_checkpointer(env: Env) -> None:
    checkpointer = InMemorySaver()
    message = ai("ai-1", call("add", {"a": 8, "b": 9}, "e1"))
    graph = tools_then_end(IdempotentToolNode(ALL_TOOLS, ledger=env.saver), checkpointer, message)
    first = await env.invoke(graph, START_INPUT, thread("explicit"))
    assert first["messages"][-1].content == "17"
    [row] = env.rows("explicit")
    assert (row["tool_name"], row["tool_call_id"], row["status"]) == ("add", "e1", "SUCCESS")
    # The checkpoints live in memory, the ledger in Postgres; replay still runs once.
    before = _snapshot_before_tools(await env.history(graph, thread("explicit")))
    replayed = await env.invoke(graph, None, before.config)
    assert calls_of("add") == [(8, 9)]
    assert comparable(replayed) == comparable(first)


# ============================================================ 6. construction


@pytest.mark.parametrize("kwarg", ["wrap_tool_call", "awrap_tool_call"])
def test_wrap_tool_call_is_rejected(kwarg: str) -> None:
    def wrapper(request: Any, execute: Any) -> Any:
        return execute(request)

    with pytest.raises(TypeError, match="wrap_tool_call"):
        IdempotentToolNode(ALL_TOOLS, **{kwarg: wrapper})
    # ToolNode itself accepts it.
    ToolNode(ALL_TOOLS, **{kwarg: wrapper})


def test_is_a_tool_node_with_the_same_options() -> None:
    node = IdempotentToolNode(ALL_TOOLS, name="my_tools", messages_key="msgs")
    assert isinstance(node, ToolNode)
    assert node.name == "my_tools"
    assert set(node.tools_by_name) == {t.name for t in ALL_TOOLS}
