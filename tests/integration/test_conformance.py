"""The public langgraph-checkpoint-conformance suite, every capability.

The suite drives the async API. It runs against AsyncColosseumSaver, and
against the blocking ColosseumSaver through `BlockingAsAsync`, whose async
methods call the blocking ones directly, so the sync driver answers all 81;
each on Postgres alone, with the Redis hot head, with it on a 3-master
Redis Cluster, through PgBouncer in transaction mode (alone and with the head), and
over TLS with passwords to both servers (`tls`: verify-full and SCRAM to a
private Postgres, rediss:// and an ACL user to a private Redis); and on a saver
built with `on_conflict="raise"`, alone and with the head. The suite calls
put / put_writes directly, outside any LangGraph run, on parents of its
choosing: no run read a latest checkpoint, so nothing is checked (as for a
run that named its checkpoint), and each must still pass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
import redis.asyncio
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from tests.conftest import CACHE_MODES, CACHE_PREFIX, flush_cache, redis_url, truncate

AUTOCOMMIT = {"autocommit": True}
# What from_conn_string(..., pgbouncer=True) gives each connection of its pool.
TRANSACTION_MODE = {"autocommit": True, "prepare_threshold": None}
ALL_CAPABILITIES = {
    "put",
    "put_writes",
    "get_tuple",
    "list",
    "delete_thread",
    "delete_for_runs",
    "copy_thread",
    "prune",
}


class BlockingAsAsync(BaseCheckpointSaver):
    """Presents a blocking saver's methods under the async names the suite calls."""

    def __init__(self, inner: ColosseumSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    async def aget_tuple(self, config):
        return self.inner.get_tuple(config)

    async def alist(self, config, *, filter=None, before=None, limit=None) -> AsyncIterator[Any]:
        for item in self.inner.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config, checkpoint, metadata, new_versions):
        return self.inner.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config, writes, task_id, task_path=""):
        return self.inner.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id):
        return self.inner.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids):
        return self.inner.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id, target_thread_id):
        return self.inner.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids, *, strategy="keep_latest"):
        return self.inner.prune(thread_ids, strategy=strategy)

    def get_next_version(self, current, channel):
        return self.inner.get_next_version(current, channel)


@pytest.mark.parametrize(
    "cache",
    [*CACHE_MODES, "cluster", "pgbouncer", "pgbouncer-redis", "tls", "on_conflict",
     "redis-on_conflict", "inline_values", "redis-inline_values"],
)  # fmt: skip
@pytest.mark.parametrize("driver", ["async", "sync"])
async def test_conformance_all_capabilities(
    pg_url: str, driver: str, cache: str, request: pytest.FixtureRequest
) -> None:
    cluster = request.getfixturevalue("cluster") if cache == "cluster" else None
    # "pgbouncer": every statement through PgBouncer in transaction mode (with the
    # Redis head too: "pgbouncer-redis").
    bouncer = cache.startswith("pgbouncer")
    url = request.getfixturevalue("bouncer_url") if bouncer else pg_url
    kwargs = TRANSACTION_MODE if bouncer else AUTOCOMMIT
    tls = request.getfixturevalue("tls_servers") if cache == "tls" else None
    if tls is not None:
        url = tls.postgres.url()

    def cache_client() -> Any:
        if cache in ("postgres", "pgbouncer", "on_conflict", "inline_values"):
            return None
        if cluster is not None:
            cluster.client().flushall()
            return cluster.async_client() if driver == "async" else cluster.client()
        client_class = redis.asyncio.Redis if driver == "async" else redis.Redis
        return client_class.from_url(tls.redis.url() if tls else redis_url())

    options: dict[str, Any] = {}
    if cache.endswith("on_conflict"):
        options["on_conflict"] = "raise"
    if cache.endswith("inline_values"):
        options["inline_values"] = True

    @checkpointer_test(name=f"ColosseumSaver-{driver}-{cache}")
    async def factory():
        truncate(url)
        if tls is not None:
            flush_cache(tls.redis.url())
        client = cache_client()
        try:
            if driver == "async":
                async with AsyncConnectionPool(url, max_size=4, kwargs=kwargs) as pool:
                    yield AsyncColosseumSaver(
                        pool, cache=client, cache_prefix=CACHE_PREFIX, pgbouncer=bouncer,
                        **options,
                    )  # fmt: skip
            else:
                with ConnectionPool(url, max_size=4, kwargs=kwargs) as pool:
                    yield BlockingAsAsync(
                        ColosseumSaver(
                            pool,
                            cache=client,
                            cache_prefix=CACHE_PREFIX,
                            pgbouncer=bouncer,
                            **options,
                        )
                    )
        finally:
            if client is not None:
                closed = client.aclose() if driver == "async" else client.close()
                if closed is not None:
                    await closed

    report = await validate(factory, progress=ProgressCallbacks.verbose())
    failures = {name: result.failures for name, result in report.results.items() if result.failures}
    assert not failures, failures
    detected = {name for name, result in report.results.items() if result.detected}
    assert detected == ALL_CAPABILITIES
    passed = sum(result.tests_passed for result in report.results.values())
    assert passed == 81, f"{passed} conformance tests passed, expected all 81"
