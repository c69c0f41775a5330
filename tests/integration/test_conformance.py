"""The public langgraph-checkpoint-conformance suite, every capability."""

from __future__ import annotations

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from langgraph_colosseum import AsyncColosseumSaver
from tests.conftest import truncate

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


async def test_conformance_all_capabilities(pg_url: str) -> None:
    @checkpointer_test(name="AsyncColosseumSaver")
    async def factory():
        truncate(pg_url)
        async with AsyncColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver:
            yield saver

    report = await validate(factory, progress=ProgressCallbacks.verbose())
    failures = {name: result.failures for name, result in report.results.items() if result.failures}
    assert not failures, failures
    detected = {name for name, result in report.results.items() if result.detected}
    assert detected == ALL_CAPABILITIES
    passed = sum(result.tests_passed for result in report.results.values())
    assert passed == 81, f"{passed} conformance tests passed, expected all 81"
