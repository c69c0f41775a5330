"""The `colosseum` command: inspect and operate a Colosseum database.

Every command reads the same configuration as `ColosseumSaver.from_env()`:
COLOSSEUM_DATABASE_URL, then DATABASE_URL, else the embedded PostgreSQL.
Commands whose output is data take `--json`.

Example:
    $ colosseum migrate
    $ colosseum threads --status interrupted --json
    $ colosseum history t1
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from langgraph_colosseum._core import schema
from langgraph_colosseum.embedded import configured_database_url, data_dir, database_url
from langgraph_colosseum.saver import ColosseumSaver

app = typer.Typer(help="Inspect and operate a langgraph-colosseum database.", no_args_is_help=True)
embedded_app = typer.Typer(help="The embedded PostgreSQL used when no URL is set.")
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
def migrate() -> None:
    """Create or upgrade the schema (safe to run concurrently)."""
    with _saver() as saver:
        version = saver.setup()
    typer.echo(f"schema at version {version}")


@app.command()
def doctor(as_json: bool = typer.Option(False, "--json", help="Output JSON.")) -> None:
    """Connectivity, schema version, and whether the database is embedded."""
    report: dict[str, Any] = {
        "database": "configured" if configured_database_url() else "embedded",
        "code_schema_version": schema.LATEST_VERSION,
    }
    with _saver() as saver, saver.conn.connection() as conn:
        report["server"] = conn.execute("SHOW server_version").fetchone()[0]
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [schema.SCHEMA_TABLE]).fetchone()
        report["database_schema_version"] = (
            conn.execute(schema.CURRENT_VERSION).fetchone()[0] if row[0] else 0
        )
    report["redis"] = "not configured (the Redis head is not built yet)"
    table = Table("check", "value", title="colosseum doctor")
    for key, value in report.items():
        table.add_row(key, str(value))
    _emit(report, as_json, table)


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


@app.command()
def show(
    thread: str,
    checkpoint: str | None = typer.Option(None, help="A checkpoint id (default: the latest)."),
    as_json: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """The state of a thread at a checkpoint."""
    configurable = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint:
        configurable["checkpoint_id"] = checkpoint
    with _saver() as saver:
        found = saver.get_tuple({"configurable": configurable})
        if found is None:
            typer.echo(f"no checkpoint for thread {thread!r}", err=True)
            raise typer.Exit(1)
        encoded = json.loads(saver._store.codec.dump_json(found.checkpoint["channel_values"]))
    data = {"checkpoint_id": found.checkpoint["id"], "metadata": found.metadata, "values": encoded}
    table = Table("channel", "value", title=f"{thread} @ {found.checkpoint['id']}")
    for channel, value in encoded.items():
        table.add_row(channel, json.dumps(value, default=str)[:200])
    _emit(data, as_json, table)


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


@embedded_app.command("url")
def embedded_url() -> None:
    """The database URL in use (starting the embedded server when none is set)."""
    typer.echo(database_url())


@embedded_app.command("path")
def embedded_path() -> None:
    """Where the embedded servers keep their data."""
    typer.echo(str(data_dir()))


if __name__ == "__main__":  # pragma: no cover
    app()
