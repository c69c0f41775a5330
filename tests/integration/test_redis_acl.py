"""The hot head's Redis ACL, exactly as the README states it (Security).

A user is granted exactly the README's rules (read from its block, see
`redis_servers.readme_acl`), on a private Redis and on a private 3-master
Cluster, and everything that talks to Redis runs as that user: sync and async
savers (turns, hits, a refill, pending writes, a deletion), sync and async
Stores with hot items (an item with a TTL too), `colosseum cache flush` and
`colosseum doctor`. Then, from the server's side:

* nothing was refused: the ACL log of every node is empty. A refusal the code
  survives (the breaker makes it a miss; a refused `INFO cluster` makes a
  Cluster node pass for a plain server) would otherwise go unseen;
* nothing granted went unused: each command the rules name was sent (the
  servers' command statistics), so the list is no longer than it needs be.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum.cli import app
from langgraph_colosseum.memory import AsyncColosseumStore, ColosseumStore
from tests.conftest import server_url
from tests.integration.redis_servers import (
    RedisCluster,
    RedisServer,
    readme_acl,
    server_binary,
    valkey_binary,
)
from tests.integration.store_support import fresh_database
from tests.integration.test_cache import chat_graph, fanout_graph, say, thread

USER, PASSWORD = "colosseum", "acl-Pa55"


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    with fresh_database(server_url(), prefix="colosseum_acl") as url:
        yield url


def restrict(nodes: list[RedisServer], rules: list[str]) -> str:
    """Create the hot head's user with `rules` on every node (ACLs are per node),
    and start each node's ACL log and command statistics afresh; its URL."""
    for node in nodes:
        with node.client() as admin:  # the default user: every command
            admin.execute_command(
                "ACL", "SETUSER", USER, "reset", "on", f">{PASSWORD}", "~colosseum:*", *rules
            )
            admin.execute_command("ACL", "LOG", "RESET")
            admin.config_resetstat()
    return f"redis://{USER}:{PASSWORD}@127.0.0.1:{nodes[0].port}/0"


def run_everything(database: str, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The paths of the code that send commands to Redis, as the restricted user."""
    with ColosseumStore.from_conn_string(database, redis_url=url) as store:
        store.setup()
        store.put(("prefs",), "ttl", {"x": 1}, ttl=1.0)
        for _ in range(2):  # a miss and its refill (PEXPIREAT), then a hit
            assert store.get(("prefs",), "ttl", refresh_ttl=False).value == {"x": 1}
        store.put(("prefs",), "plain", {"y": 2})
        for _ in range(2):
            assert store.get(("prefs",), "plain").value == {"y": 2}
        store.delete(("prefs",), "plain")
    with ColosseumSaver.from_conn_string(database, redis_url=url) as saver:
        graph = chat_graph(saver)
        for turn in range(3):
            graph.invoke(say(f"q{turn}"), thread("t1"))
        assert graph.get_state(thread("t1")).values["turns"] == 3
        fanout_graph(saver).invoke({"votes": []}, thread("fan"))  # pending writes
        saver.delete_thread("t1")
        assert graph.get_state(thread("t1")).values == {}

    async def run_async() -> None:
        async with AsyncColosseumSaver.from_conn_string(database, redis_url=url) as saver:
            graph = chat_graph(saver)
            for turn in range(2):
                await graph.ainvoke(say(f"q{turn}"), thread("t2"))
            assert (await graph.aget_state(thread("t2"))).values["turns"] == 2
            await saver.adelete_thread("t2")
        async with AsyncColosseumStore.from_conn_string(database, redis_url=url) as store:
            await store.aput(("prefs",), "async", {"z": 3}, ttl=1.0)
            for _ in range(2):
                item = await store.aget(("prefs",), "async", refresh_ttl=False)
                assert item.value == {"z": 3}

    asyncio.run(run_async())
    monkeypatch.setenv("COLOSSEUM_DATABASE_URL", database)
    monkeypatch.setenv("COLOSSEUM_REDIS_URL", url)
    flushed = CliRunner().invoke(app, ["cache", "flush"])
    assert flushed.exit_code == 0, flushed.output
    doctor = CliRunner().invoke(app, ["doctor", "--json"])
    assert doctor.exit_code == 0, doctor.output
    assert '"redis_ping": true' in doctor.output


def refused(nodes: list[RedisServer]) -> list[str]:
    """What the nodes' ACL logs recorded as refused: command (or key) and user."""
    entries = []
    for node in nodes:
        with node.client() as admin:
            for entry in admin.acl_log():
                entries.append(f"{entry['reason']} {entry['object']} ({entry['username']})")
    return entries


def sent(nodes: list[RedisServer]) -> set[str]:
    """The commands the nodes ran since their statistics were reset, as ACL
    rules spell them (`script|load`), scripts' own calls included."""
    commands: set[str] = set()
    for node in nodes:
        with node.client() as admin:
            stats = admin.info("commandstats")
        commands |= {name.removeprefix("cmdstat_") for name, s in stats.items() if s["calls"]}
    return commands


def check_exact(nodes: list[RedisServer], rules: list[str]) -> None:
    assert refused(nodes) == [], "the README's ACL lacks what the code sends"
    named = [rule[1:] for rule in rules if rule.startswith("+") and not rule.startswith("+@")]
    assert [c for c in named if c not in sent(nodes)] == [], "granted but never sent"


# Debian's Redis 7.0 and the Valkey the embedded default runs: a newer server
# knows commands 7.0 lacks, which a client library may send on its own
# (redis-py's CLIENT SETINFO on each connection, from Redis 7.2 on).
SERVERS = {"redis": server_binary, "valkey": valkey_binary}


@pytest.fixture(params=sorted(SERVERS))
def binary(request: pytest.FixtureRequest) -> str:
    return SERVERS[request.param]()


@pytest.fixture
def one_server(binary: str) -> Iterator[RedisServer]:
    server = RedisServer(binary=binary).start()
    yield server
    server.stop()


@pytest.fixture
def cluster(binary: str) -> Iterator[RedisCluster]:
    servers = RedisCluster(binary=binary).start()
    yield servers
    servers.stop()


def test_the_readme_acl_is_exact_on_one_server(
    database: str, one_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = readme_acl(cluster=False)
    url = restrict([one_server], rules)
    run_everything(database, url, monkeypatch)
    check_exact([one_server], rules)


def test_the_readme_acl_is_exact_on_a_cluster(
    database: str, cluster: RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = readme_acl(cluster=True)
    url = restrict(cluster.nodes, rules)
    run_everything(database, url, monkeypatch)
    check_exact(cluster.nodes, rules)  # CLUSTER SLOTS and COMMAND: a Cluster client
