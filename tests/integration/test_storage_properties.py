"""Typed-reducer storage keeps every checkpoint's values exactly as they were put.

A channel's new value may be stored as a delta (`append`, `merge`) of a base
version (`_core/shapes.py`), the base known from a process-local cache
(`_core/bases.py`). Whatever the sequence of edits, forks, saver instances and
maintenance operations, reading a checkpoint back must give the values `put`
received (deep equality with identical types, see `tests.unit.test_codec.same`;
dict key order is not compared here: jsonb keeps its own key order for every
row, delta or not).

* `test_random_edits_read_back_exactly` / `..._with_copy_thread`: Hypothesis
  draws sequences of puts (message lists appended / replaced by id / removed /
  cleared / mutated IN PLACE on the very objects passed to an earlier put;
  `operator.add` lists; dicts with keys added, changed, removed), forks, puts
  through a second saver and through brand-new savers (empty caches), resumes
  from what a saver read, `prune`, `delete_for_runs` and (second test)
  `copy_thread`. After each maintenance operation and at the end, every
  checkpoint still stored reads back exactly (`get_tuple` by id, and `list`),
  deleted ones are gone, no delta row lacks its base, and no chain is deeper
  than `snapshot_every - 1`.
* Deltas are really used: pure appends are mostly `append` rows, small dict
  edits `merge` rows, depth bounded by `snapshot_every`.
* A real `StateGraph` with `add_messages` whose nodes mutate earlier messages in
  place: ColosseumSaver's states and histories equal InMemorySaver's at every step.
"""

from __future__ import annotations

import copy
import dataclasses
import uuid
from collections.abc import Iterator
from typing import Annotated, Any

import psycopg
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langgraph_colosseum import ColosseumSaver
from tests.unit.test_codec import same

SNAPSHOT_EVERY = 4
PAGE_SIZE = 3
NAMESPACES = ["", "inner:1"]
CHANNELS = ["messages", "numbers", "config"]
DICT_KEYS = ["a", "b", "c", "d", "e", "f", "g", "$t"]
SCALARS = st.one_of(
    st.sampled_from([0, 1, 1.0, 0.0, True, False, None, "x", "", 2.5, -3]),
    st.integers(-1000, 1000),
    st.text("ab", max_size=3),
)
DICT_VALUES = st.one_of(SCALARS, st.text("abc", min_size=10, max_size=40))

HYPOTHESIS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def workers(pg_url: str) -> Iterator[tuple[ColosseumSaver, ColosseumSaver]]:
    """Two savers as two worker processes would hold them: separate connections and caches.

    Plain connections, not pools: a pool's background threads use `random`,
    which Hypothesis reports when it happens during a draw.
    """
    with (
        psycopg.connect(pg_url, autocommit=True) as conn_a,
        psycopg.connect(pg_url, autocommit=True) as conn_b,
    ):
        yield (
            ColosseumSaver(conn_a, snapshot_every=SNAPSHOT_EVERY, page_size=PAGE_SIZE),
            ColosseumSaver(conn_b, snapshot_every=SNAPSHOT_EVERY, page_size=PAGE_SIZE),
        )


@pytest.fixture(scope="module")
def sql(pg_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn


def config(thread: str, ns: str = "", checkpoint_id: str | None = None) -> dict:
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def assert_same(actual: Any, expected: Any, what: str) -> None:
    assert same(actual, expected), f"{what}\n expected: {expected!r}\n actual:   {actual!r}"


# --------------------------------------------------------------------- model


@dataclasses.dataclass
class Stored:
    """One checkpoint as the test put it."""

    thread: str
    ns: str
    id: str
    run_id: str
    versions: dict[str, str]
    live: dict[str, Any]  # the objects passed to put (the test may mutate them later)
    expected: dict[str, Any]  # deep copies taken at put time


class Model:
    """Drives savers with random edits and remembers exactly what each checkpoint held."""

    def __init__(
        self,
        data: st.DataObject,
        workers: tuple[ColosseumSaver, ColosseumSaver],
        reader: ColosseumSaver,
        sql: psycopg.Connection,
        *,
        allow_copy: bool,
    ) -> None:
        self.data = data
        self.a, self.b = workers
        self.reader = reader
        if hasattr(reader.conn, "wait"):
            reader.conn.wait()  # the pool's first connection, before anything is drawn
        self.sql = sql
        self.allow_copy = allow_copy
        tag = uuid.uuid4().hex[:10]
        self.main = f"props-{tag}"
        self.threads = [self.main]
        self.copies = 0
        self.checkpoints: dict[tuple[str, str], Stored] = {}  # (thread, id) -> Stored
        self.order: list[tuple[str, str]] = []  # put order (ids increase with it)
        self.gone: set[tuple[str, str, str]] = set()  # (thread, ns, id) deleted
        self.counter = 0
        self.message_ids = 0
        self.runs = {self.main: f"{self.main}-run-0"}
        self.run_counter = 0

    def draw(self, strategy: st.SearchStrategy, label: str) -> Any:
        return self.data.draw(strategy, label=label)

    def saver(self, label: str) -> ColosseumSaver:
        choice = self.draw(st.sampled_from(["a", "a", "b", "b", "fresh"]), label)
        if choice == "a":
            return self.a
        if choice == "b":
            return self.b
        # A new instance on worker A's connection: a restarted worker, nothing cached.
        return ColosseumSaver(self.a.conn, snapshot_every=SNAPSHOT_EVERY, page_size=PAGE_SIZE)

    # ------------------------------------------------------------ edits

    def new_message(self) -> BaseMessage:
        self.message_ids += 1
        cls = self.draw(st.sampled_from([HumanMessage, AIMessage]), "message class")
        text = self.draw(st.text("xyz", max_size=4), "message text")
        return cls(content=text, id=f"msg-{self.message_ids}")

    def edit_messages(self, old: list | None) -> list:
        old = old if old is not None else []
        op = self.draw(
            st.sampled_from(
                ["append", "append", "append", "extend in place", "replace by id",
                 "remove", "remove all", "mutate in place", "mutate in place + append"]
            ),
            "messages edit",
        )  # fmt: skip
        if op == "extend in place":  # the very list object a previous put received
            old.extend(self.new_message() for _ in range(self.draw(st.integers(1, 2), "n")))
            return old
        new = list(old)  # add_messages: a new list of the same message objects
        if op.startswith("mutate") and new:
            i = self.draw(st.integers(0, len(new) - 1), "mutated index")
            new[i].content = self.draw(st.text("xyzw", max_size=5), "new content")
            if op.endswith("append"):
                new.append(self.new_message())
        elif op == "replace by id" and new:
            i = self.draw(st.integers(0, len(new) - 1), "replaced index")
            new[i] = type(new[i])(content=f"{new[i].content}+", id=new[i].id)
        elif op == "remove" and new:
            del new[self.draw(st.integers(0, len(new) - 1), "removed index")]
        elif op == "remove all":
            new = []
        else:
            new.extend(self.new_message() for _ in range(self.draw(st.integers(1, 3), "n")))
        return new

    def edit_numbers(self, old: list | None) -> list | None:
        old = old if old is not None else []
        op = self.draw(
            st.sampled_from(["add", "add", "add", "extend in place", "clear"]), "numbers edit"
        )
        tail = self.draw(st.lists(SCALARS, min_size=1, max_size=3), "tail")
        if op == "clear":
            return None  # the channel is cleared: its new version is stored 'empty'
        if op == "extend in place":
            old.extend(tail)
            return old
        return old + tail  # operator.add

    def edit_config(self, old: dict | None) -> dict:
        if old is None:
            return self.draw(
                st.dictionaries(st.sampled_from(DICT_KEYS), DICT_VALUES, max_size=8), "dict"
            )
        in_place = self.draw(st.booleans(), "dict in place?")
        new = old if in_place else dict(old)
        for _ in range(self.draw(st.integers(1, 2), "dict edits")):
            op = self.draw(
                st.sampled_from(["set", "set", "set", "set", "remove", "remove", "replace all"]),
                "dict edit",
            )
            if op == "remove" and new:
                del new[self.draw(st.sampled_from(sorted(new)), "removed key")]
            elif op == "replace all":
                new = self.draw(
                    st.dictionaries(st.sampled_from(DICT_KEYS), DICT_VALUES, max_size=8), "dict"
                )
            else:
                new[self.draw(st.sampled_from(DICT_KEYS), "key")] = self.draw(DICT_VALUES, "value")
        return new

    # ------------------------------------------------------------ operations

    def lane(self, thread: str, ns: str) -> list[Stored]:
        return [self.checkpoints[k] for k in self.order if k in self.checkpoints
                and self.checkpoints[k].thread == thread and self.checkpoints[k].ns == ns]  # fmt: skip

    def put(self) -> None:
        thread = self.draw(st.sampled_from(self.threads), "thread")
        ns = self.draw(st.sampled_from(NAMESPACES), "ns")
        lane = self.lane(thread, ns)
        parent: Stored | None = None
        if lane:
            parent = self.draw(
                st.one_of(st.just(lane[-1]), st.just(lane[-1]), st.sampled_from(lane)), "parent"
            )  # mostly the latest, sometimes a fork of an older one
        live = dict(parent.live) if parent else {}
        versions = dict(parent.versions) if parent else {}
        changed = self.draw(
            st.lists(st.sampled_from(CHANNELS), min_size=1, max_size=3, unique=True), "changed"
        )
        for channel in changed:
            edit = getattr(self, f"edit_{channel}")
            value = edit(live.get(channel))
            if value is None:
                live.pop(channel, None)
            else:
                live[channel] = value
        new_versions = {ch: self.a.get_next_version(versions.get(ch), None) for ch in changed}
        versions.update(new_versions)
        self.counter += 1
        # The time part is now, as LangGraph's own ids (a checkpoint older than
        # its thread's deletion is refused); the counter orders ids of one tick.
        checkpoint_id = f"{str(uuid6())[:19]}8000-{self.counter:012d}"
        run_id = self.runs[thread]
        checkpoint = {
            "v": 4,
            "id": checkpoint_id,
            "ts": f"2024-01-01T00:00:00.{self.counter:06d}+00:00",
            "channel_values": live,
            "channel_versions": dict(versions),
            "versions_seen": {},
            "updated_channels": sorted(changed),
        }
        # Channels not changed keep the version (and the stored value) of the parent.
        expected = {
            ch: v for ch, v in (parent.expected if parent else {}).items() if ch not in changed
        }
        expected.update({ch: copy.deepcopy(live[ch]) for ch in changed if ch in live})
        # In channel_versions order, as InMemorySaver hands channel_values back.
        expected = {ch: expected[ch] for ch in versions if ch in expected}
        saver = self.saver("put through")
        metadata = {"source": "loop", "step": self.counter, "parents": {}, "run_id": run_id}
        saver.put(
            config(thread, ns, parent.id if parent else None), checkpoint, metadata, new_versions
        )
        stored = Stored(thread, ns, checkpoint_id, run_id, versions, live, expected)
        self.checkpoints[(thread, checkpoint_id)] = stored
        self.order.append((thread, checkpoint_id))
        self.check_one(stored, self.reader)
        for (encoding,) in self.sql.execute(
            "SELECT encoding FROM colosseum_channel_values "
            "WHERE thread_id = %s AND checkpoint_ns = %s AND version = ANY(%s)",
            (thread, ns, list(new_versions.values())),
        ).fetchall():
            event(f"put stored a row as {encoding}")

    def resume(self) -> None:
        """Read a checkpoint through a worker; later puts from it use the decoded objects."""
        keys = [k for k in self.order if k in self.checkpoints]
        if not keys:
            return
        key = self.draw(st.sampled_from(keys), "resume")
        stored = self.checkpoints[key]
        saver = self.draw(st.sampled_from([self.a, self.b]), "read through")
        values = self.check_one(stored, saver)
        stored.live = values  # as a graph resuming from get_tuple: it edits these objects

    def new_run(self) -> None:
        thread = self.draw(st.sampled_from(self.threads), "thread of the new run")
        self.run_counter += 1
        self.runs[thread] = f"{thread}-run-{self.run_counter}"

    def prune(self) -> None:
        thread = self.draw(st.sampled_from(self.threads), "pruned thread")
        self.saver("prune through").prune([thread])
        for ns in NAMESPACES:
            lane = self.lane(thread, ns)
            for old in lane[:-1]:
                self.forget(old)
        self.check_all()

    def delete_run(self) -> None:
        runs = sorted({s.run_id for s in self.checkpoints.values()})
        if not runs:
            return
        run_id = self.draw(st.sampled_from(runs), "deleted run")
        self.saver("delete through").delete_for_runs([run_id])
        for stored in list(self.checkpoints.values()):
            if stored.run_id == run_id:
                self.forget(stored)
        # A deleted run writes nothing more (its puts are refused): the next
        # write to its threads comes from a new run, as LangGraph's next invoke.
        for thread, current in list(self.runs.items()):
            if current == run_id:
                self.run_counter += 1
                self.runs[thread] = f"{thread}-run-{self.run_counter}"
        self.check_all()

    def copy_thread(self) -> None:
        source = self.draw(st.sampled_from(self.threads), "copied thread")
        self.copies += 1
        target = f"{self.main}-copy-{self.copies}"
        self.saver("copy through").copy_thread(source, target)
        for key in list(self.order):
            stored = self.checkpoints.get(key)
            if stored is None or stored.thread != source:
                continue
            twin = dataclasses.replace(
                stored, thread=target, live=copy.deepcopy(stored.expected),
                versions=dict(stored.versions),
            )  # fmt: skip
            self.checkpoints[(target, stored.id)] = twin
            self.order.append((target, stored.id))
        self.threads.append(target)
        self.runs[target] = self.runs[source]
        self.check_all()
        # The copy's checkpoints are the source's.
        for ns in NAMESPACES:
            src = list(self.reader.list(config(source, ns)))
            dst = list(self.reader.list(config(target, ns)))
            assert [t.config["configurable"]["checkpoint_id"] for t in dst] == [
                t.config["configurable"]["checkpoint_id"] for t in src
            ]
            for s, d in zip(src, dst):
                assert_same(
                    d.checkpoint["channel_values"], s.checkpoint["channel_values"],
                    f"copy {target} of {source}, checkpoint {s.config['configurable']['checkpoint_id']}",
                )  # fmt: skip

    def forget(self, stored: Stored) -> None:
        del self.checkpoints[(stored.thread, stored.id)]
        self.gone.add((stored.thread, stored.ns, stored.id))

    # ------------------------------------------------------------ checks

    def check_one(self, stored: Stored, saver: ColosseumSaver) -> dict[str, Any]:
        t = saver.get_tuple(config(stored.thread, stored.ns, stored.id))
        assert t is not None, f"checkpoint {stored.id} of {stored.thread!r}/{stored.ns!r} is gone"
        values = t.checkpoint["channel_values"]
        assert_same(values, stored.expected, f"get_tuple {stored.thread}/{stored.ns!r}/{stored.id}")
        return values

    def check_all(self) -> None:
        for stored in self.checkpoints.values():
            self.check_one(stored, self.reader)
        for thread, ns, checkpoint_id in self.gone:
            assert self.reader.get_tuple(config(thread, ns, checkpoint_id)) is None
        for thread in self.threads:
            listed = {
                (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"]): t
                for t in self.a.list({"configurable": {"thread_id": thread}})
            }  # fmt: skip
            mine = {(s.ns, s.id): s for s in self.checkpoints.values() if s.thread == thread}
            assert set(listed) == set(mine), f"list of {thread}"
            for key, stored in mine.items():
                assert_same(
                    listed[key].checkpoint["channel_values"], stored.expected,
                    f"list {thread}/{key}",
                )  # fmt: skip
        self.check_rows()

    def check_rows(self) -> None:
        threads = list(self.threads)
        orphans = self.sql.execute(
            """
            SELECT v.thread_id, v.checkpoint_ns, v.channel, v.version, v.base_version
            FROM colosseum_channel_values v
            WHERE v.thread_id = ANY(%s) AND v.base_version IS NOT NULL
              AND NOT EXISTS (
                SELECT 1 FROM colosseum_channel_values b
                WHERE b.thread_id = v.thread_id AND b.checkpoint_ns = v.checkpoint_ns
                  AND b.channel = v.channel AND b.version = v.base_version)
            """,
            (threads,),
        ).fetchall()
        assert not orphans, f"delta rows without their base: {orphans}"
        (max_depth,) = self.sql.execute(
            "SELECT coalesce(max(depth), 0) FROM colosseum_channel_values WHERE thread_id = ANY(%s)",
            (threads,),
        ).fetchone()
        assert max_depth <= SNAPSHOT_EVERY - 1

    def run(self) -> None:
        ops = ["put"] * 8 + ["resume", "resume", "new_run", "prune", "delete_run"]
        if self.allow_copy:
            ops.append("copy_thread")
        self.put()
        for _ in range(self.draw(st.integers(4, 25), "operations")):
            op = self.draw(st.sampled_from(ops), "operation")
            event(f"operation: {op}")
            getattr(self, op)()
        self.check_all()
        for (encoding,) in self.sql.execute(
            "SELECT DISTINCT encoding FROM colosseum_channel_values WHERE thread_id = ANY(%s)",
            (self.threads,),
        ).fetchall():
            event(f"rows stored as {encoding}")


@HYPOTHESIS
@given(data=st.data())
def test_random_edits_read_back_exactly(
    data: st.DataObject, workers: tuple[ColosseumSaver, ColosseumSaver],
    saver: ColosseumSaver, sql: psycopg.Connection,
) -> None:  # fmt: skip
    Model(data, workers, saver, sql, allow_copy=False).run()


@HYPOTHESIS
@given(data=st.data())
def test_random_edits_read_back_exactly_with_copy_thread(
    data: st.DataObject, workers: tuple[ColosseumSaver, ColosseumSaver],
    saver: ColosseumSaver, sql: psycopg.Connection,
) -> None:  # fmt: skip
    Model(data, workers, saver, sql, allow_copy=True).run()


# ------------------------------------------------------ focused examples


def put_chain(saver: ColosseumSaver, thread: str, values: list[dict[str, Any]]) -> list[str]:
    """Put one checkpoint per entry (each changes the channels it names); returns their ids."""
    ids: list[str] = []
    versions: dict[str, str] = {}
    current: dict[str, Any] = {}
    cfg = config(thread)
    for i, changes in enumerate(values):
        new_versions = {ch: saver.get_next_version(versions.get(ch), None) for ch in changes}
        versions.update(new_versions)
        current.update(changes)
        checkpoint_id = f"1ef00000-0000-6000-8000-{i + 1:012d}"
        checkpoint = {
            "v": 4, "id": checkpoint_id, "ts": f"2024-01-01T00:00:{i % 60:02d}+00:00",
            "channel_values": current, "channel_versions": dict(versions),
            "versions_seen": {}, "updated_channels": sorted(changes),
        }  # fmt: skip
        cfg = saver.put(cfg, checkpoint, {"source": "loop", "step": i, "parents": {}}, new_versions)
        ids.append(checkpoint_id)
    return ids


def encodings(sql: psycopg.Connection, thread: str, channel: str) -> list[tuple[str, int]]:
    return sql.execute(
        "SELECT encoding, depth FROM colosseum_channel_values "
        "WHERE thread_id = %s AND channel = %s ORDER BY version",
        (thread, channel),
    ).fetchall()


def test_pure_appends_are_stored_as_append_rows(pg_url: str, sql: psycopg.Connection) -> None:
    thread = f"appends-{uuid.uuid4().hex[:8]}"
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2, snapshot_every=5) as s:
        numbers: list[int] = []
        msgs: list[BaseMessage] = []
        expected: list[dict[str, Any]] = []
        steps = []
        for i in range(30):
            numbers = [*numbers, i, float(i)]
            msgs = [*msgs, AIMessage(f"m{i}", id=f"m{i}")]
            steps.append({"numbers": numbers, "messages": msgs})
            expected.append({"numbers": list(numbers), "messages": copy.deepcopy(msgs)})
        ids = put_chain(s, thread, steps)
        for channel in ("numbers", "messages"):
            rows = encodings(sql, thread, channel)
            assert len(rows) == 30
            appends = sum(1 for enc, _ in rows if enc == "append")
            assert appends >= 20, rows  # 4 of every 5 with snapshot_every=5
            assert max(depth for _, depth in rows) <= 4, rows
            assert all((enc == "append") == (depth > 0) for enc, depth in rows), rows
        for checkpoint_id, want in zip(ids, expected):
            got = s.get_tuple(config(thread, "", checkpoint_id)).checkpoint["channel_values"]
            assert_same(got, want, checkpoint_id)
        listed = {t.config["configurable"]["checkpoint_id"]: t for t in s.list(config(thread))}
        for checkpoint_id, want in zip(ids, expected):
            assert_same(listed[checkpoint_id].checkpoint["channel_values"], want, checkpoint_id)
        # prune keeps the latest, rewritten in full, and nothing else.
        s.prune([thread])
        rows = encodings(sql, thread, "numbers") + encodings(sql, thread, "messages")
        assert [enc for enc, _ in rows] == ["json", "json"]
        got = s.get_tuple(config(thread)).checkpoint["channel_values"]
        assert_same(got, expected[-1], "after prune")


def test_small_dict_edits_are_stored_as_merge_rows(pg_url: str, sql: psycopg.Connection) -> None:
    thread = f"merges-{uuid.uuid4().hex[:8]}"
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2, snapshot_every=50) as s:
        state = {f"key{i}": "v" * 20 for i in range(10)}
        steps, expected = [], []
        for i in range(20):
            state = dict(state)
            state[f"key{i % 10}"] = i if i % 3 else float(i)
            if i % 4 == 0:
                state.pop(f"key{(i + 5) % 10}", None)
            steps.append({"state": state})
            expected.append({"state": copy.deepcopy(state)})
        ids = put_chain(s, thread, steps)
        rows = encodings(sql, thread, "state")
        assert sum(1 for enc, _ in rows if enc == "merge") >= 5, rows
        for checkpoint_id, want in zip(ids, expected):
            got = s.get_tuple(config(thread, "", checkpoint_id)).checkpoint["channel_values"]
            assert_same(got, want, checkpoint_id)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param([{"n": 1}], [{"n": 1.0}, {"n": 2}], id="int-then-float"),
        pytest.param([{"flag": True}], [{"flag": 1}, {"flag": 2}], id="bool-then-int"),
        pytest.param([[0]], [[False], [1]], id="nested-list-int-then-bool"),
        pytest.param(
            [HumanMessage("hi", id="h1", additional_kwargs={"score": 1})],
            [
                HumanMessage("hi", id="h1", additional_kwargs={"score": 1.0}),
                AIMessage("a", id="a1"),
            ],
            id="message-kwargs-int-then-float",
        ),
    ],
)
def test_nested_lookalike_values_read_back_exactly(pg_url: str, first: list, second: list) -> None:
    """The second value extends the first with items == to it but of other nested types."""
    thread = f"lookalike-{uuid.uuid4().hex[:8]}"
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as s:
        ids = put_chain(s, thread, [{"items": first}, {"items": second}])
        got = s.get_tuple(config(thread, "", ids[1])).checkpoint["channel_values"]["items"]
        assert_same(got, second, "the second checkpoint")


@pytest.mark.parametrize("maintenance", ["prune", "delete_for_runs"])
def test_second_worker_with_stale_bases(
    pg_url: str, sql: psycopg.Connection, maintenance: str
) -> None:
    """Worker B caches a base; worker A's maintenance deletes it; B's next put falls back to full."""
    thread = f"stale-{uuid.uuid4().hex[:8]}"
    with (
        ColosseumSaver.from_conn_string(pg_url, pool_size=2) as a,
        ColosseumSaver.from_conn_string(pg_url, pool_size=2) as b,
    ):
        versions: dict[str, str] = {}
        cfg = config(thread)
        expected: dict[str, list] = {}
        msgs = [HumanMessage("q0", id="q0")]
        steps = [
            (b, "run-1", [1], msgs),
            (a, "run-2", [1, 2], [*msgs, AIMessage("a0", id="a0")]),
            (a, "run-2", [1, 2, 3], [*msgs, AIMessage("a0", id="a0"), HumanMessage("q1", id="q1")]),
        ]
        for i, (worker, run_id, numbers, messages) in enumerate(steps):
            new_versions = {
                ch: worker.get_next_version(versions.get(ch), None) for ch in ("n", "m")
            }
            versions.update(new_versions)
            checkpoint_id = f"1ef00000-0000-6000-8000-{i + 1:012d}"
            checkpoint = {
                "v": 4, "id": checkpoint_id, "ts": f"2024-01-01T00:00:0{i}+00:00",
                "channel_values": {"n": numbers, "m": messages},
                "channel_versions": dict(versions), "versions_seen": {}, "updated_channels": ["m", "n"],
            }  # fmt: skip
            expected[checkpoint_id] = copy.deepcopy(checkpoint["channel_values"])
            cfg = worker.put(
                cfg, checkpoint, {"source": "loop", "step": i, "run_id": run_id}, new_versions
            )
        if maintenance == "prune":
            a.prune([thread])
            survivors = ["1ef00000-0000-6000-8000-000000000003"]
        else:
            a.delete_for_runs(["run-1"])
            survivors = [
                "1ef00000-0000-6000-8000-000000000002",
                "1ef00000-0000-6000-8000-000000000003",
            ]
        (b_rows,) = sql.execute(
            "SELECT count(*) FROM colosseum_channel_values WHERE thread_id = %s AND version LIKE %s",
            (thread, "00000000000000000000000000000001.%"),
        ).fetchone()
        assert b_rows == 0, "B's base rows should be gone"
        # B still holds version 1 as its base: [1] is a prefix of what it puts now.
        new_versions = {ch: b.get_next_version(versions.get(ch), None) for ch in ("n", "m")}
        versions.update(new_versions)
        checkpoint = {
            "v": 4, "id": "1ef00000-0000-6000-8000-000000000004", "ts": "2024-01-01T00:00:04+00:00",
            "channel_values": {"n": [1, 2, 3, 4], "m": [*steps[2][3], AIMessage("a1", id="a1")]},
            "channel_versions": dict(versions), "versions_seen": {}, "updated_channels": ["m", "n"],
        }  # fmt: skip
        expected[checkpoint["id"]] = copy.deepcopy(checkpoint["channel_values"])
        b.put(cfg, checkpoint, {"source": "loop", "step": 4, "run_id": "run-3"}, new_versions)
        for checkpoint_id in [*survivors, checkpoint["id"]]:
            for reader in (a, b):
                got = reader.get_tuple(config(thread, "", checkpoint_id))
                assert got is not None, checkpoint_id
                assert_same(
                    got.checkpoint["channel_values"], expected[checkpoint_id], checkpoint_id
                )
        # And B's cache is sound again: its next append is a delta of what it just wrote.
        new_versions = {"n": b.get_next_version(versions["n"], None)}
        versions.update(new_versions)
        checkpoint = {
            **checkpoint, "id": "1ef00000-0000-6000-8000-000000000005",
            "channel_values": {**checkpoint["channel_values"], "n": [1, 2, 3, 4, 5]},
            "channel_versions": dict(versions), "updated_channels": ["n"],
        }  # fmt: skip
        b.put(
            config(thread, "", "1ef00000-0000-6000-8000-000000000004"),
            checkpoint,
            {"step": 5},
            new_versions,
        )
        (encoding,) = sql.execute(
            "SELECT encoding FROM colosseum_channel_values WHERE thread_id = %s AND version = %s",
            (thread, new_versions["n"]),
        ).fetchone()
        assert encoding == "append"
        got = a.get_tuple(config(thread)).checkpoint["channel_values"]
        assert_same(got["n"], [1, 2, 3, 4, 5], "latest")


def test_copy_thread_with_delta_rows(pg_url: str) -> None:
    thread = f"copy-{uuid.uuid4().hex[:8]}"
    with ColosseumSaver.from_conn_string(pg_url, pool_size=2) as s:
        ids = put_chain(s, thread, [{"items": [1]}, {"items": [1, 2]}, {"items": [1, 2, 3]}])
        s.copy_thread(thread, f"{thread}-copy")
        for checkpoint_id in ids:
            a = s.get_tuple(config(thread, "", checkpoint_id))
            b = s.get_tuple(config(f"{thread}-copy", "", checkpoint_id))
            assert b is not None
            assert_same(
                b.checkpoint["channel_values"], a.checkpoint["channel_values"], checkpoint_id
            )


# ------------------------------------------------------------ LangGraph level


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def chat_graph(checkpointer: Any) -> Any:
    def bot(state: ChatState) -> dict:
        n = len(state["messages"])
        return {"messages": [AIMessage(f"reply {n}", id=f"ai-{n}")]}

    def editor(state: ChatState) -> dict:
        msgs = state["messages"]
        n = len(msgs)
        last_human = next(m for m in reversed(msgs) if isinstance(m, HumanMessage))
        if "edit" in str(last_human.content):
            # In place, on the objects the previous checkpoint was put with.
            msgs[0].content = f"edited at {n}"
            msgs[-1].content = f"{msgs[-1].content} (revised)"
        return {"messages": [AIMessage(f"note {n}", id=f"note-{n}")]}

    builder = StateGraph(ChatState)
    builder.add_node("bot", bot)
    builder.add_node("editor", editor)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", "editor")
    builder.add_edge("editor", END)
    return builder.compile(checkpointer=checkpointer)


def plain(value: Any) -> Any:
    """Messages as (class, fields): InMemorySaver's serde does not keep pydantic's fields_set."""
    if isinstance(value, BaseMessage):
        return {"class": type(value).__name__, **plain(value.model_dump())}
    if type(value) is dict:
        return {k: plain(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(plain(v) for v in value)
    return value


def snapshot_view(snapshot: Any) -> tuple:
    return (
        plain(snapshot.values), snapshot.next,
        snapshot.metadata.get("step"), snapshot.metadata.get("source"),
    )  # fmt: skip


@pytest.mark.parametrize("snapshot_every", [3, 100])
def test_graph_mutating_messages_in_place_matches_in_memory(
    pg_url: str, sql: psycopg.Connection, snapshot_every: int
) -> None:
    inputs = ["hello", "please edit", "more", "edit again", "edit once more", "bye"]
    thread = f"graph-{uuid.uuid4().hex[:8]}"
    cfg = {"configurable": {"thread_id": thread}}
    with ColosseumSaver.from_conn_string(
        pg_url, pool_size=2, snapshot_every=snapshot_every
    ) as ours:
        graphs = {"memory": chat_graph(InMemorySaver()), "colosseum": chat_graph(ours)}
        for i, text in enumerate(inputs):
            views: dict[str, Any] = {}
            for name, graph in graphs.items():
                graph.invoke(
                    {"messages": [HumanMessage(text, id=f"human-{i}")]}, cfg, durability="sync"
                )
                views[name] = (
                    snapshot_view(graph.get_state(cfg)),
                    [snapshot_view(s) for s in graph.get_state_history(cfg)],
                )
            assert_same(views["colosseum"][0], views["memory"][0], f"get_state after input {i}")
            assert len(views["colosseum"][1]) == len(views["memory"][1])
            for j, (ours_, ref) in enumerate(zip(views["colosseum"][1], views["memory"][1])):
                assert_same(ours_, ref, f"history[{j}] after input {i}")
        # The edits really happened, and earlier checkpoints kept the unedited text.
        history = list(graphs["colosseum"].get_state_history(cfg))
        assert history[0].values["messages"][0].content.startswith("edited at")
        assert history[-2].values["messages"][0].content == "hello"
        # Time travel: fork from an older checkpoint in both, and compare again.
        views = {}
        for name, graph in graphs.items():
            older = list(graph.get_state_history(cfg))[7].config
            graph.invoke(
                {"messages": [HumanMessage("edit the fork", id="human-fork")]},
                older,
                durability="sync",
            )
            views[name] = [snapshot_view(s) for s in graph.get_state_history(cfg)]
        assert len(views["colosseum"]) == len(views["memory"])
        for j, (ours_, ref) in enumerate(zip(views["colosseum"], views["memory"])):
            assert_same(ours_, ref, f"history[{j}] after the fork")
        # Deltas were exercised, not only full rows.
        (appends,) = sql.execute(
            "SELECT count(*) FROM colosseum_channel_values "
            "WHERE thread_id = %s AND channel = 'messages' AND encoding = 'append'",
            (thread,),
        ).fetchone()
        assert appends > 0
