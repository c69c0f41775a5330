"""Our own limits give our own errors (issue 12 item 7), before any I/O.

Each case used to reach the user as a raw psycopg / orjson / Python error, or
cost seconds and gigabytes first: a thread id too long for a btree entry
(ProgramLimitExceeded), a NUL in an id (DataError), a value nested deeper than
JSON is read with (TypeError / RecursionError), a value bigger than one jsonb
value holds. Each test also checks that nothing was stored.
"""

from __future__ import annotations

import random
import string
from typing import Annotated, Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum._core import values as value_limits
from langgraph_colosseum.errors import InvalidConfigError, ValueNotStorableError

# Incompressible, so Postgres cannot squeeze it under the btree limit.
LONG_ID = "".join(random.Random(7).choices(string.ascii_letters, k=3000))
BAD_IDS = [pytest.param(LONG_ID, id="3000-bytes"), pytest.param("t\x00x", id="nul")]


def replace(_: Any, new: Any) -> Any:
    return new


class State(TypedDict):
    value: Annotated[Any, replace]


def graph_of(saver: Any, produce: Any) -> Any:
    builder = StateGraph(State)
    builder.add_node("make", lambda s: {"value": produce()})
    builder.add_edge(START, "make")
    return builder.compile(checkpointer=saver)


def rows(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return sum(
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]
            for table in ("colosseum_checkpoints", "colosseum_channel_values", "colosseum_threads")
        )


def cfg(thread_id: str, ns: str = "") -> dict:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


# ------------------------------------------------------------ ids


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_thread_id_is_a_config_error_sync(saver: ColosseumSaver, pg_url: str, bad: str) -> None:
    graph = graph_of(saver, lambda: 1)
    with pytest.raises(InvalidConfigError, match="thread_id") as info:
        graph.invoke({"value": 0}, cfg(bad))
    assert repr(bad[:40]) in str(info.value)
    for call in (
        lambda: saver.get_tuple(cfg(bad)),
        lambda: list(saver.list(cfg(bad))),
        lambda: saver.threads.update(bad, metadata={"a": 1}),
        lambda: saver.threads.get(bad),
        lambda: saver.delete_thread(bad),
    ):
        with pytest.raises(InvalidConfigError):
            call()
    assert rows(pg_url) == 0
    # A good id still works on the same saver.
    assert graph.invoke({"value": 0}, cfg("fine"))["value"] == 1


@pytest.mark.parametrize("bad", BAD_IDS)
async def test_bad_thread_id_is_a_config_error_async(
    asaver: AsyncColosseumSaver, pg_url: str, bad: str
) -> None:
    graph = graph_of(asaver, lambda: 1)
    with pytest.raises(InvalidConfigError, match="thread_id"):
        await graph.ainvoke({"value": 0}, cfg(bad))
    with pytest.raises(InvalidConfigError):
        await asaver.aget_tuple(cfg(bad))
    with pytest.raises(InvalidConfigError):
        await asaver.threads.update(bad, metadata={"a": 1})
    assert rows(pg_url) == 0


@pytest.mark.parametrize("bad", BAD_IDS)
def test_bad_namespace_or_checkpoint_id_is_a_config_error(
    saver: ColosseumSaver, pg_url: str, bad: str
) -> None:
    checkpoint = empty_checkpoint()
    with pytest.raises(InvalidConfigError, match="checkpoint_ns.*thread 'ok'"):
        saver.put(cfg("ok", bad), checkpoint, {}, {})
    config = {"configurable": {"thread_id": "ok", "checkpoint_ns": "", "checkpoint_id": bad}}
    with pytest.raises(InvalidConfigError, match="checkpoint_id"):
        saver.get_tuple(config)
    with pytest.raises(InvalidConfigError, match="checkpoint_id"):
        saver.put_writes(config, [("a", 1)], "task")
    assert rows(pg_url) == 0


# ------------------------------------------------------------ depth


def test_value_nested_too_deep_names_its_path_sync(saver: ColosseumSaver, pg_url: str) -> None:
    for depth in (300, 5000):  # beyond orjson's 255 levels; beyond Python's stack
        graph = graph_of(saver, lambda depth=depth: {"deep": nested(depth)})
        with pytest.raises(ValueNotStorableError) as info:
            graph.invoke({"value": 0}, cfg(f"deep-{depth}"))
        error = info.value
        assert error.channel == "value" and error.thread_id == f"deep-{depth}"
        assert error.path.startswith("$.deep[0][0]"), error.path
        assert "nested" in str(error.__cause__) or "Recursion" in str(error.__cause__)
        # The step that produced it was not stored: the thread is as before it.
        assert graph.get_state(cfg(f"deep-{depth}")).values == {"value": 0}


async def test_value_nested_too_deep_names_its_path_async(
    asaver: AsyncColosseumSaver, pg_url: str
) -> None:
    graph = graph_of(asaver, lambda: nested(400))
    with pytest.raises(ValueNotStorableError) as info:
        await graph.ainvoke({"value": 0}, cfg("adeep"))
    assert info.value.channel == "value" and info.value.path.startswith("$[0][0]")
    assert (await graph.aget_state(cfg("adeep"))).values == {"value": 0}


def test_metadata_nested_too_deep(saver: ColosseumSaver, pg_url: str) -> None:
    with pytest.raises(ValueNotStorableError) as info:
        saver.put(cfg("meta-deep"), empty_checkpoint(), {"source": "x", "m": nested(300)}, {})
    assert info.value.channel == "<metadata>" and info.value.path.startswith("$.m[0]")
    assert rows(pg_url) == 0


# ------------------------------------------------------------ size


def test_value_above_jsonb_limit_goes_to_bytes_then_is_refused(
    saver: ColosseumSaver, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limits scaled down (the real ones are 255 MiB and ~1 GiB): a value
    whose JSON is over the jsonb limit is stored as serde bytes and reads back;
    one whose bytes are over a row's limit is refused before any I/O."""
    monkeypatch.setattr(value_limits, "JSONB_MAX_TEXT", 20_000)
    big = {"text": "x" * 30_000, "n": 1}
    graph = graph_of(saver, lambda: big)
    assert graph.invoke({"value": 0}, cfg("big"))["value"] == big
    with psycopg.connect(pg_url, autocommit=True) as conn:
        (encoding,) = conn.execute(
            "SELECT encoding FROM colosseum_channel_values v JOIN colosseum_checkpoints c "
            "ON c.thread_id = v.thread_id AND v.channel = 'value' "
            "AND v.version = c.checkpoint -> 'channel_versions' ->> 'value' "
            "WHERE v.thread_id = 'big' ORDER BY c.checkpoint_id DESC LIMIT 1"
        ).fetchone()
    assert encoding == "serde"
    assert graph.get_state(cfg("big")).values["value"] == big

    monkeypatch.setattr(value_limits, "BYTEA_MAX", 25_000)
    with pytest.raises(ValueNotStorableError, match="bytes") as info:
        graph.invoke({"value": 0}, cfg("too-big"))
    assert info.value.thread_id == "too-big" and info.value.channel == "value"
    assert graph.get_state(cfg("too-big")).values == {"value": 0}  # that step: not stored
