"""conc-32's client side, interleaved in one process: CPU per invoke, Redis commands, a profile.

Every saver runs the conc-32 graph (32 async threads x 10 turns, pool 10) in
turn, round after round, on one private Postgres and Redis, so a loaded
machine weighs on all of them alike; the medians of the rounds are printed.
With `--profile NAME` one extra round of that saver runs under cProfile and
the functions with the most own time are printed.

    python -m benchmarks.client_cpu 3                     # 3 rounds per saver
    python -m benchmarks.client_cpu 1 --profile ours+redis
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import pstats
import random
import signal
import statistics
import sys
import time
import uuid
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

from benchmarks.common import CACHE_PREFIX, Bench, Meter, reference_pool
from benchmarks.conc import _conc_round, conc_graph
from benchmarks.servers import private_postgres, private_redis
from langgraph_colosseum import AsyncColosseumSaver

NAMES = ("memory", "ref", "ours", "ours+redis")
THREADS, TURNS = 32, 10


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def measure(bench: Bench, redis_url: str, rounds: int, profile: str | None) -> dict:
    out: dict[str, list[dict[str, Any]]] = {}
    async with (
        reference_pool(bench.url, 10) as pool,
        AsyncColosseumSaver.from_conn_string(bench.url, pool_size=10) as ours,
        AsyncColosseumSaver.from_conn_string(
            bench.url, pool_size=10, redis_url=redis_url, cache_prefix=CACHE_PREFIX
        ) as hot,
    ):
        ref = AsyncPostgresSaver(pool)
        await ref.setup()
        await ours.setup()
        savers = {"memory": InMemorySaver(), "ref": ref, "ours": ours, "ours+redis": hot}
        for name in NAMES:  # warm-up: every pool grown, statements prepared
            graph = conc_graph(savers[name], random.Random(7))
            await _conc_round(graph, random.Random(7), THREADS, 1, f"w-{name}-{uuid.uuid4().hex}")
        for r in range(rounds):
            for name in NAMES:
                rng = random.Random(r)
                graph = conc_graph(savers[name], rng)
                gc.collect()
                with Meter(bench) as meter:
                    wall, _ = await _conc_round(
                        graph, rng, THREADS, TURNS, f"r{r}-{name}-{uuid.uuid4().hex[:6]}"
                    )
                fig = meter.per(THREADS * TURNS)
                fig["invokes_per_s"] = THREADS * TURNS / wall
                out.setdefault(name, []).append(fig)
                log(
                    f"round {r} {name}: {fig['invokes_per_s']:.0f}/s, client "
                    f"{fig['client_cpu_s'] * 1e3:.2f} ms, pg {fig['pg_cpu_s'] * 1e3:.2f} ms, "
                    f"round trips {fig['round_trips']:.2f}, statements {fig['statements']}, "
                    f"redis {fig['redis_commands']}"
                )
        if profile:
            graph = conc_graph(savers[profile], random.Random(99))
            profiler = cProfile.Profile(time.process_time)  # CPU, not a loaded wall clock
            profiler.enable()
            await _conc_round(graph, random.Random(99), THREADS, TURNS, f"p-{uuid.uuid4().hex}")
            profiler.disable()
            text = io.StringIO()
            stats = pstats.Stats(profiler, stream=text)
            stats.sort_stats("tottime").print_stats(45)
            stats.sort_stats("cumulative").print_stats("langgraph_colosseum|redis|psycopg", 60)
            print(text.getvalue())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.client_cpu")
    parser.add_argument("rounds", type=int, nargs="?", default=3)
    parser.add_argument("--profile", choices=NAMES)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    with private_postgres(log) as admin, private_redis(log) as redis_url:
        bench = Bench(admin, redis_url, private_redis=True)
        bench.create()
        try:
            out = asyncio.run(measure(bench, redis_url, args.rounds, args.profile))
        finally:
            bench.drop()
    med = {
        name: {
            k: statistics.median(f[k] for f in figs)
            for k in ("invokes_per_s", "client_cpu_s", "pg_cpu_s", "redis_commands")
            if all(f.get(k) is not None for f in figs)
        }
        for name, figs in out.items()
    }
    floor = med["memory"]["client_cpu_s"]
    for name, m in med.items():
        print(
            f"{name:11s} {m['invokes_per_s']:6.0f}/s client {m['client_cpu_s'] * 1e3:5.2f} ms "
            f"pg {m['pg_cpu_s'] * 1e3:5.2f} ms redis {m.get('redis_commands', 0):5.1f}"
        )
    ref_own = med["ref"]["client_cpu_s"] - floor
    for name in ("ours", "ours+redis"):
        print(
            f"{name}: saver CPU vs ref {(med[name]['client_cpu_s'] - floor) / ref_own:.2f}, "
            f"invokes/s vs memory {med[name]['invokes_per_s'] / med['memory']['invokes_per_s']:.2f}"
        )
    print(f"redis vs not: {med['ours+redis']['invokes_per_s'] / med['ours']['invokes_per_s']:.2f}")


if __name__ == "__main__":
    main()
