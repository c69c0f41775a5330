"""The tool ledger across copies and deletions: side effects happen once, and
deleted stays deleted.

* A copy shares its source's ledger rows (keyed by lineage): deleting the copy,
  by `delete_thread` or by the retention sweep, must leave them to the source.
* A run whose thread (or run) was deleted while it was in flight has its tool
  claims refused in the claim's statement: the tool does not run for it, and
  nothing of it stays in the ledger.
* Nothing of a deleted thread's ledger answers a new thread on the same id,
  not even rows that a surviving copy inherited.

Each test counts the tool's calls in process (the tool is a plain function of
the test); the ledger table is read only to check what is left in it.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from langgraph_colosseum import (
    AsyncColosseumSaver,
    CheckpointDeletedError,
    ColosseumSaver,
    IdempotentToolNode,
    Retention,
)
from langgraph_colosseum._core.ledger import default_key, is_claim
from langgraph_colosseum._core.runs import Runs
from tests.conftest import CACHE_PREFIX, redis_url


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def new_tid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


def cfg(tid: str, **configurable: Any) -> dict:
    return {"configurable": {"thread_id": tid, **configurable}}


class Bank:
    """The side effect: every call of `pay` is counted here."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.lock = threading.Lock()

        @tool
        def pay(to: str, amount: int) -> str:
            """Pay someone."""
            with self.lock:
                self.calls.append((to, amount))
                return f"paid {amount} (call #{len(self.calls)})"

        self.pay = pay


def payment_graph(
    saver: Any,
    bank: Bank,
    *,
    before_agent: Any = None,
    key: Any = default_key,
    interrupt_before: list[str] | None = None,
) -> Any:
    """agent (asks for one payment) -> tools -> END."""

    def agent(state: State, config: RunnableConfig) -> dict:
        if before_agent is not None:
            before_agent(config)
        call = {"name": "pay", "args": {"to": "bob", "amount": 5}, "id": "call-1"}
        return {"messages": [AIMessage("", tool_calls=[call])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", IdempotentToolNode([bank.pay], key=key))
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=saver, interrupt_before=interrupt_before)


def ledger_rows(url: str, *thread_ids: str) -> list[tuple[str, str]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT thread_id, status FROM colosseum_tool_calls WHERE thread_id = ANY(%s) "
            "ORDER BY thread_id",
            (list(thread_ids),),
        ).fetchall()


def last_answer(state: dict) -> str:
    return str(state["messages"][-1].content)


# ------------------------------------------ 1. a copy shares its source's rows


def _source_and_paid_copy(saver: ColosseumSaver, bank: Bank, url: str) -> tuple[Any, str, str]:
    """Source A stopped before `tools`; copy B resumed and paid (B's row, A's key)."""
    graph = payment_graph(saver, bank, interrupt_before=["tools"])
    source, copy = new_tid("lineage-src"), new_tid("lineage-copy")
    graph.invoke({"messages": []}, cfg(source))
    assert graph.get_state(cfg(source)).next == ("tools",)
    saver.copy_thread(source, copy)
    assert last_answer(graph.invoke(None, cfg(copy))) == "paid 5 (call #1)"
    assert bank.calls == [("bob", 5)]
    assert ledger_rows(url, source, copy) == [(copy, "SUCCESS")]
    return graph, source, copy


def test_deleting_a_copy_leaves_the_source_its_ledger(pg_url: str) -> None:
    """The copy paid for both (one key, the source's lineage); deleting the copy
    must not make the source pay again."""
    bank = Bank()
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph, source, copy = _source_and_paid_copy(saver, bank, pg_url)
        saver.delete_thread(copy)
        assert ledger_rows(pg_url, source, copy) == [(source, "SUCCESS")]
        assert last_answer(graph.invoke(None, cfg(source))) == "paid 5 (call #1)"
    assert bank.calls == [("bob", 5)], "the source paid again after its copy was deleted"


async def test_deleting_a_copy_leaves_the_source_its_ledger_async(pg_url: str) -> None:
    bank = Bank()
    async with AsyncColosseumSaver.from_conn_string(pg_url) as saver:
        graph = payment_graph(saver, bank, interrupt_before=["tools"])
        source, copy = new_tid("alineage-src"), new_tid("alineage-copy")
        await graph.ainvoke({"messages": []}, cfg(source))
        await saver.acopy_thread(source, copy)
        assert last_answer(await graph.ainvoke(None, cfg(copy))) == "paid 5 (call #1)"
        await saver.adelete_thread(copy)
        assert last_answer(await graph.ainvoke(None, cfg(source))) == "paid 5 (call #1)"
    assert bank.calls == [("bob", 5)], "the source paid again after its copy was deleted"


def test_the_sweep_expiring_a_copy_leaves_the_source_its_ledger(pg_url: str) -> None:
    bank = Bank()
    retention = Retention(timedelta(days=1))
    with ColosseumSaver.from_conn_string(pg_url, retention=retention) as saver:
        graph, source, copy = _source_and_paid_copy(saver, bank, pg_url)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE colosseum_threads SET expires_at = now() - interval '1 second' "
                "WHERE thread_id = %s",
                (copy,),
            )
        assert saver.sweep() >= 1
        assert saver.threads.get(copy) is None and saver.threads.get(source) is not None
        assert ledger_rows(pg_url, source, copy) == [(source, "SUCCESS")]
        assert last_answer(graph.invoke(None, cfg(source))) == "paid 5 (call #1)"
    assert bank.calls == [("bob", 5)], "the source paid again after the sweep took its copy"


def test_a_copy_made_before_sources_were_recorded_still_leaves_the_source_its_ledger(
    pg_url: str,
) -> None:
    """Copies made by earlier versions recorded only the copy's lineage, not the
    source's: the source is still found (the living thread whose id is the
    lineage) when the copy is deleted."""
    bank = Bank()
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph, source, copy = _source_and_paid_copy(saver, bank, pg_url)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DELETE FROM colosseum_thread_lineage WHERE thread_id = %s", (source,))
        saver.delete_thread(copy)
        assert last_answer(graph.invoke(None, cfg(source))) == "paid 5 (call #1)"
    assert bank.calls == [("bob", 5)]


def test_deleting_a_source_copied_before_sources_were_recorded_hands_its_rows_on(
    pg_url: str,
) -> None:
    """Such a source (no lineage row) is its own lineage: its rows are handed to
    its copy, found by that lineage as it was before the deletion is recorded
    (which makes the id's lineage another one)."""
    bank = Bank()
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph = payment_graph(saver, bank)
        source, copy = new_tid("old-src"), new_tid("old-src-copy")
        assert last_answer(graph.invoke({"messages": []}, cfg(source))) == "paid 5 (call #1)"
        saver.copy_thread(source, copy)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DELETE FROM colosseum_thread_lineage WHERE thread_id = %s", (source,))
        saver.delete_thread(source)
        assert ledger_rows(pg_url, source, copy) == [(copy, "SUCCESS")]
        graph.update_state(cfg(copy), None, as_node="agent")
        assert last_answer(graph.invoke(None, cfg(copy))) == "paid 5 (call #1)"
    assert bank.calls == [("bob", 5)]


def test_deleting_a_copy_of_a_thread_on_a_reused_id_leaves_it_its_ledger(pg_url: str) -> None:
    """The source is a new thread on a deleted id (its lineage is not its bare
    id): its copy records it, and deleting the copy hands the rows back to it."""
    bank = Bank()
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph = payment_graph(saver, bank, interrupt_before=["tools"])
        source, copy = new_tid("reused-src"), new_tid("reused-src-copy")
        graph.invoke({"messages": []}, cfg(source))
        saver.delete_thread(source)
        graph.invoke({"messages": []}, cfg(source))
        saver.copy_thread(source, copy)
        assert last_answer(graph.invoke(None, cfg(copy))) == "paid 5 (call #1)"
        saver.delete_thread(copy)
        assert last_answer(graph.invoke(None, cfg(source))) == "paid 5 (call #1)"
    assert bank.calls == [("bob", 5)]


def test_deleting_every_thread_of_a_lineage_deletes_its_ledger(pg_url: str) -> None:
    """Source first, then the copy that inherited the rows; and the other order."""
    for order in ("source first", "copy first"):
        bank = Bank()
        with ColosseumSaver.from_conn_string(pg_url) as saver:
            _, source, copy = _source_and_paid_copy(saver, bank, pg_url)
            first, second = (source, copy) if order == "source first" else (copy, source)
            saver.delete_thread(first)
            assert [status for _, status in ledger_rows(pg_url, source, copy)] == ["SUCCESS"]
            saver.delete_thread(second)
            assert ledger_rows(pg_url, source, copy) == [], order


# ------------------------------- 2. a deleted thread's run claims nothing


def _stored(url: str, thread_id: str, checkpoint_id: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return (
            conn.execute(
                "SELECT 1 FROM colosseum_checkpoints WHERE thread_id = %s AND checkpoint_id = %s",
                (thread_id, checkpoint_id),
            ).fetchone()
            is not None
        )


def _wait_until_stored(url: str, thread_id: str, checkpoint_id: str) -> None:
    """Until the put of `checkpoint_id` (sent in the background) has landed."""
    deadline = time.monotonic() + 30
    while not _stored(url, thread_id, checkpoint_id):
        assert time.monotonic() < deadline, f"checkpoint {checkpoint_id} was never stored"
        time.sleep(0.01)


def test_a_run_whose_thread_is_deleted_mid_run_does_not_pay(pg_url: str) -> None:
    """The agent step's checkpoint is stored, then another process deletes the
    thread while the agent runs. The tools step (a checkpoint made after the
    deletion, whose put is refused in the background) must not pay for the
    deleted thread, leave nothing in the ledger, and a new run on the same
    thread_id pays for itself (the audit's del_ledger.py)."""
    bank = Bank()
    tid = new_tid("deleted-mid-run")
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        deleted: list[str] = []

        def delete_once(config: dict) -> None:
            if not deleted:
                checkpoint_id = config["configurable"]["checkpoint_map"][""]
                _wait_until_stored(pg_url, tid, checkpoint_id)
                saver.delete_thread(tid)  # as another process would
                deleted.append(checkpoint_id)

        graph = payment_graph(saver, bank, before_agent=delete_once)
        with pytest.raises(CheckpointDeletedError) as refused:
            graph.invoke({"messages": []}, cfg(tid))
        assert refused.value.thread_id == tid
        assert bank.calls == [], "the tool ran for a run of a deleted thread"
        assert ledger_rows(pg_url, tid) == [], "the deleted thread's run left ledger rows"

        state = graph.invoke({"messages": []}, cfg(tid))
        assert last_answer(state) == "paid 5 (call #1)"
        assert bank.calls == [("bob", 5)]
        assert ledger_rows(pg_url, tid) == [(tid, "SUCCESS")]


def test_an_exit_run_whose_thread_is_deleted_mid_run_does_not_pay(pg_url: str) -> None:
    """durability="exit": nothing of the run is stored before its end, so no
    stored checkpoint tells the claim that the thread it runs for was deleted
    while the agent ran; the run read the thread before the deletion, and its
    claim carries what that read saw. The tool is not called, nothing stays in the
    ledger, and the run's end does not bring the thread back."""
    bank = Bank()
    tid = new_tid("deleted-mid-exit-run")
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph = payment_graph(saver, bank, before_agent=lambda config: saver.delete_thread(tid))
        with pytest.raises(CheckpointDeletedError) as refused:
            graph.invoke({"messages": []}, cfg(tid), durability="exit")
        assert refused.value.thread_id == tid
        assert bank.calls == [], "the tool ran for a run of a deleted thread"
        assert ledger_rows(pg_url, tid) == [], "the deleted thread's run left ledger rows"
        assert saver.get_tuple(cfg(tid)) is None


def exit_payment_graph(saver: Any, bank: Bank, purge: Any) -> Any:
    """purge (awaited, on an async saver) -> agent (asks for one payment) -> tools."""
    call = {"name": "pay", "args": {"to": "bob", "amount": 5}, "id": "call-1"}

    def agent(state: State) -> dict:
        return {"messages": [AIMessage("", tool_calls=[call])]}

    builder = StateGraph(State)
    builder.add_node("purge", purge)
    builder.add_node("agent", agent)
    builder.add_node("tools", IdempotentToolNode([bank.pay]))
    builder.add_edge(START, "purge")
    builder.add_edge("purge", "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=saver)


def one_step_graph(saver: Any) -> Any:
    """Each invoke is one more run this saver's process sees."""
    builder = StateGraph(State)
    builder.add_node("noop", lambda state: {})
    builder.add_edge(START, "noop")
    builder.add_edge("noop", END)
    return builder.compile(checkpointer=saver)


def head_options(hot: bool) -> dict:
    return {"redis_url": redis_url(), "cache_prefix": CACHE_PREFIX} if hot else {}


# durability="exit", the thread deleted mid-run, on every saver: the claim is
# refused in its statement. "forgotten": the process keeps one run, and the
# node that deletes also runs another graph, so the run's first read is
# forgotten by the time it claims; it then counts as having read the thread
# before any deletion of it.
EXIT_CASES = [
    pytest.param(
        hot, forget, id=f"{'redis' if hot else 'postgres'}-{'forgotten' if forget else 'kept'}"
    )
    for hot in (False, True)
    for forget in (False, True)
]


@pytest.mark.parametrize(("hot", "forget"), EXIT_CASES)
def test_an_exit_run_whose_thread_is_deleted_does_not_pay_sync(
    pg_url: str, hot: bool, forget: bool
) -> None:
    bank, tid = Bank(), new_tid("exit-deleted")
    with ColosseumSaver.from_conn_string(pg_url, **head_options(hot)) as saver:
        if forget:
            saver._store.runs = Runs(kept=1)
        other = one_step_graph(saver)

        def purge(state: State) -> dict:
            saver.delete_thread(tid)
            if forget:
                other.invoke({"messages": []}, cfg(new_tid("other")), durability="exit")
            return {}

        graph = exit_payment_graph(saver, bank, purge)
        with pytest.raises(CheckpointDeletedError) as refused:
            graph.invoke({"messages": []}, cfg(tid), durability="exit")
        assert refused.value.thread_id == tid
        assert bank.calls == [], "the tool ran for a run of a deleted thread"
        assert ledger_rows(pg_url, tid) == []
        assert saver.get_tuple(cfg(tid)) is None
        assert graph.get_state(cfg(tid)).values == {}


@pytest.mark.parametrize(("hot", "forget"), EXIT_CASES)
async def test_an_exit_run_whose_thread_is_deleted_does_not_pay_async(
    pg_url: str, hot: bool, forget: bool
) -> None:
    bank, tid = Bank(), new_tid("aexit-deleted")
    async with AsyncColosseumSaver.from_conn_string(pg_url, **head_options(hot)) as saver:
        if forget:
            saver._store.runs = Runs(kept=1)
        other = one_step_graph(saver)

        async def purge(state: State) -> dict:
            await saver.adelete_thread(tid)
            if forget:
                await other.ainvoke({"messages": []}, cfg(new_tid("other")), durability="exit")
            return {}

        graph = exit_payment_graph(saver, bank, purge)
        with pytest.raises(CheckpointDeletedError) as refused:
            await graph.ainvoke({"messages": []}, cfg(tid), durability="exit")
        assert refused.value.thread_id == tid
        assert bank.calls == [], "the tool ran for a run of a deleted thread"
        assert ledger_rows(pg_url, tid) == []
        assert await saver.aget_tuple(cfg(tid)) is None
        assert (await graph.aget_state(cfg(tid))).values == {}


def _delete_at_claim(action: Any) -> Any:
    """A key function that runs `action` (a deletion) once, right before the claim."""
    done: list[bool] = []

    def key(call: Any) -> str:
        if not done:
            done.append(True)
            action()
        return default_key(call)

    return key


def test_a_claim_for_a_checkpoint_made_before_its_thread_was_deleted_is_refused(
    pg_url: str,
) -> None:
    """durability="exit": nothing of the run is stored when the thread is deleted
    (between the tools step's start and its claim), so no tombstone names its
    checkpoint; the run read the thread before the deletion, and its claim
    carries what that read saw."""
    bank = Bank()
    tid = new_tid("deleted-before-claim")
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph = payment_graph(saver, bank, key=_delete_at_claim(lambda: saver.delete_thread(tid)))
        with pytest.raises(CheckpointDeletedError):
            graph.invoke({"messages": []}, cfg(tid), durability="exit")
        assert bank.calls == []
        assert ledger_rows(pg_url, tid) == []


def test_a_claim_descending_from_a_pruned_checkpoint_is_refused(pg_url: str) -> None:
    """prune deletes checkpoints, not the thread: no deletion stamp moves. The
    checkpoint the tools step runs on (stored: durability="sync") is pruned
    before its claim, a newer one kept: the claim names it, and is refused."""
    bank = Bank()
    tid = new_tid("pruned-before-claim")
    with ColosseumSaver.from_conn_string(pg_url) as saver:

        def prune_under_the_step() -> None:
            head = saver.get_tuple(cfg(tid))
            assert head is not None and head.metadata["step"] == 1  # the tools step's
            saver.put(head.config, empty_checkpoint(), {"source": "update", "step": 2}, {})
            saver.prune([tid])  # keeps the newest: the one just put

        graph = payment_graph(saver, bank, key=_delete_at_claim(prune_under_the_step))
        with pytest.raises(CheckpointDeletedError) as refused:
            graph.invoke({"messages": []}, cfg(tid), durability="sync")
        assert refused.value.thread_id == tid
        assert bank.calls == []
        assert ledger_rows(pg_url, tid) == []


def test_a_claim_of_a_deleted_run_is_refused(pg_url: str) -> None:
    bank = Bank()
    tid, run_id = new_tid("deleted-run-claim"), str(uuid.uuid4())
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph = payment_graph(
            saver, bank, key=_delete_at_claim(lambda: saver.delete_for_runs([run_id]))
        )
        with pytest.raises(CheckpointDeletedError):
            graph.invoke({"messages": []}, cfg(tid, run_id=run_id), durability="exit")
        assert bank.calls == []
        assert ledger_rows(pg_url, tid) == []


def test_a_claim_waits_for_a_delete_in_flight(pg_url: str) -> None:
    """delete_thread has deleted the ledger rows and recorded the deletion, not yet
    committed (held on its last statement by a row lock of this test), when a
    stale worker resumes the thread and claims. The claim must wait for the
    delete and be refused; a claim that went ahead would pay and leave a row
    of the deleted thread behind."""
    bank = Bank()
    tid = new_tid("claim-vs-delete")
    with (
        ColosseumSaver.from_conn_string(pg_url) as stale,
        ColosseumSaver.from_conn_string(pg_url) as deleter,
    ):
        graph = payment_graph(stale, bank, interrupt_before=["tools"])
        graph.invoke({"messages": []}, cfg(tid))
        with psycopg.connect(pg_url) as holder:
            holder.execute(
                "SELECT 1 FROM colosseum_checkpoints WHERE thread_id = %s FOR UPDATE", (tid,)
            )
            delete = threading.Thread(target=deleter.delete_thread, args=(tid,))
            delete.start()
            _wait_for_blocked(pg_url, holder.info.backend_pid)
            (delete_pid,) = _blocked_by(pg_url, holder.info.backend_pid)
            outcome: list[Any] = []

            def resume() -> None:
                try:
                    outcome.append(graph.invoke(None, cfg(tid)))
                except Exception as exc:
                    outcome.append(exc)

            resumer = threading.Thread(target=resume)
            resumer.start()
            _wait_for_blocked(pg_url, delete_pid)  # the claim (or a later write) waits
            holder.rollback()
        delete.join(30)
        resumer.join(30)
        assert not delete.is_alive() and not resumer.is_alive()
    assert bank.calls == [], "the stale worker paid for a thread deleted under it"
    assert ledger_rows(pg_url, tid) == []
    assert isinstance(outcome[0], CheckpointDeletedError), outcome


def _blocked_by(url: str, pid: int) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)
            ).fetchall()
        ]


def _wait_for_blocked(url: str, pid: int) -> None:
    """Until some backend waits for a lock `pid` holds (Postgres says so)."""
    deadline = time.monotonic() + 30
    while not _blocked_by(url, pid):
        assert time.monotonic() < deadline, f"nothing ever waited for backend {pid}"
        time.sleep(0.01)


# --------------------- 3. a new thread on a deleted id gets none of its ledger


def test_a_new_thread_on_a_deleted_id_does_not_get_the_old_ledger(pg_url: str) -> None:
    """The old thread paid and was copied; deleting it hands its rows to the copy
    (which keeps them: it must not pay again). A new thread on the old id is
    another thread: it pays for itself, and does not share the copy's rows."""
    bank = Bank()
    tid, copy = new_tid("reused-id"), new_tid("reused-id-copy")
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        graph = payment_graph(saver, bank)
        assert last_answer(graph.invoke({"messages": []}, cfg(tid))) == "paid 5 (call #1)"
        saver.copy_thread(tid, copy)
        saver.delete_thread(tid)
        assert ledger_rows(pg_url, tid, copy) == [(copy, "SUCCESS")]

        assert last_answer(graph.invoke({"messages": []}, cfg(tid))) == "paid 5 (call #2)"
        assert bank.calls == [("bob", 5)] * 2
        # The copy still has its (inherited) payment: a re-run there does not pay.
        graph.update_state(cfg(copy), None, as_node="agent")
        assert last_answer(graph.invoke(None, cfg(copy))) == "paid 5 (call #1)"
        assert bank.calls == [("bob", 5)] * 2


# ----------------------------- 4. threads.update does not bring a thread back


def test_updating_a_deleted_thread_is_refused_and_writes_nothing(pg_url: str) -> None:
    """A late `threads.update` (a worker that did not see the delete) is a
    ThreadNotFoundError naming the thread, as LangGraph Platform answers 404; the
    registry row stays gone, search does not find it, and the next thread on the
    id does not inherit the late metadata."""
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_colosseum import ThreadNotFoundError

    tid = new_tid("late-update")
    config = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        saver.put(config, empty_checkpoint(), {}, {})
        assert saver.threads.update(tid, metadata={"team": "old"}).metadata == {"team": "old"}
        saver.delete_thread(tid)
        with pytest.raises(ThreadNotFoundError, match=tid) as missing:
            saver.threads.update(tid, metadata={"late": "in-flight worker"})
        assert missing.value.thread_id == tid
        assert saver.threads.get(tid) is None
        assert saver.threads.search(metadata={"late": "in-flight worker"}) == []
        saver.put(config, empty_checkpoint(), {}, {})
        info = saver.threads.get(tid)
        assert info is not None and info.metadata == {}


async def test_updating_a_thread_that_does_not_exist_is_refused_async(pg_url: str) -> None:
    from langgraph_colosseum import ThreadNotFoundError

    tid = new_tid("no-such-thread")
    async with AsyncColosseumSaver.from_conn_string(pg_url) as saver:
        with pytest.raises(ThreadNotFoundError, match=tid):
            await saver.threads.update(tid, metadata={"a": 1})
        assert await saver.threads.get(tid) is None


def test_a_run_deleted_before_any_of_its_puts_landed_leaves_no_ledger(pg_url: str) -> None:
    """LangGraph sends puts in the background: here they (and the writes) are
    held until the tool's claim has been answered. The thread is deleted during
    the agent step, so the tools step's checkpoint (made after the deletion)
    names nothing deleted, and the run has stored nothing yet. The claim is
    refused all the same, in its statement: the run read the thread before the
    deletion, and its claim carries the deletion stamp that read saw
    (store.seen_of), which the deletion has changed since. The tool does
    not run, the run's puts are refused, and no row of the deleted thread stays
    to answer a new run on the same thread_id."""
    bank = Bank()
    run_deleted_before_its_puts(pg_url, bank, new_tid("deleted-before-puts"))
    assert bank.calls == [("bob", 5)], "the deleted thread's run did not pay, the new one did"


def test_a_run_whose_thread_is_deleted_after_its_claim_leaves_no_ledger(pg_url: str) -> None:
    """The same, with the thread deleted right after the tool's claim: nothing
    could tell the claim that the run is doomed, and the tool ran. When its
    puts are refused (the thread was deleted since the run read it), what it
    claimed goes with the writes of its checkpoints that were never stored: no
    row of the deleted thread answers the new run."""
    bank = Bank()
    run_deleted_before_its_puts(pg_url, bank, new_tid("claimed-before-puts"), after_claim=True)
    assert bank.calls == [("bob", 5), ("bob", 5)], "the doomed run paid, the new one again"


def run_deleted_before_its_puts(
    pg_url: str, bank: Bank, tid: str, *, after_claim: bool = False
) -> None:
    """`after_claim`: the thread is deleted once the claim has committed, not
    before the agent step."""
    claimed = threading.Event()
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        put, put_writes, perform = saver.put, saver.put_writes, saver._perform

        def told(request: Any) -> Any:
            try:
                return perform(request)
            finally:
                if is_claim(request):
                    if after_claim:
                        delete_once(None)
                    claimed.set()

        def held(write: Any) -> Any:
            def held_write(*args: Any) -> Any:
                if not claimed.is_set():
                    assert claimed.wait(30), "the tool's claim was never sent"
                return write(*args)

            return held_write

        saver._perform = told  # type: ignore[method-assign]
        saver.put = held(put)  # type: ignore[method-assign]
        saver.put_writes = held(put_writes)  # type: ignore[method-assign]
        deleted: list[bool] = []

        def delete_once(config: RunnableConfig | None) -> None:
            if not deleted:
                deleted.append(True)
                saver.delete_thread(tid)

        graph = payment_graph(saver, bank, before_agent=None if after_claim else delete_once)
        with pytest.raises(CheckpointDeletedError):
            graph.invoke({"messages": []}, cfg(tid))
        assert claimed.is_set()
        assert ledger_rows(pg_url, tid) == [], "the deleted thread's run left ledger rows"
        paid = len(bank.calls) + 1
        assert last_answer(graph.invoke({"messages": []}, cfg(tid))) == f"paid 5 (call #{paid})"
        assert ledger_rows(pg_url, tid) == [(tid, "SUCCESS")]
