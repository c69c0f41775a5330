"""The `colosseum` command in a user's first hour (issue 13; issue 12 item 8;
issue 19 item 5): fast clear errors, safe output, ids that stay whole, an audit
trail that tells the truth, and the features a user expects. Typer's runner,
against the test Postgres and Redis."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from psycopg import conninfo
from pydantic import BaseModel
from typer.testing import CliRunner

from langgraph_colosseum import ColosseumSaver, embedded
from langgraph_colosseum.cli import app
from tests.conftest import server_url, truncate

runner = CliRunner()
SECRET = "S3cretPassw0rd"


class Desk(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    ticker: str


def desk(saver: ColosseumSaver, say: str = "RSI 55"):
    builder = StateGraph(Desk)
    builder.add_node("analyst", lambda s: {"messages": [AIMessage(say)], "ticker": "AAPL"})
    builder.add_edge(START, "analyst")
    return builder.compile(checkpointer=saver)


def cfg(thread_id: str) -> dict:
    return {"configurable": {"thread_id": thread_id}, "metadata": {"desk": "equities"}}


@pytest.fixture
def db(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    truncate(pg_url)
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", pg_url)
    for name in embedded.REDIS_ENV + embedded.DATABASE_ENV[1:]:
        monkeypatch.delenv(name, raising=False)
    yield pg_url


def invoke(*args: str, input: str | None = None):
    return runner.invoke(app, list(args), input=input)


def ok(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result.stdout


def paged(*args: str) -> dict:
    return json.loads(ok(*args, "--json"))


def assert_clean_failure(result, code: int, *words: str) -> None:
    """One `Error:` line saying what to do, the exit code, no traceback."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("Error: "), result.output
    assert len(result.stderr.splitlines()) == 1, result.stderr  # one line, not a box
    for word in words:
        assert word in result.stderr, result.stderr


def assert_usage_error(result, *words: str) -> None:
    """A usage mistake (an unknown option, a missing argument): click's usage
    message (the command's usage line and a boxed reason), exit 2, no traceback."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("Usage: "), result.stderr
    assert "Try " in result.stderr and "--help" in result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


# ============================================================ 13.1: a wrong database URL


def _url(**changes: object) -> str:
    return conninfo.make_conninfo(server_url(), password=SECRET, **changes)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (lambda: _url(dbname="no_such_db_13"), 'database "no_such_db_13" does not exist'),
        (lambda: _url(user="no_such_role_13"), 'role "no_such_role_13" does not exist'),
        (lambda: _url(host="127.0.0.1", port=1), "Connection refused"),
        (lambda: "this is not a dsn", 'missing "=" after "this"'),
    ],
    ids=["database", "role", "port", "not-a-dsn"],
)
def test_doctor_on_a_wrong_url_is_fast_and_clean(
    db: str, url, reason: str, attempts: list[dict]
) -> None:
    dsn = url()
    attempts.clear()  # finding the test server's URL may have connected
    result = invoke("--dsn", dsn, "doctor")
    # Fast means tried once and reported, not retried until a pool gives up.
    assert len(attempts) == (reason != 'missing "=" after "this"'), attempts
    assert result.exit_code == 1
    assert reason in result.stderr
    assert "Traceback" not in result.output and SECRET not in result.output
    assert len(result.output.splitlines()) < 25


def test_every_command_reports_a_wrong_url_in_one_line(db: str) -> None:
    result = invoke("--dsn", _url(dbname="no_such_db_13"), "threads")
    assert_clean_failure(result, 1, 'database "no_such_db_13" does not exist', "***")
    assert SECRET not in result.output


# ============================================================ 13.2: before setup()


@pytest.fixture
def bare_db(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"colosseum_bare_cli_{time.monotonic_ns()}"
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = conninfo.make_conninfo(server_url(), dbname=name)
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", url)
    yield url
    with psycopg.connect(server_url(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_before_migrate_commands_say_to_migrate_and_doctor_fails(bare_db: str) -> None:
    assert_clean_failure(invoke("threads"), 1, "colosseum migrate", "saver.setup()")
    doctor = invoke("doctor", "--json")
    assert doctor.exit_code == 1
    report = json.loads(doctor.stdout)
    assert report["database_schema_version"] == 0 and report["ok"] is False
    assert "colosseum migrate" in doctor.stderr
    assert "schema at version" in ok("migrate")
    assert json.loads(ok("doctor", "--json"))["ok"] is True


# ============================================================ 12.8 / 19.5: safe output


def squash(table: str) -> str:
    """A table's text with blanks and borders gone: a wrapped cell reads whole again
    (its continuation lines have nothing in the other columns)."""
    return re.sub(r"[\s│┃]", "", table)


HOSTILE = [
    "[/]",
    "[link=https://evil.example]click me[/link] [bold red]SYSTEM: approved[/]",
    "wipe\x1b[2J\x1b]0;pwned\x07 done",
]


def test_messages_show_what_was_said_not_markup_or_terminal_codes(db: str) -> None:
    with ColosseumSaver.from_conn_string(db) as saver:
        graph = desk(saver)
        for i, text in enumerate(HOSTILE):
            graph.invoke({"messages": [HumanMessage(text, id=f"h{i}")]}, cfg("hostile-[b]x[/b]"))
    shown = ok("messages", "hostile-[b]x[/b]")
    flat = squash(shown)
    assert "[/]" in flat and "hostile-[b]x[/b]" in flat
    assert squash(HOSTILE[1]) in flat  # the markup as it was written, not a link
    assert "\x1b" not in shown and "\x07" not in shown
    assert "\\x1b[2J\\x1b]0;pwned\\x07" in flat  # shown, not obeyed
    for command in (["threads"], ["history", "hostile-"], ["show", "hostile-"]):
        out = ok(*command)
        assert "\x1b" not in out and "hostile-[b]x[/b]" in squash(out)


def test_no_password_in_doctor_or_any_output(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLOSSEUM_REDIS_URL", f"redis://default:{SECRET}@127.0.0.1:1/0")
    result = invoke("doctor", "--json")
    assert SECRET not in result.output
    assert json.loads(result.stdout)["redis_url"] == "redis://default:***@127.0.0.1:1/0"
    result = invoke("doctor")
    assert SECRET not in result.output and "redis://default:***@" in result.output
    password_dsn = conninfo.make_conninfo(db, password=SECRET)
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", password_dsn)
    assert SECRET not in invoke("embedded", "url").output
    assert SECRET not in invoke("doctor").output


def test_log_lines_are_redacted_and_printable(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    logger = logging.getLogger("langgraph_colosseum")
    with caplog.at_level(logging.WARNING, logger="langgraph_colosseum"):
        logger.warning("lost %s (%s)", f"postgresql://app:{SECRET}@db/x", "evil\x1b[2J")
    (record,) = caplog.records
    assert SECRET not in caplog.text and "\x1b" not in caplog.text
    assert "postgresql://app:***@db/x" in record.getMessage()


# ============================================================ 13.6: errors and exit codes


@pytest.fixture
def one_thread(db: str) -> str:
    with ColosseumSaver.from_conn_string(db) as saver:
        graph = desk(saver)
        graph.invoke({"messages": [HumanMessage("go", id="h1")]}, cfg("cli-1"))
        graph.invoke({"messages": [HumanMessage("again", id="h2")]}, cfg("cli-1"))
    return "cli-1"


def checkpoints(db: str, thread_id: str) -> int:
    with psycopg.connect(db) as conn:
        return conn.execute(
            "SELECT count(*) FROM colosseum_checkpoints WHERE thread_id = %s", [thread_id]
        ).fetchone()[0]


def test_bad_input_exits_2_with_one_error_line(one_thread: str, db: str) -> None:
    assert_clean_failure(invoke("threads", "--metadata", "notjson"), 2, "--metadata", "JSON")
    assert_clean_failure(invoke("threads", "--values", "[1]"), 2, "JSON object")
    assert_clean_failure(invoke("threads", "--status", "bogus"), 2, "bogus", "interrupted")
    assert_clean_failure(invoke("prune", one_thread, "--keep", "0", "--yes"), 2, "--delete")
    assert checkpoints(db, one_thread) == 6  # nothing was pruned


def test_what_does_not_exist_exits_1(one_thread: str, db: str) -> None:
    for command in (["history", "nope"], ["messages", "nope"], ["show", "nope"],
                    ["diff", one_thread, "nope", "nope"]):  # fmt: skip
        assert_clean_failure(invoke(*command), 1, "nope")
    before = checkpoints(db, one_thread)
    assert_clean_failure(invoke("prune", "nope", "--yes"), 1, "nope")
    assert checkpoints(db, one_thread) == before


def test_prune_asks_first_and_has_a_dry_run(one_thread: str, db: str) -> None:
    before = checkpoints(db, one_thread)
    dry = invoke("prune", one_thread, "--delete", "--dry-run")
    assert dry.exit_code == 0 and f"would delete thread {one_thread}" in dry.stdout
    refused = invoke("prune", one_thread, "--delete", input="n\n")
    assert refused.exit_code == 1 and "nothing done" in refused.stderr
    no_terminal = invoke("prune", one_thread, "--keep", "1")  # no answer at all
    assert no_terminal.exit_code == 1
    assert checkpoints(db, one_thread) == before
    confirmed = invoke("prune", one_thread, "--keep", "2", input="y\n")
    assert confirmed.exit_code == 0 and "pruned 1" in confirmed.stdout
    assert checkpoints(db, one_thread) == 2
    assert "deleted 1" in ok("prune", one_thread, "--delete", "--yes")
    assert checkpoints(db, one_thread) == 0


def test_a_redis_that_does_not_answer_fails_doctor(
    one_thread: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLOSSEUM_REDIS_URL", "redis://127.0.0.1:1/0")
    assert_clean_failure(invoke("doctor"), 1, "Redis does not answer PING")


# ============================================================ 13.4: the audit trail


def test_the_audit_trail_lists_edits_forks_and_removals(db: str) -> None:
    with ColosseumSaver.from_conn_string(db) as saver:
        graph = desk(saver)
        config = cfg("audit")
        graph.invoke({"messages": [HumanMessage("go", id="h1")]}, config)
        graph.invoke({"messages": [HumanMessage("again", id="h2")]}, config)
        # An edit at the head, then a removal, as a user would make them.
        graph.update_state(config, {"messages": [AIMessage("head note", id="n1")]})
        graph.update_state(config, {"messages": [RemoveMessage(id="h1")]})
        state = graph.get_state(config)
        said = saver.threads.messages("audit")
        assert [(e.node, e.change, e.message.content) for e in said][-2:] == [
            ("update_state", "added", "head note"),
            ("update_state", "removed", "go"),
        ]
        # Every message now in the state is listed as having entered it.
        entered = {e.message.id for e in said if e.change != "removed"}
        assert {m.id for m in state.values["messages"]} <= entered

        # The README's fork: update_state on a past checkpoint.
        past = next(s for s in graph.get_state_history(config) if s.metadata["step"] == 1)
        forked = graph.update_state(past.config, {"messages": [AIMessage("fork note", id="f1")]})
        fork_said = saver.threads.messages("audit")  # the head is the fork now
        assert [(e.node, e.message.content) for e in fork_said][-1] == ("update_state", "fork note")
        assert "head note" not in [e.message.content for e in fork_said]  # another branch
        fork_state = graph.get_state(forked)
        assert {m.id for m in fork_state.values["messages"]} <= {
            e.message.id for e in fork_said if e.change != "removed"
        }
        # The branch of the old head, asked for by its checkpoint.
        old_branch = saver.threads.messages(
            "audit", checkpoint_id=state.config["configurable"]["checkpoint_id"]
        )
        assert [e.message.content for e in old_branch][-2:] == ["head note", "go"]

    rows = paged("messages", "audit")["items"]
    assert (rows[-1]["node"], rows[-1]["text"]) == ("update_state", "fork note")
    table = ok("messages", "audit")
    assert "update_state" in table and "~__interrupt__" not in table
    head = state.config["configurable"]["checkpoint_id"]
    old = paged("messages", "audit", "--checkpoint", head)["items"]
    assert (old[-1]["change"], old[-1]["text"]) == ("removed", "go")
    assert "removed" in ok("messages", "audit", "--checkpoint", head)


async def test_the_async_audit_trail_lists_a_fork_note(db: str) -> None:
    from langgraph_colosseum import AsyncColosseumSaver

    async with AsyncColosseumSaver.from_conn_string(db) as saver:
        graph = desk(saver)
        config = cfg("audit-async")
        await graph.ainvoke({"messages": [HumanMessage("go", id="h1")]}, config)
        await graph.ainvoke({"messages": [HumanMessage("again", id="h2")]}, config)
        history = [s async for s in graph.aget_state_history(config)]
        past = next(s for s in history if s.metadata["step"] == 1)
        await graph.aupdate_state(past.config, {"messages": [AIMessage("fork note", id="f1")]})
        said = await saver.threads.messages("audit-async")
    assert [(e.node, e.message.content) for e in said][-1] == ("update_state", "fork note")


# ============================================================ 13.3: the demo's tickers


def demo_leftovers(db: str) -> tuple[bool, int]:
    with psycopg.connect(db) as conn:
        table = conn.execute("SELECT to_regclass('committee_orders') IS NOT NULL").fetchone()[0]
        threads = conn.execute(
            "SELECT count(*) FROM colosseum_threads WHERE metadata ->> 'desk' = '\"demo\"'"
            ' OR metadata @> \'{"desk": "demo"}\''
        ).fetchone()[0]
    return table, threads


@pytest.mark.parametrize("ticker", ["NFLX", "NVDA", "AAPL", "MSFT", "TSLA"])
def test_every_suggested_ticker_runs_the_demo_and_leaves_nothing_behind(
    db: str, ticker: str
) -> None:
    assert ticker in " ".join(ok("demo", "--help").split())  # the help suggests it
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS committee_orders")
    result = invoke("demo", "--ticker", ticker)
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    if ticker == "NFLX":  # the committee buys it
        assert "vetoed" not in text and "BUY" in text.upper()
    else:
        assert f"The risk manager vetoed {ticker}" in text
        assert "A veto is a normal outcome" in text and "meets again, on AMD" in text
    assert "One order, placed once, through a crash" in text
    # A configured database: no committee_orders table, no threads of the run.
    assert demo_leftovers(db) == (False, 0)


def test_the_demo_shows_no_password_and_takes_any_ticker_text(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", conninfo.make_conninfo(db, password=SECRET))
    result = invoke("demo", "--ticker", "[/]X")
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output and "password=***" in result.stdout
    assert "[/]X" in result.stdout  # the ticker as typed, not markup
    assert demo_leftovers(db) == (False, 0)


# ============================================================ 13.5: 80 columns, ids, values


def test_ids_stay_whole_at_80_columns_and_prefixes_work(db: str) -> None:
    long_a = "committee-992ee11e-4e2f-4b7a-9a51-7c1f2b3a4d5e-nvda"
    long_b = "committee-992ee11e-4e2f-4b7a-9a51-7c1f2b3a4d5e-aapl"
    with ColosseumSaver.from_conn_string(db) as saver:
        graph = desk(saver, say="x" * 300)
        for thread_id in (long_a, long_b):
            graph.invoke({"messages": [HumanMessage("go")]}, cfg(thread_id))
    listed = ok("threads")
    assert long_a in listed and long_b in listed  # whole, on one line each
    assert all(len(line) <= 80 for line in listed.splitlines())
    history = ok("history", "committee-992ee11e-4e2f-4b7a-9a51-7c1f2b3a4d5e-n")
    ids = [row["checkpoint_id"] for row in paged("history", long_a)["items"]]
    assert all(i in history for i in ids)
    # A unique prefix is accepted; an ambiguous one names the candidates.
    assert paged("messages", long_a[:-2])["total"] == 2
    ambiguous = invoke("history", "committee-992ee11e")
    assert_clean_failure(ambiguous, 2, long_a, long_b)
    first, last = ids[-1], ids[0]
    assert paged("history", long_a, "--limit", "1")["items"][0]["checkpoint_id"] == last
    assert (
        json.loads(ok("show", long_a, "--checkpoint", first[:-4], "--json"))["checkpoint_id"]
        == first
    )
    # Message text is wrapped, never cut.
    said = ok("messages", long_a)
    assert "x" * 300 in squash(said)


def test_show_renders_values_as_a_reader_expects(one_thread: str) -> None:
    shown = ok("show", one_thread)
    assert "human: go" in shown and "ai: RSI 55" in shown and '"$t"' not in shown
    readable = json.loads(ok("show", one_thread, "--json"))
    assert readable["values"]["messages"][0] == {"role": "human", "text": "go", "id": "h1"}
    raw = json.loads(ok("show", one_thread, "--raw", "--json"))
    assert raw["values"]["messages"][0]["$t"]
    assert '"$t"' in ok("show", one_thread, "--raw")


# ============================================================ 13.7: expected features


def test_version_and_dsn_and_redis_url_options(one_thread: str, db: str) -> None:
    assert re.match(r"langgraph-colosseum \d", ok("--version"))
    # --dsn wins over the environment: the env points at a database without the thread.
    elsewhere = conninfo.make_conninfo(db, dbname="postgres")
    import os

    os.environ["COLOSSEUM_DATABASE_URL"] = elsewhere
    try:
        assert paged("--dsn", db, "history", one_thread)["total"] == 6
    finally:
        os.environ["COLOSSEUM_DATABASE_URL"] = db
    report = json.loads(ok("--redis-url", "redis://127.0.0.1:6379/0", "doctor", "--json"))
    assert (report["redis"], report["redis_ping"]) == ("configured", True)
    assert json.loads(ok("doctor", "--json"))["redis"] == "none"  # put back afterwards


def test_threads_counts_and_pages_and_searches_by_prefix(db: str) -> None:
    with ColosseumSaver.from_conn_string(db) as saver:
        graph = desk(saver)
        for i in range(5):
            graph.invoke({"messages": [HumanMessage("go")]}, cfg(f"page-{i}"))
        graph.invoke({"messages": [HumanMessage("go")]}, cfg("other"))
    page = paged("threads", "--prefix", "page-", "--limit", "2", "--offset", "2")
    assert page["total"] == 5 and len(page["items"]) == 2 and page["offset"] == 2
    assert all(t["thread_id"].startswith("page-") for t in page["items"])
    table = ok("threads", "--limit", "2")
    assert "threads 1-2 of 6" in table and "--offset 2" in table
    messages = paged("messages", "page-0", "--limit", "1", "--offset", "1")
    assert messages["total"] == 2 and [m["text"] for m in messages["items"]] == ["RSI 55"]


def test_history_shows_parents_branches_and_namespaces(one_thread: str, db: str) -> None:
    with ColosseumSaver.from_conn_string(db) as saver:
        graph = desk(saver)
        past = next(s for s in graph.get_state_history(cfg(one_thread)) if s.metadata["step"] == 1)
        graph.invoke(None, past.config)  # a replay from the past: a fork
    rows = paged("history", one_thread)["items"]
    by_id = {r["checkpoint_id"]: r for r in rows}
    assert all(r["parent_checkpoint_id"] in by_id for r in rows if r["parent_checkpoint_id"])
    left_behind = [r for r in rows if not r["on_head_branch"]]
    assert left_behind and rows[0]["on_head_branch"]
    table = ok("history", one_thread)
    assert "branch" in table and "parent" in table
    assert paged("history", one_thread, "--namespace", "no-such-ns")["total"] == 0


def test_export_and_import_round_trip(one_thread: str, db: str, tmp_path: Path) -> None:
    with ColosseumSaver.from_conn_string(db) as saver:
        graph = desk(saver)
        graph.update_state(cfg(one_thread), {"messages": [AIMessage("note", id="n1")]})
    dump = tmp_path / "thread.jsonl"
    ok("export", one_thread, "--output", str(dump))
    lines = dump.read_text().splitlines()
    assert json.loads(lines[0])["thread_id"] == one_thread and len(lines) == 1 + 7
    assert "imported 7 checkpoint(s) as thread copy-1" in ok(
        "import", str(dump), "--thread", "copy-1"
    )
    assert_clean_failure(invoke("import", str(dump), "--thread", "copy-1"), 2, "already exists")
    assert_clean_failure(invoke("import", str(tmp_path / "missing.jsonl")), 2, "cannot read")

    def seen(thread_id: str) -> list:
        with ColosseumSaver.from_conn_string(db) as saver:
            graph = desk(saver)
            history = [
                (repr(s.values), s.metadata["step"], s.metadata["source"], s.next)
                for s in graph.get_state_history(cfg(thread_id))
            ]
            said = [(e.node, e.change, repr(e.message)) for e in saver.threads.messages(thread_id)]
            meta = saver.threads.get(thread_id).metadata
        return [history, said, meta]

    assert seen("copy-1") == seen(one_thread)
    # And the copy works on as a thread of its own.
    with ColosseumSaver.from_conn_string(db) as saver:
        out = desk(saver).invoke({"messages": [HumanMessage("more", id="h3")]}, cfg("copy-1"))
    assert [m.content for m in out["messages"]][-2:] == ["more", "RSI 55"]


def test_embedded_url_help_says_the_server_is_kept_running() -> None:
    shown = " ".join(ok("embedded", "url", "--help").split())
    assert "KEPT RUNNING" in shown and "colosseum embedded down" in shown


class Order(BaseModel):
    """An application's own class, stored in a thread's state."""

    ticker: str
    quantity: int


class Book(TypedDict):
    order: Order


def test_show_renders_the_applications_models_as_their_fields(db: str) -> None:
    with ColosseumSaver.from_conn_string(db, types=[Order]) as saver:
        builder = StateGraph(Book)
        builder.add_node("trader", lambda s: {"order": Order(ticker="AMD", quantity=182)})
        builder.add_edge(START, "trader")
        builder.compile(checkpointer=saver).invoke({"order": Order(ticker="-", quantity=0)},
                                                   cfg("models"))  # fmt: skip
    unknown = invoke("show", "models")  # the CLI does not know the class: it says how
    assert_clean_failure(unknown, 1, "--types module:Class")
    model = f"{__name__}:Order"
    shown = json.loads(ok("--types", model, "show", "models", "--json"))
    assert shown["values"]["order"] == {"ticker": "AMD", "quantity": 182}
    assert '"ticker": "AMD"' in ok("--types", model, "show", "models")
    assert '"$t"' in ok("--types", model, "show", "models", "--raw")
    assert invoke("--types", "no.such.module:Order", "show", "models").exit_code == 2


def test_store_commands_show_text_not_markup_and_fail_cleanly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from langgraph_colosseum.memory import ColosseumStore
    from tests.integration.store_support import fresh_database

    with fresh_database(server_url()) as url:
        monkeypatch.setenv("COLOSSEUM_DATABASE_URL", url)
        with ColosseumStore.from_conn_string(url) as store:
            store.setup()
            store.put(("notes", "[b]x[/b]"), "[/]", {"text": HOSTILE[1] + HOSTILE[2]})
        shown = ok("store", "items", "notes")
        assert "\x1b" not in shown and "[/]" in squash(shown) and "[b]x[/b]" in squash(shown)
        assert "[b]x[/b]" in ok("store", "namespaces")
        assert_clean_failure(invoke("store", "items", "--filter", "notjson"), 2, "--filter")
        assert_clean_failure(invoke("store", "get", "notes", "nope"), 1, "nope")
