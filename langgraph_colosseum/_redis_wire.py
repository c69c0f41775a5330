"""One connection of the asyncio hot cache, driven directly: commands packed
here, replies parsed by hiredis, answered in the order they were sent.

redis-py's asyncio client spent about 190 µs of CPU on an EVALSHA on the
benchmark machine (its pool checkout, with connection metrics recorded at
each checkout and release, a stream reader, a timeout per read), against
about 63 µs for the same command written to the socket and parsed by
hiredis here, one after another in both cases. The hot cache sends five or
six scripts per graph invoke, so that difference decided whether turning
Redis on made a saver cheaper or dearer.

The connection is one of the client's own: taken from its pool and never
given back while it works, so redis-py has connected it as configured
(address, TLS, AUTH, SELECT, client name) and closes it with the client
(``aclose()``). Nothing of the hot cache needs a second connection of that
pool meanwhile (a pool of one connection serves it): its scripts are loaded
over the wire, and a broken wire is given back before a fresh one is taken.
Only the loop of requests and replies is done here, on its
transport, in the protocol (RESP2 or RESP3) redis-py agreed with the server:
hiredis parses both, and the scripts' replies (arrays, integers, strings) read
the same in either. What this cannot drive (no hiredis, a connection without
a stream) stays with redis-py; so does a Cluster (see `AsyncRedisCache`).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections import deque
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import (
    ConnectionError,
    DataError,
    InvalidResponse,
    NoScriptError,
    ResponseError,
    TimeoutError,
)

try:
    import hiredis
except ImportError:  # redis[hiredis] not installed: redis-py drives every command
    hiredis = None


_NO_REPLY = object()  # what hiredis gives while no whole reply is buffered
# An out-of-band RESP3 message (an invalidation, a maintenance notice), which
# answers no command (hiredis >= 3.0 tells it apart).
_PUSH = getattr(hiredis, "PushNotification", _NO_REPLY)


def pack_commands(commands: Sequence[Sequence[Any]], encoding: str, errors: str) -> bytes:
    """Commands as RESP, their arguments encoded as redis-py's encoder does
    (DataError for a type it refuses, before anything is sent)."""
    parts: list[bytes] = []
    for command in commands:
        parts.append(b"*%d\r\n" % len(command))
        for arg in command:
            if isinstance(arg, bytes):
                data = arg
            elif isinstance(arg, str):
                data = arg.encode(encoding, errors)
            elif isinstance(arg, bool):
                raise DataError(f"Invalid input of type: 'bool'. Convert {arg!r} to a str first.")
            elif isinstance(arg, (int, float)):
                data = repr(arg).encode()
            elif isinstance(arg, (bytearray, memoryview)):
                data = bytes(arg)
            else:
                raise DataError(
                    f"Invalid input of type: {type(arg).__name__!r}. "
                    "Convert to a bytes, string, int or float first."
                )
            parts += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(parts)


def _reader() -> Any:
    return hiredis.Reader(
        protocolError=InvalidResponse, replyError=ResponseError, notEnoughData=_NO_REPLY
    )


def _no_script(reply: Any) -> Any:
    """redis-py's NoScriptError for a NOSCRIPT error reply (the caller loads the scripts)."""
    if isinstance(reply, ResponseError) and str(reply).startswith("NOSCRIPT"):
        return NoScriptError(str(reply))
    return reply


class Wire(asyncio.Protocol):
    """Batches of commands on one connection; each batch's replies, in order.

    A batch is written whole (a pipeline: one write, one round trip). Replies
    come back in the order the commands went out, so each batch waits for the
    next `count` replies after those of the batches before it. Anything that
    breaks the stream (the connection lost, a reply late past the socket
    timeout, a reply that does not parse) fails every batch still waiting and
    closes the connection: once a reply is missed, no later reply can be
    matched to its command.
    """

    def __init__(self, pool: Any, conn: Any, transport: asyncio.Transport, previous: Any) -> None:
        self.pool = pool
        self.conn = conn
        self.transport = transport
        self.previous = previous  # redis-py's protocol, told when the connection goes
        self.timeout: float | None = conn.socket_timeout
        self.encoding: str = conn.encoder.encoding
        self.errors: str = conn.encoder.encoding_errors
        self.reader = _reader()
        # per batch: its future, how many replies it waits for, those received
        self.waiting: deque[tuple[asyncio.Future[list[Any]], int, list[Any]]] = deque()
        self.closed = False

    async def execute(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The replies to `commands` (an error reply as its exception, not raised)."""
        if self.closed:
            raise ConnectionError("the hot cache's Redis connection is closed")
        data = pack_commands(commands, self.encoding, self.errors)  # DataError: nothing sent
        loop = asyncio.get_running_loop()
        done: asyncio.Future[list[Any]] = loop.create_future()
        self.waiting.append((done, len(commands), []))
        self.transport.write(data)
        if self.timeout is None:
            return await done
        timer = loop.call_later(self.timeout, self._expire, done)
        try:
            return await done
        finally:
            timer.cancel()

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while self.waiting:
            try:
                reply = self.reader.gets()
            except Exception as exc:  # a reply that does not parse: the stream is lost
                self._abort(InvalidResponse(f"a reply from Redis did not parse: {exc}"))
                return
            if reply is _NO_REPLY:  # (not False: a RESP3 reply may be false)
                return
            if type(reply) is _PUSH:  # RESP3 pushes answer no command
                continue
            done, count, replies = self.waiting[0]
            replies.append(_no_script(reply))
            if len(replies) == count:
                self.waiting.popleft()
                if not done.done():  # its caller may have been cancelled
                    done.set_result(replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionError(f"the hot cache's Redis connection was lost ({exc})"))
        # redis-py's disconnect() waits for its own protocol to see the close.
        self.previous.connection_lost(exc)

    def _expire(self, done: asyncio.Future[list[Any]]) -> None:
        if not done.done():
            self._abort(TimeoutError(f"Redis did not answer within {self.timeout} s"))

    def _abort(self, exc: Exception) -> None:
        self._fail(exc)
        self.transport.abort()

    def _fail(self, exc: Exception) -> None:
        self.closed = True
        while self.waiting:
            done, _, _ = self.waiting.popleft()
            if not done.done():
                done.set_exception(exc)

    async def release(self) -> None:
        """Give the (closed) connection back to its pool, which reconnects it when used."""
        try:
            await self.conn.disconnect()
            await self.pool.release(self.conn)
        except Exception:  # the client was closed meanwhile: nothing to give back
            pass


async def take_wire(client: Any) -> Wire | None:
    """A connection of `client`'s pool driven by a `Wire`, or None when this
    client's connections are not ones a Wire can drive."""
    if hiredis is None or not isinstance(client, redis.asyncio.Redis):
        return None
    pool = client.connection_pool
    conn = await pool.get_connection()
    writer = getattr(conn, "_writer", None)
    transport = getattr(writer, "transport", None)
    if transport is None or str(getattr(conn, "protocol", 2)) not in ("2", "3"):
        await pool.release(conn)
        return None
    wire = Wire(pool, conn, transport, transport.get_protocol())
    transport.set_protocol(wire)
    return wire


# ---------------------------------------------------------------- blocking

# Bytes read from the socket at a time (a head of 400 rows is read in a few).
_READ_CHUNK = 1 << 16


class SyncWire:
    """One connection of a blocking client, driven directly: a request's
    commands written at once, their replies read back in order by hiredis.

    redis-py's blocking client spent ~40 µs of CPU on an EVALSHA of a small
    script on an idle benchmark machine (its pool checkout: a lock, a poll of
    the socket, connection metrics at every checkout and release), against
    ~15 µs here; a graph turn sends eight. One thread at a time uses a wire
    (`RedisCache` lends them out and keeps them between requests), so the
    connection stays out of the client's pool while this process uses it.
    Anything that breaks an exchange (the connection lost, a reply late past
    the socket timeout, a reply that does not parse, an exception mid-way)
    closes the connection and gives it back to the pool, which reconnects it
    when next lent: once a reply is missed, no later one can be matched to
    its command.
    """

    def __init__(self, pool: Any, conn: Any) -> None:
        self.pool = pool
        self.conn = conn
        self.pid = os.getpid()
        self.encoding: str = conn.encoder.encoding
        self.errors: str = conn.encoder.encoding_errors
        self.buffer = bytearray(_READ_CHUNK)
        self.closed = False

    def usable(self) -> bool:
        """Open, in the process that took it (a forked child shares the parent's
        socket: it must never use it), and still connected (a client's close()
        disconnects the connections it lent too)."""
        if self.closed or self.pid != os.getpid():
            self.closed = True
            return False
        if self.conn._sock is None:
            self.close()
            return False
        return True

    def execute(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The replies to `commands` (an error reply as its exception, not raised)."""
        data = pack_commands(commands, self.encoding, self.errors)  # DataError: nothing sent
        sock = self.conn._sock
        if self.closed or sock is None:
            raise ConnectionError("the hot cache's Redis connection is closed")
        reader = _reader()
        replies: list[Any] = []
        try:
            sock.sendall(data)
            while len(replies) < len(commands):
                reply = reader.gets()
                if reply is _NO_REPLY:  # (not False: a RESP3 reply may be false)
                    received = sock.recv_into(self.buffer)
                    if not received:
                        raise ConnectionError("Redis closed the hot cache's connection")
                    reader.feed(self.buffer, 0, received)
                elif type(reply) is not _PUSH:  # RESP3 pushes answer no command
                    replies.append(_no_script(reply))
        except BaseException as exc:
            self.close()
            if isinstance(exc, socket.timeout):
                raise TimeoutError(f"Redis did not answer within {sock.gettimeout()} s") from exc
            if isinstance(exc, OSError):
                raise ConnectionError(f"the hot cache's Redis connection failed ({exc})") from exc
            raise
        return replies

    def close(self, disconnect: bool = True) -> None:
        """Give the connection back to its pool, disconnected unless told it is
        idle and sound (a disconnected one is connected again when next lent)."""
        if self.closed:
            return
        self.closed = True
        try:
            if disconnect:
                self.conn.disconnect()
            self.pool.release(self.conn)
        except Exception:  # the client was closed meanwhile: nothing to give back
            pass


def take_sync_wire(client: Any) -> SyncWire | None:
    """A connection of `client`'s pool driven by a `SyncWire`, or None when this
    client's connections are not ones a wire can drive (no hiredis, a Cluster,
    client-side caching, whose invalidations redis-py must see)."""
    if hiredis is None or not isinstance(client, redis.Redis):
        return None
    pool = client.connection_pool
    if getattr(pool, "cache", None) is not None:
        return None
    conn = pool.get_connection()
    if getattr(conn, "_sock", None) is None or str(getattr(conn, "protocol", 2)) not in ("2", "3"):
        pool.release(conn)
        return None
    return SyncWire(pool, conn)
