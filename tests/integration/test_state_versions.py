"""State schema versions (issue 16): code of a newer state version resumes,
reads and migrates threads that older code wrote, each version in a process of
its own (tests/integration/versioned_app.py is the application)."""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import Send, interrupt

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, Migration
from langgraph_colosseum._core import threads as threads_sql
from langgraph_colosseum._core.io import Transaction
from tests.conftest import flush_cache, migrated_database, redis_url, truncate
from tests.integration.locks import wait_until
from tests.integration.test_runs_stopped import in_thread

ROOT = Path(__file__).resolve().parents[2]
# This process runs the application's version 1 (APP_STATE_VERSION unset).
assert "APP_STATE_VERSION" not in os.environ
from tests.integration import versioned_app as v1_app  # noqa: E402


def v1_saver(url: str, prefix: str) -> Any:
    return v1_app.saver_for(url, redis_url(), prefix)


@pytest.fixture
def fresh_url() -> Iterator[str]:
    """A database of this test's own, set up."""
    with migrated_database("colosseum_versions") as url:
        yield url


@pytest.fixture
def prefix() -> Iterator[str]:
    """A Redis key prefix of this test's own, its keys deleted afterwards."""
    prefix = f"colosseum-versions-{uuid.uuid4().hex[:8]}:"
    yield prefix
    flush_cache(prefix=prefix)


def app_env(version: int) -> dict[str, str]:
    return {
        **os.environ,
        "APP_STATE_VERSION": str(version),
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",  # `state migrate --verbose` is read line by line
    }


def run_app(version: int, command: str, url: str, prefix: str, arg: str = "") -> dict[str, Any]:
    """One command of the application at `version`, in a new process; its JSON."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.versioned_app", command, url, redis_url(),
         prefix, arg],
        cwd=ROOT, env=app_env(version), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def stored_rows(url: str, thread_id: str) -> set[tuple]:
    """Every stored row of a thread, as text."""
    with psycopg.connect(url) as conn:
        return {
            (table, *row)
            for table in ("colosseum_checkpoints", "colosseum_channel_values", "colosseum_writes")
            for row in conn.execute(
                f"SELECT t::text FROM {table} t WHERE thread_id = %s", [thread_id]
            ).fetchall()
        }


def test_newer_code_resumes_what_older_code_wrote(fresh_url: str, prefix: str) -> None:
    with v1_saver(fresh_url, prefix) as saver:
        v1_app.write(saver)
    v1_rows = stored_rows(fresh_url, "v2-ask")

    # v2 code in a new process: a finished thread continued, an interrupt
    # resumed, a step cut short (one parallel task's writes pending) finished.
    # Each ends as v2 code ends on v2 data, by repr.
    seen = run_app(2, "resume", fresh_url, prefix)
    for kind in ("done", "ask", "fail"):
        assert seen[kind] == seen[f"{kind}:reference"], kind
    for kind in ("ask", "fail"):  # the stopped threads, before the resume, too
        assert seen[f"{kind}:before"] == seen[f"{kind}:before:reference"], kind

    # v3 (summarise renamed summarize) on threads v1 wrote: the interrupted
    # task follows its node to the new name.
    seen = run_app(3, "resume", fresh_url, prefix)
    for kind in ("done", "ask", "fail"):
        assert seen[kind] == seen[f"{kind}:reference"], kind
    assert "('summarize',)" in seen["ask:before"]

    # Without the node mapping, the resume says which tasks are orphaned and how to map them.
    error = seen["error"]
    assert error.startswith("OrphanedTasksError")
    assert "'orphan-ask'" in error and "node 'summarise'" in error and "__interrupt__" in error
    assert "nodes={'summarise': 'new_name'}" in error

    # Time travel under v3 over a thread v1 wrote and v2 resumed: every
    # checkpoint shows v3's view, as v3 code's own history on v3 data; the
    # rows v1 wrote are all still there, unchanged.
    travel = seen
    assert travel["versions"][0] == 2 and set(travel["versions"][1:]) == {1}
    assert travel["history"] == travel["reference"]
    assert travel["travel"] == "[{'approve': 'ask-1'}]"
    assert v1_rows <= stored_rows(fresh_url, "v2-ask")
    with psycopg.connect(fresh_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM colosseum_checkpoints WHERE thread_id = 'v2-ask' "
            "AND metadata ? 'state_version'"
        ).fetchone() == (1,)  # the one v2 wrote; none rewritten


def test_state_migrate_beside_live_workers_killed_and_rerun(
    fresh_url: str, prefix: str, tmp_path: Path
) -> None:
    threads = 16
    with v1_saver(fresh_url, prefix) as saver:
        v1_app.seed(saver, threads)
    stop = tmp_path / "stop"
    work = [sys.executable, "-m", "tests.integration.versioned_app", "work", fresh_url,
            redis_url(), prefix, str(stop)]  # fmt: skip
    # The first worker, once told to stop, also reads the migrated threads.
    checker = {**app_env(2), "APP_CHECK_THREADS": str(threads)}
    workers = [
        subprocess.Popen(
            work,
            cwd=ROOT,
            env=checker if i == 0 else app_env(2),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    # A barrier, not a head start: the migration begins once every worker has
    # written a thread, so each of them writes while it runs (under load a
    # worker's start-up can outlast the whole migration).
    for worker in workers:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "writing\n", (
            worker.stderr and worker.stderr.read()[-3000:]
        )
    migrate = [
        str(Path(sys.executable).parent / "colosseum"), "--dsn", fresh_url, "--redis-url",
        redis_url(), "--types", "tests.integration.versioned_app:Profile", "state", "migrate",
        "--to", "2", "--migrations", "tests.integration.versioned_app:VERSIONS",
        "--batch-size", "5", "--lease", "1", "--cache-prefix", prefix,
    ]  # fmt: skip
    try:
        # Killed halfway, at a point a barrier fixes: a run of m-008 holds its
        # guard, so the migration waits there, having migrated m-000..m-007.
        with v1_saver(fresh_url, prefix) as holder, holder.run_guard("m-008"):
            first = subprocess.Popen(
                [*migrate, "--verbose"], cwd=ROOT, env=app_env(2), stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, start_new_session=True,
            )  # fmt: skip
            assert first.stdout is not None
            reported = [first.stdout.readline() for _ in range(8)]
            assert reported == [f"m-{i:03}: migrated\n" for i in range(8)]
            first.kill()
            first.wait(timeout=30)

        rerun = subprocess.run(
            migrate, cwd=ROOT, env=app_env(2), capture_output=True, text=True, timeout=120
        )
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert rerun.stdout.startswith(f"migrated {threads - 8} threads"), rerun.stdout
    finally:
        stop.touch()
        outputs = [worker.communicate(timeout=60) for worker in workers]
    reports = []
    for worker, (out, err) in zip(workers, outputs):
        assert worker.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
        assert reports[-1]["threads"] > 0

    # Every old thread is at version 2, migrated exactly once; the workers'
    # threads were written at version 2 by their code.
    with psycopg.connect(fresh_url) as conn:
        per_thread = conn.execute(
            "SELECT thread_id, count(*) FILTER (WHERE metadata ->> 'source' = 'migration') "
            "FROM colosseum_checkpoints WHERE thread_id LIKE 'm-%' GROUP BY thread_id"
        ).fetchall()
    assert sorted(per_thread) == [(f"m-{i:03}", 1) for i in range(threads)]
    with ColosseumSaver.from_conn_string(fresh_url) as saver:
        assert list(saver.state_versions()) == [2]
    # And each migrated head holds what v2 code reads from the v1 thread.
    checked = reports[0]["check"]
    assert len(checked) == threads
    for thread_id, (ours, reference, source) in checked.items():
        assert ours == reference, thread_id
        assert source == "migration", thread_id


class CountV1(TypedDict, total=False):
    query: str
    n: int


class CountV2(TypedDict, total=False):
    queries: list[str]
    n: int


def count(state: dict) -> dict:
    return {"n": state.get("n", 0) + 1}


def count_graph(schema: type) -> StateGraph:
    """START -> count, over `schema` (CountV1 or CountV2): not compiled."""
    builder = StateGraph(schema)
    builder.add_node("count", count)
    builder.add_edge(START, "count")
    return builder


def rename_query(values: dict) -> None:
    if "query" in values:
        values["queries"] = [values.pop("query")]


async def test_every_read_path_migrates_and_none_writes(
    asaver: AsyncColosseumSaver, pg_url: str
) -> None:
    """The async driver, from Postgres and from the Redis head: get_state, history
    and time travel read version 1's checkpoints as version 2; reading writes
    nothing; the first step of version 2 writes the migrated values as new rows."""
    config = {"configurable": {"thread_id": "counting"}}
    v1 = count_graph(CountV1)
    await v1.compile(checkpointer=asaver).ainvoke({"query": "q", "n": 0}, config)
    before = stored_rows(pg_url, "counting")

    v2 = count_graph(CountV2)
    graph = asaver.versioned(v2.compile(), 2, {1: rename_query})
    state = await graph.aget_state(config)
    assert state.values == {"n": 1, "queries": ["q"]}
    history = [s async for s in graph.aget_state_history(config)]
    assert [s.values for s in history] == [
        {"n": 1, "queries": ["q"]},
        {"n": 0, "queries": ["q"]},
        {},
    ]
    past = await graph.aget_state(history[1].config)
    assert past.values == {"n": 0, "queries": ["q"]} and past.next == ("count",)
    assert stored_rows(pg_url, "counting") == before  # reads wrote nothing

    await graph.ainvoke({"n": 5}, config)
    state = await graph.aget_state(config)
    assert state.values == {"n": 6, "queries": ["q"]}
    assert state.metadata["state_version"] == 2
    assert before < stored_rows(pg_url, "counting")  # v1's rows still there, unchanged
    with psycopg.connect(pg_url) as conn:
        channels = conn.execute(
            "SELECT c.channel FROM colosseum_checkpoints k, "
            "jsonb_object_keys(k.checkpoint -> 'channel_versions') AS c(channel) "
            "WHERE k.thread_id = 'counting' AND k.checkpoint_id = %s",
            [state.config["configurable"]["checkpoint_id"]],
        ).fetchall()
    assert ("queries",) in channels and ("query",) not in channels
    # A plain (unversioned) read of the new head sees version 2's values as stored.
    plain = await asaver.aget_tuple(config)
    assert plain is not None and plain.checkpoint["channel_values"]["queries"] == ["q"]


class Fanout(TypedDict, total=False):
    items: list[str]
    done: Annotated[list[str], operator.add]


def test_pending_sends_follow_a_renamed_node_and_a_removed_node_drops_its_work(
    saver: ColosseumSaver,
) -> None:
    """Send tasks (PUSH) of a renamed node keep their finished writes: only the
    task that failed runs again, under its new name. A node mapped to None takes
    its pending interrupt with it."""
    calls: list[str] = []
    failing = {"b"}

    def work(state: dict) -> dict:
        item = state["items"][0]
        calls.append(item)
        if item in failing:
            raise RuntimeError(f"{item} fails this time")
        return {"done": [item]}

    def graph(node: str) -> Any:
        builder = StateGraph(Fanout)
        builder.add_node(node, work)
        builder.add_conditional_edges(
            START, lambda s: [Send(node, {"items": [i]}) for i in s["items"]]
        )
        return builder

    config = {"configurable": {"thread_id": "fanout"}}
    with pytest.raises(RuntimeError):
        graph("work").compile(checkpointer=saver).invoke({"items": ["a", "b", "c"]}, config)
    assert sorted(calls) == ["a", "b", "c"]
    failing.clear()
    calls.clear()
    renamed = saver.versioned(
        graph("process").compile(), 2, {1: Migration(nodes={"work": "process"})}
    )
    before = graph("work").compile(checkpointer=saver).get_state(config).next
    assert renamed.get_state(config).next == tuple("process" for _ in before)
    assert sorted(renamed.invoke(None, config)["done"]) == ["a", "b", "c"]
    assert calls == ["b"]  # a and c's writes were kept, not run again

    def ask(state: dict) -> dict:
        return {"done": [interrupt("ok?")]}

    v1 = StateGraph(Fanout)
    v1.add_node("ask", ask)
    v1.add_edge(START, "ask")
    asking = {"configurable": {"thread_id": "asking"}}
    v1.compile(checkpointer=saver).invoke({"items": []}, asking)
    v2 = StateGraph(Fanout)
    v2.add_node("note", lambda s: {"done": ["noted"]})
    v2.add_edge(START, "note")
    without = saver.versioned(v2.compile(), 2, {1: Migration(nodes={"ask": None})})
    state = without.get_state(asking)
    assert state.next == () and state.interrupts == ()
    assert without.invoke({"items": ["x"]}, asking)["done"] == ["noted"]


def test_a_migration_waits_for_the_run_holding_the_thread_and_migrates_its_last_step(
    pg_url: str,
) -> None:
    """A run holds the thread (run_guard) when `migrate_state` reaches it: the
    migration waits for the run (its take finds the thread busy) rather than
    failing or writing between the run's steps, and then migrates the head the
    run left, its step included. Held by migrate_state's run_guard around
    migrate_head."""
    from tests.integration.test_guards import worker

    truncate(pg_url)
    thread_id = "held"
    config = {"configurable": {"thread_id": thread_id}}
    with worker(pg_url, hot=False) as migrator, worker(pg_url, hot=False) as runner:
        v1 = count_graph(CountV1)
        graph = v1.compile(checkpointer=runner)
        graph.invoke({"query": "q"}, config)
        turned_away = threading.Event()

        def busy(request: Any, result: Any) -> None:
            taking = isinstance(request, Transaction)
            if taking and request.queries[-1].sql is threads_sql.ACQUIRE and not result[-1]:
                turned_away.set()

        migrator.after = busy
        outcome: list[Any] = []
        with runner.run_guard(thread_id):
            migration = in_thread(
                lambda: migrator.migrate_state(2, {1: rename_query}, thread_ids=[thread_id]),
                outcome,
            )
            wait_until(
                lambda: turned_away.is_set() or not migration.is_alive(),
                "the migration neither waited for the run nor ended",
            )
            graph.invoke({"query": "q2"}, config)  # the run's step, while it holds the thread
        migration.join(60)
        assert not migration.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], dict), outcome
        assert outcome[0]["migrated"] == 1
        head = migrator.get_tuple(config)
        assert head is not None and head.metadata["source"] == "migration"
        assert head.checkpoint["channel_values"]["n"] == 2  # the run's step, migrated


def test_a_thread_another_migration_took_meanwhile_is_not_migrated_again(pg_url: str) -> None:
    """Two `state migrate` runs pick the same old thread; the second to get its
    guard finds it at the new version (re-read under the guard) and leaves it."""
    from tests.integration.test_guards import Once, worker

    truncate(pg_url)
    thread_id = "raced"
    with worker(pg_url, hot=False) as one, worker(pg_url, hot=False) as two:
        v1 = count_graph(CountV1)
        v1.compile(checkpointer=one).invoke(
            {"query": "q"}, {"configurable": {"thread_id": thread_id}}
        )

        def the_other_migration() -> None:
            assert two.migrate_state(2, {1: rename_query}, thread_ids=[thread_id])["migrated"] == 1

        # The first selected the thread; the other takes it before its guard does.
        one.before = hook = Once(
            lambda r: isinstance(r, Transaction) and r.queries[-1].sql is threads_sql.ACQUIRE,
            the_other_migration,
        )
        assert one.migrate_state(2, {1: rename_query}, thread_ids=[thread_id])["migrated"] == 0
        assert hook.fired
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM colosseum_checkpoints "
            "WHERE thread_id = %s AND metadata ->> 'source' = 'migration'",
            [thread_id],
        ).fetchone() == (1,)
