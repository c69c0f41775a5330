"""The `colosseum` command tells the truth (the README's promises, literally):
an import that fails stores nothing and names the line; ids stay whole at any
width; a malformed URL is one `Error:` line; every list pages and counts.
Typer's runner, against the test Postgres and Redis."""

# ruff: noqa: F811 - the fixtures db and one_thread are imported from test_cli_first_hour

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import psycopg
import pytest
from langchain_core.messages import HumanMessage

from langgraph_colosseum import ColosseumSaver
from tests.integration.test_cli_first_hour import (  # noqa: F401 - fixtures
    SECRET,
    assert_clean_failure,
    assert_usage_error,
    cfg,
    checkpoints,
    db,
    desk,
    invoke,
    ok,
    one_thread,
    paged,
)


def registry_row(db: str, thread_id: str) -> bool:
    with psycopg.connect(db) as conn:
        return bool(
            conn.execute(
                "SELECT count(*) FROM colosseum_threads WHERE thread_id = %s", [thread_id]
            ).fetchone()[0]
        )


@pytest.fixture
def export(one_thread: str, tmp_path: Path) -> list[str]:
    """The lines of `one_thread`'s export: a header and six checkpoints."""
    dump = tmp_path / "good.jsonl"
    ok("export", one_thread, "--output", str(dump))
    lines = dump.read_text().splitlines()
    assert len(lines) == 7
    return lines


def write(tmp_path: Path, name: str, lines: list[str]) -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


# ============================================================ import: all or nothing


def test_a_malformed_record_imports_nothing_and_names_its_line(
    export: list[str], db: str, tmp_path: Path
) -> None:
    half = write(tmp_path, "half.jsonl", [*export[:6], '{"garbage": 1}'])
    result = invoke("import", half, "--thread", "copy")
    assert_clean_failure(result, 2, "half.jsonl", "line 7", "checkpoint")
    assert checkpoints(db, "copy") == 0 and not registry_row(db, "copy")


def test_a_truncated_line_is_named_by_its_line_in_the_file(
    export: list[str], db: str, tmp_path: Path
) -> None:
    cut = write(tmp_path, "trunc.jsonl", [*export[:6], export[6][: len(export[6]) // 2]])
    assert_clean_failure(invoke("import", cut, "--thread", "copy"), 2, "trunc.jsonl", "line 7")
    assert checkpoints(db, "copy") == 0


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda r: r.update(writes=[["task", "ch"]]), "writes"),
        (lambda r: r.update(checkpoint={"json": {"$t": "no-such-tag", "v": 1}}), "checkpoint"),
        (
            lambda r: r.update(parent_checkpoint_id="1f000000-0000-6000-8000-000000000000"),
            "parent",
        ),
        (lambda r: r.update(checkpoint_id="another"), "checkpoint_id"),
        (lambda r: r.update(metadata={"serde": ["msgpack", "%%%"]}), "metadata"),
    ],
    ids=["writes", "value", "parent", "id", "base64"],
)
def test_a_record_that_does_not_fit_imports_nothing(
    export: list[str], db: str, tmp_path: Path, change, said: str
) -> None:
    record = json.loads(export[5])
    change(record)
    bad = write(tmp_path, "bad.jsonl", [*export[:5], json.dumps(record), *export[6:]])
    assert_clean_failure(invoke("import", bad, "--thread", "copy"), 2, "line 6", said)
    assert checkpoints(db, "copy") == 0 and not registry_row(db, "copy")


def test_a_write_refused_half_way_leaves_no_partial_thread(
    export: list[str], db: str, tmp_path: Path
) -> None:
    # The thread's metadata parses, but the registry refuses a key holding NUL
    # (jsonb cannot): refused at the last write, after every checkpoint was written.
    header = json.loads(export[0])
    header["metadata"] = {"json": {"desk\u0000": "equities"}}
    bad = write(tmp_path, "refused.jsonl", [json.dumps(header), *export[1:]])
    result = invoke("import", bad, "--thread", "copy")
    assert_clean_failure(result, 1, "copy", "NUL")
    assert checkpoints(db, "copy") == 0 and not registry_row(db, "copy")


# ============================================================ ids whole at any width


LONG = "committee-992ee11e-4e2f-4b7a-9a51-7c1f2b3a4d5e-nflx"


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_ids_stay_whole_at_any_width(db: str, width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    with ColosseumSaver.from_conn_string(db) as saver:
        desk(saver, say="y" * 200).invoke({"messages": [HumanMessage("go")]}, cfg(LONG))
    monkeypatch.setenv("COLUMNS", str(width))
    listed = ok("threads", "--prefix", "committee-")
    assert any(LONG in line for line in listed.splitlines()), (width, listed)
    history = ok("history", LONG)
    ids = [r["checkpoint_id"] for r in paged("history", LONG)["items"]]
    lines = history.splitlines()
    for checkpoint_id in ids:
        assert any(checkpoint_id in line for line in lines), (width, history)
    assert "…" not in listed and "…" not in history


# ============================================================ malformed URLs: one line


@pytest.mark.parametrize(
    ("option", "url", "said"),
    [
        ("--redis-url", f"redis://:{SECRET}@[::1", "Redis URL"),
        ("--redis-url", f"http://u:{SECRET}@127.0.0.1:6379", "Redis URL"),
        ("--dsn", f"postgresql://u:{SECRET}@[::1/x", "Postgres connection string"),
        ("--dsn", f"http://u:{SECRET}@host/x", "Postgres connection string"),
    ],
    ids=["redis-ipv6", "redis-scheme", "postgres-ipv6", "postgres-scheme"],
)
@pytest.mark.parametrize("command", ["doctor", "threads"])
def test_a_malformed_url_is_one_error_line_without_the_password(
    db: str, option: str, url: str, said: str, command: str
) -> None:
    result = invoke(option, url, command)
    # doctor reports what needs fixing and exits 1; another command refuses bad input: 2
    assert_clean_failure(result, 1 if command == "doctor" else 2, said)
    assert SECRET not in result.output


# ============================================================ every list pages and counts


def test_ledger_and_runs_page_and_count_like_the_other_lists(db: str) -> None:
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, StateGraph

    from langgraph_colosseum import IdempotentToolNode
    from tests.integration.test_cli_first_hour import Desk

    @tool
    def note(text: str) -> str:
        """Note something."""
        return f"noted {text}"

    def agent(state: Desk) -> dict:
        calls = [{"name": "note", "args": {"text": str(i)}, "id": f"call-{i}"} for i in range(3)]
        return {"messages": [AIMessage("", tool_calls=calls)]}

    builder = StateGraph(Desk)
    builder.add_node("agent", agent)
    builder.add_node("tools", IdempotentToolNode([note]))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    with ColosseumSaver.from_conn_string(db) as saver:
        graph = builder.compile(checkpointer=saver)
        for _ in range(3):  # each invoke a run of its own, by its run_id
            config = cfg("tools-1")
            config["configurable"]["run_id"] = str(uuid.uuid4())
            graph.invoke({"messages": [HumanMessage("go")], "ticker": "X"}, config)

    ledger = paged("ledger", "tools-1", "--limit", "1", "--offset", "1")
    assert (ledger["total"], ledger["offset"], len(ledger["items"])) == (3, 1, 1)
    assert "tool calls 1-2 of 3" in ok("ledger", "tools-1", "--limit", "2")
    runs = paged("runs", "tools-1", "--limit", "2")
    assert (runs["total"], runs["offset"], len(runs["items"])) == (3, 0, 2)
    assert runs["thread_id"] == "tools-1" and "guard" in runs
    assert "runs 3-3 of 3" in ok("runs", "tools-1", "--offset", "2")


# ============================================================ usage errors


def test_usage_mistakes_get_clicks_usage_message_and_exit_2(one_thread: str) -> None:
    assert_usage_error(invoke("ledger", one_thread, "--bogus"), "No such option")
    assert_usage_error(invoke("history"), "Missing argument")
    assert_usage_error(invoke("--types", "no.such.module:Order", "show", one_thread), "--types")


def test_assert_clean_failure_refuses_a_second_line() -> None:
    class Result:
        exit_code, exception, output = 1, None, "Error: one\nand another\n"
        stderr = output

    with pytest.raises(AssertionError):
        assert_clean_failure(Result(), 1)
    assert re.match(r"Error: ", Result.stderr)
