"""The first hour: a wrong database URL, or a database without the schema, fails
fast with a clear error of our hierarchy (issue 13, items 1 and 2)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import conninfo

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._driver import DEFAULT_CONNECT_TIMEOUT
from langgraph_colosseum.errors import (
    ColosseumError,
    DatabaseUnavailableError,
    InvalidConfigError,
    SchemaMissingError,
)
from tests.conftest import server_url

SECRET = "S3cretPassw0rd"
CONFIG = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}


def _url(**changes: object) -> str:
    return conninfo.make_conninfo(server_url(), password=SECRET, **changes)


NOT_A_DSN = 'missing "=" after "this"'
# (the DSN, the words of the server's own reason that must be quoted)
WRONG_URLS = {
    "nonexistent database": (lambda: _url(dbname="no_such_db_13"), 'database "no_such_db_13"'),
    "nonexistent role": (lambda: _url(user="no_such_role_13"), 'role "no_such_role_13"'),
    "closed port": (lambda: _url(host="127.0.0.1", port=1), "Connection refused"),
    "not a dsn": (lambda: "this is not a dsn", NOT_A_DSN),
}


def _assert_clear(exc: BaseException, reason: str, attempts: list[dict]) -> None:
    assert isinstance(exc, ColosseumError), repr(exc)
    assert reason in str(exc)
    assert SECRET not in str(exc) and SECRET not in repr(exc.__cause__ or "")
    # One attempt (none for a string that is not a DSN at all): no retries.
    assert len(attempts) == (reason != NOT_A_DSN), attempts


@pytest.mark.parametrize("case", sorted(WRONG_URLS))
def test_a_wrong_database_url_fails_fast_with_the_servers_reason(
    case: str, caplog: pytest.LogCaptureFixture, attempts: list[dict]
) -> None:
    make, reason = WRONG_URLS[case]
    url = make()
    attempts.clear()  # finding the test server's URL may have connected
    with pytest.raises(Exception) as caught:
        with ColosseumSaver.from_conn_string(url) as saver:
            saver.setup()
    _assert_clear(caught.value, reason, attempts)
    # Nothing ever worked, so nothing is "lost" and nothing is retried.
    assert "retrying" not in caplog.text
    assert SECRET not in caplog.text


@pytest.mark.parametrize("case", sorted(WRONG_URLS))
async def test_a_wrong_database_url_fails_fast_async(
    case: str, caplog: pytest.LogCaptureFixture, attempts: list[dict]
) -> None:
    make, reason = WRONG_URLS[case]
    url = make()
    attempts.clear()  # finding the test server's URL may have connected
    with pytest.raises(Exception) as caught:
        async with AsyncColosseumSaver.from_conn_string(url) as saver:
            await saver.setup()
    _assert_clear(caught.value, reason, attempts)
    assert "retrying" not in caplog.text
    assert SECRET not in caplog.text


def test_a_malformed_url_fails_at_once(attempts: list[dict]) -> None:
    with pytest.raises(InvalidConfigError, match='missing "=" after "this"'):
        with ColosseumSaver.from_conn_string("this is not a dsn"):
            pass
    assert attempts == []  # refused before any connection is tried


@pytest.fixture
def silent_server() -> Iterator[tuple[int, list[socket.socket]]]:
    """A loopback port that accepts TCP and never answers: libpq's startup
    waits on it until its connect_timeout, as on an unreachable host."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


@pytest.mark.parametrize("timeout", [1, None], ids=["option", "default"])
def test_the_connect_timeout_is_an_option(
    silent_server: tuple[int, list[socket.socket]], attempts: list[dict], timeout: int | None
) -> None:
    port, accepted = silent_server
    url = _url(host="127.0.0.1", port=port)
    attempts.clear()  # finding the test server's URL may have connected
    with pytest.raises(DatabaseUnavailableError, match="timeout"):
        with ColosseumSaver.from_conn_string(url, connect_timeout=timeout):
            pass
    # The one attempt carried the option (or the default) to libpq, and it
    # was the only one: the silent server saw a single connection.
    assert [a["connect_timeout"] for a in attempts] == [timeout or DEFAULT_CONNECT_TIMEOUT]
    assert len(accepted) == 1


def test_a_database_that_worked_and_then_broke_is_retried_not_reported(pg_url: str) -> None:
    # The retry on a fresh connection is for connections that once worked
    # (a restarted server); it must survive the change above.
    with ColosseumSaver.from_conn_string(pg_url, pool_size=1) as saver:
        assert saver.get_tuple(CONFIG) is None
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        assert saver.get_tuple(CONFIG) is None


# ------------------------------------------------------------------ before setup()


@pytest.fixture
def bare_db() -> str:
    """A database that exists and has no Colosseum tables."""
    admin_url = server_url()
    name = f"colosseum_bare_{time.monotonic_ns()}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield conninfo.make_conninfo(admin_url, dbname=name)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_using_the_saver_before_setup_says_to_run_setup(bare_db: str) -> None:
    with ColosseumSaver.from_conn_string(bare_db) as saver:
        for call in (
            lambda: saver.get_tuple(CONFIG),
            lambda: list(saver.list(CONFIG)),
            lambda: saver.threads.search(),
        ):
            with pytest.raises(SchemaMissingError, match=r"saver\.setup\(\).*colosseum migrate"):
                call()
        saver.setup()  # and then it works
        assert saver.get_tuple(CONFIG) is None


async def test_using_the_async_saver_before_setup_says_to_run_setup(bare_db: str) -> None:
    async with AsyncColosseumSaver.from_conn_string(bare_db) as saver:
        with pytest.raises(SchemaMissingError, match=r"saver\.setup\(\)"):
            await saver.aget_tuple(CONFIG)
        await saver.setup()
        assert await saver.aget_tuple(CONFIG) is None
