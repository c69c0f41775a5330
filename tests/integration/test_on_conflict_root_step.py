"""`on_conflict="raise"`: a run that reads the thread while another run's
root step is under way.

Run A sends new input to a StateGraph (START -> reply): LangGraph puts its
input checkpoint (source "input": the input waits in the `__start__`
channel, its task pending), runs that task at the root, puts the checkpoint
after it (the input now in `messages`, `reply` pending), runs `reply`, puts
the last. Each of A's root checkpoints, once stored, is the thread's latest,
with a pending task and none of its writes: exactly what a run stopped at a
static breakpoint leaves, so nothing refuses a run B that reads it then
(root tasks are not held: README, "Tasks run at the root itself"). B sends
its input from there and runs to its end; then A's next write is refused
(the head moved past it) and A's caller gets ThreadConflictError, while what
A stored stays in the thread, as B's parent.

Forced here (the stops of test_on_conflict_subgraphs, Points), sync and
async, durability "sync" and "async", with and without Redis, in two orders:

* B reads A's first step (the checkpoint after `__start__`): B's state holds
  A's input, once, and B's answer is computed on it; A's reply is nowhere;
* B reads A's input checkpoint: B's new input discards A's pending task (as
  LangGraph does with any pending task when new input comes), so A's input
  is in the thread's history only, not in its state.

Either way A's caller must not take the refusal for "nothing happened":
`exc.kept_checkpoint_id` names the newest root checkpoint A stored (a run
refused before it stored any gets None: assert_one_winner). The reference
is InMemorySaver with the same sequence made by hand: A's input stopped
before the task B found pending (interrupt_before), then B's run; B's state
and history must equal it by `repr`.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from tests.integration import test_on_conflict_subgraphs as subgraphs
from tests.integration.test_on_conflict_subgraphs import (
    KINDS,
    Points,
    Race,
    _alone,
    _close,
    _invoke,
    _listed,
    _observe,
    _postgres_mentions,
    _redis_mentions,
    _wait_ended,
    run_race,
)

mode = subgraphs.mode  # the fixture: Postgres alone, and with the Redis hot head


def _reply_graph(saver: Any) -> Any:
    """START -> reply -> END: reply answers the newest message.

    Every message has an explicit id: LangGraph gives one to a message
    without it in place, while the saver may still be storing the write that
    holds it, so whether a stored write has it is a matter of timing (with
    InMemorySaver too)."""

    def reply(state: MessagesState) -> dict:
        content = _reply_to(state["messages"][-1].content)
        return {"messages": [AIMessage(content, id=content)]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def _reply_to(content: str) -> str:
    return f"reply to {content}"


def _input(marker: str) -> dict:
    return {"messages": [HumanMessage(marker, id=marker)]}


async def _prepare(graph: Any, config: dict, kind: str) -> None:
    """A thread with history: A's input continues a head of its own."""
    await _invoke(graph, _input("hello"), config, kind)


def _b_reads_the_first_step(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """A's input checkpoint, its `__start__` output and the checkpoint after
    it land; B reads the thread then and runs to its end; then A's reply
    output (to that checkpoint) and its last checkpoint go on."""
    assert a.wait("put:root") == "stored"
    assert a.wait("writes:root") == "stored"
    assert a.wait("put:root#2") == "stored"
    b.release("read:root")
    _wait_ended(ended["B"])
    a.release("writes:root#2")
    assert a.wait("writes:root#2") == "refused"
    a.release("put:root#3")
    assert a.wait("put:root#3") == "refused"


def _b_reads_the_input_checkpoint(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """A's input checkpoint lands; B reads the thread then and runs to its
    end; then A's `__start__` output (to that checkpoint) and the checkpoint
    after it go on."""
    assert a.wait("put:root") == "stored"
    b.release("read:root")
    _wait_ended(ended["B"])
    a.release("writes:root")
    assert a.wait("writes:root") == "refused"
    a.release("writes:root#2")  # A's reply output, with durability="async"
    a.release("put:root#2")
    assert a.wait("put:root#2") == "refused"


# order -> (the script, A's stops, the task B finds pending, whether B's state holds A's input)
ORDERS = {
    # A's writes after its input are held while B runs (with durability="sync"
    # A sends its next put before its task's output write is decided)
    "first-step": (_b_reads_the_first_step, ("writes:root#2", "put:root#3"), "reply", True),
    # with durability="async", A's reply runs meanwhile: its output is held too
    "input-checkpoint": (_b_reads_the_input_checkpoint,
                         ("writes:root", "writes:root#2", "put:root#2"), "__start__", False),
}  # fmt: skip


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("durability", ["sync", "async"])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_run_reading_mid_root_step_keeps_what_the_other_stored_and_says_so(
    mode: str, pg_url: str, kind: str, durability: str, order: str
) -> None:
    script, a_stops, pending, a_input_in_state = ORDERS[order]
    race = Race(pg_url, mode, kind, _reply_graph)
    held = {"A": a_stops, "B": ("read:root",)}
    outcomes, opened = await run_race(race, _prepare, _input, held, script, durability)
    contexts, savers = opened
    a_input, b_input = race.markers["A"], race.markers["B"]
    a_output = _reply_to(a_input)
    try:
        assert outcomes == {"A": "ThreadConflictError", "B": "success"}, outcomes
        reader = savers[0]
        # nothing of A's reply: Redis first (a read below refills it from Postgres)
        assert _redis_mentions(race, reader, a_output) == []
        assert set(_postgres_mentions(race, a_output).values()) == {0}
        listed = await _listed(race, reader)
        assert a_output not in repr(listed)
        graph = race.build(reader)
        seen = await _observe(graph, race.config, kind)
        assert a_output not in repr(seen)
        messages = [m.content for m in (await _values(graph, race.config, kind))["messages"]]
        assert messages == [
            "hello", _reply_to("hello"), *([a_input] if a_input_in_state else []),
            b_input, _reply_to(b_input),
        ]  # fmt: skip

        async def a_stopped(graph: Any, config: dict, kind: str) -> None:
            await _prepare(graph, config, kind)
            await _invoke(graph, _input(a_input), config, kind, interrupt_before=[pending])

        expected = await _alone(a_stopped, _input(b_input), kind, race.thread_id, race.build)
        assert seen == expected
        assert repr(seen) == repr(expected)

        # B went on from A's newest root checkpoint, which A's caller is told of
        roots = [t for t in listed if not t.config["configurable"]["checkpoint_ns"]]
        (b_input_checkpoint,) = [t for t in roots if b_input in repr(t.checkpoint)
                                 and t.metadata["source"] == "input"]  # fmt: skip
        kept = b_input_checkpoint.parent_config["configurable"]["checkpoint_id"]
        (a_newest,) = [t for t in roots if t.config["configurable"]["checkpoint_id"] == kept]
        assert a_input in repr(a_newest.checkpoint) and b_input not in repr(a_newest.checkpoint)
        refused = race.refusals["A"]
        assert (refused.operation, refused.continued_from) == ("put_writes", kept)
        assert refused.head == roots[0].config["configurable"]["checkpoint_id"]
        assert refused.kept_checkpoint_id == kept
        assert f"up to checkpoint {kept!r} stay in the thread" in str(refused)
        if race.mode == "redis":
            assert _redis_mentions(race, reader, a_output) == []
    finally:
        await _close(race, contexts)


async def _values(graph: Any, config: dict, kind: str) -> dict:
    if kind == "sync":
        return graph.get_state(config).values
    return (await graph.aget_state(config)).values
