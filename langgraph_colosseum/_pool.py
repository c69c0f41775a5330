"""The connection pool `from_conn_string` opens: its settings and their defaults.

One place decides how a pool is built, for both drivers: `PoolSettings` holds
what the user may set (README, Configuration), `pool_arguments` turns it into
psycopg_pool's arguments. The defaults aim at a long-lived worker talking to
a database over a network that drops idle TCP connections (cloud NAT gateways
and load balancers forget a flow after about 350 s of silence):

* TCP keepalives every 30 s, so an idle connection stays known to middleboxes
  and a dead peer is noticed in about a minute rather than hours;
* idle connections above `min_size` close after `max_idle` (300 s), before
  such a timeout bites, and every connection is replaced after `max_lifetime`;
* a connection that sat idle in the pool longer than `check_idle_after`
  (5 s) is tested with an empty query before it is lent, so one killed while
  idle (a server restart, `pg_terminate_backend`, a failover) is replaced
  without the operation ever seeing it. A busy worker, whose connections come
  back within milliseconds, pays no extra round trip.

PgBouncer in transaction mode (`pgbouncer=True`) hands each transaction to
whichever server connection is free, so nothing may outlive a transaction:
no prepared statements (`prepare_threshold=None`, which PgBouncer before 1.21
cannot follow) and no session settings (the `options` startup parameter,
which PgBouncer refuses or drops). Colosseum itself keeps no session state:
its only advisory lock is transaction-level, and leases are rows (see
tests/unit/test_transaction_mode.py, which keeps it so).
"""

from __future__ import annotations

import dataclasses
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_colosseum.errors import InvalidConfigError

DEFAULT_POOL_SIZE = 10
# psycopg's own default: a statement run this often on a connection is prepared.
DEFAULT_PREPARE_THRESHOLD = 5
_UNSET: Any = object()
# Each connection's libpq settings where neither the URL nor the caller sets them.
CONNECTION_DEFAULTS: Mapping[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "application_name": "langgraph-colosseum",
}


@dataclasses.dataclass(frozen=True)
class PoolSettings:
    """What `from_conn_string` accepts about its pool and connections.

    Example:
        >>> with ColosseumSaver.from_conn_string(
        ...     dsn, max_size=20, max_idle=60, application_name="agent-worker"
        ... ) as saver:
        ...     ...
    """

    # The pool (psycopg_pool).
    min_size: int = 1
    max_size: int = DEFAULT_POOL_SIZE
    timeout: float = 30.0  # waiting for a free connection, then PoolTimeout
    max_waiting: int = 0  # requests allowed to queue for a connection; 0: no limit
    max_lifetime: float = 3600.0
    max_idle: float = 300.0
    reconnect_timeout: float = 300.0
    check_idle_after: float | None = 5.0  # None: never test; 0: test on every loan
    # Each connection (libpq / psycopg). Set in the URL, these win over the
    # defaults; given here, they win over the URL.
    prepare_threshold: int | None = _UNSET
    keepalives_idle: int | None = None  # None: the URL's, else CONNECTION_DEFAULTS
    keepalives_interval: int | None = None
    keepalives_count: int | None = None
    application_name: str | None = None
    # PgBouncer (or another pooler) in transaction mode in front of Postgres.
    pgbouncer: bool = False

    @classmethod
    def take(
        cls, options: dict[str, Any], *, pool_size: int | None = None, pgbouncer: bool = False
    ) -> PoolSettings:
        """Remove this class's fields from `options` (the rest go to the saver)."""
        names = {field.name for field in dataclasses.fields(cls)}
        given = {name: options.pop(name) for name in list(options) if name in names}
        if pool_size is not None:
            given.setdefault("max_size", pool_size)
        settings = cls(**given, pgbouncer=pgbouncer)
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.pgbouncer and self.prepare_threshold not in (None, _UNSET):
            raise InvalidConfigError(
                f"pgbouncer=True cannot be combined with prepare_threshold="
                f"{self.prepare_threshold!r}: in transaction mode a statement prepared on "
                "one server connection is unknown on the next. Leave prepare_threshold "
                "out (pgbouncer=True sets None)."
            )
        if not 0 <= self.min_size <= self.max_size or self.max_size < 1:
            raise InvalidConfigError(
                f"min_size={self.min_size}, max_size={self.max_size}: need "
                "0 <= min_size <= max_size and max_size >= 1"
            )

    @property
    def effective_prepare_threshold(self) -> int | None:
        if self.prepare_threshold is not _UNSET:
            return self.prepare_threshold
        return None if self.pgbouncer else DEFAULT_PREPARE_THRESHOLD

    def connection_kwargs(self, conn_string: str) -> dict[str, Any]:
        """psycopg.connect's keyword arguments for every connection of the pool."""
        given = conninfo.conninfo_to_dict(conn_string)
        if self.pgbouncer and given.get("options"):
            raise InvalidConfigError(
                "pgbouncer=True: the connection string sets `options` (session settings "
                "such as statement_timeout), which PgBouncer in transaction mode refuses "
                "or loses between transactions. Set them on the role or database instead "
                "(ALTER ROLE ... SET ...), which every server connection then has."
            )
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "prepare_threshold": self.effective_prepare_threshold,
        }
        for name, default in CONNECTION_DEFAULTS.items():
            value = getattr(self, name, None)
            if value is not None:
                kwargs[name] = value  # given here: wins over the URL
            elif name not in given:
                kwargs[name] = default  # the URL is silent
        return kwargs


# When each pooled connection was last given back (see `_stamp`).
_returned_at: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def _stamp(conn: Any) -> None:
    _returned_at[conn] = time.monotonic()


def _idle_for(conn: Any) -> float:
    returned = _returned_at.get(conn)
    return float("inf") if returned is None else time.monotonic() - returned


def _check(after: float) -> Callable[[psycopg.Connection], None]:
    def check(conn: psycopg.Connection) -> None:
        if _idle_for(conn) > after:
            ConnectionPool.check_connection(conn)

    return check


def _acheck(after: float) -> Callable[[psycopg.AsyncConnection], Any]:
    async def check(conn: psycopg.AsyncConnection) -> None:
        if _idle_for(conn) > after:
            await AsyncConnectionPool.check_connection(conn)

    return check


async def _astamp(conn: Any) -> None:
    _stamp(conn)


# The pools of `from_conn_string`: each connection is stamped as it comes back
# (see `_check`). Not with psycopg_pool's `reset` callback: a pool with one
# hands every returned connection to a worker thread (an asyncio task), so the
# next request of a sequential caller waited for that thread to be scheduled
# (direct puts on a loaded 2-core machine: client CPU 1.05 -> 0.98 ms per put,
# and up to half the wall time).
#
# They also lend the connection given back last (LIFO), where psycopg_pool
# lends the one idle longest (FIFO). Postgres plans a prepared statement afresh
# on its first five runs on each connection before it may settle on a generic
# plan, so a sequential caller rotating through the four connections a looping
# graph's background puts had opened paid that warm-up four times: at the head
# of a 20,000-step thread, 19 of 20 `get_tuple` calls were planned (0.3 ms of
# planning against 0.06 ms of execution each). Lent last-in first-out, it keeps
# to one connection and the others stay idle, so `max_idle` closes them
# (`_shrink_pool` still closes the one idle longest, at the other end).
class StampingConnectionPool(ConnectionPool):
    def putconn(self, conn: Any) -> None:
        _stamp(conn)
        super().putconn(conn)

    def _get_ready_connection(self, timeout: float | None) -> Any:
        _last_in_first(self._pool)  # called under the pool's lock
        return super()._get_ready_connection(timeout)


class AsyncStampingConnectionPool(AsyncConnectionPool):
    async def putconn(self, conn: Any) -> None:
        _stamp(conn)
        await super().putconn(conn)

    async def _get_ready_connection(self, timeout: float | None) -> Any:
        _last_in_first(self._pool)  # called under the pool's lock
        return await super()._get_ready_connection(timeout)


def _last_in_first(idle: Any) -> None:
    """Move the connection given back last to where psycopg_pool lends from
    (its `_pool` deque's left end), the others keeping their order."""
    if len(idle) > 1:
        idle.rotate(1)


# _LOAN. The drivers borrow a connection per request with `getconn()` and give
# it back with `putconn()` in a `finally`, not with `pool.connection()`: that
# context manager also enters the connection itself (`with conn:`), whose exit
# runs `commit()` (the connection's lock, a wait on a generator) for nothing,
# since every request ends its own transaction (_driver.py), and it is a
# generator-based context manager on top. Giving back is the same either way:
# `putconn` rolls back a connection left in a transaction and replaces a
# broken one.


def pool_arguments(
    conn_string: str,
    settings: PoolSettings,
    *,
    asynchronous: bool,
    connect: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments of `ConnectionPool` / `AsyncConnectionPool` (minus `open`).

    `connect`: connection arguments decided elsewhere (the connect timeout).
    """
    arguments: dict[str, Any] = {
        "conninfo": conn_string,
        "kwargs": {**(connect or {}), **settings.connection_kwargs(conn_string)},
        "min_size": settings.min_size,
        "max_size": settings.max_size,
        "timeout": settings.timeout,
        "max_waiting": settings.max_waiting,
        "max_lifetime": settings.max_lifetime,
        "max_idle": settings.max_idle,
        "reconnect_timeout": settings.reconnect_timeout,
    }
    if settings.check_idle_after is not None:
        after = settings.check_idle_after
        arguments["check"] = _acheck(after) if asynchronous else _check(after)
        arguments["configure"] = _astamp if asynchronous else _stamp  # a new one is fresh
    return arguments


def require_transaction_mode_safe(conn: Any) -> None:
    """`pgbouncer=True` on a pool or connection the user made: it must not prepare."""
    if isinstance(conn, (ConnectionPool, AsyncConnectionPool)):
        threshold = conn.kwargs.get("prepare_threshold", DEFAULT_PREPARE_THRESHOLD)
    else:
        threshold = conn.prepare_threshold
    if threshold is not None:
        raise InvalidConfigError(
            f"pgbouncer=True, but the connection prepares statements (prepare_threshold="
            f"{threshold}): in transaction mode a statement prepared on one server "
            "connection is unknown on the next. Make the pool with "
            "kwargs={'prepare_threshold': None, 'autocommit': True}, or use "
            "from_conn_string(dsn, pgbouncer=True)."
        )
