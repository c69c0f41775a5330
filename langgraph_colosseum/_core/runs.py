"""The LangGraph runs writing through this process, as deletion needs to know them.

After a put is refused because its thread (or the checkpoint it continues
from) was deleted, LangGraph (durability="async") keeps running the steps
after it without sending their puts: their writes name checkpoints that were
never stored. Postgres cannot tell those from the first writes of a new run
on the same thread_id, whose put is still on its way. The run itself can: every
put and put_writes of one run carries the same `RunControl` (LangGraph makes
one per run, and its subgraphs share it). So, per run, this process keeps:

* `dead`: a write of the run was refused as deleted; its later writes are
  refused before they are sent;
* `pending`: checkpoints it stored writes for but whose put it has not seen
  succeed; when the run dies, those writes are deleted (`sql.BURY_ORPHAN_WRITES`)
  once its writes in flight (`inflight`) have landed;
* `seen`: per thread, the deletion stamp its first read of the thread saw
  (sql.THREAD_DELETED, from Postgres or the Redis head; None: never deleted);
  its writes and claims are refused once the thread was deleted since (a run
  that read the thread before it was deleted never writes it back, whatever
  its durability). A run this process forgot (see below) and meets again on
  anything but the read a run begins with is `forgotten`: it counts as having
  read the thread before any deletion of it;
* `nested` (on_conflict): the subgraph checkpoints it stored under a root
  checkpoint whose put it has not seen succeed (durability="async" sends a
  subgraph's puts while the root's wait their turn); when the run dies, those go whole
  (`sql.BURY_ORPHAN_CHECKPOINTS`, only while that root checkpoint is absent).

* with `on_conflict="raise"` (see sql._OPTIMISTIC): the run's token (`writer`,
  the claim its writes leave), how its first read of each (thread, namespace)
  asked (the latest checkpoint, or one it named) and what it found, the
  conflict that refused it (`refusal`: its later writes raise it again), and
  what of it a refusal leaves in the thread (`kept_root`, which its caller is
  told: ThreadConflictError.kept_checkpoint_id).

Only the newest `RUNS_KEPT` runs are remembered; a run forgotten here is still
refused by Postgres for every write that names a deleted checkpoint, and for
every write and claim on a thread that was ever deleted (its first read is
lost, so it may have read the thread before the deletion; a new run on a
reused thread id that this process forgot is refused too). With on_conflict,
its writes are no longer checked: it forks, as a run that named its checkpoint.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import CONFIG_KEY_RUNTIME

RUNS_KEPT = 1024
# Puts a run made recently: writes to these checkpoints are not pending.
_STORED_KEPT = 16

CheckpointKey = tuple[str, str, str]  # thread_id, checkpoint_ns, checkpoint_id

# The stamp a write carries for a thread its run never read, or read before
# this process forgot it: no deletion's stamp is empty, so its writes and
# claims are refused on a thread ever deleted, and judged as before on one
# never deleted (sql._DELETED finds no row).
SAW_NO_DELETION = ""


class Read(NamedTuple):
    """A run's first read of a (thread, namespace): what it continues from."""

    latest: bool  # it asked for the latest checkpoint (no checkpoint_id)
    checkpoint_id: str | None  # what it found (None: the namespace had none)
    claim: str | None  # the claim it saw on that checkpoint (see sql._OPTIMISTIC)


class RunWrites:
    """One run's writes, as seen by this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inflight = 0
        self.dead = False
        self.pending: set[CheckpointKey] = set()
        self.stored: deque[CheckpointKey] = deque(maxlen=_STORED_KEPT)
        # on_conflict: per (thread, namespace), the checkpoints whose put this
        # run sent, newest last (noted before the statement: it may commit
        # before the call returns); per namespace, so that a fan-out of
        # subgraphs does not push the root's out
        self.sent: dict[tuple[str, str], deque[str]] = {}
        self.writer = uuid.uuid4().hex  # the claim this run's writes leave (on_conflict)
        self.reads: dict[tuple[str, str], Read] = {}
        # the conflict that refused this run: its later writes raise it again
        self.refusal: Callable[[], Exception] | None = None
        # Per thread, the deletion stamp its first read returned (None: none),
        # in the same snapshot as what it read: its writes and claims are
        # refused once the thread's stamp is another (sql._DELETED). With
        # durability="exit" the run stores nothing before its end, and its one
        # put names no stored checkpoint a deletion could have recorded: only
        # this says the run read the thread before it went.
        self.seen: dict[str, str | None] = {}
        # its first read is unknown: this process forgot the run (see Runs.of)
        self.forgotten = False
        # subgraph checkpoints stored, with the root checkpoint they hang
        # from, while that one's put has not succeeded; per thread, the
        # newest root checkpoint whose put did (a run's root puts land in
        # order: every root checkpoint before it was stored too)
        self.nested: set[tuple[CheckpointKey, str]] = set()
        self.newest_root: dict[str, str] = {}
        # the threads where something of this run (a write, a subgraph's
        # checkpoint) landed on or under the root checkpoint its first read
        # returned: a resume value, a task's output (see kept_root)
        self.landed_on_read: set[str] = set()

    def note_seen(self, thread_id: str, deleted: str | None) -> None:
        """A read of the thread returned its deletion stamp `deleted`; only the
        run's first read of each thread counts, and none of a forgotten run."""
        with self._lock:
            if not self.forgotten:
                self.seen.setdefault(thread_id, deleted)

    def seen_of(self, thread_id: str) -> str:
        """The stamp this run's writes and claims on the thread carry: the one
        its first read saw; SAW_NO_DELETION for none, and for a thread it did
        not read (a forgotten run reads none, see note_seen)."""
        with self._lock:
            return self.seen.get(thread_id) or SAW_NO_DELETION

    def note_read(self, thread_id: str, checkpoint_ns: str, read: Read) -> None:
        """Only the first read counts: it is the loop's own load of its
        checkpoint. A run that named a checkpoint reads the latest one next
        (LangGraph's checkpoint_superseded), and still forks."""
        with self._lock:
            self.reads.setdefault((thread_id, checkpoint_ns), read)

    def read_of(self, thread_id: str, checkpoint_ns: str) -> Read | None:
        with self._lock:
            return self.reads.get((thread_id, checkpoint_ns))

    def refuse(self, refusal: Callable[[], Exception]) -> None:
        with self._lock:
            if self.refusal is None:
                self.refusal = refusal

    def put_sending(self, key: CheckpointKey) -> None:
        with self._lock:
            sent = self.sent.setdefault(key[:2], deque(maxlen=_STORED_KEPT))
            sent.append(key[2])

    def own(self, thread_id: str, checkpoint_ns: str) -> list[str]:
        """The checkpoints of (thread, namespace) this run sent a put of, newest last."""
        with self._lock:
            return list(self.sent.get((thread_id, checkpoint_ns), ()))

    def begin(self) -> bool:
        """Count a statement in flight; False when the run is dead (send nothing)."""
        with self._lock:
            if self.dead:
                return False
            self.inflight += 1
            return True

    def end(self) -> None:
        with self._lock:
            self.inflight -= 1

    def put_stored(self, key: CheckpointKey, root: str | None = None) -> None:
        """`root`: of a subgraph's checkpoint, the root checkpoint it hangs from."""
        with self._lock:
            self.stored.append(key)
            self.pending.discard(key)
            thread_id, checkpoint_ns, checkpoint_id = key
            self._landed(key, root)
            if not checkpoint_ns:
                if checkpoint_id > self.newest_root.get(thread_id, ""):
                    self.newest_root[thread_id] = checkpoint_id
                if self.nested:
                    self.nested = {
                        n for n in self.nested if n[0][0] != thread_id or n[1] > checkpoint_id
                    }
            elif root is not None and root > self.newest_root.get(thread_id, ""):
                self.nested.add((key, root))

    def writes_stored(self, key: CheckpointKey, root: str | None = None) -> None:
        """`root`: of a subgraph's writes, the root checkpoint they hang from."""
        with self._lock:
            if key not in self.stored:
                self.pending.add(key)
            self._landed(key, root)

    def _landed(self, key: CheckpointKey, root: str | None) -> None:
        """Something of the run landed on `key` (under `root`, in a subgraph);
        the lock is held."""
        thread_id, checkpoint_ns, checkpoint_id = key
        read = self.reads.get((thread_id, ""))
        under = root if checkpoint_ns else checkpoint_id
        if read is not None and under is not None and under == read.checkpoint_id:
            self.landed_on_read.add(thread_id)

    def kept_root(self, thread_id: str) -> str | None:
        """The newest root checkpoint of the thread holding something this run
        stored, which a refusal leaves in place (it deletes only what hangs
        from root checkpoints the run never stored): the newest one it put
        (its root puts land in order, each continuing the one before, so all
        are there), else the one its first read returned when something of
        it landed there; None when nothing of it was stored."""
        with self._lock:
            if thread_id in self.newest_root:
                return self.newest_root[thread_id]
            if thread_id in self.landed_on_read:
                return self.reads[(thread_id, "")].checkpoint_id
            return None

    def take_nested(self) -> list[tuple[CheckpointKey, str]]:
        with self._lock:
            nested, self.nested = sorted(self.nested), set()
            return nested

    def stored_checkpoints(self) -> list[CheckpointKey]:
        """The checkpoints whose put of this run succeeded lately."""
        with self._lock:
            return list(self.stored)

    def die(self) -> None:
        with self._lock:
            self.dead = True

    def take_pending(self) -> list[CheckpointKey]:
        with self._lock:
            keys, self.pending = sorted(self.pending), set()
            return keys


class Runs:
    """The newest runs seen, by their RunControl."""

    def __init__(self, kept: int = RUNS_KEPT) -> None:
        self._lock = threading.Lock()
        self._kept = kept
        # id(control) -> (control, writes); the control is held so its id is not reused.
        self._runs: OrderedDict[int, tuple[Any, RunWrites]] = OrderedDict()

    def of(self, config: RunnableConfig, *, begins: bool = False) -> RunWrites | None:
        """The run's record. `begins`: the call is a read of the root namespace,
        the read a LangGraph run begins with. A record made for any other call
        (a write, a claim, a subgraph's read) is of a run this process forgot:
        what it first read of its thread is unknown (see SAW_NO_DELETION)."""
        runtime = (config.get("configurable") or {}).get(CONFIG_KEY_RUNTIME)
        control = getattr(runtime, "control", None)
        if control is None:
            return None  # not a LangGraph run (a direct call): Postgres alone decides
        with self._lock:
            entry = self._runs.get(id(control))
            if entry is not None and entry[0] is control:
                self._runs.move_to_end(id(control))
                return entry[1]
            writes = RunWrites()
            if not begins:
                writes.forgotten = True
            self._runs[id(control)] = (control, writes)
            while len(self._runs) > self._kept:
                self._runs.popitem(last=False)
            return writes
