"""chat-200: a 200-turn chat thread, our saver against PostgresSaver, one process, one database.

Run:  .venv/bin/python benchmarks/chat200.py [--turns 200] [--json out.json]

Each turn sends a HumanMessage of ~100 random letters; node `agent` appends an
AIMessage of 800 letters, node `tool` one of ~200. Plain `add_messages`.
Reported per saver: total time, p50 per-turn time, bytes on disk (sum of
`pg_total_relation_size` of the saver's tables after VACUUM), `get_state` time
(median of 20) and the time of one full `get_state_history`. Ratios are ours /
PostgresSaver, from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import string
import time
import uuid
from typing import Annotated, TypedDict

import psycopg
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from psycopg import conninfo

from langgraph_colosseum import ColosseumSaver

SERVER = os.environ.get("COLOSSEUM_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REFERENCE_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
COLOSSEUM_TABLES = (
    "colosseum_checkpoints",
    "colosseum_channel_values",
    "colosseum_writes",
    "colosseum_delta_histories",
)


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def letters(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.ascii_letters, k=n))


def chat_graph(saver, rng: random.Random):
    builder = StateGraph(ChatState)
    builder.add_node("agent", lambda s: {"messages": [AIMessage(letters(rng, 800))]})
    builder.add_node("tool", lambda s: {"messages": [AIMessage(letters(rng, 200))]})
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tool")
    return builder.compile(checkpointer=saver)


def table_bytes(url: str, tables: tuple[str, ...]) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"VACUUM {table}")
        row = conn.execute(
            "SELECT sum(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) t",
            [list(tables)],
        ).fetchone()
    return int(row[0])


def run_chat(saver, turns: int, url: str, tables: tuple[str, ...]) -> dict:
    rng = random.Random(42)
    graph = chat_graph(saver, rng)
    config = {"configurable": {"thread_id": f"chat-{uuid.uuid4().hex[:8]}"}}
    per_turn = []
    started = time.perf_counter()
    for _ in range(turns):
        t0 = time.perf_counter()
        graph.invoke({"messages": [HumanMessage(letters(rng, 100))]}, config)
        per_turn.append(time.perf_counter() - t0)
    total = time.perf_counter() - started
    get_state = []
    for _ in range(20):
        t0 = time.perf_counter()
        state = graph.get_state(config)
        get_state.append(time.perf_counter() - t0)
    assert len(state.values["messages"]) == 3 * turns
    t0 = time.perf_counter()
    history = sum(1 for _ in graph.get_state_history(config))
    history_time = time.perf_counter() - t0
    return {
        "total_s": total,
        "p50_turn_ms": statistics.median(per_turn) * 1000,
        "last10_turn_ms": statistics.median(per_turn[-10:]) * 1000,
        "bytes_on_disk": table_bytes(url, tables),
        "get_state_ms": statistics.median(get_state) * 1000,
        "history_s": history_time,
        "checkpoints": history,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--json", help="write results here")
    parser.add_argument("--only", choices=["PostgresSaver", "ColosseumSaver"], help="run one saver")
    args = parser.parse_args()

    name = f"colosseum_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = conninfo.make_conninfo(SERVER, dbname=name)
    try:
        results = {}
        if args.only != "ColosseumSaver":
            with PostgresSaver.from_conn_string(url) as reference:
                reference.setup()
                results["PostgresSaver"] = run_chat(reference, args.turns, url, REFERENCE_TABLES)
        if args.only != "PostgresSaver":
            with ColosseumSaver.from_conn_string(url) as ours:
                ours.setup()
                results["ColosseumSaver"] = run_chat(ours, args.turns, url, COLOSSEUM_TABLES)
        if args.only:
            print(json.dumps(results, indent=2))
            return
    finally:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    ref, ours_r = results["PostgresSaver"], results["ColosseumSaver"]
    print(f"chat-{args.turns}")
    print(f"{'figure':<16}{'PostgresSaver':>16}{'ColosseumSaver':>16}{'ratio':>8}")
    for key in ("total_s", "p50_turn_ms", "last10_turn_ms", "bytes_on_disk", "get_state_ms", "history_s"):
        ratio = ours_r[key] / ref[key] if ref[key] else float("nan")
        print(f"{key:<16}{ref[key]:>16.3f}{ours_r[key]:>16.3f}{ratio:>8.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"turns": args.turns, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
