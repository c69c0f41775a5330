"""`on_conflict="raise"` with subgraphs: one decision per run, whatever the
namespace its writes go to.

A graph whose subgraph interrupts (graphs.subgraph_graph: intro -> research
(gather -> review: interrupt()) -> wrap) writes in two namespaces: the root,
and the subgraph's ("research:<task id>"). Two runs that continue the same
head must still end with exactly one winner: the other raises
ThreadConflictError and nothing of it is readable, in any namespace, from
Postgres or Redis; the winner's state is exactly what it would be had it run
alone (compared with InMemorySaver by `repr`).

Each race is forced, not sampled: every saver below serves one run and stops
that run at the first read / put / put_writes of a namespace ("read:root",
"writes:sub", ...) until the test lets it go on, and tells the outcome of
each first operation. The interleavings are those a review found (issue #15,
item 3), where the check made per namespace split the decision:

* both resume the interrupt raised in the subgraph: A's resume value (a root
  write) lands first, B's subgraph write lands before A's (both were
  refused); or B's subgraph write lands before A reads the subgraph (A was
  handed B's answer);
* both send new input with durability="async": the loser's subgraph
  checkpoints land before its root input put is refused (they stayed, listed
  under a root checkpoint never stored), on a thread with history and on a
  new one.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
import redis
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, ThreadConflictError
from langgraph_colosseum._core.runs import RunWrites
from langgraph_colosseum._core.sql import CLAIM_TASK_ID
from tests.conftest import cache_options, redis_url, truncate
from tests.integration.graphs import Normaliser, subgraph_graph

WAIT = 60.0


class Points:
    """The stops of one run: its first operation of each kind and namespace
    ("read:root", "put:sub", "writes:root", ...) waits while held (all of
    them: "writes:root*"), and says when it is over and how ("stored" /
    "refused")."""

    def __init__(self, *held: str) -> None:
        self._held = {point: threading.Event() for point in held}
        self._over: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        self.outcome: dict[str, str] = {}
        self._seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    def enter(self, point: str) -> int:
        """Before an operation: wait while its point is held (the first one
        of the point; the n-th with "<point>#<n>" held; every one with
        "<point>*" held); which one of the point it is (1: the first)."""
        with self._lock:
            self._seen[point] += 1
            nth = self._seen[point]
        names = (point, f"{point}#1") if nth == 1 else (f"{point}#{nth}",)
        for name in (*names, f"{point}*"):
            held = self._held.get(name)
            if held is not None:
                assert held.wait(WAIT), f"{name} was never released"
        return nth

    def leave(self, point: str, nth: int, outcome: str) -> None:
        """The n-th operation of `point` is over: `wait(point)` (the first) and
        `wait("<point>#<n>")` tell how."""
        names = (point, f"{point}#1") if nth == 1 else (f"{point}#{nth}",)
        with self._lock:
            overs = []
            for name in names:
                self.outcome[name] = outcome
                overs.append(self._over[name])
        for over in overs:
            over.set()

    def release(self, point: str) -> None:
        self._held[point].set()

    def wait(self, point: str) -> str:
        """Until the first operation of `point` is over; its outcome."""
        with self._lock:
            over = self._over[point]
        assert over.wait(WAIT), f"{point} never happened"
        return self.outcome[point]


def _point(kind: str, config: Any) -> str:
    ns = (config.get("configurable") or {}).get("checkpoint_ns") or ""
    if not ns:
        return f"{kind}:root"
    # "sub", or with POINT_NODES set (one test's graphs run two subgraphs at
    # once) "sub-<node>", the node whose subgraph it is
    return f"{kind}:sub-{ns.split(':', 1)[0]}" if POINT_NODES else f"{kind}:sub"


POINT_NODES = False


def _latest(config: Any) -> bool:
    return not (config.get("configurable") or {}).get("checkpoint_id")


class StoppedSaver(ColosseumSaver):
    """A saver that serves one run, stopped at its `points`."""

    points: Points

    def _at(self, point: str, call: Callable[[], Any]) -> Any:
        nth = self.points.enter(point)
        try:
            result = call()
        except ThreadConflictError:
            self.points.leave(point, nth, "refused")
            raise
        self.points.leave(point, nth, "stored")
        return result

    def get_tuple(self, config: Any) -> Any:
        if not _latest(config):
            return super().get_tuple(config)
        return self._at(_point("read", config), lambda: super(StoppedSaver, self).get_tuple(config))

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self._at(
            _point("put", config),
            lambda: super(StoppedSaver, self).put(config, checkpoint, metadata, new_versions),
        )

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        return self._at(
            _point("writes", config),
            lambda: super(StoppedSaver, self).put_writes(config, writes, task_id, task_path),
        )


class AsyncStoppedSaver(AsyncColosseumSaver):
    """StoppedSaver's stops on the async saver (a held stop waits in a thread,
    not in the event loop the other run shares)."""

    points: Points

    async def _at(self, point: str, call: Callable[[], Any]) -> Any:
        nth = await asyncio.to_thread(self.points.enter, point)
        try:
            result = await call()
        except ThreadConflictError:
            self.points.leave(point, nth, "refused")
            raise
        self.points.leave(point, nth, "stored")
        return result

    async def aget_tuple(self, config: Any) -> Any:
        parent = super()
        if not _latest(config):
            return await parent.aget_tuple(config)
        return await self._at(_point("read", config), lambda: parent.aget_tuple(config))

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        parent = super()
        return await self._at(
            _point("put", config), lambda: parent.aput(config, checkpoint, metadata, new_versions)
        )

    async def aput_writes(
        self, config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        parent = super()
        return await self._at(
            _point("writes", config),
            lambda: parent.aput_writes(config, writes, task_id, task_path),
        )


# ------------------------------------------------------------ the two runs


class Race:
    """Two runs, A and B, on savers of their own, over one thread."""

    def __init__(
        self, url: str, mode: str, kind: str, build: Callable[[Any], Any] | None = None
    ) -> None:
        self.url = url
        self.mode = mode
        self.kind = kind  # "sync" | "async"
        self.build = build or _sync_graph  # saver -> the compiled graph both run
        self.thread_id = f"sub-{uuid.uuid4().hex[:8]}"
        self.config = {"configurable": {"thread_id": self.thread_id}}
        self.markers = {name: f"from-{name}-{uuid.uuid4().hex[:6]}" for name in "AB"}
        self.refusals: dict[str, ThreadConflictError] = {}  # what a refused run's caller got

    def saver(self) -> Any:
        cls = StoppedSaver if self.kind == "sync" else AsyncStoppedSaver
        return cls.from_conn_string(self.url, on_conflict="raise", **cache_options(self.mode))


Prepare = Callable[[Any, dict], Any]  # (graph, config) -> awaitable or None
Payload = Callable[[str], Any]  # marker -> the run's input
Script = Callable[[Points, Points, dict[str, threading.Event]], None]


def _sync_graph(saver: Any) -> Any:
    return subgraph_graph(Counter()).compile(checkpointer=saver)


async def _invoke(graph: Any, payload: Any, config: dict, kind: str, **options: Any) -> Any:
    if kind == "sync":
        return graph.invoke(payload, config, **options)
    return await graph.ainvoke(payload, config, **options)


async def _observe(graph: Any, config: dict, kind: str) -> dict:
    """What a person reads of the thread: get_state with its subgraphs, the
    root history, and each interrupted subgraph's own state and history."""

    async def state(cfg: dict, subgraphs: bool = False) -> Any:
        if kind == "sync":
            return graph.get_state(cfg, subgraphs=subgraphs)
        return await graph.aget_state(cfg, subgraphs=subgraphs)

    async def history(cfg: dict) -> list:
        if kind == "sync":
            return list(graph.get_state_history(cfg))
        return [s async for s in graph.aget_state_history(cfg)]

    root_history = await history(config)
    norm = Normaliser(root_history)
    top = await state(config, subgraphs=True)
    seen: dict[str, Any] = {"state": norm(top), "history": [norm(s) for s in root_history]}
    for task in top.tasks:
        if task.state is not None:
            sub_history = await history(task.state.config)
            sub_norm = Normaliser(sub_history)
            seen[f"subgraph {task.name}"] = {
                "state": sub_norm(await state(task.state.config)),
                "history": [sub_norm(s) for s in sub_history],
            }
    return seen


async def _alone(
    prepare: Prepare | None,
    payload: Any,
    kind: str,
    thread_id: str,
    build: Callable[[Any], Any] = _sync_graph,
    *more: Any,
) -> dict:
    """The thread as InMemorySaver has it after the winner's run alone (and
    the runs of `more` payloads after it, one at a time)."""
    saver = InMemorySaver()
    graph = build(saver)
    config = {"configurable": {"thread_id": thread_id}}
    if prepare is not None:
        await prepare(graph, config, kind)
    for one in (payload, *more):
        try:
            await _invoke(graph, one, config, kind)
        except Exception:  # a run that fails: the thread as it leaves it
            pass
    return await _observe(graph, config, kind)


async def _prepare_interrupted(graph: Any, config: dict, kind: str) -> None:
    await _invoke(graph, {"topic": "owls", "notes": []}, config, kind)


async def _prepare_history(graph: Any, config: dict, kind: str) -> None:
    await _invoke(graph, {"topic": "owls", "notes": []}, config, kind)
    await _invoke(graph, Command(resume="approved"), config, kind)


def _resume(marker: str) -> Any:
    return Command(resume=marker)


def _new_input(marker: str) -> Any:
    return {"topic": marker, "notes": []}


async def run_race(
    race: Race,
    prepare: Prepare | None,
    payload: Payload,
    held: dict[str, tuple[str, ...]],
    script: Script,
    durability: str,
) -> tuple[dict[str, str], Any]:
    """Prepare the thread, run A and B stopped where `held` says while
    `script` (in a thread of its own) lets them go on; their outcomes, and a
    saver to read the thread with (open until the caller's check is over)."""
    points = {name: Points(*held.get(name, ())) for name in "AB"}
    ended = {name: threading.Event() for name in "AB"}
    outcomes: dict[str, str] = {}
    contexts = [race.saver() for _ in "AB"]
    if race.kind == "sync":
        savers = [context.__enter__() for context in contexts]
    else:
        savers = [await context.__aenter__() for context in contexts]
    try:
        for saver in savers:
            saver.points = Points()  # nothing held while preparing
        graphs = dict(zip("AB", (race.build(saver) for saver in savers)))
        if prepare is not None:
            await prepare(graphs["A"], race.config, race.kind)
        for name, saver in zip("AB", savers):
            saver.points = points[name]

        async def one(name: str) -> None:
            try:
                await _invoke(
                    graphs[name], payload(race.markers[name]), race.config, race.kind,
                    durability=durability,
                )  # fmt: skip
                outcomes[name] = "success"
            except ThreadConflictError as exc:
                outcomes[name] = "ThreadConflictError"
                race.refusals[name] = exc
            except Exception as exc:  # reported, not hidden: the test fails on it
                outcomes[name] = repr(exc)
            finally:
                ended[name].set()

        if race.kind == "sync":
            threads = [
                threading.Thread(target=lambda n=name: asyncio.run(one(n)), daemon=True)
                for name in "AB"
            ]
            for thread in threads:
                thread.start()
            script(points["A"], points["B"], ended)
            for thread in threads:
                thread.join(WAIT)
        else:
            await asyncio.gather(
                one("A"), one("B"), asyncio.to_thread(script, points["A"], points["B"], ended)
            )
        for saver in savers:
            saver.points = Points()
        return outcomes, (contexts, savers)
    except BaseException:
        await _close(race, contexts)
        raise


async def _close(race: Race, contexts: list) -> None:
    for context in contexts:
        if race.kind == "sync":
            context.__exit__(None, None, None)
        else:
            await context.__aexit__(None, None, None)


def _wait_ended(ended: threading.Event) -> None:
    assert ended.wait(WAIT), "the run never ended"


# ------------------------------------------------------------ what must hold


def _redis_mentions(race: Race, saver: Any, marker: str) -> list[bytes]:
    hot = saver._store.hot
    if hot is None:
        return []
    assert hot.incarnation is not None  # learnt when the thread was prepared
    client = redis.Redis.from_url(redis_url())
    try:
        fields = client.hgetall(hot.thread_key(race.thread_id))
    finally:
        client.close()
    return [k + b"=" + v for k, v in fields.items() if marker.encode() in k + v]


def _postgres_mentions(race: Race, marker: str) -> dict[str, int]:
    counts = {}
    with psycopg.connect(race.url, autocommit=True) as conn:
        for table, column in (
            ("colosseum_checkpoints", "checkpoint::text || metadata::text"),
            ("colosseum_channel_values", "value::text"),
            ("colosseum_writes", "value::text || task_path"),
            ("colosseum_threads", "state_values::text || metadata::text"),
        ):
            (counts[table],) = conn.execute(
                f"SELECT count(*) FROM {table} WHERE thread_id = %s AND {column} LIKE %s",
                (race.thread_id, f"%{marker}%"),
            ).fetchone()
    return counts


async def _listed(race: Race, saver: Any) -> list:
    config = {"configurable": {"thread_id": race.thread_id}}  # every namespace
    if race.kind == "sync":
        return list(saver.list(config))
    return [t async for t in saver.alist(config)]


async def assert_one_winner(
    race: Race,
    outcomes: dict[str, str],
    opened: Any,
    prepare: Prepare | None,
    payload: Payload,
    winner: str | None = None,
) -> str:
    """Exactly one run refused; nothing of it readable anywhere; the winner's
    thread exactly as its run alone leaves it. The winner's name."""
    contexts, savers = opened
    try:
        assert sorted(outcomes.values()) == ["ThreadConflictError", "success"], outcomes
        won = next(name for name, outcome in outcomes.items() if outcome == "success")
        if winner is not None:
            assert won == winner, outcomes
        loser = "B" if won == "A" else "A"
        lost = race.markers[loser]
        # nothing of the loser stayed: its caller is told it may send its input again
        assert race.refusals[loser].kept_checkpoint_id is None
        reader = savers[0]
        # Redis first: a read below refills it from Postgres
        assert _redis_mentions(race, reader, lost) == []
        assert set(_postgres_mentions(race, lost).values()) == {0}, _postgres_mentions(race, lost)
        listed = await _listed(race, reader)
        assert not [t for t in listed if lost in repr(t)]
        roots = {
            t.checkpoint["id"] for t in listed if t.config["configurable"]["checkpoint_ns"] == ""
        }
        orphans = [
            t.config["configurable"]
            for t in listed
            if t.config["configurable"]["checkpoint_ns"]
            and (t.metadata.get("parents") or {}).get("") not in roots
        ]
        assert orphans == [], "subgraph checkpoints under a root checkpoint never stored"
        graph = race.build(reader)
        seen = await _observe(graph, race.config, race.kind)
        assert lost not in repr(seen)
        expected = await _alone(
            prepare, payload(race.markers[won]), race.kind, race.thread_id, race.build
        )
        assert seen == expected
        assert repr(seen) == repr(expected)
        if race.mode == "redis":
            assert _redis_mentions(race, reader, lost) == []
        return won
    finally:
        await _close(race, contexts)


# ------------------------------------------------------------ the races


@pytest.fixture(params=["postgres", "redis"])
def mode(request: pytest.FixtureRequest, pg_url: str) -> str:
    truncate(pg_url)
    return request.param


KINDS = ["sync", "async"]


def _resume_split(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """A's resume value lands first; then B's subgraph write, before A's."""
    a.wait("read:root")
    b.wait("read:root")  # both read the same head
    a.release("writes:root")
    assert a.wait("writes:root") == "stored"
    a.wait("read:sub")  # A read the subgraph before B wrote to it
    b.release("read:sub")
    b.wait("writes:sub")
    a.release("writes:sub")
    a.release("put:sub")
    b.release("writes:root")


@pytest.mark.parametrize("kind", KINDS)
async def test_resumes_of_a_subgraph_interrupt_split_across_namespaces_one_wins(
    mode: str, pg_url: str, kind: str
) -> None:
    """Was: both refused (A lost in the subgraph, B at the root), B's
    subgraph result and A's resume value kept. Now A, first to write, wins."""
    race = Race(pg_url, mode, kind)
    held = {"A": ("writes:root", "writes:sub", "put:sub"), "B": ("read:sub", "writes:root")}
    outcomes, opened = await run_race(
        race, _prepare_interrupted, _resume, held, _resume_split, "sync"
    )
    await assert_one_winner(race, outcomes, opened, _prepare_interrupted, _resume, winner="A")


def _resume_handed(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """A's resume value lands first; B's subgraph write (the subgraph's resume
    value and its node's output) lands before A reads the subgraph; A runs to
    the end before B's next subgraph checkpoint and B's resume value."""
    a.wait("read:root")
    b.wait("read:root")
    a.release("writes:root")
    assert a.wait("writes:root") == "stored"
    b.release("writes:sub")  # held until now: alone, it could land first (CI did)
    b.wait("writes:sub")
    a.release("read:sub")
    _wait_ended(ended["A"])
    b.release("put:sub")
    b.release("writes:root")


@pytest.mark.parametrize("kind", KINDS)
async def test_the_winner_of_a_subgraph_resume_never_gets_the_losers_answer(
    mode: str, pg_url: str, kind: str
) -> None:
    """Was: B lost at the root, but A read the subgraph after B's write and
    finished with B's answer. Now B's subgraph write is refused."""
    race = Race(pg_url, mode, kind)
    held = {"A": ("writes:root", "read:sub"), "B": ("writes:root", "writes:sub", "put:sub")}
    outcomes, opened = await run_race(
        race, _prepare_interrupted, _resume, held, _resume_handed, "sync"
    )
    await assert_one_winner(race, outcomes, opened, _prepare_interrupted, _resume, winner="A")


def _subgraph_first(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """B's subgraph write lands before anything of A's."""
    a.wait("read:root")
    b.wait("read:root")
    b.wait("writes:sub")
    a.release("writes:root")
    a.wait("writes:root")
    a.release("writes:sub")
    a.release("put:sub")
    b.release("writes:root")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_subgraph_write_first_decides_the_resume_race(
    mode: str, pg_url: str, kind: str
) -> None:
    """B writes in the subgraph first: B wins, A's resume value is refused at
    the root (was: A's root write stored, both refused)."""
    race = Race(pg_url, mode, kind)
    held = {"A": ("writes:root", "writes:sub", "put:sub"), "B": ("writes:root",)}
    outcomes, opened = await run_race(
        race, _prepare_interrupted, _resume, held, _subgraph_first, "sync"
    )
    await assert_one_winner(race, outcomes, opened, _prepare_interrupted, _resume, winner="B")


def _input_late_subgraph(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """B read the head; A runs to the end; then B's subgraph checkpoint, then
    B's root writes (its first step's, to its input checkpoint) and input put."""
    b.wait("read:root")
    a.release("read:root")
    _wait_ended(ended["A"])
    b.release("read:sub")
    b.wait("put:sub")
    b.release("writes:root*")
    b.release("put:root")


@pytest.mark.parametrize("kind", KINDS)
async def test_new_input_refused_at_the_root_leaves_no_subgraph_checkpoint(
    mode: str, pg_url: str, kind: str
) -> None:
    """durability="async": B's subgraph puts are sent while its input put
    waits. Was: stored (the namespace is B's own), then B refused at the root
    put, its subgraph checkpoints left listed under a root never stored."""
    race = Race(pg_url, mode, kind)
    held = {"A": ("read:root",), "B": ("read:sub", "writes:root*", "put:root")}
    outcomes, opened = await run_race(
        race, _prepare_history, _new_input, held, _input_late_subgraph, "async"
    )
    await assert_one_winner(race, outcomes, opened, _prepare_history, _new_input, winner="A")


def _input_early_subgraph(a: Points, b: Points, ended: dict[str, threading.Event]) -> None:
    """Both read the head; B stores its subgraph checkpoint (its input put
    waiting); then A goes on (its subgraph, its first step's writes, its input
    put) to the end; then B's input put."""
    a.wait("read:root")
    b.wait("read:root")
    b.release("read:sub")
    b.wait("put:sub")
    for point in ("read:sub", "writes:root", "put:root"):
        a.release(point)
    _wait_ended(ended["A"])
    b.release("put:root")


@pytest.mark.parametrize("kind", KINDS)
async def test_on_a_new_thread_the_losers_subgraph_checkpoints_are_deleted(
    mode: str, pg_url: str, kind: str
) -> None:
    """A new thread: B's subgraph checkpoints land before any root checkpoint
    exists (nothing to conflict with yet); A's input put lands first, so B is
    refused at its own, and what B stored in its subgraph goes with it."""
    race = Race(pg_url, mode, kind)
    held = {"A": ("read:sub", "writes:root", "put:root"), "B": ("read:sub", "put:root")}
    outcomes, opened = await run_race(race, None, _new_input, held, _input_early_subgraph, "async")
    await assert_one_winner(race, outcomes, opened, None, _new_input, winner="A")


@pytest.mark.parametrize("kind", KINDS)
async def test_on_a_thread_with_history_an_early_subgraph_checkpoint_wins(
    mode: str, pg_url: str, kind: str
) -> None:
    """The same order on a thread with history: B's subgraph checkpoint
    continues the head first, so B wins and A's input put is refused (was: A
    won at the root and B's subgraph checkpoints stayed)."""
    race = Race(pg_url, mode, kind)
    held = {"A": ("read:sub", "writes:root", "put:root"), "B": ("read:sub", "put:root")}
    outcomes, opened = await run_race(
        race, _prepare_history, _new_input, held, _input_early_subgraph, "async"
    )
    await assert_one_winner(race, outcomes, opened, _prepare_history, _new_input, winner="B")


def test_a_root_checkpoint_put_meanwhile_refuses_a_subgraph_write(mode: str, pg_url: str) -> None:
    """B read the interrupted head to resume it; an update_state (not checked,
    no claim) then puts a root checkpoint. B's subgraph write, before any
    root write of B's, is refused by the root head alone: nothing of B stays."""
    race = Race(pg_url, mode, "sync")
    with (
        race.saver() as saver,
        ColosseumSaver.from_conn_string(pg_url, **cache_options(mode)) as plain,
    ):
        saver.points = Points()
        graph = _sync_graph(saver)
        graph.invoke({"topic": "owls", "notes": []}, race.config)
        saver.points = Points("read:sub", "writes:root*")
        outcome: dict[str, str] = {}

        def resume() -> None:
            try:
                graph.invoke(Command(resume=race.markers["B"]), race.config)
                outcome["B"] = "success"
            except ThreadConflictError:
                outcome["B"] = "ThreadConflictError"

        run = threading.Thread(target=resume, daemon=True)
        run.start()
        saver.points.wait("read:root")
        _sync_graph(plain).update_state(race.config, {"notes": ["meanwhile"]})
        saver.points.release("read:sub")
        assert saver.points.wait("writes:sub") == "refused"
        saver.points.release("writes:root*")
        run.join(WAIT)
        saver.points = Points()
        assert outcome == {"B": "ThreadConflictError"}
        assert set(_postgres_mentions(race, race.markers["B"]).values()) == {0}
        assert _redis_mentions(race, saver, race.markers["B"]) == []
        assert race.markers["B"] not in repr(list(saver.list(race.config)))


def test_subgraph_steps_buried_with_an_unstored_input_are_not_kept(mode: str, pg_url: str) -> None:
    """durability="async": B's subgraph checkpoints land under its input
    checkpoint, whose put waits; an update_state (not checked) then moves the
    head, and B's input put is refused. What B stored hangs from a root
    checkpoint never stored, so it goes: nothing of B stays, and its caller
    is told so (kept_checkpoint_id None, not the checkpoint B read)."""
    race = Race(pg_url, mode, "sync")
    with (
        race.saver() as saver,
        ColosseumSaver.from_conn_string(pg_url, **cache_options(mode)) as plain,
    ):
        saver.points = Points()
        graph = _sync_graph(saver)
        asyncio.run(_prepare_history(graph, race.config, "sync"))
        saver.points = Points("writes:root*", "put:root")
        refusals: dict[str, ThreadConflictError] = {}

        def send() -> None:
            try:
                graph.invoke(_new_input(race.markers["B"]), race.config, durability="async")
            except ThreadConflictError as exc:
                refusals["B"] = exc

        run = threading.Thread(target=send, daemon=True)
        run.start()
        assert saver.points.wait("put:sub") == "stored"
        _sync_graph(plain).update_state(race.config, {"notes": ["meanwhile"]})
        saver.points.release("writes:root*")
        saver.points.release("put:root")
        run.join(WAIT)
        saver.points = Points()
        assert refusals["B"].kept_checkpoint_id is None
        assert set(_postgres_mentions(race, race.markers["B"]).values()) == {0}
        assert _redis_mentions(race, saver, race.markers["B"]) == []
        assert race.markers["B"] not in repr(list(saver.list(race.config)))


def test_a_burial_keeps_what_another_run_wrote_to_or_continued(pg_url: str) -> None:
    """The burial of a refused run's subgraph checkpoints deletes only
    checkpoints whose root checkpoint is absent, that no other run wrote to
    (its claim) or continued (a child not buried with them). Here a run's real
    subgraph checkpoints are handed to it as if the refused run had stored
    them under a root that does not exist."""
    truncate(pg_url)
    thread_id = f"bury-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": thread_id}}
    with ColosseumSaver.from_conn_string(pg_url, on_conflict="raise") as saver:
        _sync_graph(saver).invoke({"topic": "owls", "notes": []}, config)
        subgraph = [
            t.config["configurable"]
            for t in saver.list(config)
            if t.config["configurable"]["checkpoint_ns"]
        ]
        assert len(subgraph) >= 2
        newest, older = subgraph[0], subgraph[-1]  # list() is newest first

        def bury(*checkpoints: dict, root: str = "no-such-root") -> None:
            run = RunWrites()  # a refused run, whose writer token is its own
            run.nested = {
                ((thread_id, c["checkpoint_ns"], c["checkpoint_id"]), root) for c in checkpoints
            }
            saver._run(saver._store._bury_run(run))

        def stored() -> set[str]:
            return {t.config["configurable"]["checkpoint_id"] for t in saver.list(config)}

        bury(*subgraph)  # every one carries the claim of the run that wrote to it
        assert {c["checkpoint_id"] for c in subgraph} <= stored()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "DELETE FROM colosseum_writes WHERE thread_id = %s AND task_id = %s",
                (thread_id, CLAIM_TASK_ID),
            )
        bury(older)  # its child is not buried with it
        assert older["checkpoint_id"] in stored()
        bury(newest, root=saver.get_tuple(config).checkpoint["id"])  # its root is stored
        assert newest["checkpoint_id"] in stored()
        bury(newest)  # no claim, no child, no root: it goes
        assert newest["checkpoint_id"] not in stored()
        assert older["checkpoint_id"] in stored()
