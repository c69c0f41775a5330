"""The zero-config default: no URL set, an embedded PostgreSQL and Valkey, reused across runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from langgraph_colosseum import embedded

ROOT = Path(__file__).parents[2]


def test_configured_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://db-from-database-url")
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", "postgresql://db-from-colosseum")
    assert embedded.database_url() == "postgresql://db-from-colosseum"
    monkeypatch.delenv("COLOSSEUM_DATABASE_URL")
    assert embedded.database_url() == "postgresql://db-from-database-url"


def test_configured_redis_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://from-redis-url")
    monkeypatch.setenv("COLOSSEUM_REDIS_URL", "redis://from-colosseum")
    assert embedded.redis_url() == "redis://from-colosseum"
    monkeypatch.delenv("COLOSSEUM_REDIS_URL")
    assert embedded.redis_url() == "redis://from-redis-url"


def test_servers_start_nothing_embedded_next_to_a_configured_database(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setenv("DATABASE_URL", "postgresql://db")
    monkeypatch.delenv("COLOSSEUM_DATABASE_URL", raising=False)
    for name in embedded.REDIS_ENV:
        monkeypatch.delenv(name, raising=False)
    assert embedded.servers() == ("postgresql://db", None)
    assert embedded.worker_env() == {"COLOSSEUM_DATABASE_URL": "postgresql://db"}
    monkeypatch.setenv("REDIS_URL", "redis://cache")
    assert embedded.servers() == ("postgresql://db", "redis://cache")
    assert not (tmp_path / "colosseum").exists()  # nothing was started, nothing written


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


def _in_a_process(code: str, data_home: Path) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if k not in embedded.DATABASE_ENV + embedded.REDIS_ENV
    }
    env["XDG_DATA_HOME"] = str(data_home)
    return subprocess.run(
        [sys.executable, "-c", f"from langgraph_colosseum import embedded\n{code}"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_valkey_is_shared_and_outlives_a_killed_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    pidfile = tmp_path / "colosseum" / "valkey" / "valkey.pid"
    # A user killed with no chance to clean up (kill -9) leaves the server running...
    killed = _in_a_process(
        "import os, signal\nprint(embedded.embedded_redis_url(), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)",
        tmp_path,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    url = killed.stdout.strip()
    assert url == f"unix://{tmp_path}/colosseum/valkey/valkey.sock"
    server_pid = pidfile.read_text().strip()
    assert redis.Redis.from_url(url).ping()

    # ...which the next user reuses (same server process), and, being the last
    # live user when it exits, stops cleanly: the dead one is not waited for.
    reused = _in_a_process(
        f"print(embedded.embedded_redis_url())\nprint(open({str(pidfile)!r}).read())", tmp_path
    )
    assert reused.returncode == 0, reused.stderr
    assert reused.stdout.split() == [url, server_pid]
    assert not pidfile.exists()  # Valkey removes it on a clean shutdown
    assert not embedded.status()["redis"]["running"]


def test_a_server_is_released_where_it_was_started(tmp_path: Path) -> None:
    # XDG_DATA_HOME changes after the start (as under monkeypatch): the exit
    # handler still releases, and stops, the server in the first directory.
    later = tmp_path / "later"
    done = _in_a_process(
        f"embedded.embedded_redis_url()\nimport os\nos.environ['XDG_DATA_HOME'] = {str(later)!r}",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "colosseum" / "valkey" / "valkey.pid").exists()
    assert not later.exists()
