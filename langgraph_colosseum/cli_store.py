"""`colosseum store ...`: browse the long-term memory Store's namespaces and items.

A namespace is written with its labels joined by "." (labels cannot hold one):
`users.u1.prefs` is ("users", "u1", "prefs"). The database is the one every
`colosseum` command uses (see cli.py). Read-only, apart from `setup` and `delete`.

Example:
    $ colosseum store namespaces --prefix users --max-depth 2
    $ colosseum store items users.u1 --filter '{"kind": "pref"}' --json
    $ colosseum store get users.u1.prefs risk
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from langgraph_colosseum._cli_style import (
    Fail,
    cell,
    command,
    console,
    json_option,
    row,
    show,
    table,
)
from langgraph_colosseum.memory import ColosseumStore

store_app = typer.Typer(help="Browse the long-term memory Store: namespaces and items.")


@contextmanager
def _store() -> Iterator[ColosseumStore]:
    with ColosseumStore.from_env(pool_size=2) as store:
        yield store


def _namespace(text: str) -> tuple[str, ...]:
    return tuple(label for label in text.split(".") if label)


def _item(item: Any) -> dict[str, Any]:
    out = {
        "namespace": ".".join(item.namespace),
        "key": item.key,
        "value": item.value,
        "created_at": item.created_at.isoformat(),
        "updated_at": item.updated_at.isoformat(),
    }
    if getattr(item, "score", None) is not None:
        out["score"] = item.score
    return out


def _short(value: Any, width: int = 80) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


@command(store_app, "setup")
def setup() -> None:
    """Create or upgrade the Store's tables (without a vector index)."""
    with _store() as store:
        typer.echo(f"store schema at version {store.setup()}")


@command(store_app, "namespaces")
def namespaces(
    prefix: str = typer.Option("", help="Only under this namespace ('*' matches one label)."),
    suffix: str = typer.Option("", help="Only namespaces ending with these labels."),
    max_depth: int | None = typer.Option(None, help="Truncate namespaces to this many labels."),
    limit: int = typer.Option(100),
    offset: int = typer.Option(0),
    as_json: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """List namespaces that hold live items."""
    with _store() as store:
        found = store.list_namespaces(
            prefix=_namespace(prefix) or None,
            suffix=_namespace(suffix) or None,
            max_depth=max_depth,
            limit=limit,
            offset=offset,
        )
    if as_json:
        typer.echo(json.dumps([".".join(ns) for ns in found], indent=2))
        return
    for ns in found:
        console.print(cell(".".join(ns), keep_newlines=False), highlight=False)


@command(store_app, "items")
def items(
    namespace: str = typer.Argument("", help="Namespace prefix, labels joined by '.'."),
    filter: str = typer.Option("", "--filter", help='JSON, e.g. \'{"score": {"$gt": 3}}\'.'),
    limit: int = typer.Option(20),
    offset: int = typer.Option(0),
    as_json: bool = typer.Option(False, "--json", help="Output JSON."),
) -> None:
    """Items under a namespace, most recently updated first (TTLs are not refreshed)."""
    with _store() as store:
        found = store.search(
            _namespace(namespace),
            filter=json_option(filter or None, "--filter"),
            limit=limit,
            offset=offset,
            refresh_ttl=False,
        )
    if as_json:
        typer.echo(json.dumps([_item(i) for i in found], default=str, indent=2))
        return
    shown = table("namespace", "key", "updated", "value", ids=("key",))
    for item in found:
        row(
            shown,
            ".".join(item.namespace),
            item.key,
            item.updated_at.isoformat(timespec="seconds"),
            _short(item.value),
        )
    show(shown)


@command(store_app, "get")
def get(
    namespace: str = typer.Argument(..., help="Namespace, labels joined by '.'."),
    key: str = typer.Argument(...),
    as_json: bool = typer.Option(True, "--json/--text", help="Output JSON (default)."),
) -> None:
    """One item, in full; exit code 1 if there is none (or it expired)."""
    with _store() as store:
        item = store.get(_namespace(namespace), key, refresh_ttl=False)
    if item is None:
        raise Fail(f"no item {key!r} in namespace {namespace!r}")
    typer.echo(json.dumps(_item(item), default=str, indent=2 if as_json else None))


@command(store_app, "delete")
def delete(
    namespace: str = typer.Argument(..., help="Namespace, labels joined by '.'."),
    key: str = typer.Argument(...),
) -> None:
    """Delete one item."""
    with _store() as store:
        store.delete(_namespace(namespace), key)
    typer.echo(f"deleted {key!r} from {namespace!r}")
