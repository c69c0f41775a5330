"""Rows written behind the saver's back must never import or construct anything.

Each test inserts a row directly with SQL (as an attacker with write access to
the tables, or a corrupted backup, would), then reads it through the saver.
The read must fail with `CorruptRowError` naming the thread, checkpoint and
channel, and must not import a module or call a constructor the allowlist does
not name.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum.errors import CodecError, CorruptRowError, UntrustedTypeError

THREAD = "untrusted-thread"
CHECKPOINT_ID = "1ef00000-0000-6000-8000-000000000001"
CHANNEL = "evil_channel"
VERSION = "00000000000000000000000000000001.0.5"
UNKNOWN_MODULE = "some_unknown_module_xyz"


def witness_path() -> Path:
    return Path("/tmp") / f"pwned-colosseum-{uuid.uuid4().hex}"


def malicious_payloads(witness: Path) -> dict[str, Any]:
    touch = ["touch", str(witness)]
    return {
        "model-os-system": {"$t": "model", "cls": "os:system", "v": {}},
        "dataclass-popen": {
            "$t": "dataclass",
            "cls": "subprocess:Popen",
            "v": {"args": f"touch {witness}"},
        },
        "enum-unknown-module": {"$t": "enum", "cls": f"{UNKNOWN_MODULE}:Thing", "v": 1},
        "unknown-tag": {"$t": "os.system", "v": f"touch {witness}"},
        "namedtuple-popen": {"$t": "namedtuple", "cls": "subprocess:Popen", "v": [touch]},
        "send-eval": {
            "$t": "send",
            "cls": "builtins:eval",
            "v": {"node": "__import__('os')", "arg": 1, "timeout": None},
        },
        "model-unknown-module": {
            "$t": "model",
            "cls": f"{UNKNOWN_MODULE}.sub:Model",
            "v": {"a": 1},
        },
        "dataclass-dotted-name": {
            "$t": "dataclass",
            "cls": "subprocess.Popen",
            "v": {"args": touch},
        },
        "cls-not-a-string": {
            "$t": "dataclass",
            "cls": ["subprocess", "Popen"],
            "v": {"args": touch},
        },
        "nested-deep": {
            "ok": [
                1,
                {"fine": {"$t": "model", "cls": "os:system", "v": {"command": f"touch {witness}"}}},
            ]
        },
        # A registered class must not be revived through another kind's constructor.
        "registered-class-wrong-kind": {
            "$t": "enum",
            "cls": "langgraph.types:Send",
            "v": f"touch {witness}",
        },
        "registered-model-as-dataclass": {
            "$t": "dataclass",
            "cls": "langchain_core.messages.human:HumanMessage",
            "v": {"content": "x"},
        },
    }


PAYLOAD_IDS = list(malicious_payloads(Path("/tmp/x")))


# ------------------------------------------------------------ row helpers


def checkpoint_document(channel_versions: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "v": 4,
        "id": CHECKPOINT_ID,
        "ts": "2024-01-01T00:00:00+00:00",
        "channel_versions": channel_versions,
        "versions_seen": {},
        "updated_channels": None,
        **extra,
    }


def insert_checkpoint(conn: psycopg.Connection, document: dict, metadata: Any = None) -> None:
    conn.execute(
        "INSERT INTO colosseum_checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
        "parent_checkpoint_id, run_id, checkpoint, metadata) "
        "VALUES (%s, '', %s, NULL, NULL, %s::jsonb, %s::jsonb)",
        (
            THREAD,
            document["id"],
            json.dumps(document),
            json.dumps(metadata or {"source": "input", "step": -1}),
        ),
    )


def insert_value(conn: psycopg.Connection, channel: str, value: Any) -> None:
    conn.execute(
        "INSERT INTO colosseum_channel_values (thread_id, checkpoint_ns, channel, version, "
        "encoding, value, value_bytes, value_type) VALUES (%s, '', %s, %s, 'json', %s::jsonb, NULL, NULL)",
        (THREAD, channel, VERSION, json.dumps(value)),
    )


def insert_write(conn: psycopg.Connection, channel: str, value: Any, idx: int = 0) -> None:
    conn.execute(
        "INSERT INTO colosseum_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, "
        "task_path, channel, encoding, value, value_bytes, value_type) "
        "VALUES (%s, '', %s, 'task-1', %s, '', %s, 'json', %s::jsonb, NULL, NULL)",
        (THREAD, CHECKPOINT_ID, idx, channel, json.dumps(value)),
    )


# ------------------------------------------------------------ the tripwires


class Tripwires:
    def __init__(self) -> None:
        self.popen: list[Any] = []
        self.system: list[Any] = []
        self.imports: list[str] = []


@pytest.fixture
def tripwires(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tripwires]:
    """Record (and refuse) process creation, and record every import."""
    wires = Tripwires()

    def popen_init(self: Any, *args: Any, **kwargs: Any) -> None:
        wires.popen.append((args, kwargs))
        raise RuntimeError("subprocess.Popen must not be constructed while reading rows")

    def system(*args: Any, **kwargs: Any) -> int:
        wires.system.append((args, kwargs))
        raise RuntimeError("os.system must not be called while reading rows")

    real_import = builtins.__import__
    real_import_module = importlib.import_module

    def recording_import(name: str, *args: Any, **kwargs: Any) -> Any:
        wires.imports.append(name)
        return real_import(name, *args, **kwargs)

    def recording_import_module(name: str, *args: Any, **kwargs: Any) -> Any:
        wires.imports.append(name)
        return real_import_module(name, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", popen_init)
    monkeypatch.setattr(os, "system", system)
    monkeypatch.setattr(os, "popen", system)
    monkeypatch.setattr(builtins, "__import__", recording_import)
    monkeypatch.setattr(importlib, "import_module", recording_import_module)
    assert UNKNOWN_MODULE not in sys.modules
    yield wires


def assert_nothing_happened(wires: Tripwires, witness: Path) -> None:
    assert wires.popen == []
    assert wires.system == []
    assert not witness.exists()
    assert UNKNOWN_MODULE not in sys.modules
    assert not [
        name for name in wires.imports if UNKNOWN_MODULE in name or name.startswith("subprocess")
    ]


def read_all_ways(saver: ColosseumSaver) -> list[CorruptRowError]:
    """Every read path that loads the checkpoint; each must raise CorruptRowError."""
    errors = []
    reads = [
        lambda: saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}),
        lambda: saver.get_tuple(
            {
                "configurable": {
                    "thread_id": THREAD,
                    "checkpoint_ns": "",
                    "checkpoint_id": CHECKPOINT_ID,
                }
            }
        ),
        lambda: list(saver.list({"configurable": {"thread_id": THREAD}})),
        lambda: list(saver.list(None)),
    ]
    for read in reads:
        with pytest.raises(CorruptRowError) as info:
            read()
        errors.append(info.value)
    return errors


def assert_names_location(error: CorruptRowError, channel: str | None) -> None:
    message = str(error)
    assert THREAD in message
    assert CHECKPOINT_ID in message
    assert error.thread_id == THREAD and error.checkpoint_id == CHECKPOINT_ID
    assert error.channel == channel
    if channel is not None:
        assert repr(channel) in message
    assert isinstance(error.__cause__, CodecError)


# ------------------------------------------------------------ controls


def test_control_rows_built_the_same_way_read_fine(saver: ColosseumSaver, pg_url: str) -> None:
    """The hand-written rows are valid: a benign payload in them reads back."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({CHANNEL: VERSION}))
        insert_value(conn, CHANNEL, {"ticker": "AAPL", "t": {"$t": "tuple", "v": [1, 2]}})
        insert_write(conn, "w", {"$t": "set", "v": [1]})
        insert_write(conn, "__error__", "boom", idx=-1)
    got = saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
    assert got is not None
    assert got.checkpoint["id"] == CHECKPOINT_ID
    assert got.checkpoint["channel_values"] == {CHANNEL: {"ticker": "AAPL", "t": (1, 2)}}
    assert got.pending_writes == [("task-1", "__error__", "boom"), ("task-1", "w", {1})]


# ------------------------------------------------------------ malicious rows


@pytest.mark.parametrize("payload_id", PAYLOAD_IDS)
def test_malicious_channel_value(
    saver: ColosseumSaver, pg_url: str, tripwires: Tripwires, payload_id: str
) -> None:
    witness = witness_path()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({CHANNEL: VERSION, "fine": VERSION}))
        insert_value(conn, "fine", {"ticker": "AAPL"})
        insert_value(conn, CHANNEL, malicious_payloads(witness)[payload_id])
    for error in read_all_ways(saver):
        assert_names_location(error, CHANNEL)
    assert_nothing_happened(tripwires, witness)


@pytest.mark.parametrize("payload_id", PAYLOAD_IDS)
def test_malicious_pending_write(
    saver: ColosseumSaver, pg_url: str, tripwires: Tripwires, payload_id: str
) -> None:
    witness = witness_path()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({}))
        insert_write(conn, "fine_write", [1, 2], idx=0)
        insert_write(conn, "__interrupt__", malicious_payloads(witness)[payload_id], idx=-3)
    for error in read_all_ways(saver):
        assert_names_location(error, "__interrupt__")
    assert_nothing_happened(tripwires, witness)


@pytest.mark.parametrize("payload_id", PAYLOAD_IDS)
def test_malicious_checkpoint_document(
    saver: ColosseumSaver, pg_url: str, tripwires: Tripwires, payload_id: str
) -> None:
    witness = witness_path()
    payload = malicious_payloads(witness)[payload_id]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({}, versions_seen={"node": payload}))
    for error in read_all_ways(saver):
        assert_names_location(error, None)
    assert_nothing_happened(tripwires, witness)


@pytest.mark.parametrize("payload_id", PAYLOAD_IDS)
def test_malicious_metadata(
    saver: ColosseumSaver, pg_url: str, tripwires: Tripwires, payload_id: str
) -> None:
    witness = witness_path()
    payload = malicious_payloads(witness)[payload_id]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({}), metadata={"source": "input", "x": payload})
    for error in read_all_ways(saver):
        assert_names_location(error, None)
    assert_nothing_happened(tripwires, witness)


def test_untrusted_class_is_reported_as_such(
    saver: ColosseumSaver, pg_url: str, tripwires: Tripwires
) -> None:
    witness = witness_path()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({CHANNEL: VERSION}))
        insert_value(conn, CHANNEL, {"a": [0, malicious_payloads(witness)["dataclass-popen"]]})
    with pytest.raises(CorruptRowError) as info:
        saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
    cause = info.value.__cause__
    assert isinstance(cause, UntrustedTypeError)
    assert cause.path == "$.a[1]"
    assert "subprocess:Popen" in str(info.value) and "allowlist" in str(info.value)
    assert_nothing_happened(tripwires, witness)


def test_registering_later_does_not_trust_other_names(
    saver: ColosseumSaver, pg_url: str, tripwires: Tripwires
) -> None:
    """Registering one app class allows exactly that name, nothing near it."""
    import dataclasses

    @dataclasses.dataclass
    class Order:
        ticker: str

    saver.register_type(Order)
    name = f"{Order.__module__}:{Order.__qualname__}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({CHANNEL: VERSION, "ok": VERSION}))
        insert_value(conn, "ok", {"$t": "dataclass", "cls": name, "v": {"ticker": "AAPL"}})
        insert_value(conn, CHANNEL, {"$t": "dataclass", "cls": name + "X", "v": {"ticker": "AAPL"}})
    with pytest.raises(CorruptRowError) as info:
        saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
    assert info.value.channel == CHANNEL
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM colosseum_channel_values WHERE channel = %s", (CHANNEL,))
    got = saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
    assert got is not None and got.checkpoint["channel_values"] == {"ok": Order("AAPL")}


# ------------------------------------------------------------ delta rows
# A channel value row may be a delta ('append' / 'merge') on another version of
# the same channel (`base_version`); reading walks that chain in SQL and in
# Python. Rows that break the chain must give CorruptRowError, promptly.

# A sound read of these few rows takes milliseconds; the defect this bounds is a
# walk that never ends. The bound is generous because a loaded 2-core CI machine
# can stall a child process for seconds (3 s failed there once), and an endless
# walk is caught at any bound.
READ_TIMEOUT_S = 30.0


def insert_delta_value(
    conn: psycopg.Connection, version: str, encoding: str, value: Any, base_version: str
) -> None:
    conn.execute(
        "INSERT INTO colosseum_channel_values (thread_id, checkpoint_ns, channel, version, "
        "encoding, value, value_bytes, value_type, base_version, depth) "
        "VALUES (%s, '', %s, %s, %s, %s::jsonb, NULL, NULL, %s, 1)",
        (THREAD, CHANNEL, version, encoding, json.dumps(value), base_version),
    )


def insert_full_value(conn: psycopg.Connection, version: str, value: Any) -> None:
    conn.execute(
        "INSERT INTO colosseum_channel_values (thread_id, checkpoint_ns, channel, version, "
        "encoding, value) VALUES (%s, '', %s, %s, 'json', %s::jsonb)",
        (THREAD, CHANNEL, version, json.dumps(value)),
    )


def get_latest_with_deadline(saver: ColosseumSaver, pg_url: str) -> Any:
    """get_tuple, but a read that does not return in time fails the test.

    A hung read is cancelled (only this session's own test database is
    touched) so the suite moves on.
    """
    import threading

    outcome: dict[str, Any] = {}

    def read() -> None:
        try:
            outcome["result"] = saver.get_tuple(
                {"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}}
            )
        except BaseException as exc:  # handed to the test thread
            outcome["error"] = exc

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(READ_TIMEOUT_S)
    if reader.is_alive():
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'"
            )
        reader.join(READ_TIMEOUT_S)
        pytest.fail(
            f"get_tuple did not return within {READ_TIMEOUT_S:.0f}s on a corrupt delta chain "
            f"(cancelled; then: {outcome!r})"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def test_control_delta_rows_built_the_same_way_read_fine(
    saver: ColosseumSaver, pg_url: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({CHANNEL: "v3"}))
        insert_full_value(conn, "v1", [1])
        insert_delta_value(conn, "v2", "append", [{"$t": "tuple", "v": [2]}], base_version="v1")
        insert_delta_value(conn, "v3", "append", [3], base_version="v2")
        insert_checkpoint(conn, {**checkpoint_document({CHANNEL: "m2"}), "id": CHECKPOINT_ID + "0"})
        insert_full_value(conn, "m1", {"a": 1, "b": 2})
        insert_delta_value(conn, "m2", "merge", {"set": {"c": 3}, "del": ["a"]}, base_version="m1")
    got = get_latest_with_deadline(saver, pg_url)
    assert got is not None and got.checkpoint["channel_values"] == {CHANNEL: {"b": 2, "c": 3}}
    got = saver.get_tuple(
        {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": CHECKPOINT_ID}}
    )
    assert got is not None and got.checkpoint["channel_values"] == {CHANNEL: [1, (2,), 3]}


@pytest.mark.parametrize(
    "payload_id", ["model-os-system", "dataclass-popen", "enum-unknown-module", "unknown-tag"]
)
@pytest.mark.parametrize("encoding", ["append", "merge"])
def test_malicious_delta_payload(
    saver: ColosseumSaver, pg_url: str, tripwires: Tripwires, payload_id: str, encoding: str
) -> None:
    witness = witness_path()
    payload = malicious_payloads(witness)[payload_id]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({CHANNEL: "v2"}))
        if encoding == "append":
            insert_full_value(conn, "v1", [1])
            insert_delta_value(conn, "v2", "append", [payload], base_version="v1")
        else:
            insert_full_value(conn, "v1", {"a": 1})
            insert_delta_value(
                conn, "v2", "merge", {"set": {"b": payload}, "del": []}, base_version="v1"
            )
    for error in read_all_ways(saver):
        assert_names_location(error, CHANNEL)
    assert_nothing_happened(tripwires, witness)


def test_malicious_payload_in_the_base_of_a_delta(
    saver: ColosseumSaver, pg_url: str, tripwires: Tripwires
) -> None:
    witness = witness_path()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({CHANNEL: "v2"}))
        insert_full_value(conn, "v1", [malicious_payloads(witness)["dataclass-popen"]])
        insert_delta_value(conn, "v2", "append", [2], base_version="v1")
    for error in read_all_ways(saver):
        assert_names_location(error, CHANNEL)
    assert_nothing_happened(tripwires, witness)


@pytest.mark.parametrize(
    "rows",
    [
        # (version, encoding, value, base_version); the checkpoint names "v2".
        [("v2", "append", [1], "v1")],  # the base is missing
        [("v1", "json", {"a": 1}, None), ("v2", "append", [1], "v1")],  # append onto a dict
        [
            ("v1", "json", [1], None),
            ("v2", "merge", {"set": {}, "del": []}, "v1"),
        ],  # merge onto a list
        [("v1", "json", {"a": 1}, None), ("v2", "merge", {"oops": 1}, "v1")],  # malformed merge
        [("v1", "json", [1], None), ("v2", "append", {"not": "a list"}, "v1")],  # malformed append
        [("v1", "empty", None, None), ("v2", "append", [1], "v1")],  # append onto a cleared channel
    ],
    ids=[
        "missing-base",
        "append-onto-dict",
        "merge-onto-list",
        "malformed-merge",
        "malformed-append",
        "append-onto-empty",
    ],
)
def test_broken_delta_chain(saver: ColosseumSaver, pg_url: str, rows: list[tuple]) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({CHANNEL: "v2"}))
        for version, encoding, value, base in rows:
            if base is None:
                conn.execute(
                    "INSERT INTO colosseum_channel_values (thread_id, checkpoint_ns, channel, "
                    "version, encoding, value) VALUES (%s, '', %s, %s, %s, %s::jsonb)",
                    (
                        THREAD,
                        CHANNEL,
                        version,
                        encoding,
                        None if value is None else json.dumps(value),
                    ),
                )
            else:
                insert_delta_value(conn, version, encoding, value, base_version=base)
    with pytest.raises(CorruptRowError) as info:
        get_latest_with_deadline(saver, pg_url)
    assert info.value.channel == CHANNEL
    assert THREAD in str(info.value) and CHECKPOINT_ID in str(info.value)


@pytest.mark.parametrize(
    "cycle",
    [
        [("v2", "v2")],  # a row that is its own base
        [("v2", "v1"), ("v1", "v2")],  # two rows, each the other's base
    ],
    ids=["self", "pair"],
)
def test_delta_base_cycle_is_reported_not_looped(
    saver: ColosseumSaver, pg_url: str, cycle: list[tuple[str, str]]
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({CHANNEL: "v2"}))
        for version, base in cycle:
            insert_delta_value(conn, version, "append", [version], base_version=base)
    with pytest.raises(CorruptRowError) as info:
        get_latest_with_deadline(saver, pg_url)
    assert info.value.channel == CHANNEL


def test_delta_base_cycle_in_list_is_reported_not_looped(
    pg_url: str, saver: ColosseumSaver
) -> None:
    """`list` fetches value chains separately, then walks them in Python.

    Run in a child process: a walk that never ends cannot be interrupted inside
    this one (and would grow without bound), but a child can be killed.
    """
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({CHANNEL: "v2"}))
        insert_delta_value(conn, "v2", "append", [2], base_version="v1")
        insert_delta_value(conn, "v1", "append", [1], base_version="v0")
        insert_delta_value(conn, "v0", "append", [0], base_version="v1")
    code = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))
from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum.errors import CorruptRowError
with ColosseumSaver.from_conn_string({pg_url!r}, pool_size=1) as saver:
    print("ready", flush=True)
    try:
        list(saver.list({{"configurable": {{"thread_id": {THREAD!r}}}}}))
        print("returned")
    except CorruptRowError as exc:
        print("CorruptRowError", exc.channel)
"""
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        ready = child.stdout.readline()  # imports and pool are done
        out, err = child.communicate(timeout=READ_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pytest.fail(
            f"list() did not return within {READ_TIMEOUT_S:.0f}s on a delta base cycle (killed)"
        )
    assert ready.strip() == "ready", err
    assert out.strip() == f"CorruptRowError {CHANNEL}", (out, err)


# ------------------------------------------- rows beyond what the reader parses


def deep_array(depth: int) -> str:
    """JSON text nested `depth` arrays deep: jsonb takes it, orjson stops at 1024."""
    return "[" * depth + "1" + "]" * depth


DEEP = deep_array(2000)


def test_deeply_nested_channel_value(saver: ColosseumSaver, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({CHANNEL: VERSION}))
        conn.execute(
            "INSERT INTO colosseum_channel_values (thread_id, checkpoint_ns, channel, version, "
            "encoding, value) VALUES (%s, '', %s, %s, 'json', %s::jsonb)",
            (THREAD, CHANNEL, VERSION, DEEP),
        )
    for error in read_all_ways(saver):
        assert_names_location(error, CHANNEL)


def test_deeply_nested_pending_write(saver: ColosseumSaver, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({}))
        conn.execute(
            "INSERT INTO colosseum_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, "
            "task_path, channel, encoding, value) "
            "VALUES (%s, '', %s, 'task-1', 0, '', 'w', 'json', %s::jsonb)",
            (THREAD, CHECKPOINT_ID, DEEP),
        )
    for error in read_all_ways(saver):
        assert_names_location(error, "w")


@pytest.mark.parametrize("where", ["checkpoint", "metadata"])
def test_deeply_nested_checkpoint_or_metadata(
    saver: ColosseumSaver, pg_url: str, where: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({}))
        conn.execute(
            f"UPDATE colosseum_checkpoints SET {where} = jsonb_set({where}, '{{deep}}', %s::jsonb) "
            "WHERE thread_id = %s",
            (DEEP, THREAD),
        )
    for error in read_all_ways(saver):
        assert_names_location(error, None)


@pytest.mark.parametrize(
    "versions",
    ['"not an object"', "[1, 2]", "null", '{"c": {"nested": 1}}', '{"c": [1]}', "17"],
)
def test_malformed_channel_versions(saver: ColosseumSaver, pg_url: str, versions: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        insert_checkpoint(conn, checkpoint_document({"c": VERSION}))
        insert_value_at(conn, "c", VERSION, {"ok": 1})
        conn.execute(
            "UPDATE colosseum_checkpoints "
            "SET checkpoint = jsonb_set(checkpoint, '{channel_versions}', %s::jsonb) "
            "WHERE thread_id = %s",
            (versions, THREAD),
        )
    for error in read_all_ways(saver):
        assert_names_location(error, None)


def insert_value_at(conn: psycopg.Connection, channel: str, version: str, value: Any) -> None:
    conn.execute(
        "INSERT INTO colosseum_channel_values (thread_id, checkpoint_ns, channel, version, "
        "encoding, value) VALUES (%s, '', %s, %s, 'json', %s::jsonb)",
        (THREAD, channel, version, json.dumps(value)),
    )
