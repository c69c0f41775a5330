"""Retention: expiry pushed by writes and reads, and a sweep that never touches live threads.

Each test runs on Postgres directly and through PgBouncer in transaction mode,
but those of reads the Redis head serves, which run with Redis.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, Retention
from tests.conftest import cache_options, connection_options, truncate
from tests.integration.test_drivers import RoundTripCounter, counter_graph, thread

SHORT = Retention(thread_ttl=timedelta(seconds=1))


@pytest.fixture(params=["postgres", "pgbouncer"])
def via(pg_url: str, request: pytest.FixtureRequest) -> tuple[str, dict]:
    """The URL and options the saver under test connects with (data checks use pg_url)."""
    return connection_options(request.param, pg_url, request)


def count(url: str, table: str, thread_id: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute(
            f"SELECT count(*) FROM {table} WHERE thread_id = %s", [thread_id]
        ).fetchone()[0]


def put_one(saver: ColosseumSaver, thread_id: str) -> dict:
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    stored = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    saver.put_writes(stored, [("x", 1)], "task-1")
    return stored


def test_expired_threads_are_swept_whole_and_live_ones_kept(
    pg_url: str, via: tuple[str, dict]
) -> None:
    truncate(pg_url)
    with ColosseumSaver.from_conn_string(via[0], **via[1], retention=SHORT) as saver:
        for i in range(3):
            put_one(saver, f"old-{i}")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO colosseum_tool_calls (thread_id, idempotency_key, tool_name, status)"
                " VALUES ('old-0', 'k-old-0', 'pay', 'SUCCESS')"
            )
        put_one(saver, "read-only")
        time.sleep(1.2)
        assert saver.threads.get("old-0").expires_at is not None
        put_one(saver, "written")  # a write pushes the expiry
        assert saver.get_tuple(thread("read-only")) is not None  # so does a read

        assert saver.sweep() == 3
        assert saver.sweep() == 0  # idempotent
        for table in ("colosseum_checkpoints", "colosseum_writes", "colosseum_tool_calls",
                      "colosseum_threads"):  # fmt: skip
            assert count(pg_url, table, "old-0") == 0, table
        for tid in ("read-only", "written"):
            assert saver.get_tuple(thread(tid)) is not None
            assert saver.threads.get(tid) is not None


def test_keep_latest_strategy_prunes_and_clears_the_expiry(
    pg_url: str, via: tuple[str, dict]
) -> None:
    truncate(pg_url)
    retention = Retention(thread_ttl=timedelta(seconds=1), strategy="keep_latest")
    with ColosseumSaver.from_conn_string(via[0], **via[1], retention=retention) as saver:
        graph = counter_graph(saver)
        for _ in range(3):
            graph.invoke({"total": 0, "log": []}, thread("pruned"))
        before = graph.get_state(thread("pruned")).values
        time.sleep(1.2)
        assert saver.sweep() == 1
        assert saver.sweep() == 0
        assert len(list(saver.list(thread("pruned")))) == 1
        assert graph.get_state(thread("pruned")).values == before
        # Pruned threads wait for their next write to expire again.
        assert saver.threads.get("pruned").expires_at is None
        graph.invoke({"total": 0, "log": []}, thread("pruned"))
        assert saver.threads.get("pruned").expires_at is not None
        assert graph.get_state(thread("pruned")).values["total"] == 4


def test_sweeping_10000_expired_threads_loses_nothing_live(
    pg_url: str, via: tuple[str, dict]
) -> None:
    truncate(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            """
            INSERT INTO colosseum_threads (thread_id, expires_at)
            SELECT 'expired-' || i, now() - interval '1 hour' FROM generate_series(1, 10000) i;
            INSERT INTO colosseum_checkpoints (thread_id, checkpoint_ns, checkpoint_id, checkpoint)
            SELECT 'expired-' || i, '', '1', '{"channel_versions": {}}'
            FROM generate_series(1, 10000) i;
            """
        )
    retention = Retention(thread_ttl=timedelta(hours=1), batch_size=1000)
    with ColosseumSaver.from_conn_string(
        via[0], **via[1], pool_size=8, retention=retention
    ) as saver:
        graph = counter_graph(saver)
        errors: list[BaseException] = []
        stop = threading.Event()
        turns = {f"live-{i}": 0 for i in range(4)}

        def run_live(tid: str) -> None:
            try:
                while not stop.is_set():
                    graph.invoke({"total": 0, "log": []}, thread(tid))
                    turns[tid] += 1
            except BaseException as exc:  # reported below
                errors.append(exc)

        workers = [threading.Thread(target=run_live, args=(tid,)) for tid in turns]
        for w in workers:
            w.start()
        swept = saver.sweep()
        stop.set()
        for w in workers:
            w.join()

        assert not errors
        assert swept == 10000
        with psycopg.connect(pg_url) as conn:
            left = conn.execute(
                "SELECT count(*) FROM colosseum_threads WHERE thread_id LIKE 'expired-%'"
            ).fetchone()[0]
        assert left == 0
        for tid, n in turns.items():
            assert n > 0
            state = graph.get_state(thread(tid))
            assert state.values["total"] == n  # every turn is there
            assert len(list(graph.get_state_history(thread(tid)))) == 3 * n
            assert saver.threads.get(tid) is not None


async def test_async_sweep_and_background_sweeper(pg_url: str, via: tuple[str, dict]) -> None:
    truncate(pg_url)
    async with AsyncColosseumSaver.from_conn_string(via[0], **via[1], retention=SHORT) as saver:
        graph = counter_graph(saver)
        await graph.ainvoke({"total": 0, "log": []}, thread("a-old"))
        sweeper = saver.start_sweeper(timedelta(seconds=0.3))
        try:
            deadline = time.monotonic() + 10
            while await saver.threads.get("a-old") is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
        finally:
            sweeper.cancel()
        assert await saver.threads.get("a-old") is None
        assert await saver.aget_tuple(thread("a-old")) is None
        assert await saver.sweep() == 0


def test_keep_last_keeps_that_many_checkpoints(pg_url: str, via: tuple[str, dict]) -> None:
    truncate(pg_url)
    retention = Retention(thread_ttl=timedelta(seconds=1), keep_last=4, strategy="keep_latest")
    with ColosseumSaver.from_conn_string(via[0], **via[1], retention=retention) as saver:
        graph = counter_graph(saver)
        for _ in range(3):
            graph.invoke({"total": 0, "log": []}, thread("keep4"))
        history = list(graph.get_state_history(thread("keep4")))
        time.sleep(1.2)
        assert saver.sweep() == 1
        kept = list(graph.get_state_history(thread("keep4")))
        assert [s.config for s in kept] == [s.config for s in history[:4]]
        assert [s.values for s in kept] == [s.values for s in history[:4]]
    with pytest.raises(ValueError, match="keep_latest"):
        Retention(thread_ttl=timedelta(days=1), keep_last=3)


# ------------------------------------------------- reads served by the Redis head


def hot_saver(pg_url: str, ttl: timedelta) -> ColosseumSaver:
    return ColosseumSaver.from_conn_string(
        pg_url, **cache_options("redis"), retention=Retention(thread_ttl=ttl)
    )


def age(pg_url: str, thread_id: str, seconds: float) -> None:
    """Move the thread's expiry `seconds` closer, as that much time passing would."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE colosseum_threads SET expires_at = expires_at - make_interval(secs => %s)"
            " WHERE thread_id = %s",
            [seconds, thread_id],
        )


def test_a_thread_read_only_from_the_redis_head_is_kept(pg_url: str) -> None:
    """The README: every read pushes a thread's expiry back, those the Redis head
    serves too. Its last write was a TTL ago (the expiry reached); a worker whose
    reads all hit Redis then reads it, and the sweep leaves it alone."""
    truncate(pg_url)
    ttl = timedelta(hours=1)
    with hot_saver(pg_url, ttl) as writer:
        put_one(writer, "hot-read")
        writer.get_tuple(thread("hot-read"))  # a miss: fills the Redis head
    age(pg_url, "hot-read", ttl.total_seconds() + 1)  # expired now
    with hot_saver(pg_url, ttl) as reader:
        counter = RoundTripCounter(reader)
        assert reader.get_tuple(thread("hot-read")) is not None
        assert len(counter.cache_requests) == 1  # the head came from Redis
        assert reader.sweep() == 0
        assert reader.get_tuple(thread("hot-read")) is not None
        assert reader.threads.get("hot-read") is not None


def test_the_bound_a_thread_read_within_0_8_ttl_of_the_sweep_is_kept(pg_url: str) -> None:
    """The README's bound, at its worst case. Time passes for Postgres (the
    expiry is moved closer) and for the saver (its clock moved on) alike."""
    truncate(pg_url)
    ttl = timedelta(seconds=1000)
    slack = 5.0  # > the real time this test takes
    with hot_saver(pg_url, ttl) as writer:
        put_one(writer, "bound")
        writer.get_tuple(thread("bound"))  # a miss: fills the Redis head
    with hot_saver(pg_url, ttl) as reader:
        now = [0.0]
        reader._store.read_touches.clock = lambda: now[0]

        def later(seconds: float) -> None:
            now[0] += seconds
            age(pg_url, "bound", seconds)

        assert reader.get_tuple(thread("bound")) is not None  # learns the incarnation
        counter = RoundTripCounter(reader)
        later(500)  # half the TTL left
        assert reader.get_tuple(thread("bound")) is not None  # a hit; pushes it back
        assert len(counter.requests) == 1
        counter.reset()
        later(100 - slack)  # just under 0.1 TTL: hits make no Postgres round trip
        for _ in range(5):
            assert reader.get_tuple(thread("bound")) is not None
        assert len(counter.requests) == 0
        assert len(counter.cache_requests) == 5
        later(800)  # 0.8 TTL after the last read: kept
        assert reader.sweep() == 0
        assert reader.threads.get("bound") is not None
        counter.reset()
        later(slack + 1)  # 0.1 TTL since it was pushed: the next hit pushes it again
        assert reader.get_tuple(thread("bound")) is not None
        assert len(counter.requests) == 1
        later(899)
        assert reader.sweep() == 0
        later(101 + 1)  # over a TTL after the last read: swept
        assert reader.sweep() == 1
        assert reader.get_tuple(thread("bound")) is None
