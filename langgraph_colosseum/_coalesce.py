"""The asyncio driver's hot requests, coalesced: one pool checkout and one round trip for all
the requests that arrive while none is being sent.

Under concurrency (conc-32: 32 threads on a pool of 10) most of the client's
CPU per request was not the statement but what surrounds it: the pool's
checkout and return, and the event loop's wait for the socket. A request whose
statements are all hot (`Query.prepare` True: put, put_writes, get_tuple, list
pages) is queued here instead; a task takes a connection from the pool and,
once it has one, sends every request queued by then in one pipeline, each
request followed by its own Sync: its own implicit transaction, as on a
connection of its own (_driver._IMPLICIT_TRANSACTION). The writes among them
that allow it commit as one transaction instead (_driver._SHARED_COMMIT),
which sends each again alone if any of them fails. Requests that arrive while
a connection is awaited join that batch; those that arrive once it is being
sent start the next one.

What each request sees is unchanged: its rows, or the exception its own
statements raised; the driver's retries (conflicts, a lost connection) work on
it alone, as before. No request's outcome is another's
(tests/integration/test_coalesce.py):

* parameters psycopg refuses (no dumper, an encoding error) fail their own
  request before any I/O, and it is left out of the round trip
  (_driver._lean_begin);
* a request whose reply was read up to its Sync (so its commit) has its
  outcome even when the connection is lost after it; only the requests whose
  replies were not read get the lost connection, and the driver's retry
  (_driver._lean_end);
* a loader's error while reading one request's rows is that request's;
* a wait for a connection that fails (a pool timeout, a closed pool) fails the
  requests queued before it began; the ones queued during it wait for a
  connection of their own, as they would have without coalescing;
* the sending task hands every failure to its callers, so none is left for
  asyncio to report as never retrieved.

A caller cancelled after its request was sent does not stop it: the round
trip is read to the end and the connection goes back clean (the request may
have been applied, as a request cancelled after its commit always could be).
Only hot statements are coalesced: they are short, so one that waits on a lock
(a delete of its thread) holds the others up only as long as it would have
held its own connection. Writes committed together hold each other's locks
while one of them waits, for at most _driver.SHARED_LOCK_TIMEOUT: then each
is sent alone, and holds only its own (those after it in the round trip
still wait for it to finish, as any request behind a waiting one does).
"""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg_pool import AsyncConnectionPool

from langgraph_colosseum import _driver
from langgraph_colosseum._core.io import Request

logger = _driver.logger

# At most this many requests share a round trip. Postgres runs a round trip's
# requests one after another on one backend, so a batch of everything queued
# would leave the pool's other connections idle while the client waits.
MAX_BATCH = 8


class _Queued:
    __slots__ = ("conn", "future", "request", "statements")

    def __init__(self, request: Request, statements: list[Any], future: asyncio.Future) -> None:
        self.request = request
        self.statements = statements
        self.future = future
        self.conn: Any = None  # the connection it was sent on, for the driver's retries


class Coalescer:
    """Queues hot requests of one pool and sends them in shared round trips."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool
        self.queue: list[_Queued] = []
        self.collecting = False  # a task is getting a connection for the queue
        self.tasks: set[asyncio.Task] = set()  # held, so a running one is not collected

    def submit(self, request: Request, statements: list[Any]) -> _Queued:
        queued = _Queued(request, statements, asyncio.get_running_loop().create_future())
        self.queue.append(queued)
        if not self.collecting:
            self._collect()
        return queued

    def _collect(self) -> None:
        self.collecting = True
        task = asyncio.ensure_future(self._send())
        self.tasks.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        # _send gives every failure to its requests' callers; one it could not
        # (none is known) is logged here rather than left for asyncio to find
        # unretrieved when the task is collected.
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.error("colosseum: a coalesced round trip failed", exc_info=exc)

    def _take(self, count: int = MAX_BATCH) -> list[_Queued]:
        batch, self.queue = self.queue[:count], self.queue[count:]
        self.collecting = False
        if self.queue:  # the rest go on another connection, at the same time
            self._collect()
        return [queued for queued in batch if not queued.future.done()]  # not cancelled

    async def _send(self) -> None:
        # The requests queued before the wait for a connection began; the ones
        # queued during it joined late.
        waited = len(self.queue)
        try:
            conn = await self.pool.getconn()
        except Exception as exc:
            # Only the requests that waited for the whole of it share its
            # failure (a pool timeout, a closed pool); the late ones wait for a
            # connection of their own, as they would have without coalescing.
            _fail(self._take(waited), exc)
            return
        except BaseException:  # cancelled: the loop is closing
            _fail(self._take(len(self.queue)), asyncio.CancelledError())
            raise
        batch = self._take()
        try:
            for queued in batch:
                queued.conn = conn
            if not _driver._lean_ready(conn):  # a pool whose `configure` turned autocommit off
                for queued in batch:
                    try:
                        _settle(queued, await _driver._aperform(conn, queued.request), None)
                    except Exception as exc:
                        _settle(queued, None, exc)
            elif batch:
                outcomes = await _driver.alean_batch(
                    conn, [(queued.request, queued.statements) for queued in batch]
                )
                for queued, outcome in zip(batch, outcomes):
                    _settle(queued, outcome.value, outcome.error)
        except BaseException as exc:  # cancelled, or a failure no request was given
            _fail(batch, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            await self.pool.putconn(conn)


def _settle(queued: _Queued, value: Any, error: BaseException | None) -> None:
    if queued.future.done():  # its caller was cancelled
        return
    if error is not None:
        queued.future.set_exception(error)
    else:
        queued.future.set_result(value)


def _fail(batch: list[_Queued], exc: BaseException) -> None:
    for queued in batch:
        if queued.future.done():
            continue
        if isinstance(exc, Exception):
            queued.future.set_exception(exc)
        else:  # the sending task itself was cancelled (the loop is closing)
            queued.future.cancel()
