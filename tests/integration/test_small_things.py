"""Small things a user notices (issue 13, item 9)."""

from __future__ import annotations

import threading
from typing import Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, ValueNotStorableError


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
