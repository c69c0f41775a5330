"""Migrations: numbered, idempotent, advisory-locked, safe from any connection mode."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import conninfo

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, SchemaVersionError
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
