"""`colosseum state ...`: the state schema versions of the threads, and migrating them.

The database is the one every `colosseum` command uses (see cli.py).

Example:
    $ colosseum state versions
    $ colosseum state migrate --to 3 --migrations myapp.state:VERSIONS
"""

from __future__ import annotations

import importlib
from datetime import timedelta
from typing import Any

import typer

from langgraph_colosseum._cli_style import BAD_INPUT, Fail, command, emit, row, table
from langgraph_colosseum._core.hot import KEY_PREFIX
from langgraph_colosseum._core.versions import StateVersions

state_app = typer.Typer(help="State schema versions of the threads: count them, migrate them.")


def _saver(**options: Any) -> Any:
    from langgraph_colosseum.cli import _saver as saver

    return saver(**options)


@command(state_app, "versions")
def versions(as_json: bool = typer.Option(False, "--json", help="Output JSON.")) -> None:
    """How many threads are at each state version (their head's; 1 when none is recorded)."""
    with _saver() as saver:
        counts = saver.state_versions()
    grid = table("state version", "threads")
    for version, count in counts.items():
        row(grid, str(version), str(count))
    emit(
        {str(version): count for version, count in counts.items()},
        as_json,
        grid,
        None if counts else "no threads",
    )


def _load_versions(spec: str) -> StateVersions:
    """`module:attr` naming a StateVersions, or a graph made by saver.versioned."""
    module_name, _, attr = spec.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise typer.BadParameter(
            f"cannot import {spec!r} ({exc})", param_hint="--migrations"
        ) from None
    if isinstance(found, StateVersions):
        return found
    store = getattr(getattr(found, "checkpointer", None), "_store", None)
    if isinstance(getattr(store, "versions", None), StateVersions):
        return store.versions
    raise typer.BadParameter(
        f"{spec!r} is neither a StateVersions nor a graph made by saver.versioned",
        param_hint="--migrations",
    )


@command(state_app, "migrate")
def migrate(
    to: int = typer.Option(..., "--to", min=1, help="The state version to bring the threads to."),
    migrations: str = typer.Option(
        ...,
        "--migrations",
        help="module:attr of your StateVersions (or of a graph made by saver.versioned).",
    ),
    batch_size: int = typer.Option(100, "--batch-size", min=1, help="Threads per batch."),
    lease: float = typer.Option(
        10.0, "--lease", min=0.5, help="Seconds a killed run keeps a thread's guard."
    ),
    cache_prefix: str = typer.Option(
        KEY_PREFIX, "--cache-prefix", help="The cache_prefix your savers use (Redis heads)."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print each thread as it goes."),
) -> None:
    """Bring the heads of older threads to version --to, as new checkpoints.

    Stored values of your own classes are read and written again: name them
    with --types, as for every command. Each migrated head gets a checkpoint with metadata source "migration", so
    the history shows it. Workers may keep running: each thread is migrated
    under its run guard (it waits for a run in progress). Safe to stop and run
    again; a thread migrates once.
    """
    schema = _load_versions(migrations)
    if to > schema.version:
        raise Fail(f"--to {to}: {migrations} only goes up to version {schema.version}", BAD_INPUT)
    target = StateVersions(to, {n: schema.migrations[n] for n in range(1, to)})

    def progress(thread_id: str, outcome: str) -> None:
        if verbose:
            typer.echo(f"{thread_id}: {outcome}")

    with _saver(cache_prefix=cache_prefix) as saver:
        counts = saver.migrate_state(
            target, batch_size=batch_size, lease=timedelta(seconds=lease), progress=progress
        )
    typer.echo(
        f"migrated {counts['migrated']} threads to state version {to}; "
        f"{counts['pending']} with pending tasks migrate on read when they resume"
    )
