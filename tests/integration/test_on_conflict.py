"""`on_conflict="raise"`: two workers that read the same head cannot both
continue from it. The first to write wins; the other's write raises
ThreadConflictError and nothing of it is stored (no checkpoint, no write, no
registry change, no Redis head change); it retries on fresh state.

The races run in separate processes (`conflict_worker.py`, two started once
for the module), stopped right after their read of the head and released
together, against real Postgres, with and without the Redis hot head:

* both send new input: both first write a put continuing from the head, the
  loser is refused at its put;
* both resume the same interrupt() with Command(resume=...): both first write
  their resume value to the head, the loser is refused at its put_writes;
* a side-effecting tool in the losing step: the tool ran, its output write is
  refused; the IdempotentToolNode's ledger makes the winner's run of the same
  call (and the loser's retry) return the recorded result, so the side effect
  happens once (a plain ToolNode: twice).

The guards of the statements (tests/guards.py) are each held by a test below
that orders the two runs in one process, deterministically.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, ThreadConflictError
from tests.conftest import CACHE_PREFIX, cache_options, redis_url, truncate
from tests.integration import conflict_worker
from tests.integration.conflict_worker import GatedSaver, gate
from tests.integration.test_runs import Worker

WORKER = Path(__file__).with_name("conflict_worker.py")
WAIT = 60.0


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[Worker, Worker]]:
    started = (Worker(WORKER), Worker(WORKER))
    yield started
    for worker in started:
        worker.stop()


@pytest.fixture(params=["postgres", "redis"])
def mode(request: pytest.FixtureRequest, pg_url: str) -> str:
    truncate(pg_url)
    return request.param


class Thread:
    """One test's thread: how to prepare it, and what is stored of it."""

    def __init__(self, url: str, mode: str) -> None:
        self.url = url
        self.mode = mode
        self.id = f"t-{uuid.uuid4().hex[:8]}"
        self.cache = [redis_url(), CACHE_PREFIX] if mode == "redis" else None
        self.config = {"configurable": {"thread_id": self.id}}

    def saver(self, **options: Any) -> Any:
        return ColosseumSaver.from_conn_string(
            self.url, on_conflict="raise", **cache_options(self.mode), **options
        )

    def command(self, run_id: str, graph: str, **extra: Any) -> dict:
        return {
            "cmd": "invoke", "id": run_id, "url": self.url, "redis": self.cache,
            "thread": self.id, "graph": graph, "input": None, **extra,
        }  # fmt: skip

    def stored_mentions(self, marker: str) -> dict[str, int]:
        """Rows of this thread that hold `marker`, table by table (Postgres)."""
        counts = {}
        with psycopg.connect(self.url, autocommit=True) as conn:
            for table, column in (
                ("colosseum_checkpoints", "checkpoint::text || metadata::text"),
                ("colosseum_channel_values", "value::text"),
                ("colosseum_writes", "value::text"),
                ("colosseum_threads", "state_values::text || metadata::text"),
            ):
                (counts[table],) = conn.execute(
                    f"SELECT count(*) FROM {table} WHERE thread_id = %s AND {column} LIKE %s",
                    (self.id, f"%{marker}%"),
                ).fetchone()
        return counts

    def postgres_head(self) -> tuple[str, str]:
        """The newest root checkpoint and the registry's head."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            (newest,) = conn.execute(
                "SELECT max(checkpoint_id) FROM colosseum_checkpoints "
                "WHERE thread_id = %s AND checkpoint_ns = ''",
                (self.id,),
            ).fetchone()
            (registry,) = conn.execute(
                "SELECT head_checkpoint_id FROM colosseum_threads WHERE thread_id = %s",
                (self.id,),
            ).fetchone()
        return newest, registry

    def redis_head(self, saver: ColosseumSaver) -> str | None:
        """The root head's checkpoint id in the Redis hash (None: no head there)."""
        hot = saver._store.hot
        assert hot is not None and hot.incarnation is not None
        client = redis.Redis.from_url(redis_url())
        try:
            head = client.hget(hot.thread_key(self.id), "\0id")
        finally:
            client.close()
        return head.decode() if head is not None else None

    def assert_head_is_postgres(self, saver: ColosseumSaver) -> None:
        """The registry's head is the newest checkpoint, and so is the Redis
        head's (when Redis holds one)."""
        newest, registry = self.postgres_head()
        assert registry == newest
        if self.mode == "redis":
            assert self.redis_head(saver) in (newest, None)

    def assert_head_is_postgres_only(self) -> None:
        """As assert_head_is_postgres, with a saver of its own for the Redis key."""
        with self.saver() as saver:
            saver.get_tuple(self.config)  # learns the database incarnation
            self.assert_head_is_postgres(saver)


def race(
    workers: tuple[Worker, Worker],
    commands: tuple[dict, dict],
    *,
    puts_first: bool = False,
    resumes_first: bool = False,
) -> list[dict]:
    """Both runs read the head, then both go on at once; their "done" events.

    `puts_first`: their first node writes wait until both first puts are
    decided. LangGraph sends the input checkpoint's put in the background and
    runs the first step meanwhile, so the loser's node writes could otherwise
    reach the head lock before its put (and be the write refused).
    `resumes_first`: likewise, their first puts wait until both resume values'
    put_writes are decided (LangGraph sends those from a thread of its own too,
    and the step's put could otherwise reach the head lock first)."""
    for worker, command in zip(workers, commands):
        worker.send(**command, gate_read=True, gate_writes=puts_first, watch_put=puts_first,
                    gate_put=resumes_first, watch_resume=resumes_first)  # fmt: skip
    heads = {
        worker.expect(event="read", id=c["id"])["head"] for worker, c in zip(workers, commands)
    }
    assert len(heads) == 1, "both runs read the same head"
    for worker, command in zip(workers, commands):
        worker.send(cmd="open", name=f"read:{command['id']}")
    if puts_first:
        puts = [
            worker.expect(event="first-put", id=c["id"]) for worker, c in zip(workers, commands)
        ]
        assert sorted(p["outcome"] for p in puts) == ["refused", "stored"], puts
        for worker, command in zip(workers, commands):
            worker.send(cmd="open", name=f"writes:{command['id']}")
    if resumes_first:
        resumes = [
            worker.expect(event="resume-written", id=c["id"])
            for worker, c in zip(workers, commands)
        ]
        assert sorted(r["outcome"] for r in resumes) == ["refused", "stored"], resumes
        for worker, command in zip(workers, commands):
            worker.send(cmd="open", name=f"put:{command['id']}")
    return [worker.expect(event="done", id=c["id"]) for worker, c in zip(workers, commands)]


def one_winner(done: list[dict]) -> tuple[dict, dict]:
    outcomes = sorted(event["outcome"] for event in done)
    assert outcomes == ["ThreadConflictError", "success"], done
    winner = next(event for event in done if event["outcome"] == "success")
    loser = next(event for event in done if event["outcome"] != "success")
    return winner, loser


# ------------------------------------------------ two processes, one head


def test_both_send_new_input_the_loser_is_refused_at_its_put(
    workers: tuple[Worker, Worker], mode: str, pg_url: str
) -> None:
    thread = Thread(pg_url, mode)
    with thread.saver() as saver:
        graph = conflict_worker.chat_graph(saver)
        graph.invoke({"messages": ["m0"]}, thread.config)
        head = saver.get_tuple(thread.config).checkpoint["id"]
        markers = {name: f"from-{name}-{uuid.uuid4().hex[:6]}" for name in "AB"}
        done = race(workers, tuple(
            thread.command(f"{name}-{markers[name]}", "chat", input={"messages": [markers[name]]})
            for name in "AB"
        ), puts_first=True)  # fmt: skip
        winner, loser = one_winner(done)
        assert loser["operation"] == "put" and loser["continued_from"] == head
        assert loser["kept_checkpoint_id"] is None  # refused at its first put: nothing kept
        won, lost = (markers[event["id"][0]] for event in (winner, loser))
        assert graph.get_state(thread.config).values["messages"] == [
            "m0", "m0:think", "m0:think:answer", won, f"{won}:think", f"{won}:think:answer",
        ]  # fmt: skip
        assert set(thread.stored_mentions(lost).values()) == {0}
        thread.assert_head_is_postgres(saver)
        # The loser retries on fresh state: after the winner's steps.
        assert graph.invoke({"messages": [lost]}, thread.config)["messages"][-3:] == [
            lost, f"{lost}:think", f"{lost}:think:answer",
        ]  # fmt: skip
        thread.assert_head_is_postgres(saver)


def test_both_resume_the_same_interrupt_the_loser_is_refused_at_its_put_writes(
    workers: tuple[Worker, Worker], mode: str, pg_url: str
) -> None:
    """The loser's first refused write is its resume value's put_writes (the
    steps' puts wait until both resume writes are decided: LangGraph sends
    them from threads of its own, and a CI run once saw the loser's put land
    first); both continue from the head both read, and nothing of the loser
    is kept."""
    thread = Thread(pg_url, mode)
    with thread.saver() as saver:
        graph = conflict_worker.ask_graph(saver)
        graph.invoke({"messages": ["q"]}, thread.config)
        head = saver.get_tuple(thread.config).checkpoint["id"]
        markers = {name: f"from-{name}-{uuid.uuid4().hex[:6]}" for name in "AB"}
        done = race(workers, tuple(
            thread.command(f"{name}-{markers[name]}", "ask", resume=markers[name])
            for name in "AB"
        ), resumes_first=True)  # fmt: skip
        winner, loser = one_winner(done)
        assert loser["operation"] == "put_writes" and loser["continued_from"] == head
        assert loser["kept_checkpoint_id"] is None
        won, lost = (markers[event["id"][0]] for event in (winner, loser))
        state = graph.get_state(thread.config)
        assert state.values["messages"] == ["q", f"answer:{won}", f"answer:{won}:after"]
        assert state.next == ()
        # Not even the loser's resume value, on the checkpoint both resumed.
        assert set(thread.stored_mentions(lost).values()) == {0}
        thread.assert_head_is_postgres(saver)
        # Retried on fresh state, the interrupt it answered is gone: nothing to do.
        assert not graph.get_state(thread.config).interrupts


@pytest.mark.parametrize("tool_node", ["idempotent", "plain"])
def test_a_tool_in_the_losing_step_ran_and_the_idempotent_node_makes_it_once(
    workers: tuple[Worker, Worker], pg_url: str, tool_node: str
) -> None:
    """The loser's step ran its tool (a payment, counted in Postgres) before its
    output write was refused. With IdempotentToolNode the winner's run of the
    same call, and the loser's retry, find the ledger's result: one payment.
    With LangGraph's ToolNode: two (what the README warns of)."""
    truncate(pg_url)
    thread = Thread(pg_url, "postgres")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {conflict_worker.SIDE_EFFECTS} (amount int NOT NULL)"
        )
        conn.execute(f"TRUNCATE {conflict_worker.SIDE_EFFECTS}")
    first, second = workers
    with thread.saver() as saver:
        graph = conflict_worker.pay_graph(saver, pg_url, tool_node)
        human = HumanMessage(content="pay-1", id="h-1")
        graph.invoke({"messages": [human]}, thread.config, interrupt_before=["tools"])
        assert graph.get_state(thread.config).next == ("tools",)
        # B runs the tool, and stops before its output and its next checkpoint
        # reach the database
        run_b = f"B-{thread.id}"
        second.send(**thread.command(run_b, "pay", tool_node=tool_node), gate_writes=True,
                    gate_put=True)  # fmt: skip
        second.expect(event="writes", id=run_b)
        second.expect(event="put", id=run_b)
        assert payments(pg_url) == 1
        # A continues the same head meanwhile, to the end
        first.send(**thread.command(f"A-{thread.id}", "pay", tool_node=tool_node))
        done = first.expect(event="done", id=f"A-{thread.id}")
        assert done["outcome"] == "success", done
        second.send(cmd="open", name=f"writes:{run_b}")
        assert second.expect(event="written", id=run_b)["outcome"] == "refused"
        second.send(cmd="open", name=f"put:{run_b}")
        refused = second.expect(event="done", id=run_b)
        assert refused["outcome"] == "ThreadConflictError"
        assert refused["operation"] == "put_writes"
        # B retries on fresh state: A's run answered the call already
        second.send(**thread.command(f"{run_b}-retry", "pay", tool_node=tool_node))
        assert second.expect(event="done", id=f"{run_b}-retry")["outcome"] == "success"
        messages = graph.get_state(thread.config).values["messages"]
        assert [type(m).__name__ for m in messages] == [
            "HumanMessage", "AIMessage", "ToolMessage", "AIMessage",
        ]  # fmt: skip
        assert isinstance(messages[2], ToolMessage) and messages[2].content == "paid 5"
    assert payments(pg_url) == (1 if tool_node == "idempotent" else 2)


def payments(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        (count,) = conn.execute(f"SELECT count(*) FROM {conflict_worker.SIDE_EFFECTS}").fetchone()
    return count


# ---------------------------------- one process, both orders: the guards


class Run:
    """A run on its own GatedSaver (same process), in a thread of its own."""

    def __init__(self, saver: GatedSaver, command: dict) -> None:
        self.command = command
        self.done: dict | None = None
        self._thread = threading.Thread(target=self._go, args=(saver,), daemon=True)
        self._thread.start()

    def _go(self, saver: GatedSaver) -> None:
        self.done = conflict_worker.run(saver, self.command)

    def stopped_at(self, kind: str) -> None:
        assert gate(f"at:{kind}:{self.command['id']}").wait(WAIT), f"never reached {kind}"

    def go_on(self, kind: str) -> None:
        gate(f"open:{kind}:{self.command['id']}").set()

    def result(self) -> dict:
        self._thread.join(WAIT)
        assert self.done is not None, "the run did not finish"
        return self.done


@pytest.fixture
def two_savers(mode: str, pg_url: str) -> Iterator[tuple[Thread, GatedSaver, GatedSaver]]:
    thread = Thread(pg_url, mode)
    options = cache_options(mode)
    with GatedSaver.from_conn_string(pg_url, on_conflict="raise", **options) as a, \
            GatedSaver.from_conn_string(pg_url, on_conflict="raise", **options) as b:  # fmt: skip
        yield thread, a, b


def new_id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_a_put_continuing_from_a_head_another_run_moved_past_is_refused(
    two_savers: tuple[Thread, GatedSaver, GatedSaver],
) -> None:
    """B read the head; A then continues it with new input, to the end; B's
    input put names the old head as its parent: refused, nothing stored."""
    thread, a, b = two_savers
    conflict_worker.chat_graph(a).invoke({"messages": ["m0"]}, thread.config)
    head = a.get_tuple(thread.config).checkpoint["id"]
    late = Run(b, thread.command(new_id("B"), "chat", input={"messages": ["late-B"]},
                                 gate_read=True, gate_writes=True, watch_put=True))  # fmt: skip
    late.stopped_at("read")
    first = conflict_worker.run(a, thread.command(new_id("A"), "chat",
                                                  input={"messages": ["first-A"]}))  # fmt: skip
    assert first["outcome"] == "success"
    late.go_on("read")
    # its first step's writes wait until its input put is decided (see race())
    late.stopped_at("first-put")
    late.go_on("writes")
    refused = late.result()
    assert refused["outcome"] == "ThreadConflictError", refused
    assert (refused["operation"], refused["continued_from"]) == ("put", head)
    assert refused["head"] != head
    assert set(thread.stored_mentions("late-B").values()) == {0}
    thread.assert_head_is_postgres(a)


def test_a_write_to_a_checkpoint_the_head_moved_past_is_refused(
    two_savers: tuple[Thread, GatedSaver, GatedSaver],
) -> None:
    """B read the interrupted head to resume it; A sends new input instead,
    which puts a child of the head without writing to it (no claim). B's resume
    value, written to the old head, is refused by the head check alone."""
    thread, a, b = two_savers
    conflict_worker.ask_graph(a).invoke({"messages": ["q"]}, thread.config)
    late = Run(b, thread.command(new_id("B"), "ask", resume="late-B", gate_read=True))
    late.stopped_at("read")
    first = conflict_worker.run(a, thread.command(new_id("A"), "ask",
                                                  input={"messages": ["again-A"]}))  # fmt: skip
    assert first["outcome"] == "success"
    late.go_on("read")
    refused = late.result()
    assert refused["outcome"] == "ThreadConflictError", refused
    assert refused["operation"] == "put_writes"
    assert set(thread.stored_mentions("late-B").values()) == {0}
    thread.assert_head_is_postgres(a)


def test_the_first_run_to_write_to_the_head_wins(
    two_savers: tuple[Thread, GatedSaver, GatedSaver],
) -> None:
    """Both read the interrupted head. A writes its resume value and its node's
    output, then stops before its put; B then writes its resume value: the head
    has not moved, but A claimed it. B is refused, A finishes."""
    thread, a, b = two_savers
    conflict_worker.ask_graph(a).invoke({"messages": ["q"]}, thread.config)
    first = Run(a, thread.command(new_id("A"), "ask", resume="first-A", gate_read=True,
                                  gate_put=True))  # fmt: skip
    late = Run(b, thread.command(new_id("B"), "ask", resume="late-B", gate_read=True))
    first.stopped_at("read")
    late.stopped_at("read")
    first.go_on("read")
    first.stopped_at("put")  # the head is not moved; its writes go in the background:
    _wait_for_rows(
        thread.url,
        "SELECT count(*) FROM colosseum_writes WHERE thread_id = %s AND value::text LIKE %s",
        (thread.id, "%answer:first-A%"),
    )  # its output landed, after its resume value: the head is claimed
    late.go_on("read")
    refused = late.result()
    first.go_on("put")
    assert first.result()["outcome"] == "success"
    assert refused["outcome"] == "ThreadConflictError", refused
    assert refused["operation"] == "put_writes"
    assert set(thread.stored_mentions("late-B").values()) == {0}
    values = conflict_worker.ask_graph(a).get_state(thread.config).values
    assert values["messages"] == ["q", "answer:first-A", "answer:first-A:after"]
    thread.assert_head_is_postgres(a)


def test_two_checks_at_once_are_ordered_by_the_head_lock(
    two_savers: tuple[Thread, GatedSaver, GatedSaver], pg_url: str
) -> None:
    """Both runs' input puts start while the thread's registry row is held: a
    statement that started before the other committed would not see its
    checkpoint. The head lock makes the second statement start after the first
    commits: one wins, the other is refused and stores nothing."""
    thread, a, b = two_savers
    conflict_worker.chat_graph(a).invoke({"messages": ["m0"]}, thread.config)
    runs = [
        Run(saver, thread.command(new_id(name), "chat", input={"messages": [f"held-{name}"]},
                                  gate_read=True))
        for saver, name in ((a, "A"), (b, "B"))
    ]  # fmt: skip
    for run in runs:
        run.stopped_at("read")
    with psycopg.connect(pg_url) as holder:
        holder.execute(
            "SELECT 1 FROM colosseum_threads WHERE thread_id = %s FOR UPDATE", (thread.id,)
        )
        for run in runs:
            run.go_on("read")
        _wait_for_waiting_backends(pg_url, 2)
        holder.commit()
    done = [run.result() for run in runs]
    _winner, loser = one_winner(done)
    # the loser's input put, or its first step's writes (sent meanwhile, they
    # may take the head lock before its put does): either is refused
    assert loser["operation"] in ("put", "put_writes")
    lost = "held-" + loser["id"][0]
    assert set(thread.stored_mentions(lost).values()) == {0}
    thread.assert_head_is_postgres(a)


def _wait_for_rows(url: str, query: str, params: tuple) -> None:
    """Until `query` counts a row (what another thread's write committed)."""
    deadline = time.monotonic() + WAIT
    with psycopg.connect(url, autocommit=True) as conn:
        while not conn.execute(query, params).fetchone()[0]:
            assert time.monotonic() < deadline, "the write never landed"
            time.sleep(0.02)


def _wait_for_waiting_backends(url: str, count: int) -> None:
    """Until `count` backends of this database wait for a lock (Postgres says so)."""
    deadline = time.monotonic() + WAIT
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            (waiting,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            ).fetchone()
            if waiting >= count:
                return
            assert time.monotonic() < deadline, f"only {waiting} backends ever waited"
            time.sleep(0.02)


def test_on_conflict_is_raise_or_none(pg_url: str) -> None:
    with pytest.raises(Exception, match="on_conflict"):
        with ColosseumSaver.from_conn_string(pg_url, on_conflict="ignore"):
            pass


def test_the_error_names_thread_checkpoint_head_and_what_to_do() -> None:
    error = ThreadConflictError(
        thread_id="t1", checkpoint_ns="", continued_from="c3", head="c4", operation="put"
    )
    text = str(error)
    assert "'t1'" in text and "'c3'" in text and "'c4'" in text
    assert "Nothing of this write was stored" in text and "retry" in text
    assert error.kept_checkpoint_id is None and "stay in the thread" not in text


@pytest.mark.parametrize("held", [False, True])
def test_the_error_says_what_of_the_run_stays_and_not_to_send_it_again(held: bool) -> None:
    """A run refused after it stored a root checkpoint: that one, and its
    input with it, stay in the thread (another run continued from them)."""
    error = ThreadConflictError(
        thread_id="t1", checkpoint_ns="", continued_from="c3", head="c4",
        operation="put_writes", held=held, kept_checkpoint_id="c3",
    )  # fmt: skip
    text = str(error)
    assert error.kept_checkpoint_id == "c3"
    assert "input and steps up to checkpoint 'c3' stay in the thread" in text
    assert "do not send the same input again" in text
    assert "retry" not in text.lower()


# ------------------------------------------------ the async saver, the same race


class BarrierSaver(AsyncColosseumSaver):
    """Each run waits after its read of the latest root checkpoint until
    `parties` runs have read it: all of them read the same head."""

    barrier: asyncio.Barrier

    async def aget_tuple(self, config: Any) -> Any:
        found = await super().aget_tuple(config)
        configurable = config.get("configurable", {})
        if not configurable.get("checkpoint_id") and not configurable.get("checkpoint_ns"):
            await asyncio.wait_for(self.barrier.wait(), WAIT)
        return found


@pytest.mark.parametrize("kind", ["input", "resume"])
async def test_async_two_runs_one_head_one_wins(mode: str, pg_url: str, kind: str) -> None:
    thread = Thread(pg_url, mode)
    async with BarrierSaver.from_conn_string(
        pg_url, on_conflict="raise", **cache_options(mode)
    ) as saver:
        build = conflict_worker.chat_graph if kind == "input" else conflict_worker.ask_graph
        graph = build(saver)
        saver.barrier = asyncio.Barrier(1)
        await graph.ainvoke({"messages": ["m0"]}, thread.config)
        saver.barrier = asyncio.Barrier(2)

        async def one(name: str) -> str:
            payload = (
                {"messages": [f"async-{name}"]}
                if kind == "input"
                else Command(resume=f"async-{name}")
            )
            try:
                await graph.ainvoke(payload, thread.config, durability="sync")
            except ThreadConflictError:
                return name
            return ""

        losers = [name for name in await asyncio.gather(one("A"), one("B")) if name]
        saver.barrier = asyncio.Barrier(1)  # reads on their own again
        assert len(losers) == 1
        assert set(thread.stored_mentions(f"async-{losers[0]}").values()) == {0}
        winner = "B" if losers == ["A"] else "A"
        state = await graph.aget_state(thread.config)
        assert any(f"async-{winner}" in m for m in state.values["messages"])
    thread.assert_head_is_postgres_only()
