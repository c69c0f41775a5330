"""The order in which a run's transactions lock rows (`saver.runs(graph)`, issue 15).

A run that takes the thread with `interrupt` or `rollback` (TAKE) locks the
thread row, then updates the record of the run it stops. Every other
transaction that updates a run's record and the thread row (FINISH, a
rollback's ROLLED_BACK, CANCEL) must lock in the same order: if it updated a
run's record first and then waited for the thread row, the two would each hold
what the other waits for. Postgres breaks that deadlock only after
`deadlock_timeout` (1 s by default), aborting one side, which is rerun: a
second of latency added to exactly the moment a user double-texts.

Each test holds the thread row in an open transaction, as a TAKE does, lets
the transaction under test reach it (a hook on the saver's requests where it
has to start in the middle of an operation), waits until Postgres shows it
blocked behind the holder, and then asks, without waiting, for the run record
the TAKE would update next.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_colosseum import ColosseumSaver, ThreadBusyError
from langgraph_colosseum._core import multitask, threads
from langgraph_colosseum._core.guard import RUN_OWNER, RunFence
from langgraph_colosseum._core.io import Request, Transaction
from tests.integration.locks import WAIT, blocked_behind, wait_until
from tests.integration.test_guards import Once, worker
from tests.integration.test_runs_stopped import in_thread


def start(saver: ColosseumSaver, thread_id: str, run_id: str, strategy: str) -> int:
    return saver._run(
        multitask.start(saver._store, thread_id, run_id, strategy, "test:1", 30.0, None)
    )


class ThreadRowHolder:
    """Another transaction holding the thread row, as a stopping TAKE does before
    it updates the record of the run it stops. `probe_after_blocked` (in a
    thread of its own) waits until some backend waits behind it, then asks for
    that run record without waiting, records whether it got it, and lets go."""

    def __init__(self, pg_url: str, thread_id: str) -> None:
        self.pg_url, self.thread_id = pg_url, thread_id
        self.got_the_record: bool | None = None

    def hold(self) -> None:
        self.taker = psycopg.connect(self.pg_url)
        self.taker.execute(multitask.LOCK_THREAD, {"thread_id": self.thread_id})

    def probe_after_blocked(self, run_id: str) -> threading.Thread:
        def probe() -> None:
            with psycopg.connect(self.pg_url, autocommit=True) as watcher:
                try:
                    wait_until(lambda: blocked_behind(watcher, self.taker.info.backend_pid))
                except AssertionError:
                    pass  # the transaction under test never reached the row
                else:
                    try:
                        self.taker.execute(
                            "SELECT 1 FROM colosseum_runs WHERE thread_id = %s AND run_id = %s"
                            " FOR UPDATE NOWAIT",
                            (self.thread_id, run_id),
                        )
                        self.got_the_record = True
                    except psycopg.errors.LockNotAvailable:
                        self.got_the_record = False
            self.taker.rollback()
            self.taker.close()

        prober = threading.Thread(target=probe)
        prober.start()
        return prober


def thread_metadata(saver: ColosseumSaver, thread_id: str) -> dict[str, Any]:
    info = saver.threads.get(thread_id)
    assert info is not None
    return info.metadata


def test_a_finish_waiting_for_the_thread_row_holds_no_run_record(pg_url: str) -> None:
    """While another transaction holds the thread row (as a stopping TAKE does
    before it updates the stopped run's record), a run's FINISH waits for it
    without holding its own run record: the TAKE can still update that
    record, so the two cannot deadlock. Then FINISH ends the run as asked."""
    thread_id, run_id = f"lock-order-{uuid.uuid4()}", str(uuid.uuid4())
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        token = start(saver, thread_id, run_id, "reject")
        holder = ThreadRowHolder(pg_url, thread_id)
        holder.hold()
        outcome: list[Any] = []
        finisher = in_thread(
            lambda: saver._run(multitask.finish(thread_id, run_id, token, "success", None)),
            outcome,
        )
        holder.probe_after_blocked(run_id).join(WAIT)
        finisher.join(WAIT)
        assert not finisher.is_alive()
        assert holder.got_the_record is True, (
            "FINISH held the run's record while it waited for the thread row"
        )
        assert len(outcome) == 1 and outcome[0][0] is True  # ended, stopped by nobody
        info = saver.runs.get(run_id)
        assert info is not None and info.status == "success"


def test_a_cancel_waiting_for_the_thread_row_holds_no_run_record(pg_url: str) -> None:
    """A cancel stops the running run (its record) and lets go of the thread
    (the thread row): it takes the thread row first, so a TAKE holding that row
    can still stop the run, and the cancel then finds it stopped already."""
    thread_id, run_id = f"lock-order-cancel-{uuid.uuid4()}", str(uuid.uuid4())
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        start(saver, thread_id, run_id, "reject")
        holder = ThreadRowHolder(pg_url, thread_id)
        holder.hold()
        outcome: list[Any] = []
        canceller = in_thread(lambda: saver.runs.cancel(thread_id=thread_id), outcome)
        holder.probe_after_blocked(run_id).join(WAIT)
        canceller.join(WAIT)
        assert not canceller.is_alive()
        assert holder.got_the_record is True, "CANCEL held the run's record while it waited"
        assert outcome == [[run_id]]
        info = saver.runs.get(run_id)
        assert info is not None and info.status == "interrupted"
        assert info.stopped_by == "cancel"


def test_a_rollback_waiting_for_the_thread_row_holds_no_run_record(pg_url: str) -> None:
    """After its take, a rollback marks the stopped run rolled back (its record)
    and puts back the registry metadata the run set (the thread row). It takes
    the thread row first: a TAKE by a third run holding that row meanwhile can
    still update the stopped run's record. Then the rollback ends as it should:
    the run rolled back and the key it set gone."""
    thread_id = f"lock-order-rollback-{uuid.uuid4()}"
    stopped, stopper = str(uuid.uuid4()), str(uuid.uuid4())
    with worker(pg_url, hot=False) as saver:
        token = start(saver, thread_id, stopped, "reject")
        fence = RUN_OWNER.set(RunFence(thread_id, stopped, token))
        try:  # the run's put sets a registry key, which its rollback takes back
            config: RunnableConfig = {
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ""},
                "metadata": {"topic": "from-the-run"},
            }
            saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        finally:
            RUN_OWNER.reset(fence)
        assert thread_metadata(saver, thread_id)["topic"] == "from-the-run"
        holder = ThreadRowHolder(pg_url, thread_id)
        probes: list[threading.Thread] = []

        def rolled_back(request: Request) -> bool:
            return isinstance(request, Transaction) and any(
                query.sql == multitask.ROLLED_BACK for query in request.queries
            )

        def hold_and_probe() -> None:
            holder.hold()
            probes.append(holder.probe_after_blocked(stopped))

        saver.before = hook = Once(rolled_back, hold_and_probe)
        start(saver, thread_id, stopper, "rollback")
        assert hook.fired
        probes[0].join(WAIT)
        assert holder.got_the_record is True, (
            "ROLLED_BACK held the stopped run's record while it waited for the thread row"
        )
        info = saver.runs.get(stopped)
        assert info is not None and info.status == "rolled_back"
        assert "topic" not in thread_metadata(saver, thread_id)


def test_a_take_arriving_while_the_holder_ends_waits_for_its_end(pg_url: str) -> None:
    """A `reject` take sent while the holder's FINISH is in flight (it holds the
    thread row, has ended its run and not yet let go of the thread) reads the
    thread as that FINISH leaves it: free. It waits the few milliseconds to the
    commit and takes the thread, rather than being refused as busy by a run
    that had ended. (INSERT ... ON CONFLICT, the take's statement before, waits
    only for a transaction that has already updated the row.)"""
    thread_id, ending_run, next_run = f"lock-order-end-{uuid.uuid4()}", "ending", "next"
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        token = start(saver, thread_id, ending_run, "reject")
        params = {
            "thread_id": thread_id, "run_id": ending_run, "token": token, "status": "success",
            "error": None, "channel": multitask.CHANNEL, "owner": ending_run,
        }  # fmt: skip
        with (
            psycopg.connect(pg_url) as finisher,
            psycopg.connect(pg_url, autocommit=True) as watcher,
        ):
            # The holder's FINISH, its statements one at a time, up to RELEASE.
            finisher.execute(multitask.LOCK_THREAD, params)
            finisher.execute(multitask.FINISH, params)
            outcome: list[Any] = []
            taker = in_thread(lambda: start(saver, thread_id, next_run, "reject"), outcome)
            wait_until(
                lambda: not taker.is_alive() or blocked_behind(watcher, finisher.info.backend_pid),
                "the take neither waited nor ended",
            )
            finisher.execute(threads.RELEASE, params)
            finisher.execute(multitask.WAKE, {"thread_id": thread_id, "ended": [ending_run]})
            finisher.commit()
            taker.join(WAIT)
        assert not taker.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], int), outcome
        ended, running = saver.runs.get(ending_run), saver.runs.get(next_run)
        assert ended is not None and ended.status == "success" and ended.stopped_by is None
        assert running is not None and running.status == "running"


def test_a_take_waiting_for_the_thread_row_reads_it_as_that_holder_left_it(
    pg_url: str,
) -> None:
    """A take judges the thread by its row as of after every transaction
    holding that row. Here the holder's lease has lapsed (its process was
    paused) and its renewal (RENEW) is in flight when a `reject` take arrives:
    the take waits for the renewal and then finds a live holder, and refuses.
    It never stops a run whose lease was renewed before the take was decided.
    (Held twice: by the take's LOCK_THREAD, and by its INSERT ... ON CONFLICT
    before it, which waits for a transaction that has updated the row.)"""
    thread_id, holder_run, late_run = f"lock-order-take-{uuid.uuid4()}", "holder", "late"
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver:
        start(saver, thread_id, holder_run, "reject")
        with psycopg.connect(pg_url, autocommit=True) as conn:  # paused past its lease
            conn.execute(
                "UPDATE colosseum_threads SET run_lease_until = now() - interval '1 second'"
                " WHERE thread_id = %s",
                (thread_id,),
            )
        with (
            psycopg.connect(pg_url) as renewer,
            psycopg.connect(pg_url, autocommit=True) as watcher,
        ):
            renewer.execute(
                threads.RENEW, {"thread_id": thread_id, "owner": holder_run, "lease": 30.0}
            )
            outcome: list[Any] = []
            taker = in_thread(lambda: start(saver, thread_id, late_run, "reject"), outcome)
            wait_until(
                lambda: blocked_behind(watcher, renewer.info.backend_pid),
                "the take never reached the thread row",
            )
            renewer.commit()
            taker.join(WAIT)
        assert not taker.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], ThreadBusyError), outcome
        info = saver.runs.get(holder_run)
        assert info is not None and info.status == "running", info
