"""The asyncio saver's coalescer (_coalesce.py): a shared round trip never
makes one request's fate depend on another's.

Hot requests queued while none is being sent share one pool checkout and one
pipeline, each request followed by its own Sync. Whatever happens to one of
them (its parameters refused on the client, its statement failing, a deadlock,
its caller cancelled, the connection lost after its reply) the others get the
outcome they would have had on a connection of their own. Every test runs on a
one-connection pool, so the requests gathered together share one round trip
(each asserts that they did), against real Postgres.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from psycopg_pool import AsyncConnectionPool

from langgraph_colosseum import AsyncColosseumSaver, _driver, aio
from langgraph_colosseum._core.io import Query, Transaction, single
from tests.integration.test_drivers import thread

LOCK = 7411  # an advisory lock the tests hold to keep a request waiting on the server


@pytest.fixture(autouse=True)
def coalescing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aio, "COALESCE", True)


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many requests each shared round trip carried, in order."""
    sizes: list[int] = []
    batch = _driver.alean_batch

    async def counted(conn: Any, requests: list) -> Any:
        sizes.append(len(requests))
        return await batch(conn, requests)

    monkeypatch.setattr(_driver, "alean_batch", counted)
    return sizes


def hot(*queries: Query) -> Query | Transaction:
    """Hot statements (prepared at once): only those are coalesced."""
    prepared = tuple(q._replace(prepare=True) for q in queries)
    return prepared[0] if len(prepared) == 1 else Transaction(prepared)


class Table:
    """A table of numbers of the test's own: what each request applied, and how often."""

    def __init__(self, pg_url: str, name: str) -> None:
        self.pg_url, self.name = pg_url, name
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {name}")
            conn.execute(f"CREATE TABLE {name} (n int)")

    def insert(self, n: Any) -> Query:
        return Query(f"INSERT INTO {self.name} VALUES (%(n)s) RETURNING n", {"n": n})

    def stored(self) -> list[int]:
        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            rows = conn.execute(f"SELECT n FROM {self.name} ORDER BY n").fetchall()
            conn.execute(f"DROP TABLE {self.name}")
        return [n for (n,) in rows]


def run(saver: AsyncColosseumSaver, request: Query | Transaction) -> Any:
    return saver._arun(single(request))


def kill(pg_url: str, pid: int) -> None:
    """Terminate a backend and wait until it is gone."""
    with psycopg.connect(pg_url, autocommit=True) as killer:
        assert killer.execute("SELECT pg_terminate_backend(%s, 10000)", [pid]).fetchone()[0]


async def waiting_for_lock(pg_url: str) -> None:
    """Returns once a backend waits for LOCK (a barrier, polled)."""
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch:
        while not (
            await (
                await watch.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                    "AND objid = %s AND NOT granted",
                    [LOCK],
                )
            ).fetchone()
        )[0]:
            await asyncio.sleep(0.01)  # polling for the barrier, not timing the test


class Unadaptable:
    """A parameter psycopg refuses on the client: no dumper knows it."""


# ------------------------------------------------- refused on the client


async def test_a_request_refused_on_the_client_fails_alone(
    pg_url: str, round_trips: list[int]
) -> None:
    """A request whose parameter psycopg cannot dump, among others in one
    round trip: it fails alone, before any I/O; the others are sent and
    succeed (a review's finding: its error failed them all, unsent)."""
    table = Table(pg_url, "coalesce_refused")
    async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
        outcomes = await asyncio.gather(
            run(saver, hot(table.insert(1))),
            run(saver, hot(table.insert(Unadaptable()))),
            run(saver, hot(table.insert(3))),
            run(saver, hot(table.insert(4), table.insert(Unadaptable()))),
            run(saver, hot(table.insert(5))),
            return_exceptions=True,
        )
    assert round_trips[0] == 5
    assert outcomes[0] == [(1,)] and outcomes[2] == [(3,)] and outcomes[4] == [(5,)]
    for refused in (outcomes[1], outcomes[3]):
        assert isinstance(refused, psycopg.ProgrammingError), refused
        assert "Unadaptable" in str(refused)
    assert table.stored() == [1, 3, 5]


async def test_a_put_writes_refused_on_the_client_leaves_concurrent_puts_stored(
    pg_url: str, round_trips: list[int]
) -> None:
    """The same through the saver: a put_writes whose task_id cannot be
    encoded (a lone surrogate) fails, and the puts of other threads sharing
    its round trip are stored."""
    async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
        conf = await saver.aput(thread("refused-writer"), empty_checkpoint(), {"step": -1}, {})
        cfgs = [thread(f"refused-neighbour-{i}") for i in range(4)]
        round_trips.clear()
        outcomes = await asyncio.gather(
            saver.aput(cfgs[0], empty_checkpoint(), {"step": -1}, {}),
            saver.aput(cfgs[1], empty_checkpoint(), {"step": -1}, {}),
            saver.aput_writes(conf, [("ch", 1)], "ta\ud800sk"),
            saver.aput(cfgs[2], empty_checkpoint(), {"step": -1}, {}),
            saver.aput(cfgs[3], empty_checkpoint(), {"step": -1}, {}),
            return_exceptions=True,
        )
        assert round_trips[0] == 5
        assert isinstance(outcomes[2], Exception)
        assert not any(isinstance(o, BaseException) for i, o in enumerate(outcomes) if i != 2)
        for cfg, stored in zip(cfgs, outcomes[:2] + outcomes[3:]):
            assert (await saver.aget_tuple(cfg)).config == stored


# ------------------------------------------------- a connection lost mid round trip


async def test_a_connection_lost_mid_round_trip_fails_only_the_unread(
    pg_url: str, round_trips: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection dies after the second request's reply (its Sync) was
    read, while the third waits for a lock: the first two callers get their
    rows and are not sent again (each row stored once); the third and fourth,
    whose replies were never read, are retried on a fresh connection (a
    review's finding: all four were failed and retried, so the first two
    were applied twice)."""
    table = Table(pg_url, "coalesce_lost")
    holder = psycopg.connect(pg_url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", [LOCK])
    killed: list[int] = []

    def on_reply(pgconn: Any, index: int) -> None:
        if index == 1 and not killed:
            killed.append(pgconn.backend_pid)
            kill(pg_url, pgconn.backend_pid)
            holder.execute("SELECT pg_advisory_unlock(%s)", [LOCK])

    monkeypatch.setattr(_driver, "on_reply", on_reply)
    try:
        async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
            locked = Query("SELECT pg_advisory_xact_lock(%(k)s)", {"k": LOCK}, fetch=False)
            outcomes = await asyncio.gather(
                run(saver, hot(table.insert(1))),
                run(saver, hot(table.insert(2))),
                run(saver, hot(locked, table.insert(3))),
                run(saver, hot(table.insert(4))),
                return_exceptions=True,
            )
    finally:
        holder.close()
    assert killed and round_trips[0] == 4
    assert outcomes == [[(1,)], [(2,)], [None, [(3,)]], [(4,)]]
    assert table.stored() == [1, 2, 3, 4]


# ------------------------------------------------- the sending task's own failure


async def test_a_failed_checkout_leaves_no_exception_unretrieved(pg_url: str) -> None:
    """The task that takes a connection for the queue fails to get one (the
    pool is closed): the callers get the error, and no task is left with an
    exception nobody retrieved (a review's finding: asyncio reported "Task
    exception was never retrieved")."""
    loop = asyncio.get_running_loop()
    reported: list[dict] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        pool = AsyncConnectionPool(
            pg_url, kwargs={"autocommit": True}, min_size=1, max_size=1, open=False
        )
        await pool.open(wait=True)
        saver = AsyncColosseumSaver(pool)
        assert saver._coalescer is not None
        probe = hot(Query("SELECT %(n)s::int", {"n": 1}))
        assert await run(saver, probe) == [(1,)]
        await pool.close()
        outcomes = await asyncio.gather(run(saver, probe), run(saver, probe), return_exceptions=True)
        assert all(isinstance(o, psycopg.OperationalError) for o in outcomes), outcomes
        del outcomes
        for _ in range(3):
            await asyncio.sleep(0)
            gc.collect()
    finally:
        loop.set_exception_handler(previous)
    ours = [c for c in reported if "_coalesce" in repr(c.get("future") or c.get("task"))]
    assert ours == [], ours
