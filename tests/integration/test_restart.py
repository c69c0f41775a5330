"""A real Postgres restart between steps, on a private cluster this test starts.

The shared server stays untouched: the test runs its own PostgreSQL 15 on a
loopback port, stops it with `pg_ctl -m immediate` (a crash, for the clients)
and starts it again, then checks that the graph goes on and nothing is lost.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from tests.integration.pg_servers import PostgresCluster, private_directory, remove
from tests.integration.test_drivers import counter_graph, thread


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    directory = private_directory("colosseum-restart-")
    node = PostgresCluster.create(directory).start()
    try:
        with ColosseumSaver.from_conn_string(node.url()) as saver:
            saver.setup()
        yield node
    finally:
        remove(directory, node)


def test_graph_survives_a_server_restart(cluster: PostgresCluster) -> None:
    with ColosseumSaver.from_conn_string(cluster.url(), pool_size=4) as saver:
        graph = counter_graph(saver)
        for turn in range(4):
            graph.invoke({"total": 0, "log": []}, thread("restart"))
            if turn % 2 == 1:
                cluster.crash_and_restart()
        state = graph.get_state(thread("restart"))
        assert state.values == {"total": 4, "log": [f"step{i}" for i in range(4)]}
        history = list(graph.get_state_history(thread("restart")))
        assert len(history) == 12  # input, __start__, inc per turn: no step lost
        for newer, older in itertools.pairwise(history):
            assert (
                newer.parent_config["configurable"]["checkpoint_id"]
                == older.config["configurable"]["checkpoint_id"]
            )


async def test_async_graph_survives_a_server_restart(cluster: PostgresCluster) -> None:
    async with AsyncColosseumSaver.from_conn_string(cluster.url(), pool_size=4) as saver:
        graph = counter_graph(saver)
        for turn in range(4):
            await graph.ainvoke({"total": 0, "log": []}, thread("arestart"))
            if turn % 2 == 1:
                cluster.crash_and_restart()
        state = await graph.aget_state(thread("arestart"))
        assert state.values == {"total": 4, "log": [f"step{i}" for i in range(4)]}
