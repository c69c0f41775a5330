"""`on_conflict="raise"` with subgraphs: a run that reads the thread while
another run's subgraph step is under way.

Run A resumes an interrupt() raised in a subgraph: its first write (the
resume value) claims the root checkpoint C, then its subgraph runs in a
namespace of its own. Run B reads the thread after that write, so it sees A's
claim on C. A claim alone cannot say whether A finished at C (it stopped at
an interrupt or an error: B may go on from there) or is still under way in
its subgraph (B must not: it would read A's half-done subgraph). These tests
force each order with the stops of test_on_conflict_subgraphs (Points),
sync and async, with and without Redis:

* A's subgraph under way when B writes: B is refused, A wins (was: B took
  the head over and finished with A's answer, or both were refused);
* A stopped again at an interrupt() in the subgraph, or at an error, before
  B writes: B goes on from there, as it would after A alone;
* A never says it stopped: it died mid-subgraph, or stopped at a static
  breakpoint (interrupt_before) inside the subgraph, which writes nothing at
  the root. Its hold on C lasts `on_conflict_hold` after its last write
  (measured on Postgres's clock; a test moves that write back in time rather
  than waiting), or until an update_state moves the head.
"""

from __future__ import annotations

import asyncio
import operator
import threading
from datetime import timedelta
from typing import Annotated, Any

import psycopg
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_colosseum import ColosseumSaver, ThreadConflictError
from langgraph_colosseum._core.sql import CLAIM_TASK_ID
from tests.conftest import cache_options
from tests.integration import test_on_conflict_subgraphs as subgraphs
from tests.integration.test_on_conflict_subgraphs import (
    KINDS,
    WAIT,
    Points,
    Race,
    StoppedSaver,
    _alone,
    _close,
    _observe,
    _postgres_mentions,
    _prepare_interrupted,
    _redis_mentions,
    _resume,
    _sync_graph,
    _wait_ended,
    assert_one_winner,
    run_race,
)

mode = subgraphs.mode  # the fixture: Postgres alone, and with the Redis hot head


class Outer(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]


def _stops_graph(saver: Any, *, breakpoint: bool = False) -> Any:
    """intro -> research (gather -> review: interrupt() -> approve) -> wrap.
    review raises on the answer "boom"; approve interrupts again, or (with
    `breakpoint`) is a static breakpoint of the subgraph (interrupt_before)."""

    def gather(state: Outer) -> dict:
        return {"notes": [f"gathered {state['topic']}"]}

    def review(state: Outer) -> dict:
        verdict = interrupt({"review": state["topic"]})
        if verdict == "boom":
            raise ValueError("the reviewer's answer broke the review")
        return {"notes": [f"review: {verdict}"]}

    def approve(state: Outer) -> dict:
        if breakpoint:
            return {"notes": ["approved"]}
        return {"notes": [f"approve: {interrupt({'approve': state['topic']})}"]}

    inner = StateGraph(Outer)
    inner.add_node("gather", gather)
    inner.add_node("review", review)
    inner.add_node("approve", approve)
    inner.add_edge(START, "gather")
    inner.add_edge("gather", "review")
    inner.add_edge("review", "approve")
    inner.add_edge("approve", END)
    research = inner.compile(interrupt_before=["approve"] if breakpoint else None)

    outer = StateGraph(Outer)
    outer.add_node("intro", lambda state: {"notes": [f"intro {state['topic']}"]})
    outer.add_node("research", research)
    outer.add_node("wrap", lambda state: {"notes": [f"wrapped {len(state['notes'])}"]})
    outer.add_edge(START, "intro")
    outer.add_edge("intro", "research")
    outer.add_edge("research", "wrap")
    outer.add_edge("wrap", END)
    return outer.compile(checkpointer=saver)


def _breakpoint_graph(saver: Any) -> Any:
    return _stops_graph(saver, breakpoint=True)


# ------------------------------------------------------------ A under way: B refused


def _resume_read_mid_subgraph(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """A's resume value and its subgraph's first write land; B reads the
    thread then (it sees A's claim) and writes while A's subgraph is under
    way (its next checkpoint held); then A goes on."""
    assert a.wait("writes:root") == "stored"
    assert a.wait("writes:sub") == "stored"
    b.release("read:root")
    b.wait("writes:root")
    _wait_ended(ended["B"])
    a.release("put:sub")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_run_reading_mid_subgraph_cannot_take_the_head_over(
    mode: str, pg_url: str, kind: str
) -> None:
    """Was: B took the head over (A's claim looked like a finished run's),
    read A's subgraph step and finished with A's answer; A was refused."""
    race = Race(pg_url, mode, kind)
    held = {"A": ("put:sub",), "B": ("read:root",)}
    outcomes, opened = await run_race(
        race, _prepare_interrupted, _resume, held, _resume_read_mid_subgraph, "sync"
    )
    await assert_one_winner(race, outcomes, opened, _prepare_interrupted, _resume, winner="A")


def _subgraph_write_mid_subgraph(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """As above, but B's first write to land is in the subgraph (its
    subgraph checkpoint, after A's subgraph write it read); its resume value
    is held until then."""
    assert a.wait("writes:root") == "stored"
    assert a.wait("writes:sub") == "stored"
    b.release("read:root")
    b.wait("put:sub")
    b.release("writes:root")
    _wait_ended(ended["B"])
    a.release("put:sub")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_subgraph_write_mid_subgraph_cannot_take_the_head_over(
    mode: str, pg_url: str, kind: str
) -> None:
    """Was: B's subgraph checkpoint (built on A's subgraph write) claimed the
    root head, as after a finished run, and B finished with A's answer."""
    race = Race(pg_url, mode, kind)
    held = {"A": ("put:sub",), "B": ("read:root", "writes:root")}
    outcomes, opened = await run_race(
        race, _prepare_interrupted, _resume, held, _subgraph_write_mid_subgraph, "sync"
    )
    await assert_one_winner(race, outcomes, opened, _prepare_interrupted, _resume, winner="A")


def _takeover_after_subgraph_read(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """A's resume value lands; B reads the thread (A's claim) and the
    subgraph (its own resume value and subgraph writes held); A's subgraph
    runs to its last checkpoint; then B's resume value, B's subgraph writes,
    and last A's write of the subgraph's result at the root and its next
    root checkpoint."""
    assert a.wait("writes:root") == "stored"
    b.release("read:root")
    b.wait("read:sub")
    a.release("read:sub")
    assert a.wait("writes:sub") == "stored"
    assert a.wait("put:sub") == "stored"
    b.release("writes:root")
    b.wait("writes:root")
    b.release("writes:sub")
    b.release("put:sub")
    _wait_ended(ended["B"])
    a.release("writes:root#2")
    a.release("put:root")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_takeover_mid_subgraph_no_longer_refuses_both(
    mode: str, pg_url: str, kind: str
) -> None:
    """Was: B's resume value took the head over, B's subgraph write was
    refused (A's subgraph had moved on) and A's result at the root was
    refused (B's claim): both refused."""
    race = Race(pg_url, mode, kind)
    held = {
        "A": ("read:sub", "writes:root#2", "put:root"),
        "B": ("read:root", "writes:root", "writes:sub", "put:sub"),
    }
    outcomes, opened = await run_race(
        race, _prepare_interrupted, _resume, held, _takeover_after_subgraph_read, "sync"
    )
    await assert_one_winner(race, outcomes, opened, _prepare_interrupted, _resume, winner="A")


def _two_subgraphs(saver: Any) -> Any:
    """START -> a, b (two subgraphs at once: gather -> draft each) -> END."""

    def inner(name: str) -> Any:
        graph = StateGraph(Outer)
        graph.add_node("gather", lambda state: {"notes": [f"{name} gathered {state['topic']}"]})
        graph.add_node("draft", lambda state: {"notes": [f"{name} drafted"]})
        graph.add_edge(START, "gather")
        graph.add_edge("gather", "draft")
        graph.add_edge("draft", END)
        return graph.compile()

    def node(name: str) -> Any:
        subgraph = inner(name)  # invoked in the node: its checkpoints go under "<name>:<task id>"
        return lambda state: {
            "notes": subgraph.invoke({"topic": state["topic"], "notes": []})["notes"]
        }

    outer = StateGraph(Outer)
    outer.add_node("a", node("a"))
    outer.add_node("b", node("b"))
    outer.add_edge(START, "a")
    outer.add_edge(START, "b")
    outer.add_edge("a", END)
    outer.add_edge("b", END)
    return outer.compile(checkpointer=saver)


async def _prepare_two(graph: Any, config: dict, kind: str) -> None:
    await subgraphs._invoke(graph, {"topic": "owls", "notes": []}, config, kind)


def _one_of_two_subgraphs_done(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """A's subgraph b stores its first checkpoint and waits; A's subgraph a
    runs to its end and its result lands at the root; then B reads the
    thread (A's claim, b still held) and sends its input; then A goes on."""
    assert a.wait("put:sub-b") == "stored"
    assert a.wait("writes:root#2") == "stored"
    b.release("read:root")
    _wait_ended(ended["B"])
    a.release("put:sub-b#2")


def test_a_task_held_stays_held_when_another_subgraph_of_the_step_ends(
    mode: str, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two subgraph tasks of one step hold the root checkpoint together: the
    end of one releases only its own."""
    monkeypatch.setattr(subgraphs, "POINT_NODES", True)
    race = Race(pg_url, mode, "sync", _two_subgraphs)
    held = {"A": ("put:sub-b#2",), "B": ("read:root",)}

    async def both() -> None:
        outcomes, opened = await run_race(
            race, _prepare_two, subgraphs._new_input, held, _one_of_two_subgraphs_done, "sync"
        )
        await assert_one_winner(
            race, outcomes, opened, _prepare_two, subgraphs._new_input, winner="A"
        )

    asyncio.run(both())


# ------------------------------------------------------------ A stopped: B goes on


def _read_mid_run_write_after(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """B reads the thread after A's resume value (A's claim); B's subgraph
    read and first write wait until A has ended."""
    assert a.wait("writes:root") == "stored"
    b.release("read:root")
    b.wait("read:root")
    _wait_ended(ended["A"])
    b.release("read:sub")
    b.release("writes:root")


async def assert_in_turn(
    race: Race,
    outcomes: dict[str, str],
    opened: Any,
    a_payload: Any,
    b_payload: Any,
    b_outcome: str = "success",
) -> None:
    """B went on from where A stopped (it was not refused): the thread is as
    InMemorySaver has it after A's run and then B's, one at a time."""
    contexts, savers = opened
    try:
        assert outcomes["B"] == b_outcome, outcomes
        seen = await _observe(race.build(savers[0]), race.config, race.kind)
        expected = await _alone(
            _prepare_interrupted, a_payload, race.kind, race.thread_id, race.build, b_payload
        )
        assert seen == expected
        assert repr(seen) == repr(expected)
    finally:
        await _close(race, contexts)


@pytest.mark.parametrize("kind", KINDS)
async def test_after_an_interrupt_raised_again_in_the_subgraph_the_next_resume_goes_on(
    mode: str, pg_url: str, kind: str
) -> None:
    """A's resume answers the review and stops at the approval's interrupt()
    (the subgraph's task is closed at the root by its interrupt write); B,
    which read the thread mid-run, answers the approval."""
    race = Race(pg_url, mode, kind, _stops_graph)
    held = {"B": ("read:root", "read:sub", "writes:root")}
    outcomes, opened = await run_race(
        race, _prepare_interrupted, _resume, held, _read_mid_run_write_after, "sync"
    )
    assert outcomes["A"] == "success", outcomes
    await assert_in_turn(
        race, outcomes, opened, _resume(race.markers["A"]), _resume(race.markers["B"])
    )


@pytest.mark.parametrize("kind", KINDS)
async def test_after_an_error_in_the_subgraph_the_next_resume_goes_on(
    mode: str, pg_url: str, kind: str
) -> None:
    """A's resume makes the subgraph raise (its task is closed at the root
    by the error write); B, which read the thread mid-run, resumes. (The
    review's stored answer is replayed, so B's run raises the same error, as
    it does after A under InMemorySaver: what matters is that B is not
    refused.)"""
    race = Race(pg_url, mode, kind, _stops_graph)
    held = {"B": ("read:root", "read:sub", "writes:root")}

    def payload(marker: str) -> Any:
        return Command(resume="boom" if marker == race.markers["A"] else marker)

    outcomes, opened = await run_race(
        race, _prepare_interrupted, payload, held, _read_mid_run_write_after, "sync"
    )
    broke = repr(ValueError("the reviewer's answer broke the review"))
    assert outcomes["A"] == broke, outcomes
    await assert_in_turn(
        race, outcomes, opened, Command(resume="boom"), _resume(race.markers["B"]), broke
    )


# ------------------------------------------------------------ A never says it stopped


def _in_thread(
    graph: Any, payload: Any, config: dict, outcome: dict, name: str, refusals: dict
) -> threading.Thread:
    def run() -> None:
        try:
            graph.invoke(payload, config)
            outcome[name] = "success"
        except ThreadConflictError as exc:
            outcome[name] = "ThreadConflictError"
            refusals[name] = exc
        except Exception as exc:  # reported, not hidden: the test fails on it
            outcome[name] = repr(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _age_holds(race: Race, by: timedelta) -> int:
    """Move the last writes under the subgraph tasks held at the thread's
    head back by `by` on Postgres's clock (instead of waiting that long);
    how many claims held any."""
    with psycopg.connect(race.url, autocommit=True) as conn:
        cursor = conn.execute(
            """
            UPDATE colosseum_writes w
            SET value = (SELECT jsonb_object_agg(e.key, to_jsonb(e.value::float8 - %s))
                         FROM jsonb_each_text(w.value) AS e)
            WHERE w.thread_id = %s AND w.checkpoint_ns = '' AND w.task_id = %s
              AND jsonb_typeof(w.value) = 'object' AND w.value <> '{}'::jsonb
              AND w.checkpoint_id = (SELECT max(checkpoint_id) FROM colosseum_checkpoints
                                     WHERE thread_id = %s AND checkpoint_ns = '')
            """,
            (by.total_seconds(), race.thread_id, CLAIM_TASK_ID, race.thread_id),
        )
        return cursor.rowcount


def _one_saver(race: Race, **options: Any) -> Any:
    return StoppedSaver.from_conn_string(
        race.url, on_conflict="raise", **options, **cache_options(race.mode)
    )


def test_a_run_that_died_mid_subgraph_holds_its_checkpoint_until_update_state(
    mode: str, pg_url: str
) -> None:
    """A stops for good mid-subgraph (held until the end: as if its process
    died). B's resume is refused and nothing of it stays. An update_state
    (not checked) moves the head: the next resume goes on from it, and A's
    later writes are refused."""
    race = Race(pg_url, mode, "sync")
    with _one_saver(race) as a_saver, _one_saver(race) as b_saver:
        for saver in (a_saver, b_saver):
            saver.points = Points()
        _sync_graph(a_saver).invoke({"topic": "owls", "notes": []}, race.config)
        resumed = a_saver.get_tuple(race.config).checkpoint["id"]
        a_saver.points = Points("put:sub")
        outcome: dict[str, str] = {}
        refusals: dict[str, ThreadConflictError] = {}
        a_run = _in_thread(
            _sync_graph(a_saver), _resume(race.markers["A"]), race.config, outcome, "A", refusals
        )
        assert a_saver.points.wait("writes:sub") == "stored"
        graph = _sync_graph(b_saver)
        with pytest.raises(ThreadConflictError) as refused:
            graph.invoke(_resume(race.markers["B"]), race.config)
        assert refused.value.held and "under way" in str(refused.value)
        assert refused.value.kept_checkpoint_id is None  # refused at its first write
        assert repr(race.thread_id) in str(refused.value)
        assert set(_postgres_mentions(race, race.markers["B"]).values()) == {0}
        assert _redis_mentions(race, b_saver, race.markers["B"]) == []
        graph.update_state(race.config, {"notes": ["taken over"]})
        graph.invoke(_resume("again"), race.config)
        a_saver.points.release("put:sub")
        a_run.join(WAIT)
        assert outcome == {"A": "ThreadConflictError"}
        state = graph.get_state(race.config)
        assert "taken over" in state.values["notes"] and not state.next
        assert race.markers["A"] not in repr(state.values)
        # A's resume value and subgraph steps stay on the checkpoint it
        # resumed, which the update went on from (not with them, here)
        assert refusals["A"].kept_checkpoint_id == resumed


def test_a_static_breakpoint_in_a_subgraph_holds_until_the_hold_ends(
    mode: str, pg_url: str
) -> None:
    """The trade-off. A run stopped at a static breakpoint inside a subgraph
    writes nothing at the root that says it stopped (LangGraph records no
    interrupt for the subgraph's task): it looks exactly like a run whose
    subgraph is still under way. The next run is refused until the hold
    lapses (on_conflict_hold after A's last write), then goes on from the
    breakpoint as after A alone."""
    race = Race(pg_url, mode, "sync", _breakpoint_graph)
    hold = timedelta(minutes=10)
    with _one_saver(race, on_conflict_hold=hold) as saver:
        saver.points = Points()
        graph = _breakpoint_graph(saver)
        graph.invoke({"topic": "owls", "notes": []}, race.config)
        graph.invoke(_resume(race.markers["A"]), race.config)  # stops before approve
        assert graph.get_state(race.config, subgraphs=True).tasks[0].state.next == ("approve",)
        with pytest.raises(ThreadConflictError):
            graph.invoke(None, race.config)
        assert _age_holds(race, hold - timedelta(seconds=30)) == 1
        with pytest.raises(ThreadConflictError):
            graph.invoke(None, race.config)
        assert _age_holds(race, timedelta(seconds=60)) == 1
        graph.invoke(None, race.config)
        seen = graph.get_state(race.config)
    expected = _breakpoint_graph(InMemorySaver())
    expected.invoke({"topic": "owls", "notes": []}, race.config)
    expected.invoke(_resume(race.markers["A"]), race.config)
    expected.invoke(None, race.config)
    assert seen.values == expected.get_state(race.config).values


def test_a_run_quiet_past_the_hold_is_taken_over(mode: str, pg_url: str) -> None:
    """The other side of the trade-off: a run still under way whose last
    write is older than the hold is taken for a run that stopped. B goes on
    from A's subgraph step (with A's answer) and A's later writes are
    refused: the gap the hold leaves, pinned."""
    race = Race(pg_url, mode, "sync")
    hold = timedelta(minutes=10)
    with (
        _one_saver(race, on_conflict_hold=hold) as a_saver,
        _one_saver(race, on_conflict_hold=hold) as b_saver,
    ):
        for saver in (a_saver, b_saver):
            saver.points = Points()
        _sync_graph(a_saver).invoke({"topic": "owls", "notes": []}, race.config)
        resumed = a_saver.get_tuple(race.config).checkpoint["id"]
        a_saver.points = Points("put:sub")
        outcome: dict[str, str] = {}
        refusals: dict[str, ThreadConflictError] = {}
        a_run = _in_thread(
            _sync_graph(a_saver), _resume(race.markers["A"]), race.config, outcome, "A", refusals
        )
        assert a_saver.points.wait("writes:sub") == "stored"
        assert _age_holds(race, hold + timedelta(seconds=1)) == 1
        graph = _sync_graph(b_saver)
        graph.invoke(_resume(race.markers["B"]), race.config)
        a_saver.points.release("put:sub")
        a_run.join(WAIT)
        assert outcome == {"A": "ThreadConflictError"}
        notes = graph.get_state(race.config).values["notes"]
        assert f"review: {race.markers['A']}" in repr(notes)
        # and A's caller is told that what it stored there stays
        assert refusals["A"].kept_checkpoint_id == resumed


def test_the_hold_is_checked() -> None:
    with pytest.raises(Exception, match="on_conflict_hold must be"):
        ColosseumSaver(None, on_conflict="raise", on_conflict_hold=timedelta(0))  # type: ignore[arg-type]
