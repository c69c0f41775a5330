"""Shared fixtures: a throwaway Postgres database for the whole test session,
and the Redis hot cache.

The Postgres server comes from COLOSSEUM_TEST_POSTGRES_URL, else the local
PostgreSQL on 127.0.0.1:5432, else the embedded one (the `embedded` extra), so
`pytest` passes on a bare laptop too. Each session creates its own database and
drops it at the end, so runs never see each other's rows. Redis comes from
COLOSSEUM_TEST_REDIS_URL, else 127.0.0.1:6379, else the embedded Valkey; each
session's keys carry a prefix of their own.

The `saver` and `asaver` fixtures run every test twice: on Postgres alone, and
with the Redis hot head in front of it. Modules that also run each test through
a PgBouncer in transaction mode (`pgbouncer=True`) override them with
`CONNECTION_MODES` (see `saver_fixtures`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import psycopg
import pytest
import redis
from hypothesis import HealthCheck, settings
from psycopg import conninfo

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum.cache import client_options
from tests.integration.pgbouncer import PgBouncer
from tests.integration.redis_servers import RedisCluster
from tests.integration.store_support import fresh_database
from tests.integration.tls_servers import TlsServers

# Property tests check values, never time: hypothesis' default 200 ms deadline per
# example (and its too-slow health check) would turn a loaded CI machine into
# failures that say nothing about the code.
settings.register_profile("colosseum", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("colosseum")

TRUNCATE = (
    "TRUNCATE colosseum_checkpoints, colosseum_channel_values, colosseum_writes, "
    "colosseum_delta_histories, colosseum_tool_calls, colosseum_threads, colosseum_stale_heads, "
    "colosseum_tombstones, colosseum_deleted_threads, colosseum_deleted_runs, "
    "colosseum_thread_lineage, colosseum_runs, colosseum_thread_epochs"
)


LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/test"
LOCAL_REDIS = "redis://127.0.0.1:6379/0"
# One prefix per session (and per xdist worker, were it used): no two runs share keys.
CACHE_PREFIX = f"colosseum-test-{uuid.uuid4().hex[:8]}:"


@functools.cache
def server_url() -> str:
    """COLOSSEUM_TEST_POSTGRES_URL, else the local server, else the embedded one."""
    if configured := os.environ.get("COLOSSEUM_TEST_POSTGRES_URL"):
        return configured
    try:
        psycopg.connect(LOCAL_SERVER, connect_timeout=3).close()
        return LOCAL_SERVER
    except psycopg.OperationalError:
        from langgraph_colosseum.embedded import embedded_postgres_url

        return embedded_postgres_url()


@functools.cache
def redis_url() -> str:
    """COLOSSEUM_TEST_REDIS_URL, else the local Redis, else the embedded Valkey."""
    if configured := os.environ.get("COLOSSEUM_TEST_REDIS_URL"):
        return configured
    try:
        redis.Redis.from_url(LOCAL_REDIS, socket_connect_timeout=3).ping()
        return LOCAL_REDIS
    except redis.RedisError:
        from langgraph_colosseum.embedded import embedded_redis_url

        return embedded_redis_url()


def flush_cache(url: str | None = None, prefix: str = CACHE_PREFIX) -> None:
    """Delete this session's keys (Postgres is truncated between tests: so is Redis)."""
    client = redis.Redis.from_url(url or redis_url())
    try:
        for key in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(key)
    finally:
        client.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Leave the shared Redis as this session found it: the heads under this
    session's prefix would otherwise stay until their TTL (an hour)."""
    if os.environ.get("COLOSSEUM_TEST_REDIS_URL") or redis_url.cache_info().currsize:
        try:
            flush_cache()
        except redis.RedisError:
            pass  # Redis went away: its keys went with it, or will expire


@pytest.fixture
def shared_client() -> Iterator[redis.Redis]:
    """The shared Redis, as two applications would both use it (same key prefix)."""
    client = redis.Redis.from_url(redis_url(), **client_options())
    yield client
    client.close()


CACHE_MODES = ["postgres", "redis"]
# The cache modes, and Postgres alone through PgBouncer in transaction mode.
CONNECTION_MODES = [*CACHE_MODES, "pgbouncer"]


def cache_options(mode: str) -> dict:
    """from_conn_string options for a cache mode of the `saver` fixtures."""
    if mode == "postgres":
        return {}
    return {"redis_url": redis_url(), "cache_prefix": CACHE_PREFIX}


@pytest.fixture(scope="session")
def cluster() -> Iterator[RedisCluster]:
    """A local 3-master Redis Cluster on loopback ports, for the whole session."""
    nodes = RedisCluster().start()
    yield nodes
    nodes.stop()


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    """A PgBouncer (pool_mode = transaction) in front of the test server, for the session."""
    bouncer = PgBouncer(server_url()).start()
    yield bouncer
    bouncer.stop()


@pytest.fixture(scope="session")
def tls_servers() -> Iterator[TlsServers]:
    """A private Postgres (TLS only, SCRAM) and Redis (TLS only, ACL user), set up."""
    servers = TlsServers().start()
    with ColosseumSaver.from_conn_string(servers.postgres.url()) as saver:
        saver.setup()
    yield servers
    servers.stop()


@pytest.fixture(scope="session")
def bouncer_url(pg_url: str, pgbouncer: PgBouncer) -> str:
    """The session's database, reached through `pgbouncer`."""
    return pgbouncer.url(str(conninfo.conninfo_to_dict(pg_url)["dbname"]))


def connection_options(mode: str, pg_url: str, request: pytest.FixtureRequest) -> tuple[str, dict]:
    """The URL and from_conn_string options of a connection mode."""
    if mode == "pgbouncer":
        return request.getfixturevalue("bouncer_url"), {"pgbouncer": True}
    if mode == "redis-recreated":
        return request.getfixturevalue("recreated_database")(), cache_options("redis")
    if mode == INLINE_VALUES:
        return pg_url, {**cache_options("redis"), "inline_values": True}
    return pg_url, cache_options(mode)


# A mode, not in CONNECTION_MODES: the Redis hot head in front of a database
# dropped and created again for each test, while Redis keeps every key the
# tests before it left (it is not flushed): a new database incarnation must
# never see an old one's heads (issue 11).
RECREATED = "redis-recreated"
# A mode, not in CONNECTION_MODES: the Redis hot head in front of a saver
# with inline_values=True (values in the checkpoint's document beside their
# rows; the review of that option found a refill of the head losing them).
INLINE_VALUES = "redis-inline_values"


@pytest.fixture(scope="session")
def recreated_database() -> Iterator[Callable[[], str]]:
    """Drops and creates (and migrates) one database of this session; its URL."""
    admin_url = server_url()
    name = f"colosseum_recreated_{uuid.uuid4().hex[:10]}"

    def recreate() -> str:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        url = conninfo.make_conninfo(admin_url, dbname=name)
        with ColosseumSaver.from_conn_string(url, pool_size=1) as saver:
            saver.setup()
        return url

    yield recreate
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def migrated_database(prefix: str) -> Iterator[str]:
    """A fresh database of the caller's own on the test server, set up; dropped after."""
    with fresh_database(server_url(), prefix) as url:
        with ColosseumSaver.from_conn_string(url, pool_size=2) as saver:
            saver.setup()
        yield url


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh, migrated database for this test session."""
    with migrated_database("colosseum_test") as url:
        yield url


def truncate(url: str) -> None:
    """Empty every table, and this session's Redis keys with them (a head of a
    truncated thread would be a head of nothing)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(TRUNCATE)
    flush_cache()


def _saver(pg_url: str, request: pytest.FixtureRequest) -> Iterator[ColosseumSaver]:
    if request.param != RECREATED:
        truncate(pg_url)
    url, options = connection_options(request.param, pg_url, request)
    with ColosseumSaver.from_conn_string(url, pool_size=4, **options) as s:
        yield s


async def _asaver(
    pg_url: str, request: pytest.FixtureRequest
) -> AsyncIterator[AsyncColosseumSaver]:
    if request.param != RECREATED:
        truncate(pg_url)
    url, options = connection_options(request.param, pg_url, request)
    async with AsyncColosseumSaver.from_conn_string(url, pool_size=4, **options) as s:
        yield s


def saver_fixtures(modes: list[str]) -> tuple:
    """`saver` and `asaver` fixtures over `modes`; a module assigns them to override ours:

    saver, asaver = saver_fixtures(CONNECTION_MODES)
    """
    return (
        pytest.fixture(params=modes, name="saver")(_saver),
        pytest.fixture(params=modes, name="asaver")(_asaver),
    )


saver, asaver = saver_fixtures(CACHE_MODES)


@pytest.fixture
def attempts(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Every connection attempt's keyword arguments, sync and async alike.

    "Fast" is shown by counting, not timing: a wrong URL is tried once, by the
    probe, and never handed to a pool that would retry it in the background
    until its 30 s timeout. The real connect runs; only its calls are recorded.
    """
    seen: list[dict] = []
    real_sync = psycopg.Connection.connect.__func__
    real_async = psycopg.AsyncConnection.connect.__func__

    def connect(cls, conninfo: str = "", **kwargs):
        seen.append(kwargs)
        return real_sync(cls, conninfo, **kwargs)

    async def aconnect(cls, conninfo: str = "", **kwargs):
        seen.append(kwargs)
        return await real_async(cls, conninfo, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "connect", classmethod(connect))
    monkeypatch.setattr(psycopg, "connect", psycopg.Connection.connect)  # an alias bound at import
    monkeypatch.setattr(psycopg.AsyncConnection, "connect", classmethod(aconnect))
    return seen
