"""A real Postgres restart between steps, on a private cluster this test starts.

The shared server stays untouched: the test runs its own PostgreSQL 15 on a
loopback port, stops it with `pg_ctl -m immediate` (a crash, for the clients)
and starts it again, then checks that the graph goes on and nothing is lost.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from tests.integration.test_drivers import counter_graph, thread

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(args: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root.
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


class PrivateCluster:
    def __init__(self, root: Path, port: int) -> None:
        self.data = root / "data"
        self.port = port
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def ctl(self, *args: str) -> None:
        subprocess.run(
            _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args]),
            check=True,
            capture_output=True,
        )

    def start(self) -> None:
        self.ctl(
            "-o", f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data}",
            "-l", str(self.data / "log"), "start",
        )  # fmt: skip

    def crash_and_restart(self) -> None:
        self.ctl("-m", "immediate", "stop")
        self.start()


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateCluster]:
    if not (PG_BIN / "initdb").exists():
        pytest.fail(f"PostgreSQL 15 binaries not found in {PG_BIN}")
    root = Path(tempfile.mkdtemp(prefix="colosseum-restart-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    node = PrivateCluster(root, _free_port())
    subprocess.run(
        _as_postgres([str(PG_BIN / "initdb"), "-D", str(node.data), "-U", "postgres",
                      "--auth=trust", "-E", "UTF8"]),
        check=True, capture_output=True,
    )  # fmt: skip
    node.start()
    try:
        with ColosseumSaver.from_conn_string(node.url) as saver:
            saver.setup()
        yield node
    finally:
        try:
            node.ctl("-m", "immediate", "stop")
        finally:
            shutil.rmtree(root, ignore_errors=True)


def test_graph_survives_a_server_restart(cluster: PrivateCluster) -> None:
    with ColosseumSaver.from_conn_string(cluster.url, pool_size=4) as saver:
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


async def test_async_graph_survives_a_server_restart(cluster: PrivateCluster) -> None:
    async with AsyncColosseumSaver.from_conn_string(cluster.url, pool_size=4) as saver:
        graph = counter_graph(saver)
        for turn in range(4):
            await graph.ainvoke({"total": 0, "log": []}, thread("arestart"))
            if turn % 2 == 1:
                cluster.crash_and_restart()
        state = await graph.aget_state(thread("arestart"))
        assert state.values == {"total": 4, "log": [f"step{i}" for i in range(4)]}
