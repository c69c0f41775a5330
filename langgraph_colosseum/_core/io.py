"""The I/O an operation asks for, and the two runners' shared contract.

An operation is a generator (the model is psycopg's own ``generators.py``): it
yields a request, the driver performs it and sends back the result. A driver
takes a connection for each request and gives it back right after, so an
operation that pauses (a `list` being iterated slowly) holds no connection.

* `Query`: one statement; the result is its rows (or None when `fetch` is off).
* `Transaction`: statements that commit together, pipelined in one round trip;
  the result is the list of per-statement results.
* `Emit`: not I/O; an item for the caller of a streaming operation (`list`).
* `Ahead` / `Collect`: a request sent while a streaming operation goes on
  emitting, and the wait for its result (the next page of a `list`).
* `Sleep`: a pause (polling another worker); the runners below do it themselves.
* `RunTool`: run a tool call; only IdempotentToolNode's drivers take it.
* `CacheCall` / `CacheDrop`: the Redis hot head (see hot.py); never raise.
* `Listen` / `AwaitNotify`: an operation run while listening for another
  process's NOTIFY, and its waits for one (multitask.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Mapping
from typing import Any, NamedTuple, Protocol, TypeVar

T = TypeVar("T")


class Query(NamedTuple):
    sql: str
    params: Mapping[str, Any] | None = None
    fetch: bool = True
    # None: psycopg's policy (prepared after a few runs, per the connection's
    # prepare_threshold). True: prepared at once (unless prepare_threshold is
    # None); for hot statements whose generic plan is a key lookup. False:
    # planned afresh each time (see _driver.py).
    prepare: bool | None = False


class Transaction(NamedTuple):
    queries: tuple[Query, ...]
    # A write whose first statement takes the shared write locks of one thread
    # (and its run, sql.WRITE_LOCK), and whose other statements lock only rows
    # of that thread: (thread_id, run_id). A driver may commit such writes, sent
    # in one round trip, as one transaction (_driver._SHARED_COMMIT).
    shared_write_lock: tuple[str, str | None] | None = None


class Emit(NamedTuple):
    item: Any


class Ahead(NamedTuple):
    """Send `request` and go on: the result is a handle, and `Collect(handle)`
    is the request's result (or raises its error). A streaming operation asks
    for its next page this way before it emits this one, so that Postgres
    reads the next page while the caller takes this one's items (a long `list`
    otherwise waits for every page in turn: see store.list). The driver reads
    the reply as it comes, apart from the caller (a thread, a task) and gives
    the connection back: a caller that pauses or stops holds none, and keeps
    no statement open on the server. Only for a request that may be sent
    twice (a read): one sent ahead and lost is sent again when collected. A
    driver that cannot send it ahead performs it when it is collected."""

    request: Query | Transaction


class Collect(NamedTuple):
    """The result of the `Ahead` request whose handle this is (`handle.request`)."""

    handle: Any


class Sleep(NamedTuple):
    """Wait this long (polling another worker's progress); the result is None."""

    seconds: float


class RunTool(NamedTuple):
    """Run the tool call now, renewing `key`'s lease while it runs.

    The result is ``(True, output)`` or ``(False, exception)``; a tool that
    outlives `timeout` seconds gives ``(False, Overran(...))``, which no tool
    raises itself (unlike TimeoutError).
    """

    key: str
    owner: str
    lease_seconds: float
    timeout: float | None


class CacheCall(NamedTuple):
    """Run the hot-head script `script` (see hot.py) on the Redis hash `key`.

    The result is the script's reply, or `CACHE_UNAVAILABLE` when Redis could
    not be used: a cache request never raises.
    """

    script: str
    key: str
    args: tuple[Any, ...]


class CacheDrop(NamedTuple):
    """Delete these Redis keys; the result is None, or `CACHE_UNAVAILABLE` when
    Redis could not be used (the keys may still be there)."""

    keys: tuple[str, ...]


class Listen(NamedTuple):
    """Run the operation `op` while listening on `channel`; the result is `op`'s.

    The driver opens one connection of its own, LISTENs on it before `op`
    begins, and keeps it until `op` ends, however it ends: every `AwaitNotify`
    of `op` waits on it. `op`'s other requests go as usual (through the pool).
    A notification sent after `op` asked a question and before its next wait
    is kept on that connection, so the wait after "not yet" never misses it.
    Where LISTEN cannot be used (pgbouncer=True, a saver on one connection,
    or the connection could not be opened: logged as a warning) each wait
    polls: it sleeps `POLL_SECONDS`, or its `seconds` if shorter.
    """

    channel: str
    op: Generator[Any, Any, Any]


class AwaitNotify(NamedTuple):
    """Inside a `Listen`: wait until a NOTIFY on its channel has come since the
    last wait (or since listening began), or `seconds` have passed. The result
    is None: the operation asks its question again either way."""

    seconds: float


POLL_SECONDS = 0.5


class _Unavailable:
    def __repr__(self) -> str:
        return "CACHE_UNAVAILABLE"


CACHE_UNAVAILABLE: Any = _Unavailable()


class Overran(Exception):
    """A tool call ran past its timeout (the outcome of a `RunTool`)."""


Request = (
    Query
    | Transaction
    | Emit
    | Ahead
    | Collect
    | Sleep
    | RunTool
    | CacheCall
    | CacheDrop
    | Listen
    | AwaitNotify
)
Operation = Generator[Request, Any, T]


# Telemetry (langgraph_colosseum/telemetry.py) sets this when OpenTelemetry is
# installed and not turned off. Every operation of every layer (checkpointer,
# Store, tool ledger, threads) passes through the four runners below, so this is
# the one place they are observed: `observer(op, perform, asynchronous)` returns
# the pair to run instead. When it is None an operation pays one global lookup.
class Observer(Protocol):
    def __call__(
        self, op: Operation[Any], perform: Callable[[Request], Any], asynchronous: bool
    ) -> tuple[Operation[Any], Callable[[Request], Any]]: ...

    def retried(self, reason: str) -> None:
        """A driver is sending the current request again (`reason`: why)."""

    def breaker_opened(self) -> None:
        """A Redis circuit breaker opened."""


observer: Observer | None = None


# The runners. `perform` does one request's I/O; these only feed results back.
# A runner that meets `Emit` in a non-streaming operation is a bug in the caller.


def single(request: Request) -> Operation[Any]:
    """The operation that is just `request`."""
    return (yield request)


def run(op: Operation[T], perform: Callable[[Request], Any]) -> T:
    if observer is not None:
        op, perform = observer(op, perform, False)
    return drive(op, perform)


def drive(op: Operation[T], perform: Callable[[Request], Any]) -> T:
    """`run` unobserved: for an operation run inside a request of another
    (`Listen`), whose span and duration already hold it."""
    result = None
    while True:
        try:
            request = op.send(result)
        except StopIteration as stop:
            return stop.value
        if isinstance(request, Emit):
            raise TypeError("a streaming operation must be driven by stream()")
        if isinstance(request, Sleep):
            time.sleep(request.seconds)
            result = None
        else:
            result = perform(request)


def stream(op: Operation[Any], perform: Callable[[Request], Any]) -> Iterator[Any]:
    if observer is not None:
        op, perform = observer(op, perform, False)
    result = None
    while True:
        try:
            request = op.send(result)
        except StopIteration:
            return
        if isinstance(request, Emit):
            result = None
            yield request.item
        else:
            result = perform(request)


async def arun(op: Operation[T], perform: Callable[[Request], Awaitable[Any]]) -> T:
    if observer is not None:
        op, perform = observer(op, perform, True)
    return await adrive(op, perform)


async def adrive(op: Operation[T], perform: Callable[[Request], Awaitable[Any]]) -> T:
    """`arun` unobserved (see `drive`)."""
    result = None
    while True:
        try:
            request = op.send(result)
        except StopIteration as stop:
            return stop.value
        if isinstance(request, Emit):
            raise TypeError("a streaming operation must be driven by astream()")
        if isinstance(request, Sleep):
            await asyncio.sleep(request.seconds)
            result = None
        else:
            result = await perform(request)


async def astream(
    op: Operation[Any], perform: Callable[[Request], Awaitable[Any]]
) -> AsyncIterator[Any]:
    if observer is not None:
        op, perform = observer(op, perform, True)
    result = None
    while True:
        try:
            request = op.send(result)
        except StopIteration:
            return
        if isinstance(request, Emit):
            result = None
            yield request.item
        else:
            result = await perform(request)
