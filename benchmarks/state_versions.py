"""What state versions cost a read (issue 16), beside the reference, in one run.

A chat thread of 100 messages plus a `query` string, written by version 1 of
the graph. Timed, interleaved round by round, medians over the rounds:

- reference: langgraph-checkpoint-postgres' PostgresSaver, `get_state` of its
  own copy of the thread;
- ours: ColosseumSaver, an unversioned graph (no hook runs);
- ours v2 at v2: a versioned graph reading a thread already at its version
  (the hook's check only);
- ours v2 migrating v1: the same graph reading the version-1 thread (the
  migration runs on every read: copies, the migration, marked versions).

    python -m benchmarks.state_versions [ROUNDS] [READS_PER_ROUND]

Uses the PostgreSQL at COLOSSEUM_TEST_POSTGRES_URL (else 127.0.0.1:5432) and
a database of its own, dropped at the end.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from typing import Annotated, Any, TypedDict

import psycopg
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from psycopg import conninfo

from langgraph_colosseum import ColosseumSaver, telemetry

telemetry.disable()  # measured without the `otel` extra (see benchmarks/common.py)

ADMIN_URL = os.environ.get(
    "COLOSSEUM_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
MESSAGES = 100


class ChatV1(TypedDict, total=False):
    query: str
    messages: Annotated[list, add_messages]


class ChatV2(TypedDict, total=False):
    queries: list[str]
    messages: Annotated[list, add_messages]


def reply(state: dict) -> dict:
    return {"messages": [AIMessage(f"answer {len(state['messages'])}")]}


def up_1_to_2(values: dict) -> None:
    if isinstance(values.get("query"), str):
        values["queries"] = [values.pop("query")]


def builder(schema: type) -> StateGraph:
    graph = StateGraph(schema)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    return graph


def fill(graph: Any, thread_id: str, first: dict) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    graph.invoke({**first, "messages": [HumanMessage("hello")]}, config)
    for i in range(MESSAGES // 2 - 1):
        graph.invoke({"messages": [HumanMessage(f"question {i}")]}, config)


def timed(read: Any, reads: int) -> float:
    start = time.perf_counter()
    for _ in range(reads):
        read()
    return (time.perf_counter() - start) / reads


def main(rounds: int = 5, reads: int = 50) -> None:
    name = f"colosseum_bench_versions_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = conninfo.make_conninfo(ADMIN_URL, dbname=name)
    try:
        with (
            ColosseumSaver.from_conn_string(url) as ours,
            psycopg.connect(url, autocommit=True, prepare_threshold=0) as ref_conn,
        ):
            ours.setup()
            reference = PostgresSaver(ref_conn)
            reference.setup()
            fill(builder(ChatV1).compile(checkpointer=reference), "t", {"query": "q"})
            fill(builder(ChatV1).compile(checkpointer=ours), "v1", {"query": "q"})
            v2 = ours.versioned(builder(ChatV2).compile(), 2, {1: up_1_to_2})
            fill(v2, "v2", {"queries": ["q"]})
            plain = builder(ChatV1).compile(checkpointer=ours)
            ref_graph = builder(ChatV1).compile(checkpointer=reference)

            def config(thread_id: str) -> dict:
                return {"configurable": {"thread_id": thread_id}}

            cells = {
                "reference (PostgresSaver)": lambda: ref_graph.get_state(config("t")),
                "ours": lambda: plain.get_state(config("v1")),
                "ours v2 at v2": lambda: v2.get_state(config("v2")),
                "ours v2 migrating v1": lambda: v2.get_state(config("v1")),
            }
            assert v2.get_state(config("v1")).values["queries"] == ["q"]
            times: dict[str, list[float]] = {cell: [] for cell in cells}
            for _ in range(rounds):
                for cell, read in cells.items():
                    times[cell].append(timed(read, reads))
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    ref = statistics.median(times["reference (PostgresSaver)"])
    print(f"get_state of a {MESSAGES}-message thread, median of {rounds} rounds x {reads} reads")
    print("| cell | ms per read | vs reference |")
    print("|---|---|---|")
    for cell, values in times.items():
        median = statistics.median(values)
        print(f"| {cell} | {median * 1e3:.2f} | {median / ref:.2f}x |")


if __name__ == "__main__":
    main(*(int(arg) for arg in sys.argv[1:]))
