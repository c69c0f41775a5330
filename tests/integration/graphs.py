"""Graphs, drivers and a normaliser for the differential tests.

Each graph builder takes a `Counter` that its nodes bump on every execution,
so a test can check which nodes re-ran. Every message gets an explicit,
deterministic id, so nothing random reaches the state except what LangGraph
itself generates (checkpoint ids, task ids, interrupt ids, timestamps); the
`Normaliser` replaces exactly those with positions.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import re
import threading
from collections import Counter
from collections.abc import Awaitable, Sequence
from typing import Annotated, Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from langgraph.types import Interrupt, PregelTask, Send, StateSnapshot, interrupt
from pydantic import BaseModel
from typing_extensions import TypedDict

T = TypeVar("T")

# --------------------------------------------------------------------- drivers


class SyncDriver:
    """The blocking graph API behind awaitable methods, so one scenario serves both.

    Its coroutines never suspend: `run_sync` drives a scenario to completion
    without an event loop.
    """

    kind = "sync"

    def __init__(self, graph: Any, saver: Any) -> None:
        self.graph = graph
        self.saver = saver

    async def invoke(self, input: Any, config: dict, **kwargs: Any) -> Any:
        return self.graph.invoke(input, config, **kwargs)

    async def stream(self, input: Any, config: dict, **kwargs: Any) -> list:
        return list(self.graph.stream(input, config, **kwargs))

    async def get_state(self, config: dict, *, subgraphs: bool = False) -> StateSnapshot:
        return self.graph.get_state(config, subgraphs=subgraphs)

    async def history(self, config: dict) -> list[StateSnapshot]:
        return list(self.graph.get_state_history(config))

    async def update_state(self, config: dict, values: Any, as_node: str | None = None) -> dict:
        return self.graph.update_state(config, values, as_node=as_node)

    async def prune(self, thread_ids: Sequence[str]) -> None:
        self.saver.prune(thread_ids)

    async def copy_thread(self, source: str, target: str) -> None:
        self.saver.copy_thread(source, target)


class AsyncDriver(SyncDriver):
    """The asyncio graph API: ainvoke, astream, aget_state, ..."""

    kind = "async"

    async def invoke(self, input: Any, config: dict, **kwargs: Any) -> Any:
        return await self.graph.ainvoke(input, config, **kwargs)

    async def stream(self, input: Any, config: dict, **kwargs: Any) -> list:
        return [chunk async for chunk in self.graph.astream(input, config, **kwargs)]

    async def get_state(self, config: dict, *, subgraphs: bool = False) -> StateSnapshot:
        return await self.graph.aget_state(config, subgraphs=subgraphs)

    async def history(self, config: dict) -> list[StateSnapshot]:
        return [s async for s in self.graph.aget_state_history(config)]

    async def update_state(self, config: dict, values: Any, as_node: str | None = None) -> dict:
        return await self.graph.aupdate_state(config, values, as_node=as_node)

    async def prune(self, thread_ids: Sequence[str]) -> None:
        await self.saver.aprune(thread_ids)

    async def copy_thread(self, source: str, target: str) -> None:
        await self.saver.acopy_thread(source, target)


def run_sync(coro: Awaitable[T]) -> T:
    """Run a coroutine that never suspends (a scenario on a `SyncDriver`)."""
    try:
        coro.send(None)  # type: ignore[attr-defined]
    except StopIteration as done:
        return done.value
    coro.close()  # type: ignore[attr-defined]
    raise RuntimeError("a SyncDriver scenario awaited something that suspends")


# --------------------------------------------------------------------- normaliser

UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
HEX32_RE = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")


class Normaliser:
    """Turns snapshots into plain comparable data, ids replaced by positions.

    * a checkpoint id of the given history becomes `<ckpt i>`, `i` its index in
      the history list (newest first), wherever it appears (configs, parent
      configs, metadata, inside strings);
    * `created_at` becomes `<time r>`, `r` its rank among the history's
      timestamps, newest first; so in a well-ordered history `<time i>` sits
      next to `<ckpt i>`;
    * every other generated id (task ids, interrupt ids, subgraph checkpoint
      ids, run ids: uuid-shaped or 32-hex strings) becomes `<id n>`, numbered
      in order of first appearance. The same raw id always maps to the same
      label, so a link that points at the wrong task or checkpoint shows up.

    Everything else (values, messages with their explicit ids, names, paths,
    errors, interrupt values, metadata) is kept as it is.
    """

    def __init__(self, history: Sequence[StateSnapshot] = ()) -> None:
        self._labels: dict[str, str] = {}
        self._counter = itertools.count()
        for pos, snapshot in enumerate(history):
            self._labels[snapshot.config["configurable"]["checkpoint_id"]] = f"<ckpt {pos}>"
        stamps = sorted({s.created_at for s in history if s.created_at}, reverse=True)
        self._times = {ts: f"<time {rank}>" for rank, ts in enumerate(stamps)}

    def _label(self, raw: str) -> str:
        if raw not in self._labels:
            self._labels[raw] = f"<id {next(self._counter)}>"
        return self._labels[raw]

    def _str(self, value: str) -> str:
        value = UUID_RE.sub(lambda m: self._label(m.group(0)), value)
        return HEX32_RE.sub(lambda m: self._label(m.group(0)), value)

    def _time(self, value: str | None) -> str | None:
        if value is None:
            return None
        return self._times.get(value, "<time not in history>")

    def __call__(self, obj: Any) -> Any:
        if isinstance(obj, StateSnapshot):
            return {
                "values": self(obj.values),
                "next": tuple(obj.next),
                "config": self(_config(obj.config)),
                # Metadata is JSON-like: InMemorySaver round-trips it through
                # msgpack and PostgresSaver through JSON, both turning tuples
                # into lists. Only that distinction is dropped here.
                "metadata": self(tuples_as_lists(obj.metadata)),
                "created_at": self._time(obj.created_at),
                "parent_config": self(_config(obj.parent_config)),
                "tasks": [self(t) for t in obj.tasks],
                "interrupts": [self(i) for i in obj.interrupts],
            }
        if isinstance(obj, PregelTask):
            return {
                "id": self(obj.id),
                "name": obj.name,
                "path": self(obj.path),
                "error": None if obj.error is None else self._str(repr(obj.error)),
                "interrupts": [self(i) for i in obj.interrupts],
                "state": self(_config(obj.state)),
                "result": self(obj.result),
            }
        if isinstance(obj, Interrupt):
            return {
                "interrupt": self(obj.value),
                "id": self(obj.id),
                "response_schema": self(obj.response_schema),
            }
        if isinstance(obj, Send):
            return {"send": obj.node, "arg": self(obj.arg)}
        if isinstance(obj, BaseMessage):
            return {"message": type(obj).__name__, **self(obj.model_dump())}
        if isinstance(obj, BaseException):
            return {"exception": self._str(repr(obj))}
        if isinstance(obj, BaseModel):
            return {"model": type(obj).__name__, **self(obj.model_dump())}
        if isinstance(obj, dict):
            return {self(k): self(v) for k, v in obj.items()}
        if isinstance(obj, tuple):
            return tuple(self(x) for x in obj)
        if isinstance(obj, list):
            return [self(x) for x in obj]
        if isinstance(obj, (set, frozenset)):
            return {"set": sorted((self(x) for x in obj), key=repr)}
        if isinstance(obj, str):
            return self._str(obj)
        if obj is None or isinstance(obj, (bool, int, float)):
            return obj
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            fields = {f.name: self(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
            return {"dataclass": type(obj).__name__, **fields}
        if isinstance(obj, type):
            return {"type": f"{obj.__module__}.{obj.__qualname__}"}
        return {"repr": type(obj).__name__, "value": self._str(repr(obj))}


def _config(config: Any) -> Any:
    """A config without LangGraph's runtime-only `__pregel_*` keys.

    InMemorySaver.get_tuple hands back the caller's config object as is when
    it names a checkpoint id, so runtime keys LangGraph put there (such as
    `__pregel_checkpointer`, an object with an address) leak into snapshots.
    """
    if not isinstance(config, dict) or not isinstance(config.get("configurable"), dict):
        return config
    configurable = {
        k: v for k, v in config["configurable"].items() if not k.startswith("__pregel_")
    }
    return {**config, "configurable": configurable}


def tuples_as_lists(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: tuples_as_lists(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [tuples_as_lists(v) for v in obj]
    return obj


def normalise_history(history: Sequence[StateSnapshot]) -> list[dict]:
    """A history list, every id replaced by its position in the list."""
    norm = Normaliser(history)
    return [norm(s) for s in history]


def normalise_snapshot(snapshot: StateSnapshot, history: Sequence[StateSnapshot]) -> dict:
    """A snapshot, its ids replaced by their positions in `history`."""
    return Normaliser(history)(snapshot)


# --------------------------------------------------------------------- 1. chat


class ChatState(TypedDict):
    messages: Annotated[list, add_messages]


def chat_graph(counts: Counter) -> StateGraph:
    """agent -> tools -> agent: a tool call per user turn, then an answer."""

    def agent(state: ChatState) -> dict:
        counts["agent"] += 1
        messages = state["messages"]
        n = len(messages)
        last = messages[-1]
        if isinstance(last, HumanMessage):
            return {
                "messages": [
                    AIMessage(
                        content="",
                        id=f"ai-{n}",
                        tool_calls=[
                            {
                                "name": "lookup",
                                "args": {"q": last.content, "n": n},
                                "id": f"call-{n}",
                            },
                            {"name": "clock", "args": {}, "id": f"call-{n}-b"},
                        ],
                    )
                ]
            }
        return {"messages": [AIMessage(content=f"answer after {n} messages", id=f"ai-{n}")]}

    def tools(state: ChatState) -> dict:
        counts["tools"] += 1
        calls = state["messages"][-1].tool_calls
        return {
            "messages": [
                ToolMessage(
                    content=f"{call['name']}({sorted(call['args'].items())})",
                    tool_call_id=call["id"],
                    name=call["name"],
                    id=f"tool-{call['id']}",
                )
                for call in calls
            ]
        }

    def route(state: ChatState) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    builder = StateGraph(ChatState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder


# --------------------------------------------------------------------- 2. interrupt


class ApprovalState(TypedDict):
    request: str
    decisions: Annotated[list, operator.add]
    outcome: str


def approval_graph(counts: Counter, *, questions: int = 1) -> StateGraph:
    """prepare -> approve -> act; approve asks `questions` times with `interrupt()`."""

    def prepare(state: ApprovalState) -> dict:
        counts["prepare"] += 1
        return {"decisions": [f"prepared {state['request']}"]}

    def approve(state: ApprovalState) -> dict:
        counts["approve"] += 1
        answers: list = []
        for number in range(questions):
            answers.append(
                interrupt(
                    {"question": number, "request": state["request"], "so_far": list(answers)}
                )
            )
        return {"decisions": answers}

    def act(state: ApprovalState) -> dict:
        counts["act"] += 1
        return {"outcome": " / ".join(map(str, state["decisions"]))}

    builder = StateGraph(ApprovalState)
    builder.add_node("prepare", prepare)
    builder.add_node("approve", approve)
    builder.add_node("act", act)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "approve")
    builder.add_edge("approve", "act")
    builder.add_edge("act", END)
    return builder


def two_question_approval_graph(counts: Counter) -> StateGraph:
    """The approval graph whose node calls `interrupt()` twice."""
    return approval_graph(counts, questions=2)


# --------------------------------------------------------------------- 3. subgraph


class OuterState(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]


class InnerState(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]
    draft: str


def subgraph_graph(counts: Counter) -> StateGraph:
    """outer: intro -> research (a compiled subgraph that interrupts) -> wrap."""

    def gather(state: InnerState) -> dict:
        counts["gather"] += 1
        return {"notes": [f"gathered {state['topic']}"], "draft": f"draft on {state['topic']}"}

    def review(state: InnerState) -> dict:
        counts["review"] += 1
        verdict = interrupt({"review": state["draft"], "notes": list(state["notes"])})
        return {"notes": [f"review: {verdict}"], "draft": f"{state['draft']} ({verdict})"}

    inner = StateGraph(InnerState)
    inner.add_node("gather", gather)
    inner.add_node("review", review)
    inner.add_edge(START, "gather")
    inner.add_edge("gather", "review")
    inner.add_edge("review", END)
    research = inner.compile()

    def intro(state: OuterState) -> dict:
        counts["intro"] += 1
        return {"notes": [f"intro {state['topic']}"]}

    def wrap(state: OuterState) -> dict:
        counts["wrap"] += 1
        return {"notes": [f"wrapped {len(state['notes'])} notes"]}

    outer = StateGraph(OuterState)
    outer.add_node("intro", intro)
    outer.add_node("research", research)
    outer.add_node("wrap", wrap)
    outer.add_edge(START, "intro")
    outer.add_edge("intro", "research")
    outer.add_edge("research", "wrap")
    outer.add_edge("wrap", END)
    return outer


# --------------------------------------------------------------------- 4. Send fan-out


class MapState(TypedDict):
    items: list[int]
    results: Annotated[list, operator.add]
    total: int


class WorkState(TypedDict):
    item: int


def fanout_graph(counts: Counter) -> StateGraph:
    """START -Send per item-> work -> reduce: map-reduce with operator.add."""

    def fan_out(state: MapState) -> list[Send]:
        return [Send("work", {"item": item}) for item in state["items"]]

    def work(state: WorkState) -> dict:
        counts["work"] += 1
        return {"results": [{"item": state["item"], "square": state["item"] ** 2}]}

    def reduce(state: MapState) -> dict:
        counts["reduce"] += 1
        return {"total": sum(r["square"] for r in state["results"])}

    builder = StateGraph(MapState)
    builder.add_node("work", work)
    builder.add_node("reduce", reduce)
    builder.add_conditional_edges(START, fan_out, ["work"])
    builder.add_edge("work", "reduce")
    builder.add_edge("reduce", END)
    return builder


# --------------------------------------------------------------------- 5. flaky branch


class BranchState(TypedDict):
    log: Annotated[list, operator.add]


def flaky_graph(counts: Counter) -> StateGraph:
    """START -> (steady | flaky) -> join; flaky raises on its first attempt.

    flaky waits for steady to finish before raising, so steady's writes are
    always saved as pending writes of the failed step, whatever the scheduling.
    """
    steady_done = threading.Event()

    def steady(state: BranchState) -> dict:
        counts["steady"] += 1
        steady_done.set()
        return {"log": [f"steady ran (len {len(state['log'])})"]}

    def flaky(state: BranchState) -> dict:
        counts["flaky"] += 1
        if counts["flaky"] == 1:
            steady_done.wait(timeout=10)
            raise ValueError("flaky branch failed on its first attempt")
        return {"log": [f"flaky ran on attempt {counts['flaky']}"]}

    def join(state: BranchState) -> dict:
        counts["join"] += 1
        return {"log": [f"joined {sorted(state['log'])}"]}

    builder = StateGraph(BranchState)
    builder.add_node("steady", steady)
    builder.add_node("flaky", flaky)
    builder.add_node("join", join)
    builder.add_edge(START, "steady")
    builder.add_edge(START, "flaky")
    builder.add_edge(["steady", "flaky"], "join")
    builder.add_edge("join", END)
    return builder


# --------------------------------------------------------------------- 6. time travel


class LinearState(TypedDict):
    value: int
    trail: Annotated[list, operator.add]


def linear_graph(counts: Counter) -> StateGraph:
    """a -> b -> c, each step leaving a trail."""

    def make(name: str, delta: int):
        def node(state: LinearState) -> dict:
            counts[name] += 1
            return {"value": state["value"] + delta, "trail": [f"{name}:{state['value']}"]}

        return node

    builder = StateGraph(LinearState)
    for name, delta in (("a", 1), ("b", 10), ("c", 100)):
        builder.add_node(name, make(name, delta))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    builder.add_edge("c", END)
    return builder


# --------------------------------------------------------------------- 7. DeltaChannel


class DeltaState(TypedDict):
    messages: Annotated[list, DeltaChannel(_messages_delta_reducer, snapshot_frequency=3)]
    turns: int


def delta_graph(counts: Counter) -> StateGraph:
    """A chat whose messages live in a DeltaChannel snapshotting every 3 updates."""

    def reply(state: DeltaState) -> dict:
        counts["reply"] += 1
        turn = state.get("turns", 0) + 1
        last = state["messages"][-1]
        return {
            "messages": [AIMessage(content=f"echo {last.content} (turn {turn})", id=f"ai-{turn}")],
            "turns": turn,
        }

    builder = StateGraph(DeltaState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder


# --------------------------------------------------------------------- 8. key order


def merge_dicts(old: dict, new: dict) -> dict:
    """A dict reducer: keys kept where they were, new ones appended (as `{**a, **b}`)."""
    return {**old, **new}


class OrderState(TypedDict):
    brief: Annotated[dict, merge_dicts]
    log: Annotated[list, operator.add]


def order_graph(counts: Counter) -> StateGraph:
    """plan -> ask (interrupt) -> act: every dict in an order jsonb would change.

    Longer keys come before shorter ones and equal lengths are out of byte order,
    in the state (a merged dict channel and list items), the interrupt value,
    the resume value, the writes and the run metadata.
    """

    def plan(state: OrderState) -> dict:
        counts["plan"] += 1
        return {
            "brief": {"question": "refund?", "plan": ["check", "pay"], "ctx": {"zz": 1, "a": 2}},
            "log": [{"step": "plan", "by": "planner", "at": 1}],
        }

    def ask(state: OrderState) -> dict:
        counts["ask"] += 1
        answer = interrupt({"question": state["brief"]["question"], "plan": state["brief"]["plan"]})
        return {"brief": {"verdict": answer, "plan": ["pay"]}, "log": [{"step": "ask", "id": 2}]}

    def act(state: OrderState) -> dict:
        counts["act"] += 1
        return {
            "brief": {"zulu": True, "alpha": None},
            "log": [{"step": "act", "brief": state["brief"]}],
        }

    builder = StateGraph(OrderState)
    builder.add_node("plan", plan)
    builder.add_node("ask", ask)
    builder.add_node("act", act)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "ask")
    builder.add_edge("ask", "act")
    builder.add_edge("act", END)
    return builder
