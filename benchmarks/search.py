"""search-100k: `threads.search(limit=10)` over 100,000 registry rows (no reference has one)."""

from __future__ import annotations

import statistics
import time

import psycopg

from benchmarks.common import OURS, Bench, log
from langgraph_colosseum import ColosseumSaver

# The registry rows are written by SQL in bulk (100,000 graph runs would take
# most of the budget); `search` then reads them as it reads rows put by runs.
SEED_THREADS = """
INSERT INTO colosseum_threads (thread_id, status, metadata, state_values, updated_at)
SELECT 'search-' || i,
       (ARRAY['idle', 'idle', 'idle', 'interrupted', 'error'])[1 + i %% 5],
       jsonb_build_object('desk', 'desk-' || (i %% 50), 'user', 'user-' || (i %% 1000)),
       jsonb_build_object('ticker', 'T' || (i %% 500)),
       now() - make_interval(secs => i)
FROM generate_series(1, %(n)s) AS i
"""

SEARCHES = (
    ("no filter", {}),
    ("metadata filter", {"metadata": {"desk": "desk-7"}}),
    ("metadata + status", {"metadata": {"user": "user-43"}, "status": "interrupted"}),
    ("values filter", {"values": {"ticker": "T123"}}),
)


def run_search(bench: Bench, p: dict) -> dict:
    """p50 of `threads.search(limit=10)` over `search_threads` registry rows."""
    bench.truncate(OURS)
    with psycopg.connect(bench.url, autocommit=True) as conn:
        conn.execute(SEED_THREADS, {"n": p["search_threads"]})
        conn.execute("ANALYZE colosseum_threads")
    cells = {}
    with ColosseumSaver.from_conn_string(bench.url) as saver:
        for label, query in SEARCHES:
            times, found = [], 0
            for _ in range(p["search_repeats"]):
                t0 = time.perf_counter()
                found = len(saver.threads.search(limit=10, **query))
                times.append(time.perf_counter() - t0)
            cells[label] = {"p50_ms": statistics.median(times) * 1000, "found": found}
            log(f"    {label}: p50 {cells[label]['p50_ms']:.2f} ms")
    return {"threads": p["search_threads"], "searches": cells}
