"""conc-32: 32 concurrent async threads x 10 turns on a 10-connection pool."""

from __future__ import annotations

import asyncio
import gc
import random
import statistics
import time
import uuid
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from benchmarks.common import (
    AOURS,
    AOURS_HOT,
    AREF,
    ASQLITE,
    AsyncSqliteSaver,
    Bench,
    Meter,
    async_saver,
    letters,
    log,
)


class ConcState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def conc_graph(saver: Any, rng: random.Random) -> Any:
    builder = StateGraph(ConcState)
    builder.add_node("reply", lambda s: {"messages": [AIMessage(letters(rng, 50))]})
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


async def _conc_round(graph: Any, rng: random.Random, threads: int, turns: int, tag: str):
    latencies: list[float] = []

    async def one_thread(i: int) -> None:
        config = {"configurable": {"thread_id": f"{tag}-{i}"}}
        for _ in range(turns):
            t0 = time.perf_counter()
            await graph.ainvoke({"messages": [HumanMessage(letters(rng, 20))]}, config)
            latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    await asyncio.gather(*(one_thread(i) for i in range(threads)))
    return time.perf_counter() - started, latencies


async def run_conc_cell(bench: Bench, name: str, p: dict) -> dict:
    threads, turns, pool = p["conc_threads"], p["conc_turns"], 10
    async with async_saver(bench, name, pool) as saver:
        rng = random.Random(7)
        graph = conc_graph(saver, rng)
        # Untimed warm-up: one turn on as many threads, so every pool has grown.
        await _conc_round(graph, rng, threads, 1, f"warm-{uuid.uuid4().hex[:6]}")
        rounds, latencies = [], []
        with Meter(bench) as meter:
            for r in range(p["conc_rounds"]):
                wall, lat = await _conc_round(
                    graph, rng, threads, turns, f"r{r}-{uuid.uuid4().hex[:6]}"
                )
                rounds.append(threads * turns / wall)
                latencies.extend(lat)
        latencies.sort()
    return {
        "threads": threads,
        "turns_per_thread": turns,
        "pool_size": pool if name in (AREF, AOURS, AOURS_HOT) else None,
        "rounds": p["conc_rounds"],
        "invokes_per_s": statistics.median(rounds),
        "invokes_per_s_rounds": rounds,
        "p50_invoke_s": statistics.median(latencies),
        "p95_invoke_s": latencies[int(0.95 * (len(latencies) - 1))],
        "per_invoke": meter.per(threads * turns * p["conc_rounds"]),
    }


def run_conc(bench: Bench, p: dict, savers: tuple[str, ...]) -> dict:
    results: dict[str, Any] = {}
    for name in savers:
        if name == ASQLITE and AsyncSqliteSaver is None:
            results[name] = {"skipped": "aiosqlite is not installed"}
            log(f"  {name}: skipped (aiosqlite is not installed)")
            continue
        log(f"  {name} ...")
        gc.collect()
        results[name] = asyncio.run(run_conc_cell(bench, name, p))
        cell = results[name]["per_invoke"]
        log(
            f"    {results[name]['invokes_per_s']:.0f} invokes/s, client CPU "
            f"{cell['client_cpu_s'] * 1e3:.2f} ms, Postgres CPU {cell['pg_cpu_s'] * 1e3:.2f} ms "
            "per invoke"
        )
    return results
