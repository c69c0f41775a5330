"""State versions (issue 16), as a user would break them: a migration that reads
more than one channel, continued from two checkpoints of one thread; the
classes LangGraph's own serializer revives, which must still round-trip; a
worker's last put racing `state migrate` on the same thread; and writes newer
code left pending on an older checkpoint, which must not be migrated again."""

from __future__ import annotations

import dataclasses
import operator
import uuid
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.documents import Document
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.store.base import GetOp
from langgraph.types import Command, interrupt

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, Migration
from langgraph_colosseum.errors import StateVersionError
from tests.conftest import truncate
from tests.integration.test_state_versions import (
    CountV1,
    CountV2,
    count,
    count_graph,
    rename_query,
)


class Priced(TypedDict, total=False):
    amount: Any
    currency: str
    log: list[int]


def step(state: dict) -> dict:
    return {"log": [*state.get("log", []), len(state.get("log", []))]}


def amount_with_currency(values: dict) -> None:
    """Version 2 stores an amount as "<n> <currency>": it reads another channel."""
    if isinstance(values.get("amount"), int):
        values["amount"] = f"{values['amount']} {values.get('currency', '?')}"


def test_a_migration_reading_two_channels_is_right_at_each_checkpoint(
    saver: ColosseumSaver, pg_url: str
) -> None:
    """Two v1 checkpoints of one thread hold `amount` at one stored version and
    `currency` at two. Continued under v2 from each (time travel, then
    update_state), each new checkpoint holds the amount migrated from its own
    checkpoint's currency, not the one another checkpoint was migrated with."""
    builder = StateGraph(Priced)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    config = {"configurable": {"thread_id": f"priced-{uuid.uuid4().hex[:8]}"}}
    v1 = builder.compile(checkpointer=saver)
    v1.invoke({"amount": 5, "currency": "eur"}, config)
    v1.invoke({"currency": "usd"}, config)  # amount unchanged (same stored version)
    finished = [s for s in v1.get_state_history(config) if s.next == ()]
    usd, eur = finished[0], finished[1]
    assert (eur.values["currency"], usd.values["currency"]) == ("eur", "usd")

    v2 = saver.versioned(builder.compile(), 2, {1: amount_with_currency})
    assert v2.get_state(usd.config).values["amount"] == "5 usd"
    v2.update_state(eur.config, {"log": []})  # a fork from the eur checkpoint
    assert v2.get_state(config).values["amount"] == "5 eur"
    v2.update_state(usd.config, {"log": []})  # and one from the usd checkpoint
    assert v2.get_state(config).values == {"amount": "5 usd", "currency": "usd", "log": []}
    # A new process (no memory of rows written) reads the same.
    with ColosseumSaver.from_conn_string(pg_url) as other:
        fresh = other.versioned(builder.compile(), 2, {1: amount_with_currency})
        assert fresh.get_state(config).values["amount"] == "5 usd"


class Anything(TypedDict, total=False):
    value: Any


def test_classes_langgraph_revives_are_stored_as_before(saver: ColosseumSaver) -> None:
    """LangChain's Document and LangGraph's store ops are on LangGraph's own safe
    list: its serializer revives them exactly, so they are no unregistered class
    and are not refused. Compared with InMemorySaver by repr."""
    values = [
        [Document("retrieved", metadata={"source": "a.txt", "page": 2}, id="d1")],
        GetOp(("users", "1"), "prefs"),
    ]

    def final(checkpointer: Any, value: Any) -> str:
        builder = StateGraph(Anything)
        builder.add_node("put", lambda state: {"value": value})
        builder.add_edge(START, "put")
        graph = builder.compile(checkpointer=checkpointer)
        config = {"configurable": {"thread_id": f"safe-{uuid.uuid4().hex[:8]}"}}
        graph.invoke({}, config)
        return repr(graph.get_state(config).values["value"])

    for value in values:
        assert final(saver, value) == final(InMemorySaver(), value)


@pytest.mark.parametrize("hot", [False, True], ids=["postgres", "redis"])
def test_a_write_racing_state_migrate_stays_the_head(pg_url: str, hot: bool) -> None:
    """A worker (not under run_guard) continues an old thread (durability="exit": one put, at the end);
    its put was made (its checkpoint id chosen) just before `state migrate` took
    the thread and commits just after. The head is the worker's update, not the
    migration of what the worker had read: no step is lost."""
    from langgraph_colosseum._core import sql as store_sql
    from langgraph_colosseum._core.io import Transaction
    from tests.integration.test_guards import Once, worker

    truncate(pg_url)
    thread_id = "raced-by-a-worker"
    config = {"configurable": {"thread_id": thread_id}}
    with worker(pg_url, hot=hot) as one, worker(pg_url, hot=hot) as two:
        v1 = count_graph(CountV1)
        v1.compile(checkpointer=one).invoke({"query": "q", "n": 0}, config)

        v2 = count_graph(CountV2)
        graph = one.versioned(v2.compile(), 2, {1: rename_query})

        def the_migration() -> None:
            outcome = two.migrate_state(2, {1: rename_query}, thread_ids=[thread_id])
            assert outcome["migrated"] == 1, outcome

        graph.checkpointer.before = hook = Once(
            lambda r: (
                isinstance(r, Transaction)
                and any(
                    getattr(q, "sql", None) in (store_sql.PUT, store_sql.PUT_NO_HEAD)
                    for q in r.queries
                )
            ),
            the_migration,
        )
        graph.invoke({"n": 100}, config, durability="exit")
        assert hook.fired
        reader = two.versioned(v2.compile(), 2, {1: rename_query})
        assert reader.get_state(config).values == {"n": 101, "queries": ["q"]}


def cents(values: dict) -> None:
    """Version 2 keeps prices in cents (a change no value's form shows)."""
    if "price" in values:
        values["price"] = values["price"] * 100


class PricedCount(TypedDict, total=False):
    price: int
    n: int


def test_a_fork_keeps_the_state_version_of_its_checkpoint(saver: ColosseumSaver) -> None:
    """`Inspector.fork` (colosseum fork, the inspector's fork button) of a thread
    version-2 code wrote is at version 2: it reads as its source does, and is
    not migrated a second time."""
    from langgraph_colosseum.inspection import Inspector

    builder = StateGraph(PricedCount)
    builder.add_node("count", count)
    builder.add_edge(START, "count")
    config = {"configurable": {"thread_id": f"cents-{uuid.uuid4().hex[:8]}"}}
    builder.compile(checkpointer=saver).invoke({"price": 5, "n": 0}, config)
    v2 = saver.versioned(builder.compile(), 2, {1: cents})
    v2.invoke({"n": 10}, config)  # written at version 2
    source = v2.get_state(config)
    assert source.values == {"price": 500, "n": 11}

    forked = Inspector(saver).fork(
        config["configurable"]["thread_id"], source.config["configurable"]["checkpoint_id"]
    )
    fork = v2.get_state({"configurable": {"thread_id": forked}})
    assert fork.values == source.values
    assert fork.metadata["state_version"] == 2


class Answer(TypedDict, total=False):
    answer: str


def test_a_subgraph_interrupted_in_a_node_the_new_code_lacks_says_so(
    saver: ColosseumSaver,
) -> None:
    """A thread stopped at an `interrupt()` inside a subgraph's node that version 2
    renamed: with the mapping the answer reaches the new node; without it the
    resume raises OrphanedTasksError (it returned {} and the answer was lost)."""
    from langgraph.types import Command, interrupt

    from langgraph_colosseum import Migration
    from langgraph_colosseum.errors import OrphanedTasksError

    def ask(state: dict) -> dict:
        return {"answer": "got " + interrupt("ok?")}

    def parent(node: str) -> Any:
        inner = StateGraph(Answer)
        inner.add_node(node, ask)
        inner.add_edge(START, node)
        outer = StateGraph(Answer)
        outer.add_node("sub", inner.compile())
        outer.add_edge(START, "sub")
        return outer.compile()

    for migration, expected in (
        (Migration(nodes={"ask": "ask_again"}), {"answer": "got yes"}),
        (Migration(), OrphanedTasksError),
    ):
        config = {"configurable": {"thread_id": f"sub-ask-{uuid.uuid4().hex[:8]}"}}
        v1 = parent("ask").copy(update={"checkpointer": saver})
        v1.invoke({}, config)
        v2 = saver.versioned(parent("ask_again"), 2, {1: migration})
        if expected is OrphanedTasksError:
            with pytest.raises(OrphanedTasksError, match="node 'ask'"):
                v2.invoke(Command(resume="yes"), config)
        else:
            assert v2.invoke(Command(resume="yes"), config) == expected


def test_a_metadata_state_version_that_is_no_integer_counts_as_version_1(
    saver: ColosseumSaver,
) -> None:
    """A thread whose metadata holds a `state_version` of the application's own
    (a string: config metadata reaches every checkpoint) is at version 1, as
    reads take it; `state versions` and `state migrate` do not fail on it."""
    builder = count_graph(CountV1)
    thread_id = f"own-version-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread_id}, "metadata": {"state_version": "beta"}}
    builder.compile(checkpointer=saver).invoke({"query": "q", "n": 0}, config)
    assert saver.state_versions() == {1: 1}
    assert saver.migrate_state(2, {1: rename_query})["migrated"] == 1
    assert saver.state_versions() == {2: 1}


def test_a_failing_migration_names_the_thread_checkpoint_migration_and_task(
    saver: ColosseumSaver,
) -> None:
    """A migration written for whole states fails on a task's writes alone (they
    hold only the keys the task wrote). The error names the thread, the
    checkpoint, the migration and the task, and keeps the cause."""
    from langgraph_colosseum.errors import StateMigrationError

    def fail(state: dict) -> dict:
        raise RuntimeError("b fails")

    builder = StateGraph(CountV1)
    builder.add_node("count", count)
    builder.add_node("fail", fail)
    builder.add_edge(START, "count")
    builder.add_edge(START, "fail")
    thread_id = f"partial-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread_id}}
    with pytest.raises(RuntimeError):
        builder.compile(checkpointer=saver).invoke({"query": "q", "n": 0}, config)

    def whole_state_only(values: dict) -> None:
        values["queries"] = [values.pop("query")]  # KeyError on count's writes ({"n": 1})

    v2 = saver.versioned(builder.compile(), 2, {1: whole_state_only})
    with pytest.raises(StateMigrationError) as raised:
        v2.get_state(config)
    message = str(raised.value)
    assert thread_id in message and "migration 1" in message and "task" in message
    assert "only the keys present" in message
    assert isinstance(raised.value.__cause__, KeyError)


class Held(TypedDict, total=False):
    pos: Any
    book: dict
    n: int


def _renamed_position_thread(register: Any) -> tuple[StateGraph, type, dict]:
    """A v1 thread holding a `Position(ticker=...)` in a channel, nested in
    another, and in the pending write of a node whose sibling is interrupted.
    Returns the builder, the class as v2 defines it (ticker renamed to symbol,
    with a default, so without the rename "AAPL" would be silently dropped),
    and the thread's config."""

    @dataclasses.dataclass
    class Position:
        ticker: str
        qty: int

    register(Position)
    written = Position  # v1's class: `Position` is redefined below

    def buy(state: dict) -> dict:
        return {"pos": written("MSFT", 5)}

    def ask(state: dict) -> dict:
        return {"n": interrupt("confirm?")}

    builder = StateGraph(Held)
    builder.add_node("buy", buy)
    builder.add_node("ask", ask)
    builder.add_edge(START, "buy")
    builder.add_edge(START, "ask")
    config = {"configurable": {"thread_id": f"field-{uuid.uuid4().hex[:8]}"}}
    v1_input = {"pos": Position("AAPL", 3), "book": {"open": [Position("IBM", 1)]}}

    @dataclasses.dataclass
    class Position:  # type: ignore[no-redef]  # the deploy renamed ticker to symbol
        symbol: str = ""
        qty: int = 0

    return builder, Position, (config, v1_input)


def test_a_renamed_class_field_is_renamed_by_a_state_migration(
    saver: ColosseumSaver, pg_url: str
) -> None:
    """Migration(fields=...): the stored ticker arrives as symbol in channel
    values, nested values and pending writes (get_state, then the resume), from
    Postgres and from the Redis head; the stored rows keep ticker."""
    builder, Position, (config, v1_input) = _renamed_position_thread(saver.register_type)
    builder.compile(checkpointer=saver).invoke(v1_input, config)
    saver.register_type(Position)
    migration = Migration(fields={Position: {"ticker": "symbol"}})
    graph = saver.versioned(builder.compile(), 2, {1: migration})
    head = graph.checkpointer.get_tuple(config)
    assert head.checkpoint["channel_values"]["pos"] == Position("AAPL", 3)
    assert [v for _, ch, v in head.pending_writes if ch == "pos"] == [Position("MSFT", 5)]
    state = graph.get_state(config)  # buy's pending write applied
    assert state.values["pos"] == Position("MSFT", 5)
    assert state.values["book"] == {"open": [Position("IBM", 1)]}
    assert [t.name for t in state.tasks if t.interrupts] == ["ask"]
    graph.invoke(Command(resume=7), config)
    assert graph.get_state(config).values == {
        "pos": Position("MSFT", 5),  # buy's pending write, renamed
        "book": {"open": [Position("IBM", 1)]},
        "n": 7,
    }
    with psycopg.connect(pg_url) as conn:
        stored = conn.execute(
            "SELECT count(*) FROM colosseum_writes WHERE thread_id = %s "
            'AND value::text LIKE \'%%"ticker": "MSFT"%%\'',
            [config["configurable"]["thread_id"]],
        ).fetchone()
    assert stored == (1,)


async def test_a_renamed_class_field_is_renamed_on_async_reads(
    asaver: AsyncColosseumSaver,
) -> None:
    builder, Position, (config, v1_input) = _renamed_position_thread(asaver.register_type)
    await builder.compile(checkpointer=asaver).ainvoke(v1_input, config)
    asaver.register_type(Position)
    graph = asaver.versioned(
        builder.compile(), 2, {1: Migration(fields={Position: {"ticker": "symbol"}})}
    )
    assert (await graph.aget_state(config)).values["book"] == {"open": [Position("IBM", 1)]}
    await graph.ainvoke(Command(resume=7), config)
    values = (await graph.aget_state(config)).values
    assert (values["pos"], values["n"]) == (Position("MSFT", 5), 7)


class Totals(TypedDict, total=False):
    price: int
    total: int
    log: Annotated[list[str], operator.add]


def _cut_short() -> tuple[Any, set[str], dict]:
    """The builder of each version (version 2 writes cents), the nodes that fail
    this time (b and d: a version-1 run is cut short, a's write pending), and
    the thread's config."""
    failing = {"b", "d"}

    def node(name: str, update: dict) -> Any:
        def run(state: dict) -> dict:
            if name in failing:
                raise RuntimeError(f"{name} fails this time")
            return {**update, "log": [name]}

        return run

    def build(b_total: int) -> StateGraph:
        builder = StateGraph(Totals)
        builder.add_node("a", node("a", {"price": 5}))
        builder.add_node("b", node("b", {"total": b_total}))
        builder.add_node("d", node("d", {}))
        for name in ("a", "b", "d"):
            builder.add_edge(START, name)
        return builder

    config = {"configurable": {"thread_id": f"cents-{uuid.uuid4().hex[:8]}"}}
    return build, failing, config


def to_cents(values: dict) -> None:
    for key in ("price", "total"):
        if key in values:
            values[key] = values[key] * 100


def test_writes_new_code_left_on_an_old_checkpoint_are_not_migrated_again(
    saver: ColosseumSaver, pg_url: str
) -> None:
    """v1 writes a step cut short (a's write pending; b and d failed). v2 code
    (amounts in cents) resumes it and is cut short again: b's write, made by v2
    code, is now pending on the v1 checkpoint. The next resume must read it as a
    v2 write (it was migrated once more: 700 became 70000); a unit change cannot
    tell a value already in the new form. a's write, recorded without a version
    (unversioned v1 code), is migrated from its checkpoint's version."""
    build, failing, config = _cut_short()
    with pytest.raises(RuntimeError):
        build(7).compile(checkpointer=saver).invoke({"log": []}, config)
    v2 = saver.versioned(build(700).compile(), 2, {1: to_cents})  # b now writes cents
    failing.discard("b")
    with pytest.raises(RuntimeError):
        v2.invoke(None, config)  # b's write is saved; d fails: no new checkpoint
    with psycopg.connect(pg_url) as conn:  # unversioned code records no version
        recorded = conn.execute(
            "SELECT channel, state_version FROM colosseum_writes WHERE thread_id = %s"
            " AND channel IN ('price', 'total')",
            [config["configurable"]["thread_id"]],
        ).fetchall()
    assert sorted(recorded) == [("price", None), ("total", 2)]
    with pytest.raises(StateVersionError):  # version-1 code cannot read b's write
        saver.versioned(build(7).compile(), 1).get_state(config)
    copy = {"configurable": {"thread_id": config["configurable"]["thread_id"] + "-copy"}}
    saver.copy_thread(config["configurable"]["thread_id"], copy["configurable"]["thread_id"])
    failing.clear()
    for thread in (config, copy):  # a copy's writes keep their versions
        state = v2.invoke(None, thread)
        assert (state["price"], state["total"]) == (500, 700)


async def test_writes_new_code_left_on_an_old_checkpoint_async(
    asaver: AsyncColosseumSaver,
) -> None:
    build, failing, config = _cut_short()
    with pytest.raises(RuntimeError):
        await build(7).compile(checkpointer=asaver).ainvoke({"log": []}, config)
    v2 = asaver.versioned(build(700).compile(), 2, {1: to_cents})
    failing.discard("b")
    with pytest.raises(RuntimeError):
        await v2.ainvoke(None, config)
    failing.clear()
    state = await v2.ainvoke(None, config)
    assert (state["price"], state["total"]) == (500, 700)
