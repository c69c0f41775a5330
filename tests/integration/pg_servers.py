"""Private PostgreSQL 15 clusters, for tests that crash, copy, restore or promote one.

The shared server is never restarted: a test that needs a server to go down
starts its own on a free loopback port, with its files in a temporary
directory, and trust authentication. initdb and postgres refuse to run as root
(CI runs as root): they, and pg_ctl and pg_basebackup, which write their
files, then run as the account Debian's postgresql package made. Nothing is skipped: a missing
binary fails the tests that need it, and .ci/run installs them.

Every wait here polls (pg_ctl -w, a query) against a generous deadline: a
loaded machine makes them slower, never wrong.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
RUN_AS = "postgres"
# Seconds a server may take to start, stop, promote or replay, on a loaded machine.
DEADLINE = 120

# Small and quick. fsync=off changes nothing these tests look at: a server
# killed with `pg_ctl stop -m immediate` loses its processes, not the kernel's
# page cache, so what it wrote is there when it starts again, and crash
# recovery (replaying WAL, emptying UNLOGGED tables) runs because pg_control
# says the server did not shut down, whatever fsync was.
QUICK = {
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "16MB",
    "max_connections": "30",
    "autovacuum": "off",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_account() -> pwd.struct_passwd | None:
    """The account the server's programs run as: `RUN_AS` under root, else ourselves."""
    return pwd.getpwnam(RUN_AS) if os.geteuid() == 0 else None


def give(path: Path, account: pwd.struct_passwd | None = None) -> None:
    """Make `path` (and everything under it) the server account's."""
    account = account or server_account()
    if account is not None:
        for item in [path, *path.rglob("*")]:
            os.chown(item, account.pw_uid, account.pw_gid)


def run_as_server(*args: str | Path) -> str:
    """Run one of PostgreSQL's programs as the server account; its output.
    A failure raises with what the program said."""
    account = server_account()
    done = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        user=account.pw_name if account else None,
        timeout=DEADLINE,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def private_directory(prefix: str) -> Path:
    """A temporary directory the server account may use (pytest's tmp_path is root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    give(directory)
    return directory


def conf_value(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


class PostgresCluster:
    """One cluster: its data directory `data`, served on 127.0.0.1:`port`.

    The settings live in the data directory's postgresql.conf, so a copy of the
    directory (a base backup) carries them; the port and the socket directory
    are given when it starts, so a copy can run beside its original.
    """

    def __init__(self, data: Path, port: int | None = None) -> None:
        self.data = data
        self.port = port or free_port()
        self.sockets = data.parent / f"sockets-{data.name}"

    @classmethod
    def create(cls, directory: Path, **settings: str) -> PostgresCluster:
        """initdb a new cluster in `directory`/data, with `QUICK` and `settings`."""
        if not (POSTGRES_BIN / "initdb").exists():
            raise RuntimeError(
                f"{POSTGRES_BIN}/initdb is missing: these tests need PostgreSQL 15's server "
                "binaries (apt-get install -y postgresql-15, as .ci/run does)"
            )
        cluster = cls(directory / "data")
        run_as_server(
            POSTGRES_BIN / "initdb", "-D", cluster.data, "-U", "postgres", "-A", "trust",
            "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        cluster.configure(**{**QUICK, **settings})
        return cluster

    def copy(self, data: Path, port: int | None = None) -> PostgresCluster:
        """A cluster on a copy of this (stopped) one's files, on another port."""
        shutil.copytree(self.data, data, symlinks=True)
        give(data)
        return PostgresCluster(data, port)

    def configure(self, **settings: str) -> None:
        """Append `settings` to postgresql.conf (a later line wins)."""
        with (self.data / "postgresql.conf").open("a") as conf:
            for name, value in settings.items():
                conf.write(f"{name} = {conf_value(value)}\n")

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def ctl(self, *args: str) -> str:
        return run_as_server(
            POSTGRES_BIN / "pg_ctl", "-D", self.data, "-w", "-t", str(DEADLINE), *args
        )

    def start(self) -> PostgresCluster:
        """Start it; returns once it takes connections (read-only ones for a standby)."""
        if not self.sockets.exists():
            self.sockets.mkdir()
            give(self.sockets)
        self.ctl(
            "-o", f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.sockets}",
            "-l", str(self.data.parent / f"{self.data.name}.log"), "start",
        )  # fmt: skip
        return self

    def stop(self, mode: str = "fast") -> None:
        """`fast`: a clean shutdown; `immediate`: a crash, for the clients and the files."""
        self.ctl("-m", mode, "stop")

    def crash_and_restart(self) -> None:
        """Every server process killed (no shutdown checkpoint), then a start: the
        server runs crash recovery before it takes connections."""
        self.stop("immediate")
        self.start()

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def query(self, sql: str, params: tuple = ()) -> list[tuple]:
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=DEADLINE) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def wait_until(self, sql: str, params: tuple = (), what: str = "") -> None:
        """Poll `sql` (one boolean) until it is true, or fail after DEADLINE seconds."""
        poll_until(lambda: bool(self.query(sql, params)[0][0]), what or sql, self.log)

    def log(self) -> str:
        path = self.data.parent / f"{self.data.name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def base_backup(self, data: Path, *options: str) -> PostgresCluster:
        """pg_basebackup of this running cluster into `data`: a cluster (not started)
        on its own port."""
        run_as_server(
            POSTGRES_BIN / "pg_basebackup", "-D", data, "-d", self.dsn,
            "--checkpoint=fast", "--wal-method=stream", "--no-sync", *options,
        )  # fmt: skip
        return PostgresCluster(data)


def poll_until(check: Callable[[], bool], what: str, log: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {DEADLINE} s: {what}\n{log()}")
        time.sleep(0.05)


def remove(directory: Path, *clusters: PostgresCluster) -> None:
    """Stop whichever of `clusters` still run (as a crash: nothing is kept), then
    remove `directory`."""
    for cluster in clusters:
        if cluster.running():
            try:
                cluster.stop("immediate")
            except RuntimeError:
                pass  # already gone: its pid file was stale
    shutil.rmtree(directory, ignore_errors=True)
