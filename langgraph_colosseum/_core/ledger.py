"""The tool-call ledger: run a side-effecting tool once per idempotency key.

One sans-IO generator, `execute_once`, holds the whole protocol; `tools.py`
drives it sync or async. Each step is a short statement of its own:

* claim: insert the key as RUNNING with a lease. The key is UNIQUE in
  Postgres, so of any number of workers exactly one claim wins; the database
  decides, not Python.
* run: the driver runs the tool while renewing the lease (heartbeat).
* complete: SUCCESS with the output, or FAILED / TIMED_OUT with the error,
  fenced by the lease owner: a worker whose lease was taken over cannot
  overwrite the new owner's outcome.

A claim that finds the key taken reads its row and decides:

| row | outcome |
|---|---|
| SUCCESS | the stored output, the tool is not called |
| RUNNING, lease live | poll until it finishes or `wait` runs out (ToolWaitTimeoutError) |
| RUNNING / TIMED_OUT, lease lapsed | outcome unknown: `on_unknown="raise"` raises ToolOutcomeUnknownError, `"retry"` takes the claim over and runs again |
| FAILED | `on_failed="raise"`: the recorded answer (an error ToolMessage), or ToolFailedError with the stored error when the exception propagated; `"retry"` runs again |
"""

from __future__ import annotations

import dataclasses
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import orjson
import rfc8785
from langchain_core.messages import ToolMessage
from langgraph.types import Command

from langgraph_colosseum._core import sql
from langgraph_colosseum._core.crypt import RowSealError, is_sealed, is_sealed_json
from langgraph_colosseum._core.io import (
    Operation,
    Overran,
    Query,
    Request,
    RunTool,
    Sleep,
    Transaction,
)
from langgraph_colosseum._core.values import JSON, SERDE, ValueCodec, Where
from langgraph_colosseum.errors import (
    CheckpointDeletedError,
    CorruptRowError,
    ToolFailedError,
    ToolOutcomeUnknownError,
    ToolTimeoutError,
    ToolWaitTimeoutError,
)

OnUnknown = Literal["raise", "retry"]
OnFailed = Literal["raise", "retry"]

# Claim the key, or take it over when the policy allows; otherwise report the
# row as it stands. `claimed` is true when this call now owns the execution.
#
# Deleted stays deleted: a call of a run whose thread or run was deleted is
# refused here, in the statement that would record it (one row, status
# 'DELETED', the deleted checkpoint in the error column), as PUT_WRITES refuses
# that run's writes: when a checkpoint it descends from (its task's, the
# enclosing namespaces', the ones its run stored) is recorded as deleted, when
# its thread was deleted since its run first read it (sql.THREAD_DELETED), or
# when its run was deleted. The claim is sent after the thread's write lock (see
# sql.WRITE_LOCK, `claim_request`), so a deletion in flight is waited for and
# then seen. A claim recorded before its run was deleted goes with the run
# (sql.DELETE_RUNS_TOOL_CALLS, by the run and the call site each row records),
# and its late COMPLETE (an UPDATE, never an insert) then finds no row.
# A claim is retried on a fresh connection when the old one broke (_driver.py),
# possibly after it committed: its owner is unique to this call, so a row that
# is RUNNING under it is its own earlier success (OWN_CLAIM), taken again under
# the row lock (a takeover meanwhile changed the owner) and not a new attempt.
CLAIM = """
WITH deleted AS (
    SELECT d.checkpoint_id
    FROM unnest(%(lineage_ns)s::text[], %(lineage_ids)s::text[]) AS l(ns, id)
    JOIN colosseum_tombstones d
      ON d.thread_id = %(thread_id)s AND d.checkpoint_ns = l.ns AND d.checkpoint_id = l.id
    UNION ALL
    SELECT %(checkpoint_id)s::text FROM colosseum_deleted_threads g
    WHERE g.thread_id = %(thread_id)s AND g.before <> %(seen)s::text
    UNION ALL
    SELECT %(checkpoint_id)s::text FROM colosseum_deleted_runs r
    WHERE r.run_id = %(run_id)s::text
),
claim AS (
    INSERT INTO colosseum_tool_calls AS t
        (thread_id, idempotency_key, checkpoint_ns, task_id, tool_name, tool_call_id, input,
         status, attempts, lease_owner, lease_until, started_at,
         run_id, call_ns, call_checkpoint_id)
    SELECT %(thread_id)s, %(key)s, %(checkpoint_ns)s, %(task_id)s, %(tool_name)s,
           %(tool_call_id)s, %(input)s::jsonb, 'RUNNING', 1, %(owner)s,
           now() + make_interval(secs => %(lease)s), now(),
           %(run_id)s::text, %(call_ns)s::text, %(checkpoint_id)s::text
    WHERE NOT EXISTS (SELECT 1 FROM deleted)
    ON CONFLICT (idempotency_key) DO UPDATE
    SET status = 'RUNNING', lease_owner = EXCLUDED.lease_owner,
        attempts = t.attempts + (t.lease_owner IS DISTINCT FROM EXCLUDED.lease_owner)::int,
        lease_until = EXCLUDED.lease_until, started_at = now(), error = NULL,
        completed_at = NULL,
        -- the record is the new attempt's: of its run, made where it was made
        run_id = EXCLUDED.run_id, call_ns = EXCLUDED.call_ns,
        call_checkpoint_id = EXCLUDED.call_checkpoint_id
    WHERE (t.status IN ('RUNNING', 'TIMED_OUT', 'PENDING') AND t.lease_until < now()
           AND %(retry_unknown)s)
       OR (t.status = 'FAILED' AND %(retry_failed)s)
       -- OWN_CLAIM: this very claim, sent again after the reply of its commit was lost
       OR (t.status = 'RUNNING' AND t.lease_owner = EXCLUDED.lease_owner)
    RETURNING t.attempts
)
SELECT true, NULL, NULL, NULL, NULL, NULL, NULL, attempts FROM claim
UNION ALL
SELECT false, status, output::text, output_bytes, output_type, error,
       lease_until > now(), attempts
FROM colosseum_tool_calls
WHERE idempotency_key = %(key)s AND NOT EXISTS (SELECT 1 FROM claim)
  AND NOT EXISTS (SELECT 1 FROM deleted)
UNION ALL
SELECT false, 'DELETED', NULL, NULL, NULL, (SELECT checkpoint_id FROM deleted LIMIT 1), false, 0
WHERE EXISTS (SELECT 1 FROM deleted)
"""

READ = """
SELECT status, output::text, output_bytes, output_type, error, lease_until > now(), attempts
FROM colosseum_tool_calls WHERE idempotency_key = %(key)s
"""

COMPLETE = """
UPDATE colosseum_tool_calls
SET status = %(status)s, output = %(output)s::jsonb, output_bytes = %(output_bytes)s,
    output_type = %(output_type)s, error = %(error)s, completed_at = now(), lease_until = now()
WHERE idempotency_key = %(key)s AND lease_owner = %(owner)s AND status = 'RUNNING'
RETURNING 1
"""

HEARTBEAT = """
UPDATE colosseum_tool_calls SET lease_until = now() + make_interval(secs => %(lease)s)
WHERE idempotency_key = %(key)s AND lease_owner = %(owner)s AND status = 'RUNNING'
"""


# The lineage a thread's calls are keyed by (see sql.lineage_of).
LINEAGE = f"SELECT {sql.lineage_of('%(thread_id)s::text')}"


@dataclass(frozen=True)
class ToolCallIdentity:
    """What identifies one tool call; the input of the idempotency key.

    `lineage` is the thread the call's key is derived from: the thread itself,
    or for a thread made by `copy_thread` (a copy, a fork) the thread it was
    copied from (its first ancestor). A call that the source recorded has the
    same key on every copy, so a copy does not repeat the side effect, and an
    API that deduplicates on `current_idempotency_key()` sees the same key.
    A thread on an id that was deleted before is keyed as "<id>#<deletion>"
    (see sql.lineage_of): it shares nothing with the deleted thread.
    """

    thread_id: str
    checkpoint_ns: str
    tool_name: str
    args: Any
    tool_call_id: str | None
    lineage: str | None = None  # None: the thread itself

    @property
    def key_thread(self) -> str:
        return self.lineage or self.thread_id


def default_key(call: ToolCallIdentity) -> str:
    """SHA-256 of the thread (its lineage: a copy keys as its source), namespace,
    tool name, RFC 8785 JSON of the args, and tool_call_id.

    Example:
        >>> key = default_key(ToolCallIdentity("t1", "", "pay", {"amount": 10}, "call-1"))
        >>> len(key)
        64
        >>> key == default_key(ToolCallIdentity("t1-copy", "", "pay", {"amount": 10},
        ...                                     "call-1", lineage="t1"))
        True
    """
    return _digest(
        [call.key_thread, call.checkpoint_ns, call.tool_name, call.args, call.tool_call_id]
    )


def key_without_call_id(call: ToolCallIdentity) -> str:
    """A key that survives an LLM re-issuing the same call under a new tool_call_id."""
    return _digest([call.key_thread, call.checkpoint_ns, call.tool_name, call.args])


def lineage_of(thread_id: str) -> Operation[str | None]:
    """The lineage `thread_id` keys its calls by (for a copy, its first
    ancestor's), None when that is the thread itself."""
    rows = yield Query(LINEAGE, {"thread_id": thread_id})
    lineage = rows[0][0] if rows else None
    return None if lineage == thread_id else lineage


def _digest(parts: list[Any]) -> str:
    try:
        canonical = rfc8785.dumps(parts)
    except Exception:  # not plain JSON (a datetime, a model): canonicalise its typed form
        from langgraph_colosseum._core.codec import default_registry

        canonical = rfc8785.dumps(orjson.loads(orjson.dumps(default_registry().encode(parts))))
    return hashlib.sha256(canonical).hexdigest()


@dataclass(frozen=True)
class ToolPolicy:
    on_unknown: OnUnknown = "raise"
    on_failed: OnFailed = "raise"
    lease_seconds: float = 30.0
    wait_seconds: float = 60.0
    poll_seconds: float = 0.1
    timeout: float | None = None


@dataclass(frozen=True)
class CallSite:
    """Where a call is made, as CLAIM checks it against deletions: the
    checkpoint its task writes to, the checkpoints it descends from, its run."""

    checkpoint_ns: str = ""
    checkpoint_id: str | None = None
    # (namespace, checkpoint id): the task's checkpoint, the enclosing
    # namespaces' and the ones its run stored on this thread
    lineage: tuple[tuple[str, str], ...] = ()
    run_id: str | None = None
    # the thread's deletion stamp its run's first read saw (store.seen_of;
    # None: no LangGraph run, not checked)
    seen: str | None = None


@dataclass(frozen=True)
class ToolCallPlan:
    identity: ToolCallIdentity
    key: str
    task_id: str | None
    policy: ToolPolicy
    site: CallSite = CallSite()


def claim_request(params: dict[str, Any]) -> Transaction:
    """CLAIM after the thread's write lock (shared; and the run's), as a put takes
    it: a deletion of the thread (or run) in flight commits first, and the claim
    sees what it recorded. One round trip."""
    lock = {"thread_id": params["thread_id"], "run_id": params["run_id"]}
    return Transaction((Query(sql.WRITE_LOCK, lock, fetch=False), Query(CLAIM, params)))


def is_claim(request: Request) -> bool:
    return isinstance(request, Transaction) and request.queries[-1].sql is CLAIM


def execute_once(plan: ToolCallPlan, codec: ValueCodec) -> Operation[Any]:
    """Run the tool at most once per key (or again, as the policy allows); return its output."""
    identity, policy, site = plan.identity, plan.policy, plan.site
    owner = uuid.uuid4().hex
    params = {
        "lineage_ns": [ns for ns, _ in site.lineage],
        "lineage_ids": [checkpoint_id for _, checkpoint_id in site.lineage],
        "checkpoint_id": site.checkpoint_id,
        "call_ns": site.checkpoint_ns,
        "seen": site.seen,
        "run_id": site.run_id,
        "thread_id": identity.thread_id,
        "key": plan.key,
        "checkpoint_ns": identity.checkpoint_ns,
        "task_id": plan.task_id,
        "tool_name": identity.tool_name,
        "tool_call_id": identity.tool_call_id,
        "input": seal_text(codec, plan.key, "input", _jsonb_or_null(codec, identity.args)),
        "owner": owner,
        "lease": policy.lease_seconds,
        "retry_unknown": policy.on_unknown == "retry",
        "retry_failed": policy.on_failed == "retry",
    }
    waited = 0.0
    while True:
        rows = (yield claim_request(params))[-1]
        if rows and rows[0][0]:
            break  # ours: run it
        if not rows:
            # The winner committed after this statement's snapshot: look again.
            continue
        _, status, output, output_bytes, output_type, error, live, _ = rows[0]
        if status == "DELETED":
            raise CheckpointDeletedError(
                thread_id=identity.thread_id,
                checkpoint_ns=site.checkpoint_ns,
                checkpoint_id=site.checkpoint_id or "",
                deleted_id=error,
                operation=f"the claim of tool call {identity.tool_name!r} "
                f"({identity.tool_call_id})",
            )
        if status == "SUCCESS":
            loaded = load_output(
                codec, identity.thread_id, plan.key, output, output_bytes, output_type
            )
            return _for_this_call(loaded, identity)
        if status == "FAILED":
            if output is not None or output_bytes is not None:
                # The graph was answered already (an error ToolMessage): answer the same.
                loaded = load_output(
                    codec, identity.thread_id, plan.key, output, output_bytes, output_type
                )
                return _for_this_call(loaded, identity)
            error = open_text(codec, identity.thread_id, plan.key, "error", error)
            raise _error(ToolFailedError, f"the tool failed before: {error}", plan)
        if not live:
            raise _error(
                ToolOutcomeUnknownError,
                f"a worker started this call (status {status}) and lost its lease; whether the "
                "side effect happened is unknown",
                plan,
            )
        if waited >= policy.wait_seconds:
            raise _error(
                ToolWaitTimeoutError,
                f"another worker has held this call for over {policy.wait_seconds}s",
                plan,
            )
        yield Sleep(policy.poll_seconds)
        waited += policy.poll_seconds

    ok, outcome = yield RunTool(plan.key, owner, policy.lease_seconds, policy.timeout)
    if ok:
        # ToolNode turns a handled exception into an error ToolMessage: the
        # graph gets that message now, and the ledger records a failure.
        failed = getattr(outcome, "status", None) == "error"
        stored = _dump_output(codec, outcome, identity, plan.key)
        error = str(getattr(outcome, "content", "")) if failed else None
        yield Query(
            COMPLETE,
            {
                "key": plan.key,
                "owner": owner,
                "status": "FAILED" if failed else "SUCCESS",
                "error": seal_text(codec, plan.key, "error", error),
                **stored,
            },
        )
        return outcome
    timed_out = isinstance(outcome, Overran)
    yield Query(
        COMPLETE,
        {
            "key": plan.key,
            "owner": owner,
            "status": "TIMED_OUT" if timed_out else "FAILED",
            "error": seal_text(codec, plan.key, "error", f"{type(outcome).__name__}: {outcome}"),
            "output": None,
            "output_bytes": None,
            "output_type": None,
        },
    )
    if timed_out:
        raise _error(
            ToolTimeoutError, f"the tool ran longer than {policy.timeout}s", plan
        ) from outcome
    raise outcome


def heartbeat(key: str, owner: str, lease_seconds: float) -> Operation[None]:
    yield Query(HEARTBEAT, {"key": key, "owner": owner, "lease": lease_seconds}, fetch=False)


def _error(cls: Callable[..., Exception], message: str, plan: ToolCallPlan) -> Exception:
    return cls(
        message,
        tool_name=plan.identity.tool_name,
        tool_call_id=plan.identity.tool_call_id,
        key=plan.key,
    )


def _jsonb_or_null(codec: ValueCodec, value: Any) -> str | None:
    try:
        return codec.dump_json(value)
    except Exception:
        return None


def _dump_output(
    codec: ValueCodec, output: Any, identity: ToolCallIdentity, key: str
) -> dict[str, Any]:
    where = Where(identity.thread_id, identity.checkpoint_ns, None, f"<tool {identity.tool_name}>")
    stored = codec.dump(output, where)
    json, data, type_ = stored.json, stored.data, stored.type
    if codec.encryption is not None:
        json, data, type_ = codec.encryption.seal(
            stored.encoding, json, data, type_, output_aad(key)
        )
    return {"output": json, "output_bytes": data, "output_type": type_}


# ---------------------------------------------------------------- encryption=
#
# A ledger row's input, output and error are sealed with the row's idempotency
# key as associated data (its thread may change: a deleted thread's calls are
# rehomed to a copy), so a value moved to another row does not open there.
# With encryption= a plaintext value is refused, as in the checkpoint tables.


def output_aad(key: str) -> bytes:
    return _aad(key, "output")


def _aad(key: str, field: str) -> bytes:
    return orjson.dumps(["l", key, field])


def seal_text(codec: ValueCodec, key: str, field: str, text: str | None) -> str | None:
    """A ledger text column (input jsonb, error text) as stored."""
    if text is None or codec.encryption is None:
        return text
    return orjson.dumps(codec.encryption.seal_json(text, _aad(key, field))).decode()


def open_text(
    codec: ValueCodec, thread_id: str, key: str, field: str, stored: str | None
) -> str | None:
    """A ledger text column as written; `CorruptRowError` when it does not open."""
    sealed = sealed_text(stored)
    if stored is None or (codec.encryption is None and sealed is None):
        return stored
    try:
        if codec.encryption is None:
            raise RowSealError("the value is encrypted and this saver has no encryption= keys")
        return codec.encryption.open_json(stored if sealed is None else sealed, _aad(key, field))
    except RowSealError as exc:
        raise corrupt(thread_id, key, field, exc) from None


def sealed_text(stored: str | None) -> dict | None:
    """The sealed value a ledger text column holds (its JSON, as jsonb or text
    renders it), or None for a plaintext one."""
    if stored is None or not stored.startswith("{"):
        return None
    try:
        parsed = orjson.loads(stored)
    except orjson.JSONDecodeError:
        return None
    return parsed if is_sealed_json(parsed) else None


def load_output(
    codec: ValueCodec,
    thread_id: str,
    key: str,
    json: str | None,
    data: bytes | None,
    type_: str | None,
) -> Any:
    """A recorded output; `CorruptRowError` when it is not sealed as it must be."""
    try:
        if codec.encryption is not None or is_sealed(type_):
            if codec.encryption is None:
                raise RowSealError("the output is encrypted and this saver has no encryption= keys")
            opened = codec.encryption.open(json, data, type_, output_aad(key))
            json, data, type_ = opened.json, opened.data, opened.type
    except RowSealError as exc:
        raise corrupt(thread_id, key, "output", exc) from None
    if json is not None:
        return codec.load(JSON, json, None, None)
    return codec.load(SERDE, None, data, type_)


def corrupt(thread_id: str, key: str, field: str, cause: Exception) -> CorruptRowError:
    return CorruptRowError(
        thread_id=thread_id,
        checkpoint_ns="",
        checkpoint_id=None,
        channel=None,
        cause=cause,
        row=f"the {field} of tool call {key!r} in the tool ledger",
    )


def _for_this_call(output: Any, identity: ToolCallIdentity) -> Any:
    """A recorded output answers the call asking now: a key that ignores
    tool_call_id serves a re-issued call, whose ToolMessage needs the new id."""
    if isinstance(output, ToolMessage) and output.tool_call_id != identity.tool_call_id:
        return output.model_copy(update={"tool_call_id": identity.tool_call_id})
    if isinstance(output, Command) and isinstance(output.update, dict):
        messages = output.update.get("messages")
        if isinstance(messages, list):
            fixed = [_for_this_call(m, identity) for m in messages]
            return dataclasses.replace(output, update={**output.update, "messages": fixed})
    return output
