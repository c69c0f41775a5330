"""The `colosseum` command: run the demo, inspect and operate a Colosseum database.

Every command reads the same configuration as `ColosseumSaver.from_env()`:
COLOSSEUM_DATABASE_URL, then DATABASE_URL, else the embedded PostgreSQL; and
COLOSSEUM_REDIS_URL, then REDIS_URL, else (with the embedded PostgreSQL) the
embedded Valkey. `--dsn` / `--redis-url` before the command override them.
Commands whose output is data take `--json`. What they show comes from
`inspection.py`; this module only parses options and prints.

Output is safe to show: text from a thread (a message, an id) is printed as
text, never as rich markup, with control characters escaped; passwords in
URLs are shown as ***. Failures print one `Error: ...` line and exit 1; bad
input exits 2.

Example:
    $ colosseum demo
    $ colosseum threads --status interrupted --json
    $ colosseum diff t1 1f0a 1f0b        # unique prefixes of ids are enough
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Annotated, Any

import psycopg
import redis
import typer

from langgraph_colosseum import embedded
from langgraph_colosseum._cli_style import (
    BAD_INPUT,
    FAILED,
    F,
    Fail,
    cell,
    command,
    console,
)
from langgraph_colosseum._cli_style import emit as _emit
from langgraph_colosseum._cli_style import json_option as _json_option
from langgraph_colosseum._cli_style import row as _row
from langgraph_colosseum._cli_style import table as _table
from langgraph_colosseum._core import schema
from langgraph_colosseum._core.crypt import Encryption
from langgraph_colosseum._core.hot import KEY_PREFIX
from langgraph_colosseum._core.threads import STATUSES
from langgraph_colosseum._redact import redact, safe
from langgraph_colosseum.cache import client_from_url
from langgraph_colosseum.cli_state import state_app
from langgraph_colosseum.cli_store import store_app
from langgraph_colosseum.demo import DEFAULT_TICKER, DemoFailedError
from langgraph_colosseum.demo import run as run_demo
from langgraph_colosseum.errors import (
    ColosseumError,
)
from langgraph_colosseum.inspection import (
    Inspector,
    Page,
    channel_changes,
    page_of,
    read_export,
    readable,
)
from langgraph_colosseum.saver import ColosseumSaver

__all__ = ["app", "channel_changes"]

app = typer.Typer(
    help="Run the demo, inspect and operate a langgraph-colosseum database.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
embedded_app = typer.Typer(help="The embedded PostgreSQL and Valkey used when no URL is set.")
app.add_typer(embedded_app, name="embedded")
app.add_typer(store_app, name="store")
app.add_typer(state_app, name="state")


def _command(*args: Any, **kwargs: Any) -> Callable[[F], F]:
    return command(app, *args, **kwargs)


def _version(value: bool) -> None:
    if value:
        try:
            typer.echo(f"langgraph-colosseum {package_version('langgraph-colosseum')}")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            from langgraph_colosseum import __version__

            typer.echo(f"langgraph-colosseum {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    dsn: str | None = typer.Option(
        None,
        "--dsn",
        help="Postgres URL (default: COLOSSEUM_DATABASE_URL, DATABASE_URL, "
        "else the embedded PostgreSQL).",
        show_default=False,
    ),
    redis_url: str | None = typer.Option(
        None,
        "--redis-url",
        help="Redis URL for the hot head (default: COLOSSEUM_REDIS_URL, "
        "REDIS_URL, else the embedded Valkey when no database URL is set).",
        show_default=False,
    ),
    types: Annotated[
        list[str] | None,
        typer.Option(
            "--types",
            help="Your application's classes stored in the threads (module:Class, "
            "repeatable), as you pass them to the saver's types=.",
            show_default=False,
        ),
    ] = None,
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Run the demo, inspect and operate a langgraph-colosseum database."""
    _TYPES[:] = [_import_class(name) for name in types or ()]
    # The options act as the environment variables from_env() reads, so every
    # command (and the demo's worker processes) sees the same servers; they
    # are put back when the command ends.
    overrides = {embedded.DATABASE_ENV[0]: dsn, embedded.REDIS_ENV[0]: redis_url}
    saved = {name: os.environ.get(name) for name, value in overrides.items() if value}
    for name, value in overrides.items():
        if value:
            os.environ[name] = value

    def restore() -> None:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    ctx.call_on_close(restore)


# The classes --types names: stored values of these revive as themselves.
_TYPES: list[type] = []


def _import_class(name: str) -> type:
    module_name, _, qualname = name.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise typer.BadParameter(f"cannot import {name!r} ({exc})", param_hint="--types") from None
    if not qualname or not isinstance(found, type):
        raise typer.BadParameter(f"{name!r} is not module:Class", param_hint="--types")
    return found


@contextmanager
def _saver(*, hot_cache: bool = True, **options: Any) -> Iterator[ColosseumSaver]:
    """The saver from_env() makes; without `hot_cache`, on Postgres alone (doctor
    checks the database and Redis each on its own, so one cannot hide the other)."""
    # An encrypted database is read with its keys, as the application reads it.
    encryption = _encryption() if os.environ.get(ENCRYPTION_KEYS_ENV) else None
    options.update(pool_size=2, types=list(_TYPES), encryption=encryption)
    if hot_cache:
        opened = ColosseumSaver.from_env(**options)
    else:
        opened = ColosseumSaver.from_conn_string(embedded.servers()[0], **options)
    with opened as saver:
        yield saver


ENCRYPTION_KEYS_ENV = "COLOSSEUM_ENCRYPTION_KEYS"
# What the application lists as plaintext, comma-separated: the commands must
# know it too, or they would refuse those rows as plaintext where ciphertext is due.
PLAINTEXT_CHANNELS_ENV = "COLOSSEUM_ENCRYPTION_PLAINTEXT_CHANNELS"
SEARCHABLE_METADATA_ENV = "COLOSSEUM_ENCRYPTION_SEARCHABLE_METADATA"


def _encryption() -> Encryption:
    spec = os.environ.get(ENCRYPTION_KEYS_ENV)
    if not spec:
        raise Fail(f"set {ENCRYPTION_KEYS_ENV} to id:base64key,... (the first key is current)")

    def names(env: str) -> list[str]:
        return [n.strip() for n in os.environ.get(env, "").split(",") if n.strip()]

    try:
        return Encryption.from_spec(
            spec,
            plaintext_channels=names(PLAINTEXT_CHANNELS_ENV),
            searchable_metadata=names(SEARCHABLE_METADATA_ENV),
        )
    except ValueError as exc:
        raise Fail(f"{ENCRYPTION_KEYS_ENV}: {exc}", BAD_INPUT) from None


@contextmanager
def _inspector() -> Iterator[Inspector]:
    with _saver() as saver:
        yield Inspector(saver)


def _page_caption(page: Page, noun: str) -> str:
    if not page.items:
        return f"no {noun} (of {page.total})" if page.total else f"no {noun}"
    first, last = page.offset + 1, page.offset + len(page.items)
    more = "" if last >= page.total else f"; next page: --offset {last}"
    return f"{noun} {first}-{last} of {page.total}{more}"


def _paged(page: Page) -> dict[str, Any]:
    return {"total": page.total, "offset": page.offset, "items": page.items}


JSON_OPTION = typer.Option(False, "--json", help="Output JSON.")
LIMIT_OPTION = typer.Option(50, "--limit", min=0, help="At most this many rows.")
OFFSET_OPTION = typer.Option(0, "--offset", min=0, help="Skip this many rows first.")
NAMESPACE_OPTION = typer.Option(
    "", "--namespace", "-n", help="The checkpoint namespace (default: the root graph's)."
)


@_command()
def demo(
    ticker: str = typer.Option(
        DEFAULT_TICKER,
        help="The ticker the committee meets on: any, such as AMD, NFLX, NVDA, AAPL, MSFT or "
        "TSLA. One the risk manager vetoes shows the veto, and the committee then meets on AMD.",
    ),
    keep: bool | None = typer.Option(
        None,
        "--keep/--no-keep",
        show_default=False,
        help="Keep the run's threads and its committee_orders table (default: kept on the "
        "embedded database, removed from a database you configured).",
    ),
) -> None:
    """An investment committee, end to end, in one run (no LLM, no network).

    The CIO's approval interrupt and its resume; a worker killed mid-step and
    the thread resumed in a new process; one order placed once; the audit
    conversation; time travel and a fork; a thread search.
    """
    try:
        run_demo(console, ticker=ticker, keep=keep)
    except DemoFailedError as exc:
        raise Fail(f"demo failed: {exc}") from exc


cache_app = typer.Typer(help="The Redis hot cache in front of the database.")
app.add_typer(cache_app, name="cache")


def cache_flush(
    prefix: str = typer.Option(KEY_PREFIX, help="The cache_prefix your savers use."),
) -> None:
    """Drop this database's hot heads from Redis, and nothing else.

    Run it after a restore that keeps the database's incarnation (see the
    README, Backup): a data-only pg_restore into the existing tables.
    """
    with ColosseumSaver.from_env(pool_size=2, cache_prefix=prefix) as saver:
        if saver.cache is None:
            typer.echo("no Redis is configured: nothing to flush")
            return
        deleted = saver.flush_cache()
    typer.echo(f"dropped {deleted} hot thread heads of this database from Redis")


command(cache_app, "flush")(cache_flush)


@_command()
def migrate() -> None:
    """Create or upgrade the schema (safe to run concurrently)."""
    with _saver() as saver:
        version = saver.setup()
    typer.echo(f"schema at version {version}")


@_command()
def rekey(
    batch_size: int = typer.Option(500, "--batch-size", min=1, help="Rows per transaction."),
    encrypt_plaintext: bool = typer.Option(
        False,
        "--encrypt-plaintext",
        help="Also encrypt rows written before encryption was on (they cannot be "
        "authenticated: they are sealed as they are).",
    ),
) -> None:
    """Re-encrypt rows sealed with an older key under the current one.

    Keys come from COLOSSEUM_ENCRYPTION_KEYS (id:base64key,..., the first is
    current); the channels and metadata keys the application keeps plaintext
    from COLOSSEUM_ENCRYPTION_PLAINTEXT_CHANNELS and
    COLOSSEUM_ENCRYPTION_SEARCHABLE_METADATA (comma-separated). Safe to stop
    and run again: it resumes where it stopped.
    """
    encryption = _encryption()
    with _saver() as saver:
        count = saver.rekey(batch_size=batch_size, encrypt_plaintext=encrypt_plaintext)
    typer.echo(f"re-encrypted {count} rows with key {encryption.current!r}")


@_command()
def doctor(as_json: bool = JSON_OPTION) -> None:
    """Connectivity, schema version, embedded or not, and the Redis mode.

    Exits 1 when something needs fixing (the database cannot be reached, has no
    schema or an old one, or Redis does not answer), saying what to do.
    """
    configured = embedded.configured_database_url()
    report: dict[str, Any] = {
        "database": "configured" if configured else "embedded",
        "database_url": redact(configured) if configured else None,
        "code_schema_version": schema.LATEST_VERSION,
    }
    problems: list[str] = []
    try:
        with _saver(hot_cache=False) as saver, saver.conn.connection() as conn:
            report["server"] = conn.execute("SHOW server_version").fetchone()[0]
            row = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL", [schema.SCHEMA_TABLE]
            ).fetchone()
            report["database_schema_version"] = (
                conn.execute(schema.CURRENT_VERSION).fetchone()[0] if row[0] else 0
            )
    except (ColosseumError, psycopg.Error) as exc:
        report["database_error"] = redact(exc)
        problems.append(str(exc))
    else:
        version = report["database_schema_version"]
        if version == 0:
            problems.append("the database has no Colosseum schema: run `colosseum migrate` "
                            "(or saver.setup())")  # fmt: skip
        elif version < schema.LATEST_VERSION:
            problems.append(f"the schema is at version {version}, this code needs "
                            f"{schema.LATEST_VERSION}: run `colosseum migrate`")  # fmt: skip
        elif version > schema.LATEST_VERSION:
            problems.append(f"the schema is at version {version}, newer than this code "
                            f"({schema.LATEST_VERSION}): upgrade langgraph-colosseum")  # fmt: skip
    redis_report, redis_problem = _redis_report()
    report.update(redis_report)
    if redis_problem:
        problems.append(redis_problem)
    report["ok"] = not problems
    report["problems"] = [redact(p) for p in problems]
    table = _table("check", "value", title="colosseum doctor")
    for key, value in report.items():
        if key not in ("problems", "ok"):
            _row(table, key, value if isinstance(value, str) else json.dumps(value, default=str))
    _emit(report, as_json, table)
    if problems:
        for problem in problems:
            typer.echo(f"Error: {safe(problem)}", err=True)
        raise typer.Exit(FAILED)


def _redis_report() -> tuple[dict[str, Any], str | None]:
    """The hot cache as from_env() would use it (configured, embedded or none)
    and whether it answers PING; and the problem to report, if any."""
    try:
        _, url = embedded.servers()
    except embedded.EmbeddedUnavailableError as exc:
        return {"redis": "none", "redis_url": None, "redis_ping": False,
                "redis_error": str(exc)}, str(exc)  # fmt: skip
    if url is None:
        # A configured database with no Redis URL: the saver runs on Postgres alone.
        return {"redis": "none", "redis_url": None, "redis_ping": None}, None
    report = {"redis": "configured" if embedded.configured_redis_url() else "embedded",
              "redis_url": redact(url)}  # fmt: skip
    try:
        client = client_from_url(url, socket_connect_timeout=3, socket_timeout=3)
    except ColosseumError as exc:  # not a Redis URL at all: no PING was sent
        return {**report, "redis_ping": False, "redis_error": str(exc)}, str(exc)
    try:
        return {**report, "redis_ping": bool(client.ping())}, None
    except (redis.RedisError, OSError) as exc:
        error = redact(exc)
        return {**report, "redis_ping": False, "redis_error": error}, (
            f"Redis does not answer PING: {error}"
        )
    finally:
        client.close()


@_command()
def threads(
    status: str | None = typer.Option(None, help=f"One of: {', '.join(STATUSES)}."),
    metadata: str | None = typer.Option(None, help='JSON object, e.g. {"desk": "equities"}'),
    values: str | None = typer.Option(None, help='JSON object, e.g. {"ticker": "AAPL"}'),
    prefix: str | None = typer.Option(None, help="Only threads whose id starts with this."),
    limit: int = typer.Option(20, "--limit", min=0, help="At most this many threads."),
    offset: int = OFFSET_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Search threads by status, metadata, values and id prefix (newest update first)."""
    if status is not None and status not in STATUSES:
        raise Fail(f"unknown status {status!r}: use one of {', '.join(STATUSES)}", BAD_INPUT)
    wanted_metadata = _json_option(metadata, "--metadata")
    wanted_values = _json_option(values, "--values")
    with _inspector() as look:
        page = look.threads(status=status, metadata=wanted_metadata, values=wanted_values,
                            prefix=prefix, limit=limit, offset=offset)  # fmt: skip
    table = _table("thread", "status", "updated", "metadata", title="threads", ids=("thread",),
                   short=("status",))  # fmt: skip
    for t in page.items:
        _row(table, t["thread_id"], t["status"], str(t["updated_at"])[:19], t["metadata"])
    _emit(_paged(page), as_json, table, _page_caption(page, "threads"))


@_command()
def history(
    thread: Annotated[str, typer.Argument(help="A thread id, or a unique prefix of one.")],
    namespace: str = NAMESPACE_OPTION,
    limit: int = LIMIT_OPTION,
    offset: int = OFFSET_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The checkpoints of a thread, newest first, with each one's parent.

    The branch column marks the checkpoints on the head's branch with `*`; the
    others are on branches the thread left (a fork from the past, a replay).
    """
    with _inspector() as look:
        thread_id = look.thread_id(thread)
        page = look.history(thread_id, checkpoint_ns=namespace, limit=limit, offset=offset)
    title = thread_id + (f" (namespace {namespace})" if namespace else "")
    # The parent is usually the next (older) row: "↓" says so; a fork's parent
    # elsewhere is shown whole, so the tree reads without ids cut short.
    table = _table("checkpoint", "parent", "step", "source", "branch", title=title,
                   ids=("checkpoint", "parent"), short=("step", "source", "branch"))  # fmt: skip
    rows = page.items
    for i, r in enumerate(rows):
        parent = r["parent_checkpoint_id"]
        below = rows[i + 1]["checkpoint_id"] if i + 1 < len(rows) else None
        shown = "-" if parent is None else "↓" if parent == below else parent
        _row(table, r["checkpoint_id"], shown, str(r["step"]), r["source"] or "",
             "*" if r["on_head_branch"] else "")  # fmt: skip
    _emit(_paged(page), as_json, table, _page_caption(page, "checkpoints"))


@_command()
def show(
    thread: Annotated[str, typer.Argument(help="A thread id, or a unique prefix of one.")],
    checkpoint: str | None = typer.Option(
        None, help="A checkpoint id or a unique prefix (default: the latest)."
    ),
    namespace: str = NAMESPACE_OPTION,
    raw: bool = typer.Option(False, "--raw", help="Values as stored (the typed jsonb form)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """The state of a thread at a checkpoint: messages as role and text, models as fields."""
    with _inspector() as look:
        state = look.state(thread, checkpoint, checkpoint_ns=namespace, raw=raw)
    table = _table("channel", "value", title=f"{state['thread_id']} @ {state['checkpoint_id']}")
    for channel, value in state["values"].items():
        _row(table, channel, value if raw else _readable_text(value))
    _emit(state, as_json, table)


def _readable_text(value: Any) -> str:
    """A readable value as lines: a message list one message a line."""
    if isinstance(value, list) and value and all(_is_message(v) for v in value):
        return "\n".join(_message_line(m) for m in value)
    if _is_message(value):
        return _message_line(value)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and "role" in value and "text" in value


def _message_line(message: dict[str, Any]) -> str:
    return f"{message.get('name') or message['role']}: {message['text']}"


@_command()
def diff(
    thread: Annotated[str, typer.Argument(help="A thread id, or a unique prefix of one.")],
    before: Annotated[str, typer.Argument(help="A checkpoint id (or prefix): the state before.")],
    after: Annotated[str, typer.Argument(help="A checkpoint id (or prefix): the state after.")],
    namespace: str = NAMESPACE_OPTION,
    internal: bool = typer.Option(
        False, "--internal", help="Include LangGraph's own channels (branch:to:..., __start__)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """What changed between two checkpoints of a thread, channel by channel.

    A channel is added, removed or changed; for a message list, the messages
    added (+), removed (-) and edited in place (~), by id, are listed instead
    of the whole list.
    """
    with _inspector() as look:
        data = look.diff(thread, before, after, internal=internal, checkpoint_ns=namespace)
    steps = f"step {data['before']['step']} → step {data['after']['step']}"
    table = _table("channel", "change", "what", title=f"{data['thread_id']}: {steps}")
    for change in data["channels"]:
        _row(table, change["channel"], change["change"], _describe(change))
    if not data["channels"]:
        _row(table, "", "none", "the two checkpoints hold the same values")
    _emit(data, as_json, table)


def _describe(change: dict[str, Any]) -> str:
    if "messages_added" in change:
        lines = []
        for mark, key in (("+", "messages_added"), ("-", "messages_removed"),
                          ("~", "messages_edited")):  # fmt: skip
            lines += [f"{mark} {m['name'] or m['type']}: {m['text']}" for m in change[key]]
        return "\n".join(lines)
    shown = [
        json.dumps(readable(change[side]), default=str, ensure_ascii=False)
        for side in ("before", "after")
        if side in change
    ]
    return " → ".join(shown)


@_command()
def messages(
    thread: Annotated[str, typer.Argument(help="A thread id, or a unique prefix of one.")],
    channel: str = typer.Option("messages", help="The channel that holds the messages."),
    checkpoint: str | None = typer.Option(
        None, help="The branch ending at this checkpoint (default: the head's)."
    ),
    limit: int | None = typer.Option(None, "--limit", min=0, help="At most this many rows."),
    offset: int = OFFSET_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Who said what: every message that entered the thread's branch, in order.

    `from` is the node that wrote it, `__start__` for the run's input, or
    `update_state` for an edit; a removed message (RemoveMessage) shows as
    `removed`, an edited one as `edited`.
    """
    with _inspector() as look:
        thread_id = look.thread_id(thread)
        page = look.messages(thread_id, channel=channel, checkpoint=checkpoint,
                             limit=limit, offset=offset)  # fmt: skip
    table = _table("step", "from", "change", "type", "message", title=f"{thread_id}: {channel}",
                   short=("step",))  # fmt: skip
    for r in page.items:
        _row(table, str(r["step"]), r["node"], r["change"], r["name"] or r["type"], r["text"])
    _emit(_paged(page), as_json, table, _page_caption(page, "messages"))


@_command()
def ledger(
    thread: Annotated[str, typer.Argument(help="A thread id, or a unique prefix of one.")],
    limit: int = LIMIT_OPTION,
    offset: int = OFFSET_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The tool calls IdempotentToolNode recorded for a thread (run once, by key)."""
    with _inspector() as look:
        thread_id = look.thread_id(thread)
        page = page_of(look.ledger(thread_id), limit, offset)
    table = _table("tool", "status", "attempts", "output", "key", title=f"{thread_id}: tool ledger",
                   ids=("key",), short=("status",))  # fmt: skip
    for c in page.items:
        _row(table, c["tool"], c["status"], str(c["attempts"]), c["output"] or c["error"] or "",
             c["idempotency_key"])  # fmt: skip
    _emit(_paged(page), as_json, table, _page_caption(page, "tool calls"))


@_command()
def runs(
    thread: Annotated[str, typer.Argument(help="A thread id, or a unique prefix of one.")],
    limit: int = LIMIT_OPTION,
    offset: int = OFFSET_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The thread's runs: those saver.runs(graph) recorded (strategy, status, the
    process that ran it, who stopped it) and those that wrote checkpoints; and
    who holds its run guard (--json: "guard")."""
    with _inspector() as look:
        thread_id = look.thread_id(thread)
        found = look.runs(thread_id)
    page = page_of(found["runs"], limit, offset)
    table = _table("run", "status", "strategy", "checkpoints", "process", "stopped by / error",
                   title=f"{thread_id}: runs", ids=("run",), short=("status",))  # fmt: skip
    for r in page.items:
        _row(table, r["run_id"], r["status"] or "", r["strategy"] or "", str(r["checkpoints"]),
             r["holder"] or "", r["stopped_by"] or r["error"] or "")  # fmt: skip
    data = {"thread_id": thread_id, "guard": found["guard"], **_paged(page)}
    _emit(data, as_json, table, _page_caption(page, "runs"))


@_command()
def prune(
    thread: Annotated[list[str], typer.Argument(help="Thread ids (or unique prefixes).")],
    keep: int = typer.Option(1, help="Checkpoints kept per namespace (at least 1)."),
    delete: bool = typer.Option(False, "--delete", help="Delete the threads whole instead."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be done; do nothing."),
) -> None:
    """Prune threads to their newest checkpoints (DeltaChannel-safe), or delete them.

    Asks for confirmation unless --yes; --dry-run only shows what would go.
    """
    if keep < 1:
        raise Fail(f"--keep must be at least 1, not {keep} (to remove a thread whole, "
                   "use --delete)", BAD_INPUT)  # fmt: skip
    with _inspector() as look:
        thread_ids = list(dict.fromkeys(look.thread_id(t) for t in thread))
        counts = {t: look.history(t, limit=0).total for t in thread_ids}
        if delete:
            plan = [f"delete thread {t} ({counts[t]} checkpoints)" for t in thread_ids]
        else:
            plan = [f"prune thread {t}: keep the newest {keep} of {counts[t]} checkpoints "
                    "per namespace" for t in thread_ids]  # fmt: skip
        for line in plan:
            console.print(cell(("would " if dry_run else "") + line), highlight=False)
        if dry_run:
            return
        if not yes:
            what = "Delete" if delete else "Prune"
            try:
                confirmed = typer.confirm(f"{what} {len(thread_ids)} thread(s)?", default=False)
            except typer.Abort:  # no terminal to answer on
                confirmed = False
            if not confirmed:
                raise Fail("nothing done (not confirmed; pass --yes to skip the question)")
        look.saver.prune(thread_ids, strategy="delete" if delete else "keep_latest", keep=keep)
    typer.echo(f"{'deleted' if delete else 'pruned'} {len(thread_ids)} thread(s)")


@_command()
def ui(
    host: str = typer.Option(
        "127.0.0.1", help="Address to listen on. Anything but loopback needs the printed token."
    ),
    port: int = typer.Option(8765, min=0, max=65535, help="Port (0: any free port)."),
    read_only: bool = typer.Option(
        False, "--read-only", help="No actions: no fork, delete or prune from the browser."
    ),
) -> None:
    """The web inspector: threads, checkpoint trees, diffs, the tool ledger, live.

    Serves the configured database (or the embedded one) on http://127.0.0.1:8765/
    and prints the URL. Needs the ui extra: pip install 'langgraph-colosseum[ui]'.
    """
    try:
        from langgraph_colosseum.ui.server import serve
    except ImportError as exc:
        raise Fail(
            f"the web inspector needs the ui extra ({exc.name} is not installed): "
            "pip install 'langgraph-colosseum[ui]'"
        ) from None
    try:
        serve(host=host, port=port, read_only=read_only, echo=typer.echo)
    except OSError as exc:
        raise Fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


@_command("export")
def export_thread(
    thread: Annotated[str, typer.Argument(help="A thread id, or a unique prefix of one.")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write to this file (default: standard output)."),
    ] = None,
) -> None:
    """A thread as JSON lines: a header, then each checkpoint with its pending writes."""
    with _inspector() as look:
        lines = [json.dumps(record, ensure_ascii=False) for record in look.export_thread(thread)]
    text = "\n".join(lines) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
        typer.echo(f"exported {len(lines) - 1} checkpoint(s) to {output}", err=True)


@_command("import")
def import_thread(
    source: Annotated[
        Path, typer.Argument(help="A file written by `colosseum export` (- for stdin).")
    ],
    thread: str | None = typer.Option(
        None, "--thread", help="Import under this thread id (default: the exported one)."
    ),
) -> None:
    """Write back a thread exported with `colosseum export` (a new thread id, never a merge)."""
    try:
        text = sys.stdin.read() if str(source) == "-" else source.read_text(encoding="utf-8")
    except OSError as exc:
        raise Fail(f"cannot read {source}: {exc.strerror}", BAD_INPUT) from None
    export = read_export(text, str(source))
    with _inspector() as look:
        thread_id = look.import_thread(export, thread_id=thread)
    typer.echo(f"imported {len(export.records) - 1} checkpoint(s) as thread {thread_id}")


def _embedded_command(name: str) -> Callable[[F], F]:
    return command(embedded_app, name)


@_embedded_command("up")
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
    table = _table("server", "from", "url", title="running until: colosseum embedded down",
                   ids=("url",))  # fmt: skip
    for row in rows:
        row["url"] = redact(row["url"])
        _row(table, row["server"], row["from"], row["url"])
    _emit(rows, as_json, table)


@_embedded_command("down")
def embedded_down() -> None:
    """Stop the embedded servers cleanly, even while processes still use them."""
    with console.status("Stopping the embedded servers …"):
        stopped = embedded.down()
    typer.echo(f"stopped: {', '.join(stopped)}" if stopped else "no embedded server was running")


@_embedded_command("url")
def embedded_url(
    for_redis: bool = typer.Option(False, "--redis", help="The Redis URL instead."),
) -> None:
    """The database (or Redis) URL in use.

    A configured URL is printed as it is (its password as ***). With none set,
    the embedded servers are started and KEPT RUNNING, as by `colosseum
    embedded up`, so the URL printed still works after this command exits;
    stop them with `colosseum embedded down`.
    """
    kind = "redis" if for_redis else "postgres"
    configured = (
        embedded.configured_redis_url() if for_redis else embedded.configured_database_url()
    )
    if configured:
        typer.echo(redact(configured))
        return
    if for_redis and embedded.configured_database_url():
        raise Fail("no Redis: a database URL is set and no Redis URL (COLOSSEUM_REDIS_URL)")
    with console.status("Starting the embedded servers (they keep running) …"):
        urls = embedded.up()
    typer.echo(redact(urls[kind]))
    typer.echo("(kept running until: colosseum embedded down)", err=True)


@_embedded_command("path")
def embedded_path() -> None:
    """Where the embedded servers keep their data."""
    typer.echo(str(embedded.data_dir()))


if __name__ == "__main__":  # pragma: no cover
    app()
