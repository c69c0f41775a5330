"""Retention: expiry pushed by writes and reads, and a sweep that never touches live threads.

Each test runs on Postgres directly and through PgBouncer in transaction mode.
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
from tests.conftest import connection_options, truncate
from tests.integration.test_drivers import counter_graph, thread

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
