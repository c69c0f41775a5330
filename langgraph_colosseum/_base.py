"""The saver contract, written once for both drivers.

Every public method of `BaseCheckpointSaver`, sync and async, is defined here
as "run this `CheckpointStore` operation". A driver supplies four primitives:
`_run` / `_stream` (blocking) and `_arun` / `_astream` (awaitable), see
`saver.py` and `aio.py`.
"""

from __future__ import annotations

import abc
import copy
import logging
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_TYPES
from langgraph.checkpoint.serde.base import SerializerProtocol, maybe_add_typed_methods
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_colosseum._core import sql
from langgraph_colosseum._core.codec import TypeRegistry, default_registry
from langgraph_colosseum._core.crypt import Encryption
from langgraph_colosseum._core.hot import DEFAULT_HOT_TTL, KEY_PREFIX, HotHead
from langgraph_colosseum._core.io import Operation, Query, single
from langgraph_colosseum._core.rekey import DEFAULT_BATCH_SIZE, rekey
from langgraph_colosseum._core.shapes import DEFAULT_SNAPSHOT_EVERY
from langgraph_colosseum._core.store import DEFAULT_PAGE_SIZE, CheckpointStore, next_version
from langgraph_colosseum._core.threads import Retention
from langgraph_colosseum._core.values import ValueCodec
from langgraph_colosseum._core.versions import (
    ALREADY,
    MIGRATED,
    PENDING,
    Migration,
    StateVersions,
    migrate_head,
    schema_of,
)
from langgraph_colosseum.errors import InvalidConfigError
from langgraph_colosseum.runs import Runs
from langgraph_colosseum.threads import DEFAULT_LEASE, OnBusy

if TYPE_CHECKING:
    from langgraph_colosseum.threads import AsyncThreads, Threads

logger = logging.getLogger("langgraph_colosseum")

T = TypeVar("T")
# A migrating thread's run guard: short, so a killed migration's threads are
# free again soon for its rerun.
MIGRATION_LEASE = timedelta(seconds=10)
# on_conflict: a subgraph step that never said it ended holds its checkpoint
# this long after its run's last write there (README, "on_conflict_hold"):
# longer than a quiet node usually takes (a model or tool call), short enough
# that a thread whose run died mid-subgraph is free again the same hour.
DEFAULT_ON_CONFLICT_HOLD = timedelta(minutes=10)
# The driver's thread registry API, so `saver.threads` is typed per driver.
ThreadsT = TypeVar("ThreadsT", bound="Threads | AsyncThreads")


class ColosseumSaverBase(BaseCheckpointSaver[str], abc.ABC, Generic[ThreadsT]):
    """Shared body of `ColosseumSaver` and `AsyncColosseumSaver`."""

    _threads_api: Callable[[Any], ThreadsT]  # the driver's Threads class
    _cache_driver: Callable[[Any], Any]  # runs hot-head requests on the driver's client

    def __init__(
        self,
        *,
        serde: SerializerProtocol | None = None,
        types: Iterable[type] = (),
        page_size: int = DEFAULT_PAGE_SIZE,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        retention: Retention | None = None,
        cache: Any = None,
        hot_ttl: timedelta = DEFAULT_HOT_TTL,
        cache_prefix: str = KEY_PREFIX,
        encryption: Encryption | None = None,
        on_conflict: str | None = None,
        on_conflict_hold: timedelta | None = DEFAULT_ON_CONFLICT_HOLD,
        compact_forms: bool = False,
        inline_values: bool = False,
    ) -> None:
        """`cache`: the driver's Redis client for the hot head, or None for none.
        `encryption`: AES-256-GCM keys sealing every stored value (_core/crypt.py).
        `on_conflict="raise"`: of two runs that continue from the same latest
        checkpoint, the second to write gets ThreadConflictError (README,
        "Optimistic concurrency"); None (the default): no check.
        `on_conflict_hold`: how long after its last write a run's subgraph step
        that never said it ended (the run died, or stopped at a static
        breakpoint inside the subgraph) keeps other runs off its checkpoint;
        None: until the head moves (update_state).
        `compact_forms`: new threads get short channel versions and checkpoints
        record their channel order by place (README, "Stored forms change in two
        releases"): only once no process of a release before 2026-12-04's uses
        the database.
        `inline_values`: each checkpoint also carries the small scalar values it
        changes, so reads need no value row for them (the same README section):
        only once no process of a release before 2026-12-07's uses the
        database."""
        self.types: TypeRegistry = default_registry()
        for cls in types:
            self.types.register(cls)
        # The fallback serde revives the same classes as the codec and nothing
        # else: a `serde` row written by an attacker comes back as plain data.
        # A serde the user passes is honoured as it is.
        self._strict_default_serde = serde is None
        super().__init__(
            serde=serde or JsonPlusSerializer(allowed_msgpack_modules=self._msgpack_allowlist())
        )
        self._store = CheckpointStore(
            ValueCodec(self.serde, self.types, encryption),
            page_size=page_size,
            snapshot_every=snapshot_every,
            compact_forms=compact_forms,
            inline_values=inline_values,
        )
        if on_conflict not in (None, "raise"):
            raise InvalidConfigError(f'on_conflict must be "raise" or None, got {on_conflict!r}')
        self._store.on_conflict = on_conflict == "raise"
        if on_conflict_hold is not None and (
            not isinstance(on_conflict_hold, timedelta) or on_conflict_hold <= timedelta(0)
        ):
            raise InvalidConfigError(
                f"on_conflict_hold must be a positive timedelta or None, got {on_conflict_hold!r}"
            )
        self._store.on_conflict_hold = (
            on_conflict_hold.total_seconds() if on_conflict_hold is not None else None
        )
        self._refuse_unregistered(())
        self.retention = retention
        self._store.thread_ttl = retention.thread_ttl if retention else None
        self.cache = self._cache_driver(cache) if cache is not None else None
        self._store.hot = HotHead(hot_ttl, cache_prefix) if cache is not None else None

    def _msgpack_allowlist(self) -> list[tuple[str, str]]:
        return [(cls.__module__, cls.__qualname__) for cls in self.types.classes()]

    # Driver primitives -------------------------------------------------

    @abc.abstractmethod
    def _run(self, op: Operation[T]) -> T: ...

    @abc.abstractmethod
    def _stream(self, op: Operation[Any]) -> Iterator[Any]: ...

    @abc.abstractmethod
    async def _arun(self, op: Operation[T]) -> T: ...

    @abc.abstractmethod
    def _astream(self, op: Operation[Any]) -> AsyncIterator[Any]: ...

    # The contract --------------------------------------------------------

    def register_type(self, cls: type) -> type:
        """Let the application's own class be stored as queryable jsonb.

        Example:
            >>> @saver.register_type
            ... class Order(pydantic.BaseModel):
            ...     ticker: str
            ...     qty: int
        """
        self.types.register(cls)
        if self._strict_default_serde:
            self._use_serde(JsonPlusSerializer(allowed_msgpack_modules=self._msgpack_allowlist()))
        self._store.forget_decoded()  # values decoded before now hold plain fields
        return cls

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> ColosseumSaverBase:
        """A clone whose serde also revives `extra_allowlist` (LangGraph's strict mode)."""
        clone = super().with_allowlist(extra_allowlist)
        if clone is not self:
            assert isinstance(clone, ColosseumSaverBase)
            clone._store = self._store.with_codec(
                ValueCodec(clone.serde, clone.types, self._store.codec.encryption)
            )
            clone._refuse_unregistered(extra_allowlist)
        return clone

    def _refuse_unregistered(self, serde_allowlist: Collection[tuple[str, ...]]) -> None:
        """With the default (strict) serde, an unregistered class would come back as
        a dict: refuse it at write time, unless the serde revives it (its allowlist
        names it, or LangGraph's own safe list does: LangChain's Document, say)."""
        if self._strict_default_serde:
            self._store.codec.serde_revives = frozenset(
                (entry[0], entry[1])
                for entry in (*SAFE_MSGPACK_TYPES, *serde_allowlist)
                if len(entry) >= 2
            )

    def versioned(
        self,
        graph: Any,
        version: int | StateVersions,
        migrations: Mapping[int, Callable[[dict[str, Any]], Any] | Migration] | None = None,
    ) -> Any:
        """`graph` (compiled) checkpointing through this saver at state `version`.

        Every checkpoint it writes records `version` (metadata ``state_version``;
        a checkpoint without one is version 1). A checkpoint of an older version
        is migrated as it is read, by resume, get_state, get_state_history and
        time travel; what is stored is not changed. Migration ``n`` turns
        version ``n`` into ``n + 1``: a function over the state's channel
        values, or a `Migration` that also renames nodes.

        Example:
            >>> def up_1_to_2(values):
            ...     if "query" in values:
            ...         values["queries"] = [values.pop("query")]
            >>> graph = saver.versioned(builder.compile(), 2, {1: up_1_to_2})
        """
        versions = schema_of(version, migrations).for_graph(graph)
        clone = copy.copy(self)
        clone._store = self._store.with_versions(versions)
        return graph.copy(update={"checkpointer": clone})

    def state_versions(self) -> dict[int, int]:
        """How many threads are at each state version (their root head's), lowest first.

        Example:
            >>> saver.state_versions()
            {1: 120, 3: 4031}
        """
        rows = self._run(single(Query(sql.STATE_VERSION_COUNTS)))
        return {int(version): int(count) for version, count in rows}

    def migrate_state(
        self,
        version: int | StateVersions,
        migrations: Mapping[int, Callable[[dict[str, Any]], Any] | Migration] | None = None,
        *,
        batch_size: int = 100,
        thread_ids: Sequence[str] | None = None,
        lease: timedelta = MIGRATION_LEASE,
        progress: Callable[[str, str], None] | None = None,
    ) -> dict[str, int]:
        """Bring every thread's head up to state `version`, as a new checkpoint
        whose metadata says ``source: "migration"`` (and ``migrated_from``).

        Threads are taken in batches, by id; each is migrated holding its run
        guard (`lease`), so a worker's run and the migration never interleave:
        the migration waits for a run in progress to end. Safe to stop and run
        again: a thread already at `version` is skipped, so each migrates once
        (a killed run's guard lapses after `lease`). A head with pending writes
        (an interrupt, a step cut short) is left to migrate on read when it
        resumes: its writes belong to its checkpoint. `thread_ids`: only these
        threads (default: every thread of the database). Returns counts.

        Example:
            >>> saver.migrate_state(3, {1: up_1_to_2, 2: up_2_to_3})
            {'migrated': 4031, 'pending': 2}
        """
        versions = schema_of(version, migrations)
        store = self._store.with_versions(versions)
        counts = {MIGRATED: 0, PENDING: 0}
        after = ""
        while True:
            params = {
                "after": after,
                "version": versions.version,
                "batch_size": batch_size,
                "thread_ids": None if thread_ids is None else list(thread_ids),
            }
            rows = self._run(single(Query(sql.THREADS_BELOW_STATE_VERSION, params)))
            if not rows:
                return counts
            for (thread_id,) in rows:
                with self.run_guard(thread_id, on_busy="wait", lease=lease):
                    outcome = self._run(migrate_head(store, thread_id))
                if outcome != ALREADY:
                    counts[outcome] += 1
                if progress is not None:
                    progress(thread_id, outcome)
            after = rows[-1][0]

    def _use_serde(self, serde: SerializerProtocol) -> None:
        self.serde = maybe_add_typed_methods(serde)
        self._store.codec.serde = self.serde

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._store.get_tuple(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._arun(self._store.get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self._stream(self._store.list(config, filter=filter, before=before, limit=limit))

    def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        return self._astream(self._store.list(config, filter=filter, before=before, limit=limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._run(self._store.put(config, checkpoint, metadata, new_versions))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._arun(self._store.put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._run(self._store.put_writes(config, writes, task_id, task_path))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._arun(self._store.put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._store.delete_threads([thread_id]))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._arun(self._store.delete_threads([thread_id]))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self._store.delete_for_runs(run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._arun(self._store.delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread whole (a fork). IdempotentToolNode keys the copy's tool calls
        by lineage, as its source keyed them: a side effect the source recorded is
        not repeated on the copy (see the README, Idempotent tools).

        Example:
            >>> saver.copy_thread("t1", "t1-retry")
            >>> graph.invoke(None, {"configurable": {"thread_id": "t1-retry"}})
        """
        self._run(self._store.copy_thread(source_thread_id, target_thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._arun(self._store.copy_thread(source_thread_id, target_thread_id))

    def prune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1
    ) -> None:
        """LangGraph's prune; `keep` extends keep_latest to the N newest per namespace."""
        self._run(self._store.prune(thread_ids, strategy, keep))

    async def aprune(
        self, thread_ids: Sequence[str], *, strategy: str = "keep_latest", keep: int = 1
    ) -> None:
        await self._arun(self._store.prune(thread_ids, strategy, keep))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._run(self._store.delta_history(config, channels))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self._arun(self._store.delta_history(config, channels))

    @property
    def threads(self) -> ThreadsT:
        """The thread registry: get, search, update, delete, messages (audit trail)."""
        return self._threads_api(self)

    @property
    def runs(self) -> Runs:
        """Runs with a multitask strategy (double texting), and their records.

        Example:
            >>> runs = saver.runs(graph, multitask_strategy="interrupt")
            >>> runs.invoke(inputs, {"configurable": {"thread_id": "t1"}})
            >>> saver.runs.list("t1")
        """
        return Runs(self)

    def run_guard(
        self, thread_id: str, *, on_busy: OnBusy = "reject", lease: timedelta = DEFAULT_LEASE
    ) -> Any:
        """Hold `thread_id` for one run; a second run gets ThreadBusyError, or waits.

        Writes from any other run are refused while the guard is held; a holder
        that dies lets go when its lease lapses. The guard's own writes carry its
        fencing token: once its lease lapsed and another run took the thread, they
        raise LeaseLostError and store nothing.

        Example:
            >>> with saver.run_guard("t1", on_busy="wait"):
            ...     graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})
        """
        return self.threads.guard(thread_id, on_busy=on_busy, lease=lease)

    def drop_stale_heads(self) -> int:
        """Drop the Redis heads that writes (of any worker) could not update because
        Redis refused them; how many were recorded. Never raises: run at close and exit.

        Each write does this for a few as it goes; `from_conn_string` savers do it
        as they close, and blocking savers at interpreter exit.
        """
        try:
            return self._run(self._store.drop_stale_heads())
        except Exception as exc:  # at exit the pool or the database may be gone
            logger.info("could not drop stale Redis heads on close: %s", exc)
            return 0

    async def adrop_stale_heads(self) -> int:
        """`drop_stale_heads`, awaited."""
        try:
            return await self._arun(self._store.drop_stale_heads())
        except Exception as exc:
            logger.info("could not drop stale Redis heads on close: %s", exc)
            return 0

    def rekey(
        self, *, batch_size: int = DEFAULT_BATCH_SIZE, encrypt_plaintext: bool = False
    ) -> int:
        """Re-seal every row sealed with an older key under the current key of
        `encryption=`; how many rows it wrote. Batches of `batch_size` rows,
        each one transaction: safe to stop and run again (it resumes), and a
        second run finds nothing to do. Then the older keys can be retired.

        `encrypt_plaintext=True` also seals the plaintext rows of a database
        written before `encryption=` was on (reads refuse them until then).
        Plaintext cannot be authenticated, so they are sealed as they are:
        run it once, when turning encryption on.

        Example:
            >>> enc = Encryption({"2026-12": new_key, "2026-06": old_key})
            >>> with ColosseumSaver.from_conn_string(dsn, encryption=enc) as saver:
            ...     saver.rekey()
        """
        return self._run(
            rekey(self._encrypted_codec(), batch_size, encrypt_plaintext=encrypt_plaintext)
        )

    async def arekey(
        self, *, batch_size: int = DEFAULT_BATCH_SIZE, encrypt_plaintext: bool = False
    ) -> int:
        """`rekey`, awaited."""
        return await self._arun(
            rekey(self._encrypted_codec(), batch_size, encrypt_plaintext=encrypt_plaintext)
        )

    @property
    def encryption(self) -> Encryption | None:
        """The `encryption=` keys (a Store made on this saver seals its items with them)."""
        return self._store.codec.encryption

    def _encrypted_codec(self) -> ValueCodec:
        codec = self._store.codec
        if codec.encryption is None:
            raise InvalidConfigError("rekey needs the saver's encryption= keys")
        return codec

    def get_next_version(self, current: str | None, channel: None) -> str:
        return next_version(current, self._store.compact_forms)
