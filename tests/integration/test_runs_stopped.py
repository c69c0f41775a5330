"""What a run stopped by another leaves behind (`saver.runs(graph)`, issue 15).

Each test drives the competing runs with events (no sleeps) against real
Postgres (and Redis where the hot head is the subject).
"""

from __future__ import annotations

import operator
import threading
import uuid
from datetime import timedelta
from typing import Annotated, Any

import psycopg
import pytest
import redis
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_colosseum import ColosseumSaver, Encryption
from langgraph_colosseum._core import multitask
from langgraph_colosseum._core.io import Query, Transaction
from langgraph_colosseum.errors import RunInterruptedError, RunRolledBackError
from tests.conftest import CACHE_PREFIX, redis_url, truncate
from tests.integration.test_encryption import KEY_1, KEY_2
from tests.integration.test_guards import Once, new_thread, worker

WAIT = 60.0


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


def traces(url: str, thread_id: str, text: str) -> list[str]:
    """The Postgres tables whose rows of `thread_id` hold `text` (the tool
    ledger's too: what the CLI and the inspector show of the thread)."""
    found = []
    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("checkpoints", "channel_values", "writes", "delta_histories", "threads",
                      "tool_calls"):  # fmt: skip
            hits = conn.execute(
                f"SELECT count(*) FROM colosseum_{table} t "
                "WHERE t.thread_id = %s AND position(%s in t::text) > 0",
                (thread_id, text),
            ).fetchone()[0]
            if hits:
                found.append(f"{table}: {hits}")
    return found


def nested_graph(saver: Any, entered: threading.Event, release: threading.Event) -> Any:
    """START -> inner (a subgraph: note -> slow) -> END; `slow` holds the message
    "held" until `release`. The subgraph's checkpoints are stored under its
    own namespace."""

    def note(state: Chat) -> dict:
        return {"messages": [f"{state['messages'][-1]}:note"]}

    def slow(state: Chat) -> dict:
        if state["messages"][-1] == "held:note" and not entered.is_set():
            entered.set()
            release.wait(WAIT)
        return {"messages": [f"{state['messages'][-1]}:slow"]}

    inner = StateGraph(Chat)
    inner.add_node("note", note)
    inner.add_node("slow", slow)
    inner.add_edge(START, "note")
    inner.add_edge("note", "slow")
    inner.add_edge("slow", END)
    outer = StateGraph(Chat)
    outer.add_node("inner", inner.compile())
    outer.add_edge(START, "inner")
    outer.add_edge("inner", END)
    return outer.compile(checkpointer=saver)


def test_rollback_of_a_run_stopped_inside_a_subgraph(pg_url: str) -> None:
    truncate(pg_url)
    config = {"configurable": {"thread_id": "nested-rb"}}
    entered, release = threading.Event(), threading.Event()
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver:
        runs = saver.runs(nested_graph(saver, entered, release), "reject")
        runs.invoke({"messages": ["one"]}, config, durability="sync")
        outcome: list[Any] = []

        def held() -> None:
            try:
                runs.invoke({"messages": ["held"]}, config, durability="sync")
                outcome.append("success")
            except Exception as exc:
                outcome.append(exc)

        first = threading.Thread(target=held)
        first.start()
        assert entered.wait(WAIT)  # the subgraph stored `note`, and waits in `slow`
        with psycopg.connect(pg_url, autocommit=True) as conn:
            namespaces = conn.execute(
                "SELECT DISTINCT checkpoint_ns FROM colosseum_checkpoints WHERE thread_id = %s",
                ("nested-rb",),
            ).fetchall()
        result = runs.invoke({"messages": ["two"]}, config, multitask_strategy="rollback")
        release.set()
        first.join(WAIT)
        assert isinstance(outcome[0], RunRolledBackError), outcome
        assert "held" not in repr(result["messages"]) and "two:note:slow" in result["messages"]
        assert traces(pg_url, "nested-rb", "held") == [], namespaces
        history = [s.values.get("messages") for s in runs.graph.get_state_history(config)]
        assert not any("held" in repr(m) for m in history)


def held_graph(saver: Any, holds: dict[str, tuple[threading.Event, threading.Event]]) -> Any:
    """START -> answer -> END; `answer` of a message in `holds` sets its first
    event and waits for its second."""

    def answer(state: Chat) -> dict:
        msg = state["messages"][-1]
        if msg in holds:
            holds[msg][0].set()
            holds[msg][1].wait(WAIT)
        return {"messages": [f"{msg}:answer"]}

    builder = StateGraph(Chat)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def in_thread(call: Any, outcome: list[Any]) -> threading.Thread:
    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:
            outcome.append(exc)

    started = threading.Thread(target=run)
    started.start()
    return started


def test_a_rollback_of_a_rollback_does_not_bring_back_what_the_first_removed(
    pg_url: str,
) -> None:
    """A's registry metadata is removed when B rolls A back. B's own record must
    then remember the thread as B found it after the rollback, not before it:
    when C rolls B back in turn, A's metadata must not come back."""
    truncate(pg_url)
    thread_id = "meta-rb"
    holds = {m: (threading.Event(), threading.Event()) for m in ("qa", "qb")}

    def config(topic: str) -> dict:
        return {"configurable": {"thread_id": thread_id}, "metadata": {"topic": topic}}

    with ColosseumSaver.from_conn_string(pg_url, pool_size=6) as saver:
        runs = saver.runs(held_graph(saver, holds), "rollback")
        runs.invoke({"messages": ["q0"]}, config("zero"), durability="sync")
        outcome_a: list[Any] = []
        outcome_b: list[Any] = []
        a = in_thread(
            lambda: runs.invoke({"messages": ["qa"]}, config("from-a"), durability="sync"),
            outcome_a,
        )
        assert holds["qa"][0].wait(WAIT)
        assert saver.threads.get(thread_id).metadata["topic"] == "from-a"
        b = in_thread(
            lambda: runs.invoke({"messages": ["qb"]}, config("from-b"), durability="sync"),
            outcome_b,
        )
        assert holds["qb"][0].wait(WAIT)  # A is rolled back: B is in `answer`
        assert saver.threads.get(thread_id).metadata["topic"] == "from-b"
        result = runs.invoke({"messages": ["qc"]}, {"configurable": {"thread_id": thread_id}})
        for hold in holds.values():
            hold[1].set()
        a.join(WAIT)
        b.join(WAIT)
        assert isinstance(outcome_a[0], RunRolledBackError), outcome_a
        assert isinstance(outcome_b[0], RunRolledBackError), outcome_b
        assert result["messages"] == ["q0", "q0:answer", "qc", "qc:answer"]
        assert saver.threads.get(thread_id).metadata.get("topic") == "zero"
        assert traces(pg_url, thread_id, "from-a") == []


def test_a_cancelled_waiter_never_runs(pg_url: str) -> None:
    """Guard: a queued run cancelled while it waits leaves the queue. Cancelling
    the thread stops its running run and its waiter at once, so the waiter
    wakes to a free thread: it must not take it, and its caller is told."""
    from langgraph_colosseum.errors import RunInterruptedError

    truncate(pg_url)
    thread_id = "cancel-waiter"
    holds = {"qa": (threading.Event(), threading.Event())}
    config = {"configurable": {"thread_id": thread_id}}
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver:
        runs = saver.runs(held_graph(saver, holds), "enqueue")
        first: list[Any] = []
        second: list[Any] = []
        a = in_thread(lambda: runs.invoke({"messages": ["qa"]}, config), first)
        assert holds["qa"][0].wait(WAIT)
        b = in_thread(lambda: runs.invoke({"messages": ["qb"]}, config), second)
        pending: list[Any] = []
        while not pending:  # a query per turn: b has recorded its place
            pending = saver.runs.list(thread_id, status="pending")
        assert len(saver.runs.cancel(thread_id=thread_id)) == 2
        b.join(WAIT)
        holds["qa"][1].set()
        a.join(WAIT)
        assert isinstance(first[0], RunInterruptedError), first
        assert isinstance(second[0], RunInterruptedError), second
        assert traces(pg_url, thread_id, "qb") == []
        assert {r.status for r in saver.runs.list(thread_id)} == {"interrupted"}


def test_a_waiter_cancelled_while_it_sleeps_is_told_at_once(pg_url: str) -> None:
    """A queued run asleep on LISTEN is woken by the cancel's NOTIFY; asking
    again, it finds itself cancelled and must say so then, not sleep on for
    another third of its lease (here 200 s) waiting for a NOTIFY already sent."""
    from datetime import timedelta

    from langgraph_colosseum.errors import RunInterruptedError

    truncate(pg_url)
    thread_id = "cancel-sleeper"
    holds = {"qa": (threading.Event(), threading.Event())}
    config = {"configurable": {"thread_id": thread_id}}
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver:
        graph = held_graph(saver, holds)
        runs = saver.runs(graph, "enqueue", lease=timedelta(seconds=600))
        first: list[Any] = []
        second: list[Any] = []
        a = in_thread(lambda: runs.invoke({"messages": ["qa"]}, config), first)
        assert holds["qa"][0].wait(WAIT)
        b = in_thread(lambda: runs.invoke({"messages": ["qb"]}, config), second)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            asleep = 0
            while not asleep:  # a query per turn: b asked for the thread and sleeps
                # Its TAKE renewed its place (ENQUEUE set lease_until to its
                # created_at + the lease; a TAKE, later, moves it past that): b
                # is queued and has asked, after its LISTEN. (An idle pool
                # connection whose last statement was a TAKE may be a's.)
                asleep = conn.execute(
                    "SELECT count(*) FROM colosseum_runs WHERE thread_id = %s"
                    " AND status = 'pending' AND lease_until > created_at + interval '600 s'",
                    (thread_id,),
                ).fetchone()[0]
        try:
            assert len(saver.runs.cancel(thread_id=thread_id)) == 2
            # told before anything else happens on the thread (a's hold lasts WAIT)
            b.join(WAIT / 2)
            assert second and isinstance(second[0], RunInterruptedError), second
        finally:
            holds["qa"][1].set()
            a.join(WAIT)
            b.join(WAIT)
        assert isinstance(first[0], RunInterruptedError), first


def asking_graph(saver: Any, entered: threading.Event, release: threading.Event) -> Any:
    """START -> ask (interrupt() for a reply) -> slow -> END; `slow` holds the
    run whose reply is "held" until `release` is set."""

    def ask(state: Chat) -> dict:
        return {"messages": [f"reply:{interrupt('your reply?')}"]}

    def slow(state: Chat) -> dict:
        last = state["messages"][-1]
        if last == "reply:held" and not entered.is_set():  # the first run only
            entered.set()
            release.wait(WAIT)
        return {"messages": [f"{last}:done"]}

    builder = StateGraph(Chat)
    builder.add_node("ask", ask)
    builder.add_node("slow", slow)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "slow")
    builder.add_edge("slow", END)
    return builder.compile(checkpointer=saver)


def test_rollback_of_a_resuming_run_leaves_nothing_of_it(pg_url: str) -> None:
    """A run that resumes an interrupt() writes its first step's writes (and the
    resume value) on the checkpoint it resumed from, which is not its own.
    Rolled back, none of that may remain: the new run must not be handed the
    stopped run's answer as if it were a pending write of its own."""
    truncate(pg_url)
    config = {"configurable": {"thread_id": "resume-rb"}}
    entered, release = threading.Event(), threading.Event()
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver:
        runs = saver.runs(asking_graph(saver, entered, release), "reject")
        runs.invoke({"messages": ["hi"]}, config, durability="sync")  # waits in `ask`
        outcome: list[Any] = []

        def held() -> None:
            try:
                runs.invoke(Command(resume="held"), config, durability="sync")
                outcome.append("success")
            except Exception as exc:
                outcome.append(exc)

        first = threading.Thread(target=held)
        first.start()
        assert entered.wait(WAIT)  # `ask` is done and stored: the run is in `slow`
        result = runs.invoke(
            Command(resume="fresh"), config, multitask_strategy="rollback", durability="sync"
        )
        release.set()
        first.join(WAIT)
        assert isinstance(outcome[0], RunRolledBackError), outcome
        assert result["messages"] == ["hi", "reply:fresh", "reply:fresh:done"]
        assert runs.get_state(config).values["messages"] == result["messages"]
        assert traces(pg_url, "resume-rb", "held") == []


def test_a_rollback_keeps_registry_metadata_set_by_others_meanwhile(pg_url: str) -> None:
    """Rollback removes the stopped run's registry changes, not everyone's: a
    key set with threads.update while that run was running is not the run's."""
    truncate(pg_url)
    thread_id = "meta-others"
    holds = {"qa": (threading.Event(), threading.Event())}
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver:
        runs = saver.runs(held_graph(saver, holds), "rollback")
        config = {"configurable": {"thread_id": thread_id}}
        runs.invoke({"messages": ["q0"]}, config, durability="sync")
        outcome: list[Any] = []
        a = in_thread(
            lambda: runs.invoke({"messages": ["qa"]}, {**config, "metadata": {"topic": "from-a"}}),
            outcome,
        )
        assert holds["qa"][0].wait(WAIT)
        saver.threads.update(thread_id, metadata={"owner": "bob"})
        runs.invoke({"messages": ["qb"]}, config)
        holds["qa"][1].set()
        a.join(WAIT)
        assert isinstance(outcome[0], RunRolledBackError), outcome
        metadata = saver.threads.get(thread_id).metadata
        assert "topic" not in metadata and metadata.get("owner") == "bob", metadata


@pytest.mark.parametrize("hot", [False, True], ids=["postgres", "redis"])
@pytest.mark.parametrize(
    "strategy, told", [("rollback", RunRolledBackError), ("interrupt", RunInterruptedError)]
)
def test_the_stopped_runs_caller_is_told_what_stopped_it_whenever_it_is_refused(
    pg_url: str, hot: bool, strategy: str, told: type
) -> None:
    """The stopped run's refused write and its end land between the take and
    the rollback (the stopper is held right after its take, before it deletes
    anything or records the run as rolled back). Its caller is told what the
    strategy does, whatever the order: RunRolledBackError for rollback, and
    exactly RunInterruptedError for interrupt."""
    truncate(pg_url)
    thread_id = new_thread("told")
    holds = {"qa": (threading.Event(), threading.Event())}
    config = {"configurable": {"thread_id": thread_id}}
    first_id = str(uuid.uuid4())
    with worker(pg_url, hot=hot) as first, worker(pg_url, hot=hot) as second:
        runs = first.runs(held_graph(first, holds), "reject")
        runs.invoke({"messages": ["q0"]}, config, durability="sync")
        outcome: list[Any] = []
        a = in_thread(
            lambda: runs.invoke(
                {"messages": ["qa"]}, {**config, "run_id": first_id}, durability="sync"
            ),
            outcome,
        )
        assert holds["qa"][0].wait(WAIT)

        def the_stopped_run_ends() -> None:
            holds["qa"][1].set()
            a.join(WAIT)

        after_take = Once(
            lambda r: isinstance(r, Query) and r.sql == multitask.ROLLBACKS_DUE,
            the_stopped_run_ends,
        )
        second.before = after_take
        result = second.runs(held_graph(second, {}), strategy).invoke({"messages": ["qb"]}, config)
        assert after_take.fired and not a.is_alive()
        assert type(outcome[0]) is told, outcome
        assert outcome[0].stopped_by == second.runs.list(thread_id)[-1].run_id
        final = {"rollback": "rolled_back", "interrupt": "interrupted"}[strategy]
        assert second.runs.get(first_id).status == final
        kept = {"rollback": [], "interrupt": ["qa"]}[strategy]
        assert result["messages"] == ["q0", "q0:answer", *kept, "qb", "qb:answer"]


def stepped_graph(saver: Any, holds: dict[str, tuple[threading.Event, threading.Event]]) -> Any:
    """START -> think -> answer -> END; the node `n` of message `m` with
    f"{m}:{n}" in `holds` sets its first event and waits for its second."""

    def node(name: str) -> Any:
        def step(state: Chat) -> dict:
            msg = state["messages"][-1].split(":")[0]
            if f"{msg}:{name}" in holds:
                entered, release = holds[f"{msg}:{name}"]
                entered.set()
                release.wait(WAIT)
            return {"messages": [f"{msg}:{name}"]}

        return step

    builder = StateGraph(Chat)
    builder.add_node("think", node("think"))
    builder.add_node("answer", node("answer"))
    builder.add_edge(START, "think")
    builder.add_edge("think", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def set_by_callers(saver: Any, thread_id: str) -> dict[str, Any]:
    """The thread's registry metadata but `run_id`, which each run's puts set
    (LangGraph copies it from `configurable`; rollback restores it like the rest)."""
    return {k: v for k, v in saver.threads.get(thread_id).metadata.items() if k != "run_id"}


@pytest.mark.parametrize("hot", [False, True], ids=["postgres", "redis"])
@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
@pytest.mark.parametrize("again", [False, True], ids=["run-other", "run-other-run"])
def test_a_rollback_keeps_a_key_someone_else_set_after_the_run_did(
    pg_url: str, hot: bool, encrypted: bool, again: bool
) -> None:
    """The thread after a rollback is the thread before the stopped run plus
    what others did meanwhile. The run sets `topic` (its config metadata, at
    its first put); then threads.update sets `topic` too: that value is the
    last one someone other than the run set, and it stays. With `again`, the
    run sets `topic` once more after that (its next put): undoing the run
    still leaves the update's value, not the value from before the run. Its
    keys nobody else touched go back as they were (`lang`) or go (`mood`); a
    key only the update set stays (`owner`), and so does one only the run
    before set (`since`). Encrypted metadata is sealed
    key by key, each time anew: nothing here compares values."""
    truncate(pg_url)
    thread_id = new_thread("meta-both")
    holds = {m: (threading.Event(), threading.Event()) for m in ("qa:think", "qa:answer")}
    config = {"configurable": {"thread_id": thread_id}}
    a_sets = {"topic": "from-a", "lang": "fr", "mood": "from-a"}
    options = {"encryption": Encryption({"k1": KEY_1})} if encrypted else {}
    with worker(pg_url, hot=hot, **options) as saver:
        runs = saver.runs(stepped_graph(saver, holds), "rollback")
        before = {"topic": "zero", "lang": "en", "since": "q0"}
        runs.invoke({"messages": ["q0"]}, {**config, "metadata": before}, durability="sync")
        outcome: list[Any] = []
        a = in_thread(
            lambda: runs.invoke(
                {"messages": ["qa"]}, {**config, "metadata": a_sets}, durability="sync"
            ),
            outcome,
        )
        assert holds["qa:think"][0].wait(WAIT)
        assert set_by_callers(saver, thread_id) == {**a_sets, "since": "q0"}
        saver.threads.update(thread_id, metadata={"topic": "from-bob", "owner": "bob"})
        if again:  # the run's next put sets `topic` again
            holds["qa:think"][1].set()
            assert holds["qa:answer"][0].wait(WAIT)
            assert saver.threads.get(thread_id).metadata["topic"] == "from-a"
            if encrypted:  # the value the run replaced is kept sealed
                assert traces(pg_url, thread_id, "from-bob") == []
        result = runs.invoke({"messages": ["qb"]}, config, durability="sync")
        for hold in holds.values():
            hold[1].set()
        a.join(WAIT)
        assert isinstance(outcome[0], RunRolledBackError), outcome
        assert result["messages"] == ["q0", "q0:think", "q0:answer", "qb", "qb:think", "qb:answer"]
        metadata = set_by_callers(saver, thread_id)
        assert metadata == {"topic": "from-bob", "lang": "en", "since": "q0", "owner": "bob"}
        assert traces(pg_url, thread_id, "from-a") == []


def test_a_rollback_keeps_a_key_a_put_outside_any_run_set_after_the_run_did(
    pg_url: str,
) -> None:
    """A put made outside any run (a plain graph.invoke, once the run's lease
    has lapsed and the fence lets it write) that sets a key the run set makes
    it no longer the run's: the rollback of the run leaves it as that put left it."""
    truncate(pg_url)
    thread_id = new_thread("meta-plain")
    holds = {"qa:think": (threading.Event(), threading.Event())}
    config = {"configurable": {"thread_id": thread_id}}
    with worker(pg_url, hot=False) as saver:
        graph = stepped_graph(saver, holds)
        # A lease nobody renews during the test: its lapse is set below, by hand.
        runs = saver.runs(graph, "rollback", lease=timedelta(hours=1))
        runs.invoke({"messages": ["q0"]}, {**config, "metadata": {"topic": "zero"}})
        outcome: list[Any] = []
        a = in_thread(
            lambda: runs.invoke(
                {"messages": ["qa"]}, {**config, "metadata": {"topic": "from-a"}}, durability="sync"
            ),
            outcome,
        )
        assert holds["qa:think"][0].wait(WAIT)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE colosseum_threads SET run_lease_until = now() - interval '1 second' "
                "WHERE thread_id = %s",
                (thread_id,),
            )
        graph.invoke({"messages": ["qp"]}, {**config, "metadata": {"topic": "plain"}})
        runs.invoke({"messages": ["qb"]}, config)
        holds["qa:think"][1].set()
        a.join(WAIT)
        assert isinstance(outcome[0], RunRolledBackError), outcome
        assert set_by_callers(saver, thread_id) == {"topic": "plain"}


def test_a_rollback_after_a_rekey_puts_back_values_sealed_with_the_new_key(pg_url: str) -> None:
    """What a rollback puts back is registry metadata, sealed as it is: rekey
    re-seals it with the registry. The run sets `topic` under key k1, rekey
    moves everything to k2, and a saver that has only k2 rolls the run back:
    the value from before the run reads back (no row is left under k1)."""
    truncate(pg_url)
    thread_id = new_thread("meta-rekey")
    holds = {"qa:think": (threading.Event(), threading.Event())}
    config = {"configurable": {"thread_id": thread_id}}
    with worker(pg_url, hot=False, encryption=Encryption({"k1": KEY_1})) as old:
        runs = old.runs(stepped_graph(old, holds), "rollback")
        runs.invoke({"messages": ["q0"]}, {**config, "metadata": {"topic": "zero"}})
        outcome: list[Any] = []
        a = in_thread(
            lambda: runs.invoke(
                {"messages": ["qa"]}, {**config, "metadata": {"topic": "from-a"}}, durability="sync"
            ),
            outcome,
        )
        assert holds["qa:think"][0].wait(WAIT)
        with worker(pg_url, hot=False, encryption=Encryption({"k2": KEY_2, "k1": KEY_1})) as both:
            assert both.rekey() > 0
        with psycopg.connect(pg_url, autocommit=True) as conn:
            (row,) = conn.execute(
                "SELECT metadata::text || metadata_undo::text FROM colosseum_threads "
                "WHERE thread_id = %s",
                (thread_id,),
            ).fetchone()
        assert '"k": "k2"' in row and '"k": "k1"' not in row, row
        with worker(pg_url, hot=False, encryption=Encryption({"k2": KEY_2})) as new:
            new.runs(stepped_graph(new, {}), "rollback").invoke({"messages": ["qb"]}, config)
            holds["qa:think"][1].set()
            a.join(WAIT)
            assert isinstance(outcome[0], RunRolledBackError), outcome
            assert set_by_callers(new, thread_id) == {"topic": "zero"}


def settled_by_older_code(url: str, thread_id: str, run_id: str) -> None:
    """What a reader of older code (saver.runs.get / list, before the records
    were read as of their lease) wrote on reading a run past its lease: the
    record `error`, stopped by "lease", and the thread let go."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute(
            "UPDATE colosseum_runs SET status = 'error', stopped_by = 'lease', "
            "ended_at = clock_timestamp(), lease_until = NULL, error = %s "
            "WHERE thread_id = %s AND run_id = %s AND status = 'running'",
            (multitask.LEASE_LAPSED, thread_id, run_id),
        )
        conn.execute(
            "UPDATE colosseum_threads SET run_owner = NULL, run_lease_until = NULL, "
            "status = 'idle' WHERE thread_id = %s AND run_owner = %s",
            (thread_id, run_id),
        )


@pytest.mark.parametrize("looked", ["unread", "read", "settled-by-older-code"])
@pytest.mark.parametrize(
    "strategy, told", [("rollback", RunRolledBackError), ("interrupt", RunInterruptedError)]
)
def test_a_lapsed_run_overtaken_is_stopped_as_a_live_one_whoever_looked_first(
    pg_url: str, looked: str, strategy: str, told: type
) -> None:
    """A run paused past its lease (a GC pause, SIGSTOP, a slow call) and then
    overtaken by a `rollback` or `interrupt` run is stopped as a live one is:
    rolled back, or kept up to its last stored step, its record `rolled_back`
    or `interrupted` and stopped by the new run, and its caller told exactly
    that. Whether nobody read its record before (`unread`), every reader did
    (`read`: they show it as `error`, and write nothing), or a reader of older
    code settled it (`settled-by-older-code`: it let go of the thread, and the
    take used to find no holder to stop)."""
    from langgraph_colosseum.inspection import Inspector

    truncate(pg_url)
    thread_id = new_thread(f"lapsed-{strategy}")
    holds = {"qa": (threading.Event(), threading.Event())}
    config = {"configurable": {"thread_id": thread_id}}
    with worker(pg_url, hot=False) as saver:
        # A lease nobody renews during the test: its lapse is set below, by hand.
        runs = saver.runs(held_graph(saver, holds), "enqueue", lease=timedelta(hours=1))
        runs.invoke({"messages": ["q0"]}, config)
        outcome: list[Any] = []
        a = in_thread(lambda: runs.invoke({"messages": ["qa"]}, config, durability="sync"), outcome)
        assert holds["qa"][0].wait(WAIT)  # A's input checkpoint is stored; A is in `answer`
        (a_run,) = [r for r in saver.runs.list(thread_id) if r.status == "running"]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE colosseum_threads SET run_lease_until = now() - interval '1 second' "
                "WHERE thread_id = %s",
                (thread_id,),
            )
        if looked == "read":
            seen = saver.runs.get(a_run.run_id)
            assert (seen.status, seen.stopped_by) == ("error", "lease")
            assert [r.status for r in saver.runs.list(thread_id)] == ["success", "error"]
            assert saver.threads.get(thread_id).status == "idle"
            shown = Inspector(saver).runs(thread_id)["runs"]
            assert [r["status"] for r in shown] == ["success", "error"]
        elif looked == "settled-by-older-code":
            settled_by_older_code(pg_url, thread_id, a_run.run_id)
        result = runs.invoke({"messages": ["qb"]}, config, multitask_strategy=strategy)
        holds["qa"][1].set()
        a.join(WAIT)
        assert type(outcome[0]) is told, outcome
        b_run = saver.runs.list(thread_id)[-1]
        assert outcome[0].stopped_by == b_run.run_id
        stopped = saver.runs.get(a_run.run_id)
        final = {"rollback": "rolled_back", "interrupt": "interrupted"}[strategy]
        assert (stopped.status, stopped.stopped_by, stopped.error) == (final, b_run.run_id, None)
        assert outcome[0].status == final
        kept = {"rollback": [], "interrupt": ["qa"]}[strategy]
        assert result["messages"] == ["q0", "q0:answer", *kept, "qb", "qb:answer"]
        if strategy == "rollback":
            assert traces(pg_url, thread_id, "qa") == []


def _in_redis(thread_id: str, text: str) -> list[str]:
    """The Redis keys of `thread_id` whose contents hold `text`."""
    client = redis.Redis.from_url(redis_url())
    try:
        return [
            repr(key)
            for key in client.scan_iter(match=f"{CACHE_PREFIX}*{thread_id}*", count=1000)
            if client.type(key) == b"hash"
            and text.encode() in b"".join(k + v for k, v in client.hgetall(key).items())
        ]
    finally:
        client.close()


def _before_rollbacks_due(request: Any) -> bool:
    return isinstance(request, Query) and request.sql == multitask.ROLLBACKS_DUE


def _before_recording_rolled_back(request: Any) -> bool:
    """The rollback's last step: its rows are deleted, its record not yet `rolled_back`."""
    return isinstance(request, Transaction) and any(
        query.sql == multitask.ROLLED_BACK for query in request.queries
    )


@pytest.mark.parametrize("hot", [False, True], ids=["postgres", "redis"])
@pytest.mark.parametrize(
    "stopped_at",
    [_before_rollbacks_due, _before_recording_rolled_back],
    ids=["before-its-delete", "after-its-delete"],
)
def test_a_rollback_stopped_midway_is_finished_by_the_run_that_takes_the_thread_next(
    pg_url: str, hot: bool, stopped_at: Any
) -> None:
    """README: "A rollback stopped midway is finished by whichever run takes the
    thread next, before that run reads the state." B takes the thread from A to
    roll it back; at `stopped_at` (B's rollback not begun, or its rows deleted
    and its record not yet written), C takes the thread from B with
    `interrupt` and runs to its end. C must start from the state before A,
    nothing of A may be readable anywhere (Postgres, Redis, get_state), A's
    caller is told it was rolled back, and B's that it was interrupted."""
    thread_id = new_thread("midway")
    config = {"configurable": {"thread_id": thread_id}}
    holds = {"qa-midway": (threading.Event(), threading.Event())}
    with (
        worker(pg_url, hot=hot) as first,
        worker(pg_url, hot=hot) as second,
        worker(pg_url, hot=hot) as third,
    ):
        runs_a = first.runs(held_graph(first, holds), "reject")
        runs_a.invoke({"messages": ["q0"]}, config, durability="sync")
        outcome_a: list[Any] = []
        a = in_thread(
            lambda: runs_a.invoke({"messages": ["qa-midway"]}, config, durability="sync"),
            outcome_a,
        )
        assert holds["qa-midway"][0].wait(WAIT)  # A has stored its input, and waits
        outcome_c: list[Any] = []

        def c_takes_the_thread() -> None:
            runs_c = third.runs(held_graph(third, {}), "interrupt")
            outcome_c.append(runs_c.invoke({"messages": ["qc"]}, config))

        second.before = hook = Once(stopped_at, c_takes_the_thread)
        runs_b = second.runs(held_graph(second, {}), "rollback")
        with pytest.raises(RunInterruptedError):
            runs_b.invoke({"messages": ["qb"]}, config)
        second.before = None
        holds["qa-midway"][1].set()
        a.join(WAIT)

        assert hook.fired
        assert isinstance(outcome_a[0], RunRolledBackError), outcome_a
        assert outcome_c == [{"messages": ["q0", "q0:answer", "qc", "qc:answer"]}]
        assert runs_a.get_state(config).values["messages"] == ["q0", "q0:answer", "qc", "qc:answer"]
        history = [s.values.get("messages") for s in runs_a.graph.get_state_history(config)]
        assert not any("qa-midway" in repr(m) for m in history)
        assert traces(pg_url, thread_id, "qa-midway") == []
        assert _in_redis(thread_id, "qa-midway") == []
        status = {r.run_id: r.status for r in first.runs.list(thread_id)}
        assert sorted(status.values()) == ["interrupted", "rolled_back", "success", "success"]
