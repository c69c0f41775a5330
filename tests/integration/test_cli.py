"""The `colosseum` command, against the test database (typer's runner)."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, TypedDict

import psycopg
import pytest
import redis
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typer.testing import CliRunner

from langgraph_colosseum import ColosseumSaver, demo, embedded
from langgraph_colosseum.cli import app, channel_changes
from langgraph_colosseum.committee import BROKER_SESSION, BROKER_SESSION_TTL_MINUTES, OrderBook
from langgraph_colosseum.memory import ColosseumStore
from tests.conftest import truncate

LOCAL_REDIS = os.environ.get("COLOSSEUM_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

runner = CliRunner()


class Desk(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    ticker: str


@pytest.fixture
def cli_db(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    truncate(pg_url)
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", pg_url)
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        builder = StateGraph(Desk)
        builder.add_node(
            "analyst", lambda s: {"messages": [AIMessage("RSI 55", id="a1")], "ticker": "AAPL"}
        )
        builder.add_edge(START, "analyst")
        graph = builder.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "cli-1"}, "metadata": {"desk": "equities"}}
        graph.invoke({"messages": [HumanMessage("go", id="h1")]}, config)
        graph.invoke({"messages": [HumanMessage("again", id="h2")]}, config)
    yield pg_url


def run(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def items(*args: str) -> list:
    """The rows of a paged command's --json output."""
    return json.loads(run(*args, "--json"))["items"]


def test_migrate_and_doctor(cli_db: str) -> None:
    assert "schema at version" in run("migrate")
    report = json.loads(run("doctor", "--json"))
    assert report["database"] == "configured"
    assert report["database_schema_version"] == report["code_schema_version"]


def test_threads_history_show_messages(cli_db: str) -> None:
    found = items("threads", "--metadata", '{"desk": "equities"}')
    assert [t["thread_id"] for t in found] == ["cli-1"]
    assert items("threads", "--values", '{"ticker": "MSFT"}') == []
    assert "cli-1" in run("threads")

    history = items("history", "cli-1")
    assert len(history) == 6 and history[0]["step"] > history[-1]["step"]

    latest = json.loads(run("show", "cli-1", "--json"))
    assert latest["values"]["ticker"] == "AAPL"
    oldest = json.loads(
        run("show", "cli-1", "--checkpoint", history[-1]["checkpoint_id"], "--json")
    )
    assert oldest["checkpoint_id"] == history[-1]["checkpoint_id"]
    assert runner.invoke(app, ["show", "no-such-thread"]).exit_code == 1

    said = items("messages", "cli-1")
    assert [(m["node"], m["text"]) for m in said] == [
        ("__start__", "go"), ("analyst", "RSI 55"), ("__start__", "again"), ("analyst", "RSI 55"),
    ]  # fmt: skip
    assert "analyst" in run("messages", "cli-1")


def test_prune_and_delete(cli_db: str) -> None:
    assert "pruned 1" in run("prune", "cli-1", "--keep", "2", "--yes")
    assert len(items("history", "cli-1")) == 2
    assert "deleted 1" in run("prune", "cli-1", "--delete", "--yes")
    assert runner.invoke(app, ["history", "cli-1"]).exit_code == 1  # no such thread now


def test_embedded_commands_honour_the_configured_url(cli_db: str) -> None:
    assert run("embedded", "url").strip() == cli_db
    assert run("embedded", "path").strip().endswith("colosseum")


# ------------------------------------------------------------------ diff


def test_diff_lists_the_channels_and_messages_that_changed(cli_db: str) -> None:
    history = items("history", "cli-1")
    first_answer = next(h for h in reversed(history) if h["step"] == 1)["checkpoint_id"]
    latest = history[0]["checkpoint_id"]

    changed = json.loads(run("diff", "cli-1", first_answer, latest, "--json"))
    assert (changed["before"]["step"], changed["after"]["step"]) == (1, history[0]["step"])
    (messages,) = changed["channels"]  # the ticker is AAPL on both sides: not a change
    assert messages["channel"] == "messages" and messages["change"] == "changed"
    # The fixture's analyst answers with the same message id each turn, so its
    # second answer replaces the first in place: only the question is new.
    assert [(m["type"], m["text"]) for m in messages["messages_added"]] == [("human", "again")]
    assert messages["messages_removed"] == []

    # Back in time: the same messages, removed; and the ticker did not exist yet.
    oldest = history[-1]["checkpoint_id"]
    backwards = {
        c["channel"]: c
        for c in json.loads(run("diff", "cli-1", latest, oldest, "--json"))["channels"]
    }
    assert backwards["ticker"] == {"channel": "ticker", "change": "removed", "before": "AAPL"}
    assert [m["id"] for m in backwards["messages"]["messages_removed"]] == ["h1", "a1", "h2"]
    assert "branch:to:analyst" not in backwards  # LangGraph's own channels: only with --internal
    internal = json.loads(run("diff", "cli-1", latest, oldest, "--internal", "--json"))
    assert any(c["channel"].startswith(("branch:", "__")) for c in internal["channels"])

    assert json.loads(run("diff", "cli-1", latest, latest, "--json"))["channels"] == []
    assert "+ human: again" in run("diff", "cli-1", first_answer, latest)
    missing = runner.invoke(app, ["diff", "cli-1", latest, "no-such-checkpoint"])
    assert missing.exit_code == 1 and "no-such-checkpoint" in missing.output


def test_channel_changes_of_plain_values_and_edited_messages() -> None:
    encode = lambda value: value  # noqa: E731 - values here are plain JSON already
    assert channel_changes({"n": 1, "same": [1]}, {"n": 2, "same": [1], "t": None}, encode) == [
        {"channel": "n", "change": "changed", "before": 1, "after": 2},
        {"channel": "t", "change": "added", "after": None},
    ]
    before = [HumanMessage("hi", id="h1"), AIMessage("draft", id="a1")]
    after = [HumanMessage("hi!", id="h1"), AIMessage("final", id="a2")]
    (change,) = channel_changes({"messages": before}, {"messages": after}, repr)
    assert [m["id"] for m in change["messages_added"]] == ["a2"]
    assert [m["id"] for m in change["messages_removed"]] == ["a1"]
    assert [(m["id"], m["text"]) for m in change["messages_edited"]] == [("h1", "hi!")]


# ------------------------------------------------------------------ doctor: the Redis mode


def test_doctor_reports_a_configured_redis_and_whether_it_answers(
    cli_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLOSSEUM_REDIS_URL", LOCAL_REDIS)
    report = json.loads(run("doctor", "--json"))
    assert (report["redis"], report["redis_url"], report["redis_ping"]) == (
        "configured", LOCAL_REDIS, True,
    )  # fmt: skip
    assert run("embedded", "url", "--redis").strip() == LOCAL_REDIS

    monkeypatch.setenv("COLOSSEUM_REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens there
    failed = runner.invoke(app, ["doctor", "--json"])
    assert failed.exit_code == 1  # a Redis that does not answer is a problem to fix
    report = json.loads(failed.stdout)
    assert (report["redis"], report["redis_ping"], report["ok"]) == ("configured", False, False)
    assert report["redis_error"]
    assert "Error: Redis does not answer PING" in failed.stderr


def test_doctor_without_a_redis_url_next_to_a_configured_database(
    cli_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in embedded.REDIS_ENV:
        monkeypatch.delenv(name, raising=False)
    report = json.loads(run("doctor", "--json"))
    assert (report["redis"], report["redis_url"]) == ("none", None)
    no_url = runner.invoke(app, ["embedded", "url", "--redis"])
    assert no_url.exit_code == 1 and "no Redis" in no_url.output


# ------------------------------------------------------------------ demo


def test_demo_runs_to_the_end_and_places_the_order_once(
    cli_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    truncate(cli_db)
    with psycopg.connect(cli_db, autocommit=True) as conn:  # the memory of earlier runs
        conn.execute("DROP TABLE IF EXISTS colosseum_store_items CASCADE")
        conn.execute("DROP TABLE IF EXISTS colosseum_store_schema")
    for name in embedded.REDIS_ENV:
        monkeypatch.delenv(name, raising=False)
    output = run("demo", "--keep")  # a configured database: kept only when asked
    for shown in ("interrupt()", "killed by SIGKILL", "Resumed by thread_id",
                  "Who said what", "Time travel", "thread search", "Long-term memory"):  # fmt: skip
        assert shown in output

    with ColosseumSaver.from_conn_string(cli_db) as saver:
        found = {t.values["ticker"]: t for t in saver.threads.search(metadata={"desk": "demo"})}
        assert {ticker: t.status for ticker, t in found.items()} == {
            "AMD": "interrupted",  # the fork waits for the CIO
            "TSLA": "idle",  # vetoed by the risk manager
        }
        committee = found["AMD"].thread_id
        book = OrderBook(cli_db)
        (order,) = book.orders(committee)  # exactly one order, through a crash and a resume
        assert book.orders(found["TSLA"].thread_id) == []
        assert (order.ticker, order.side, order.quantity) == ("AMD", "buy", 182)
        assert order.worker_pid != os.getpid()  # sent by the worker that was killed
        with psycopg.connect(cli_db) as conn:
            ledger = conn.execute(
                "SELECT status, attempts, idempotency_key FROM colosseum_tool_calls"
                " WHERE thread_id = %s",
                [committee],
            ).fetchall()
        assert ledger == [("SUCCESS", 1, order.client_order_id)]

        # The original branch finished after the resume; the fork re-sized the position.
        said = [entry.message.content for entry in saver.threads.messages(committee)]
        assert said[-1].startswith("Proposal: BUY 73 AMD")
        history = list(saver.list({"configurable": {"thread_id": committee}}))
        finals = [
            t for t in history if t.checkpoint["channel_values"].get("next_speaker") == "__end__"
        ]
        (closed,) = finals
        last = closed.checkpoint["channel_values"]["messages"][-1].content
        assert last.startswith(f"Confirmed: order {order.order_id} filled")

        # Long-term memory: the CIO's preferences, given with the approval in the
        # worker, recalled on another thread by the risk manager.
        memory = ColosseumStore.from_saver(saver)
        remembered = {item.value["text"] for item in memory.search(demo.MEMORY)}
        assert remembered == set(demo.CIO_PREFERENCES)
        (other,) = saver.threads.search(metadata={"desk": "demo-memory"})
        said = [e.message.content for e in saver.threads.messages(other.thread_id)
                if e.node == "risk_manager"]  # fmt: skip
        assert said[-1].endswith(f'The CIO told us before: "{demo.CIO_PREFERENCES[0]}"')
        # The broker session: a store item with a TTL, opened by the killed worker.
        session = memory.get(*BROKER_SESSION, refresh_ttl=False)
        assert session is not None and session.value["opened_by_pid"] == order.worker_pid
        with psycopg.connect(cli_db) as conn:
            ((left,),) = conn.execute(
                "SELECT expires_at - now() FROM colosseum_store_items WHERE key = 'session'"
            ).fetchall()
        assert dt.timedelta(0) < left <= dt.timedelta(minutes=BROKER_SESSION_TTL_MINUTES)


# ------------------------------------------------------------------ embedded up / down


def test_embedded_up_doctor_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    for name in embedded.DATABASE_ENV + embedded.REDIS_ENV:
        monkeypatch.delenv(name, raising=False)
    try:
        servers = {s["server"]: s for s in json.loads(run("embedded", "up", "--json"))}
        assert {kind: s["from"] for kind, s in servers.items()} == {
            "postgres": "embedded", "redis": "embedded",
        }  # fmt: skip
        assert str(tmp_path) in servers["postgres"]["url"]
        assert servers["redis"]["url"] == f"unix://{tmp_path}/colosseum/valkey/valkey.sock"
        assert all(s["running"] and s["pinned"] for s in embedded.status().values())

        # A fresh embedded database has no schema yet: doctor says so, and fails.
        assert "colosseum migrate" in runner.invoke(app, ["doctor"]).stderr
        run("migrate")
        report = json.loads(run("doctor", "--json"))
        assert (report["database"], report["redis"], report["redis_ping"]) == (
            "embedded", "embedded", True,
        )  # fmt: skip
        assert run("embedded", "url", "--redis").strip() == servers["redis"]["url"]
        cache = redis.Redis.from_url(servers["redis"]["url"])
        assert cache.config_get("port") == {"port": "0"}  # the unix socket only, no TCP
        cache.close()
    finally:
        stopped = run("embedded", "down")
    assert "stopped: postgres, redis" in stopped
    assert not any(s["running"] for s in embedded.status().values())
    assert not (tmp_path / "colosseum" / "postgres" / "postmaster.pid").exists()
    assert not (tmp_path / "colosseum" / "valkey" / "valkey.sock").exists()
    assert "no embedded server was running" in run("embedded", "down")
