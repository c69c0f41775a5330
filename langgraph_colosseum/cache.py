"""Running hot-head requests on Redis, behind a circuit breaker.

Any Redis client works: `redis.Redis`, `redis.cluster.RedisCluster`, or their
asyncio twins, on plain Redis 6.2+ or Valkey, with no modules. A Redis that is
down, slow, flushed or evicting costs latency, never a run: every failure makes
the request a miss (`CACHE_UNAVAILABLE`) and opens the breaker, which skips
Redis for reads during a backoff (0.5 s doubling to 30 s) and then lets one
read probe it; writes are always tried (see `Breaker.admit`). One warning is
logged per outage.

While Redis cannot be reached, the writes it missed leave their heads behind
in it; the threads are remembered and their hashes dropped first thing on
recovery, before any other request.

Example:
    >>> saver = ColosseumSaver(pool, cache=redis.Redis.from_url("redis://localhost:6379"))
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, RedisClusterException
from redis.retry import Retry

from langgraph_colosseum._core import io
from langgraph_colosseum._core.hot import SCRIPTS as HEAD_SCRIPTS
from langgraph_colosseum._core.hot_items import ITEM_SCRIPTS
from langgraph_colosseum._core.io import CACHE_UNAVAILABLE, CacheCall, CacheDrop
from langgraph_colosseum._redact import redact
from langgraph_colosseum._redis_wire import SyncWire, Wire, take_sync_wire, take_wire
from langgraph_colosseum.errors import InvalidConfigError

logger = logging.getLogger("langgraph_colosseum")

FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
# A cache that answers slower than this is treated as down: Postgres is faster.
SOCKET_TIMEOUT = 0.5
# Threads remembered during an outage, to drop on recovery. The cap bounds this
# process's memory; past it, each thread not remembered is logged as an error.
MAX_REMEMBERED = 100_000
# Every script a cache runs: the checkpointer's heads and the Store's items.
SCRIPTS = {**HEAD_SCRIPTS, **ITEM_SCRIPTS}
# Keys deleted per DEL command (a Store batch drops one key per item it wrote).
DELETE_CHUNK = 512


# redis-py announces itself on each new connection with CLIENT SETINFO, which
# Redis ≥ 7.2 and Valkey know: a command the README's least-privilege ACL does
# not grant, so every connection would log a refusal there. The hot cache has
# no use for it. redis-py 8 spells "don't" `driver_info=None` (lib_name and
# lib_version are deprecated there); redis-py 5–7 `lib_name=None, lib_version=None`.
try:
    from redis.driver_info import DriverInfo as _DriverInfo  # noqa: F401

    _NO_CLIENT_SETINFO: dict[str, Any] = {"driver_info": None}
except ImportError:
    _NO_CLIENT_SETINFO = {"lib_name": None, "lib_version": None}


def client_options() -> dict[str, Any]:
    """Options for a Redis client in front of Postgres: fail fast, and never retry.

    redis-py's default client retries a refused connection with backoff, which
    took 3.9 s per call here; for a cache, Postgres is the faster answer, and
    the breaker decides when to try Redis again. Pass these when you make your
    own client: ``redis.Redis.from_url(url, **client_options())``.
    """
    return {
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": SOCKET_TIMEOUT,
        "retry": Retry(NoBackoff(), 0),
        **_NO_CLIENT_SETINFO,
    }


def is_cluster_node(url: str) -> bool:
    """Whether the server at `url` is a node of a Redis Cluster (INFO cluster).

    A URL names one server, and a Cluster needs a client that sends each key
    to the master owning its slot: asked once, when a client is made from a
    URL. A server that does not answer (down, or an ACL without INFO) is taken
    for a plain one: give such a Cluster's client as `cache=`.
    """
    try:
        with redis.Redis.from_url(url, **client_options()) as probe:
            return bool(probe.info("cluster").get("cluster_enabled"))
    except redis.RedisError:
        return False


def client_from_url(url: str, **options: Any) -> redis.Redis | redis.cluster.RedisCluster:
    """A blocking client for `url` (see `client_options`; `options` override
    them); a RedisCluster when `url` names a node of a Cluster (see
    `is_cluster_node`)."""
    options = {**client_options(), **options}
    with _redis_url(url):
        if is_cluster_node(url):
            return redis.cluster.RedisCluster.from_url(url, **options)
        return redis.Redis.from_url(url, **options)


def async_client_from_url(url: str) -> redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster:
    """An asyncio client for `url` (see `client_options`); a RedisCluster when
    `url` names a node of a Cluster (asked with a blocking call, once)."""
    options = client_options()
    options["retry"] = AsyncRetry(NoBackoff(), 0)
    with _redis_url(url):
        if is_cluster_node(url):
            return redis.asyncio.cluster.RedisCluster.from_url(url, **options)
        return redis.asyncio.Redis.from_url(url, **options)


@contextmanager
def _redis_url(url: str) -> Iterator[None]:
    """redis-py refuses a malformed URL with a bare ValueError (or TypeError):
    say which URL (its password as ***) and what one looks like."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        raise InvalidConfigError(
            f"{redact(url)!r} is not a Redis URL: {redact(exc)}. Expected one such as "
            "redis://host:6379/0, rediss://host:6380/0 (TLS) or unix:///path/to/socket"
        ) from None


class Breaker:
    """Closed (use Redis), open (skip it until `retry_at`), and what an outage missed."""

    def __init__(self) -> None:
        self.retry_at = 0.0
        self.backoff = 0.0
        self.missed: set[str] = set()  # thread keys whose writes Redis did not get
        self._lock = threading.Lock()
        BREAKERS.add(self)  # the telemetry's breaker gauges read them

    def admit(self, request: CacheCall | CacheDrop) -> list[str] | None:
        """The keys to delete before `request` runs (what an outage missed, then
        the request's own if it is a drop), or None to skip Redis.

        Only reads are skipped while the breaker is open. A write or a drop is
        always tried: another worker may already be reading from Redis again,
        and a head this worker could have kept current but skipped would be
        served stale to it. A write's attempt costs at most the socket timeout.
        """
        if self.backoff and not _changes_heads(request) and not self._probe():
            return None
        drops = list(request.keys) if isinstance(request, CacheDrop) else []
        return self.take_missed() + drops if self.missed else drops

    def _probe(self) -> bool:
        with self._lock:
            if time.monotonic() < self.retry_at:
                return False
            self.retry_at = time.monotonic() + self.backoff  # one probe at a time
            return True

    def failed(
        self, request: CacheCall | CacheDrop, deletions: list[str], exc: BaseException
    ) -> None:
        """Open (or keep open) the breaker; what was not deleted is deleted on recovery."""
        self.remember(request)
        with self._lock:
            self.missed.update(deletions)
            first = self.backoff == 0.0
            self.backoff = FIRST_BACKOFF if first else min(self.backoff * 2, MAX_BACKOFF)
            self.retry_at = time.monotonic() + self.backoff
        if first:
            if io.observer is not None:
                io.observer.breaker_opened()
            logger.warning(
                "Redis hot cache unavailable (%s); serving from Postgres until it is back", exc
            )

    def remember(self, request: CacheCall | CacheDrop) -> None:
        """Note threads a write or a drop could not reach (reads and refills are harmless)."""
        if not _changes_heads(request):
            return
        keys = request.keys if isinstance(request, CacheDrop) else (request.key,)
        with self._lock:
            if len(self.missed) < MAX_REMEMBERED:
                self.missed.update(keys)
                return
        logger.error(
            "over %d threads written during this Redis outage: thread %s may keep a stale "
            "head in Redis until its TTL; flush this app's keys once Redis is back",
            MAX_REMEMBERED,
            keys[0],
        )

    def recovered(self) -> None:
        if self.backoff:
            with self._lock:
                self.backoff = 0.0
            logger.info("Redis hot cache is back")

    def take_missed(self) -> list[str]:
        with self._lock:
            missed, self.missed = list(self.missed), set()
        return missed


# This process's breakers, for the breaker-state gauges (langgraph_colosseum/_otel.py).
BREAKERS: weakref.WeakSet[Breaker] = weakref.WeakSet()


def is_redis_failure(exc: BaseException) -> bool:
    """A failure of Redis itself (down, slow, refusing, erroring), which the
    breaker counts; not one of the request (a value the client cannot encode),
    which fails that request alone."""
    if isinstance(exc, redis.exceptions.DataError):
        return False  # raised by the client's encoder, before anything was sent
    return isinstance(
        exc, (redis.exceptions.RedisError, RedisClusterException, OSError, TimeoutError)
    )


def _request_failed(request: CacheCall | CacheDrop, exc: BaseException) -> None:
    logger.error(
        "a hot cache request on %s failed before reaching Redis (%r); "
        "the store reads Postgres and records the head as stale",
        request.keys[0] if isinstance(request, CacheDrop) else request.key,
        exc,
    )


def _changes_heads(request: CacheCall | CacheDrop) -> bool:
    """A write or a drop: what Redis must see for other workers' reads to stay fresh."""
    return isinstance(request, CacheDrop) or request.script in ("advance", "add_writes")


class RedisCache:
    """Performs `CacheCall` / `CacheDrop` on a blocking Redis or RedisCluster client.

    On a plain client each request (its deletions and its script, one round
    trip) goes out on a connection of the client's pool that the cache drives
    itself (`_redis_wire.SyncWire`, less than half redis-py's CPU per command)
    and keeps between requests, one per thread sending at once: at most the
    pool's `max_connections`, a thread past that waits for one to come back.
    A Cluster, or a client whose connections a wire cannot drive, is used
    through redis-py.
    """

    def __init__(self, client: Any) -> None:
        _check_binary(client)
        self.client = client
        self.scripts = {name: client.register_script(lua) for name, lua in SCRIPTS.items()}
        self.breaker = Breaker()
        self._direct = not isinstance(client, redis.cluster.RedisCluster)
        self._idle: list[SyncWire] = []  # wires between requests, the last given back on top
        self._held = 0  # wires taken from the pool and not given back to it
        self._wires = threading.Condition()
        pool = getattr(client, "connection_pool", None)
        self._max_wires = max(1, getattr(pool, "max_connections", 1) or 1)
        # How long a thread waits for a wire another thread is using (beyond
        # that, the request fails like one that found Redis too slow).
        timeout = getattr(pool, "connection_kwargs", {}).get("socket_timeout")
        self._wait = max(timeout or SOCKET_TIMEOUT, SOCKET_TIMEOUT) * 4

    def perform(self, request: CacheCall | CacheDrop) -> Any:
        deletions = self.breaker.admit(request)
        if deletions is None:
            return CACHE_UNAVAILABLE
        try:
            result = self._send(request, deletions)
        except Exception as exc:  # RedisClusterException is no RedisError: catch all
            if is_redis_failure(exc):
                self.breaker.failed(request, deletions, exc)
            else:
                _request_failed(request, exc)
            return CACHE_UNAVAILABLE
        self.breaker.recovered()
        return result

    def flush(self, pattern: str) -> int:
        """Delete every key matching `pattern` (SCAN, so Redis keeps serving); how many."""
        self._give_back_idle()  # a pool of one connection lends it to the scan
        deleted = 0
        for key in self.client.scan_iter(match=pattern, count=1000):
            deleted += self.client.delete(key)  # one key per call: Cluster-safe
        return deleted

    def _send(self, request: CacheCall | CacheDrop, deletions: list[str]) -> Any:
        """The request's result (its script's reply, None for a drop); raises its failure."""
        wire = self._take() if self._direct else None
        if wire is None:
            self._delete(deletions)
            return None if isinstance(request, CacheDrop) else self._script(request)
        try:
            commands = [
                ("DEL", *deletions[start : start + DELETE_CHUNK])
                for start in range(0, len(deletions), DELETE_CHUNK)
            ]
            if isinstance(request, CacheCall):
                sha = self.scripts[request.script].sha
                commands.append(("EVALSHA", sha, 1, request.key, *request.args))
            replies = wire.execute(commands)
            if isinstance(request, CacheCall) and isinstance(replies[-1], NoScriptError):
                # Redis restarted, or its script cache was flushed: load, send again.
                loads = [("SCRIPT", "LOAD", script.script) for script in self.scripts.values()]
                replies[-1:] = wire.execute([*loads, commands[-1]])
        finally:
            self._give(wire)
        failure = next((r for r in replies if isinstance(r, Exception)), None)
        if failure is not None:
            raise failure
        return replies[-1] if isinstance(request, CacheCall) else None

    def _take(self) -> SyncWire | None:
        """A wire for this thread's request: an idle one, else a connection
        taken from the pool (None: the client's cannot be driven directly)."""
        with self._wires:
            while True:
                while self._idle:
                    wire = self._idle.pop()
                    if wire.usable():
                        return wire
                    self._held -= 1  # closed, or the client's close() disconnected it
                if self._held < self._max_wires:
                    self._held += 1
                    break
                if not self._wires.wait(self._wait):
                    raise redis.exceptions.ConnectionError(
                        f"no connection of the Redis pool came free within {self._wait} s"
                    )
        wire = None
        try:
            wire = take_sync_wire(self.client)
        finally:
            if wire is None:
                with self._wires:
                    self._held -= 1
                    self._wires.notify()
        if wire is None:
            self._direct = False
        return wire

    def _give(self, wire: SyncWire) -> None:
        with self._wires:
            if wire.closed:
                self._held -= 1
            else:
                self._idle.append(wire)
            self._wires.notify()

    def _give_back_idle(self) -> None:
        """Every idle wire's connection back to the pool (closed: it reconnects)."""
        with self._wires:
            idle, self._idle = self._idle, []
            self._held -= len(idle)
            self._wires.notify_all()
        for wire in idle:
            wire.close(disconnect=False)

    def _script(self, call: CacheCall) -> Any:
        return self.scripts[call.script](keys=[call.key], args=call.args)

    def _delete(self, keys: list[str]) -> None:
        if isinstance(self.client, redis.cluster.RedisCluster):
            for key in keys:
                self.client.delete(key)  # one key per call: Cluster-safe
            return
        for start in range(0, len(keys), DELETE_CHUNK):
            self.client.delete(*keys[start : start + DELETE_CHUNK])


class AsyncRedisCache:
    """The same, on an asyncio Redis or RedisCluster client, auto-pipelined.

    The client's own cost per command (connection checkout, packing, the reply
    loop: about 190 µs of CPU on the benchmark machine, more than a psycopg
    statement) is its largest. Requests made in the same turn of the event
    loop, as when many threads' writes commit together, are therefore sent as
    one pipeline (not a transaction: each script is atomic on its own, and
    each request's failure is its own), and on a plain Redis client they go
    out on one connection of its pool driven directly (`_redis_wire.Wire`,
    a third of that cost). A Cluster client refuses scripts in pipelines, so
    there each request is sent on its own.
    """

    def __init__(self, client: Any) -> None:
        _check_binary(client)
        self.client = client
        self.scripts = {name: client.register_script(lua) for name, lua in SCRIPTS.items()}
        self.breaker = Breaker()
        self.pipelined = not isinstance(client, redis.asyncio.cluster.RedisCluster)
        # The requests waiting for the next turn, per event loop (a saver may be
        # used from several loops, one after another).
        self._batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Pending]] = (
            weakref.WeakKeyDictionary()
        )
        self._running: set[asyncio.Future[Any]] = set()
        self._loaded = False  # the scripts are in the server's script cache
        # The directly driven connection of each event loop; None once the
        # client's connections turned out to be ones a Wire cannot drive.
        self._wires: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Wire] = (
            weakref.WeakKeyDictionary()
        )
        self._wire_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._direct = self.pipelined

    async def perform(self, request: CacheCall | CacheDrop) -> Any:
        deletions = self.breaker.admit(request)
        if deletions is None:
            return CACHE_UNAVAILABLE
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        batch = self._batches.get(loop)
        if batch is None:
            batch = self._batches[loop] = []
            loop.call_soon(self._send_batch, loop)
        batch.append(Pending(request, deletions, done))
        return await done

    def _send_batch(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._batches.pop(loop, [])
        task = loop.create_task(self._run_batch(batch))
        self._running.add(task)  # a reference, so the task is not collected mid-flight
        task.add_done_callback(self._running.discard)

    async def _run_batch(self, batch: list[Pending]) -> None:
        results: list[Any]
        try:
            results = await self._send(batch)
            if any(isinstance(r, NoScriptError) for r in results):
                # Redis restarted, or its script cache was flushed: load, send again.
                self._loaded = False
                results = await self._send(batch)
        except Exception as exc:  # whatever went wrong, every caller gets its answer
            results = [exc] * len(batch)
        for pending, result in zip(batch, results):
            if isinstance(result, Exception):
                if is_redis_failure(result):
                    self.breaker.failed(pending.request, pending.deletions, result)
                else:
                    _request_failed(pending.request, result)
                result = CACHE_UNAVAILABLE
            else:
                self.breaker.recovered()
            if not pending.done.done():  # its caller may have been cancelled meanwhile
                pending.done.set_result(result)

    async def _send(self, batch: list[Pending]) -> list[Any]:
        """Each request's result (its script's reply, None for a drop) or exception."""
        if not self.pipelined:
            return [await self._send_one(pending) for pending in batch]
        commands: list[tuple[Any, ...]] = []
        for request, deletions, _ in batch:
            commands += (("DEL", key) for key in deletions)
            if isinstance(request, CacheCall):
                sha = self.scripts[request.script].sha
                commands.append(("EVALSHA", sha, 1, request.key, *request.args))
        wire = await self._wire() if self._direct else None
        if wire is not None:
            if self._loaded:
                return _results(batch, await wire.execute(commands))
            # The scripts go ahead of the batch on the wire itself: the Wire
            # holds its connection for good, and asking the client would take
            # a second one from the pool, which a pool of one never gives
            # (a BlockingConnectionPool waits for it forever).
            loads = [("SCRIPT", "LOAD", script.script) for script in self.scripts.values()]
            replies = await wire.execute(loads + commands)
            failure = next((r for r in replies[: len(loads)] if isinstance(r, Exception)), None)
            if failure is not None:
                raise failure
            self._loaded = True
            return _results(batch, replies[len(loads) :])
        if not self._loaded:
            for script in self.scripts.values():
                await self.client.script_load(script.script)
            self._loaded = True
        if len(batch) == 1 and isinstance(batch[0].request, CacheCall) and not batch[0].deletions:
            # Alone in its turn (most requests, unless many threads write at
            # once): a pipeline object would only add its own cost, ~40 µs of CPU.
            call = batch[0].request
            try:
                return [
                    await self.client.evalsha(
                        self.scripts[call.script].sha, 1, call.key, *call.args
                    )
                ]
            except Exception as exc:
                return [exc]
        pipe = self.client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return _results(batch, await pipe.execute(raise_on_error=False))

    async def _wire(self) -> Wire | None:
        """This loop's directly driven connection (taken anew once one broke),
        or None when the client's connections cannot be driven directly."""
        loop = asyncio.get_running_loop()
        wire = self._wires.get(loop)
        if wire is not None and not wire.closed:
            return wire
        # One batch at a time replaces the wire, the broken one given back
        # before a fresh one is taken: batches racing here would each take a
        # connection, and a pool of one has only the one.
        lock = self._wire_locks.get(loop)
        if lock is None:
            lock = self._wire_locks[loop] = asyncio.Lock()
        async with lock:
            wire = self._wires.get(loop)
            if wire is not None and not wire.closed:
                return wire  # another batch of this loop took one meanwhile
            if wire is not None:
                del self._wires[loop]
                await wire.release()
            fresh = await take_wire(self.client)
            if fresh is None:
                self._direct = False
                return None
            self._wires[loop] = fresh
            return fresh

    async def _send_one(self, pending: Pending) -> Any:
        try:
            for key in pending.deletions:
                await self.client.delete(key)  # one key per call: Cluster-safe
            if isinstance(pending.request, CacheDrop):
                return None
            call = pending.request
            return await self.scripts[call.script](keys=[call.key], args=call.args)
        except Exception as exc:
            return exc


def _results(batch: list[Pending], replies: list[Any]) -> list[Any]:
    """Each request's result from the replies to its commands (its deletions,
    then its script): the first error among them, else the script's reply
    (None for a drop)."""
    replies_ = iter(replies)
    results = []
    for request, deletions, _ in batch:
        is_call = isinstance(request, CacheCall)
        mine = [next(replies_) for _ in range(len(deletions) + is_call)]
        failure = next((r for r in mine if isinstance(r, Exception)), None)
        results.append(failure if failure is not None else mine[-1] if is_call else None)
    return results


class Pending(NamedTuple):
    request: CacheCall | CacheDrop
    deletions: list[str]
    done: asyncio.Future[Any]


def _check_binary(client: Any) -> None:
    encoder = client.get_encoder() if hasattr(client, "get_encoder") else None
    if encoder is not None and encoder.decode_responses:
        raise ValueError(
            "the hot cache stores binary values: pass a Redis client made with "
            "decode_responses=False (the default)"
        )
