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
from rich.cells import cell_len
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


class WholeIdTable(Table):
    """A table that keeps its id (and short) columns whole: `needs` is the width
    at which they still fit on one line, the other columns folded to 4
    characters each."""

    def __init__(self, *args: Any, keep: tuple[bool, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keep = keep
        # A kept column's widest cell; a column that wraps may fold to 4 characters.
        self.narrowest = [0] * len(keep)

    def add_cells(self, *cells: Text) -> None:
        for index, text in enumerate(cells):
            if self.keep[index]:
                widest = max(cell_len(line) for line in text.plain.split("\n"))
                self.narrowest[index] = max(self.narrowest[index], widest)
        self.add_row(*cells)

    @property
    def needs(self) -> int:
        widths = [
            max(n, cell_len(str(c.header))) if k else min(cell_len(str(c.header)), 4)
            for n, k, c in zip(self.narrowest, self.keep, self.columns)
        ]
        # "│ " and " " around each column, and the last "│"; a title's words
        # (an id in it) stay whole too.
        title = self.title.plain.split() if isinstance(self.title, Text) else []
        return max([sum(widths) + 3 * len(widths) + 1] + [cell_len(w) for w in title])


def table(
    *columns: str, title: str | None = None, ids: tuple[str, ...] = (), short: tuple[str, ...] = ()
) -> WholeIdTable:
    """A table that never cuts an id: `ids` (and `short`) columns keep their width
    and the other columns wrap. At 80 columns (whenever output is piped) an id
    cut short ("committee-992ee11e…") could name two threads; on a terminal too
    narrow even for the ids, the table is printed wider than it (see `show`)."""
    keep = tuple(column in ids or column in short for column in columns)
    made = WholeIdTable(title=cell(title) if title is not None else None, title_justify="left",
                        keep=keep)  # fmt: skip
    for column, kept in zip(columns, keep):
        made.add_column(column, no_wrap=kept, overflow="fold")
    return made


def row(table: WholeIdTable, *values: Any) -> None:
    table.add_cells(*(cell(v) for v in values))


def show(made: Table) -> None:
    """Print a table: wider than the terminal (the terminal wraps the lines) when
    it is too narrow for the ids to stay whole, never cutting one."""
    if isinstance(made, WholeIdTable) and made.needs > console.width:
        made.width = made.needs
    console.print(made, crop=False)


def emit(data: Any, as_json: bool, table: Table | None = None, caption: str | None = None) -> None:
    if as_json:
        typer.echo(json.dumps(data, default=str, indent=2, ensure_ascii=False))
        return
    if table is not None:
        show(table)
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
