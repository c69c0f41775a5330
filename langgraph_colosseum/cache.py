"""Running hot-head requests on Redis, behind a circuit breaker.

Any Redis client works: `redis.Redis`, `redis.cluster.RedisCluster`, or their
asyncio twins, on plain Redis 6.2+ or Valkey, with no modules. A Redis that is
down, slow, flushed or evicting costs latency, never a run: every failure makes
the request a miss (`CACHE_UNAVAILABLE`) and opens the breaker, which skips
Redis for a backoff (0.5 s doubling to 30 s) and then lets one request probe
it. One warning is logged per outage.

While Redis cannot be reached, the writes it missed leave their heads behind
in it; the threads are remembered and their hashes dropped first thing on
recovery, before any other request.

Example:
    >>> saver = ColosseumSaver(pool, cache=redis.Redis.from_url("redis://localhost:6379"))
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
import redis.asyncio
from redis.exceptions import RedisError

from langgraph_colosseum._core.hot import SCRIPTS
from langgraph_colosseum._core.io import CACHE_UNAVAILABLE, CacheCall, CacheDrop

logger = logging.getLogger("langgraph_colosseum")

FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
# A cache that answers slower than this is treated as down: Postgres is faster.
SOCKET_TIMEOUT = 0.5
# Threads remembered during an outage, to drop on recovery. The cap bounds this
# process's memory; reaching it is logged, as its heads may then outlive writes.
MAX_REMEMBERED = 100_000


def client_from_url(url: str) -> redis.Redis:
    """A blocking client for `url`, with timeouts short enough to fall back fast."""
    return redis.Redis.from_url(
        url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
    )


def async_client_from_url(url: str) -> redis.asyncio.Redis:
    """An asyncio client for `url`, with the same timeouts."""
    return redis.asyncio.Redis.from_url(
        url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=SOCKET_TIMEOUT
    )


class Breaker:
    """Closed (use Redis), open (skip it until `retry_at`), and what an outage missed."""

    def __init__(self) -> None:
        self.retry_at = 0.0
        self.backoff = 0.0
        self.missed: set[str] = set()  # thread keys whose writes Redis did not get
        self._lock = threading.Lock()

    def allows(self) -> bool:
        if self.backoff == 0.0:
            return True
        with self._lock:
            if time.monotonic() < self.retry_at:
                return False
            self.retry_at = time.monotonic() + self.backoff  # one probe at a time
            return True

    def failed(self, request: CacheCall | CacheDrop, exc: BaseException | None) -> None:
        self.remember(request)
        with self._lock:
            first = self.backoff == 0.0
            self.backoff = FIRST_BACKOFF if first else min(self.backoff * 2, MAX_BACKOFF)
            self.retry_at = time.monotonic() + self.backoff
        if first:
            logger.warning(
                "Redis hot cache unavailable (%s); serving from Postgres until it is back", exc
            )

    def remember(self, request: CacheCall | CacheDrop) -> None:
        """Note threads a write or a drop could not reach (reads and refills are harmless)."""
        if isinstance(request, CacheDrop):
            keys: tuple[str, ...] = request.keys
        elif request.script in ("advance", "add_writes"):
            keys = (request.key,)
        else:
            return
        with self._lock:
            if len(self.missed) < MAX_REMEMBERED:
                self.missed.update(keys)
            elif self.missed:
                logger.warning("too many threads written during a Redis outage to track")

    def recovered(self) -> None:
        if self.backoff:
            with self._lock:
                self.backoff = 0.0
            logger.warning("Redis hot cache is back")

    def take_missed(self) -> list[str]:
        with self._lock:
            missed, self.missed = list(self.missed), set()
        return missed


class RedisCache:
    """Performs `CacheCall` / `CacheDrop` on a blocking Redis or RedisCluster client."""

    def __init__(self, client: Any) -> None:
        _check_binary(client)
        self.client = client
        self.scripts = {name: client.register_script(lua) for name, lua in SCRIPTS.items()}
        self.breaker = Breaker()

    def perform(self, request: CacheCall | CacheDrop) -> Any:
        breaker = self.breaker
        if not breaker.allows():
            breaker.remember(request)
            return CACHE_UNAVAILABLE
        try:
            if breaker.missed:
                for key in breaker.take_missed():
                    self.client.delete(key)  # one key per call: Cluster-safe
            if isinstance(request, CacheDrop):
                for key in request.keys:
                    self.client.delete(key)
                result = None
            else:
                result = self.scripts[request.script](keys=[request.key], args=request.args)
        except (RedisError, OSError) as exc:
            breaker.failed(request, exc)
            return CACHE_UNAVAILABLE
        breaker.recovered()
        return result


class AsyncRedisCache:
    """The same, on an asyncio Redis or RedisCluster client."""

    def __init__(self, client: Any) -> None:
        _check_binary(client)
        self.client = client
        self.scripts = {name: client.register_script(lua) for name, lua in SCRIPTS.items()}
        self.breaker = Breaker()

    async def perform(self, request: CacheCall | CacheDrop) -> Any:
        breaker = self.breaker
        if not breaker.allows():
            breaker.remember(request)
            return CACHE_UNAVAILABLE
        try:
            if breaker.missed:
                for key in breaker.take_missed():
                    await self.client.delete(key)
            if isinstance(request, CacheDrop):
                for key in request.keys:
                    await self.client.delete(key)
                result = None
            else:
                result = await self.scripts[request.script](keys=[request.key], args=request.args)
        except (RedisError, OSError) as exc:
            breaker.failed(request, exc)
            return CACHE_UNAVAILABLE
        breaker.recovered()
        return result


def _check_binary(client: Any) -> None:
    encoder = client.get_encoder() if hasattr(client, "get_encoder") else None
    if encoder is not None and encoder.decode_responses:
        raise ValueError(
            "the hot cache stores binary values: pass a Redis client made with "
            "decode_responses=False (the default)"
        )
