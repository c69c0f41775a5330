"""`saver.threads.update(thread_id, metadata=...)`: what the registry (jsonb) can
hold comes back exactly, and what it cannot is refused with an error that names
the thread and the fix, leaving the stored metadata as it was."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum.errors import UnregisteredClassError, ValueNotStorableError
from tests.conftest import truncate


@dataclasses.dataclass
class Position:
    """An application class the saver was not told about."""

    ticker: str


def started(saver: ColosseumSaver, thread_id: str) -> None:
    saver.put({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}},
              empty_checkpoint(), {}, {})  # fmt: skip
    saver.threads.update(thread_id, metadata={"desk": "equities"})


def test_an_unregistered_class_is_refused_naming_the_thread_and_types(pg_url: str) -> None:
    truncate(pg_url)
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        started(saver, "upd-1")
        with pytest.raises(UnregisteredClassError) as refused:
            saver.threads.update("upd-1", metadata={"desk": "fx", "pos": Position("AMD")})
        message = str(refused.value)
        assert "'upd-1'" in message and "types=" in message and "$.pos" in message
        assert "Position" in message
        with pytest.raises(ValueNotStorableError) as refused:
            saver.threads.update("upd-1", metadata={"lock": threading.Lock()})
        assert "'upd-1'" in str(refused.value) and "$.lock" in str(refused.value)
        assert saver.threads.get("upd-1").metadata == {"desk": "equities"}  # untouched
        # Registered, it is stored and revives as itself.
        saver.register_type(Position)
        saver.threads.update("upd-1", metadata={"pos": Position("AMD")})
        assert saver.threads.get("upd-1").metadata["pos"] == Position("AMD")


def test_nul_round_trips_in_a_value_and_is_refused_in_a_key(pg_url: str) -> None:
    truncate(pg_url)
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        started(saver, "upd-nul")
        saver.threads.update("upd-nul", metadata={"note": "x\x00y"})
        assert saver.threads.get("upd-nul").metadata["note"] == "x\x00y"
        assert [t.thread_id for t in saver.threads.search(metadata={"note": "x\x00y"})] == [
            "upd-nul"
        ]
        # A jsonb key cannot hold NUL, and a key is not tagged: refused, named.
        with pytest.raises(ValueNotStorableError) as refused:
            saver.threads.update("upd-nul", metadata={"k\x00": 1})
        assert "'upd-nul'" in str(refused.value) and "NUL" in str(refused.value)
        assert saver.threads.get("upd-nul").metadata == {"desk": "equities", "note": "x\x00y"}


async def test_the_async_registry_refuses_the_same_way(pg_url: str) -> None:
    truncate(pg_url)
    with ColosseumSaver.from_conn_string(pg_url) as saver:
        started(saver, "upd-async")
    async with AsyncColosseumSaver.from_conn_string(pg_url) as saver:
        with pytest.raises(UnregisteredClassError, match="upd-async"):
            await saver.threads.update("upd-async", metadata={"pos": Position("AMD")})
