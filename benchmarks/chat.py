"""chat-200 and chat-200-delta: one thread, 200 turns of a 2-node chat graph."""

from __future__ import annotations

import gc
import random
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages

from benchmarks.common import OURS_HOT, Bench, Meter, Skipped, letters, log, sync_saver


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class DeltaChatState(TypedDict):
    messages: Annotated[list, DeltaChannel(_messages_delta_reducer)]


def chat_graph(saver: Any, rng: random.Random, delta: bool) -> Any:
    builder = StateGraph(DeltaChatState if delta else ChatState)
    builder.add_node("agent", lambda s: {"messages": [AIMessage(letters(rng, 800))]})
    builder.add_node("tool", lambda s: {"messages": [AIMessage(letters(rng, 200))]})
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tool")
    return builder.compile(checkpointer=saver)


def run_chat_cell(
    bench: Bench, saver: Any, bytes_fn: Callable[[], int | None], p: dict, delta: bool
) -> dict:
    turns = p["chat_turns"]
    rng = random.Random(42)
    graph = chat_graph(saver, rng, delta)
    config = {"configurable": {"thread_id": f"chat-{uuid.uuid4().hex[:8]}"}}
    per_turn = []
    started = time.perf_counter()
    with Meter(bench) as turns_meter:
        for _ in range(turns):
            t0 = time.perf_counter()
            graph.invoke({"messages": [HumanMessage(letters(rng, 100))]}, config)
            per_turn.append(time.perf_counter() - t0)
    total = time.perf_counter() - started
    get_state = []
    state = None
    with Meter(bench) as get_meter:
        for _ in range(p["get_state_repeats"]):
            t0 = time.perf_counter()
            state = graph.get_state(config)
            get_state.append(time.perf_counter() - t0)
    messages = len(state.values["messages"]) if state is not None else 0
    t0 = time.perf_counter()
    checkpoints = sum(1 for _ in graph.get_state_history(config))
    history_s = time.perf_counter() - t0
    out = {
        "turns": turns,
        "total_s": total,
        "p50_turn_s": statistics.median(per_turn),
        "last10_turn_s": statistics.median(per_turn[-10:]),
        "bytes_on_disk": bytes_fn(),
        "get_state_s": statistics.median(get_state),
        "history_s": history_s,
        "checkpoints": checkpoints,
        "messages": messages,
        # Per invoke (one turn): CPU on both sides, statements, round trips.
        "per_invoke": turns_meter.per(turns),
        "per_get_state": get_meter.per(p["get_state_repeats"]),
    }
    if messages != 3 * turns:
        out["error"] = f"expected {3 * turns} messages, got {messages}"
    return out


def run_chat(bench: Bench, p: dict, delta: bool, savers: tuple[str, ...]) -> dict:
    results = {}
    for name in savers:
        log(f"  {name} ...")
        gc.collect()
        try:
            with sync_saver(bench, name) as (saver, bytes_fn):
                # A database holding one short thread (the tables' fixed pages:
                # index metapages, free-space and visibility maps), measured on
                # a thread of its own, so that what the 200 turns add can be
                # told apart; each cell starts on emptied tables.
                first_turn = run_chat_cell(bench, saver, bytes_fn, {**p, "chat_turns": 1}, delta)
            with sync_saver(bench, name) as (saver, bytes_fn):
                results[name] = run_chat_cell(bench, saver, bytes_fn, p, delta)
                floor, end = first_turn["bytes_on_disk"], results[name]["bytes_on_disk"]
                if floor is not None and end is not None:
                    results[name]["bytes_after_first_turn"] = floor
                    results[name]["bytes_added_past_first_turn"] = end - floor
                if name == OURS_HOT:
                    hot, encoded = bench.hot_bytes_per_thread()
                    results[name]["hot_bytes_per_thread"] = hot
                    results[name]["hot_encoded_bytes_per_thread"] = encoded
        except Skipped as skipped:
            results[name] = {"skipped": str(skipped)}
            log(f"    skipped: {skipped}")
            continue
        log(f"    total {results[name]['total_s']:.2f}s, history {results[name]['history_s']:.2f}s")
    return results
