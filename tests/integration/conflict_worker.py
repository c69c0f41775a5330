"""A worker process for `test_on_conflict.py`: runs sent to it on stdin, on a
saver built with `on_conflict="raise"`, stopped where the test says.

Usage: ``python conflict_worker.py`` (then one JSON command per line on stdin).

Commands:
* ``{"cmd": "invoke", "id": ..., "url": ..., "redis": [url, prefix] | null,
  "graph": "chat" | "ask" | "pay", "tool_node": "idempotent" | "plain",
  "thread": ..., "input": {...} | null, "resume": value (optional),
  "gate_read": bool, "gate_writes": bool, "gate_put": bool, "watch_put": bool,
  "watch_resume": bool}``: in a thread of its own, invoke the
  graph (`resume`: with ``Command(resume=...)``). With "gate_read", once the run
  has read the thread's latest checkpoint it prints ``{"event": "read", "id":
  ..., "head": checkpoint id}`` and waits until ``read:<id>`` is opened; with
  "gate_writes", before the run's first put_writes of a node's output it prints
  ``{"event": "writes", "id": ...}`` and waits until ``writes:<id>`` is opened;
  "gate_put" likewise before its first put (``put``). Once the write stopped
  at "writes" is stored or refused: ``{"event": "written", "id": ...,
  "outcome": "stored" | "refused"}``. With "watch_put", the
  outcome of its first put is printed: ``{"event": "first-put", "id": ...,
  "outcome": "stored" | "refused"}``; with "watch_resume", that of its resume
  value's put_writes: ``{"event": "resume-written", "id": ..., "outcome": ...}``.
  Prints ``{"event": "done", "id": ..., "outcome": "success" | <exception
  class>, "operation": ..., "continued_from": ..., "head": ...,
  "kept_checkpoint_id": ...}`` (the last four from a ThreadConflictError).
* ``{"cmd": "open", "name": "read:<id>" | "writes:<id>" | "put:<id>"}``: let that run go on.

The graphs are here, so the test builds the same ones to prepare a thread.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import threading
import traceback
from typing import Annotated, Any

import psycopg
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_colosseum import ColosseumSaver, IdempotentToolNode, ThreadConflictError

GATE_SECONDS = 60
SIDE_EFFECTS = "conflict_test_side_effects"  # one row per call of the `pay` tool
RESUME = "__resume__"  # the channel of a resume value (LangGraph keeps its constant private)


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


class Agent(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def chat_graph(saver: Any) -> Any:
    """START -> think -> answer -> END, each appending `<last>:<node>`."""

    def think(state: Chat) -> dict:
        return {"messages": [f"{state['messages'][-1]}:think"]}

    def answer(state: Chat) -> dict:
        return {"messages": [f"{state['messages'][-1]}:answer"]}

    builder = StateGraph(Chat)
    builder.add_node("think", think)
    builder.add_node("answer", answer)
    builder.add_edge(START, "think")
    builder.add_edge("think", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def ask_graph(saver: Any) -> Any:
    """START -> ask (interrupt(); appends `answer:<resume value>`) -> after -> END."""

    def ask(state: Chat) -> dict:
        return {"messages": [f"answer:{interrupt('question?')}"]}

    def after(state: Chat) -> dict:
        return {"messages": [f"{state['messages'][-1]}:after"]}

    builder = StateGraph(Chat)
    builder.add_node("ask", ask)
    builder.add_node("after", after)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "after")
    builder.add_edge("after", END)
    return builder.compile(checkpointer=saver)


def pay_graph(saver: Any, url: str, tool_node: str) -> Any:
    """agent -> tools -> agent: the agent asks for one `pay` call per human
    message (its tool_call id derived from the message), then says "paid"."""

    @tool
    def pay(amount: int) -> str:
        """Pay `amount`: a side effect, counted in Postgres."""
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"INSERT INTO {SIDE_EFFECTS} (amount) VALUES (%s)", (amount,))
        return f"paid {amount}"

    def agent(state: Agent) -> dict:
        last = state["messages"][-1]
        if isinstance(last, HumanMessage):
            call = {"name": "pay", "args": {"amount": 5}, "id": f"call-{last.content}"}
            return {"messages": [AIMessage(content="", tool_calls=[call], id=f"ai-{last.id}")]}
        return {"messages": [AIMessage(content="paid", id=f"ai-done-{last.id}")]}

    def route(state: Agent) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    tools = (
        IdempotentToolNode([pay], ledger=saver) if tool_node == "idempotent" else ToolNode([pay])
    )
    builder = StateGraph(Agent)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def graph_for(saver: Any, command: dict) -> Any:
    if command["graph"] == "chat":
        return chat_graph(saver)
    if command["graph"] == "ask":
        return ask_graph(saver)
    return pay_graph(saver, command["url"], command.get("tool_node", "idempotent"))


_print_lock = threading.Lock()
_gates: dict[str, threading.Event] = {}
_gates_lock = threading.Lock()
_savers: dict[str, Any] = {}


def say(**event: Any) -> None:
    with _print_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def gate(name: str) -> threading.Event:
    """The event named `name` (made on first use): `open:<stop>:<id>` lets a
    stopped run go on, `at:<stop>:<id>` says it has stopped there."""
    with _gates_lock:
        return _gates.setdefault(name, threading.Event())


class GatedSaver(ColosseumSaver):
    """Stops a run after its read of the latest root checkpoint ("read"),
    before its first put_writes of a node's output ("writes"), and before its
    first put ("put"), until the gate is opened. LangGraph sends writes in the
    background: a run stopped at "writes" goes on to its next step; one
    stopped at "put" (durability="sync") does not. One run at a time per
    saver: `stops` names the run to stop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stops: dict[str, str | None] = {"read": None, "writes": None, "put": None}
        self.watched: str | None = None  # the run whose first put's outcome is told
        self.resume_watched: str | None = None  # the run whose resume write's outcome is told
        self._stops_lock = threading.Lock()

    def _stop(self, kind: str, **details: Any) -> str | None:
        """Stop here if the run to stop is set for `kind`; its id (else None)."""
        # LangGraph sends put_writes from threads of its own: the saver, not
        # the thread, knows which run to stop
        with self._stops_lock:
            run_id, self.stops[kind] = self.stops[kind], None
        if run_id is None:
            return None
        say(event=kind, id=run_id, **details)
        gate(f"at:{kind}:{run_id}").set()
        if not gate(f"open:{kind}:{run_id}").wait(GATE_SECONDS):
            raise TimeoutError(f"the {kind} gate of {run_id} was never opened")
        return run_id

    def get_tuple(self, config: Any) -> Any:
        found = super().get_tuple(config)
        configurable = config.get("configurable", {})
        if not configurable.get("checkpoint_id") and not configurable.get("checkpoint_ns"):
            self._stop("read", head=found.checkpoint["id"] if found else None)
        return found

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        self._stop("put")
        with self._stops_lock:
            watched, self.watched = self.watched, None
        try:
            stored = super().put(config, checkpoint, metadata, new_versions)
        except ThreadConflictError:
            if watched:
                say(event="first-put", id=watched, outcome="refused")
                gate(f"at:first-put:{watched}").set()
            raise
        if watched:
            say(event="first-put", id=watched, outcome="stored")
            gate(f"at:first-put:{watched}").set()
        return stored

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        stopped = watched = None
        if any(not channel.startswith("__") for channel, _ in writes):
            stopped = self._stop("writes")
        if any(channel == RESUME for channel, _ in writes):
            with self._stops_lock:
                watched, self.resume_watched = self.resume_watched, None
        try:
            super().put_writes(config, writes, task_id, task_path)
        except ThreadConflictError:
            if stopped:  # the stopped write's outcome, once it has one
                say(event="written", id=stopped, outcome="refused")
                gate(f"at:written:{stopped}").set()
            if watched:
                say(event="resume-written", id=watched, outcome="refused")
            raise
        if stopped:
            say(event="written", id=stopped, outcome="stored")
            gate(f"at:written:{stopped}").set()
        if watched:
            say(event="resume-written", id=watched, outcome="stored")


def saver_for(url: str, cache: list[str] | None) -> Any:
    key = json.dumps([url, cache])
    if key not in _savers:
        options = {"redis_url": cache[0], "cache_prefix": cache[1]} if cache else {}
        context = GatedSaver.from_conn_string(url, pool_size=4, on_conflict="raise", **options)
        # Both kept for the process's life: a collected context closes its pool.
        _savers[key] = (context, context.__enter__())
    return _savers[key][1]


def run(saver: GatedSaver, command: dict) -> dict:
    """Invoke as `command` says (see the module docstring); the "done" event."""
    details: dict[str, Any] = {}
    try:
        graph = graph_for(saver, command)
        with saver._stops_lock:
            saver.stops["read"] = command["id"] if command.get("gate_read") else None
            saver.stops["writes"] = command["id"] if command.get("gate_writes") else None
            saver.stops["put"] = command["id"] if command.get("gate_put") else None
            saver.watched = command["id"] if command.get("watch_put") else None
            saver.resume_watched = command["id"] if command.get("watch_resume") else None
        config = {"configurable": {"thread_id": command["thread"]}}
        payload = Command(resume=command["resume"]) if "resume" in command else command["input"]
        graph.invoke(payload, config, durability="sync")
        outcome = "success"
    except ThreadConflictError as exc:
        outcome = type(exc).__name__
        details = {
            "operation": exc.operation,
            "continued_from": exc.continued_from,
            "head": exc.head,
            "kept_checkpoint_id": exc.kept_checkpoint_id,
        }
    except Exception as exc:
        outcome = type(exc).__name__
        traceback.print_exc()
    return {"event": "done", "id": command["id"], "outcome": outcome, **details}


def invoke(command: dict) -> None:
    say(**run(saver_for(command["url"], command.get("redis")), command))


def main() -> None:
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "invoke":
            threading.Thread(target=invoke, args=(command,), daemon=True).start()
        elif command["cmd"] == "open":
            gate(f"open:{command['name']}").set()
    sys.stdout.flush()
    os._exit(0)  # stdin closed: the test is over


if __name__ == "__main__":
    main()
