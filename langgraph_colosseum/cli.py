"""The `colosseum` command: run the demo, inspect and operate a Colosseum database.

Every command reads the same configuration as `ColosseumSaver.from_env()`:
COLOSSEUM_DATABASE_URL, then DATABASE_URL, else the embedded PostgreSQL; and
COLOSSEUM_REDIS_URL, then REDIS_URL, else (with the embedded PostgreSQL) the
embedded Valkey. Commands whose output is data take `--json`.

Example:
    $ colosseum demo
    $ colosseum threads --status interrupted --json
    $ colosseum diff t1 1f0a... 1f0b...
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Annotated, Any

import redis
import typer
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import CheckpointTuple
from rich.console import Console
from rich.table import Table

from langgraph_colosseum import embedded
from langgraph_colosseum._core import schema
from langgraph_colosseum.demo import DEFAULT_TICKER, DemoFailedError
from langgraph_colosseum.demo import run as run_demo
from langgraph_colosseum.saver import ColosseumSaver

app = typer.Typer(
    help="Run the demo, inspect and operate a langgraph-colosseum database.", no_args_is_help=True
)
embedded_app = typer.Typer(help="The embedded PostgreSQL and Valkey used when no URL is set.")
app.add_typer(embedded_app, name="embedded")
console = Console()


@contextmanager
def _saver() -> Iterator[ColosseumSaver]:
    with ColosseumSaver.from_env(pool_size=2) as saver:
        yield saver


def _emit(data: Any, as_json: bool, table: Table | None = None) -> None:
    if as_json:
        typer.echo(json.dumps(data, default=str, indent=2))
    elif table is not None:
        console.print(table)


def _message_text(message: Any) -> str:
    content = getattr(message, "content", message)
    return content if isinstance(content, str) else json.dumps(content, default=str)


@app.command()
def demo(
    ticker: str = typer.Option(DEFAULT_TICKER, help="The ticker the committee meets on."),
) -> None:
    """An investment committee, end to end, in one run (no LLM, no network).

    The CIO's approval interrupt and its resume; a worker killed mid-step and
    the thread resumed in a new process; one order placed once; the audit
    conversation; time travel and a fork; a thread search.
    """
    try:
        run_demo(console, ticker=ticker)
    except DemoFailedError as exc:
        console.print(f"[red]demo failed: {exc}[/]")
        raise typer.Exit(1) from exc


@app.command()
def migrate() -> None:
    """Create or upgrade the schema (safe to run concurrently)."""
    with _saver() as saver:
        version = saver.setup()
    typer.echo(f"schema at version {version}")


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help="Output JSON.")) -> None:
    """Connectivity, schema version, embedded or not, and the Redis mode."""
    report: dict[str, Any] = {
        "database": "configured" if embedded.configured_database_url() else "embedded",
        "code_schema_version": schema.LATEST_VERSION,
    }
    with _saver() as saver, saver.conn.connection() as conn:
        report["server"] = conn.execute("SHOW server_version").fetchone()[0]
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [schema.SCHEMA_TABLE]).fetchone()
        report["database_schema_version"] = (
            conn.execute(schema.CURRENT_VERSION).fetchone()[0] if row[0] else 0
        )
    report.update(_redis_report())
    table = Table("check", "value", title="colosseum doctor")
    for key, value in report.items():
        table.add_row(key, str(value))
    _emit(report, as_json, table)


def _redis_report() -> dict[str, Any]:
    """The hot cache as from_env() would use it: configured, embedded or none; and PING."""
    try:
        _, url = embedded.servers()
    except embedded.EmbeddedUnavailableError as exc:
        return {"redis": "none", "redis_url": None, "redis_ping": False, "redis_error": str(exc)}
    if url is None:
        # A configured database with no Redis URL: the saver runs on Postgres alone.
        return {"redis": "none", "redis_url": None, "redis_ping": None}
    mode = "configured" if embedded.configured_redis_url() else "embedded"
    client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
    try:
        return {"redis": mode, "redis_url": url, "redis_ping": bool(client.ping())}
    except (redis.RedisError, OSError) as exc:
        return {"redis": mode, "redis_url": url, "redis_ping": False, "redis_error": str(exc)}
    finally:
        client.close()


@app.command()
def threads(
    status: str | None = typer.Option(None, help="idle, busy, interrupted or error"),
    metadata: str | None = typer.Option(None, help='JSON object, e.g. {"desk": "equities"}'),
    values: str | None = typer.Option(None, help='JSON object, e.g. {"ticker": "AAPL"}'),
    limit: int = 20,
    offset: int = 0,
    as_json: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """Search threads by status, metadata and values (newest update first)."""
    with _saver() as saver:
        found = saver.threads.search(
            status=status,
            metadata=json.loads(metadata) if metadata else None,
            values=json.loads(values) if values else None,
            limit=limit,
            offset=offset,
        )
    table = Table("thread", "status", "updated", "metadata", title="threads")
    for t in found:
        table.add_row(t.thread_id, t.status, str(t.updated_at), json.dumps(t.metadata))
    _emit([t.__dict__ for t in found], as_json, table)


@app.command()
def history(
    thread: str,
    limit: int = 50,
    as_json: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """The checkpoints of a thread, newest first."""
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    with _saver() as saver:
        rows = [
            {
                "checkpoint_id": t.checkpoint["id"],
                "step": t.metadata.get("step"),
                "source": t.metadata.get("source"),
                "ts": t.checkpoint["ts"],
                "channels": sorted(t.checkpoint["channel_values"]),
                "pending_writes": len(t.pending_writes or []),
            }
            for t in saver.list(config, limit=limit)
        ]
    table = Table("checkpoint", "step", "source", "time", "pending writes", title=thread)
    for r in rows:
        table.add_row(
            r["checkpoint_id"], str(r["step"]), str(r["source"]), r["ts"], str(r["pending_writes"])
        )
    _emit(rows, as_json, table)


def _checkpoint(saver: ColosseumSaver, thread: str, checkpoint: str | None) -> CheckpointTuple:
    """The checkpoint (the latest when None), or exit 1 saying what was not found."""
    configurable = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint:
        configurable["checkpoint_id"] = checkpoint
    found = saver.get_tuple({"configurable": configurable})
    if found is None:
        where = f"checkpoint {checkpoint!r}" if checkpoint else "checkpoint"
        typer.echo(f"no {where} for thread {thread!r} (see: colosseum history {thread})", err=True)
        raise typer.Exit(1)
    return found


def _as_json(saver: ColosseumSaver, value: Any) -> Any:
    """A value as the typed codec stores it in jsonb: plain JSON, with tags for the rest."""
    return json.loads(saver._store.codec.dump_json(value))


@app.command()
def show(
    thread: str,
    checkpoint: str | None = typer.Option(None, help="A checkpoint id (default: the latest)."),
    as_json: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """The state of a thread at a checkpoint."""
    with _saver() as saver:
        found = _checkpoint(saver, thread, checkpoint)
        encoded = _as_json(saver, found.checkpoint["channel_values"])
    data = {"checkpoint_id": found.checkpoint["id"], "metadata": found.metadata, "values": encoded}
    table = Table("channel", "value", title=f"{thread} @ {found.checkpoint['id']}")
    for channel, value in encoded.items():
        table.add_row(channel, json.dumps(value, default=str)[:200])
    _emit(data, as_json, table)


@app.command()
def diff(
    thread: str,
    before: Annotated[str, typer.Argument(help="A checkpoint id: the state before.")],
    after: Annotated[str, typer.Argument(help="A checkpoint id: the state after.")],
    internal: bool = typer.Option(
        False, "--internal", help="Include LangGraph's own channels (branch:to:..., __start__)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """What changed between two checkpoints of a thread, channel by channel.

    A channel is added, removed or changed; for a message list, the messages
    added (+), removed (-) and edited in place (~), by id, are listed instead
    of the whole list.
    """
    with _saver() as saver:
        old, new = _checkpoint(saver, thread, before), _checkpoint(saver, thread, after)
        changes = channel_changes(
            old.checkpoint["channel_values"],
            new.checkpoint["channel_values"],
            partial(_as_json, saver),
        )
    if not internal:
        changes = [c for c in changes if not c["channel"].startswith(_INTERNAL_CHANNELS)]
    data = {
        "thread_id": thread,
        "before": {"checkpoint_id": before, "step": old.metadata.get("step")},
        "after": {"checkpoint_id": after, "step": new.metadata.get("step")},
        "channels": changes,
    }
    title = f"{thread}: step {old.metadata.get('step')} → step {new.metadata.get('step')}"
    table = Table("channel", "change", "what", title=title)
    for change in changes:
        table.add_row(change["channel"], change["change"], _describe(change))
    if not changes:
        table.add_row("", "none", "the two checkpoints hold the same values")
    _emit(data, as_json, table)


def channel_changes(
    old: dict[str, Any], new: dict[str, Any], encode: Callable[[Any], Any]
) -> list[dict[str, Any]]:
    """The channels `new` adds, removes or changes relative to `old`, compared as stored.

    Example:
        >>> channel_changes({"n": 1}, {"n": 2, "t": "x"}, lambda v: v)
        [{'channel': 'n', 'change': 'changed', 'before': 1, 'after': 2},
         {'channel': 't', 'change': 'added', 'after': 'x'}]
    """
    changes = []
    for channel in sorted(old.keys() | new.keys()):
        before, after = old.get(channel, _ABSENT), new.get(channel, _ABSENT)
        if before is _ABSENT:
            kind = "added"
        elif after is _ABSENT:
            kind = "removed"
        elif encode(before) != encode(after):
            kind = "changed"
        else:
            continue
        change: dict[str, Any] = {"channel": channel, "change": kind}
        present = [value for value in (before, after) if value is not _ABSENT]
        if all(_is_message_list(value) for value in present):
            # A thread's message list only grows (or is edited by id): show the
            # messages that differ, not two copies of the whole conversation.
            before_list = [] if before is _ABSENT else before
            after_list = [] if after is _ABSENT else after
            before_by_id = {m.id: m for m in before_list}
            after_ids = {m.id for m in after_list}
            change["messages_added"] = [
                _message_summary(m) for m in after_list if m.id not in before_by_id
            ]
            change["messages_removed"] = [
                _message_summary(m) for m in before_list if m.id not in after_ids
            ]
            change["messages_edited"] = [  # replaced by id (add_messages), new content
                _message_summary(m)
                for m in after_list
                if m.id in before_by_id and encode(m) != encode(before_by_id[m.id])
            ]
        else:
            if before is not _ABSENT:
                change["before"] = encode(before)
            if after is not _ABSENT:
                change["after"] = encode(after)
        changes.append(change)
    return changes


_ABSENT = object()  # a channel missing from one side of a diff (None is a value)
# Channels LangGraph keeps for itself: which node runs next, the input, interrupts.
_INTERNAL_CHANNELS = ("branch:", "__")


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(m, BaseMessage) and m.id is not None for m in value
    )


def _message_summary(message: BaseMessage) -> dict[str, Any]:
    return {"id": message.id, "type": message.type, "name": message.name,
            "text": _message_text(message)}  # fmt: skip


def _describe(change: dict[str, Any]) -> str:
    if "messages_added" in change:
        lines = [f"+ {m['name'] or m['type']}: {m['text'][:100]}" for m in change["messages_added"]]
        lines += [
            f"- {m['name'] or m['type']}: {m['text'][:100]}" for m in change["messages_removed"]
        ]
        lines += [
            f"~ {m['name'] or m['type']}: {m['text'][:100]}" for m in change["messages_edited"]
        ]
        return "\n".join(lines)
    shown = [
        json.dumps(change[side], default=str)[:100]
        for side in ("before", "after")
        if side in change
    ]
    return " → ".join(shown)


@app.command()
def messages(
    thread: str,
    channel: str = "messages",
    as_json: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """Who said what: every message on the thread's current branch."""
    with _saver() as saver:
        entries = saver.threads.messages(thread, channel)
    rows = [
        {"node": e.node, "step": e.step, "checkpoint_id": e.checkpoint_id, "time": e.created_at,
         "type": getattr(e.message, "type", type(e.message).__name__),
         "text": _message_text(e.message)}
        for e in entries
    ]  # fmt: skip
    table = Table("step", "node", "type", "message", title=f"{thread}: {channel}")
    for r in rows:
        table.add_row(str(r["step"]), r["node"], r["type"], r["text"][:120])
    _emit(rows, as_json, table)


@app.command()
def prune(
    thread: Annotated[list[str], typer.Argument(help="Thread ids.")],
    keep: int = typer.Option(1, help="Checkpoints kept per namespace."),
    delete: bool = typer.Option(False, help="Delete the threads instead."),
) -> None:
    """Prune threads to their newest checkpoints (DeltaChannel-safe), or delete them."""
    with _saver() as saver:
        saver.prune(thread, strategy="delete" if delete else "keep_latest", keep=keep)
    typer.echo(f"{'deleted' if delete else 'pruned'} {len(thread)} thread(s)")


@embedded_app.command("up")
def embedded_up(as_json: bool = typer.Option(False, "--json", help="Output JSON.")) -> None:
    """Start the embedded PostgreSQL and Valkey, and keep them running until `down`.

    A server whose URL is configured is not started; its URL is shown instead.
    """
    with console.status("Starting the embedded servers …"):
        urls = embedded.up()
    configured = {"postgres": embedded.configured_database_url(),
                  "redis": embedded.configured_redis_url()}  # fmt: skip
    rows = [
        {"server": kind, "url": url, "from": "configured" if configured[kind] else "embedded"}
        for kind, url in urls.items()
    ]
    table = Table("server", "from", title="running until: colosseum embedded down")
    table.add_column("url", overflow="fold")  # a URL is copied whole, never cut short
    for row in rows:
        table.add_row(row["server"], row["from"], row["url"])
    _emit(rows, as_json, table)


@embedded_app.command("down")
def embedded_down() -> None:
    """Stop the embedded servers cleanly, even while processes still use them."""
    with console.status("Stopping the embedded servers …"):
        stopped = embedded.down()
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else "no embedded server was running")


@embedded_app.command("url")
def embedded_url(
    for_redis: bool = typer.Option(False, "--redis", help="The Redis URL instead."),
) -> None:
    """The database (or Redis) URL in use, starting the embedded server when none is set."""
    if not for_redis:
        typer.echo(embedded.database_url())
        return
    _, url = embedded.servers()
    if url is None:
        typer.echo(
            "no Redis: a database URL is set and no Redis URL (COLOSSEUM_REDIS_URL)", err=True
        )
        raise typer.Exit(1)
    typer.echo(url)


@embedded_app.command("path")
def embedded_path() -> None:
    """Where the embedded servers keep their data."""
    typer.echo(str(embedded.data_dir()))


if __name__ == "__main__":  # pragma: no cover
    app()
