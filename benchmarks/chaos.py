"""Connections lost under load: how many graphs fail, with the asyncio saver's coalescing on and off.

16 graphs of 10 invokes each (three nodes a step) run at once on one
AsyncColosseumSaver pool of 10 while a thread terminates every backend of
that pool every `--every` seconds. A saver on a pool retries a request twice
on a fresh connection after a lost one, so a graph fails only when one of its
requests meets three broken connections in a row; every graph that finishes
must hold all its steps. Runs alternate between coalescing on and off
(`aio.COALESCE`) in one process, on one private Postgres; the failures of
each run are printed, then per mode. It is a fault check, not a speed figure:
how often it fails depends on the machine's load (a slower round trip is
exposed to more kills).

    python -m benchmarks.chaos 4            # 4 runs per mode
    python -m benchmarks.chaos 4 --every 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import operator
import sys
import threading
import uuid
from typing import Annotated, TypedDict

import psycopg
from langgraph.graph import END, START, StateGraph

from benchmarks.common import ADMIN_URL, Bench
from benchmarks.servers import private_postgres
from langgraph_colosseum import AsyncColosseumSaver, aio

GRAPHS, TURNS, NODES = 16, 10, ("a", "b", "c")


class Total(TypedDict):
    total: Annotated[int, operator.add]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def graph(saver: AsyncColosseumSaver):
    builder = StateGraph(Total)
    for node in NODES:
        builder.add_node(node, lambda state: {"total": 1})
    builder.add_edge(START, NODES[0])
    for a, b in itertools.pairwise(NODES):
        builder.add_edge(a, b)
    builder.add_edge(NODES[-1], END)
    return builder.compile(checkpointer=saver)


def killer(url: str, app: str, every: float, stop: threading.Event, kills: list[int]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.wait(every):
            kills.append(
                conn.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name = %s",
                    [app],
                ).fetchone()[0]
            )


async def one_run(url: str, coalesce: bool, every: float) -> tuple[int, int, int]:
    """(graphs failed, graphs with a wrong total, backends killed)."""
    aio.COALESCE = coalesce  # read when the saver is made
    app = f"chaos-{uuid.uuid4().hex[:8]}"
    async with AsyncColosseumSaver.from_conn_string(
        f"{url} application_name={app}", pool_size=10
    ) as saver:
        app_graph = graph(saver)
        stop, kills = threading.Event(), []
        thread = threading.Thread(target=killer, args=(url, app, every, stop, kills))
        thread.start()

        async def invokes(i: int) -> None:
            for _ in range(TURNS):
                await app_graph.ainvoke({"total": 0}, {"configurable": {"thread_id": f"{app}-{i}"}})

        try:
            outcomes = await asyncio.gather(
                *(invokes(i) for i in range(GRAPHS)), return_exceptions=True
            )
        finally:
            stop.set()
            thread.join()
        wrong = 0
        for i, outcome in enumerate(outcomes):
            if not isinstance(outcome, BaseException):
                state = await app_graph.aget_state({"configurable": {"thread_id": f"{app}-{i}"}})
                wrong += state.values["total"] != TURNS * len(NODES)
    failed = sum(isinstance(o, BaseException) for o in outcomes)
    return failed, wrong, sum(kills)


async def measure(url: str, runs: int, every: float) -> dict[bool, list[tuple[int, int, int]]]:
    out: dict[bool, list[tuple[int, int, int]]] = {True: [], False: []}
    for r in range(runs):
        for coalesce in (True, False):
            failed, wrong, kills = await one_run(url, coalesce, every)
            out[coalesce].append((failed, wrong, kills))
            log(
                f"run {r} coalescing {'on ' if coalesce else 'off'}: {failed}/{GRAPHS} graphs "
                f"failed, {wrong} wrong totals, {kills} backends killed"
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos")
    parser.add_argument("runs", type=int, nargs="?", default=4)
    parser.add_argument("--every", type=float, default=0.2, help="seconds between kills")
    args = parser.parse_args()
    with private_postgres(log) as admin:
        bench = Bench(admin or ADMIN_URL)
        bench.create()
        try:
            out = asyncio.run(measure(bench.url, args.runs, args.every))
        finally:
            bench.drop()
    for coalesce, figs in out.items():
        print(
            f"coalescing {'on ' if coalesce else 'off'}: graphs failed per run "
            f"{[f for f, _, _ in figs]} of {GRAPHS}, wrong totals {sum(w for _, w, _ in figs)}, "
            f"backends killed per run {[k for _, _, k in figs]}"
        )


if __name__ == "__main__":
    main()
