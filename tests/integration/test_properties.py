"""Model-based property test: ColosseumSaver behaves as InMemorySaver does.

Hypothesis draws a random sequence of `put` (forks and fresh roots, namespaces
"" and "child:1", channels updated or cleared, versions from
`saver.get_next_version`) and `put_writes` (regular channels, which are
insert-if-absent, and special channels from WRITES_IDX_MAP, which upsert).
Every operation is applied to both savers; then every read (`get_tuple` latest
and by id, `list` with config/filter/before/limit) must give the same answer.

InMemorySaver is given a pickle serde, so the reference keeps every value
exactly as it was put.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import WRITES_IDX_MAP, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_colosseum import ColosseumSaver
from tests.conftest import CACHE_MODES, INLINE_VALUES, saver_fixtures, truncate
from tests.unit.test_codec import same

THREADS = ["thread-1", "thread-2"]
NAMESPACES = ["", "child:1"]
CHANNELS = ["a", "b", "messages", "$t"]
SPECIAL_CHANNELS = sorted(WRITES_IDX_MAP)  # __error__, __interrupt__, __resume__, __scheduled__
WRITE_CHANNELS = [*CHANNELS, *SPECIAL_CHANNELS]
TASKS = ["task-1", "task-2", "task-3"]
TASK_PATHS = ["", "~__pregel_pull, a", "~__pregel_push, 0"]
SOURCES = ["input", "loop", "update", "fork"]
TAGS = ["x", "y"]

channel_values = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.text("ab$", max_size=3),
    st.lists(st.integers(0, 3), max_size=3),
    st.tuples(st.integers(0, 2), st.text("xy", max_size=2)),
    st.dictionaries(st.sampled_from(["k", "$t", "v"]), st.integers(0, 2), max_size=2),
    st.sampled_from([HumanMessage("hi", id="m1"), {"nested": [HumanMessage("yo", id="m2")]}]),
)


class PickleSerde:
    """Keeps every value exactly (types included) in the reference saver."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return "pickle", pickle.dumps(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return pickle.loads(data[1])


def normalize(t: CheckpointTuple | None) -> Any:
    if t is None:
        return None
    checkpoint = dict(t.checkpoint)
    checkpoint["channel_versions"] = {k: str(v) for k, v in checkpoint["channel_versions"].items()}
    checkpoint["versions_seen"] = {
        node: {k: str(v) for k, v in seen.items()}
        for node, seen in checkpoint["versions_seen"].items()
    }
    return {
        "config": t.config,
        "checkpoint": checkpoint,
        "metadata": t.metadata,
        "parent_config": t.parent_config,
        "pending_writes": [tuple(w) for w in (t.pending_writes or [])],
    }


def assert_same(expected: Any, actual: Any, what: str) -> None:
    assert same(actual, expected), (
        f"{what}\nInMemorySaver: {expected!r}\nColosseumSaver: {actual!r}"
    )


class Model:
    """Drives both savers with the same operations and remembers what exists."""

    def __init__(self, saver: ColosseumSaver, data: st.DataObject) -> None:
        self.saver = saver
        self.ref = InMemorySaver(serde=PickleSerde())
        self.data = data
        self.checkpoints: list[tuple[str, str, str]] = []  # (thread, ns, id), in put order
        self.states: dict[str, tuple[dict, dict, dict]] = {}  # id -> values, versions, seen
        self.counter = 0

    def draw(self, strategy: st.SearchStrategy, label: str) -> Any:
        return self.data.draw(strategy, label=label)

    def config(self, thread: str, ns: str, checkpoint_id: str | None = None) -> dict:
        configurable = {"thread_id": thread, "checkpoint_ns": ns}
        if checkpoint_id:
            configurable["checkpoint_id"] = checkpoint_id
        return {"configurable": configurable}

    # ------------------------------------------------------------ operations

    def put(self) -> None:
        thread = self.draw(st.sampled_from(THREADS), "thread")
        ns = self.draw(st.sampled_from(NAMESPACES), "ns")
        lane = [cid for t, n, cid in self.checkpoints if (t, n) == (thread, ns)]
        parent = None
        if lane:
            # Mostly continue from the latest, sometimes fork an older one or start over.
            parent = self.draw(
                st.one_of(st.just(lane[-1]), st.sampled_from(lane), st.none()), "parent"
            )
        values, versions, seen = copy.deepcopy(self.states[parent]) if parent else ({}, {}, {})
        changed = self.draw(st.lists(st.sampled_from(CHANNELS), unique=True, max_size=3), "changed")
        new_versions: dict[str, str] = {}
        for channel in changed:
            if channel in values and self.draw(st.integers(0, 4), f"clear {channel}?") == 0:
                del values[channel]  # cleared: stored as 'empty'
            else:
                values[channel] = self.draw(channel_values, f"value of {channel}")
            new_versions[channel] = self.saver.get_next_version(versions.get(channel), None)
            versions[channel] = new_versions[channel]
        if changed:
            node = self.draw(st.sampled_from(["node_a", "node_b"]), "node")
            seen.setdefault(node, {}).update({ch: versions[ch] for ch in changed})
        self.counter += 1
        checkpoint_id = f"1ef00000-0000-6000-8000-{self.counter:012d}"
        checkpoint = {
            "v": 4,
            "id": checkpoint_id,
            "ts": f"2024-01-01T00:00:{self.counter:02d}.000000+00:00",
            "channel_values": values,
            "channel_versions": versions,
            "versions_seen": seen,
            "updated_channels": sorted(changed) or None,
        }
        metadata: dict[str, Any] = {
            "source": self.draw(st.sampled_from(SOURCES), "source"),
            "step": self.draw(st.integers(-1, 4), "step"),
            "parents": {},
        }
        if self.draw(st.booleans(), "tagged?"):
            metadata["tag"] = self.draw(st.sampled_from([*TAGS, None]), "tag")
        config = self.config(thread, ns, parent)
        if self.draw(st.booleans(), "run metadata?"):
            config["metadata"] = {"run_id": self.draw(st.sampled_from(["run-1", "run-2"]), "run")}

        expected = self.ref.put(
            copy.deepcopy(config),
            copy.deepcopy(checkpoint),
            copy.deepcopy(metadata),
            dict(new_versions),
        )
        actual = self.saver.put(
            copy.deepcopy(config),
            copy.deepcopy(checkpoint),
            copy.deepcopy(metadata),
            dict(new_versions),
        )
        assert actual == expected
        self.checkpoints.append((thread, ns, checkpoint_id))
        self.states[checkpoint_id] = (values, versions, seen)
        self.check_latest(thread, ns)

    def put_writes(self) -> None:
        thread, ns, checkpoint_id = self.draw(st.sampled_from(self.checkpoints), "target")
        task_id = self.draw(st.sampled_from(TASKS), "task_id")
        task_path = self.draw(st.sampled_from(TASK_PATHS), "task_path")
        channels = self.draw(
            st.lists(st.sampled_from(WRITE_CHANNELS), min_size=1, max_size=4), "channels"
        )
        writes = [(c, self.draw(channel_values, f"write to {c}")) for c in channels]
        config = self.config(thread, ns, checkpoint_id)
        self.ref.put_writes(copy.deepcopy(config), copy.deepcopy(writes), task_id, task_path)
        self.saver.put_writes(copy.deepcopy(config), copy.deepcopy(writes), task_id, task_path)
        self.check_by_id(thread, ns, checkpoint_id)

    # ------------------------------------------------------------ reads

    def check_latest(self, thread: str, ns: str) -> None:
        config = self.config(thread, ns)
        assert_same(
            normalize(self.ref.get_tuple(config)),
            normalize(self.saver.get_tuple(config)),
            f"get_tuple latest of {config}",
        )

    def check_by_id(self, thread: str, ns: str, checkpoint_id: str) -> None:
        config = self.config(thread, ns, checkpoint_id)
        assert_same(
            normalize(self.ref.get_tuple(config)),
            normalize(self.saver.get_tuple(config)),
            f"get_tuple of {config}",
        )

    def draw_filter(self) -> dict | None:
        return self.draw(
            st.none()
            | st.fixed_dictionaries(
                {},
                optional={
                    "source": st.sampled_from(SOURCES),
                    "step": st.integers(-1, 4) | st.integers(-1, 4).map(float),
                    "tag": st.sampled_from([*TAGS, None]),  # None also matches a missing key
                    "parents": st.just({}),
                    "run_id": st.sampled_from(["run-1", "run-2"]),
                    "absent_key": st.just("v"),
                },
            ),
            "filter",
        )

    def check_everything(self) -> None:
        ids = [cid for _, _, cid in self.checkpoints]
        for thread in [*THREADS, "never-used"]:
            for ns in NAMESPACES:
                self.check_latest(thread, ns)
        for thread, ns, checkpoint_id in self.checkpoints:
            self.check_by_id(thread, ns, checkpoint_id)
        self.check_by_id(THREADS[0], "", "1ef00000-0000-6000-8000-999999999999")  # missing

        for _ in range(self.draw(st.integers(1, 4), "list queries")):
            thread = self.draw(st.sampled_from(THREADS), "list thread")
            ns = self.draw(st.sampled_from(NAMESPACES), "list ns")
            filter_ = self.draw_filter()
            before = None
            if ids and self.draw(st.booleans(), "before?"):
                before = {
                    "configurable": {
                        "thread_id": thread,
                        "checkpoint_id": self.draw(st.sampled_from(ids), "before id"),
                    }
                }
            limit = self.draw(st.none() | st.integers(0, 4), "limit")
            config = self.config(thread, ns)
            if ids and self.draw(st.integers(0, 5), "list by id?") == 0:
                config = self.config(thread, ns, self.draw(st.sampled_from(ids), "list id"))
            kwargs = {"filter": filter_, "before": before, "limit": limit}
            expected = [normalize(t) for t in self.ref.list(config, **kwargs)]
            actual = [normalize(t) for t in self.saver.list(config, **kwargs)]
            assert_same(expected, actual, f"list({config}, {kwargs})")

            # Every namespace of a thread: InMemorySaver groups by namespace, so
            # only the set of tuples (no limit) is comparable.
            thread_config = {"configurable": {"thread_id": thread}}
            key = lambda n: (n["config"]["configurable"]["checkpoint_ns"], n["checkpoint"]["id"])  # noqa: E731
            expected = sorted(
                (normalize(t) for t in self.ref.list(thread_config, filter=filter_, before=before)),
                key=key,
            )
            actual = sorted(
                (
                    normalize(t)
                    for t in self.saver.list(thread_config, filter=filter_, before=before)
                ),
                key=key,
            )
            assert_same(
                expected, actual, f"list({thread_config}, filter={filter_}, before={before})"
            )

            # Across all threads: compare the ids only.
            expected_ids = {
                t.config["configurable"]["checkpoint_id"]
                for t in self.ref.list(None, filter=filter_)
            }
            actual_ids = {
                t.config["configurable"]["checkpoint_id"]
                for t in self.saver.list(None, filter=filter_)
            }
            assert actual_ids == expected_ids, f"list(None, filter={filter_})"


# Also with inline_values=True behind the Redis head: the model's reads refill
# the head, and its later puts leave channels unchanged (conftest.INLINE_VALUES).
saver, _ = saver_fixtures([*CACHE_MODES, INLINE_VALUES])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_colosseum_matches_inmemory(
    saver: ColosseumSaver, pg_url: str, data: st.DataObject
) -> None:
    truncate(pg_url)
    model = Model(saver, data)
    for _ in range(data.draw(st.integers(1, 14), label="steps")):
        if not model.checkpoints or data.draw(st.booleans(), label="put?"):
            model.put()
        else:
            model.put_writes()
    model.check_everything()


# ------------------------------------------------------------ single cases


def _two_savers(saver: ColosseumSaver) -> tuple[InMemorySaver, dict]:
    ref = InMemorySaver(serde=PickleSerde())
    config = {"configurable": {"thread_id": "single", "checkpoint_ns": ""}}
    checkpoint = {
        "v": 4,
        "id": "1ef00000-0000-6000-8000-000000000001",
        "ts": "2024-01-01T00:00:00+00:00",
        "channel_values": {},
        "channel_versions": {},
        "versions_seen": {},
        "updated_channels": None,
    }
    for s in (ref, saver):
        stored = s.put(
            copy.deepcopy(config), copy.deepcopy(checkpoint), {"source": "input", "step": -1}, {}
        )
    return ref, stored


def test_duplicate_special_write_in_one_call(saver: ColosseumSaver) -> None:
    ref, stored = _two_savers(saver)
    writes = [("__interrupt__", "first"), ("a", 1), ("__interrupt__", "second")]
    ref.put_writes(stored, writes, "task-1")
    saver.put_writes(stored, writes, "task-1")
    assert_same(
        normalize(ref.get_tuple(stored)), normalize(saver.get_tuple(stored)), "duplicate special"
    )


def test_list_filter_none_matches_missing_key(saver: ColosseumSaver) -> None:
    # InMemorySaver compares `query_value == metadata.get(query_key)`, so a None
    # filter value also matches metadata without that key.
    ref, _ = _two_savers(saver)
    for flt in ({"tag": None}, {"source": "input", "tag": None}):
        expected = [normalize(t) for t in ref.list(None, filter=flt)]
        actual = [normalize(t) for t in saver.list(None, filter=flt)]
        assert_same(expected, actual, f"list(None, filter={flt})")
