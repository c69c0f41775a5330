"""The Postgres side of a put, each change of issue 14 turned off alone.

Direct puts (one tiny int channel each, as long-20k) into fresh threads,
interleaved per cell in one process on one private PostgreSQL 18: PostgresSaver,
ours as it is, ours with all four changes off, and ours with each one off:

* `generic`: sql.WRITE_LOCK no longer forces the generic plan of the write;
* `lockprep`: the thread-lock statement is not prepared;
* `cache`: psycopg's placeholder cache back at its 4 KB limit (PUT is ~6 KB);
* `reset`: the pool's `reset` callback (a returned connection goes through a worker).

Prints the medians (after a warm-up round) of client CPU, backend CPU and
server execution time per put.

    python -m benchmarks.write_policy 1500 3     # 1,500 puts per cell, 3 rounds
"""

from __future__ import annotations

import gc
import signal
import statistics
import sys
import uuid
from collections.abc import Callable

from langgraph.checkpoint.postgres import PostgresSaver
from psycopg import _queries as psycopg_queries

import langgraph_colosseum._core.store as store_module
import langgraph_colosseum._pool as pool_module
from benchmarks.common import Bench, Meter, log
from benchmarks.longthread import fill
from benchmarks.servers import private_postgres
from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum._core import sql

CHANGES = ("generic", "lockprep", "cache", "reset")
CELLS = ("PostgresSaver", "ours", "ours, all four off", *(f"ours, {c} off" for c in CHANGES))
WRITE_LOCK = sql.WRITE_LOCK
LOCK_CHOOSING_PLANS = WRITE_LOCK.replace(
    ",\n       set_config('plan_cache_mode', 'force_generic_plan', true)", ""
)
assert LOCK_CHOOSING_PLANS != WRITE_LOCK, "sql.WRITE_LOCK changed: update this benchmark"
QUERY, CACHED = store_module.Query, psycopg_queries.MAX_CACHED_STATEMENT_LENGTH


def turn_off(changes: set[str], saver: ColosseumSaver) -> Callable[[], None]:
    """Undo `changes` in this process; the returned function restores them."""
    if "generic" in changes:
        sql.WRITE_LOCK = LOCK_CHOOSING_PLANS
    if "lockprep" in changes:

        def query(text, params=None, fetch=True, prepare=False):
            if text in (WRITE_LOCK, LOCK_CHOOSING_PLANS):
                prepare = False
            return QUERY(text, params, fetch, prepare)

        store_module.Query = query
    if "cache" in changes:
        psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = 4096
    if "reset" in changes:
        saver.conn._reset = pool_module._stamp

    def restore() -> None:
        sql.WRITE_LOCK = WRITE_LOCK
        store_module.Query = QUERY
        psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = CACHED
        saver.conn._reset = None

    return restore


def changes_of(cell: str) -> set[str]:
    if cell == "ours, all four off":
        return set(CHANGES)
    if cell.startswith("ours, "):
        return {cell.split()[1]}
    return set()


def main(puts: int, rounds: int) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with private_postgres(log) as admin:
        bench = Bench(admin)
        bench.create()
        try:
            with (
                PostgresSaver.from_conn_string(bench.url) as ref,
                ColosseumSaver.from_conn_string(bench.url, max_size=1) as ours,
            ):
                results: dict[str, list[dict]] = {}
                for round_ in range(rounds + 1):  # round 0 warms up
                    for cell in CELLS:
                        saver = ref if cell == "PostgresSaver" else ours
                        restore = turn_off(changes_of(cell), ours)
                        try:
                            gc.collect()
                            config = {
                                "configurable": {
                                    "thread_id": f"w-{uuid.uuid4().hex[:8]}",
                                    "checkpoint_ns": "",
                                }
                            }
                            with Meter(bench) as meter:
                                fill(saver, config, 0, puts, None)
                        finally:
                            restore()
                        if round_:
                            results.setdefault(cell, []).append(meter.per(puts))
                for cell, per in results.items():
                    med = {k: statistics.median(p[k] for p in per) for k in
                           ("client_cpu_s", "pg_cpu_s", "pg_exec_ms", "pg_plan_ms")}  # fmt: skip
                    print(
                        f"{cell:24s} client {med['client_cpu_s'] * 1e3:.3f} ms  "
                        f"backend {med['pg_cpu_s'] * 1e3:.3f} ms  "
                        f"plan {med['pg_plan_ms']:.3f} ms  exec {med['pg_exec_ms']:.3f} ms per put"
                    )
        finally:
            bench.drop()


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 1500,
        int(sys.argv[2]) if len(sys.argv) > 2 else 3,
    )
