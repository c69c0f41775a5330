"""Shared fixtures: a throwaway Postgres database for the whole test session.

The server comes from COLOSSEUM_TEST_POSTGRES_URL, else the local PostgreSQL on
127.0.0.1:5432, else the embedded one (the `embedded` extra), so `pytest` passes
on a bare laptop too. Each session creates its own database and drops it at the end,
so runs never see each other's rows.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from psycopg import conninfo

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver

TRUNCATE = (
    "TRUNCATE colosseum_checkpoints, colosseum_channel_values, colosseum_writes, "
    "colosseum_delta_histories, colosseum_tool_calls, colosseum_threads"
)


LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/test"


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


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh, migrated database for this test session."""
    admin_url = server_url()
    name = f"colosseum_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = conninfo.make_conninfo(admin_url, dbname=name)
    with ColosseumSaver.from_conn_string(url, pool_size=2) as saver:
        saver.setup()
    try:
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def truncate(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(TRUNCATE)


@pytest.fixture
def saver(pg_url: str) -> Iterator[ColosseumSaver]:
    truncate(pg_url)
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4) as s:
        yield s


@pytest.fixture
async def asaver(pg_url: str) -> AsyncIterator[AsyncColosseumSaver]:
    truncate(pg_url)
    async with AsyncColosseumSaver.from_conn_string(pg_url, pool_size=4) as s:
        yield s
