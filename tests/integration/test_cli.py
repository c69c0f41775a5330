"""The `colosseum` command, against the test database (typer's runner)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typer.testing import CliRunner

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum.cli import app
from tests.conftest import truncate

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
    return result.output


def test_migrate_and_doctor(cli_db: str) -> None:
    assert "schema at version" in run("migrate")
    report = json.loads(run("doctor", "--json"))
    assert report["database"] == "configured"
    assert report["database_schema_version"] == report["code_schema_version"]


def test_threads_history_show_messages(cli_db: str) -> None:
    found = json.loads(run("threads", "--metadata", '{"desk": "equities"}', "--json"))
    assert [t["thread_id"] for t in found] == ["cli-1"]
    assert json.loads(run("threads", "--values", '{"ticker": "MSFT"}', "--json")) == []
    assert "cli-1" in run("threads")

    history = json.loads(run("history", "cli-1", "--json"))
    assert len(history) == 6 and history[0]["step"] > history[-1]["step"]

    latest = json.loads(run("show", "cli-1", "--json"))
    assert latest["values"]["ticker"] == "AAPL"
    oldest = json.loads(
        run("show", "cli-1", "--checkpoint", history[-1]["checkpoint_id"], "--json")
    )
    assert oldest["checkpoint_id"] == history[-1]["checkpoint_id"]
    assert runner.invoke(app, ["show", "no-such-thread"]).exit_code == 1

    said = json.loads(run("messages", "cli-1", "--json"))
    assert [(m["node"], m["text"]) for m in said] == [
        ("__start__", "go"), ("analyst", "RSI 55"), ("__start__", "again"), ("analyst", "RSI 55"),
    ]  # fmt: skip
    assert "analyst" in run("messages", "cli-1")


def test_prune_and_delete(cli_db: str) -> None:
    assert "pruned 1" in run("prune", "cli-1", "--keep", "2")
    assert len(json.loads(run("history", "cli-1", "--json"))) == 2
    assert "deleted 1" in run("prune", "cli-1", "--delete")
    assert json.loads(run("history", "cli-1", "--json")) == []


def test_embedded_commands_honour_the_configured_url(cli_db: str) -> None:
    assert run("embedded", "url").strip() == cli_db
    assert run("embedded", "path").strip().endswith("colosseum")
