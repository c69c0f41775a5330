"""What every workload shares: parameters, the run's database, the savers, and the meters.

A `Meter` around a phase reads, in the same run for every saver: client CPU
(`time.process_time`, all threads of this process), Postgres CPU (utime +
stime of the run database's client backends from /proc), statements and
server time (`pg_stat_statements`, when the server preloads it), round trips
(counted in psycopg, see `_count_round_trips`) and Redis commands
(`INFO commandstats`, on a private server only) and the Redis server's CPU
(`INFO cpu`, idem), and the WAL Postgres wrote (`pg_current_wal_insert_lsn()`, on the
run's private server only: it is server-wide).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
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
from typing import Any

import psycopg
import redis
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from psycopg import conninfo
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, Encryption, telemetry

# The `dev` extra installs opentelemetry-api, which turns telemetry on at import.
# The savers are measured as installed without the `otel` extra (no observer);
# benchmarks/telemetry.py measures what the extra costs, switching it itself.
telemetry.disable()

try:  # AsyncSqliteSaver needs aiosqlite.
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
except ImportError:  # pragma: no cover - depends on the environment
    AsyncSqliteSaver = None  # type: ignore[assignment,misc]

ADMIN_URL = os.environ.get(
    "COLOSSEUM_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
RESULTS_DIR = Path(__file__).resolve().parent / "results"
WORKLOADS = (
    "chat-200",
    "chat-200-delta",
    "conc-32",
    "long-20k",
    "long-20k-graph",
    "search-100k",
)

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
# Ours on Postgres alone, through a PgBouncer in transaction mode (`pgbouncer=True`).
OURS_BOUNCER = "ColosseumSaver+PgBouncer"
# Ours on Postgres alone with `encryption=` (AES-256-GCM per row, one key).
OURS_ENCRYPTED = "ColosseumSaver+Encryption"
# Both at once (benchmarks/encryption.py; not in the main run's list).
OURS_BOUNCER_ENCRYPTED = "ColosseumSaver+PgBouncer+Encryption"
# Ours on Postgres alone writing the compact stored forms (`compact_forms=True`);
# in the chat cells only: on the same tables as `ours`, a cell open beside it
# (long-20k's) would be measured together with it.
OURS_COMPACT = "ColosseumSaver+compact"
# Ours on Postgres alone with `inline_values=True` (small scalars carried in
# each checkpoint's document too); measured by benchmarks/long_ab.py, which
# runs one cell at a time, for the reason above.
OURS_INLINE = "ColosseumSaver+inline"
# Ours with on_conflict="raise", alone and with the Redis head (benchmarks/on_conflict.py).
OURS_ON_CONFLICT = "ColosseumSaver+on_conflict"
OURS_HOT_ON_CONFLICT = "ColosseumSaver+Redis+on_conflict"
SYNC_SAVERS = (MEMORY, SQLITE, REF, OURS, OURS_HOT, OURS_BOUNCER, OURS_ENCRYPTED, OURS_COMPACT)
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
            "long_get_rounds": 2,
            "long_list_cap_s": 30.0,
            "search_threads": 5000,
            "search_repeats": 10,
            "graph_sizes": [500, 2000],
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
        "long_get_rounds": 5,
        # One pass of a full history is cut off after this long (and says so).
        "long_list_cap_s": 60.0,
        "search_threads": 100_000,
        "search_repeats": 50,
        # long-20k-graph: a real graph looping this many steps, measured at each.
        "graph_sizes": [5000, 20000],
    }


# ---------------------------------------------------------------- database


class Bench:
    """The run's database and the table lists of the two Postgres savers.

    `admin_url` names the server; `redis_url` the Redis of the hot head cells;
    `private_redis` says that server is this run's own (its counters may be reset);
    `private_postgres` the same of the PostgreSQL (its server-wide WAL is the run's).
    """

    def __init__(
        self,
        admin_url: str,
        redis_url: str = REDIS_URL,
        private_redis: bool = False,
        private_postgres: bool = False,
    ):
        self.admin_url = admin_url
        self.redis_url = redis_url
        self.private_redis = private_redis
        self.private_postgres = private_postgres
        self.name = f"colosseum_bench_{uuid.uuid4().hex[:10]}"
        self.url = conninfo.make_conninfo(admin_url, dbname=self.name)
        self.tables: dict[str, tuple[str, ...]] = {}
        self.tmpdir = tempfile.TemporaryDirectory(prefix="colosseum_bench_")
        self.monitor: psycopg.Connection | None = None
        self.statements = False  # pg_stat_statements is readable
        self.oid = 0
        # The run's database through PgBouncer (transaction mode), when one runs.
        self.bouncer_url: str | None = None

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
        # The meters read server counters on a connection to the admin database,
        # so their own statements are not counted against the run's database.
        self.monitor = psycopg.connect(self.admin_url, autocommit=True)
        self.oid = self.monitor.execute(
            "SELECT oid FROM pg_database WHERE datname = %s", [self.name]
        ).fetchone()[0]
        try:
            self.monitor.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
            self.statements = True
        except psycopg.Error:
            self.statements = False

    def drop(self) -> None:
        if self.monitor is not None:
            self.monitor.close()
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
        client = redis.Redis.from_url(self.redis_url)
        for key in client.scan_iter(match=CACHE_PREFIX + "*", count=1000):
            client.delete(key)
        client.close()

    def hot_bytes_per_thread(self) -> tuple[float | None, float | None]:
        """Redis memory per hot thread (MEMORY USAGE of each thread's one hash),
        and the bytes of what it holds (fields and values, as encoded)."""
        client = redis.Redis.from_url(self.redis_url)
        try:
            keys = list(client.scan_iter(match=CACHE_PREFIX + "*", count=1000))
            sizes = [client.memory_usage(key, samples=0) for key in keys]
            encoded = [
                sum(len(f) + len(v) for f, v in client.hgetall(key).items())
                if client.type(key) == b"hash"
                else len(client.dump(key) or b"")
                for key in keys
            ]
        finally:
            client.close()
        if not sizes:
            return None, None
        return statistics.mean(sizes), statistics.mean(encoded)

    def sqlite_path(self) -> str:
        return os.path.join(self.tmpdir.name, f"{uuid.uuid4().hex[:8]}.sqlite")

    # ------------------------------------------------------------ counters

    def backend_cpu(self) -> dict[int, float]:
        """CPU seconds (user + system) of each client backend on the run's database."""
        assert self.monitor is not None
        pids = self.monitor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s "
            "AND backend_type = 'client backend'",
            [self.name],
        ).fetchall()
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for (pid,) in pids:
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{pid}/stat") as f:
                    # Fields after the command name (which may hold spaces).
                    fields = f.read().rsplit(")", 1)[1].split()
                out[pid] = (int(fields[11]) + int(fields[12])) / tick
        return out

    def reset_statements(self) -> None:
        if self.statements:
            assert self.monitor is not None
            self.monitor.execute("SELECT pg_stat_statements_reset()")

    def read_statements(self) -> dict[str, Any] | None:
        if not self.statements:
            return None
        assert self.monitor is not None
        rows = self.monitor.execute(
            "SELECT query, calls, total_plan_time, total_exec_time, plans "
            "FROM pg_stat_statements WHERE dbid = %s ORDER BY total_plan_time + "
            "total_exec_time DESC",
            [self.oid],
        ).fetchall()
        return {
            "statements": sum(r[1] for r in rows),
            "plan_ms": sum(r[2] for r in rows),
            "exec_ms": sum(r[3] for r in rows),
            "top": [
                {
                    "query": " ".join(r[0].split())[:160],
                    "calls": r[1],
                    "plans": r[4],
                    "plan_ms": round(r[2], 3),
                    "exec_ms": round(r[3], 3),
                }
                for r in rows[:6]
            ],
        }

    def wal_position(self) -> int | None:
        """Bytes of WAL the server has written so far (private server only).

        Server-wide, so it counts only on a server nobody else writes to. Exact
        (the insert position), unlike pg_stat_wal and pg_stat_io, which each
        backend reports late, up to a second after its statements.
        """
        if not self.private_postgres:
            return None
        assert self.monitor is not None
        row = self.monitor.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint"
        ).fetchone()
        return int(row[0])

    def redis_cpu(self) -> float | None:
        """CPU seconds (user + system) of the Redis server so far (private server only)."""
        if not self.private_redis:
            return None
        client = redis.Redis.from_url(self.redis_url)
        try:
            cpu = client.info("cpu")
        finally:
            client.close()
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])

    def redis_commands(self, reset: bool = False) -> dict[str, int] | None:
        """Calls per command since the last reset (private server only)."""
        if not self.private_redis:
            return None
        client = redis.Redis.from_url(self.redis_url)
        try:
            if reset:
                client.config_resetstat()
                return {}
            stats = client.info("commandstats")
        finally:
            client.close()
        out = {}
        for name, cell in stats.items():
            command = name.removeprefix("cmdstat_")
            # The meter's own INFO / CONFIG RESETSTAT, and the cell's cleanup.
            if command.split("|")[0] in ("info", "config"):
                continue
            out[command] = int(cell["calls"])
        return out


# ------------------------------------------------------------------ meter

# Round trips to Postgres, counted in psycopg where the client waits on the
# server: an execute, BEGIN or COMMIT outside a pipeline; inside one, a sync,
# a fetch of pending results, and the end of the outermost pipeline (however
# many statements it carries). A COMMIT with no transaction open sends nothing.
# Both savers run on psycopg, so both are counted alike.
ROUND_TRIPS = [0]


def _is_round_trip(conn: Any, gen: Any) -> bool:
    from psycopg.pq import TransactionStatus

    name = getattr(gen, "__qualname__", "")
    if name == "_send_all":  # a request sent ahead: its reply is read (and counted) later
        return False
    if name in ("BaseConnection._commit_gen", "BaseConnection._rollback_gen"):
        return conn.pgconn.transaction_status != TransactionStatus.IDLE
    pipeline = conn._pipeline
    if pipeline is None:
        return name != "BasePipeline._enter_gen"
    if name == "BasePipeline._exit_gen":
        return pipeline.level == 1
    if name == "BasePipeline._fetch_gen":
        return bool(pipeline.result_queue)
    return name == "BasePipeline._sync_gen"


def _count_round_trips() -> None:
    from psycopg import AsyncConnection, Connection

    wait, await_ = Connection.wait, AsyncConnection.wait

    def counted_wait(self, gen, *args, **kwargs):
        if _is_round_trip(self, gen):
            ROUND_TRIPS[0] += 1
        return wait(self, gen, *args, **kwargs)

    async def counted_await(self, gen, *args, **kwargs):
        if _is_round_trip(self, gen):
            ROUND_TRIPS[0] += 1
        return await await_(self, gen, *args, **kwargs)

    Connection.wait = counted_wait  # type: ignore[method-assign]
    AsyncConnection.wait = counted_await  # type: ignore[method-assign]


_count_round_trips()


class Meter:
    """CPU and traffic of one phase of one cell: `with Meter(bench) as m: ...; m.per(n)`."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.figures: dict[str, Any] = {}

    def __enter__(self) -> Meter:
        self.bench.reset_statements()
        self.bench.redis_commands(reset=True)
        self.backends = self.bench.backend_cpu()
        self.redis_cpu = self.bench.redis_cpu()
        self.wal = self.bench.wal_position()
        self.round_trips = ROUND_TRIPS[0]
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        return self

    def __exit__(self, *exc: Any) -> None:
        cpu = time.process_time() - self.cpu
        wall = time.perf_counter() - self.wall
        round_trips = ROUND_TRIPS[0] - self.round_trips
        backends = self.bench.backend_cpu()
        # A backend born during the phase counts from zero.
        pg_cpu = sum(t - self.backends.get(pid, 0.0) for pid, t in backends.items())
        statements = self.bench.read_statements()
        redis_calls = self.bench.redis_commands()
        redis_cpu = self.bench.redis_cpu()
        wal = self.bench.wal_position()
        self.figures = {
            "client_cpu_s": cpu,
            "wall_s": wall,
            "pg_cpu_s": pg_cpu,
            "round_trips": round_trips,
            "statements": statements["statements"] if statements else None,
            "pg_plan_ms": statements["plan_ms"] if statements else None,
            "pg_exec_ms": statements["exec_ms"] if statements else None,
            "top_statements": statements["top"] if statements else None,
            "redis_commands": sum(redis_calls.values()) if redis_calls is not None else None,
            "redis_by_command": redis_calls,
            # The Redis server's own CPU (INFO cpu), the meters' INFO calls included.
            "redis_cpu_s": (
                redis_cpu - self.redis_cpu
                if redis_cpu is not None and self.redis_cpu is not None
                else None
            ),
            "wal_bytes": wal - self.wal if wal is not None and self.wal is not None else None,
        }

    def per(self, n: int) -> dict[str, Any]:
        """Every figure divided by n (invokes, checkpoints, calls); breakdowns kept whole."""
        out: dict[str, Any] = {"units": n}
        for key, value in self.figures.items():
            if isinstance(value, (int, float)) and n:
                out[key] = value / n
            else:
                out[key] = value
        return out


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
    elif name in (
        OURS,
        OURS_HOT,
        OURS_ON_CONFLICT,
        OURS_HOT_ON_CONFLICT,
        OURS_COMPACT,
        OURS_INLINE,
    ):
        bench.truncate(OURS)
        bench.clear_cache()
        hot = name in (OURS_HOT, OURS_HOT_ON_CONFLICT)
        options: dict[str, Any] = (
            {"redis_url": bench.redis_url, "cache_prefix": CACHE_PREFIX} if hot else {}
        )
        if name in (OURS_ON_CONFLICT, OURS_HOT_ON_CONFLICT):
            options["on_conflict"] = "raise"
        if name == OURS_COMPACT:
            options["compact_forms"] = True
        if name == OURS_INLINE:
            options["inline_values"] = True
        with ColosseumSaver.from_conn_string(bench.url, **options) as saver:
            saver.setup()
            yield saver, lambda: bench.table_bytes(OURS)
    elif name == OURS_ENCRYPTED:
        bench.truncate(OURS)
        encryption = Encryption({"bench": os.urandom(32)})
        with ColosseumSaver.from_conn_string(bench.url, encryption=encryption) as saver:
            saver.setup()
            yield saver, lambda: bench.table_bytes(OURS)
    elif name in (OURS_BOUNCER, OURS_BOUNCER_ENCRYPTED):
        if bench.bouncer_url is None:
            raise Skipped("no PgBouncer in this run (pgbouncer is not installed)")
        bench.truncate(OURS)
        options: dict[str, Any] = {"pgbouncer": True}
        if name == OURS_BOUNCER_ENCRYPTED:
            options["encryption"] = Encryption({"bench": os.urandom(32)})
        with ColosseumSaver.from_conn_string(bench.bouncer_url, **options) as saver:
            saver.setup()
            yield saver, lambda: bench.table_bytes(OURS)
    else:  # pragma: no cover
        raise ValueError(name)


class Skipped(Exception):
    """A cell that cannot run in this run; its reason goes in the report."""


def reference_pool(url: str, size: int) -> AsyncConnectionPool:
    """The pool AsyncPostgresSaver runs on, as langgraph-checkpoint-postgres documents it."""
    return AsyncConnectionPool(
        url,
        max_size=size,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        open=False,
    )


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
        async with reference_pool(bench.url, pool_size) as pool:
            saver = AsyncPostgresSaver(pool)
            await saver.setup()
            yield saver
    elif name in (AOURS, AOURS_HOT):
        bench.truncate(OURS)
        bench.clear_cache()
        cache = (
            {"redis_url": bench.redis_url, "cache_prefix": CACHE_PREFIX}
            if name == AOURS_HOT
            else {}
        )
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


def ratio(a: Any, b: Any) -> float | None:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not b:
        return None
    return a / b


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
    if kind == "f":
        return f"{value:.2f}"
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


def letters(rng: random.Random, n: int) -> str:
    return "".join(rng.choices(string.ascii_letters, k=n))
