"""State schema versions: every checkpoint records the version of the state it
holds, and a checkpoint of an older version is migrated as it is read.

Sans-IO: `StateVersions` turns a stored `CheckpointTuple` into the one the
graph of this version would have written, and stamps the version on a put.
Nothing stored is changed: history stays the record of what happened.

Invariants (each kept by the method named; tests/integration/test_state_versions.py):

* A checkpoint without a recorded version is at version 1 (`version_of`).
* Migrations run in order, each at most once per read, on private copies of
  the stored values (`migrate`): the stored rows and every cache of decoded
  rows stay as read.
* A migrated checkpoint names every channel at a *marked* version
  (``<stored version>~<checkpoint id>~v<N>``, `marked`): distinct from every
  stored version, in the same order as the stored ones, so LangGraph's version
  comparisons (`versions_seen`) decide as before. It names the checkpoint too:
  a migration may read several channels, so one stored version of a channel
  can migrate to different values at two checkpoints (time travel, forks). The first put that continues from it
  writes the marked channels' (migrated) values as new rows (`channels_to_write`),
  so a checkpoint recorded at version N only ever names rows holding version-N
  values.
* A pending write is migrated from the version of the code that wrote it
  (recorded per write by a versioned saver; its checkpoint's version for one
  recorded without): a resume cut short before its step was saved leaves newer
  code's writes pending on an older checkpoint, and they are not migrated again.
* Pending writes follow their task: a renamed node's pending writes get the
  task id LangGraph computes for the new node, its interrupts the new
  interrupt ids (`_follow_renamed_nodes`). A pending task of a node the graph
  no longer has, and that no migration maps, is an error on resume
  (`OrphanedTasksError`), never a silently lost step.
"""

from __future__ import annotations

import binascii
import dataclasses
import functools
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from langgraph_colosseum._core.codec import class_name
from langgraph_colosseum._core.values import fresh_copy
from langgraph_colosseum.errors import (
    OrphanedTasksError,
    StateMigrationError,
    StateVersionError,
)

logger = logging.getLogger("langgraph_colosseum")

STATE_VERSION_KEY = "state_version"  # in each checkpoint's metadata
MIGRATION_SOURCE = "migration"  # metadata["source"] of `colosseum state migrate`'s checkpoints
_INTERRUPT, _TASKS, _BRANCH, _JOIN = "__interrupt__", "__pregel_tasks", "branch:to:", "join:"
_PULL, _PUSH = "__pregel_pull", "__pregel_push"
_WRITTEN_MEMORY = 100_000  # marked rows this process remembers having written


def is_state_channel(channel: str) -> bool:
    """A channel of the graph's state, as opposed to LangGraph's own (tasks, branches)."""
    return not channel.startswith("__") and ":" not in channel


ValuesMigration = Callable[[dict[str, Any]], "dict[str, Any] | None"]


@dataclasses.dataclass(frozen=True)
class Migration:
    """What changed from one state version to the next.

    `values` gets a dict of state channels and returns the new dict (or changes
    it in place and returns None). It is also run on each pending task's writes
    alone, so it must change only the keys present::

        def up_1_to_2(values):
            if "query" in values:
                values["queries"] = [values.pop("query")]

    Each value is migrated once, from the version it was written at: a pending
    write from the version of the code that wrote it, which a versioned saver
    records with the write (a resume cut short leaves the new code's writes
    pending on an older checkpoint; they are not migrated again).

    `nodes` maps old node names to new ones (None: the node was removed and its
    pending work is dropped). `interrupts` maps the value of each pending
    `interrupt()` of the older version.

    `fields` renames fields of registered classes (pydantic models, dataclasses,
    NamedTuples): ``fields={Position: {"ticker": "symbol"}}``. A stored
    `Position` holding `ticker` and no `symbol` is revived with the value as
    `symbol`, wherever it is (channel values, pending writes, nested), before
    `values` runs and before added fields get their defaults and removed ones
    are dropped. The rows stay as stored.
    """

    values: ValuesMigration | None = None
    nodes: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    interrupts: Callable[[Any], Any] | None = None
    fields: Mapping[type | str, Mapping[str, str]] = dataclasses.field(default_factory=dict)


class StateVersions:
    """The state schema of a graph: its version and the migrations up to it.

    Example:
        >>> versions = StateVersions(3, {1: up_1_to_2, 2: Migration(up_2_to_3, nodes={"a": "b"})})
        >>> graph = saver.versioned(builder.compile(), versions)
    """

    def __init__(
        self,
        version: int,
        migrations: Mapping[int, ValuesMigration | Migration] | None = None,
    ) -> None:
        if type(version) is not int or version < 1:
            raise ValueError(f"a state version is an integer from 1 up, got {version!r}")
        migrations = dict(migrations or {})
        expected = set(range(1, version))
        if set(migrations) != expected:
            raise ValueError(
                f"state version {version} needs one migration for each of the versions "
                f"{sorted(expected)} (the migration numbered n turns version n into n + 1); "
                f"got {sorted(migrations)}"
            )
        self.version = version
        self.migrations = {
            n: m if isinstance(m, Migration) else Migration(values=m)
            for n, m in sorted(migrations.items())
        }
        self.field_renames = _field_renames(self.migrations)
        # The graph's nodes and what triggers each (set by `saver.versioned`),
        # and its subgraphs' by namespace without task ids ("sub", "sub|inner"):
        # orphaned tasks are found, and renamed nodes' new task ids computed, from them.
        self.node_triggers: dict[str, tuple[str, ...]] | None = None
        self.subgraph_triggers: dict[str, dict[str, tuple[str, ...]]] = {}
        self._suffix = f"~v{version}"
        self._written: OrderedDict[tuple[str, str, str, str], None] = OrderedDict()
        self._lock = threading.Lock()
        self._logged: set[tuple[int, str]] = set()

    def for_graph(self, graph: Any) -> StateVersions:
        """A copy that knows `graph`'s nodes (a compiled LangGraph graph)."""
        bound = StateVersions(self.version, self.migrations)
        bound.node_triggers = _triggers_of(graph)
        bound.subgraph_triggers = {
            namespace: _triggers_of(subgraph)
            for namespace, subgraph in graph.get_subgraphs(recurse=True)
            if hasattr(subgraph, "nodes")
        }
        return bound

    def _nodes_at(self, checkpoint_ns: str) -> dict[str, tuple[str, ...]] | None:
        """The nodes of the graph a checkpoint of `checkpoint_ns` belongs to (None:
        not known, as a subgraph called from inside a node's function)."""
        if not checkpoint_ns:
            return self.node_triggers
        key = "|".join(part.split(":")[0] for part in checkpoint_ns.split("|"))
        return self.subgraph_triggers.get(key)

    # ------------------------------------------------------------ writes

    @staticmethod
    def version_of(metadata: Mapping[str, Any] | None) -> int:
        """The state version a checkpoint was written at (1 if it records none,
        or something else than a version: the application's own key, say).
        sql._HEAD_STATE_VERSION reads it the same way."""
        version = (metadata or {}).get(STATE_VERSION_KEY, 1)
        return version if type(version) is int and 1 <= version < 10**9 else 1

    def stamp(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        return {**metadata, STATE_VERSION_KEY: self.version}

    def marked(self, version: Any, checkpoint_id: str) -> str:
        """The version checkpoint `checkpoint_id`, migrated, names a channel at
        (see module docstring)."""
        if not isinstance(version, str):
            version = f"{int(version):032}.{0:016}"
        return f"{version}~{checkpoint_id}{self._suffix}"

    def channels_to_write(
        self, thread_id: str, checkpoint_ns: str, checkpoint: Mapping[str, Any], new_versions: Any
    ) -> dict[str, Any]:
        """Channels at a marked version whose rows this put must write: those not
        written yet (by this process; a second write of one is a no-op)."""
        extra = {}
        with self._lock:
            for channel, version in checkpoint["channel_versions"].items():
                if (
                    isinstance(version, str)
                    and version.endswith(self._suffix)
                    and channel not in new_versions
                    and (thread_id, checkpoint_ns, channel, version) not in self._written
                ):
                    extra[channel] = version
        return extra

    def remember_written(
        self, thread_id: str, checkpoint_ns: str, versions: Mapping[str, Any]
    ) -> None:
        with self._lock:
            for channel, version in versions.items():
                if isinstance(version, str) and version.endswith(self._suffix):
                    self._written[(thread_id, checkpoint_ns, channel, version)] = None
            while len(self._written) > _WRITTEN_MEMORY:
                self._written.popitem(last=False)

    # ------------------------------------------------------------ reads

    def on_read(
        self,
        found: CheckpointTuple,
        task_paths: Mapping[str, str],
        write_versions: Sequence[int | None],
        *,
        resume: bool,
    ) -> CheckpointTuple:
        """`found` as this version of the graph sees it. `task_paths`: each pending
        task's path; `write_versions`: the state version each pending write was
        written at, in their order (None: not recorded, the checkpoint's);
        `resume`: the read a run continues from (get_tuple), where orphaned
        pending tasks are an error."""
        stored = self.version_of(found.metadata)
        write_versions = [stored if v is None else v for v in write_versions]
        newest = max((stored, *write_versions))
        if newest > self.version:
            configurable = found.config["configurable"]
            raise StateVersionError(
                thread_id=configurable["thread_id"],
                checkpoint_id=configurable["checkpoint_id"],
                stored=newest,
                code=self.version,
            )
        if stored == self.version:
            if all(v == stored for v in write_versions):
                return found
            # older code's writes on a current checkpoint: the writes alone
            return found._replace(pending_writes=self._migrated_writes(found, write_versions))
        return self.migrate(found, stored, task_paths, write_versions, resume=resume)

    def migrate(
        self,
        found: CheckpointTuple,
        stored: int,
        paths: Mapping[str, str],
        write_versions: Sequence[int],
        *,
        resume: bool,
    ) -> CheckpointTuple:
        checkpoint = found.checkpoint
        state = {k: fresh_copy(v) for k, v in checkpoint["channel_values"].items()}
        renames: dict[str, str | None] = {}
        for number in range(stored, self.version):
            migration = self.migrations[number]
            state = self._migrate_values(migration, state, self._failed(found, number))
            for old, new in migration.nodes.items():
                for start, now in list(renames.items()):
                    if now == old:
                        renames[start] = new
                renames.setdefault(old, new)
        versions = checkpoint["channel_versions"]
        checkpoint_id = found.config["configurable"]["checkpoint_id"]

        def marked(version: Any) -> str:
            return self.marked(version, checkpoint_id)

        values, channel_versions = {}, {}
        highest = max((str(v) for v in versions.values()), default=f"{0:032}.{0:016}")
        for channel, value in state.items():
            name = _renamed_channel(channel, renames)
            if name is None:
                continue
            values[name] = value
        for channel, version in versions.items():
            name = _renamed_channel(channel, renames)
            if name is None or (
                is_state_channel(channel)
                and channel not in state
                and channel in checkpoint["channel_values"]
            ):
                continue  # a channel the migrations removed
            channel_versions[name] = marked(version)
        for channel in values:
            channel_versions.setdefault(channel, marked(highest))  # a channel added
        versions_seen = {}
        for node, seen in checkpoint["versions_seen"].items():
            name = renames.get(node, node)
            if name is None:
                continue
            versions_seen[name] = {
                renamed: marked(v)
                for ch, v in seen.items()
                if (renamed := _renamed_channel(ch, renames)) is not None
            }
        migrated = {
            **checkpoint,
            "channel_values": values,
            "channel_versions": channel_versions,
            "versions_seen": versions_seen,
        }
        if checkpoint.get("updated_channels") is not None:
            migrated["updated_channels"] = [
                name
                for ch in checkpoint["updated_channels"]
                if (name := _renamed_channel(ch, renames)) in channel_versions
            ]
        writes = self._migrated_writes(found, write_versions)
        writes = self._follow_renamed_nodes(found, migrated, writes, paths, renames, resume)
        return found._replace(checkpoint=migrated, pending_writes=writes)

    def _failed(self, found: CheckpointTuple, number: int) -> Callable[..., StateMigrationError]:
        configurable = found.config["configurable"]
        return functools.partial(
            StateMigrationError,
            thread_id=configurable["thread_id"],
            checkpoint_id=configurable["checkpoint_id"],
            number=number,
        )

    def _migrated_writes(self, found: CheckpointTuple, write_versions: Sequence[int]) -> list:
        """`found`'s pending writes, each migrated from the version it was written
        at (`write_versions`, in their order). A task's writes may be of two
        versions: older code's interrupt, newer code's resume and output."""
        writes = [
            (t, ch, fresh_copy(v), version)
            for (t, ch, v), version in zip(found.pending_writes or (), write_versions)
        ]
        for number in range(min(write_versions, default=self.version), self.version):
            writes = self._migrate_writes(
                self.migrations[number], writes, self._failed(found, number), number
            )
        return [(t, ch, v) for t, ch, v, _ in writes]

    def _migrate_values(
        self,
        migration: Migration,
        state: dict,
        failed: Callable[..., StateMigrationError],
        task_id: str | None = None,
    ) -> dict:
        """`state` through `migration.values`; `failed` makes the error naming
        the thread, checkpoint, migration and `task_id` (None: the values)."""
        if migration.values is None:
            return state
        user = {k: v for k, v in state.items() if is_state_channel(k)}
        try:
            result = migration.values(user)
        except Exception as exc:
            raise failed(task_id=task_id, problem=f"{type(exc).__name__}: {exc}") from exc
        result = user if result is None else result
        if not isinstance(result, dict):
            raise failed(
                task_id=task_id,
                problem=f"it returned a {type(result).__name__}; it must return the dict of "
                "channel values (or None)",
            )
        return {**{k: v for k, v in state.items() if not is_state_channel(k)}, **result}

    def _migrate_writes(
        self,
        migration: Migration,
        writes: list,
        failed: Callable[..., StateMigrationError],
        number: int,
    ) -> list:
        """Each task's state writes migrated together (as the partial state the
        task returned), LangGraph's own writes as they are; interrupts mapped.
        `writes`: (task id, channel, value, version written at); migration
        `number` turns version `number` into the next, so it skips newer writes."""
        out: list[tuple[str, str, Any, int]] = []
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value, version in writes:
            if version > number:
                continue
            if is_state_channel(channel) and migration.values is not None:
                by_task.setdefault(task_id, []).append((channel, value))
        done: set[str] = set()
        for task_id, channel, value, version in writes:
            if version > number:
                out.append((task_id, channel, value, version))
                continue
            if task_id in by_task and is_state_channel(channel):
                if task_id in done:
                    continue
                done.add(task_id)
                group = by_task[task_id]
                parts = (
                    [dict(group)]
                    if len({c for c, _ in group}) == len(group)
                    else [{c: v} for c, v in group]
                )
                for part in parts:
                    migrated = self._migrate_values(migration, part, failed, task_id)
                    out.extend((task_id, c, v, version) for c, v in migrated.items())
                continue
            if channel == _INTERRUPT and migration.interrupts is not None:
                value = [
                    dataclasses.replace(i, value=migration.interrupts(i.value))
                    if hasattr(i, "value")
                    else i
                    for i in value
                ]
            out.append((task_id, channel, value, version))
        return out

    def _follow_renamed_nodes(
        self,
        found: CheckpointTuple,
        checkpoint: dict[str, Any],
        writes: list,
        paths: Mapping[str, str],
        renames: Mapping[str, str | None],
        resume: bool,
    ) -> list:
        """Pending writes under the task ids LangGraph computes for the new nodes;
        `OrphanedTasksError` (on resume) for tasks of nodes that are gone."""
        configurable = found.config["configurable"]
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        graph = self._nodes_at(checkpoint_ns)
        if graph is None:
            return writes
        step = (found.metadata or {}).get("step", -1) + 1
        sends = checkpoint["channel_values"].get(_TASKS) or []
        new_ids: dict[str, tuple[str, str] | None] = {}  # old task id -> (new id, new node)
        orphans: dict[str, tuple[str, list[str]]] = {}
        for task_id, _, _ in writes:
            if task_id in new_ids or task_id in orphans:
                continue
            kind, node, idx = _task_of(paths.get(task_id, ""))
            if kind == _PUSH and idx is not None and idx < len(sends):
                node = getattr(sends[idx], "node", None)
            if node is None:
                continue
            name = renames.get(node, node)
            if name is None:
                new_ids[task_id] = None  # a removed node: its pending work goes
                logger.info(
                    "dropped the pending writes of removed node %r (task %s)", node, task_id
                )
                continue
            if name not in graph:
                orphans[task_id] = (node, [])
                continue
            if name != node:
                new_ids[task_id] = (
                    _task_id(checkpoint, checkpoint_ns, graph, name, step, kind, idx),
                    name,
                )
        for task_id, channel, _ in writes:
            if task_id in orphans:
                orphans[task_id][1].append(channel)
        triggered = [
            channel[len(_BRANCH) :]
            for channel, version in checkpoint["channel_versions"].items()
            if channel.startswith(_BRANCH)
            and channel[len(_BRANCH) :] not in graph
            and version
            > checkpoint["versions_seen"].get(channel[len(_BRANCH) :], {}).get(channel, "")
        ]
        if resume and (orphans or triggered):
            raise OrphanedTasksError(
                thread_id=configurable["thread_id"],
                checkpoint_id=configurable["checkpoint_id"],
                stored=self.version_of(found.metadata),
                code=self.version,
                tasks=[(node, task_id, channels) for task_id, (node, channels) in orphans.items()],
                triggered=[n for n in triggered if n not in {o for o, _ in orphans.values()}],
            )
        if sends and any(getattr(s, "node", None) in renames for s in sends):
            checkpoint["channel_values"][_TASKS] = [_resent(s, renames) for s in sends]
        out = []
        for task_id, channel, value in writes:
            if task_id in new_ids:
                target = new_ids[task_id]
                if target is None:
                    continue
                new_id, name = target
                if channel == _INTERRUPT:
                    value = [_reidentified(i, name, new_id) for i in value]
                task_id = new_id
            # Every task's writes to edges of renamed nodes (a join's other side, too).
            renamed = _renamed_channel(channel, renames)
            if renamed is not None:
                out.append((task_id, renamed, value))
        return out


MIGRATED, ALREADY, PENDING = "migrated", "already", "pending"


def migrate_head(store: Any, thread_id: str) -> Any:
    """Operation: bring the root head of `thread_id` to `store.versions`' version
    as a new checkpoint (metadata source "migration"); MIGRATED, ALREADY (at that
    version or newer) or PENDING (it has pending writes, which belong to their
    checkpoint's id: it is migrated on read when it resumes).

    Run it holding the thread's run guard, so no other write interleaves.
    """
    from langgraph.checkpoint.base import create_checkpoint

    versions: StateVersions = store.versions
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    found = yield from store.get_tuple(config)
    if found is None:
        return ALREADY
    stored = versions.version_of(found.metadata)
    if stored >= versions.version:
        return ALREADY
    if found.pending_writes:
        return PENDING
    step = (found.metadata or {}).get("step", -1) + 1
    checkpoint = create_checkpoint(found.checkpoint, None, step)
    # The id right after the head's, not a new one: a worker that read the same
    # head and chose its next checkpoint's id before this one, committing after
    # it, still makes the head (the thread's latest id). A fresh id would win
    # instead, and the worker's step would be lost from the thread.
    checkpoint["id"] = _id_after(found.checkpoint["id"]) or checkpoint["id"]
    metadata = {
        "source": MIGRATION_SOURCE,
        "step": step,
        "parents": (found.metadata or {}).get("parents", {}),
        "migrated_from": stored,
    }
    yield from store.put(found.config, checkpoint, metadata, {})
    return MIGRATED


def _id_after(checkpoint_id: str) -> str | None:
    """The uuid right after `checkpoint_id` (which sorts right after it as text);
    None for an id that is not a lowercase uuid (one written by other means)."""
    try:
        after = str(uuid.UUID(int=uuid.UUID(checkpoint_id).int + 1))
    except (ValueError, TypeError):
        return None
    return after if after > checkpoint_id and len(after) == len(checkpoint_id) else None


def _field_renames(migrations: Mapping[int, Migration]) -> dict[str, dict[str, str]]:
    """Each class's field renames over all `migrations`, chained (a -> b, then
    b -> c: a -> c and b -> c), by the name the codec stores the class under.
    A stored value is renamed by the names it holds, whatever its checkpoint's
    version: a field with a new name is missing from every older value."""
    out: dict[str, dict[str, str]] = {}
    for number, migration in sorted(migrations.items()):
        for cls, mapping in migration.fields.items():
            if not isinstance(cls, (type, str)) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
            ):
                raise TypeError(
                    f"migration {number}: fields= maps a class to {{old field name: new "
                    f"field name}}, got {cls!r}: {mapping!r}"
                )
            renames = out.setdefault(cls if isinstance(cls, str) else class_name(cls), {})
            for start, now in renames.items():
                if now in mapping:
                    renames[start] = mapping[now]
            for old, new in mapping.items():
                renames.setdefault(old, new)
    return out


def _triggers_of(graph: Any) -> dict[str, tuple[str, ...]]:
    return {name: tuple(sorted(node.triggers)) for name, node in graph.nodes.items()}


def _task_id(
    checkpoint: Mapping[str, Any],
    checkpoint_ns: str,
    graph: Mapping[str, tuple[str, ...]],
    node: str,
    step: int,
    kind: str | None,
    idx: int | None,
) -> str:
    """The id LangGraph gives the task of `node` at `step` of this checkpoint of
    `checkpoint_ns` (langgraph.pregel._algo.prepare_single_task)."""
    from langgraph.pregel._algo import _uuid5_str, _xxhash_str

    task_id_func = _xxhash_str if checkpoint["v"] > 1 else _uuid5_str
    id_bytes = binascii.unhexlify(checkpoint["id"].replace("-", ""))
    task_ns = f"{checkpoint_ns}|{node}" if checkpoint_ns else node
    if kind == _PUSH:
        return task_id_func(id_bytes, task_ns, str(step), node, _PUSH, str(idx))
    return task_id_func(id_bytes, task_ns, str(step), node, _PULL, *graph[node])


def _renamed_channel(channel: str, renames: Mapping[str, str | None]) -> str | None:
    """A channel's name after node renames (None: a node it names is gone).

    StateGraph names edges after nodes: ``branch:to:NODE`` and, for a node
    waiting on several, ``join:A+B:NODE``.
    """
    if not renames:
        return channel
    if channel.startswith(_BRANCH):
        node = channel[len(_BRANCH) :]
        if node in renames:
            new = renames[node]
            return None if new is None else _BRANCH + new
    elif channel.startswith(_JOIN) and channel.count(":") == 2:
        _, sources, target = channel.split(":")
        names = [renames.get(n, n) for n in (*sources.split("+"), target)]
        if any(n is None for n in names):
            return None
        return f"{_JOIN}{'+'.join(names[:-1])}:{names[-1]}"  # type: ignore[arg-type]
    return channel


def _task_of(path: str) -> tuple[str | None, str | None, int | None]:
    """(kind, node, send index) of a stored task path ("~__pregel_pull, node")."""
    parts = path.lstrip("~").split(", ")
    if len(parts) >= 2 and parts[0] == _PULL:
        return _PULL, parts[1], None
    # A Send's task: (PUSH, index) with LangGraph's `False` (not a Call) after it.
    if len(parts) in (2, 3) and parts[0] == _PUSH and parts[1].isdigit():
        return _PUSH, None, int(parts[1])
    return None, None, None


def _resent(send: Any, renames: Mapping[str, str | None]) -> Any:
    """A pending `Send` to a renamed node, sent to its new name. (One to a removed
    node stays: LangGraph skips a Send to a node it does not have.)"""
    new = renames.get(getattr(send, "node", None))  # type: ignore[arg-type]
    if new is None:
        return send
    return type(send)(new, send.arg, timeout=send.timeout)


def _reidentified(interrupt: Any, node: str, task_id: str) -> Any:
    """An interrupt of a renamed node, with the id the new node's task gives it."""
    from langgraph.types import Interrupt

    if not isinstance(interrupt, Interrupt):
        return interrupt
    return dataclasses.replace(interrupt, id=Interrupt.from_ns(None, f"{node}:{task_id}").id)


def schema_of(versions: StateVersions | int, migrations: Any = None) -> StateVersions:
    if isinstance(versions, StateVersions):
        if migrations is not None:
            raise TypeError("pass migrations= with a version number, not with StateVersions")
        return versions
    return StateVersions(versions, migrations)
