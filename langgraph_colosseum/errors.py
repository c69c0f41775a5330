"""One exception hierarchy for the whole package.

Every message says what happened, where (thread, checkpoint, channel, value
path) and what to do about it.
"""

from __future__ import annotations

from langgraph_colosseum._redact import redact


def _where(thread_id: str, checkpoint_ns: str, checkpoint_id: str | None) -> str:
    """Where a value error happened: thread, and namespace and checkpoint when known."""
    where = f"thread {thread_id!r}"
    if checkpoint_ns:
        where += f", namespace {checkpoint_ns!r}"
    if checkpoint_id:
        where += f", checkpoint {checkpoint_id!r}"
    return where


class ColosseumError(Exception):
    """Base class of every error raised by langgraph-colosseum.

    Its text never shows a password: a URL or DSN quoted in a message is
    redacted (`postgresql://app:***@db/prod`).
    """

    def __str__(self) -> str:
        return redact(super().__str__())


class EncryptedFieldError(ColosseumError, ValueError):
    """A filter names a metadata key or channel that `encryption=` stores sealed:
    the database cannot compare it, so the filter is refused rather than
    matching nothing. List it in `Encryption(searchable_metadata=...)` or
    `Encryption(plaintext_channels=...)` to keep it searchable."""


class CodecError(ColosseumError):
    """A value cannot be encoded to, or decoded from, the typed jsonb form."""

    def __init__(self, message: str, *, path: str = "$") -> None:
        self.message = message
        self.path = path
        super().__init__(f"{message} (at value path {path})")

    def under(self, segment: str) -> CodecError:
        """The same error for a value found at `segment` of an enclosing one."""
        return type(self)(self.message, path="$" + segment + self.path[1:])


class UnsupportedValueError(CodecError):
    """The typed codec cannot express a value; the caller may fall back to serde."""


class UntrustedTypeError(CodecError):
    """A stored type tag names a class that is not on the allowlist.

    Nothing was imported or constructed. Register the class with
    `TypeRegistry.register` if the row is trusted.
    """


class ValueNotStorableError(ColosseumError):
    """Neither the typed codec nor the configured serde can store a value.

    Nothing was written for the step that carried it.
    """

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        channel: str,
        path: str,
        cause: BaseException,
    ) -> None:
        where = self._place(thread_id, checkpoint_ns, checkpoint_id, channel, path)
        super().__init__(
            f"cannot store channel {channel!r} of {where}: the value at path {path} "
            f"is neither jsonb-encodable nor accepted by the serializer ({cause}). "
            "Nothing was written. Make the value serialisable, or register its class "
            "with the saver's type registry."
        )

    def _place(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None, channel: str, path: str
    ) -> str:
        """Record where the value was (for callers) and return it as the message says it."""
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.channel = channel
        self.path = path
        return _where(thread_id, checkpoint_ns, checkpoint_id)


class CorruptRowError(ColosseumError):
    """A stored row cannot be turned back into a checkpoint."""

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        channel: str | None,
        cause: BaseException,
        row: str | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.channel = channel
        if row is not None:  # another row of the thread's, named by the caller
            super().__init__(f"cannot load {row} of thread {thread_id!r}: {cause}")
            return
        if checkpoint_id is None:  # not a checkpoint's row: the thread's registry row
            super().__init__(f"cannot load the registry row of thread {thread_id!r}: {cause}")
            return
        part = f"channel {channel!r} of " if channel else ""
        ns = f", namespace {checkpoint_ns!r}" if checkpoint_ns else ""
        super().__init__(
            f"cannot load {part}checkpoint {checkpoint_id!r} of thread {thread_id!r}{ns}: {cause}"
        )


class SchemaError(ColosseumError):
    """The database schema is missing, or newer than this code understands."""


class SchemaMissingError(SchemaError):
    """The database has no Colosseum tables yet (`setup()` was never run on it)."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            f"the Colosseum tables do not exist in this database ({detail}). Create them "
            "once: run saver.setup() (await saver.setup() on the async saver), or "
            "`colosseum migrate` with the same database URL."
        )


class DatabaseUnavailableError(ColosseumError):
    """Postgres cannot be reached: a wrong URL, a server that is down, or wrong credentials.

    The message quotes the server's (or libpq's) own reason; the password is
    never shown.
    """

    def __init__(self, target: str, reason: str, hint: str = "") -> None:
        self.target = redact(target)
        self.reason = redact(reason)
        super().__init__(
            f"cannot connect to Postgres at {self.target}: {self.reason.strip()}"
            + (f". {hint}" if hint else "")
        )


class SchemaVersionError(SchemaError):
    """The database was migrated by a newer langgraph-colosseum."""

    def __init__(self, *, database_version: int, code_version: int) -> None:
        self.database_version = database_version
        self.code_version = code_version
        super().__init__(
            f"the database schema is at version {database_version}, but this "
            f"langgraph-colosseum only knows versions up to {code_version}. "
            "Upgrade the package; do not run an older one against this database."
        )


class NotFoundError(ColosseumError):
    """No thread (or checkpoint) has the id asked for, nor an id starting with it."""


class ThreadNotFoundError(NotFoundError, LookupError):
    """No thread has this id: it was never written, or it was deleted
    (`threads.update` of such a thread; LangGraph Platform answers 404)."""

    def __init__(self, thread_id: str, operation: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"no thread {thread_id!r} to {operation}: it was never written, or it was deleted. "
            "Nothing was written. A thread exists once a run (or put) wrote a checkpoint on it."
        )


class AmbiguousIdError(ColosseumError):
    """An id prefix matches several threads (or checkpoints); the message lists them."""


class InvalidConfigError(ColosseumError):
    """A RunnableConfig lacks what an operation needs (such as `thread_id`)."""


class ToolCallError(ColosseumError):
    """Base of the errors IdempotentToolNode raises about one tool call."""

    def __init__(self, message: str, *, tool_name: str, tool_call_id: str | None, key: str) -> None:
        self.tool_name = tool_name
        self.tool_call_id = tool_call_id
        self.idempotency_key = key
        super().__init__(
            f"{message} (tool {tool_name!r}, tool_call_id {tool_call_id!r}, idempotency key {key})"
        )


class ToolOutcomeUnknownError(ToolCallError):
    """A worker claimed this tool call and died (or lost its lease) mid-call.

    The side effect may or may not have happened. Check the external system,
    then resolve it by hand, or use `on_unknown="retry"` for tools that are safe
    to run twice.
    """


class ToolFailedError(ToolCallError):
    """The tool failed on an earlier attempt; `on_failed="raise"` re-raises it."""


class ToolWaitTimeoutError(ToolCallError):
    """Another worker holds this tool call and has not finished within `wait`."""


class ToolTimeoutError(ToolCallError):
    """The tool ran longer than its timeout; the call is marked TIMED_OUT."""


class LedgerMissingError(ColosseumError):
    """IdempotentToolNode has no Colosseum saver to keep its ledger in."""


class ThreadBusyError(ColosseumError):
    """Another run holds the thread (`run_guard`); this one may not run or write."""

    def __init__(self, thread_id: str, detail: str = "") -> None:
        self.thread_id = thread_id
        super().__init__(
            f"thread {thread_id!r} is busy: another run holds it{detail}. Wait for it "
            "(run_guard(..., on_busy='wait')) or try again later."
        )


class StoreError(ColosseumError):
    """An operation of the long-term memory Store (`ColosseumStore`) cannot be done."""


class StoreValueError(StoreError):
    """An item's value cannot be stored as typed jsonb, or read back.

    Nothing was written for the batch that carried it.
    """

    def __init__(self, namespace: tuple[str, ...], key: str, cause: BaseException) -> None:
        self.namespace = namespace
        self.key = key
        path = getattr(cause, "path", "$")
        super().__init__(
            f"item {key!r} in namespace {namespace!r}: the value at path {path} cannot be "
            f"stored as typed jsonb ({cause}). Nothing was written. Store plain JSON, or "
            "register the class with the store's `types=`."
        )


class StoreItemSealError(StoreValueError):
    """A stored item's value is not sealed as `encryption=` requires, or does not
    open (altered, moved from another item, or its key not configured): refused,
    never returned."""

    def __init__(self, namespace: tuple[str, ...], key: str, cause: BaseException) -> None:
        self.namespace = namespace
        self.key = key
        StoreError.__init__(self, f"cannot load item {key!r} in namespace {namespace!r}: {cause}")


class StoreFilterError(StoreError, ValueError):
    """A search `filter=` uses an operator or an operand the Store does not support."""


class PgvectorUnavailableError(SchemaError):
    """The Store was configured with `index=`, and the server has no pgvector."""


class StoreSchemaMissingError(SchemaMissingError):
    """The Store's tables are not in this database (`store.setup()` was never run on it)."""

    def __init__(self, detail: str) -> None:
        SchemaError.__init__(
            self,
            f"the Store's tables do not exist in this database ({detail}). Create them once: "
            "run store.setup() (await store.setup() on the async store), with the same "
            "index= as the store uses, or `colosseum store setup` (no index).",
        )


class LeaseLostError(ThreadBusyError):
    """A write made inside `run_guard` after the guard stopped owning the thread.

    Its lease lapsed (the process was paused, or its heartbeat could not reach
    Postgres) and another run took the thread. Nothing was written: the other
    run's steps stay on the head's branch. Read the thread again and decide.
    """

    def __init__(self, thread_id: str, *, token: int, checkpoint_id: str | None) -> None:
        self.thread_id = thread_id
        self.token = token
        self.checkpoint_id = checkpoint_id
        at = f" (checkpoint {checkpoint_id!r})" if checkpoint_id else ""
        ColosseumError.__init__(
            self,
            f"lease lost on thread {thread_id!r}: this run_guard (token {token}) no longer "
            f"owns the thread, so its write{at} was refused and nothing was written. Its "
            "lease lapsed and another run took the thread. Read the thread's state again "
            "before retrying, under a new run_guard.",
        )


class CheckpointDeletedError(ColosseumError):
    """A write continues from, or belongs to, a checkpoint that was deleted.

    `delete_thread`, `delete_for_runs`, `prune` or the retention sweep removed
    it while a run of the thread was in flight. Nothing of the write was
    stored; a new run on the same `thread_id` starts a fresh thread.
    """

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        deleted_id: str | None,
        operation: str,
    ) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.deleted_id = deleted_id
        ns = f", namespace {checkpoint_ns!r}" if checkpoint_ns else ""
        which = (
            f"checkpoint {deleted_id!r} it continues from was"
            if deleted_id and deleted_id != checkpoint_id
            else "checkpoint was"
        )
        super().__init__(
            f"refused {operation} of checkpoint {checkpoint_id!r} of thread {thread_id!r}{ns}: "
            f"the {which} deleted (delete_thread, delete_for_runs, prune or the retention "
            "sweep) while this run was in flight. Nothing was written. Start a new run: on "
            "the same thread_id it begins a fresh thread."
        )


class ThreadConflictError(ColosseumError):
    """Another worker continued the same head first (`on_conflict="raise"`).

    This run read `continued_from` as the thread's latest checkpoint; by the
    time it wrote, another run had written to that checkpoint or moved the
    head past it (`head`). Postgres refused the write in the statement that
    would have stored it: nothing of this write, nor of this run's writes
    after it, was stored. The other run's steps stay on the head's branch.

    What this run stored before the refusal stays, but for what hangs from
    a checkpoint of it never stored: `kept_checkpoint_id` is the newest root
    checkpoint holding something of it (its input checkpoint or a later
    step's; or, when it put none, the checkpoint it read, where its resume
    value or a task's output landed), None when nothing of it was stored.
    None: read the thread again (its latest state) and retry on it. An id:
    the head went on from that checkpoint, so the thread's state may hold
    this run's input already, and sent again it would be there twice; or it
    may not (new input sent from a checkpoint drops its pending tasks, with
    the input still waiting for them in `__start__`). Read the state before
    sending the input again.

    >>> exc = ThreadConflictError(thread_id="t1", checkpoint_ns="", continued_from="c1",
    ...                           head="c3", operation="put_writes", kept_checkpoint_id="c1")
    >>> "up to checkpoint 'c1' stay in the thread" in str(exc)
    True
    """

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        continued_from: str | None,
        head: str | None,
        operation: str,
        held: bool = False,
        kept_checkpoint_id: str | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.continued_from = continued_from
        self.head = head
        self.operation = operation  # the write Postgres refused: "put" or "put_writes"
        # another run's subgraph step under that checkpoint was under way (or
        # that run stopped without saying so): README, "on_conflict_hold"
        self.held = held
        self.kept_checkpoint_id = kept_checkpoint_id
        ns = f", namespace {checkpoint_ns!r}" if checkpoint_ns else ""
        start = (
            f"checkpoint {continued_from!r}" if continued_from else "no checkpoint (a new thread)"
        )
        if held:
            refused = (
                f"refused {operation} on thread {thread_id!r}{ns}: this run continued from "
                f"{start}, where another run's subgraph step is under way (or that run "
                "stopped without saying so: it died, or stopped at a static breakpoint inside "
                "the subgraph). Nothing of this write was stored."
            )
            retry = (
                "Retry once that run has ended, or after on_conflict_hold from its last write; "
                "update_state on the thread moves the head past it now."
            )
        else:
            now = (
                f"the head is now {head!r}"
                if head and head != continued_from
                else "another run has written to that checkpoint"
            )
            refused = (
                f"refused {operation} on thread {thread_id!r}{ns}: this run continued from "
                f"{start}, but another run continued from it first ({now}). Nothing of this "
                "write was stored."
            )
            retry = "Read the thread's latest state again and retry on it."
        if kept_checkpoint_id is not None:
            retry = (
                f"This run's input and steps up to checkpoint {kept_checkpoint_id!r} stay in "
                "the thread: another run (or an update_state) continued from them. Read the "
                "thread's latest state"
                f"{' once that run has ended' if held else ''}: it may hold this input "
                "already; do not send the same input again without checking."
            )
        super().__init__(f"{refused} {retry}")


class RunInterruptedError(ColosseumError):
    """A run of `saver.runs(graph)` was stopped before it finished.

    Another run took the thread with `multitask_strategy="interrupt"` (or
    `"rollback"`), or `saver.runs.cancel(...)` stopped it. Its steps stored
    before the stop are kept (for "rollback": deleted); whatever it did after
    was refused. It did not succeed: read the thread again before retrying.
    """

    def __init__(self, thread_id: str, run_id: str, *, status: str, by: str | None) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.status = status
        self.stopped_by = by
        who = f" by run {by!r}" if by and by != "cancel" else " by saver.runs.cancel" if by else ""
        kept = {
            "rolled_back": "everything it wrote is deleted by the rollback",
            "interrupted": "its steps stored before the stop are kept; later ones were refused",
        }.get(status, "its lease lapsed and another run took the thread; later writes were refused")
        super().__init__(
            f"run {run_id!r} on thread {thread_id!r} was stopped ({status}){who}: {kept}. "
            "It did not succeed. Read the thread's state again before sending anything."
        )


class RunRolledBackError(RunInterruptedError):
    """The run was stopped by `multitask_strategy="rollback"`: nothing of it remains."""


class RunQueueTimeoutError(ThreadBusyError):
    """An `enqueue`d run waited longer than its `queue_timeout` for the thread.

    It never ran and wrote nothing; its record is marked `error`.
    """

    def __init__(self, thread_id: str, run_id: str, seconds: float) -> None:
        self.run_id = run_id
        super().__init__(
            thread_id,
            f" and run {run_id!r} waited {seconds:g} s in its queue without getting it "
            "(multitask_strategy='enqueue'); nothing was run or written",
        )


class RunNotFoundError(ColosseumError, LookupError):
    """No run with this id is recorded (`saver.runs.get/join/cancel`)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(
            f"no run {run_id!r} is recorded: runs are recorded by saver.runs(graph); "
            "list a thread's runs with saver.runs.list(thread_id)"
        )


class UnregisteredClassError(ValueNotStorableError):
    """A value holds an instance of a class that is not on the codec's allowlist.

    Stored, it would come back as a plain dict of its fields: it is refused
    instead, and nothing of the step is written. Register the class.
    """

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str | None,
        channel: str,
        path: str,
        class_name: str,
    ) -> None:
        self.class_name = class_name
        where = self._place(thread_id, checkpoint_ns, checkpoint_id, channel, path)
        ColosseumError.__init__(
            self,
            f"cannot store channel {channel!r} of {where}: the value at path {path} is a "
            f"{class_name}, a class the saver does not know, and it would come back as a "
            "plain dict. Nothing was written. Register it: ColosseumSaver(..., types=[...]) "
            "or saver.register_type(cls).",
        )


class ClassChangedError(CodecError):
    """A stored instance of an allow-listed class no longer fits the class's definition.

    The message names the class, the fields missing from the stored value
    (without a default) or stored but unknown to the class, and the value path.
    Give the new field a default; for a renamed field, name the rename in a
    state migration: ``saver.versioned(graph, 2, {1: Migration(fields={Position:
    {"ticker": "symbol"}})})``.
    """


class StateVersionError(ColosseumError):
    """A checkpoint was written by a newer state version than this code's."""

    def __init__(self, *, thread_id: str, checkpoint_id: str, stored: int, code: int) -> None:
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.stored = stored
        self.code = code
        super().__init__(
            f"checkpoint {checkpoint_id!r} of thread {thread_id!r} holds state version "
            f"{stored}, newer than this graph's version {code}. Deploy the code of version "
            f"{stored} (or newer) to read it; older code cannot undo a migration."
        )


class StateMigrationError(ColosseumError):
    """A state migration raised (or returned no dict) while a checkpoint was read.

    `task_id` is None when it ran on the checkpoint's values, else the pending
    task whose writes (only the keys that task wrote) it ran on. The migration's
    own exception is the cause.
    """

    def __init__(
        self, *, thread_id: str, checkpoint_id: str, number: int, task_id: str | None,
        problem: str,
    ) -> None:  # fmt: skip
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.number = number
        self.task_id = task_id
        on = (
            "the checkpoint's values"
            if task_id is None
            else f"the pending writes of task {task_id} (the keys that task wrote, no others: "
            "a migration must change only the keys present)"
        )
        super().__init__(
            f"state migration {number} (version {number} -> {number + 1}) failed reading "
            f"checkpoint {checkpoint_id!r} of thread {thread_id!r}, on {on}: {problem}"
        )


class OrphanedTasksError(ColosseumError):
    """A migrated thread has pending tasks of nodes the graph no longer has."""

    def __init__(
        self,
        *,
        thread_id: str,
        checkpoint_id: str,
        stored: int,
        code: int,
        tasks: list[tuple[str, str, list[str]]],
        triggered: list[str],
    ) -> None:
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.nodes = sorted({node for node, _, _ in tasks} | set(triggered))
        lines = [
            f"  - node {node!r}, task {task_id} (pending writes: {', '.join(channels)})"
            for node, task_id, channels in tasks
        ] + [f"  - node {node!r}, triggered and not yet run" for node in triggered]
        mapping = ", ".join(f"{node!r}: 'new_name'" for node in self.nodes)
        super().__init__(
            f"cannot resume thread {thread_id!r} at checkpoint {checkpoint_id!r}: it was "
            f"written at state version {stored} and has pending tasks of nodes the graph at "
            f"version {code} does not have:\n" + "\n".join(lines) + "\nMap each old node to "
            f"its new name in the migration that renamed it, e.g. Migration(up, nodes="
            f"{{{mapping}}}), or to None to drop its pending work."
        )
