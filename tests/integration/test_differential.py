"""Differential tests: real LangGraph graphs on our savers vs InMemorySaver.

Every scenario runs twice: once on `InMemorySaver` (the reference) and once
on a Colosseum saver, through the same graph API (sync: invoke / stream /
get_state / get_state_history / update_state on `ColosseumSaver`; async:
ainvoke / astream / aget_state / aget_state_history / aupdate_state on
`AsyncColosseumSaver`). After every step the scenario records the latest state
and the whole history, normalised (see `graphs.Normaliser`: checkpoint ids
become their index in the history list, created_at its rank, task and
interrupt ids a label by first appearance), plus how often each node ran. The
two recordings must be identical, step by step.

Each scenario runs on Postgres alone, with the Redis hot head, and through
PgBouncer in transaction mode (`CONNECTION_MODES`).
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import StateGraph
from langgraph.types import Command

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._core.store import SHORT_VERSION_DIGITS
from tests.conftest import CONNECTION_MODES, RECREATED, saver_fixtures
from tests.integration.graphs import (
    AsyncDriver,
    Normaliser,
    SyncDriver,
    approval_graph,
    chat_graph,
    delta_graph,
    fanout_graph,
    flaky_graph,
    linear_graph,
    normalise_history,
    order_graph,
    run_sync,
    subgraph_graph,
    tuples_as_lists,
    two_question_approval_graph,
)

# Also on a database dropped and created again just before each scenario,
# behind the same Redis, not flushed: the "redis" run of the same scenario (the
# mode before) left its heads there under the same thread ids, and the new
# database must not see them.
saver, asaver = saver_fixtures([*CONNECTION_MODES, RECREATED])

_NO_RESULT = object()


@dataclasses.dataclass
class Run:
    """One scenario on one saver: the driver, the node counters, the recording."""

    drv: SyncDriver
    counts: Counter
    thread_id: str
    steps: list[tuple[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def config(self) -> dict:
        return {"configurable": {"thread_id": self.thread_id}}

    def record(self, label: str, value: Any) -> None:
        self.steps.append((label, value))

    async def observe(
        self,
        label: str,
        result: Any = _NO_RESULT,
        *,
        config: dict | None = None,
        subgraphs: bool = False,
    ) -> None:
        """Record get_state (of `config`, else the latest) and the full history."""
        history = await self.drv.history(self.config)
        state = await self.drv.get_state(config or self.config, subgraphs=subgraphs)
        norm = Normaliser(history)
        entry: dict[str, Any] = {}
        if result is not _NO_RESULT:
            entry["result"] = norm(result)
        entry["state"] = norm(state)
        entry["history"] = [norm(s) for s in history]
        entry["counts"] = dict(sorted(self.counts.items()))
        self.record(label, entry)


Scenario = Callable[[Run], Awaitable[None]]
Builder = Callable[[Counter], StateGraph]


async def run_scenario(
    scenario: Scenario, builder: Builder, saver: Any, driver: type[SyncDriver], thread_id: str
) -> Run:
    counts: Counter = Counter()
    graph = builder(counts).compile(checkpointer=saver)
    run = Run(driver(graph, saver), counts, thread_id)
    await scenario(run)
    run.record("final execution counts", dict(sorted(counts.items())))
    return run


def assert_same_steps(reference: Run, subject: Run) -> None:
    """Identical recordings, compared by `repr`: `==` would miss dict key order,
    on which a prompt built by iterating a dict depends."""
    assert [label for label, _ in subject.steps] == [label for label, _ in reference.steps]
    for (label, expected), (_, actual) in zip(reference.steps, subject.steps):
        assert actual == expected, f"step {label!r} differs from InMemorySaver"
        assert repr(actual) == repr(expected), f"step {label!r}: dict key order differs"


def differential_sync(
    scenario: Scenario, builder: Builder, saver: ColosseumSaver, thread_id: str
) -> tuple[Run, Run]:
    reference = run_sync(run_scenario(scenario, builder, InMemorySaver(), SyncDriver, thread_id))
    subject = run_sync(run_scenario(scenario, builder, saver, SyncDriver, thread_id))
    assert_same_steps(reference, subject)
    return reference, subject


async def differential_async(
    scenario: Scenario, builder: Builder, saver: AsyncColosseumSaver, thread_id: str
) -> tuple[Run, Run]:
    reference = await run_scenario(scenario, builder, InMemorySaver(), AsyncDriver, thread_id)
    subject = await run_scenario(scenario, builder, saver, AsyncDriver, thread_id)
    assert_same_steps(reference, subject)
    return reference, subject


# ============================================================ 1. multi-turn chat


async def chat_scenario(run: Run) -> None:
    for turn in range(3):
        message = {"messages": [HumanMessage(content=f"question {turn}", id=f"human-{turn}")]}
        if turn == 1:
            result = await run.drv.stream(message, run.config, stream_mode=["updates", "values"])
        else:
            result = await run.drv.invoke(message, run.config)
        await run.observe(f"turn {turn}", result)
    # add_messages replaces a message by id; written as if by the agent.
    edited = {"messages": [AIMessage(content="edited answer", id="ai-4")]}
    updated = await run.drv.update_state(run.config, edited, as_node="agent")
    await run.observe("after update_state", updated)
    result = await run.drv.invoke(
        {"messages": [HumanMessage(content="question 3", id="human-3")]}, run.config
    )
    await run.observe("turn 3", result)
    assert run.counts == Counter(agent=8, tools=4)


def test_chat_sync(saver: ColosseumSaver) -> None:
    differential_sync(chat_scenario, chat_graph, saver, "diff-chat-sync")


async def test_chat_async(asaver: AsyncColosseumSaver) -> None:
    await differential_async(chat_scenario, chat_graph, asaver, "diff-chat-async")


# ============================================================ 2. interrupt / resume


async def approval_scenario(run: Run) -> None:
    result = await run.drv.invoke({"request": "refund #7", "decisions": []}, run.config)
    await run.observe("at the interrupt", result)
    state = await run.drv.get_state(run.config)
    assert state.next == ("approve",) and len(state.tasks[0].interrupts) == 1
    result = await run.drv.invoke(Command(resume="yes"), run.config)
    await run.observe("after resume", result)
    assert result["outcome"] == "prepared refund #7 / yes"
    assert run.counts == Counter(prepare=1, approve=2, act=1)


def test_interrupt_resume_sync(saver: ColosseumSaver) -> None:
    differential_sync(approval_scenario, approval_graph, saver, "diff-interrupt-sync")


async def test_interrupt_resume_async(asaver: AsyncColosseumSaver) -> None:
    await differential_async(approval_scenario, approval_graph, asaver, "diff-interrupt-async")


async def two_interrupts_scenario(run: Run) -> None:
    """One node calling interrupt() twice: resumed once per question.

    On the last resume LangGraph saves the task's `__resume__` write twice in
    one put_writes call (the answers so far, then all answers); the last one
    wins, as in InMemorySaver.
    """
    result = await run.drv.invoke({"request": "refund #8", "decisions": []}, run.config)
    await run.observe("first interrupt", result)
    result = await run.drv.invoke(Command(resume="yes"), run.config)
    await run.observe("second interrupt", result)
    state = await run.drv.get_state(run.config)
    assert state.next == ("approve",) and state.interrupts[0].value["so_far"] == ["yes"]
    result = await run.drv.invoke(Command(resume=42), run.config)
    await run.observe("after final resume", result)
    assert result["outcome"] == "prepared refund #8 / yes / 42"
    assert run.counts == Counter(prepare=1, approve=3, act=1)


def test_two_interrupts_in_one_node_sync(saver: ColosseumSaver) -> None:
    differential_sync(
        two_interrupts_scenario, two_question_approval_graph, saver, "diff-two-interrupts-sync"
    )


async def test_two_interrupts_in_one_node_async(asaver: AsyncColosseumSaver) -> None:
    await differential_async(
        two_interrupts_scenario, two_question_approval_graph, asaver, "diff-two-interrupts-async"
    )


# ============================================================ 3. subgraph


async def observe_subgraph(run: Run, label: str) -> None:
    """The subgraph's own state and history, through its checkpoint_ns."""
    state = await run.drv.get_state(run.config, subgraphs=True)
    sub_states = [t.state for t in state.tasks if t.state is not None]
    assert len(sub_states) == 1, state.tasks
    sub_config = sub_states[0].config
    assert sub_config["configurable"]["checkpoint_ns"].startswith("research:")
    history = await run.drv.history(sub_config)
    sub_state = await run.drv.get_state(sub_config)
    norm = Normaliser(history)
    run.record(label, {"state": norm(sub_state), "history": [norm(s) for s in history]})


async def subgraph_scenario(run: Run) -> None:
    result = await run.drv.invoke({"topic": "owls", "notes": []}, run.config)
    await run.observe("interrupted in subgraph", result, subgraphs=True)
    await run.observe("interrupted in subgraph, subgraphs=False", subgraphs=False)
    await observe_subgraph(run, "subgraph's own state and history")
    result = await run.drv.invoke(Command(resume="approved"), run.config)
    await run.observe("after resume", result, subgraphs=True)
    assert run.counts == Counter(intro=1, gather=1, review=2, wrap=1)


def test_subgraph_sync(saver: ColosseumSaver) -> None:
    differential_sync(subgraph_scenario, subgraph_graph, saver, "diff-subgraph-sync")


async def test_subgraph_async(asaver: AsyncColosseumSaver) -> None:
    await differential_async(subgraph_scenario, subgraph_graph, asaver, "diff-subgraph-async")


# ============================================================ 4. Send fan-out


async def fanout_scenario(run: Run) -> None:
    result = await run.drv.invoke({"items": [3, 1, 4, 1, 5], "results": []}, run.config)
    await run.observe("first map-reduce", result)
    result = await run.drv.invoke({"items": [2, 7]}, run.config)
    await run.observe("second map-reduce on the same thread", result)
    assert result["total"] == 9 + 1 + 16 + 1 + 25 + 4 + 49
    assert run.counts == Counter(work=7, reduce=2)


def test_send_fanout_sync(saver: ColosseumSaver) -> None:
    differential_sync(fanout_scenario, fanout_graph, saver, "diff-fanout-sync")


async def test_send_fanout_async(asaver: AsyncColosseumSaver) -> None:
    await differential_async(fanout_scenario, fanout_graph, asaver, "diff-fanout-async")


# ============================================================ 5. failing parallel branch


async def flaky_scenario(run: Run) -> None:
    try:
        await run.drv.invoke({"log": []}, run.config)
    except ValueError as exc:
        run.record("first invoke raised", repr(exc))
    else:
        raise AssertionError("the flaky branch should have failed the first invoke")
    await run.observe("error state")
    state = await run.drv.get_state(run.config)
    errors = {t.name: t.error for t in state.tasks}
    # LangGraph saves a task's error as its repr.
    assert "flaky branch failed" in str(errors["flaky"]) and errors["steady"] is None
    result = await run.drv.invoke(None, run.config)
    await run.observe("resumed with None", result)
    # The branch that succeeded was not run again: its pending write was kept.
    assert run.counts == Counter(steady=1, flaky=2, join=1)


def test_failed_branch_resume_sync(saver: ColosseumSaver) -> None:
    differential_sync(flaky_scenario, flaky_graph, saver, "diff-flaky-sync")


async def test_failed_branch_resume_async(asaver: AsyncColosseumSaver) -> None:
    await differential_async(flaky_scenario, flaky_graph, asaver, "diff-flaky-async")


# ============================================================ 6. time travel


async def time_travel_scenario(run: Run) -> None:
    result = await run.drv.invoke({"value": 0, "trail": []}, run.config)
    await run.observe("first run", result)

    history = await run.drv.history(run.config)
    before_b = next(s for s in history if s.next == ("b",))
    await run.observe("get_state of a past checkpoint", config=before_b.config)
    result = await run.drv.invoke(None, before_b.config)
    await run.observe("after replay from before b", result)

    history = await run.drv.history(run.config)
    # The first run's checkpoint before c: the oldest of the two.
    before_c = [s for s in history if s.next == ("c",)][-1]
    fork = await run.drv.update_state(before_c.config, {"value": 1000}, as_node="b")
    await run.observe("after update_state on a past checkpoint", fork)
    await run.observe("get_state of the fork", config=fork)
    result = await run.drv.invoke(None, fork)
    await run.observe("after invoking the fork", result)
    assert result["value"] == 1100
    assert run.counts == Counter(a=1, b=2, c=3)


def test_time_travel_sync(saver: ColosseumSaver) -> None:
    differential_sync(time_travel_scenario, linear_graph, saver, "diff-travel-sync")


async def test_time_travel_async(asaver: AsyncColosseumSaver) -> None:
    await differential_async(time_travel_scenario, linear_graph, asaver, "diff-travel-async")


# ============================================================ 7. DeltaChannel, prune, copy_thread

DELTA_TURNS = 10


def delta_message(turn: int) -> dict:
    return {"messages": [HumanMessage(content=f"m{turn}", id=f"human-{turn}")]}


async def delta_scenario(run: Run) -> None:
    for turn in range(DELTA_TURNS):
        result = await run.drv.invoke(delta_message(turn), run.config)
        await run.observe(f"turn {turn}", result)
    state = await run.drv.get_state(run.config)
    assert len(state.values["messages"]) == 2 * DELTA_TURNS


def comparable(snapshot: Any) -> dict:
    """A snapshot's raw content (ids included), as a dict."""
    return {
        "values": snapshot.values,
        "next": snapshot.next,
        "config": snapshot.config,
        "metadata": snapshot.metadata,
        "created_at": snapshot.created_at,
        "tasks": snapshot.tasks,
        "interrupts": snapshot.interrupts,
    }


def as_thread(snapshots: list, source: str, target: str) -> list:
    """Normalised history with the copy's thread id read as the source's."""
    return [_rename_thread(s, source, target) for s in normalise_history(snapshots)]


def _rename_thread(obj: Any, source: str, target: str) -> Any:
    if isinstance(obj, dict):
        return {k: _rename_thread(v, source, target) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_rename_thread(v, source, target) for v in obj)
    return source if obj == target else obj


async def delta_maintenance(reference: Run, subject: Run) -> None:
    """copy_thread and prune on our saver keep the DeltaChannel state intact."""
    drv, thread = subject.drv, subject.thread_id
    config = subject.config
    before = await drv.get_state(config)
    history_before = await drv.history(config)

    # copy_thread of the whole chain: same state, same history.
    copy = f"{thread}-copy"
    copy_config = {"configurable": {"thread_id": copy}}
    await drv.copy_thread(thread, copy)
    copied = await drv.get_state(copy_config)
    assert copied.values == before.values
    assert as_thread(await drv.history(copy_config), thread, copy) == normalise_history(
        history_before
    )

    # prune keep_latest: the latest state is still the same.
    await drv.prune([thread])
    after = await drv.get_state(config)
    assert comparable(after) == comparable(before)
    assert len(await drv.history(config)) == 1
    assert (await drv.get_state(copy_config)).values == before.values

    # copy_thread of a pruned thread: the frozen history comes along.
    copy2 = f"{thread}-pruned-copy"
    copy2_config = {"configurable": {"thread_id": copy2}}
    await drv.copy_thread(thread, copy2)
    assert comparable(await drv.get_state(copy2_config))["values"] == before.values

    # One more turn: pruned thread, its copy and the unpruned reference agree.
    expected = await reference.drv.invoke(delta_message(DELTA_TURNS), reference.config)
    expected_state = await reference.drv.get_state(reference.config)
    for cfg in (config, copy2_config, copy_config):
        result = await drv.invoke(delta_message(DELTA_TURNS), cfg)
        assert result == expected, cfg
        state = await drv.get_state(cfg)
        assert state.values == expected_state.values, cfg
        assert tuples_as_lists(state.metadata) == tuples_as_lists(expected_state.metadata), cfg
        assert state.next == expected_state.next, cfg


def test_delta_channel_sync(saver: ColosseumSaver) -> None:
    reference, subject = differential_sync(delta_scenario, delta_graph, saver, "diff-delta-sync")
    run_sync(delta_maintenance(reference, subject))


async def test_delta_channel_async(asaver: AsyncColosseumSaver) -> None:
    reference, subject = await differential_async(
        delta_scenario, delta_graph, asaver, "diff-delta-async"
    )
    await delta_maintenance(reference, subject)


# ============================================================ 8. dict key order


async def order_scenario(run: Run) -> None:
    """Dicts whose insertion order jsonb would change, everywhere a value goes."""
    config = {**run.config, "metadata": {"requester": "ann", "team": "ops", "a": 1}}
    first = {"brief": {"topic": "refunds", "id": 7}, "log": [{"zz": 0, "b": 1, "a": 2}]}
    result = await run.drv.invoke(first, config)
    await run.observe("at the interrupt", result)
    state = await run.drv.get_state(run.config)
    assert list(state.interrupts[0].value) == ["question", "plan"]
    assert list(state.values["brief"]) == ["topic", "id", "question", "plan", "ctx"]
    resume = Command(resume={"ok": True, "because": "policy", "a": 0})
    result = await run.drv.invoke(resume, config)
    await run.observe("after resume", result)
    updated = await run.drv.update_state(
        run.config, {"brief": {"zz": 1, "b": 2}, "log": [{"note": "by hand", "n": 1}]}, "act"
    )
    await run.observe("after update_state", updated)
    result = await run.drv.invoke({"brief": {"question": "again?"}, "log": []}, config)
    await run.observe("second run", result)
    assert run.counts == Counter(plan=2, ask=3, act=1)


def test_dict_key_order_sync(saver: ColosseumSaver) -> None:
    differential_sync(order_scenario, order_graph, saver, "diff-order-sync")


async def test_dict_key_order_async(asaver: AsyncColosseumSaver) -> None:
    await differential_async(order_scenario, order_graph, asaver, "diff-order-async")


# ============================================================ 9. a thread's version form


def _short_next_version(current: Any, compact: bool = False) -> str:
    """next_version of a process that writes the short form for every version
    (a release whose compact forms are on, simulated with fixed tails)."""
    number = 0 if current is None else int(str(current).split(".")[0])
    return f"{number + 1:012}.{number + 1:016x}"


def test_a_thread_with_short_versions_continues_alike(
    saver: ColosseumSaver, monkeypatch: Any
) -> None:
    """A DeltaChannel thread begun with short versions (by a later release,
    simulated) goes on with them under this release, as when that release is
    rolled back or runs beside this one; state and history match
    InMemorySaver's throughout, and a new thread gets the long form."""
    import langgraph_colosseum._base as base

    ours = delta_graph(Counter()).compile(checkpointer=saver)
    memory = delta_graph(Counter()).compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "diff-version-form"}}
    this_release = base.next_version
    for turn in range(8):
        monkeypatch.setattr(base, "next_version", _short_next_version if turn < 4 else this_release)
        assert repr(ours.invoke(delta_message(turn), config)) == repr(
            memory.invoke(delta_message(turn), config)
        )
        versions = saver.get_tuple(config).checkpoint["channel_versions"].values()
        assert {len(v.split(".")[0]) for v in versions} == {12}, turn
    assert repr(ours.get_state(config).values) == repr(memory.get_state(config).values)
    assert repr(normalise_history(list(ours.get_state_history(config)))) == repr(
        normalise_history(list(memory.get_state_history(config)))
    )
    fresh = {"configurable": {"thread_id": "diff-version-form-new"}}
    ours.invoke(delta_message(0), fresh)
    versions = saver.get_tuple(fresh).checkpoint["channel_versions"].values()
    assert {len(v.split(".")[0]) for v in versions} == {32}


# ============================================================ 10. compact stored forms

COMPACT_SCENARIOS = [
    (chat_scenario, chat_graph, "chat"),
    (approval_scenario, approval_graph, "approval"),
    (subgraph_scenario, subgraph_graph, "subgraph"),
    (fanout_scenario, fanout_graph, "fanout"),
    (time_travel_scenario, linear_graph, "travel"),
    (delta_scenario, delta_graph, "delta"),
]


def channel_orders(saver: Any, thread_id: str) -> list[tuple[str, list, list]]:
    """Each checkpoint's namespace (its nodes: task ids differ between savers),
    channels and values, in their order, newest first within each namespace."""
    found = [
        (
            "|".join(
                part.split(":")[0] for part in t.config["configurable"]["checkpoint_ns"].split("|")
            ),
            list(t.checkpoint["channel_versions"]),
            list(t.checkpoint["channel_values"]),
        )
        for t in saver.list({"configurable": {"thread_id": thread_id}})
    ]
    return sorted(found, key=lambda row: row[0])  # stable: each namespace's order kept


def stored_forms(saver: ColosseumSaver, thread_prefix: str) -> tuple[set[int], list[Any]]:
    """The widths of every version the threads' checkpoints name, and every
    channel order they record."""
    with saver.conn.connection() as conn:
        rows = conn.execute(
            "SELECT checkpoint FROM colosseum_checkpoints WHERE thread_id LIKE %s",
            [thread_prefix + "%"],
        ).fetchall()
    widths = {
        len(version.split(".")[0])
        for (document,) in rows
        for version in document["channel_versions"].values()
    }
    orders = [document["$channel_order"] for (document,) in rows if "$channel_order" in document]
    return widths, orders


@pytest.mark.parametrize(
    "scenario, builder, name", COMPACT_SCENARIOS, ids=lambda v: v if isinstance(v, str) else ""
)
def test_compact_forms_read_and_resume_alike(
    saver: ColosseumSaver, scenario: Scenario, builder: Builder, name: str
) -> None:
    """With compact_forms=True a thread's versions are short and its channel
    order is recorded by place; state, history, tasks and interrupts match
    InMemorySaver's step by step, by repr. The same thread then goes on under a
    saver without the option (the option turned off again), still alike and
    still short."""
    thread_id = f"diff-compact-{name}"
    saver._store.compact_forms = True
    try:
        reference, subject = differential_sync(scenario, builder, saver, thread_id)
    finally:
        saver._store.compact_forms = False
    widths, orders = stored_forms(saver, thread_id)
    assert widths == {SHORT_VERSION_DIGITS}
    assert orders and all(re.fullmatch(r"\d+(,\d+)*", order) for order in orders), orders
    # The checkpoints themselves, in every namespace: channels and values in
    # InMemorySaver's order (the graph API does not show channel_versions).
    assert channel_orders(saver, thread_id) == channel_orders(reference.drv.saver, thread_id)
    turn = {"messages": [HumanMessage(content="once more", id="human-more")]}
    if name in ("chat", "delta"):
        expected = run_sync(reference.drv.invoke(turn, reference.config))
        got = run_sync(subject.drv.invoke(turn, subject.config))
        assert repr(got) == repr(expected)
        assert repr(normalise_history(run_sync(subject.drv.history(subject.config)))) == repr(
            normalise_history(run_sync(reference.drv.history(reference.config)))
        )
        assert stored_forms(saver, thread_id)[0] == {SHORT_VERSION_DIGITS}


def test_without_compact_forms_versions_stay_long(saver: ColosseumSaver) -> None:
    differential_sync(delta_scenario, delta_graph, saver, "diff-long-forms")
    widths, orders = stored_forms(saver, "diff-long-forms")
    assert widths == {32}
    assert orders and all(type(order) is list for order in orders)
