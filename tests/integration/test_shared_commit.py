"""Writes of one round trip committed as one transaction (_driver._SHARED_COMMIT).

The asyncio saver's puts and put_writes that share a round trip commit
together. What a caller relies on stays true: every write whose call returned
is stored and reads back as it was put; a write that fails fails alone, and the
others sharing its transaction are stored; and two such transactions, or one
and a delete of several threads, never wait for each other in a cycle (each
writes rows of several threads, and holds the threads' write locks until its
one commit).

The lock tests hold rows with a transaction of their own (a gate) so that a
shared transaction stops mid-way, holding what it has taken; every barrier is
polled from pg_locks, never slept. The savers' connections run with a
deadlock_timeout of ten minutes, so that a wait cycle stays for the test to
see instead of being broken by Postgres (which would abort one side and the
drivers would rerun it: the cost of a cycle is a stall, not a wrong result).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from psycopg import conninfo

from langgraph_colosseum import AsyncColosseumSaver, _driver, aio
from langgraph_colosseum._core import io, multitask, sql
from langgraph_colosseum._core import threads as threads_sql
from langgraph_colosseum.errors import ThreadBusyError
from tests.integration.test_drivers import thread

WRITE_CHECK = "shared_commit_refuses"  # the test's trigger function


@pytest.fixture(autouse=True)
def coalescing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aio, "COALESCE", True)  # the default (aio.py), whatever it becomes


@pytest.fixture
def patient(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared transaction that waits for a lock keeps waiting (the tests of
    lock order stop one mid-way), instead of giving up after
    _driver.SHARED_LOCK_TIMEOUT and sending each write alone."""
    monkeypatch.setattr(_driver, "SHARED_LOCK_TIMEOUT", "10min")


@pytest.fixture
def url(pg_url: str) -> str:
    """The test database, with wait cycles left standing (see the module's text)."""
    return conninfo.make_conninfo(pg_url, options="-c deadlock_timeout=10min")


def ids(*names: str) -> list[str]:
    """Thread ids of this test alone, in the order of `names`."""
    prefix = uuid.uuid4().hex[:12]
    return [f"{prefix}-{name}" for name in names]


def checkpoint(step: int) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"step": step, "note": f"step {step}"}
    cp["channel_versions"] = {"step": f"{step:032}", "note": f"{step:032}"}
    return cp


def versions(cp: Any) -> dict[str, str]:
    return dict(cp["channel_versions"])


async def put(saver: Any, thread_id: str, step: int, cp: Any = None) -> Any:
    cp = cp or checkpoint(step)
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    return await saver.aput(config, cp, {"step": step}, versions(cp))


@pytest.fixture
def gate(pg_url: str) -> Iterator[psycopg.Connection]:
    """A transaction of the test's own that holds registry rows FOR UPDATE
    until it is rolled back: a put of such a thread waits for it."""
    conn = psycopg.connect(pg_url)
    yield conn
    conn.rollback()
    conn.close()


def hold(gate: psycopg.Connection, *thread_ids: str) -> None:
    rows = gate.execute(
        "SELECT thread_id FROM colosseum_threads WHERE thread_id = ANY(%s) FOR UPDATE",
        [list(thread_ids)],
    ).fetchall()
    assert len(rows) == len(thread_ids)


BLOCKED = """
SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity
WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0
"""


async def blocked(watch: psycopg.AsyncConnection) -> dict[int, set[int]]:
    """The backends of the test database that wait for a lock, and whom for."""
    rows = await (await watch.execute(BLOCKED)).fetchall()
    return {pid: set(by) for pid, by in rows}


def cycle(waits: dict[int, set[int]]) -> bool:
    """Whether some backends wait for each other, round a cycle."""

    def reaches(start: int, goal: int, seen: set[int]) -> bool:
        for nxt in waits.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    return any(reaches(pid, pid, {pid}) for pid in waits)


async def until_blocked(watch: psycopg.AsyncConnection, count: int) -> None:
    """Returns once `count` backends wait for a lock (a barrier, polled)."""
    while len(await blocked(watch)) < count:
        await asyncio.sleep(0.01)  # polling for the barrier, not timing the test


async def finish_without_a_cycle(watch: psycopg.AsyncConnection, *work: Awaitable[Any]) -> list:
    """`work`'s results, failing the test if its backends ever wait round a
    cycle (then cancelled, so that the test ends)."""
    tasks = [asyncio.ensure_future(w) for w in work]
    while not all(t.done() for t in tasks):
        waits = await blocked(watch)
        if cycle(waits):
            for pid in waits:
                await watch.execute("SELECT pg_cancel_backend(%s)", [pid])
            await asyncio.gather(*tasks, return_exceptions=True)
            pytest.fail(f"the writes and their neighbours waited for each other: {waits}")
        await asyncio.sleep(0.01)  # polling the tasks and pg_locks, not timing the test
    return [t.result() for t in tasks]


async def xmins(pg_url: str, thread_ids: list[str]) -> list[str]:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        rows = await (
            await conn.execute(
                "SELECT xmin::text FROM colosseum_checkpoints WHERE thread_id = ANY(%s) "
                "ORDER BY thread_id",
                [thread_ids],
            )
        ).fetchall()
    return [x for (x,) in rows]


@contextlib.asynccontextmanager
async def put_together_on_a_gate(
    url: str, pg_url: str, gate: psycopg.Connection, threads: list[str], gated: str
) -> AsyncIterator[tuple[AsyncColosseumSaver, AsyncColosseumSaver, Any, asyncio.Future]]:
    """A writer and another saver, and a watch on pg_locks. Each of `threads`
    is put once; then the writer puts them all again together, and that
    shared transaction stops on `gated`, whose row the gate holds."""
    async with (
        AsyncColosseumSaver.from_conn_string(url, max_size=1) as writer,
        AsyncColosseumSaver.from_conn_string(url, max_size=1) as other,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch,
    ):
        for t in threads:
            await put(writer, t, 1)
        hold(gate, gated)
        puts = asyncio.ensure_future(asyncio.gather(*(put(writer, t, 2) for t in threads)))
        await until_blocked(watch, 1)  # the puts, on the gate
        yield writer, other, watch, puts


# ------------------------------------------------- the writes are stored


async def test_puts_sent_together_commit_together_and_each_reads_back_as_put(
    pg_url: str,
) -> None:
    """Five puts of five threads gathered: one round trip, one commit (the
    rows share their xmin), and each reads back as InMemorySaver reads it."""
    threads = ids("a", "b", "c", "d", "e")
    reference = InMemorySaver()
    async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
        cps = [checkpoint(i) for i in range(len(threads))]
        stored = await asyncio.gather(*(put(saver, t, i, cps[i]) for i, t in enumerate(threads)))
        expected = [await put(reference, t, i, cps[i]) for i, t in enumerate(threads)]
        assert repr(stored) == repr(expected)
        for t in threads:
            ours, theirs = await saver.aget_tuple(thread(t)), await reference.aget_tuple(thread(t))
            assert repr((ours.config, ours.checkpoint, ours.metadata)) == repr(
                (theirs.config, theirs.checkpoint, theirs.metadata)
            )
    assert len(set(await xmins(pg_url, threads))) == 1


async def test_writes_of_on_conflict_raise_each_commit_alone(pg_url: str) -> None:
    """README: writes of on_conflict="raise" take their thread's head lock
    exclusively, and each commits alone: puts of three threads gathered on one
    connection share a round trip, not a transaction (three xmins)."""
    threads = ids("a", "b", "c")
    async with AsyncColosseumSaver.from_conn_string(
        pg_url, max_size=1, on_conflict="raise"
    ) as saver:
        await asyncio.gather(*(put(saver, t, i) for i, t in enumerate(threads)))
    assert len(set(await xmins(pg_url, threads))) == 3


class Retries:
    """An io.observer that only records why requests were sent again."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, op: Any, perform: Any, asynchronous: bool) -> tuple[Any, Any]:
        return op, perform

    def retried(self, reason: str) -> None:
        self.reasons.append(reason)

    def breaker_opened(self) -> None:
        pass


async def test_a_write_that_fails_fails_alone_and_its_neighbours_are_stored(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put the server refuses (a trigger of the test's, on its thread alone)
    shares a transaction with puts of two other threads, one each side of it
    in their order: it raises its own error and is not stored; the two
    others return and read back, stored, each then in a transaction of its own."""
    first, refused, last = ids("a", "b", "c")
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(f"""
            CREATE OR REPLACE FUNCTION {WRITE_CHECK}() RETURNS trigger AS $$
            BEGIN
                IF NEW.thread_id = '{refused}' THEN
                    RAISE EXCEPTION 'the test refuses thread %', NEW.thread_id;
                END IF;
                RETURN NEW;
            END $$ LANGUAGE plpgsql""")
        admin.execute(
            f"CREATE TRIGGER {WRITE_CHECK} BEFORE INSERT ON colosseum_checkpoints "
            f"FOR EACH ROW EXECUTE FUNCTION {WRITE_CHECK}()"
        )
    retries = Retries()
    monkeypatch.setattr(io, "observer", retries)
    try:
        async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
            outcomes = await asyncio.gather(
                put(saver, first, 1), put(saver, refused, 2), put(saver, last, 3),
                return_exceptions=True,
            )  # fmt: skip
            assert isinstance(outcomes[1], psycopg.Error), outcomes[1]
            assert refused in str(outcomes[1])
            assert await saver.aget_tuple(thread(refused)) is None
            for t, step, outcome in ((first, 1, outcomes[0]), (last, 3, outcomes[2])):
                assert not isinstance(outcome, BaseException), outcome
                stored = await saver.aget_tuple(thread(t))
                assert stored is not None and stored.config == outcome
                assert stored.checkpoint["channel_values"] == {"step": step, "note": f"step {step}"}
        first_xmin, last_xmin = await xmins(pg_url, [first, last])
        assert first_xmin != last_xmin
        assert retries.reasons == ["shared_commit"] * 3  # telemetry: each sent again
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f"DROP TRIGGER {WRITE_CHECK} ON colosseum_checkpoints")
            admin.execute(f"DROP FUNCTION {WRITE_CHECK}()")


async def test_writes_sent_together_after_deallocate_all_prepare_again_and_are_stored(
    pg_url: str,
) -> None:
    """DEALLOCATE ALL on the pool's connection (a reset hook, a proxy) drops
    the statements prepared there: the shared transaction fails on the
    first, and each write, sent again alone, prepares afresh and is stored."""
    threads = ids("a", "b", "c")
    async with AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver:
        await asyncio.gather(*(put(saver, t, 1) for t in threads))  # prepared
        async with saver.conn.connection() as conn:
            await conn.execute("DEALLOCATE ALL")
        stored = await asyncio.gather(*(put(saver, t, 2) for t in threads))
        for t, config in zip(threads, stored):
            head = await saver.aget_tuple(thread(t))
            assert head is not None and head.config == config and head.metadata["step"] == 2


async def test_writes_whose_shared_transaction_failed_first_then_meet_deallocate_are_stored(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DEALLOCATE ALL dropped the statements prepared on the connection; the
    shared transaction of puts of `a` and `b` then fails before it meets them
    (its lock wait times out: a delete of `a` holds `a`), so its other
    statements are never run. Each put is sent again alone, meets the dropped
    statements there, prepares them again, and is stored (b at once, `a` once
    the delete lets go): a shared transaction's failure does not use up the
    retry a DEALLOCATE ALL is owed."""
    a, b = ids("a", "b")
    lock = f"SELECT pg_advisory_xact_lock({sql.THREAD_LOCK_CLASS}, hashtext(%s))"
    retries = Retries()
    monkeypatch.setattr(io, "observer", retries)
    async with (
        AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as saver,
        await psycopg.AsyncConnection.connect(pg_url) as delete,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch,
    ):
        await put(saver, a, 1)  # alone: the write statements prepared,
        await put(saver, b, 1)  # the shared transaction's first one not yet
        async with saver.conn.connection() as conn:
            await conn.execute("DEALLOCATE ALL")
        await delete.execute(lock, [a])
        puts = asyncio.ensure_future(
            asyncio.gather(put(saver, a, 2), put(saver, b, 2), return_exceptions=True)
        )
        while len(retries.reasons) < 2:  # the shared transaction gave up
            await asyncio.sleep(0.01)  # polling for the barrier, not timing the test
        while not puts.done() and not await blocked(watch):  # sent again: failed or waiting
            await asyncio.sleep(0.01)
        await delete.rollback()
        outcomes = await puts
        for t, outcome in zip((a, b), outcomes):
            assert not isinstance(outcome, BaseException), (t, outcome)
            head = await saver.aget_tuple(thread(t))
            assert head is not None and head.config == outcome and head.metadata["step"] == 2
    assert retries.reasons == ["shared_commit", "shared_commit"]


# ------------------------------------------------- no wait cycles


async def test_two_shared_transactions_lock_the_rows_they_share_in_one_order(
    url: str, pg_url: str, gate: psycopg.Connection, patient: None
) -> None:
    """Two savers each put three threads at once, two of them the same (1 and
    4), gathered in opposite orders. Each stops on a thread a gate holds (2, 3)
    with what it wrote so far locked. Once the gate lets go, both finish, and
    neither ever waited for the other while the other waited for it: each
    wrote its threads in their order, so the one that wrote thread 1 first
    wrote 4 first too."""
    t1, t2, t3, t4 = ids("1", "2", "3", "4")
    async with (
        AsyncColosseumSaver.from_conn_string(url, max_size=1) as one,
        AsyncColosseumSaver.from_conn_string(url, max_size=1) as other,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch,
    ):
        for step, t in enumerate((t1, t2, t3, t4)):
            await put(one, t, step)
        hold(gate, t2, t3)
        first = asyncio.ensure_future(
            asyncio.gather(put(one, t1, 10), put(one, t2, 10), put(one, t4, 10))
        )
        second = asyncio.ensure_future(
            asyncio.gather(put(other, t4, 20), put(other, t3, 20), put(other, t1, 20))
        )
        await until_blocked(watch, 2)
        gate.rollback()
        await finish_without_a_cycle(watch, first, second)
        for t in (t1, t2, t3, t4):
            head = await one.aget_tuple(thread(t))
            assert head is not None and head.metadata["step"] in (10, 20)


def hash_order(pg_url: str, prefix: str) -> tuple[str, str]:
    """Two thread ids, `low` < `high`, whose write locks a delete takes high
    first (its keys are hashtext(thread_id), in their order: sql.DELETE_LOCK)."""
    candidates = [f"{prefix}-{i:02}" for i in range(40)]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        hashes = dict(
            conn.execute("SELECT t, hashtext(t) FROM unnest(%s::text[]) AS t", [candidates])
        )
    for low in candidates:
        for high in candidates:
            if low < high and hashes[high] < hashes[low]:
                return low, high
    raise AssertionError("no two ids in that order")  # pragma: no cover


async def test_a_delete_of_several_threads_never_waits_in_a_cycle_with_writes_of_them(
    url: str, pg_url: str, gate: psycopg.Connection, patient: None
) -> None:
    """A put of `low` and one of `high` share a transaction; it stops on
    `low`, which a gate holds. Meanwhile a delete of both threads begins, and
    takes its locks in its own order, `high` first. Once the gate lets go the
    puts commit, then the delete removes both threads: no cycle. (Were each
    put's write lock taken only as it ran, the puts would hold `low` and wait
    for `high`, which the delete would hold while waiting for `low`.)"""
    low, high = hash_order(pg_url, uuid.uuid4().hex[:12])
    async with put_together_on_a_gate(url, pg_url, gate, [low, high], low) as (
        writer, deleter, watch, puts,
    ):  # fmt: skip
        delete = asyncio.ensure_future(deleter.aprune([low, high], strategy="delete"))
        await until_blocked(watch, 2)  # and the delete, on the puts
        gate.rollback()
        stored, _ = await finish_without_a_cycle(watch, puts, delete)
        assert [c["configurable"]["thread_id"] for c in stored] == [low, high]
        assert await writer.aget_tuple(thread(low)) is None
        assert await writer.aget_tuple(thread(high)) is None


async def test_the_write_locks_of_a_shared_transaction_are_taken_in_a_deletes_order(
    pg_url: str, url: str, patient: None
) -> None:
    """A delete takes its threads' locks in the order of their keys, `high`
    first (sql.DELETE_LOCK). Here a transaction of the test's takes them as a
    delete does, stopping between the two, while puts of `low` and `high`
    share a transaction: they wait for `high` before they take `low`, so the
    delete's second lock is free to take. (Taking `low` first, they would
    hold it while waiting for `high`, and the delete wait for `low`.)"""
    low, high = hash_order(pg_url, uuid.uuid4().hex[:12])
    lock = f"SELECT pg_advisory_xact_lock({sql.THREAD_LOCK_CLASS}, hashtext(%s))"
    async with (
        AsyncColosseumSaver.from_conn_string(url, max_size=1) as writer,
        await psycopg.AsyncConnection.connect(url) as delete,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch,
    ):
        await delete.execute(lock, [high])
        puts = asyncio.ensure_future(asyncio.gather(put(writer, low, 1), put(writer, high, 1)))
        await until_blocked(watch, 1)  # the puts, on `high`
        await finish_without_a_cycle(watch, delete.execute(lock, [low]))
        await delete.rollback()
        stored = (await finish_without_a_cycle(watch, puts))[0]
        assert [c["configurable"]["thread_id"] for c in stored] == [low, high]


# ------------------------------------------------- waits stay each write's own


async def test_a_shared_transaction_waiting_for_one_thread_holds_up_no_other_thread(
    pg_url: str, gate: psycopg.Connection
) -> None:
    """Puts of `a` and `b` share a transaction, and `b`'s row is held by a
    slow transaction (the gate). Another worker's put of `a`, and then a
    delete of `a`, finish while the gate still holds `b`: the shared
    transaction gives up its wait (SHARED_LOCK_TIMEOUT) and each put is sent
    alone, so only the put of `b` waits for `b`."""
    a, b = ids("a", "b")
    async with put_together_on_a_gate(pg_url, pg_url, gate, [a, b], b) as (
        writer, other, _watch, puts,
    ):  # fmt: skip
        # Bounded only so that a failure ends: with the gate held, these
        # finish in milliseconds or, were the wait not given up, never.
        await asyncio.wait_for(put(other, a, 3), 30)
        await asyncio.wait_for(other.adelete_thread(a), 30)
        assert not puts.done()  # the put of `b` still waits for the gate
        gate.rollback()
        stored = await puts
        head = await writer.aget_tuple(thread(b))
        assert head is not None and head.config == stored[1]
        assert await writer.aget_tuple(thread(a)) is None


async def test_a_guard_taken_while_a_write_is_in_flight_waits_for_its_commit(
    pg_url: str, gate: psycopg.Connection
) -> None:
    """A put_writes of `a` made outside any guard passed its fence and waits
    (for a row of the same key the gate inserted and has not committed).
    run_guard(a) is asked for meanwhile: it is taken only after that write
    commits, so the write is never stored while the guard holds `a` (the
    fence's KEY SHARE lock does not hold off the upsert that takes the
    thread; the thread's write lock, taken exclusively before it, does)."""
    (a,) = ids("a")
    async with (
        AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as writer,
        AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as guarder,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch,
    ):
        config = await put(writer, a, 1)
        gate.execute(
            "INSERT INTO colosseum_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
            "idx, channel, encoding, value) VALUES (%s, '', %s, 'stray', 0, 'note', 'json', "
            "'\"gate\"')",
            [a, config["configurable"]["checkpoint_id"]],
        )
        stray = asyncio.ensure_future(writer.aput_writes(config, [("note", "stray")], "stray"))
        await until_blocked(watch, 1)  # past its fence, on the gate's row
        acquired, leave = asyncio.Event(), asyncio.Event()
        stored_at_acquire: list[int] = []

        async def stray_rows() -> int:
            row = await (
                await watch.execute(
                    "SELECT count(*) FROM colosseum_writes WHERE thread_id = %s "
                    "AND task_id = 'stray'",
                    [a],
                )
            ).fetchone()
            return row[0]

        async def guarded() -> None:
            async with guarder.run_guard(a, on_busy="reject"):
                stored_at_acquire.append(await stray_rows())
                acquired.set()
                await leave.wait()

        guard = asyncio.ensure_future(guarded())
        while not acquired.is_set() and len(await blocked(watch)) < 2:
            await asyncio.sleep(0.01)  # polling for the barrier: taken, or waiting
        gate.rollback()
        outcome = await asyncio.gather(stray, return_exceptions=True)
        await acquired.wait()
        leave.set()
        await guard
        assert outcome == [None] and stored_at_acquire == [1], (outcome, stored_at_acquire)


async def test_a_lease_is_judged_at_the_time_of_the_write_not_of_its_lock_wait(
    pg_url: str,
) -> None:
    """A put of `a` waits for its thread's write lock (a delete holds it, here
    the test); meanwhile a dead holder's lease on `a` runs out. The put then
    runs after the lease's end and is stored: a thread is busy only while its
    guard's lease is live, at the time of the write's statement, not when its
    transaction began."""
    (a,) = ids("a")
    lock = f"SELECT pg_advisory_xact_lock({sql.THREAD_LOCK_CLASS}, hashtext(%s))"
    async with (
        AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as writer,
        await psycopg.AsyncConnection.connect(pg_url) as delete,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch,
    ):
        await put(writer, a, 1)
        await delete.execute(lock, [a])
        late = asyncio.ensure_future(put(writer, a, 2))
        await until_blocked(watch, 1)  # the put, on the lock
        await watch.execute(
            "UPDATE colosseum_threads SET status = 'busy', run_owner = 'dead holder', "
            "run_token = run_token + 1, run_lease_until = clock_timestamp() + interval '50 ms' "
            "WHERE thread_id = %s",
            [a],
        )
        lapsed = (
            "SELECT clock_timestamp() > run_lease_until FROM colosseum_threads WHERE thread_id = %s"
        )
        while not (await (await watch.execute(lapsed, [a])).fetchone())[0]:
            await asyncio.sleep(0.01)  # polling the lease's end (a clock barrier)
        await delete.rollback()
        outcome = (await asyncio.gather(late, return_exceptions=True))[0]
        assert not isinstance(outcome, ThreadBusyError), outcome
        head = await writer.aget_tuple(thread(a))
        assert head is not None and head.config == outcome


async def test_a_guard_that_waited_for_a_write_in_flight_gets_its_whole_lease(
    pg_url: str, gate: psycopg.Connection
) -> None:
    """run_guard(a) waits for a write of `a` in flight (the gate holds what
    such a write holds) for over a second. Its
    lease of 30 s is then counted from when it took the thread, not from when
    its transaction began, before that wait."""
    (a,) = ids("a")
    async with (
        AsyncColosseumSaver.from_conn_string(pg_url, max_size=2) as saver,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch,
    ):
        await put(saver, a, 1)
        # what a write in flight holds: its thread's write lock, shared
        # (sql.WRITE_LOCK), and the row its fence locked KEY SHARE
        gate.execute(
            f"SELECT pg_advisory_xact_lock_shared({sql.THREAD_LOCK_CLASS}, hashtext(%s))", [a]
        )
        gate.execute("SELECT 1 FROM colosseum_threads WHERE thread_id = %s FOR KEY SHARE", [a])
        left: list[float] = []
        leave = asyncio.Event()

        async def guarded() -> None:
            async with saver.run_guard(a, lease=timedelta(seconds=30)):
                row = await (
                    await watch.execute(
                        "SELECT extract(epoch FROM run_lease_until - clock_timestamp()) "
                        "FROM colosseum_threads WHERE thread_id = %s",
                        [a],
                    )
                ).fetchone()
                left.append(float(row[0]))
                await leave.wait()

        guard = asyncio.ensure_future(guarded())
        waited = (
            "SELECT coalesce(bool_or(clock_timestamp() - xact_start > interval '1 s'), false) "
            "FROM pg_stat_activity WHERE cardinality(pg_blocking_pids(pid)) > 0"
        )
        while not (await (await watch.execute(waited)).fetchone())[0]:
            await asyncio.sleep(0.01)  # polling the acquire's wait (a clock barrier)
        gate.rollback()
        while not left:
            await asyncio.sleep(0.01)
        leave.set()
        await guard
        assert left[0] > 29.5, left


async def test_a_write_of_a_new_thread_checked_while_its_first_guard_is_taken_is_refused(
    pg_url: str,
) -> None:
    """`a` has no registry row yet. A guard is being taken (the test sends
    what run_guard sends, and has not committed: ACQUIRE has inserted the row)
    when a put of `a` from outside any guard arrives. It waits, and once the
    guard is taken it is refused: it is not stored after the guard was taken
    (its fence had no committed row to see, nor to lock)."""
    (a,) = ids("a")
    async with (
        AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as writer,
        await psycopg.AsyncConnection.connect(pg_url) as guard,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch,
    ):
        request = threads_sql.acquire_request({"thread_id": a, "owner": "guard", "lease": 60})
        for query in request.queries:
            await guard.execute(query.sql, query.params)
        outsider = asyncio.ensure_future(put(writer, a, 1))
        await until_blocked(watch, 1)  # the put, on the guard
        await guard.commit()  # the guard is taken
        outcome = (await asyncio.gather(outsider, return_exceptions=True))[0]
        assert isinstance(outcome, ThreadBusyError), outcome
        assert await writer.aget_tuple(thread(a)) is None


async def test_a_write_of_a_new_thread_checked_while_its_first_run_takes_it_is_refused(
    pg_url: str,
) -> None:
    """The same for a run of `saver.runs(graph)` taking a thread that has no
    registry row yet (the test sends what the run sends to take it, and has
    not committed): a put of the thread from outside the run, arriving then,
    is refused once the run holds the thread, not stored after it."""
    (a,) = ids("a")
    params = {
        "thread_id": a, "run_id": f"{a}-run", "strategy": "reject", "holder": "runner",
        "lease": 60, "steal": False, "lapsed": multitask.LEASE_LAPSED,
    }  # fmt: skip
    async with (
        AsyncColosseumSaver.from_conn_string(pg_url, max_size=1) as writer,
        await psycopg.AsyncConnection.connect(pg_url) as run,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watch,
    ):
        for query in multitask.take_request(params).queries:
            await run.execute(query.sql, query.params)
        outsider = asyncio.ensure_future(put(writer, a, 1))
        await until_blocked(watch, 1)  # the put, on the run
        await run.commit()  # the run holds the thread
        outcome = (await asyncio.gather(outsider, return_exceptions=True))[0]
        assert isinstance(outcome, ThreadBusyError), outcome
        assert await writer.aget_tuple(thread(a)) is None
