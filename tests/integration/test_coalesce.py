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
from langgraph_colosseum._coalesce import Coalescer
from langgraph_colosseum._core.io import Query, Transaction, single
from tests.integration.test_drivers import thread

LOCK = 7411  # an advisory lock the tests hold to keep a request waiting on the server


@pytest.fixture(autouse=True)
def coalescing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aio, "COALESCE", True)  # the default (aio.py), whatever it becomes


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
    whose replies were never read, are retried, each alone on a fresh
    connection (a review's finding: all four were failed and retried, so the
    first two were applied twice)."""
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
    submitted: list[Any] = []
    submit = Coalescer.submit

    def counted(self: Coalescer, request: Any, statements: Any) -> Any:
        submitted.append(request)
        return submit(self, request, statements)

    monkeypatch.setattr(Coalescer, "submit", counted)
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
    # The two retries went alone (aio.py), each on a connection of its own,
    # not coalesced into a round trip whose connection could fail both again.
    assert len(submitted) == 4 and round_trips[1:] == [1, 1]


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
        outcomes = await asyncio.gather(
            run(saver, probe), run(saver, probe), return_exceptions=True
        )
        assert all(isinstance(o, psycopg.OperationalError) for o in outcomes), outcomes
        del outcomes
        for _ in range(3):
            await asyncio.sleep(0)
            gc.collect()
    finally:
        loop.set_exception_handler(previous)
    ours = [c for c in reported if "_coalesce" in repr(c.get("future") or c.get("task"))]
    assert ours == [], ours


async def test_a_late_request_waits_for_a_connection_of_its_own(pg_url: str) -> None:
    """The checkout a queue waits on times out (the pool's only connection is
    held): the request queued before that wait began gets the PoolTimeout; one
    queued during it is not failed by a wait it joined late, and is sent once
    a connection is free, as it would have been without coalescing."""
    from psycopg_pool import PoolTimeout

    async with AsyncConnectionPool(
        pg_url, kwargs={"autocommit": True}, min_size=1, max_size=1, timeout=2, open=False
    ) as pool:
        await pool.wait()
        saver = AsyncColosseumSaver(pool)
        assert saver._coalescer is not None
        probe = hot(Query("SELECT %(n)s::int", {"n": 1}))
        held = await pool.getconn()
        first = saver._coalescer.submit(probe, aio._hot(probe))
        await asyncio.sleep(0)  # its task runs: it now waits for the held connection
        assert saver._coalescer.tasks
        # A wait begun from now on outlasts the test: only the first one times out.
        pool.timeout = 600
        late = saver._coalescer.submit(probe, aio._hot(probe))
        with pytest.raises(PoolTimeout):
            await first.future
        assert not late.future.done()
        await pool.putconn(held)
        assert await late.future == [(1,)]


# ------------------------------------------------- other ways to share a fate


async def test_a_result_its_loader_refuses_fails_its_request_alone(
    pg_url: str, round_trips: list[int]
) -> None:
    """A request whose rows a loader refuses with an error of its own (not
    psycopg's) fails alone; the requests read before and after it in the same
    round trip, committed, get their rows (before, the loader's error failed
    them all, though they had been applied)."""

    class RefusingLoader(psycopg.adapt.Loader):
        def load(self, data: Any) -> Any:
            raise ValueError("this loader refuses every circle")

    async def configure(conn: psycopg.AsyncConnection) -> None:
        conn.adapters.register_loader("circle", RefusingLoader)

    table = Table(pg_url, "coalesce_loader")
    async with AsyncConnectionPool(
        pg_url,
        kwargs={"autocommit": True},
        min_size=1,
        max_size=1,
        configure=configure,
        open=False,
    ) as pool:
        saver = AsyncColosseumSaver(pool)
        outcomes = await asyncio.gather(
            run(saver, hot(table.insert(1))),
            run(saver, hot(Query("SELECT %(c)s::circle", {"c": "<(0,0),1>"}))),
            run(saver, hot(table.insert(3))),
            return_exceptions=True,
        )
    assert round_trips[0] == 3
    assert outcomes[0] == [(1,)] and outcomes[2] == [(3,)], outcomes
    assert isinstance(outcomes[1], ValueError)
    assert table.stored() == [1, 3]


async def test_a_caller_cancelled_mid_round_trip_leaves_the_others_theirs(
    pg_url: str, round_trips: list[int]
) -> None:
    """A caller cancelled while its request, sent, waits on the server for a
    lock: the requests before and after it in the round trip get their rows;
    its own request is not stopped (it may be applied, as one cancelled after
    its commit always could be), and the connection serves the next request."""
    table = Table(pg_url, "coalesce_cancelled")
    holder = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    await holder.execute("SELECT pg_advisory_lock(%s)", [LOCK])
    try:
        async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
            locked = Query("SELECT pg_advisory_xact_lock(%(k)s)", {"k": LOCK}, fetch=False)
            tasks = [
                asyncio.ensure_future(run(saver, hot(table.insert(1)))),
                asyncio.ensure_future(run(saver, hot(locked, table.insert(2)))),
                asyncio.ensure_future(run(saver, hot(table.insert(3)))),
            ]
            await waiting_for_lock(pg_url)
            tasks[1].cancel()
            with pytest.raises(asyncio.CancelledError):
                await tasks[1]
            await holder.execute("SELECT pg_advisory_unlock(%s)", [LOCK])
            assert await tasks[0] == [(1,)]
            assert await tasks[2] == [(3,)]
            assert await run(saver, hot(table.insert(4))) == [(4,)]
    finally:
        await holder.close()
    assert round_trips[0] == 3
    assert table.stored() == [1, 2, 3, 4]


async def test_a_deadlock_victim_is_rerun_alone(pg_url: str, round_trips: list[int]) -> None:
    """A request of a shared round trip chosen as a deadlock victim is rerun
    by itself (the driver's conflict retry) and then stored; the requests
    sharing its round trip are applied once each."""
    other = LOCK + 1
    table = Table(pg_url, "coalesce_deadlock")
    holder = await psycopg.AsyncConnection.connect(pg_url)
    await holder.execute("SET LOCAL deadlock_timeout = '60s'")  # the victim is the request
    await holder.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK])
    try:
        async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:

            def lock(key: int) -> Query:
                return Query("SELECT pg_advisory_xact_lock(%(k)s)", {"k": key}, fetch=False)

            outcomes = asyncio.gather(
                run(saver, hot(table.insert(1))),
                run(saver, hot(lock(other), lock(LOCK), table.insert(2))),
                run(saver, hot(table.insert(3))),
                return_exceptions=True,
            )
            await waiting_for_lock(pg_url)  # the request holds `other` and waits for LOCK
            # Closes the cycle; returns once Postgres aborted the request's transaction.
            await holder.execute("SELECT pg_advisory_xact_lock(%s)", [other])
            await holder.commit()
            assert await outcomes == [[(1,)], [None, None, [(2,)]], [(3,)]]
    finally:
        await holder.close()
    assert round_trips[0] == 3 and len(round_trips) >= 2  # the rerun went on its own
    assert table.stored() == [1, 2, 3]
