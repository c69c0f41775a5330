"""The benchmark suite: our savers against langgraph-checkpoint-postgres, one process, one Postgres.

Run (from the repository root):

    .venv/bin/python -m benchmarks.run                 # everything, ~3-6 min on 2 cores
    .venv/bin/python -m benchmarks.run --quick         # smoke mode: fewer turns / checkpoints
    .venv/bin/python -m benchmarks.run --workloads chat-200 conc-32

Every run creates one fresh database on the admin server named by
COLOSSEUM_BENCH_POSTGRES_URL (else postgresql://postgres@127.0.0.1:5432/test)
and drops it at the end. All savers run in this process against that database;
before each (workload, saver) cell the saver's tables are truncated, so bytes on
disk belong to that cell alone. SqliteSaver gets a fresh temp file per cell and
InMemorySaver a fresh instance: they are floors, not competitors.

Workloads (see benchmarks/README.md):
  chat-200        200 turns of a 2-node chat graph on plain `add_messages`.
  chat-200-delta  the same with the messages channel in a `DeltaChannel`.
  conc-32         32 concurrent async threads x 10 turns on a 10-connection pool.
  long-20k        one thread of 20,000 tiny checkpoints written by direct
                  `saver.put` calls; time and peak memory of a full
                  `saver.list(config)` and of `get_tuple` at the head, at 5,000
                  and at 20,000 checkpoints.

Output: a table on stdout and benchmarks/results/<out>.{md,json,png}
(<out> is `latest`, or `quick` with --quick, unless --out says otherwise).
Times are measured, never asserted; ratios are ours / PostgresSaver from the
same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import datetime as dt
import gc
import importlib.metadata
import json
import os
import platform
import random
import statistics
import string
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import redis
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages
from psycopg import conninfo
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver

try:  # AsyncSqliteSaver needs aiosqlite.
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
except ImportError:  # pragma: no cover - depends on the environment
    AsyncSqliteSaver = None  # type: ignore[assignment,misc]

ADMIN_URL = os.environ.get(
    "COLOSSEUM_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
RESULTS_DIR = Path(__file__).resolve().parent / "results"
WORKLOADS = ("chat-200", "chat-200-delta", "conc-32", "long-20k", "search-100k")

# Saver names as they appear in the tables. `ours` and `ref` per workload kind.
MEMORY, SQLITE, REF, OURS = "InMemorySaver", "SqliteSaver", "PostgresSaver", "ColosseumSaver"
AMEMORY, ASQLITE, AREF, AOURS = (
    "InMemorySaver",
    "AsyncSqliteSaver",
    "AsyncPostgresSaver",
    "AsyncColosseumSaver",
)
# Ours again, with the Redis hot head in front of Postgres.
OURS_HOT, AOURS_HOT = "ColosseumSaver+Redis", "AsyncColosseumSaver+Redis"
SYNC_SAVERS = (MEMORY, SQLITE, REF, OURS, OURS_HOT)
ASYNC_SAVERS = (AMEMORY, ASQLITE, AREF, AOURS, AOURS_HOT)
REDIS_URL = os.environ.get("COLOSSEUM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
# This run's keys: cleared per cell, so the bytes per hot thread are the cell's own.
CACHE_PREFIX = f"colosseum-bench-{uuid.uuid4().hex[:8]}:"

REF_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
REF_MIGRATIONS_TABLE = "checkpoint_migrations"
OURS_TABLE_PREFIX = "colosseum_"
OURS_SCHEMA_TABLE = "colosseum_schema"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- parameters


def params_for(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "chat_turns": 20,
            "get_state_repeats": 5,
            "conc_threads": 32,
            "conc_turns": 2,
            "conc_rounds": 1,
            "long_sizes": [500, 2000],
            "long_list_repeats": 1,
            "long_get_repeats": 5,
            "long_list_cap_s": 30.0,
            "search_threads": 5000,
            "search_repeats": 10,
        }
    return {
        "chat_turns": 200,
        "get_state_repeats": 20,
        "conc_threads": 32,
        "conc_turns": 10,
        "conc_rounds": 3,
        "long_sizes": [5000, 20000],
        "long_list_repeats": 3,
        "long_get_repeats": 20,
        # One pass of a full history is cut off after this long (and says so).
        "long_list_cap_s": 60.0,
        "search_threads": 100_000,
        "search_repeats": 50,
    }


# ---------------------------------------------------------------- database


class Bench:
    """The run's database and the table lists of the two Postgres savers."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.name = f"colosseum_bench_{uuid.uuid4().hex[:10]}"
        self.url = conninfo.make_conninfo(admin_url, dbname=self.name)
        self.tables: dict[str, tuple[str, ...]] = {}
        self.tmpdir = tempfile.TemporaryDirectory(prefix="colosseum_bench_")

    def create(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{self.name}"')
        # Create both schemas once, then learn our table names (they may change
        # as the library evolves; any colosseum_* table but the version table).
        with PostgresSaver.from_conn_string(self.url) as ref:
            ref.setup()
        with ColosseumSaver.from_conn_string(self.url, pool_size=1) as ours:
            ours.setup()
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "AND tablename LIKE %s ORDER BY tablename",
                [OURS_TABLE_PREFIX.replace("_", r"\_") + "%"],
            ).fetchall()
        self.tables[REF] = REF_TABLES
        self.tables[OURS] = tuple(r[0] for r in rows if r[0] != OURS_SCHEMA_TABLE)

    def drop(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        self.tmpdir.cleanup()

    def server_version(self) -> str:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            return str(conn.execute("SELECT version()").fetchone()[0])

    def truncate(self, family: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("TRUNCATE " + ", ".join(self.tables[family]))

    def table_bytes(self, family: str) -> int:
        tables = self.tables[family]
        with psycopg.connect(self.url, autocommit=True) as conn:
            for table in tables:
                conn.execute(f"VACUUM {table}")
            row = conn.execute(
                "SELECT sum(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) t",
                [list(tables)],
            ).fetchone()
        return int(row[0] or 0)

    def clear_cache(self) -> None:
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(match=CACHE_PREFIX + "*", count=1000):
            client.delete(key)
        client.close()

    def hot_bytes_per_thread(self) -> float | None:
        """Redis memory per hot thread: MEMORY USAGE of each thread's one hash."""
        client = redis.Redis.from_url(REDIS_URL)
        try:
            sizes = [
                client.memory_usage(key, samples=0)
                for key in client.scan_iter(match=CACHE_PREFIX + "*", count=1000)
            ]
        finally:
            client.close()
        return statistics.mean(sizes) if sizes else None

    def sqlite_path(self) -> str:
        return os.path.join(self.tmpdir.name, f"{uuid.uuid4().hex[:8]}.sqlite")


def sqlite_bytes(conn: Any, path: str) -> int:
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


@contextlib.contextmanager
def sync_saver(bench: Bench, name: str) -> Iterator[tuple[Any, Callable[[], int | None]]]:
    """The saver `name`, set up and empty, with a function giving its bytes on disk."""
    if name == MEMORY:
        yield InMemorySaver(), lambda: None
    elif name == SQLITE:
        path = bench.sqlite_path()
        with SqliteSaver.from_conn_string(path) as saver:
            saver.setup()
            yield saver, lambda: sqlite_bytes(saver.conn, path)
    elif name == REF:
        bench.truncate(REF)
        with PostgresSaver.from_conn_string(bench.url) as saver:
            saver.setup()
            yield saver, lambda: bench.table_bytes(REF)
    elif name in (OURS, OURS_HOT):
        bench.truncate(OURS)
        bench.clear_cache()
        cache = {"redis_url": REDIS_URL, "cache_prefix": CACHE_PREFIX} if name == OURS_HOT else {}
        with ColosseumSaver.from_conn_string(bench.url, **cache) as saver:
            saver.setup()
            yield saver, lambda: bench.table_bytes(OURS)
    else:  # pragma: no cover
        raise ValueError(name)


@contextlib.asynccontextmanager
async def async_saver(bench: Bench, name: str, pool_size: int):
    if name == AMEMORY:
        yield InMemorySaver()
    elif name == ASQLITE:
        async with AsyncSqliteSaver.from_conn_string(bench.sqlite_path()) as saver:
            await saver.setup()
            yield saver
    elif name == AREF:
        bench.truncate(REF)
        # As langgraph-checkpoint-postgres documents for a pool.
        async with AsyncConnectionPool(
            bench.url,
            max_size=pool_size,
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
            open=False,
        ) as pool:
            saver = AsyncPostgresSaver(pool)
            await saver.setup()
            yield saver
    elif name in (AOURS, AOURS_HOT):
        bench.truncate(OURS)
        bench.clear_cache()
        cache = {"redis_url": REDIS_URL, "cache_prefix": CACHE_PREFIX} if name == AOURS_HOT else {}
        async with AsyncColosseumSaver.from_conn_string(
            bench.url, pool_size=pool_size, **cache
        ) as saver:
            await saver.setup()
            yield saver
    else:  # pragma: no cover
        raise ValueError(name)


# ---------------------------------------------------------------- memory probes


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def _release_memory() -> None:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def traced_peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """fn's result and the peak of Python heap it allocated (tracemalloc), in bytes."""
    _release_memory()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return result, max(peak, 0)


def rss_peak(fn: Callable[[], Any], interval: float = 0.001) -> tuple[Any, int | None]:
    """fn's result and its peak resident-set growth (sampled every ms), in bytes.

    Sees what tracemalloc cannot (libpq result buffers, C extensions), at the
    price of noise: the allocator may reuse memory freed earlier.
    """
    _release_memory()
    base = _rss_bytes()
    if base is None:
        return fn(), None
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_bytes() or 0)
            time.sleep(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = fn()
    finally:
        stop.set()
        sampler.join()
    peak[0] = max(peak[0], _rss_bytes() or 0)
    return result, peak[0] - base


# ---------------------------------------------------------------- chat-200 / chat-200-delta


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class DeltaChatState(TypedDict):
    messages: Annotated[list, DeltaChannel(_messages_delta_reducer)]


def letters(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.ascii_letters, k=n))


def chat_graph(saver: Any, rng: random.Random, delta: bool) -> Any:
    builder = StateGraph(DeltaChatState if delta else ChatState)
    builder.add_node("agent", lambda s: {"messages": [AIMessage(letters(rng, 800))]})
    builder.add_node("tool", lambda s: {"messages": [AIMessage(letters(rng, 200))]})
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tool")
    return builder.compile(checkpointer=saver)


def run_chat_cell(saver: Any, bytes_fn: Callable[[], int | None], p: dict, delta: bool) -> dict:
    turns = p["chat_turns"]
    rng = random.Random(42)
    graph = chat_graph(saver, rng, delta)
    config = {"configurable": {"thread_id": f"chat-{uuid.uuid4().hex[:8]}"}}
    per_turn = []
    started = time.perf_counter()
    for _ in range(turns):
        t0 = time.perf_counter()
        graph.invoke({"messages": [HumanMessage(letters(rng, 100))]}, config)
        per_turn.append(time.perf_counter() - t0)
    total = time.perf_counter() - started
    get_state = []
    state = None
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
    }
    if messages != 3 * turns:
        out["error"] = f"expected {3 * turns} messages, got {messages}"
    return out


def run_chat(bench: Bench, p: dict, delta: bool, savers: tuple[str, ...]) -> dict:
    results = {}
    for name in savers:
        log(f"  {name} ...")
        gc.collect()
        with sync_saver(bench, name) as (saver, bytes_fn):
            results[name] = run_chat_cell(saver, bytes_fn, p, delta)
            if name == OURS_HOT:
                results[name]["hot_bytes_per_thread"] = bench.hot_bytes_per_thread()
        log(f"    total {results[name]['total_s']:.2f}s, history {results[name]['history_s']:.2f}s")
    return results


# ---------------------------------------------------------------- conc-32


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
        log(f"    {results[name]['invokes_per_s']:.0f} invokes/s")
    return results


# ---------------------------------------------------------------- long-20k


def fill(saver: Any, config: dict, start: int, stop: int, version: Any) -> tuple[dict, Any]:
    """Direct `saver.put` calls: checkpoints start..stop-1, one tiny int channel each."""
    for i in range(start, stop):
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=i))
        checkpoint["channel_values"] = {"counter": i}
        checkpoint["channel_versions"] = {"counter": version}
        checkpoint["updated_channels"] = ["counter"]
        metadata = {"source": "loop", "step": i, "parents": {}}
        config = saver.put(config, checkpoint, metadata, {"counter": version})
    return config, version


def list_all(saver: Any, config: dict, cap_s: float) -> tuple[int, bool]:
    """Iterate `saver.list(config)` to the end (or for cap_s); how many, and if cut off."""
    n = 0
    deadline = time.perf_counter() + cap_s
    for _ in saver.list(config):
        n += 1
        if time.perf_counter() > deadline:
            return n, True
    return n, False


def measure_long(saver: Any, thread: str, size: int, p: dict) -> dict:
    config = {"configurable": {"thread_id": thread}}
    head_config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    cap = p["long_list_cap_s"]
    times, seen, capped = [], 0, False
    for _ in range(p["long_list_repeats"]):
        gc.collect()
        t0 = time.perf_counter()
        seen, cut = list_all(saver, config, cap)
        times.append(time.perf_counter() - t0)
        if cut:  # a pass that hit the cap is not repeated
            capped = True
            break
    (_, _), list_traced = traced_peak(lambda: list_all(saver, config, cap))
    (_, _), list_rss = rss_peak(lambda: list_all(saver, config, cap))
    gets = []
    head = None
    for _ in range(p["long_get_repeats"]):
        t0 = time.perf_counter()
        head = saver.get_tuple(head_config)
        gets.append(time.perf_counter() - t0)
    _, get_traced = traced_peak(lambda: saver.get_tuple(head_config))
    _, get_rss = rss_peak(lambda: saver.get_tuple(head_config))
    out = {
        "checkpoints": size,
        "list_s": statistics.median(times),
        "list_seen": seen,
        "list_capped": capped,
        "list_peak_traced_bytes": list_traced,
        "list_peak_rss_bytes": list_rss,
        "get_state_s": statistics.median(gets),
        "get_state_peak_traced_bytes": get_traced,
        "get_state_peak_rss_bytes": get_rss,
    }
    head_value = head.checkpoint["channel_values"].get("counter") if head else None
    if head_value != size - 1:
        out["error"] = f"head counter is {head_value!r}, expected {size - 1}"
    if not capped and seen != size:
        out["error"] = f"history has {seen} checkpoints, expected {size}"
    return out


def run_long_cell(saver: Any, bytes_fn: Callable[[], int | None], p: dict) -> dict:
    thread = f"long-{uuid.uuid4().hex[:8]}"
    config: dict = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    version, done, fill_s = None, 0, 0.0
    sizes = {}
    for size in p["long_sizes"]:
        t0 = time.perf_counter()
        config, version = fill(saver, config, done, size, version)
        fill_s += time.perf_counter() - t0
        done = size
        sizes[str(size)] = measure_long(saver, thread, size, p)
    return {
        "writes": "direct saver.put, one int channel per checkpoint",
        "put_per_s": done / fill_s if fill_s else None,
        "bytes_on_disk": bytes_fn(),
        "sizes": sizes,
    }


def run_long(bench: Bench, p: dict, savers: tuple[str, ...]) -> dict:
    results = {}
    for name in savers:
        log(f"  {name} ...")
        gc.collect()
        with sync_saver(bench, name) as (saver, bytes_fn):
            results[name] = run_long_cell(saver, bytes_fn, p)
        big = results[name]["sizes"][str(p["long_sizes"][-1])]
        log(
            f"    {results[name]['put_per_s']:.0f} puts/s, list {big['list_s']:.2f}s, "
            f"peak {big['list_peak_traced_bytes'] / 1e6:.2f} MB"
        )
    return results


# ---------------------------------------------------------------- ratios and targets


# ---------------------------------------------------------------- search-100k

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


def ratio(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return None
    return a / b


CHAT_FIGURES = [
    # key, label, kind
    ("total_s", "total time", "s"),
    ("p50_turn_s", "p50 per turn", "s"),
    ("last10_turn_s", "median of last 10 turns", "s"),
    ("bytes_on_disk", "bytes on disk", "bytes"),
    ("get_state_s", "get_state (median)", "s"),
    ("history_s", "full get_state_history", "s"),
    ("checkpoints", "checkpoints in history", "n"),
    ("hot_bytes_per_thread", "Redis bytes per hot thread", "bytes"),
]
CONC_FIGURES = [
    ("invokes_per_s", "invokes/s (median of rounds)", "rate"),
    ("p50_invoke_s", "p50 invoke latency", "s"),
    ("p95_invoke_s", "p95 invoke latency", "s"),
]
LONG_FIGURES = [
    ("list_s", "full list() time", "s"),
    ("list_peak_traced_bytes", "full list() peak (tracemalloc)", "bytes"),
    ("list_peak_rss_bytes", "full list() peak (RSS growth)", "bytes"),
    ("get_state_s", "get_tuple at head (median)", "s"),
    ("get_state_peak_traced_bytes", "get_tuple peak (tracemalloc)", "bytes"),
    ("get_state_peak_rss_bytes", "get_tuple peak (RSS growth)", "bytes"),
]

# Memory is "flat" when a figure at the larger size is at most FLAT_GROWTH times
# the smaller one (a linear reader would show ~4x from 5k to 20k). RSS deltas
# under RSS_NOISE_FLOOR are treated as noise.
FLAT_GROWTH = 1.5
RSS_NOISE_FLOOR = 1 << 20
TRACED_NOISE_FLOOR = 64 << 10


def flatness(cell: dict, sizes: list[int]) -> dict:
    small, big = cell["sizes"][str(sizes[0])], cell["sizes"][str(sizes[-1])]
    checks = {}
    for key, floor in (
        ("list_peak_traced_bytes", TRACED_NOISE_FLOOR),
        ("get_state_peak_traced_bytes", TRACED_NOISE_FLOOR),
        ("list_peak_rss_bytes", RSS_NOISE_FLOOR),
        ("get_state_peak_rss_bytes", RSS_NOISE_FLOOR),
    ):
        a, b = small.get(key), big.get(key)
        if a is None or b is None:
            continue
        growth = max(b, floor) / max(a, floor)
        checks[key] = {"small": a, "big": b, "growth": growth, "flat": growth <= FLAT_GROWTH}
    return checks


def compute_targets(results: dict, p: dict) -> list[dict]:
    def cell_ratio(workload: str, key: str, ours: str, ref: str) -> float | None:
        w = results.get(workload)
        if not w:
            return None
        return ratio(w.get(ours, {}).get(key), w.get(ref, {}).get(key))

    targets = []

    def add(name: str, value: float | None, op: str, bound: float, basis: str) -> None:
        if value is None:
            status = "not run"
        else:
            status = "met" if (value <= bound if op == "<=" else value >= bound) else "missed"
        targets.append(
            {
                "target": name,
                "value": value,
                "op": op,
                "bound": bound,
                "status": status,
                "basis": basis,
            }
        )

    vs = "ours / PostgresSaver"
    add(
        "chat-200 bytes on disk", cell_ratio("chat-200", "bytes_on_disk", OURS, REF), "<=", 0.05, vs
    )
    add("chat-200 p50 per turn", cell_ratio("chat-200", "p50_turn_s", OURS, REF), "<=", 0.7, vs)
    add("chat-200 full history", cell_ratio("chat-200", "history_s", OURS, REF), "<=", 0.2, vs)
    add(
        "chat-200-delta bytes on disk",
        cell_ratio("chat-200-delta", "bytes_on_disk", OURS, REF),
        "<=",
        1.0,
        vs + ", both with DeltaChannel",
    )
    add(
        "chat-200-delta full history",
        cell_ratio("chat-200-delta", "history_s", OURS, REF),
        "<=",
        0.3,
        vs + ", both with DeltaChannel",
    )
    add(
        "conc-32 throughput",
        cell_ratio("conc-32", "invokes_per_s", AOURS, AREF),
        ">=",
        3.0,
        "invokes/s, AsyncColosseumSaver / AsyncPostgresSaver",
    )
    add(
        "chat-200 get_state, Redis head",
        cell_ratio("chat-200", "get_state_s", OURS_HOT, REF),
        "<=",
        0.3,
        "ColosseumSaver+Redis / PostgresSaver",
    )
    add(
        "conc-32 no slower with the cache",
        cell_ratio("conc-32", "invokes_per_s", AOURS_HOT, AOURS),
        ">=",
        1.0,
        "invokes/s, AsyncColosseumSaver+Redis / AsyncColosseumSaver",
    )
    long = results.get("long-20k", {}).get(OURS)
    if long:
        checks = flatness(long, p["long_sizes"])
        worst = max((c["growth"] for c in checks.values()), default=None)
        targets.append(
            {
                "target": "long-20k memory flat",
                "value": worst,
                "op": "<=",
                "bound": FLAT_GROWTH,
                "status": "met" if checks and all(c["flat"] for c in checks.values()) else "missed",
                "basis": (
                    f"ColosseumSaver peak memory at {p['long_sizes'][-1]:,} / at "
                    f"{p['long_sizes'][0]:,} checkpoints, worst of list() and get_tuple, "
                    "tracemalloc and RSS"
                ),
                "checks": checks,
            }
        )
    else:
        add("long-20k memory flat", None, "<=", FLAT_GROWTH, "ColosseumSaver peak growth")
    return targets


# ---------------------------------------------------------------- formatting


def fmt(value: Any, kind: str) -> str:
    if value is None:
        return "n/a"
    if kind == "s":
        if value >= 1:
            return f"{value:.2f} s"
        if value >= 1e-3:
            return f"{value * 1e3:.1f} ms"
        return f"{value * 1e6:.0f} µs"
    if kind == "bytes":
        if value >= 1e6:
            return f"{value / 1e6:.2f} MB"
        if value >= 1e3:
            return f"{value / 1e3:.1f} kB"
        return f"{value:.0f} B"
    if kind == "rate":
        return f"{value:.0f}/s"
    if kind == "n":
        return f"{value:,}"
    return str(value)


def fmt_ratio(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 100 or value < 0.01:
        return f"{value:.2g}"
    return f"{value:.2f}"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def workload_tables(results: dict, p: dict) -> list[str]:
    out: list[str] = []
    for workload in ("chat-200", "chat-200-delta"):
        w = results.get(workload)
        if not w:
            continue
        names = [n for n in SYNC_SAVERS if n in w]
        title = f"### {workload} ({p['chat_turns']} turns"
        title += ", messages in a `DeltaChannel`)" if workload.endswith("delta") else ")"
        out += [title, ""]
        rows = []
        for key, label, kind in CHAT_FIGURES:
            row = [label] + [fmt(w[n].get(key), kind) for n in names]
            for ours in (OURS, OURS_HOT):
                row.append(fmt_ratio(ratio(w.get(ours, {}).get(key), w.get(REF, {}).get(key))))
            rows.append(row)
        out += md_table(
            ["figure", *names, "ours / PostgresSaver", "ours+Redis / PostgresSaver"], rows
        )
        errors = [f"{n}: {w[n]['error']}" for n in names if "error" in w[n]]
        out += [""] + [f"**check failed** {e}" for e in errors] + ([""] if errors else [])
    w = results.get("conc-32")
    if w:
        names = [n for n in ASYNC_SAVERS if n in w]
        out += [
            f"### conc-32 ({p['conc_threads']} concurrent async threads x {p['conc_turns']} "
            f"turns, 10-connection pool, median of {p['conc_rounds']} round(s))",
            "",
        ]
        rows = []
        for key, label, kind in CONC_FIGURES:
            row = [label] + [
                "skipped" if "skipped" in w[n] else fmt(w[n].get(key), kind) for n in names
            ]
            for ours in (AOURS, AOURS_HOT):
                row.append(fmt_ratio(ratio(w.get(ours, {}).get(key), w.get(AREF, {}).get(key))))
            rows.append(row)
        out += md_table(
            ["figure", *names, "ours / AsyncPostgresSaver", "ours+Redis / AsyncPostgresSaver"], rows
        )
        out += [""]
        for n in names:
            if "skipped" in w[n]:
                out += [f"{n} skipped: {w[n]['skipped']}", ""]
    w = results.get("long-20k")
    if w:
        names = [n for n in SYNC_SAVERS if n in w]
        out += [
            "### long-20k (one thread of tiny checkpoints written by direct `saver.put`; "
            "full `saver.list(config)` and `get_tuple` at the head)",
            "",
        ]
        rows = [
            ["puts/s while filling"]
            + [fmt(w[n].get("put_per_s"), "rate") for n in names]
            + [fmt_ratio(ratio(w.get(OURS, {}).get("put_per_s"), w.get(REF, {}).get("put_per_s")))],
            ["bytes on disk at the end"]
            + [fmt(w[n].get("bytes_on_disk"), "bytes") for n in names]
            + [
                fmt_ratio(
                    ratio(w.get(OURS, {}).get("bytes_on_disk"), w.get(REF, {}).get("bytes_on_disk"))
                )
            ],
        ]
        notes = []
        for size in p["long_sizes"]:
            for key, label, kind in LONG_FIGURES:
                cells = [w[n]["sizes"][str(size)] for n in names]
                row = [f"{label} @ {size:,}"]
                for n, c in zip(names, cells):
                    text = fmt(c.get(key), kind)
                    if key == "list_s" and c.get("list_capped"):
                        text += f" (capped at {c['list_seen']:,})"
                        notes.append(
                            f"{n} full list() at {size:,} was cut off after "
                            f"{p['long_list_cap_s']:.0f} s ({c['list_seen']:,} checkpoints read)"
                        )
                    row.append(text)
                o = w.get(OURS, {}).get("sizes", {}).get(str(size), {}).get(key)
                r = w.get(REF, {}).get("sizes", {}).get(str(size), {}).get(key)
                row.append(fmt_ratio(ratio(o, r)))
                rows.append(row)
        out += md_table(["figure", *names, "ours / PostgresSaver"], rows)
        out += [""]
        growth_rows = []
        for n in names:
            checks = flatness(w[n], p["long_sizes"])
            growth_rows.append(
                [n]
                + [
                    fmt_ratio(checks[k]["growth"]) if k in checks else "n/a"
                    for k, _, _ in (
                        ("list_peak_traced_bytes", "", ""),
                        ("list_peak_rss_bytes", "", ""),
                        ("get_state_peak_traced_bytes", "", ""),
                        ("get_state_peak_rss_bytes", "", ""),
                    )
                ]
            )
        out += [
            f"Peak-memory growth from {p['long_sizes'][0]:,} to {p['long_sizes'][-1]:,} "
            f"checkpoints (1.0 = flat, {p['long_sizes'][-1] / p['long_sizes'][0]:.0f} = linear; "
            f"RSS growth under {RSS_NOISE_FLOOR >> 20} MiB and tracemalloc under "
            f"{TRACED_NOISE_FLOOR >> 10} KiB count as noise):",
            "",
        ]
        out += md_table(
            ["saver", "list() tracemalloc", "list() RSS", "get_tuple tracemalloc", "get_tuple RSS"],
            growth_rows,
        )
        if not notes:
            notes.append(
                f"no full list() pass hit the {p['long_list_cap_s']:.0f} s cap: every figure "
                "above covers the whole thread"
            )
        out += [""] + [f"Note: {n}." for n in notes] + [""]
        errors = [
            f"{n} @ {s}: {c['error']}"
            for n in names
            for s, c in w[n]["sizes"].items()
            if "error" in c
        ]
        out += [f"**check failed** {e}" for e in errors] + ([""] if errors else [])
    return out


def targets_table(targets: list[dict]) -> list[str]:
    rows = []
    for t in targets:
        bound = f"{t['op']} {t['bound']:g}"
        if t["target"].startswith("conc-32"):
            bound = f">= {t['bound']:g}x"
        rows.append([t["target"], bound, fmt_ratio(t["value"]), t["status"], t["basis"]])
    return md_table(["target", "bound", "this run", "status", "basis"], rows)


def render_markdown(meta: dict, results: dict, targets: list[dict], p: dict) -> str:
    lines = [
        "# Benchmark results",
        "",
        f"Run {meta['date']} with `{meta['command']}` "
        f"({'quick smoke mode' if meta['quick'] else 'full run'}), wall time "
        f"{meta['wall_s']:.0f} s.",
        "",
        "All savers ran in one process against one fresh database on the same PostgreSQL "
        "server; ratios are ours / PostgresSaver (AsyncPostgresSaver for conc-32) from this "
        "run. Single runs unless a median is named; timings are noisy and never asserted.",
        "",
        "## Machine",
        "",
    ]
    lines += md_table(["", ""], [[k, str(v)] for k, v in meta["machine"].items()])
    lines += ["", "## Targets", ""]
    lines += targets_table(targets)
    lines += ["", "## Figures", ""]
    lines += workload_tables(results, p)
    if search := results.get("search-100k"):
        lines += [
            f"### search-100k (`threads.search(limit=10)` over {search['threads']:,} threads; "
            "no reference saver has a search to compare)",
            "",
        ]
        lines += md_table(
            ["search", "p50", "threads found"],
            [
                [label, f"{cell['p50_ms']:.2f} ms", str(cell["found"])]
                for label, cell in search["searches"].items()
            ],
        )
        lines += [""]
    lines += [f"![ratios]({meta['out']}.png)"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- chart


def chart_bars(results: dict, p: dict) -> list[tuple[str, str, float, float | None]]:
    """(workload, label, ours/ref cost ratio (lower is better), target or None)."""
    bars = []
    targets = {
        ("chat-200", "bytes_on_disk"): 0.05,
        ("chat-200", "p50_turn_s"): 0.7,
        ("chat-200", "history_s"): 0.2,
        ("chat-200-delta", "bytes_on_disk"): 1.0,
        ("chat-200-delta", "history_s"): 0.3,
    }
    for workload in ("chat-200", "chat-200-delta"):
        w = results.get(workload, {})
        for key, label in (
            ("total_s", "total"),
            ("p50_turn_s", "p50/turn"),
            ("bytes_on_disk", "bytes"),
            ("get_state_s", "get_state"),
            ("history_s", "history"),
        ):
            r = ratio(w.get(OURS, {}).get(key), w.get(REF, {}).get(key))
            if r:
                bars.append((workload, label, r, targets.get((workload, key))))
    w = results.get("conc-32", {})
    r = ratio(w.get(AOURS, {}).get("invokes_per_s"), w.get(AREF, {}).get("invokes_per_s"))
    if r:
        bars.append(("conc-32", "s/invoke\n(1/throughput)", 1 / r, 1 / 3))
    w = results.get("long-20k", {})
    big = str(p["long_sizes"][-1])
    for key, label in (
        ("list_s", "list time"),
        ("list_peak_traced_bytes", "list mem"),
        ("get_state_s", "get time"),
        ("get_state_peak_traced_bytes", "get mem"),
    ):
        o = w.get(OURS, {}).get("sizes", {}).get(big, {}).get(key)
        f = w.get(REF, {}).get("sizes", {}).get(big, {}).get(key)
        r = ratio(o, f)
        if r:
            bars.append(("long-20k", f"{label}\n@ {int(big):,}", r, None))
    return bars


def write_chart(path: Path, results: dict, p: dict, meta: dict) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'); no chart written"
    bars = chart_bars(results, p)
    if not bars:
        return "no ours/PostgresSaver ratios to chart"
    colors = {
        "chat-200": "#4c72b0",
        "chat-200-delta": "#55a868",
        "conc-32": "#c44e52",
        "long-20k": "#8172b2",
    }
    xs, x, prev = [], 0.0, None
    for workload, *_ in bars:
        if prev is not None and workload != prev:
            x += 0.8
        xs.append(x)
        x += 1
        prev = workload
    fig, ax = plt.subplots(figsize=(max(8, len(bars) * 0.7), 5.5))
    ax.bar(xs, [b[2] for b in bars], color=[colors[b[0]] for b in bars], width=0.8)
    for xi, (_, _, value, target) in zip(xs, bars):
        ax.annotate(
            fmt_ratio(value),
            (xi, value),
            ha="center",
            va="bottom",
            fontsize=7,
            xytext=(0, 2),
            textcoords="offset points",
        )
        if target is not None:
            ax.plot(
                [xi - 0.4, xi + 0.4], [target, target], color="black", linestyle="--", linewidth=1.2
            )
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_yscale("log")
    span = [b[2] for b in bars] + [b[3] for b in bars if b[3] is not None] + [1.0]
    ax.set_ylim(min(span) / 2, max(span) * 2)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xticks(xs)
    ax.set_xticklabels([b[1] for b in bars], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("ours / PostgresSaver (lower is better, log scale)")
    ax.set_title(
        f"langgraph-colosseum vs langgraph-checkpoint-postgres, {meta['date'][:10]}"
        + (" (quick mode)" if meta["quick"] else "")
        + "\ndashed: target; grey: parity",
        fontsize=10,
    )
    from matplotlib.patches import Patch

    seen = list(dict.fromkeys(b[0] for b in bars))
    ax.legend(handles=[Patch(color=colors[w], label=w) for w in seen], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return None


# ---------------------------------------------------------------- main


def machine_info(bench: Bench) -> dict:
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    versions = {}
    for pkg in (
        "langgraph-colosseum",
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-postgres",
        "langgraph-checkpoint-sqlite",
        "psycopg",
        "aiosqlite",
    ):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = "not installed"
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory": mem,
        "python": platform.python_version(),
        "postgres": bench.server_version(),
        "packages": ", ".join(f"{k} {v}" for k, v in versions.items()),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Benchmark ColosseumSaver against PostgresSaver (and floors).",
    )
    parser.add_argument("--quick", action="store_true", help="smoke mode: fewer turns")
    parser.add_argument(
        "--workloads",
        nargs="+",
        metavar="NAME",
        help=f"some of {', '.join(WORKLOADS)} (space or comma separated; default all)",
    )
    parser.add_argument(
        "--out",
        help="results file stem under benchmarks/results (default latest, or quick with --quick)",
    )
    args = parser.parse_args(argv)
    chosen = []
    for item in args.workloads or list(WORKLOADS):
        for name in item.split(","):
            name = name.strip()
            if not name:
                continue
            if name not in WORKLOADS:
                parser.error(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
            chosen.append(name)
    args.workloads = [w for w in WORKLOADS if w in chosen]
    args.out = args.out or ("quick" if args.quick else "latest")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    p = params_for(args.quick)
    started = time.perf_counter()
    bench = Bench(ADMIN_URL)
    log(f"database {bench.name} on {conninfo.conninfo_to_dict(ADMIN_URL).get('host', '?')}")
    bench.create()
    results: dict[str, Any] = {}
    try:
        machine = machine_info(bench)
        for workload in args.workloads:
            log(f"{workload}:")
            t0 = time.perf_counter()
            if workload == "chat-200":
                results[workload] = run_chat(bench, p, False, SYNC_SAVERS)
            elif workload == "chat-200-delta":
                results[workload] = run_chat(bench, p, True, SYNC_SAVERS)
            elif workload == "conc-32":
                results[workload] = run_conc(bench, p, ASYNC_SAVERS)
            elif workload == "long-20k":
                # Direct puts and reads of one long thread: the cache is not the subject.
                results[workload] = run_long(bench, p, (MEMORY, SQLITE, REF, OURS))
            elif workload == "search-100k":
                results[workload] = run_search(bench, p)
            log(f"  ({time.perf_counter() - t0:.0f} s)")
    finally:
        bench.drop()
    wall = time.perf_counter() - started

    targets = compute_targets(results, p)
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(
            ["python -m benchmarks.run", *(argv if argv is not None else sys.argv[1:])]
        ),
        "quick": args.quick,
        "workloads": args.workloads,
        "out": args.out,
        "wall_s": wall,
        "machine": machine,
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stem = RESULTS_DIR / args.out
    markdown = render_markdown(meta, results, targets, p)
    chart_note = write_chart(stem.with_suffix(".png"), results, p, meta)
    if chart_note:
        markdown = markdown.replace(f"![ratios]({args.out}.png)", f"(chart: {chart_note})")
    stem.with_suffix(".md").write_text(markdown)
    stem.with_suffix(".json").write_text(
        json.dumps(
            {"meta": meta, "params": p, "results": results, "targets": targets},
            indent=2,
            default=str,
        )
        + "\n"
    )
    print(markdown)
    written = [stem.with_suffix(s) for s in (".md", ".json")]
    if not chart_note:
        written.append(stem.with_suffix(".png"))
    log(
        "wrote "
        + ", ".join(
            str(w.relative_to(Path.cwd())) if w.is_relative_to(Path.cwd()) else str(w)
            for w in written
        )
    )
    log(f"wall time {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
