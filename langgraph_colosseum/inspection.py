"""What a person asks about a thread: lists, the checkpoint tree, values, diffs,
messages, the tool ledger, and a thread as JSON lines (export / import).

The `colosseum` command is a thin face over this module (and a web inspector
can be another): it resolves ids, runs the queries, and turns stored values
into what a reader expects (a message as its role and text, a model as its
fields). Answers are plain dicts and lists, ready for JSON.

Example:
    >>> with ColosseumSaver.from_env() as saver:
    ...     look = Inspector(saver)
    ...     page = look.threads(status="interrupted", limit=10)
    ...     for entry in look.messages(page.threads[0]["thread_id"]):
    ...         print(entry["node"], entry["text"])
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import CheckpointTuple, create_checkpoint

from langgraph_colosseum._core import inspection as ops
from langgraph_colosseum._core import ledger
from langgraph_colosseum._core import threads as thread_ops
from langgraph_colosseum._core.store import checkpoint_config
from langgraph_colosseum._core.versions import STATE_VERSION_KEY
from langgraph_colosseum.errors import (
    CodecError,
    InvalidConfigError,
    NotFoundError,
    UnsupportedValueError,
)

if TYPE_CHECKING:
    from langgraph_colosseum.saver import ColosseumSaver

EXPORT_FORMAT = "langgraph-colosseum/thread-v1"

# Channels LangGraph keeps for itself: which node runs next, the input, interrupts.
INTERNAL_CHANNELS = ("branch:", "__")


@dataclass(frozen=True)
class Page:
    """One page of a longer list, with how long the whole list is."""

    total: int
    offset: int
    items: list[Any]


_RECORD_KEYS = ("checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "checkpoint",
                "metadata", "writes")  # fmt: skip


@dataclass(frozen=True)
class ExportFile:
    """The records of an export, each with the line it was on (for errors)."""

    source: str
    records: list[Any]
    lines: list[int]
    unit: str = "line"

    def error(self, line: int, problem: str) -> InvalidConfigError:
        return InvalidConfigError(f"{self.source}, {self.unit} {line}: {problem}; nothing was "
                                  "imported")  # fmt: skip


def read_export(text: str, source: str) -> ExportFile:
    """The JSON lines of `colosseum export` output (blank lines skipped), each
    record with its line number; `InvalidConfigError` naming the first line
    that is not JSON.

    Example:
        >>> read_export('{"format": "langgraph-colosseum/thread-v1"}\\n', "t.jsonl").lines
        [1]
    """
    records, lines = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:  # its lineno is within this one line
            raise ExportFile(source, [], []).error(
                number, f"not JSON ({exc.msg}, column {exc.colno})"
            ) from None
        lines.append(number)
    return ExportFile(source, records, lines)


class Inspector:
    """Questions about the threads of one (blocking) saver. Ids may be unique prefixes."""

    def __init__(self, saver: ColosseumSaver) -> None:
        self.saver = saver
        self._run = saver._run
        self._codec = saver._store.codec

    # ------------------------------------------------------------ ids

    def thread_id(self, given: str) -> str:
        """The full id of the thread `given` names (an id or a unique prefix)."""
        return self._run(ops.resolve_thread(given))

    def checkpoint_id(self, thread_id: str, given: str, checkpoint_ns: str = "") -> str:
        return self._run(ops.resolve_checkpoint(thread_id, checkpoint_ns, given))

    # ------------------------------------------------------------ lists

    def threads(
        self,
        *,
        status: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        values: Mapping[str, Any] | None = None,
        prefix: str | None = None,
        limit: int = 20,
        offset: int = 0,
    ) -> Page:
        """Threads, newest update first, and how many match in all."""
        _check_page(limit, offset)
        filters = {"status": status, "metadata": metadata, "values": values, "prefix": prefix}
        total = self.saver.threads.count(**filters)
        found = self.saver.threads.search(**filters, limit=limit, offset=offset)
        return Page(total, offset, [readable(dataclasses.asdict(t)) for t in found])

    def history(
        self, thread: str, *, checkpoint_ns: str = "", limit: int = 50, offset: int = 0
    ) -> Page:
        """The checkpoints of a thread's namespace, newest first, with their parents."""
        _check_page(limit, offset)
        thread_id = self.thread_id(thread)
        total, rows = self._run(ops.history(thread_id, checkpoint_ns, limit, offset))
        return Page(total, offset, [dataclasses.asdict(row) for row in rows])

    # ------------------------------------------------------------ one checkpoint

    def checkpoint(
        self, thread: str, checkpoint: str | None = None, checkpoint_ns: str = ""
    ) -> CheckpointTuple:
        """The checkpoint (the latest when None) as LangGraph reads it."""
        thread_id = self.thread_id(thread)
        configurable = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
        if checkpoint:
            configurable["checkpoint_id"] = self.checkpoint_id(thread_id, checkpoint, checkpoint_ns)
        found = self.saver.get_tuple({"configurable": configurable})
        if found is None:
            raise NotFoundError(
                f"thread {thread_id!r} has no checkpoint in namespace {checkpoint_ns!r}"
            )
        return found

    def state(
        self, thread: str, checkpoint: str | None = None, *, checkpoint_ns: str = "",
        raw: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        """The values at a checkpoint: readable (messages as role and text, models as
        their fields), or with `raw` as the typed codec stores them in jsonb."""
        found = self.checkpoint(thread, checkpoint, checkpoint_ns)
        show = self.stored if raw else readable
        return {
            "thread_id": found.config["configurable"]["thread_id"],
            "checkpoint_id": found.checkpoint["id"],
            "metadata": show(found.metadata),
            "values": {k: show(v) for k, v in found.checkpoint["channel_values"].items()},
        }

    def stored(self, value: Any) -> Any:
        """A value as the typed codec stores it in jsonb: plain JSON, with tags for the rest."""
        try:
            return json.loads(self._codec.dump_json(value))
        except UnsupportedValueError:
            return {"$serde": self._codec.serde.dumps_typed(value)[0]}

    def diff(
        self, thread: str, before: str, after: str, *, internal: bool = False,
        checkpoint_ns: str = "",
    ) -> dict[str, Any]:  # fmt: skip
        """What changed from checkpoint `before` to checkpoint `after`, channel by channel."""
        old = self.checkpoint(thread, before, checkpoint_ns)
        new = self.checkpoint(thread, after, checkpoint_ns)
        changes = channel_changes(
            old.checkpoint["channel_values"], new.checkpoint["channel_values"], self.stored
        )
        if not internal:
            changes = [c for c in changes if not c["channel"].startswith(INTERNAL_CHANNELS)]
        return {
            "thread_id": old.config["configurable"]["thread_id"],
            "before": {"checkpoint_id": old.checkpoint["id"], "step": old.metadata.get("step")},
            "after": {"checkpoint_id": new.checkpoint["id"], "step": new.metadata.get("step")},
            "channels": changes,
        }

    # ------------------------------------------------------------ who said what

    def messages(
        self, thread: str, *, channel: str = "messages", checkpoint: str | None = None,
        limit: int | None = None, offset: int = 0,
    ) -> Page:  # fmt: skip
        """Every message that entered (or left) the channel on the branch ending at
        `checkpoint` (default: the head), with its origin, oldest first."""
        _check_page(limit, offset)
        thread_id = self.thread_id(thread)
        at = self.checkpoint_id(thread_id, checkpoint) if checkpoint else None
        entries = self.saver.threads.messages(thread_id, channel, checkpoint_id=at)
        page = page_of(entries, limit, offset)
        return Page(page.total, offset, [_audit_row(e) for e in page.items])

    def ledger(self, thread: str) -> list[dict[str, Any]]:
        """The tool calls IdempotentToolNode recorded for the thread."""
        thread_id = self.thread_id(thread)
        columns = ("idempotency_key", "checkpoint_ns", "tool", "tool_call_id", "status",
                   "attempts", "started_at", "completed_at", "error")  # fmt: skip
        out = []
        for row in self._run(ops.ledger(thread_id)):
            entry = dict(zip(columns, row[:9]))
            key, (output, data, type_) = row[0], row[9:12]
            entry["error"] = ledger.open_text(self._codec, thread_id, key, "error", row[8])
            entry["output"] = (
                readable(ledger.load_output(self._codec, thread_id, key, output, data, type_))
                if output is not None or data is not None
                else None
            )
            out.append(entry)
        return out

    def thread_sizes(self, thread_ids: Iterable[str]) -> dict[str, dict[str, int]]:
        """thread id -> {"checkpoints": n, "bytes": stored bytes} for a page of threads."""
        sizes = self._run(ops.thread_sizes(list(thread_ids)))
        return {t: {"checkpoints": n, "bytes": size} for t, (n, size) in sizes.items()}

    def tree(self, thread: str, *, checkpoint_ns: str = "", limit: int = 500) -> dict[str, Any]:
        """The checkpoint tree of a thread's namespace: its newest `limit` checkpoints
        (each with its parent, so forks are branches, and the nodes its step ran)
        and the head's id."""
        thread_id = self.thread_id(thread)
        page = self.history(thread_id, checkpoint_ns=checkpoint_ns, limit=limit)
        info = self.saver.threads.get(thread_id)
        head = info.head_checkpoint_id if info and not checkpoint_ns else None
        if head is None and page.items:
            head = page.items[0]["checkpoint_id"]
        ids = [row["checkpoint_id"] for row in page.items]
        ids += [r["parent_checkpoint_id"] for r in page.items if r["parent_checkpoint_id"]]
        stored = self._run(ops.tree_versions(thread_id, checkpoint_ns, sorted(set(ids))))
        seen = {cid: self._codec.load_json(text) for cid, text in stored.items()}
        for row in page.items:
            parent = seen.get(row["parent_checkpoint_id"] or "", {})
            row["nodes"] = nodes_run(seen.get(row["checkpoint_id"], {}), parent)
        return {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "total": page.total,
                "head": head, "nodes": page.items}  # fmt: skip

    def checkpoint_view(
        self, thread: str, checkpoint: str | None = None, *, channel: str = "messages",
        checkpoint_ns: str = "",
    ) -> dict[str, Any]:  # fmt: skip
        """One checkpoint as a person reads it: the messages of `channel` (role, name,
        text, tool calls, tool results), the other channels, pending writes,
        interrupts, the nodes that run next, the metadata."""
        found = self.checkpoint(thread, checkpoint, checkpoint_ns)
        values = found.checkpoint["channel_values"]
        messages = values.get(channel)
        writes = found.pending_writes or []
        parent = (
            found.parent_config["configurable"]["checkpoint_id"] if found.parent_config else None
        )
        return {
            "thread_id": found.config["configurable"]["thread_id"],
            "checkpoint_id": found.checkpoint["id"],
            "parent_checkpoint_id": parent,
            "ts": found.checkpoint.get("ts"),
            "metadata": readable(found.metadata),
            "messages": [message_view(m) for m in messages] if _is_messages(messages) else None,
            "channels": {
                k: readable(v)
                for k, v in values.items()
                if not (k == channel and messages is not None and _is_messages(messages))
                and not k.startswith(INTERNAL_CHANNELS)
            },
            "pending_writes": [
                {"task_id": task, "channel": ch, "value": readable(value)}
                for task, ch, value in writes
                if ch != "__interrupt__"
            ],
            "interrupts": [readable(value) for _, ch, value in writes if ch == "__interrupt__"],
            "next": next_nodes(found.checkpoint),
        }

    def runs(self, thread: str) -> dict[str, Any]:
        """The thread's runs, and who holds its run guard.

        A run is there if it wrote checkpoints, or if `saver.runs(graph)`
        recorded it (then with its strategy, status, process and error; a run
        rolled back or still queued has no checkpoints). Ordered by first
        checkpoint, then arrival.
        """
        thread_id = self.thread_id(thread)
        found, guard, records = self._run(ops.runs(thread_id))
        by_id: dict[str, dict[str, Any]] = {}
        for r in found:
            by_id[r[0]] = {
                "run_id": r[0], "checkpoints": int(r[1]), "first_checkpoint_id": r[2],
                "last_checkpoint_id": r[3], "started": r[4], "ended": r[5], "status": None,
                "strategy": None, "holder": None, "stopped_by": None, "error": None,
            }  # fmt: skip
        for run_id, strategy, status, holder, created, started, ended, by, error in records:
            run = by_id.setdefault(run_id, {
                "run_id": run_id, "checkpoints": 0, "first_checkpoint_id": None,
                "last_checkpoint_id": None, "started": readable(started or created),
                "ended": readable(ended),
            })  # fmt: skip
            run.update(status=status, strategy=strategy, holder=holder, stopped_by=by,
                       error=error)  # fmt: skip
        out: dict[str, Any] = {"thread_id": thread_id, "runs": list(by_id.values()), "guard": None}
        if guard is not None and guard[0] is not None:
            owner, token, until, live = guard
            out["guard"] = {"owner": owner, "token": int(token), "lease_until": readable(until),
                            "held": bool(live)}  # fmt: skip
        return out

    def fork(self, thread: str, checkpoint: str, new_thread_id: str | None = None) -> str:
        """Copy the thread to `new_thread_id` (default: a fresh id) and make the copy
        of `checkpoint` its head, as `graph.update_state(config_at_checkpoint, None)`
        would: a new checkpoint with the same values whose parent is `checkpoint`.
        The source thread is not changed. Returns the new thread's id.

        Example:
            >>> new_id = Inspector(saver).fork("t1", "1f0a")
            >>> graph.invoke(None, {"configurable": {"thread_id": new_id}})
        """
        thread_id = self.thread_id(thread)
        found = self.checkpoint(thread_id, checkpoint)
        target = new_thread_id or f"{thread_id}-fork-{uuid.uuid4().hex[:8]}"
        if self._run(ops.any_checkpoint(target)):
            raise InvalidConfigError(f"thread {target!r} already exists; choose another id")
        self.saver.copy_thread(thread_id, target)
        fork_point = checkpoint_config(target, "", found.checkpoint["id"])
        step = found.metadata.get("step", -1)
        metadata: dict[str, Any] = {"source": "fork", "step": step + 1, "parents": {}}
        if STATE_VERSION_KEY in found.metadata:
            # Its values are those of that state version: without it the fork
            # would read as version 1 and be migrated once more.
            metadata[STATE_VERSION_KEY] = found.metadata[STATE_VERSION_KEY]
        self.saver.put(fork_point, create_checkpoint(found.checkpoint, None, step), metadata, {})
        return target

    # ------------------------------------------------------------ export / import

    def export_thread(self, thread: str) -> Iterator[dict[str, Any]]:
        """The thread as records (one JSON line each): a header, then every
        checkpoint of every namespace, oldest first, with its pending writes.

        Values are stored as the typed codec writes them (or as the serde's
        bytes in base64), so `import_thread` rebuilds them exactly.
        """
        thread_id = self.thread_id(thread)
        info = self.saver.threads.get(thread_id)
        paths = self._run(ops.write_paths(thread_id))
        yield {
            "format": EXPORT_FORMAT,
            "thread_id": thread_id,
            "metadata": self._pack(info.metadata if info else {}),
        }
        tuples = list(self.saver.list({"configurable": {"thread_id": thread_id}}))
        for found in sorted(tuples, key=lambda t: t.checkpoint["id"]):
            configurable = found.config["configurable"]
            ns, cid = configurable.get("checkpoint_ns", ""), configurable["checkpoint_id"]
            # Written back per task in this order, the writes get their idx again.
            writes = [
                [task_id, channel, self._pack(value), paths.get((ns, cid, task_id), "")]
                for task_id, channel, value in found.pending_writes or []
            ]
            parent = (
                found.parent_config["configurable"]["checkpoint_id"]
                if found.parent_config
                else None
            )
            yield {
                "checkpoint_ns": ns,
                "checkpoint_id": cid,
                "parent_checkpoint_id": parent,
                "checkpoint": self._pack(found.checkpoint),
                "metadata": self._pack(found.metadata),
                "writes": writes,
            }

    def import_thread(
        self, records: ExportFile | Iterable[Mapping[str, Any]], thread_id: str | None = None
    ) -> str:
        """Write an exported thread back (under `thread_id`, default its own id).

        Refuses a thread id that already has checkpoints: an import never merges.
        All or nothing: every record is read and checked (its shape, its values,
        its parent) before anything is written, and a write refused half way
        (say, a class this saver does not know) deletes what the import wrote.
        `records` is an `ExportFile` (see `read_export`; errors then name its
        lines) or the records themselves.

        Example:
            >>> look.import_thread(read_export(path.read_text(), str(path)), "copy-1")
        """
        if not isinstance(records, ExportFile):
            listed = list(records)
            records = ExportFile("the records", listed, list(range(1, len(listed) + 1)), "record")
        header, checkpoints = self._checked_export(records)
        target = thread_id or header["thread_id"]
        if self._run(ops.any_checkpoint(target)):
            raise InvalidConfigError(
                f"thread {target!r} already exists; import under another id (--thread NEW_ID) "
                "or delete it first"
            )
        try:
            for ns, parent_id, checkpoint, metadata, writes in checkpoints:
                parent = checkpoint_config(target, ns, parent_id)
                if parent_id is None:
                    parent["configurable"].pop("checkpoint_id")
                saved = self.saver.put(parent, checkpoint, metadata, checkpoint["channel_versions"])
                for (task_id, path), task_writes in writes.items():
                    self.saver.put_writes(saved, task_writes, task_id, path)
            if header["metadata"]:
                self.saver.threads.update(target, metadata=header["metadata"])
        except BaseException:
            # The target had no checkpoint before (checked above): what is
            # there now is this import's, and half a thread is worse than none.
            self.saver.delete_thread(target)
            raise
        return target

    def _checked_export(self, export: ExportFile) -> tuple[dict[str, Any], list[Any]]:
        """The header and each checkpoint of `export`, values decoded, ready to write;
        `InvalidConfigError` naming the line of the first record that does not fit."""
        records = iter(zip(export.lines, export.records))
        first = next(records, None)
        line, header = first if first else (1, None)
        if not isinstance(header, Mapping) or header.get("format") != EXPORT_FORMAT:
            raise export.error(line, "not a thread export: the first line must carry "
                               f'"format": "{EXPORT_FORMAT}"')  # fmt: skip
        seen: set[tuple[str, str]] = set()
        checked: list[Any] = []
        try:
            if not isinstance(header.get("thread_id"), str):
                raise ValueError('"thread_id" is not a string')
            unpacked_header = {"thread_id": header["thread_id"],
                               "metadata": self._unpack_field(header, "metadata", dict)}  # fmt: skip
            for line, record in records:  # noqa: B007 - the error below names `line`
                if not isinstance(record, Mapping):
                    raise ValueError("not a JSON object")
                missing = [key for key in _RECORD_KEYS if key not in record]
                if missing:
                    raise ValueError(f"no {', '.join(map(repr, missing))} (a checkpoint record "
                                     f"holds {', '.join(_RECORD_KEYS)})")  # fmt: skip
                ns, cid, parent_id = (record[k] for k in _RECORD_KEYS[:3])
                if not isinstance(ns, str) or not isinstance(cid, str):
                    raise ValueError("checkpoint_ns and checkpoint_id must be strings")
                if parent_id is not None and (ns, parent_id) not in seen:
                    raise ValueError(f"parent_checkpoint_id {parent_id!r} is not a checkpoint "
                                     "of an earlier line")  # fmt: skip
                if (ns, cid) in seen:
                    raise ValueError(f"checkpoint_id {cid!r} is there twice")
                checkpoint = self._unpack_field(record, "checkpoint", dict)
                if checkpoint.get("id") != cid or not isinstance(
                    checkpoint.get("channel_versions"), dict
                ):
                    raise ValueError("the checkpoint's id differs from checkpoint_id, or it has "
                                     "no channel_versions")  # fmt: skip
                metadata = self._unpack_field(record, "metadata", dict)
                writes: dict[tuple[str, str], list[tuple[str, Any]]] = {}
                if not isinstance(record["writes"], list):
                    raise ValueError("writes is not a list")
                for write in record["writes"]:
                    if not (isinstance(write, list) and len(write) == 4 and isinstance(write[2], dict)
                            and all(isinstance(write[i], str) for i in (0, 1, 3))):  # fmt: skip
                        raise ValueError("each of writes must be [task_id, channel, value, path]")
                    task_id, channel, value, path = write
                    unpacked = self._unpack_field({"writes": value}, "writes", object)
                    writes.setdefault((task_id, path), []).append((channel, unpacked))
                seen.add((ns, cid))
                checked.append((ns, parent_id, checkpoint, metadata, writes))
        except (ValueError, TypeError, KeyError, CodecError) as exc:
            raise export.error(line, str(exc)) from None
        return unpacked_header, checked

    def _unpack_field(self, record: Mapping[str, Any], field: str, kind: type) -> Any:
        packed = record[field]
        if not isinstance(packed, Mapping) or not ("json" in packed or "serde" in packed):
            raise ValueError(f'{field} is not {{"json": ...}} or {{"serde": [type, base64]}}')
        try:
            value = self._unpack(packed)
        except (ValueError, TypeError, CodecError) as exc:
            raise ValueError(f"{field}: {exc}") from None
        except Exception as exc:  # whatever the serde raises on bytes it did not write
            raise ValueError(f"{field}: {type(exc).__name__}: {exc}") from None
        if not isinstance(value, kind):
            raise ValueError(f"{field} is not a {kind.__name__}")
        return value

    def _pack(self, value: Any) -> dict[str, Any]:
        try:
            return {"json": json.loads(self._codec.dump_json(value))}
        except UnsupportedValueError:
            type_, data = self._codec.serde.dumps_typed(value)
            return {"serde": [type_, base64.b64encode(data).decode()]}

    def _unpack(self, packed: Mapping[str, Any]) -> Any:
        if "json" in packed:
            return self._codec.load_json(json.dumps(packed["json"]))
        type_, data = packed["serde"]
        return self._codec.serde.loads_typed((type_, base64.b64decode(data, validate=True)))


def page_of(items: Sequence[Any], limit: int | None, offset: int = 0) -> Page:
    """One page of a list that is read whole (`limit` None: to its end).

    Example:
        >>> page_of(Inspector(saver).ledger("t1"), limit=10, offset=10).total
    """
    _check_page(limit, offset)
    end = None if limit is None else offset + limit
    return Page(len(items), offset, list(items[offset:end]))


def _check_page(limit: int | None, offset: int) -> None:
    if limit is not None and limit < 0:
        raise InvalidConfigError(f"limit must be 0 or more, not {limit}")
    if offset < 0:
        raise InvalidConfigError(f"offset must be 0 or more, not {offset}")


def _audit_row(entry: thread_ops.AuditEntry) -> dict[str, Any]:
    message = entry.message
    return {
        "node": entry.node,
        "change": entry.change,
        "step": entry.step,
        "checkpoint_id": entry.checkpoint_id,
        "time": entry.created_at,
        "type": getattr(message, "type", type(message).__name__),
        "id": getattr(message, "id", None),
        "name": getattr(message, "name", None),
        "text": message_text(message),
    }


# ---------------------------------------------------------------- readable values


def message_text(message: Any) -> str:
    """What a message says, as text (content blocks and tool calls included)."""
    content = getattr(message, "content", message)
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = " ".join(
            block if isinstance(block, str) else str(block.get("text", json.dumps(readable(block))))
            for block in content
        )
    else:
        text = json.dumps(readable(content), ensure_ascii=False)
    calls = getattr(message, "tool_calls", None) or []
    for call in calls:
        args = json.dumps(readable(call.get("args", {})), ensure_ascii=False)
        text += f"{' ' if text else ''}→ {call.get('name')}({args})"
    return text


def readable(value: Any) -> Any:
    """A value as a person reads it, as plain JSON: a message as its role and
    text, a model or dataclass as its fields, a datetime as ISO 8601, bytes as
    their length.

    Example:
        >>> readable(AIMessage("hi", id="a1"))
        {'role': 'ai', 'text': 'hi', 'id': 'a1'}
    """
    if isinstance(value, BaseMessage):
        out: dict[str, Any] = {"role": value.type}
        if value.name:
            out["name"] = value.name
        out["text"] = message_text(value)
        if value.id:
            out["id"] = value.id
        return out
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return (
            value if value == value and value not in (float("inf"), float("-inf")) else str(value)
        )
    if isinstance(value, enum.Enum):
        return readable(value.value)
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, (UUID, Decimal)):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    if isinstance(value, Mapping):
        return {str(k): readable(v) for k, v in value.items()}
    if hasattr(value, "_asdict"):  # NamedTuple
        return readable(value._asdict())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [readable(v) for v in value]
    if hasattr(type(value), "model_fields"):  # pydantic v2
        return {name: readable(getattr(value, name)) for name in type(value).model_fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: readable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if type(value).__name__ == "Interrupt":
        return {"interrupt": readable(getattr(value, "value", None))}
    if type(value).__name__ == "Send":
        return {"send": value.node, "arg": readable(value.arg)}
    return repr(value)


def channel_changes(
    old: Mapping[str, Any], new: Mapping[str, Any], encode: Callable[[Any], Any]
) -> list[dict[str, Any]]:
    """The channels `new` adds, removes or changes relative to `old`, compared as stored.

    Example:
        >>> channel_changes({"n": 1}, {"n": 2, "t": "x"}, lambda v: v)
        [{'channel': 'n', 'change': 'changed', 'before': 1, 'after': 2},
         {'channel': 't', 'change': 'added', 'after': 'x'}]
    """
    changes = []
    for channel in sorted(old.keys() | new.keys()):
        before, after = old.get(channel, _ABSENT), new.get(channel, _ABSENT)
        if before is _ABSENT:
            kind = "added"
        elif after is _ABSENT:
            kind = "removed"
        elif encode(before) != encode(after):
            kind = "changed"
        else:
            continue
        change: dict[str, Any] = {"channel": channel, "change": kind}
        present = [value for value in (before, after) if value is not _ABSENT]
        if all(_is_message_list(value) for value in present):
            # A thread's message list only grows (or is edited by id): show the
            # messages that differ, not two copies of the whole conversation.
            before_list = [] if before is _ABSENT else before
            after_list = [] if after is _ABSENT else after
            before_by_id = {m.id: m for m in before_list}
            after_ids = {m.id for m in after_list}
            change["messages_added"] = [
                _message_summary(m) for m in after_list if m.id not in before_by_id
            ]
            change["messages_removed"] = [
                _message_summary(m) for m in before_list if m.id not in after_ids
            ]
            change["messages_edited"] = [  # replaced by id (add_messages), new content
                _message_summary(m)
                for m in after_list
                if m.id in before_by_id and encode(m) != encode(before_by_id[m.id])
            ]
        else:
            if before is not _ABSENT:
                change["before"] = encode(before)
            if after is not _ABSENT:
                change["after"] = encode(after)
        changes.append(change)
    return changes


_ABSENT = object()  # a channel missing from one side of a diff (None is a value)


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(m, BaseMessage) and m.id is not None for m in value
    )


def _is_messages(value: Any) -> bool:
    return (
        isinstance(value, list) and bool(value) and all(isinstance(m, BaseMessage) for m in value)
    )


def message_view(message: BaseMessage) -> dict[str, Any]:
    """A message as a conversation shows it: role, name, text, tool calls, tool result.

    Example:
        >>> message_view(ToolMessage("42", tool_call_id="c1", name="price"))
        {'role': 'tool', 'name': 'price', 'id': None, 'text': '42', 'tool_calls': [],
         'tool_call_id': 'c1', 'status': 'success'}
    """
    return {
        "role": message.type,
        "name": message.name,
        "id": message.id,
        "text": message_text(message.content),  # the content alone: tool calls follow
        "tool_calls": [
            {"id": c.get("id"), "name": c.get("name"), "args": readable(c.get("args", {}))}
            for c in getattr(message, "tool_calls", None) or []
        ],
        "tool_call_id": getattr(message, "tool_call_id", None),
        "status": getattr(message, "status", None),
    }


def next_nodes(checkpoint: Mapping[str, Any]) -> list[str]:
    """The nodes a checkpoint runs next: those whose trigger channel
    (`branch:to:NODE`, or `__start__`) holds a value the node has not seen.

    Agrees with LangGraph's `graph.get_state(config).next` without the graph.

    Example:
        >>> next_nodes(saver.get_tuple(config).checkpoint)
        ['tools']
    """
    versions = checkpoint.get("channel_versions", {})
    seen = checkpoint.get("versions_seen", {})
    filled = checkpoint.get("channel_values", {})
    out = []
    for channel, version in versions.items():
        if channel == "__start__":
            node = "__start__"
        elif channel.startswith("branch:to:"):
            node = channel[len("branch:to:") :]
        else:
            continue
        last = seen.get(node, {}).get(channel)
        # A trigger that was read is emptied (its version moves on), so only a
        # filled one counts.
        if channel in filled and (last is None or str(version) > str(last)):
            out.append(node)
    return sorted(out)


def nodes_run(versions_seen: Mapping[str, Any], parent_seen: Mapping[str, Any]) -> list[str]:
    """The nodes that ran in the step that made a checkpoint: those whose
    `versions_seen` differs from the parent checkpoint's."""
    return sorted(
        node
        for node, seen in versions_seen.items()
        if node != "__input__" and seen != parent_seen.get(node)
    )


def _message_summary(message: BaseMessage) -> dict[str, Any]:
    return {"id": message.id, "type": message.type, "name": message.name,
            "text": message_text(message)}  # fmt: skip
