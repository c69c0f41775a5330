"""Who a queued run is woken by (`enqueue`), and what it does without LISTEN.

Whatever lets go of a thread or leaves its queue tells the one queued run
whose turn it then is, on that run's own channel (multitask.WAKE); the others
sleep on, renewing their places every third of their leases. These tests hold
what that design must not lose: a waiter told its turn that has died holds the
queue only until its place lapses; a dead place is passed over; a waiter
leaving as the holder lets go does not leave the next one untold; a waiter
whose listening connection cannot be opened, or breaks, still runs. What
draining a queue costs is measured across processes in test_runs.py.

Every waiter here has a lease of 600 s, so its renewals (every 200 s) fall
outside the test: a waiter that runs within WAIT was told, not renewed into it.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum._core import multitask
from tests.conftest import truncate
from tests.integration.locks import blocked_behind, wait_until
from tests.integration.test_runs import WAIT, echo_graph
from tests.integration.test_runs_stopped import in_thread

LONG = timedelta(seconds=600)


class Held:
    """`hold` for echo_graph: the run of message "a" waits in its node until `let_go`."""

    def __init__(self) -> None:
        self.entered, self.released = threading.Event(), threading.Event()

    def __call__(self, msg: str) -> None:
        if msg == "a":
            self.entered.set()
            assert self.released.wait(WAIT)

    def let_go(self) -> None:
        self.released.set()


def place(url: str, thread_id: str, run_id: str) -> None:
    """A queued run's place, recorded by a process that is gone (nobody renews it)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            multitask.ENQUEUE,
            {"thread_id": thread_id, "run_id": run_id, "holder": "gone:1", "lease": 600},
        )


def queued(url: str, thread_id: str) -> list[str]:
    """The thread's pending records (the dead place's id, "b" for each other), as stored."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT run_id FROM colosseum_runs WHERE thread_id = %s AND status = 'pending' "
            "ORDER BY seq",
            (thread_id,),
        ).fetchall()
    return [run_id if run_id == "dead" else "b" for (run_id,) in rows]


def lapse(url: str, run_id: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE colosseum_runs SET lease_until = now() - interval '1 second' WHERE run_id = %s",
            (run_id,),
        )


def listeners(conn: psycopg.Connection) -> list[int]:
    """The backends of this database that sit on a LISTEN of a run's channel."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND query LIKE 'LISTEN \"colosseum_run_%'"
    ).fetchall()
    return [pid for (pid,) in rows]


def pending(saver: Any, thread_id: str) -> list[str]:
    return [r.run_id for r in saver.runs.list(thread_id, status="pending")]


def stop(saver: Any, thread_id: str, waiter: threading.Thread) -> None:
    """A waiter left waiting by a failed test is cancelled, not left to sleep 200 s."""
    if waiter.is_alive():
        saver.runs.cancel(thread_id=thread_id)
        waiter.join(WAIT)


def test_the_next_in_line_goes_once_the_waiter_told_its_turn_has_died(pg_url: str) -> None:
    """The holder lets go: only the first in line is told, on its own channel,
    here a place whose process is gone. The live waiter behind it is not told;
    it goes at its next renewal after the dead place lapsed (a lease of 3 s:
    every second), so a dead waiter holds the queue about a lease at most."""
    truncate(pg_url)
    tid = "told-dead"
    config = {"configurable": {"thread_id": tid}}
    held = Held()
    with (
        ColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver,
        psycopg.connect(pg_url, autocommit=True) as listening,
    ):
        listening.execute(f'LISTEN "{multitask.run_channel("dead")}"')
        runs = saver.runs(echo_graph(saver, held), "enqueue", lease=timedelta(seconds=3))
        first: list[Any] = []
        second: list[Any] = []
        a = in_thread(lambda: runs.invoke({"messages": ["a"]}, config), first)
        assert held.entered.wait(WAIT)
        place(pg_url, tid, "dead")
        b = in_thread(lambda: runs.invoke({"messages": ["b"]}, config), second)
        try:
            wait_until(lambda: len(pending(saver, tid)) == 2)
            held.let_go()
            a.join(WAIT)
            # Told on the channel Postgres computes for it, the one run_channel names.
            told = list(listening.notifies(timeout=WAIT, stop_after=1))
            assert [n.channel for n in told] == [multitask.run_channel("dead")]
            assert len(pending(saver, tid)) == 2  # the dead place is live: b waits behind it
            lapse(pg_url, "dead")
            b.join(WAIT)
        finally:
            held.let_go()
            stop(saver, tid, b)
        assert second == [{"messages": ["a", "a:answer", "b", "b:answer"]}]
        records = {r.run_id: r for r in saver.runs.list(tid)}
        assert records["dead"].status == "error"
        assert records["dead"].error == multitask.QUEUE_LAPSED


def test_a_release_tells_the_first_live_waiter_past_a_dead_one(pg_url: str) -> None:
    """A place that has lapsed when the holder lets go is passed over: the live
    waiter behind it is told at once (it would otherwise sleep its 200 s)."""
    truncate(pg_url)
    tid = "past-dead"
    config = {"configurable": {"thread_id": tid}}
    held = Held()
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver:
        runs = saver.runs(echo_graph(saver, held), "enqueue", lease=LONG)
        second: list[Any] = []
        a = in_thread(lambda: runs.invoke({"messages": ["a"]}, config), [])
        assert held.entered.wait(WAIT)
        place(pg_url, tid, "dead")
        lapse(pg_url, "dead")
        b = in_thread(lambda: runs.invoke({"messages": ["b"]}, config), second)
        try:
            # Not through saver.runs.list: reading the records settles the lapsed place.
            wait_until(lambda: queued(pg_url, tid) == ["dead", "b"])
            held.let_go()
            a.join(WAIT)
            b.join(WAIT)
        finally:
            held.let_go()
            stop(saver, tid, b)
        assert second == [{"messages": ["a", "a:answer", "b", "b:answer"]}]


def test_a_waiter_leaving_as_the_holder_lets_go_leaves_the_next_told(pg_url: str) -> None:
    """The holder's FINISH tells w1 its turn while w1 leaves the queue (its
    caller gave up): then b, next in line, must be told. Each transaction
    holds the thread row before it looks (see WAKE), so the one that comes
    second sees the first. Here the test keeps the FINISH transaction open
    after it told w1, and w1 leaves meanwhile: the leave waits for the
    thread row, then sees the thread free and w1 gone, and tells b."""
    truncate(pg_url)
    tid = "leave-race"
    config = {"configurable": {"thread_id": tid}}
    with ColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver:
        take = multitask.start(saver._store, tid, "holder", "reject", "here:1", 600, None)
        token = saver._run(take)
        place(pg_url, tid, "w1")
        runs = saver.runs(echo_graph(saver), "enqueue", lease=LONG)
        second: list[Any] = []
        b = in_thread(lambda: runs.invoke({"messages": ["b"]}, config), second)
        try:
            wait_until(lambda: len(pending(saver, tid)) == 2)
            with (
                psycopg.connect(pg_url) as finishing,  # one transaction, left open
                psycopg.connect(pg_url, autocommit=True) as looking,
            ):
                finish = next(multitask.finish(tid, "holder", token, "success", None))
                for query in finish.queries:  # FINISH, RELEASE, WAKE (tells w1)
                    finishing.execute(query.sql, query.params)
                leave = in_thread(
                    lambda: saver._run(multitask.leave_queue(tid, "w1", "its caller gave up")), []
                )
                pid = finishing.info.backend_pid

                wait_until(lambda: not leave.is_alive() or blocked_behind(looking, pid))
                finishing.commit()
            leave.join(WAIT)
            b.join(WAIT)
        finally:
            stop(saver, tid, b)
        assert second == [{"messages": ["b", "b:answer"]}]
        statuses = {r.run_id: r.status for r in saver.runs.list(tid)}
        assert (statuses["holder"], statuses["w1"]) == ("success", "error")


class Forwarder:
    """A TCP port that forwards to Postgres byte for byte, until `refuse()`:
    then new connections are refused and those made before go on."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # refused from now on
                return
            server = socket.create_connection(self.target)
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def refuse(self) -> None:
        try:  # wakes the accept() under way (a close alone would leave it listening)
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()


@contextmanager
def forwarded(url: str) -> Iterator[tuple[str, Forwarder]]:
    params = psycopg.conninfo.conninfo_to_dict(url)
    forwarder = Forwarder(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    try:
        yield psycopg.conninfo.make_conninfo(url, host="127.0.0.1", port=forwarder.port), forwarder
    finally:
        forwarder.refuse()


def test_a_waiter_that_cannot_open_its_listening_connection_polls_and_says_so(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The queued run's saver has its one pooled connection, and the server then
    takes no new connection from it (as at max_connections): its listening
    connection cannot be opened. It logs a warning, polls, and runs once the
    holder lets go."""
    truncate(pg_url)
    tid = "no-listen"
    config = {"configurable": {"thread_id": tid}}
    held = Held()
    with (
        forwarded(pg_url) as (url, forwarder),
        ColosseumSaver.from_conn_string(pg_url, pool_size=2) as holding,
        ColosseumSaver.from_conn_string(url, pool_size=1) as queued,
    ):
        assert queued.runs.list(tid) == []  # its pooled connection is open
        forwarder.refuse()
        first_runs = holding.runs(echo_graph(holding, held), "enqueue")
        queued_runs = queued.runs(echo_graph(queued), "enqueue", lease=LONG)
        second: list[Any] = []
        a = in_thread(lambda: first_runs.invoke({"messages": ["a"]}, config), [])
        assert held.entered.wait(WAIT)
        with caplog.at_level(logging.WARNING, logger="langgraph_colosseum"):
            b = in_thread(lambda: queued_runs.invoke({"messages": ["b"]}, config), second)
            try:
                wait_until(lambda: pending(holding, tid))
                held.let_go()
                a.join(WAIT)
                b.join(WAIT)
            finally:
                held.let_go()
                stop(holding, tid, b)
        assert second == [{"messages": ["a", "a:answer", "b", "b:answer"]}]
        warned = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert any("could not open its LISTEN connection" in r.getMessage() for r in warned)
        assert any("polls every 0.5 s" in r.getMessage() for r in warned)


def test_a_waiter_whose_listening_connection_breaks_listens_again(pg_url: str) -> None:
    """Its listening connection is terminated while it waits: it opens another,
    LISTENs again, and is told its turn there."""
    truncate(pg_url)
    tid = "relisten"
    config = {"configurable": {"thread_id": tid}}
    held = Held()
    with (
        ColosseumSaver.from_conn_string(pg_url, pool_size=4) as saver,
        psycopg.connect(pg_url, autocommit=True) as looking,
    ):

        def listening() -> list[int]:
            return listeners(looking)

        runs = saver.runs(echo_graph(saver, held), "enqueue", lease=LONG)
        second: list[Any] = []
        a = in_thread(lambda: runs.invoke({"messages": ["a"]}, config), [])
        assert held.entered.wait(WAIT)
        b = in_thread(lambda: runs.invoke({"messages": ["b"]}, config), second)
        try:
            [pid] = wait_until(listening)
            looking.execute("SELECT pg_terminate_backend(%s)", (pid,))
            wait_until(lambda: listening() and pid not in listening())
            held.let_go()
            a.join(WAIT)
            b.join(WAIT)
        finally:
            held.let_go()
            stop(saver, tid, b)
        assert second == [{"messages": ["a", "a:answer", "b", "b:answer"]}]


def test_a_waiter_on_a_pool_whose_conninfo_is_a_callable_listens(pg_url: str) -> None:
    """A pool may make each connection with settings of the moment (callables, as
    for short-lived credentials): the listening connection is made the same way."""
    truncate(pg_url)
    tid = "callable-conninfo"
    config = {"configurable": {"thread_id": tid}}
    held = Held()
    pool = ConnectionPool(lambda: pg_url, kwargs=lambda: {"autocommit": True}, open=True)
    with (
        pool,
        ColosseumSaver.from_conn_string(pg_url, pool_size=2) as holding,
        psycopg.connect(pg_url, autocommit=True) as looking,
    ):
        queued = ColosseumSaver(pool)
        first_runs = holding.runs(echo_graph(holding, held), "enqueue")
        queued_runs = queued.runs(echo_graph(queued), "enqueue", lease=LONG)
        second: list[Any] = []
        a = in_thread(lambda: first_runs.invoke({"messages": ["a"]}, config), [])
        assert held.entered.wait(WAIT)
        b = in_thread(lambda: queued_runs.invoke({"messages": ["b"]}, config), second)
        try:
            wait_until(lambda: listeners(looking))
            held.let_go()
            a.join(WAIT)
            b.join(WAIT)
        finally:
            held.let_go()
            stop(holding, tid, b)
        assert second == [{"messages": ["a", "a:answer", "b", "b:answer"]}]


def test_waiters_of_older_code_are_still_woken(pg_url: str) -> None:
    """Processes of older code wait on one channel for the whole database, with
    the thread id as its payload: a run that lets go still notifies it."""
    truncate(pg_url)
    tid = "older-code"
    with (
        ColosseumSaver.from_conn_string(pg_url, pool_size=2) as saver,
        psycopg.connect(pg_url, autocommit=True) as older,
    ):
        older.execute(f'LISTEN "{multitask.CHANNEL}"')
        runs = saver.runs(echo_graph(saver), "reject")
        runs.invoke({"messages": ["a"]}, {"configurable": {"thread_id": tid}})
        told = list(older.notifies(timeout=WAIT, stop_after=1))
        assert [(n.channel, n.payload) for n in told] == [(multitask.CHANNEL, tid)]
