"""Real recoveries of a real server: crash recovery, a promoted replica, point-in-time recovery.

Each gives the database a new incarnation, because each empties the UNLOGGED
token table, and so new Redis keys (README, Backup): a head the old server's
workers left in Redis, even one holding turns the recovered server lost, is
not served by a worker started after the recovery, nor by one that lived
through it once it has written or, if it has not, once its incarnation
re-check is due (INCARNATION_RECHECK seconds after the last statement the old
server answered, on the saver's clock, which the tests drive). Each test runs its own PostgreSQL 15
cluster (tests/integration/pg_servers.py) in front of the shared Redis, under
the suite's key prefix, and checks what a user relies on:

* a worker that starts after the recovery, with the thread still hot in Redis
  from before, serves exactly what Postgres now holds (by repr, against a
  saver without Redis), from Redis once it has refilled it;
* the thread's head key changed;
* a worker that lived through the recovery and has not written since serves
  its hits from Redis alone until its re-check is due, and from then on (no
  write needed) serves what Postgres holds;
* a worker that lived through the recovery moves to the new keys at its next
  write, and from then on serves what Postgres holds too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from langgraph_colosseum import ColosseumSaver
from langgraph_colosseum._core.hot import INCARNATION_RECHECK
from tests.integration.pg_servers import (
    PostgresCluster,
    give,
    poll_until,
    private_directory,
    remove,
)
from tests.integration.test_cache import (
    CountingConnection,
    chat_graph,
    say,
    set_recheck_clock,
    thread,
    worker,
)
from tests.integration.test_hot_truth import head_key


@pytest.fixture(scope="module")
def template() -> Iterator[PostgresCluster]:
    """One cluster made and migrated for the module; each test runs a copy of it.

    Its token is removed before it stops: a copy of a cleanly stopped cluster
    keeps its incarnation (README, Backup), and the tests, which share one
    Redis and its key prefix, must each have their own.
    """
    directory = private_directory("colosseum-recovery-template-")
    cluster = PostgresCluster.create(directory).start()
    with ColosseumSaver.from_conn_string(cluster.url(), pool_size=1) as saver:
        saver.setup()
    cluster.query("TRUNCATE colosseum_incarnation")
    cluster.stop()
    yield cluster
    remove(directory, cluster)


@pytest.fixture
def place() -> Iterator[tuple[Path, list[PostgresCluster]]]:
    """A directory for a test's clusters, and the list it registers them in:
    whatever still runs at the end is stopped, and the files go."""
    directory = private_directory("colosseum-recovery-")
    clusters: list[PostgresCluster] = []
    yield directory, clusters
    remove(directory, *clusters)


def new_cluster(
    template: PostgresCluster, place: tuple[Path, list[PostgresCluster]], **settings: str
) -> PostgresCluster:
    """A running copy of the template, with `settings`, and its own incarnation token."""
    directory, clusters = place
    cluster = template.copy(directory / "primary")
    cluster.configure(**settings)
    clusters.append(cluster.start())
    with ColosseumSaver.from_conn_string(cluster.url(), pool_size=1) as saver:
        saver.setup()  # nothing to migrate: it makes the token
    assert tokens(cluster) == 1
    return cluster


def tokens(cluster: PostgresCluster) -> int:
    return cluster.query("SELECT count(*) FROM colosseum_incarnation")[0][0]


def turns(saver: ColosseumSaver, thread_id: str = "t1") -> int:
    return chat_graph(saver).get_state(thread(thread_id)).values["turns"]


def hot_turns(saver: ColosseumSaver, thread_id: str = "t1") -> int:
    """The thread's turns, served by the saver's Redis head (no statement sent)."""
    turns(saver, thread_id)  # refills the head if it missed
    sent = CountingConnection.round_trips
    count = turns(saver, thread_id)
    assert CountingConnection.round_trips == sent, "served by the Redis head"
    return count


def serves_what_postgres_holds(saver: ColosseumSaver, truth: ColosseumSaver) -> None:
    """The saver's read of t1 is Postgres's, by repr: on its first read (which may
    miss) and on the next one, served from the Redis head."""
    want = repr(truth.get_tuple(thread("t1")))
    assert repr(saver.get_tuple(thread("t1"))) == want
    sent = CountingConnection.round_trips
    assert repr(saver.get_tuple(thread("t1"))) == want
    assert CountingConnection.round_trips == sent, "served by the Redis head"


def check_recovered(
    url: str,
    live: ColosseumSaver,
    old_key: str,
    shared_client: redis.Redis,
    *,
    kept: int,
    live_writes_first: bool = False,
    doomed: str | None = None,
) -> None:
    """After a recovery that kept `kept` turns of t1 (the head at `old_key` may
    hold more): the invariants of the module docstring. `live_writes_first`:
    the worker that lived through it writes before any other worker comes,
    so its write statement finds the token gone and it makes the new one;
    else it reads first, and its re-check makes the token. The live worker's
    clock stood at 0 for every statement it sent to the old server. `doomed`:
    a thread the recovered server holds, which the live worker deletes within
    the bound's window."""
    assert shared_client.exists(old_key), "the old head is still in Redis"
    with (
        ColosseumSaver.from_conn_string(url, pool_size=1) as truth,
        worker(url, shared_client) as restarted,
    ):
        if not live_writes_first:
            # The bound's window: just short of the re-check, a hit of the
            # worker that lived through it makes no Postgres round trip...
            set_recheck_clock(live, INCARNATION_RECHECK - 0.001)
            sent = CountingConnection.round_trips
            turns(live)
            assert CountingConnection.round_trips == sent, "a hit within the bound is Redis-only"
            assert head_key(live, "t1") == old_key
            if doomed is not None:
                # Deleted within the window by the worker that has not moved: its
                # transaction says which incarnation it deleted from, so the head
                # a restarted worker filled from the recovered server goes too.
                assert turns(restarted, doomed) == 1  # its head now in Redis
                live.delete_thread(doomed)
                assert truth.get_tuple(thread(doomed)) is None
                assert restarted.get_tuple(thread(doomed)) is None
            # ...and once it is due, without a write, it serves what Postgres holds.
            set_recheck_clock(live, INCARNATION_RECHECK)
            serves_what_postgres_holds(live, truth)
            assert head_key(live, "t1") != old_key
        # A worker that lived through it moves over at its next write.
        if live_writes_first:
            chat_graph(live).invoke(say("after"), thread("other"))
        assert turns(truth) == kept
        serves_what_postgres_holds(restarted, truth)
        assert head_key(restarted, "t1") != old_key
        assert hot_turns(restarted) == kept
        if not live_writes_first:
            chat_graph(live).invoke(say("after"), thread("other"))
        assert head_key(live, "t1") == head_key(restarted, "t1")
        serves_what_postgres_holds(live, truth)
        # And goes on from what Postgres holds.
        chat_graph(live).invoke(say("next"), thread("t1"))
        assert turns(truth) == kept + 1
        serves_what_postgres_holds(restarted, truth)


def play(saver: ColosseumSaver, *said: str) -> None:
    graph = chat_graph(saver)
    for text in said:
        graph.invoke(say(text), thread("t1"))


def texts(saver: ColosseumSaver) -> list[str]:
    values = chat_graph(saver).get_state(thread("t1")).values
    return [m.content for m in values["messages"]]


# ------------------------------------------------------------ crash recovery


def test_crash_recovery_moves_every_worker_to_new_keys(
    template: PostgresCluster, place: Any, shared_client: redis.Redis
) -> None:
    """`pg_ctl stop -m immediate` (every server process killed, no shutdown
    checkpoint), then a start: crash recovery replays the WAL and empties the
    UNLOGGED token table. It loses no committed turn (synchronous_commit is
    on), so the new keys hold what the old ones did, rebuilt from Postgres."""
    cluster = new_cluster(template, place)
    with worker(cluster.url(), shared_client) as live:
        play(live, "q0", "q1", "q2")
        assert hot_turns(live) == 3
        old_key = head_key(live, "t1")
        cluster.crash_and_restart()
        assert tokens(cluster) == 0, "crash recovery emptied the token table"
        check_recovered(cluster.url(), live, old_key, shared_client, kept=3, live_writes_first=True)


# ------------------------------------------------------------ replica promotion


def test_a_promoted_replica_moves_every_worker_to_new_keys(
    template: PostgresCluster, place: Any, shared_client: redis.Redis
) -> None:
    """A standby made by `pg_basebackup -R` streams the first turns, then falls
    behind (it is stopped while the primary takes two more, which Redis holds);
    the primary dies, the standby starts and is promoted. The workers reach
    whichever server takes writes (a multi-host URL, as a failover setup has)."""
    directory, clusters = place
    primary = new_cluster(template, place)
    standby = primary.base_backup(directory / "standby", "--write-recovery-conf")
    clusters.append(standby.start())
    url = (
        f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} user=postgres "
        "dbname=postgres target_session_attrs=read-write"
    )
    with worker(url, shared_client) as live:
        play(live, "streamed 0", "streamed 1")
        chat_graph(live).invoke(say("doomed"), thread("doomed"))
        (lsn,) = primary.query("SELECT pg_current_wal_lsn()")[0]
        standby.wait_until(
            "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,), "the standby caught up"
        )
        assert standby.query("SELECT pg_is_in_recovery()") == [(True,)]
        standby.stop()
        play(live, "lost 0", "lost 1")
        assert hot_turns(live) == 4
        old_key = head_key(live, "t1")
        primary.stop("immediate")
        standby.start()
        standby.ctl("promote")
        assert standby.query("SELECT pg_is_in_recovery()") == [(False,)]
        assert tokens(standby) == 0, "promotion left the token table empty"
        check_recovered(url, live, old_key, shared_client, kept=2, doomed="doomed")
        assert "lost 0" not in texts(live)


# ------------------------------------------------------------ point-in-time recovery


def test_point_in_time_recovery_moves_every_worker_to_new_keys(
    template: PostgresCluster, place: Any, shared_client: redis.Redis
) -> None:
    """WAL archiving and a base backup; turn A, a restore point, turn B (hot in
    Redis); the server is lost; the base backup is restored in its place and
    recovered from the archive to the restore point: A is there, B is not."""
    directory, clusters = place
    archive = directory / "archive"
    archive.mkdir()
    give(archive)
    primary = new_cluster(
        template,
        place,
        archive_mode="on",
        archive_command=f"test ! -f {archive}/%f && cp %p {archive}/%f",
    )
    base = primary.base_backup(directory / "base")
    with worker(primary.url(), shared_client) as live:
        play(live, "A")
        primary.query("SELECT pg_create_restore_point('before B')")
        play(live, "B")
        assert hot_turns(live) == 2
        old_key = head_key(live, "t1")
        (segment,) = primary.query("SELECT pg_walfile_name(pg_switch_wal())")[0]
        primary.wait_until(
            "SELECT coalesce(last_archived_wal >= %s, false) FROM pg_stat_archiver",
            (segment,),
            "the WAL with both turns archived",
        )
        primary.stop("immediate")
        restored = PostgresCluster(base.data, port=primary.port)  # where the lost one was
        restored.configure(
            restore_command=f"cp {archive}/%f %p",
            recovery_target_name="before B",
            recovery_target_action="promote",
        )
        (restored.data / "recovery.signal").touch()
        give(restored.data)
        clusters.append(restored.start())
        poll_until(
            lambda: restored.query("SELECT pg_is_in_recovery()") == [(False,)],
            "recovered to the restore point and promoted",
            restored.log,
        )
        assert tokens(restored) == 0, "point-in-time recovery emptied the token table"
        check_recovered(restored.url(), live, old_key, shared_client, kept=1)
        assert texts(live)[:2] == ["A", "answer 0"]
        assert "B" not in texts(live)
