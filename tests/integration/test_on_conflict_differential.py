"""`on_conflict="raise"` changes nothing for one worker at a time: every
differential scenario (chat, interrupts, subgraphs, Send fan-out, a failed
branch, time travel from a chosen checkpoint_id, update_state on a past
checkpoint, delta channels) runs on a saver built with it and must record
exactly what InMemorySaver records, on Postgres alone and with the Redis hot
head. A run that named its checkpoint forks (no conflict); a run that read the
latest continues it (no other run wrote meanwhile): a false conflict would fail
the scenario.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from tests.conftest import CACHE_MODES, cache_options, truncate
from tests.integration import test_differential as diff
from tests.integration.graphs import (
    approval_graph,
    chat_graph,
    delta_graph,
    fanout_graph,
    flaky_graph,
    linear_graph,
    order_graph,
    subgraph_graph,
    two_question_approval_graph,
)

SCENARIOS: dict[str, tuple[Any, Any]] = {
    "chat": (diff.chat_scenario, chat_graph),
    "interrupt": (diff.approval_scenario, approval_graph),
    "two-interrupts": (diff.two_interrupts_scenario, two_question_approval_graph),
    "subgraph": (diff.subgraph_scenario, subgraph_graph),
    "fanout": (diff.fanout_scenario, fanout_graph),
    "failed-branch": (diff.flaky_scenario, flaky_graph),
    "time-travel": (diff.time_travel_scenario, linear_graph),
    "delta": (diff.delta_scenario, delta_graph),
    "key-order": (diff.order_scenario, order_graph),
}


@pytest.fixture(params=CACHE_MODES)
def saver(pg_url: str, request: pytest.FixtureRequest) -> Iterator[ColosseumSaver]:
    truncate(pg_url)
    options = cache_options(request.param)
    with ColosseumSaver.from_conn_string(pg_url, on_conflict="raise", **options) as s:
        yield s


@pytest.fixture(params=CACHE_MODES)
async def asaver(pg_url: str, request: pytest.FixtureRequest) -> AsyncIterator[AsyncColosseumSaver]:
    truncate(pg_url)
    options = cache_options(request.param)
    async with AsyncColosseumSaver.from_conn_string(pg_url, on_conflict="raise", **options) as s:
        yield s


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_sync(saver: ColosseumSaver, name: str) -> None:
    scenario, builder = SCENARIOS[name]
    diff.differential_sync(scenario, builder, saver, f"conflict-diff-{name}-sync")


@pytest.mark.parametrize("name", SCENARIOS)
async def test_scenario_async(asaver: AsyncColosseumSaver, name: str) -> None:
    scenario, builder = SCENARIOS[name]
    await diff.differential_async(scenario, builder, asaver, f"conflict-diff-{name}-async")
