"""Small things a user notices (issue 13, item 9)."""

from __future__ import annotations

import threading
from typing import Any, TypedDict

import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, ValueNotStorableError
from langgraph_colosseum._core.hot import NO_THREAD_TTL_MS
from tests.conftest import redis_url


class State(TypedDict):
    x: Any


def unstorable_graph(saver: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("bad", lambda state: {"x": threading.Lock()})  # no codec or serde stores it
    builder.add_edge(START, "bad")
    return builder.compile(checkpointer=saver)


def test_a_run_that_failed_on_an_unstorable_value_leaves_the_thread_in_error(
    saver: ColosseumSaver,
) -> None:
    config = {"configurable": {"thread_id": "unstorable"}}
    graph = unstorable_graph(saver)
    with pytest.raises(ValueNotStorableError):
        graph.invoke({"x": 1}, config)
    assert saver.threads.get("unstorable").status == "error"
    (task,) = graph.get_state(config).tasks
    assert task.name == "bad" and "cannot store channel 'x'" in str(task.error)
    assert saver.threads.search(status="error")[0].thread_id == "unstorable"


async def test_the_async_saver_too(asaver: AsyncColosseumSaver) -> None:
    config = {"configurable": {"thread_id": "unstorable"}}
    with pytest.raises(ValueNotStorableError):
        await unstorable_graph(asaver).ainvoke({"x": 1}, config)
    assert (await asaver.threads.get("unstorable")).status == "error"


def redis_ttl_ms(saver: Any, thread_id: str) -> int:
    """The PTTL of the thread's hash: -2 when there is none (or no cache)."""
    if saver._store.hot is None:
        return -2
    client = redis.Redis.from_url(redis_url())
    try:
        return client.pttl(saver._store.hot.thread_key(thread_id))
    finally:
        client.close()


def test_reading_a_thread_that_does_not_exist_keeps_nothing_in_redis_for_long(
    saver: ColosseumSaver,
) -> None:
    graph = unstorable_graph(saver)
    assert graph.get_state({"configurable": {"thread_id": "no-such-thread"}}).values == {}
    assert saver.get_tuple({"configurable": {"thread_id": "no-such-thread"}}) is None
    assert redis_ttl_ms(saver, "no-such-thread") <= NO_THREAD_TTL_MS  # seconds, not the hour
    # A thread that is created keeps its hot head for the full TTL.
    saver.put(
        {"configurable": {"thread_id": "no-such-thread", "checkpoint_ns": ""}},
        empty_checkpoint(), {"source": "input", "step": -1}, {},
    )  # fmt: skip
    assert saver.get_tuple({"configurable": {"thread_id": "no-such-thread"}}) is not None
    if saver.cache is not None:
        assert redis_ttl_ms(saver, "no-such-thread") > 60_000


async def test_reading_a_thread_that_does_not_exist_async(asaver: AsyncColosseumSaver) -> None:
    assert await asaver.aget_tuple({"configurable": {"thread_id": "no-such-thread"}}) is None
    assert redis_ttl_ms(asaver, "no-such-thread") <= NO_THREAD_TTL_MS
