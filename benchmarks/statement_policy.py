"""The statement policy, before and after, in one process on one private server.

"before" is ours with the policy of main before issue 14 (reads planned on
every call, put / put_writes prepared after psycopg's 5 runs, list pages of
100), emulated by wrapping the store's `Query`; "after" is ours as it is. Both
run beside the references, interleaved, and the medians of the repetitions are
printed (raw figures in /tmp/statement-policy-<what>.json).

    python -m benchmarks.statement_policy conc 0 3       # conc-32: 3 rounds per saver
    python -m benchmarks.statement_policy direct 20000 3 # long-20k reads, direct puts
    python -m benchmarks.statement_policy graph 20000 3  # long-20k reads, a looping graph
"""

import asyncio
import gc
import json
import random
import signal
import statistics
import sys
import time
import uuid

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

import langgraph_colosseum._core.store as store_mod
from benchmarks.common import CACHE_PREFIX, Bench, Meter, reference_pool
from benchmarks.conc import _conc_round, conc_graph
from benchmarks.longthread import fill, list_all, loop_graph
from benchmarks.servers import private_postgres, private_redis
from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._core import sql
from langgraph_colosseum._core.io import Query


def _exit(signum, frame):
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, _exit)
WHAT = sys.argv[1]
N = int(sys.argv[2])
REPS = int(sys.argv[3])


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


ORIG_QUERY, ORIG_MAX = store_mod.Query, store_mod.MAX_PAGE_SIZE


def old_policy(on: bool):
    if on:

        def q(sql_, params=None, fetch=True, prepare=False):
            if prepare is True:
                writes = (sql.PUT, sql.PUT_NO_HEAD, *sql.PUT_WRITES_BY.values())
                prepare = None if sql_ in writes else False
            return Query(sql_, params, fetch, prepare)

        store_mod.Query = q
        store_mod.MAX_PAGE_SIZE = 100
    else:
        store_mod.Query, store_mod.MAX_PAGE_SIZE = ORIG_QUERY, ORIG_MAX


def med(rs, k):
    vals = [r[k] for r in rs if r.get(k) is not None]
    return statistics.median(vals) if vals else None


async def conc(bench, redis_url):
    out = {}
    names = ["memory", "ref", "ours-before", "ours-after", "ours-after+redis"]
    async with (
        reference_pool(bench.url, 10) as pool,
        AsyncColosseumSaver.from_conn_string(bench.url, pool_size=10) as ours,
        AsyncColosseumSaver.from_conn_string(bench.url, pool_size=10) as ours_b,
        AsyncColosseumSaver.from_conn_string(
            bench.url, pool_size=10, redis_url=redis_url, cache_prefix=CACHE_PREFIX
        ) as hot,
    ):
        ref = AsyncPostgresSaver(pool)
        await ref.setup()
        savers = {
            "memory": InMemorySaver(),
            "ref": ref,
            "ours-before": ours_b,
            "ours-after": ours,
            "ours-after+redis": hot,
        }
        for name in names:  # warm-up: pools grown
            old_policy(name == "ours-before")
            g = conc_graph(savers[name], random.Random(7))
            await _conc_round(g, random.Random(7), 32, 1, f"warm-{name}-{uuid.uuid4().hex[:6]}")
        for rep in range(REPS):
            for name in names:
                old_policy(name == "ours-before")
                # ours-before on a fresh pool state: statements prepared by the other policy stay prepared
                rng = random.Random(rep)
                g = conc_graph(savers[name], rng)
                gc.collect()
                with Meter(bench) as m:
                    wall, _ = await _conc_round(
                        g, rng, 32, 10, f"r{rep}-{name}-{uuid.uuid4().hex[:6]}"
                    )
                r = m.per(320)
                r["invokes_per_s"] = 320 / wall
                out.setdefault(name, []).append(r)
                log(
                    f"conc {rep} {name}: {r['invokes_per_s']:.0f}/s client {r['client_cpu_s'] * 1e3:.2f} ms pg {r['pg_cpu_s'] * 1e3:.2f} ms plan {r['pg_plan_ms'] or 0:.2f} exec {r['pg_exec_ms'] or 0:.2f} rt {r['round_trips']:.2f} redis {r['redis_commands']}"
                )
    old_policy(False)
    return out


def long_reads(bench, shape):
    out = {}
    with (
        PostgresSaver.from_conn_string(bench.url) as ref,
        ColosseumSaver.from_conn_string(bench.url, max_size=2) as ours,
    ):
        fills = {}
        for name, s in (("ref", ref), ("ours-after", ours)):
            thread = f"{shape}-{name}"
            with Meter(bench) as m:
                if shape == "direct":
                    fill(
                        s, {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, 0, N, None
                    )
                else:
                    loop_graph(s).invoke(
                        {"counter": 0, "target": N},
                        {"configurable": {"thread_id": thread}, "recursion_limit": N + 10},
                    )
            r = m.per(N)
            r["puts_per_s"] = N / m.figures["wall_s"]
            fills[name] = r
            log(
                f"{shape} fill {name}: {r['puts_per_s']:.0f}/s client {r['client_cpu_s'] * 1e3:.2f} ms pg {r['pg_cpu_s'] * 1e3:.2f} ms plan {r['pg_plan_ms']:.3f} exec {r['pg_exec_ms']:.3f} rt {r['round_trips']:.2f}"
            )
        out["fill"] = fills
        for rep in range(REPS):
            for name in ("ref", "ours-before", "ours-after"):
                old_policy(name == "ours-before")
                s = ref if name == "ref" else ours
                thread = f"{shape}-{'ref' if name == 'ref' else 'ours-after'}"
                head = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
                s.get_tuple(head)
                ts = []
                with Meter(bench) as m:
                    for _ in range(20):
                        t0 = time.perf_counter()
                        s.get_tuple(head)
                        ts.append(time.perf_counter() - t0)
                g = m.per(20)
                g["median_s"] = statistics.median(ts)
                gc.collect()
                with Meter(bench) as m:
                    seen, _ = list_all(s, {"configurable": {"thread_id": thread}}, 300)
                listed = m.per(1)
                listed["seen"] = seen
                out.setdefault(("get", name), []).append(g)
                out.setdefault(("list", name), []).append(listed)
                log(
                    f"{shape} {rep} {name}: get {g['median_s'] * 1e6:.0f} us (cpu {g['client_cpu_s'] * 1e6:.0f} us, plan {g['pg_plan_ms']:.3f} exec {g['pg_exec_ms']:.3f} ms) list {listed['wall_s']:.2f} s cpu {listed['client_cpu_s']:.2f} s pg {listed['pg_cpu_s']:.2f} s rt {listed['round_trips']:.0f} seen {seen}"
                )
    old_policy(False)
    return {f"{k[0]}:{k[1]}" if isinstance(k, tuple) else k: v for k, v in out.items()}


with private_postgres(log) as admin, private_redis(log) as redis_url:
    bench = Bench(admin, redis_url, private_redis=True)
    bench.create()
    try:
        if WHAT == "conc":
            res = asyncio.run(conc(bench, redis_url))
        else:
            res = long_reads(bench, WHAT)
        json.dump(res, open(f"/tmp/statement-policy-{WHAT}.json", "w"), default=str, indent=1)
        for k, rs in res.items():
            if k == "fill":
                continue
            keys = [
                "invokes_per_s",
                "median_s",
                "wall_s",
                "client_cpu_s",
                "pg_cpu_s",
                "pg_plan_ms",
                "pg_exec_ms",
                "statements",
                "round_trips",
                "redis_commands",
            ]
            print(
                k, {kk: (round(med(rs, kk), 6) if med(rs, kk) is not None else None) for kk in keys}
            )
    finally:
        bench.drop()
