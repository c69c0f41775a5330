"""The zero-config default: no URL set, an embedded PostgreSQL, reused across runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from langgraph_colosseum import embedded

ROOT = Path(__file__).parents[2]


def test_configured_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://db-from-database-url")
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", "postgresql://db-from-colosseum")
    assert embedded.database_url() == "postgresql://db-from-colosseum"
    monkeypatch.delenv("COLOSSEUM_DATABASE_URL")
    assert embedded.database_url() == "postgresql://db-from-database-url"


def test_data_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert embedded.data_dir() == tmp_path / "colosseum"


def _run_without_a_url(script: str, data_home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in embedded.DATABASE_ENV}
    env["XDG_DATA_HOME"] = str(data_home)
    return subprocess.run(
        [sys.executable, str(ROOT / script)], env=env, capture_output=True, text=True, timeout=240
    )


def test_quickstart_on_the_embedded_default(tmp_path: Path) -> None:
    first = _run_without_a_url("examples/quickstart.py", tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    pgdata = tmp_path / "colosseum" / "postgres"
    initialised = (pgdata / "PG_VERSION").stat().st_mtime_ns
    # The next run reuses the same cluster: no second initdb.
    second = _run_without_a_url("examples/idempotent_tools.py", tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "executed 1 payment" in second.stdout
    assert (pgdata / "PG_VERSION").stat().st_mtime_ns == initialised
    # Stopped cleanly when the last process exited.
    deadline = time.monotonic() + 20
    while (pgdata / "postmaster.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (pgdata / "postmaster.pid").exists()
