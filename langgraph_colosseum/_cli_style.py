"""How every `colosseum` command speaks: one error style and exit codes, and
output that is safe to show.

Text from a thread or the Store (a message, an id, a value) is printed as
text, never read as rich markup, with control characters shown as escapes
(`\\x1b`) and passwords as ***. A failure is one `Error: ...` line on stderr:
exit 1 when something failed or was not found, 2 for bad input.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import redis
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from langgraph_colosseum._redact import safe
from langgraph_colosseum.errors import (
    AmbiguousIdError,
    ColosseumError,
    CorruptRowError,
    InvalidConfigError,
    UntrustedTypeError,
)

console = Console()

F = TypeVar("F", bound=Callable[..., Any])

# Exit codes: 0 done, 1 failed (unreachable, not found, a check that failed),
# 2 bad input (typer's own usage errors use 2 as well).
FAILED, BAD_INPUT = 1, 2


class Fail(Exception):
    """Stop the command: print `Error: message` and exit with `code`."""

    def __init__(self, message: str, code: int = FAILED) -> None:
        super().__init__(message)
        self.code = code


def guarded(command: F) -> F:
    """One error style for every command: our errors and the drivers' become
    one `Error:` line on stderr and an exit code, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except Fail as exc:
            error(str(exc), exc.code)
        except (InvalidConfigError, AmbiguousIdError) as exc:
            error(str(exc), BAD_INPUT)
        except (UntrustedTypeError, CorruptRowError) as exc:
            error(f"{exc}. If it is your application's class, name it: colosseum --types "
                   "module:Class ...")  # fmt: skip
        except (ColosseumError, psycopg.Error, redis.RedisError) as exc:
            error(str(exc) if isinstance(exc, ColosseumError) else f"{type(exc).__name__}: {exc}")

    return wrapper  # type: ignore[return-value]


def error(message: str, code: int = FAILED) -> None:
    typer.echo(f"Error: {safe(message)}", err=True)
    raise typer.Exit(code)


def command(app: typer.Typer, *args: Any, **kwargs: Any) -> Callable[[F], F]:
    """`app.command(...)`, with the error style of `guarded`."""

    def register(function: F) -> F:
        return app.command(*args, **kwargs)(guarded(function))

    return register


def cell(value: Any, *, keep_newlines: bool = True) -> Text:
    """Text for a table cell or a line: never markup, no control characters, no password."""
    if not isinstance(value, str):
        value = "" if value is None else json.dumps(value, ensure_ascii=False, default=str)
    return Text(safe(value, keep_newlines=keep_newlines))


def table(
    *columns: str, title: str | None = None, ids: tuple[str, ...] = (), short: tuple[str, ...] = ()
) -> Table:
    """A table that never cuts an id: `ids` columns keep their width and long
    text columns wrap. At 80 columns (whenever output is piped) an id cut
    short ("committee-992ee11e…") could name two threads."""
    made = Table(title=cell(title) if title is not None else None, title_justify="left")
    for column in columns:
        keep = column in ids or column in short
        made.add_column(column, no_wrap=keep, overflow="fold")
    return made


def row(table: Table, *values: Any) -> None:
    table.add_row(*(cell(v) for v in values))


def emit(data: Any, as_json: bool, table: Table | None = None, caption: str | None = None) -> None:
    if as_json:
        typer.echo(json.dumps(data, default=str, indent=2, ensure_ascii=False))
        return
    if table is not None:
        console.print(table)
    if caption:
        console.print(cell(caption), highlight=False)


def json_option(value: str | None, option: str) -> Any:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise Fail(f"{option} is not JSON ({exc.msg}): {value!r}. Example: "
                   f"{option} '{{\"desk\": \"equities\"}}'", BAD_INPUT) from None  # fmt: skip
    if not isinstance(parsed, dict):
        raise Fail(f"{option} must be a JSON object, such as '{{\"desk\": \"equities\"}}'",
                   BAD_INPUT)  # fmt: skip
    return parsed
