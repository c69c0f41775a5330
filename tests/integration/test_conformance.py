"""The public langgraph-checkpoint-conformance suite, every capability.

The suite drives the async API. It runs against AsyncColosseumSaver, and
against the blocking ColosseumSaver through `BlockingAsAsync`, whose async
methods call the blocking ones directly, so the sync driver answers all 81.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from tests.conftest import CACHE_MODES, cache_options, truncate

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


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("driver", ["async", "sync"])
async def test_conformance_all_capabilities(pg_url: str, driver: str, cache: str) -> None:
    @checkpointer_test(name=f"ColosseumSaver-{driver}-{cache}")
    async def factory():
        truncate(pg_url)
        options = cache_options(cache)
        if driver == "async":
            async with AsyncColosseumSaver.from_conn_string(pg_url, pool_size=4, **options) as s:
                yield s
        else:
            with ColosseumSaver.from_conn_string(pg_url, pool_size=4, **options) as saver:
                yield BlockingAsAsync(saver)

    report = await validate(factory, progress=ProgressCallbacks.verbose())
    failures = {name: result.failures for name, result in report.results.items() if result.failures}
    assert not failures, failures
    detected = {name for name, result in report.results.items() if result.detected}
    assert detected == ALL_CAPABILITIES
    passed = sum(result.tests_passed for result in report.results.values())
    assert passed == 81, f"{passed} conformance tests passed, expected all 81"
