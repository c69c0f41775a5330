"""Migrations: numbered, idempotent, advisory-locked, safe from any connection mode."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from langgraph_colosseum import (
    AsyncColosseumSaver,
    CheckpointDeletedError,
    ColosseumSaver,
    SchemaVersionError,
)
from langgraph_colosseum._core import schema
from tests.conftest import server_url


@pytest.fixture
def empty_db() -> Iterator[str]:
    """A database with no colosseum tables yet."""
    name = f"colosseum_schema_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield conninfo.make_conninfo(server_url(), dbname=name)
    finally:
        with psycopg.connect(server_url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def dbname(url: str) -> str:
    return str(conninfo.conninfo_to_dict(url)["dbname"])


def tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'colosseum_%'"
        ).fetchall()
    return {r[0] for r in rows}


EXPECTED_TABLES = {
    "colosseum_schema",
    "colosseum_checkpoints",
    "colosseum_channel_values",
    "colosseum_writes",
    "colosseum_delta_histories",
    "colosseum_tool_calls",
    "colosseum_threads",
    "colosseum_incarnation",
    "colosseum_stale_heads",
    "colosseum_tombstones",
    "colosseum_deleted_threads",
    "colosseum_deleted_runs",
    "colosseum_thread_lineage",
    "colosseum_runs",
    "colosseum_thread_epochs",
}


def test_setup_is_idempotent(empty_db: str) -> None:
    with ColosseumSaver.from_conn_string(empty_db) as saver:
        assert saver.setup() == schema.LATEST_VERSION
        assert saver.setup() == schema.LATEST_VERSION
    assert tables(empty_db) == EXPECTED_TABLES


@pytest.mark.parametrize("autocommit", [True, False])
def test_setup_on_a_plain_connection(empty_db: str, autocommit: bool) -> None:
    with psycopg.connect(empty_db, autocommit=autocommit) as conn:
        saver = ColosseumSaver(conn)
        assert saver.setup() == schema.LATEST_VERSION
        # The migration committed: another connection sees the tables.
        assert tables(empty_db) == EXPECTED_TABLES
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        from langgraph.checkpoint.base import empty_checkpoint

        stored = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        assert saver.get_tuple(stored) is not None
    with psycopg.connect(empty_db) as other:
        assert other.execute("SELECT count(*) FROM colosseum_checkpoints").fetchone()[0] == 1


@pytest.mark.parametrize("autocommit", [True, False])
async def test_async_setup_on_a_plain_connection(empty_db: str, autocommit: bool) -> None:
    async with await psycopg.AsyncConnection.connect(empty_db, autocommit=autocommit) as conn:
        saver = AsyncColosseumSaver(conn)
        assert await saver.setup() == schema.LATEST_VERSION
    assert tables(empty_db) == EXPECTED_TABLES


SETUP_SYNC = """
from langgraph_colosseum import ColosseumSaver
with ColosseumSaver.from_conn_string({url!r}, pgbouncer={bouncer}) as saver:
    print(saver.setup())
"""
SETUP_ASYNC = """
import asyncio
from langgraph_colosseum import AsyncColosseumSaver
async def main():
    async with AsyncColosseumSaver.from_conn_string({url!r}, pgbouncer={bouncer}) as saver:
        print(await saver.setup())
asyncio.run(main())
"""


@pytest.mark.parametrize("driver", ["sync", "async"])
@pytest.mark.parametrize("via", ["postgres", "pgbouncer"])
def test_two_processes_set_up_at_once(
    empty_db: str, via: str, driver: str, request: pytest.FixtureRequest
) -> None:
    bouncer = via == "pgbouncer"
    url = request.getfixturevalue("pgbouncer").url(dbname(empty_db)) if bouncer else empty_db
    script = (SETUP_ASYNC if driver == "async" else SETUP_SYNC).format(url=url, bouncer=bouncer)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 0, err.decode()
        assert out.decode().strip() == str(schema.LATEST_VERSION)
    assert tables(empty_db) == EXPECTED_TABLES
    with psycopg.connect(empty_db) as conn:
        versions = conn.execute("SELECT version FROM colosseum_schema ORDER BY 1").fetchall()
    assert [v[0] for v in versions] == list(range(1, schema.LATEST_VERSION + 1))


def test_newer_schema_is_refused(empty_db: str) -> None:
    with ColosseumSaver.from_conn_string(empty_db) as saver:
        saver.setup()
        with psycopg.connect(empty_db, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO colosseum_schema (version) VALUES (%s)", [schema.LATEST_VERSION + 1]
            )
        with pytest.raises(SchemaVersionError, match="newer|only knows"):
            saver.setup()


def test_every_primary_key_starts_with_thread_id(pg_url: str) -> None:
    # The two one-row tables, and the deleted runs (a run not yet stored has no
    # known thread), have no thread: a Citus reference table each. Only the
    # saver's tables are looked at: the session's database also holds the
    # tables other tests create (the Store's, for one).
    threaded = sorted(
        EXPECTED_TABLES - {"colosseum_schema", "colosseum_incarnation", "colosseum_deleted_runs"}
    )
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            """
            SELECT t.relname, a.attname
            FROM pg_index i
            JOIN pg_class t ON t.oid = i.indrelid
            JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0]
            WHERE i.indisprimary AND t.relname = ANY(%s)
            """,
            [threaded],
        ).fetchall()
    assert dict(rows) == dict.fromkeys(threaded, "thread_id")


def test_upgrading_to_12_keeps_the_rollback_of_a_run_holding_a_thread(empty_db: str) -> None:
    """Migration 12 on a database at 11 with a run under way (recorded as 11's
    code did: the registry metadata when it started and the keys it merges).
    Its keys get their metadata_undo entries from that record, so rolling it
    back after the upgrade puts them back as before, and keeps a key someone
    else set meanwhile (`owner`); a thread without a run gets no entry."""
    from tests.integration.test_runs_stopped import held_graph

    with ColosseumSaver.from_conn_string(empty_db) as saver:
        saver.setup()
    with psycopg.connect(empty_db, autocommit=True) as conn:  # back to what 11 made
        conn.execute("ALTER TABLE colosseum_threads DROP COLUMN metadata_undo")
        conn.execute("DELETE FROM colosseum_schema WHERE version = 12")
        conn.execute(
            "INSERT INTO colosseum_threads (thread_id, status, metadata, run_owner, run_token, "
            "run_lease_until) VALUES ('held', 'busy', %s, 'run-a', 5, now() + interval '1 hour'), "
            "('idle', 'idle', %s, NULL, 0, NULL)",
            [
                psycopg.types.json.Jsonb({"topic": "from-a", "lang": "fr", "owner": "bob"}),
                psycopg.types.json.Jsonb({"topic": "quiet"}),
            ],
        )
        conn.execute(
            "INSERT INTO colosseum_runs (thread_id, run_id, strategy, status, holder, token, "
            "started_at, metadata_before, metadata_keys) VALUES ('held', 'run-a', 'enqueue', "
            "'running', 'elsewhere:1', 5, now(), %s, ARRAY['topic', 'lang'])",
            [psycopg.types.json.Jsonb({"topic": "zero", "lang": "en"})],
        )
    with ColosseumSaver.from_conn_string(empty_db) as saver:
        assert saver.setup() == schema.LATEST_VERSION
        with psycopg.connect(empty_db) as conn:
            undo = dict(conn.execute("SELECT thread_id, metadata_undo FROM colosseum_threads"))
        assert undo == {
            "held": {"topic": {"t": 5, "v": "zero"}, "lang": {"t": 5, "v": "en"}},
            "idle": {},
        }
        config = {"configurable": {"thread_id": "held"}}
        saver.runs(held_graph(saver, {}), "rollback").invoke({"messages": ["qb"]}, config)
        assert saver.runs.get("run-a").status == "rolled_back"
        metadata = saver.threads.get("held").metadata
        assert {k: v for k, v in metadata.items() if k != "run_id"} == {
            "topic": "zero",
            "lang": "en",
            "owner": "bob",
        }


# What a process of older code (schema 11's) sends when it rolls a run back.
ROLLED_BACK_BEFORE_12 = """
WITH run AS (
    UPDATE colosseum_runs SET status = 'rolled_back'
    WHERE thread_id = %(thread_id)s AND run_id = %(stopped)s
      AND status IN ('interrupted', 'error')
    RETURNING coalesce(metadata_before, '{}'::jsonb) AS before, metadata_keys AS keys
)
UPDATE colosseum_threads t
SET metadata = CASE
    WHEN run.keys IS NULL THEN run.before
    ELSE (t.metadata - run.keys)
         || coalesce((SELECT jsonb_object_agg(b.key, b.value) FROM jsonb_each(run.before) AS b
                      WHERE b.key = ANY(run.keys)), '{}'::jsonb)
END
FROM run
WHERE t.thread_id = %(thread_id)s
"""


def test_older_code_rolling_back_a_newer_run_leaves_the_registry_metadata(
    empty_db: str,
) -> None:
    """During a rolling upgrade a process still on older code may roll back a
    run this code recorded, which keeps no snapshot of the registry metadata:
    that process puts back none of the run's keys, rather than emptying the
    registry metadata (its rule for a record without keys)."""
    from tests.integration.test_runs_stopped import held_graph

    with ColosseumSaver.from_conn_string(empty_db) as saver:
        saver.setup()
        config = {"configurable": {"thread_id": "t"}, "run_id": str(uuid.uuid4())}
        runs = saver.runs(held_graph(saver, {}), "rollback")
        runs.invoke({"messages": ["q0"]}, {**config, "metadata": {"topic": "zero"}})
        with psycopg.connect(empty_db, autocommit=True) as conn:
            conn.execute("UPDATE colosseum_runs SET status = 'interrupted'")
            conn.execute(ROLLED_BACK_BEFORE_12, {"thread_id": "t", "stopped": config["run_id"]})
        assert saver.runs.get(config["run_id"]).status == "rolled_back"
        assert saver.threads.get("t").metadata == {"topic": "zero", "run_id": config["run_id"]}


# How a process of older code (schema 12's, which compared the deletion's time
# with the host's) records a deletion of threads: the column this code reads
# as the thread's deletion stamp, with no move past the id's last stamp.
DELETED_THREAD_BEFORE_STAMPS = """
INSERT INTO colosseum_deleted_threads AS g (thread_id, before)
SELECT t, lpad(to_hex((extract(epoch FROM clock_timestamp()) * 10000000)::bigint
                      + 122192928000000000), 15, '0')
FROM unnest(%(thread_ids)s::text[]) AS t
ON CONFLICT (thread_id) DO UPDATE SET before = EXCLUDED.before, deleted_at = now()
"""


def delete_as_older_code(url: str, tid: str) -> None:
    with psycopg.connect(url) as conn:
        for table in ("colosseum_writes", "colosseum_channel_values", "colosseum_checkpoints",
                      "colosseum_threads"):  # fmt: skip
            conn.execute(f"DELETE FROM {table} WHERE thread_id = %s", [tid])
        conn.execute(DELETED_THREAD_BEFORE_STAMPS, {"thread_ids": [tid]})


def test_deletions_by_older_code_are_seen_by_the_runs_of_this_code(pg_url: str) -> None:
    """During a rolling upgrade a process of older code deletes threads: no
    schema change is needed, its record of the deletion is the stamp this
    code's runs compare. A run begun after such a deletion (a reused thread
    id) is stored; a run holding the thread when one comes (it read the thread
    before) stores nothing at its end."""
    from tests.integration.test_deleted_stays_deleted import SECRET, chat_graph, first_input

    tid = f"older-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": tid}}
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        chat_graph(saver, lambda state: {}).invoke(first_input(tid), config)
        delete_as_older_code(pg_url, tid)
        out = chat_graph(saver, lambda state: {}).invoke(first_input(tid), config)
        assert out["messages"][-1].content == f"you said: {SECRET}"

        def purge(state: Any) -> dict:
            delete_as_older_code(pg_url, tid)
            return {}

        with pytest.raises(CheckpointDeletedError):
            chat_graph(saver, purge).invoke(first_input(tid), config, durability="exit")
        assert saver.get_tuple(config) is None
        assert saver.threads.get(tid) is None
