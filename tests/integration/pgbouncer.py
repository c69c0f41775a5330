"""A private PgBouncer in transaction mode, in front of the test Postgres.

Started once per session on a free loopback port, with its own config,
auth file, pidfile and log in a temporary directory, and stopped at the end.
Every database name is forwarded (the `*` entry), so the session's throwaway
database is reachable through it as it is directly. The binary is Debian's
`pgbouncer` package; .ci/run installs it. A missing binary fails the tests
that need it: nothing is skipped silently.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import conninfo

# Where Debian puts it (/usr/sbin, not on a non-root PATH).
CANDIDATES = ("pgbouncer", "/usr/sbin/pgbouncer")
# The account it runs as when started by root (Debian's package creates it).
RUN_AS = "postgres"


def pgbouncer_binary() -> str:
    for candidate in CANDIDATES:
        if found := shutil.which(candidate):
            return found
    raise RuntimeError(
        "pgbouncer is not installed; the PgBouncer tests need it "
        "(apt-get install -y pgbouncer, as .ci/run does)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgBouncer:
    """pgbouncer on 127.0.0.1:`port`, pool_mode = transaction, in front of `server_url`."""

    def __init__(self, server_url: str, *, pool_size: int = 20) -> None:
        info = conninfo.conninfo_to_dict(server_url)
        self.user = str(info.get("user") or "postgres")
        self.server_host = str(info.get("host") or "127.0.0.1")
        self.server_port = int(info.get("port") or 5432)
        self.pool_size = pool_size
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="colosseum-pgbouncer-"))
        self.process: subprocess.Popen | None = None

    def url(self, dbname: str) -> str:
        return conninfo.make_conninfo(
            host="127.0.0.1", port=self.port, user=self.user, dbname=dbname
        )

    def _write_config(self) -> Path:
        auth = self.directory / "users.txt"
        auth.write_text(f'"{self.user}" ""\n')
        config = self.directory / "pgbouncer.ini"
        config.write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={self.server_host} port={self.server_port}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    f"unix_socket_dir = {self.directory}",
                    "auth_type = trust",
                    f"auth_file = {auth}",
                    "pool_mode = transaction",
                    f"default_pool_size = {self.pool_size}",
                    "max_client_conn = 500",
                    # Fewer server connections than clients: transactions of
                    # different clients do share server sessions.
                    "server_reset_query =",
                    f"logfile = {self.directory / 'pgbouncer.log'}",
                    f"pidfile = {self.directory / 'pgbouncer.pid'}",
                    f"admin_users = {self.user}",
                    "",
                ]
            )
        )
        return config

    def start(self) -> PgBouncer:
        config = self._write_config()
        command = [pgbouncer_binary(), str(config)]
        if os.geteuid() == 0:
            # PgBouncer refuses to run as root (CI runs as root): it drops to
            # the account Debian's package made, which must own its files.
            account = pwd.getpwnam(RUN_AS)
            for path in [self.directory, *self.directory.iterdir()]:
                os.chown(path, account.pw_uid, account.pw_gid)
            command[1:1] = ["-u", RUN_AS]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while True:
            try:
                psycopg.connect(self.url("pgbouncer"), autocommit=True, connect_timeout=2).close()
                return self
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = self.directory / "pgbouncer.log"
                    text = log.read_text() if log.exists() else ""
                    raise RuntimeError(f"pgbouncer did not start:\n{text}") from None
                time.sleep(0.05)

    def admin(self, command: str) -> list[tuple]:
        """Run a console command (SHOW POOLS, SHOW CONFIG, ...) on the admin database."""
        # The console speaks the simple query protocol only: a client-side cursor.
        with psycopg.connect(
            self.url("pgbouncer"), autocommit=True, cursor_factory=psycopg.ClientCursor
        ) as conn:
            cursor = conn.execute(command)
            return cursor.fetchall() if cursor.description else []

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGINT)  # immediate shutdown
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)
