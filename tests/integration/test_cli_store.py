"""`colosseum store ...`: browsing the Store's namespaces and items (typer's runner)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from langgraph_colosseum.cli import app
from langgraph_colosseum.memory import ColosseumStore
from tests.conftest import server_url
from tests.integration.store_support import fresh_database, sql

runner = CliRunner()


@pytest.fixture
def store_db(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with fresh_database(server_url()) as url:
        monkeypatch.setenv("COLOSSEUM_DATABASE_URL", url)
        with ColosseumStore.from_conn_string(url) as store:
            store.setup()
            store.put(("users", "u1", "prefs"), "risk", {"text": "no leverage", "level": 2})
            store.put(("users", "u2", "prefs"), "risk", {"text": "some leverage", "level": 4})
            store.put(("mcp", "broker"), "session", {"token": "t"}, ttl=10)
        yield url


def run(*args: str) -> str:
    result = runner.invoke(app, ["store", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_store_commands_browse_namespaces_and_items(store_db: str) -> None:
    assert run("namespaces").split() == ["mcp.broker", "users.u1.prefs", "users.u2.prefs"]
    assert json.loads(run("namespaces", "--prefix", "users", "--max-depth", "2", "--json")) == [
        "users.u1",
        "users.u2",
    ]
    assert run("namespaces", "--prefix", "users.*.prefs", "--suffix", "prefs").split() == [
        "users.u1.prefs",
        "users.u2.prefs",
    ]
    found = json.loads(run("items", "users", "--filter", '{"level": {"$gt": 3}}', "--json"))
    assert [(i["namespace"], i["key"], i["value"]["level"]) for i in found] == [
        ("users.u2.prefs", "risk", 4)
    ]
    assert "no leverage" in run("items", "users.u1")
    item = json.loads(run("get", "users.u1.prefs", "risk"))
    assert item["value"] == {"text": "no leverage", "level": 2}

    # Browsing does not refresh TTLs.
    before = sql(store_db, "SELECT expires_at FROM colosseum_store_items WHERE key = 'session'")
    run("get", "mcp.broker", "session")
    run("items", "mcp")
    assert (
        sql(store_db, "SELECT expires_at FROM colosseum_store_items WHERE key = 'session'")
        == before
    )

    run("delete", "users.u1.prefs", "risk")
    missing = runner.invoke(app, ["store", "get", "users.u1.prefs", "risk"])
    assert missing.exit_code == 1
