"""The mutation check of the concurrency guards: `python -m tests.guards`.

A guard is a clause that only matters when workers interleave in one order
(the lease condition of a tool claim, the compare in a Lua script, ...). The
suite can pass for months with a guard deleted. This script deletes each guard
in turn, in a temporary copy of the tree, runs the tests that claim to hold it,
and reports which mutants those tests killed. A survivor means the guard has
no test: the script exits non-zero.

Each entry of GUARDS names the file, the exact text of the clause, the text
that replaces it (the guard removed), and the pytest node ids that must fail.
The text must occur exactly once in its file: an entry whose text was edited
away is reported as an error, so the table cannot rot silently.

Usage (from the repository root, with the dev extra installed):

    python -m tests.guards                 # every guard
    python -m tests.guards --check         # only that every entry's text is found once
    python -m tests.guards -k ledger       # the guards whose name contains "ledger"
    python -m tests.guards --timeout 300   # seconds per mutant's test run

The tests run against the same Postgres / Redis as the suite (see tests/conftest.py).
Adding a guard: append a `Guard`; run `python -m tests.guards -k <its name>`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUARD_TESTS = "tests/integration/test_guards.py"
HOT_TRUTH = "tests/integration/test_hot_truth.py"
RECOVERY = "tests/integration/test_recovery.py"
STORE_HOT = "tests/integration/test_store_hot.py"
RUNS = "tests/integration/test_runs.py"
RUNS_STOPPED = "tests/integration/test_runs_stopped.py"
RUNS_QUEUE = "tests/integration/test_runs_queue.py"
DELETED = "tests/integration/test_deleted_stays_deleted.py"
ENCRYPTION_TESTS = "tests/integration/test_encryption_everywhere.py"
STATE_VERSIONS = "tests/integration/test_state_versions.py"
STATE_VERSIONS_REVIEW = "tests/integration/test_state_versions_review.py"
ON_CONFLICT = "tests/integration/test_on_conflict.py"
ON_CONFLICT_SUBGRAPHS = "tests/integration/test_on_conflict_subgraphs.py"
ON_CONFLICT_IN_FLIGHT = "tests/integration/test_on_conflict_in_flight.py"
ON_CONFLICT_ROOT_STEP = "tests/integration/test_on_conflict_root_step.py"
LEDGER_LIFE = "tests/integration/test_ledger_lifecycle.py"
LEDGER_ROLLBACK = "tests/integration/test_ledger_rollback.py"
LATE_HEADS = "tests/integration/test_late_heads.py"
LOST_REPLIES = "tests/integration/test_lost_replies.py"
RETENTION = "tests/integration/test_retention.py"
RUNS_LOCK_ORDER = "tests/integration/test_runs_lock_order.py"
READ_MEMO = "tests/integration/test_read_memo.py"
LIST_AHEAD = "tests/integration/test_list_ahead.py"
SHARED_COMMIT = "tests/integration/test_shared_commit.py"
COPY_RACES = "tests/integration/test_copy_races.py"
LAPSED_PAGES = (
    "tests/integration/test_threads.py"
    "::test_search_and_count_read_each_row_as_its_lease_says_on_every_page[postgres]"
)
KEEPS = f"{RUNS_STOPPED}::test_a_rollback_keeps_a_key_someone_else_set_after_the_run_did"


@dataclass(frozen=True)
class Guard:
    name: str
    file: str  # relative to the repository root
    original: str  # the guard clause, exactly as in the file (found exactly once)
    mutant: str  # what replaces it: the same code without the guard
    tests: tuple[str, ...]  # pytest node ids; at least one must fail on the mutant


GUARDS: list[Guard] = [
    Guard(
        name="tool ledger: a claim carries the deletion stamp its run's first read saw",
        file="langgraph_colosseum/tools.py",
        original="seen=seen_of(run, thread_id),",
        mutant="seen=seen_of(None, thread_id),",
        tests=(
            f"{LEDGER_LIFE}::test_an_exit_run_whose_thread_is_deleted_mid_run_does_not_pay",
            f"{LEDGER_LIFE}::test_a_run_deleted_before_any_of_its_puts_landed_leaves_no_ledger",
        ),
    ),
    Guard(
        name="deleted stays deleted: a run's read from Postgres records the deletion stamp it saw",
        file="langgraph_colosseum/_core/store.py",
        original="        if run is not None:\n            run.note_seen(thread_id, deleted)\n",
        mutant="        if False:\n            run.note_seen(thread_id, deleted)\n",
        tests=(
            f"{DELETED}::test_with_postgres_clock_ahead_a_run_begun_after_a_deletion_is_stored",
            f"{DELETED}::test_with_postgres_clock_ahead_a_run_begun_after_a_deletion_is_stored_async",
        ),
    ),
    Guard(
        name="deleted stays deleted: a run's Redis hit records the deletion stamp it saw",
        file="langgraph_colosseum/_core/store.py",
        original="                if run is not None:\n                    run.note_seen(thread_id, deleted)\n",
        mutant="                if False:\n                    run.note_seen(thread_id, deleted)\n",
        tests=(
            f"{DELETED}::test_with_postgres_clock_ahead_a_run_begun_after_a_deletion_is_stored[redis-exit]",
            f"{DELETED}::test_with_postgres_clock_ahead_a_run_begun_after_a_deletion_is_stored_async[redis]",
        ),
    ),
    Guard(
        name="deleted stays deleted: a read returns the deletion stamp from its own snapshot",
        file="langgraph_colosseum/_core/sql.py",
        original="SELECT {first}{THREAD_DELETED} AS deleted, found.*",
        mutant="SELECT {first}NULL AS deleted, found.*",
        tests=(
            f"{DELETED}::test_with_postgres_clock_ahead_a_run_begun_after_a_deletion_is_stored",
            f"{DELETED}::test_a_head_refilled_without_a_deletion_stamp_is_read_from_postgres",
        ),
    ),
    Guard(
        name="hot head: a refill records the thread's deletion stamp",
        file="langgraph_colosseum/_core/hot.py",
        original="redis.call('HSET', key, 'deleted', ARGV[5])\n",
        mutant="\n",
        tests=(f"{DELETED}::test_a_head_refilled_without_a_deletion_stamp_is_read_from_postgres",),
    ),
    Guard(
        name="hot head: a head without a deletion stamp is a miss, and refilled",
        file="langgraph_colosseum/_core/hot.py",
        original="if not deleted then return {seq} end\n",
        mutant="\n",
        tests=(f"{DELETED}::test_a_head_refilled_without_a_deletion_stamp_is_read_from_postgres",),
    ),
    Guard(
        name="deleted stays deleted: a deletion's stamp is past the thread's last one",
        file="langgraph_colosseum/_core/sql.py",
        original="SET before = CASE WHEN EXCLUDED.before > g.before THEN EXCLUDED.before\n",
        mutant="SET before = CASE WHEN true THEN EXCLUDED.before\n",
        tests=(f"{DELETED}::test_each_deletion_of_a_thread_id_writes_a_stamp_past_its_last",),
    ),
    Guard(
        name="hot head: an older advance never replaces a newer head",
        file="langgraph_colosseum/_core/hot.py",
        original="if id < current then bump() return 0 end  -- a slower worker: the head is already newer",
        mutant="-- (guard removed)",
        tests=(
            f"{GUARD_TESTS}::test_an_older_advance_never_replaces_a_newer_head",
            f"{GUARD_TESTS}::test_an_older_advance_never_replaces_a_newer_head_async",
        ),
    ),
    Guard(
        name="hot head: a refill compares the mutation counter",
        file="langgraph_colosseum/_core/hot.py",
        original="if redis.call('HGET', key, 'seq') ~= ARGV[3] then return 0 end",
        mutant="-- (guard removed)",
        tests=(
            f"{GUARD_TESTS}::test_a_refill_loses_to_a_write_in_between",
            f"{GUARD_TESTS}::test_a_refill_loses_to_a_write_in_between_on_a_hash_of_the_writes_epoch",
        ),
    ),
    Guard(
        name="hot head: every write bumps the mutation counter",
        file="langgraph_colosseum/_core/hot.py",
        original="redis.call('HINCRBY', key, 'seq', 1)",
        mutant="-- (guard removed)",
        tests=(
            f"{GUARD_TESTS}::test_a_refill_loses_to_a_write_in_between_on_a_hash_of_the_writes_epoch",
        ),
    ),
    Guard(
        name="hot head: a read misses while the head awaits writes committed before its put",
        file="langgraph_colosseum/_core/hot.py",
        original="if not id or redis.call('HEXISTS', key, P .. 'x') == 1 then return {seq} end",
        mutant="if not id then return {seq} end",
        tests=(
            f"{GUARD_TESTS}::test_a_head_is_not_served_until_writes_committed_before_its_put_arrive",
        ),
    ),
    Guard(
        name="hot head: an advance awaits the writes Postgres had before the put",
        file="langgraph_colosseum/_core/hot.py",
        original="await_slots(awaited)\ndelete_fields(doomed)",
        mutant="delete_fields(doomed)",
        tests=(
            f"{GUARD_TESTS}::test_a_head_is_not_served_until_writes_committed_before_its_put_arrive",
        ),
    ),
    Guard(
        name="hot head: the same checkpoint put again drops the head",
        file="langgraph_colosseum/_core/hot.py",
        original="if id == current then return drop() end",
        mutant="",
        tests=(f"{GUARD_TESTS}::test_the_same_checkpoint_put_again_does_not_rewrite_the_head",),
    ),
    Guard(
        name="tool ledger: a claim is taken over only once its lease lapsed",
        file="langgraph_colosseum/_core/ledger.py",
        original="WHERE (t.status IN ('RUNNING', 'TIMED_OUT', 'PENDING') AND t.lease_until < now()",
        mutant="WHERE (t.status IN ('RUNNING', 'TIMED_OUT', 'PENDING')",
        tests=(f"{GUARD_TESTS}::test_a_live_claim_is_not_taken_over_by_a_retrying_resumer",),
    ),
    Guard(
        name="tool ledger: a claim with a live lease is waited for, not judged unknown",
        file="langgraph_colosseum/_core/ledger.py",
        original="       lease_until > now(), attempts\nFROM colosseum_tool_calls",
        mutant="       false, attempts\nFROM colosseum_tool_calls",
        tests=(
            f"{GUARD_TESTS}::test_a_live_claim_is_not_taken_over_by_a_retrying_resumer",
            "tests/integration/test_tool_faults.py::test_race_resume_sync",
        ),
    ),
    Guard(
        name="tool ledger: only the claim's owner records the outcome",
        file="langgraph_colosseum/_core/ledger.py",
        original=(
            "WHERE idempotency_key = %(key)s AND lease_owner = %(owner)s AND status = 'RUNNING'"
            "\nRETURNING 1"
        ),
        mutant="WHERE idempotency_key = %(key)s AND status = 'RUNNING'\nRETURNING 1",
        tests=(
            f"{GUARD_TESTS}::test_a_worker_whose_claim_was_taken_over_does_not_record_its_outcome",
        ),
    ),
    Guard(
        name="run guard: acquire only a free thread or a lapsed lease",
        file="langgraph_colosseum/_core/threads.py",
        original="WHERE t.run_owner IS NULL OR t.run_lease_until < statement_timestamp()",
        mutant="WHERE true",
        tests=(f"{GUARD_TESTS}::test_a_stale_guard_holder_does_not_release_its_successor",),
    ),
    Guard(
        name="run guard: release only by its owner",
        file="langgraph_colosseum/_core/threads.py",
        original="status = {_HEAD_STATUS}\nWHERE thread_id = %(thread_id)s AND run_owner = %(owner)s",
        mutant="status = {_HEAD_STATUS}\nWHERE thread_id = %(thread_id)s",
        tests=(f"{GUARD_TESTS}::test_a_stale_guard_holder_does_not_release_its_successor",),
    ),
    Guard(
        name="sweep: a thread's rows are deleted only if it is still expired",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "\n            AND thread_id IN (SELECT thread_id FROM colosseum_threads "
            "WHERE expires_at < now())"
        ),
        mutant="",
        tests=(f"{GUARD_TESTS}::test_the_sweep_spares_a_thread_written_after_it_was_chosen",),
    ),
    Guard(
        name="sweep: a thread's registry row is deleted only if it is still expired",
        file="langgraph_colosseum/_core/sql.py",
        original='"AND expires_at < now()",',
        mutant='"",',
        tests=(f"{GUARD_TESTS}::test_the_sweep_spares_a_thread_written_after_it_was_chosen",),
    ),
    Guard(
        name="sweep: a keep_latest prune removes checkpoints only of threads still expired",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            " WHERE NOT %(only_expired)s::boolean OR u.thread_id IN (\n"
            "     SELECT thread_id FROM colosseum_threads WHERE expires_at < now())) AS k"
        ),
        mutant=" WHERE %(only_expired)s::boolean IS NOT NULL) AS k",
        tests=(
            f"{GUARD_TESTS}"
            "::test_the_sweep_spares_a_thread_written_after_it_was_chosen[keep_latest]",
        ),
    ),
    Guard(
        name="sweep: a keep_latest sweep asks its prune for the threads still expired",
        file="langgraph_colosseum/_core/threads.py",
        original='thread_ids, "keep_latest", retention.keep_last or 1, only_expired=True',
        mutant='thread_ids, "keep_latest", retention.keep_last or 1, only_expired=False',
        tests=(
            f"{GUARD_TESTS}"
            "::test_the_sweep_spares_a_thread_written_after_it_was_chosen[keep_latest]",
        ),
    ),
    Guard(
        name="sweep: the thread row is locked before a keep_latest prune",
        file="langgraph_colosseum/_core/store.py",
        original=(
            "            queries.append(Query(sql.LOCK_STILL_EXPIRED, "
            '{"thread_ids": thread_list}, fetch=False))\n'
        ),
        mutant="            pass\n",
        tests=(
            f"{GUARD_TESTS}::test_the_sweep_locks_the_thread_before_deleting_its_rows[keep_latest]",
        ),
    ),
    Guard(
        name="sweep: a keep_latest sweep clears the expiry only of threads still expired",
        file="langgraph_colosseum/_core/threads.py",
        original=(
            "UPDATE colosseum_threads SET expires_at = NULL\n"
            "WHERE thread_id = ANY(%(thread_ids)b::text[]) AND expires_at < now()\n"
        ),
        mutant=(
            "UPDATE colosseum_threads SET expires_at = NULL\n"
            "WHERE thread_id = ANY(%(thread_ids)b::text[])\n"
        ),
        tests=(
            f"{GUARD_TESTS}"
            "::test_the_sweep_spares_a_thread_written_after_it_was_chosen[keep_latest]",
        ),
    ),
    Guard(
        name="sweep: the thread row is locked before its rows are deleted",
        file="langgraph_colosseum/_core/sql.py",
        original="AND expires_at < now()\nFOR UPDATE",
        mutant="AND expires_at < now()",
        tests=(f"{GUARD_TESTS}::test_the_sweep_locks_the_thread_before_deleting_its_rows",),
    ),
    Guard(
        name="sweep: deletes with the expiry re-check, not plain deletes",
        file="langgraph_colosseum/_core/store.py",
        original="deletes = sql.DELETE_EXPIRED_THREADS if only_expired else sql.DELETE_THREADS",
        mutant="deletes = sql.DELETE_THREADS",
        tests=(f"{GUARD_TESTS}::test_the_sweep_spares_a_thread_written_after_it_was_chosen",),
    ),
    Guard(
        name="pending writes: sorted as writes_sort_key",
        file="langgraph_colosseum/_core/store.py",
        original="pending.sort(key=lambda p: p[0])",
        mutant="pass",
        tests=(f"{GUARD_TESTS}::test_pending_writes_come_back_in_the_order_inmemorysaver_gives",),
    ),
    Guard(
        name="pending writes: idx is the write's place in its put_writes call",
        file="langgraph_colosseum/_core/store.py",
        original="WRITES_IDX_MAP.get(channel, i): (channel, value)",
        mutant="WRITES_IDX_MAP.get(channel, len(writes) - 1 - i): (channel, value)",
        tests=(f"{GUARD_TESTS}::test_pending_writes_come_back_in_the_order_inmemorysaver_gives",),
    ),
    Guard(
        name="pool: a connection idle past check_idle_after is tested before it is lent",
        file="langgraph_colosseum/_pool.py",
        original="            ConnectionPool.check_connection(conn)",
        mutant="            pass",
        tests=(
            "tests/integration/test_pool.py"
            "::test_idle_connections_killed_cost_no_failed_operation_sync[on]",
        ),
    ),
    Guard(
        name="async pool: a connection idle past check_idle_after is tested before it is lent",
        file="langgraph_colosseum/_pool.py",
        original="            await AsyncConnectionPool.check_connection(conn)",
        mutant="            pass",
        tests=(
            "tests/integration/test_pool.py"
            "::test_idle_connections_killed_cost_no_failed_operation_async[on]",
        ),
    ),
    Guard(
        name="drivers: a Transaction's statements are one transaction (blocking driver)",
        file="langgraph_colosseum/_driver.py",
        original=(
            "        with conn.pipeline():\n"
            "            cursors = [conn.execute(q.sql, q.params, prepare=q.prepare) "
            "for q in request.queries]"
        ),
        mutant=(
            "        with conn.pipeline() as pipe:\n"
            "            cursors = []\n"
            "            for q in request.queries:\n"
            "                cursors.append(conn.execute(q.sql, q.params, prepare=q.prepare))\n"
            "                pipe.sync()"
        ),
        tests=("tests/integration/test_drivers.py::test_a_transaction_is_one_transaction",),
    ),
    Guard(
        name="drivers: a Transaction's statements are one transaction (asyncio driver)",
        file="langgraph_colosseum/_driver.py",
        original=(
            "        async with conn.pipeline():\n"
            "            cursors = [\n"
            "                await conn.execute(q.sql, q.params, prepare=q.prepare) "
            "for q in request.queries\n"
            "            ]"
        ),
        mutant=(
            "        async with conn.pipeline() as pipe:\n"
            "            cursors = []\n"
            "            for q in request.queries:\n"
            "                cursors.append(await conn.execute(q.sql, q.params, prepare=q.prepare))\n"
            "                await pipe.sync()"
        ),
        tests=("tests/integration/test_drivers.py::test_a_transaction_is_one_transaction",),
    ),
    Guard(
        name="drivers: the lean path sends a request's statements before one Sync",
        file="langgraph_colosseum/_driver.py",
        original=(
            "                pgconn.send_query_prepared(step[1], step[3], step[5])\n"
            "        pgconn.pipeline_sync()"
        ),
        mutant=(
            "                pgconn.send_query_prepared(step[1], step[3], step[5])\n"
            "            pgconn.pipeline_sync()"
        ),
        tests=("tests/integration/test_drivers.py::test_a_transaction_is_one_transaction[lean]",),
    ),
    Guard(
        name="hot head: a write statement's incarnation moves the saver to its keys",
        file="langgraph_colosseum/_core/store.py",
        original="        yield from self._learn_incarnation(incarnation, asked_at)\n",
        mutant="        yield from ()\n",
        tests=(f"{RECOVERY}::test_crash_recovery_moves_every_worker_to_new_keys",),
    ),
    Guard(
        name="hot head: a hit asks for the incarnation again once the bound has passed",
        file="langgraph_colosseum/_core/hot.py",
        original="self.clock() - self.proven_at >= INCARNATION_RECHECK",
        mutant="False",
        tests=(
            f"{RECOVERY}::test_a_promoted_replica_moves_every_worker_to_new_keys",
            f"{RECOVERY}::test_point_in_time_recovery_moves_every_worker_to_new_keys",
        ),
    ),
    Guard(
        name="hot head: a deletion drops the heads of the incarnation its transaction saw",
        file="langgraph_colosseum/_core/store.py",
        original="yield from self._learn_incarnation(committed[-1][0][0], asked_at)",
        mutant="yield from self.bound_incarnation()",
        tests=(f"{RECOVERY}::test_a_promoted_replica_moves_every_worker_to_new_keys",),
    ),
    Guard(
        name="hot head: a hit within the bound makes no Postgres round trip",
        file="langgraph_colosseum/_core/hot.py",
        original="self.clock() - self.proven_at >= INCARNATION_RECHECK",
        mutant="True",
        tests=(f"{RECOVERY}::test_a_promoted_replica_moves_every_worker_to_new_keys",),
    ),
    Guard(
        name="hot head: a head a write could not update is recorded stale in Postgres",
        file="langgraph_colosseum/_core/store.py",
        original="yield from self._record_stale([thread_id], (call.key,))",
        mutant="pass",
        tests=(f"{HOT_TRUTH}::test_any_live_worker_drops_the_heads_writes_left_behind",),
    ),
    Guard(
        name="hot head: a write drops the recorded stale heads",
        file="langgraph_colosseum/_core/store.py",
        original="        elif stale:\n            yield from self._drop_stale(stale)",
        mutant="",
        tests=(f"{HOT_TRUTH}::test_any_live_worker_drops_the_heads_writes_left_behind",),
    ),
    Guard(
        name="hot head: a closing saver drops the recorded stale heads",
        file="langgraph_colosseum/saver.py",
        original="                    saver.drop_stale_heads()",
        mutant="                    pass",
        tests=(f"{HOT_TRUTH}::test_the_writer_drops_what_redis_refused_before_it_exits",),
    ),
    Guard(
        name="hot head: a read walking a chain stops at a version it passed",
        file="langgraph_colosseum/_core/hot.py",
        original="if seen[version] then return nil end",
        mutant="-- (guard removed)",
        tests=(f"{HOT_TRUTH}::test_a_cyclic_delta_chain_is_a_prompt_miss_and_redis_stays_up",),
    ),
    Guard(
        name="hot head: a payload whose MAC does not match is corrupt",
        file="langgraph_colosseum/_core/hot.py",
        original="if not hmac.compare_digest(sealed[:MAC_BYTES], self._mac(payload, *place)):",
        mutant="if False:",
        tests=(f"{HOT_TRUTH}::test_a_tampered_head_is_a_logged_miss",),
    ),
    Guard(
        name="deleted stays deleted: a write naming a deleted checkpoint is refused",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "    SELECT d.checkpoint_id FROM colosseum_tombstones d\n"
            "    WHERE d.thread_id = %(thread_id)s AND d.checkpoint_ns"
        ),
        mutant="    SELECT d.checkpoint_id FROM colosseum_tombstones d\n    WHERE false AND d.checkpoint_ns",
        tests=(
            "tests/integration/test_deleted_stays_deleted.py"
            "::test_late_writes_to_a_deleted_checkpoint_are_refused[postgres]",
        ),
    ),
    Guard(
        name="deleted stays deleted: a run's write on a thread deleted since its first read is refused",
        file="langgraph_colosseum/_core/sql.py",
        original="WHERE g.thread_id = %(thread_id)s AND g.before <> %(seen)s::text",
        mutant="WHERE false",
        tests=(
            "tests/integration/test_deleted_stays_deleted.py"
            "::test_a_checkpoint_made_before_the_delete_is_refused[postgres]",
        ),
    ),
    Guard(
        name="deleted stays deleted: a stamp the run saw is no pass for a later deletion",
        file="langgraph_colosseum/_core/sql.py",
        original="WHERE g.thread_id = %(thread_id)s AND g.before <> %(seen)s::text",
        mutant="WHERE g.thread_id = %(thread_id)s AND %(seen)s::text = ''",
        tests=(
            f"{DELETED}::test_each_deletion_of_a_thread_id_writes_a_stamp_past_its_last",
            f"{DELETED}::test_with_the_host_clock_ahead_a_run_that_read_before_the_deletion_is_refused[postgres-reused]",
        ),
    ),
    Guard(
        name="deleted stays deleted: a put of a deleted run is refused",
        file="langgraph_colosseum/_core/sql.py",
        original="    WHERE r.run_id = %(run_id)s::text",
        mutant="    WHERE false",
        tests=(
            "tests/integration/test_deleted_stays_deleted.py"
            "::test_a_put_of_a_deleted_run_is_refused[postgres]",
        ),
    ),
    Guard(
        name="run guard: a guarded write needs this guard's owner and token (lease lost)",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "       OR (%(run_owner)s::text IS NOT NULL\n"
            "           AND (run_owner IS DISTINCT FROM %(run_owner)s::text\n"
            "                OR run_token IS DISTINCT FROM %(run_token)s::bigint))"
        ),
        mutant="",
        tests=(
            "tests/integration/test_fencing.py"
            "::test_stale_holder_loses_its_lease_to_a_released_successor[postgres-sync]",
        ),
    ),
    Guard(
        name="thread status: 'busy' only while the guard's lease is live",
        file="langgraph_colosseum/_core/sql.py",
        original="            WHEN t.status = 'busy' AND t.run_lease_until > statement_timestamp() THEN 'busy'\n",
        mutant="            WHEN t.status = 'busy' THEN 'busy'\n",
        tests=(
            "tests/integration/test_fencing.py::test_status_follows_runs_after_a_dead_holder[postgres]",
        ),
    ),
    Guard(
        name="store hot items: a refill compares the mutation counter",
        file="langgraph_colosseum/_core/hot_items.py",
        original="if redis.call('HGET', key, 'seq') ~= ARGV[1] then return 0 end",
        mutant="-- (guard removed)",
        tests=(
            f"{STORE_HOT}::test_a_write_from_another_process_between_a_miss_and_its_refill_wins",
        ),
    ),
    Guard(
        name="store hot items: every write drops the copies of the items it wrote",
        file="langgraph_colosseum/_core/memory.py",
        original=(
            "yield from self.heads.after_commit(\n"
            "                incarnation, stale, lambda: hot.keys(written), asked_at\n"
            "            )"
        ),
        mutant="pass",
        tests=(f"{STORE_HOT}::test_a_hot_item_written_by_another_process_is_read_fresh",),
    ),
    Guard(
        name="store hot items: a drop Redis refused is recorded for any writer to apply",
        file="langgraph_colosseum/_core/store.py",
        original="yield from self._record_stale(keys, keys)",
        mutant="pass",
        tests=(
            f"{STORE_HOT}::test_a_drop_redis_refused_is_recorded_and_applied_by_the_next_write",
        ),
    ),
    Guard(
        name="store hot items: a copy of a TTL item ends no later than the item",
        file="langgraph_colosseum/_core/hot_items.py",
        original="life = min(life, int(remaining_ms))",
        mutant="life = life",
        tests=(f"{STORE_HOT}::test_a_ttl_item_lives_in_redis_no_longer_than_in_postgres",),
    ),
    Guard(
        name="store hot items: a get that refreshes a TTL item goes to Postgres",
        file="langgraph_colosseum/_core/memory.py",
        original="if seen.hit and not (seen.has_ttl and op.refresh_ttl):",
        mutant="if seen.hit:",
        tests=(f"{STORE_HOT}::test_a_ttl_item_lives_in_redis_no_longer_than_in_postgres",),
    ),
    Guard(
        name="runs: a refused put of a deleted run keeps the registry row a run holds",
        file="langgraph_colosseum/_core/sql.py",
        original="      AND t.head_checkpoint_id IS NULL AND t.run_owner IS NULL\n",
        mutant="      AND t.head_checkpoint_id IS NULL\n",
        tests=(f"{RUNS}::test_a_refused_put_of_a_deleted_run_leaves_the_holders_row",),
    ),
    Guard(
        name="runs: reject / enqueue take the thread only when no live run holds it",
        file="langgraph_colosseum/_core/multitask.py",
        original="OR ((run_owner IS NULL OR run_lease_until IS NULL OR run_lease_until < now())",
        mutant="OR ((true)",
        tests=(f"{RUNS}::test_reject_the_second_run_never_writes[postgres]",),
    ),
    Guard(
        name="runs: a queued run waits behind a live run that arrived before it",
        file="langgraph_colosseum/_core/multitask.py",
        original="AND NOT EXISTS (SELECT 1 FROM ahead)",
        mutant="AND true",
        tests=(f"{RUNS}::test_a_queued_run_waits_behind_an_earlier_live_one",),
    ),
    Guard(
        name="runs: a run stopped by another never ends as a success",
        file="langgraph_colosseum/_core/multitask.py",
        original="AND (r.status = 'running'",
        mutant="AND (true",
        tests=(f"{RUNS}::test_a_stopped_run_never_ends_as_success",),
    ),
    Guard(
        name="runs: a queued run cancelled while it waits never takes the thread",
        file="langgraph_colosseum/_core/multitask.py",
        original="WHERE coalesce((SELECT status FROM me), 'pending') = 'pending'",
        mutant="WHERE true",
        tests=(f"{RUNS_STOPPED}::test_a_cancelled_waiter_never_runs",),
    ),
    Guard(
        name="runs: the caller of a run stopped by rollback is told so before the rollback is done",
        file="langgraph_colosseum/_core/multitask.py",
        original="SELECT CASE WHEN {_ROLLBACK_DUE} THEN 'rolled_back' ELSE r.status END AS status,",
        mutant="SELECT r.status AS status,",
        tests=(
            f"{RUNS_STOPPED}::test_the_stopped_runs_caller_is_told_what_stopped_it_whenever_it_is_refused",
        ),
    ),
    Guard(
        name="runs: interrupt / rollback stop the last holder even when older code settled it first",
        file="langgraph_colosseum/_core/multitask.py",
        original=(
            "           OR (%(steal)s AND r.token = thread.run_token\n"
            "               AND r.status = 'error' AND r.stopped_by = 'lease'))"
        ),
        mutant="           OR false)",
        tests=(
            f"{RUNS_STOPPED}::test_a_lapsed_run_overtaken_is_stopped_as_a_live_one_whoever_looked_first",
        ),
    ),
    Guard(
        name="runs: interrupt / rollback record a holder past its lease as stopped, as it is told",
        file="langgraph_colosseum/_core/multitask.py",
        original=(
            "    SET status = CASE WHEN %(steal)s OR thread.run_lease_until > now() THEN 'interrupted'"
        ),
        mutant="    SET status = CASE WHEN thread.run_lease_until > now() THEN 'interrupted'",
        tests=(
            f"{RUNS_STOPPED}::test_a_lapsed_run_overtaken_is_stopped_as_a_live_one_whoever_looked_first"
            "[interrupt-RunInterruptedError-unread]",
        ),
    ),
    Guard(
        name="runs: a run past its lease reads as error to every reader (nobody settles it)",
        file="langgraph_colosseum/_core/multitask.py",
        original=(
            "    SELECT coalesce(r.status = 'pending' AND r.lease_until < now(), false)\n"
            "           OR (r.status = 'running' AND NOT coalesce(t.run_lease_until > now(), false))\n"
            "           AS lapsed,\n"
        ),
        mutant="    SELECT false AS lapsed,\n",
        tests=(
            f"{RUNS}::test_a_killed_holder_is_no_longer_busy_or_running_for_any_reader[postgres]",
        ),
    ),
    Guard(
        name="threads: a holder's lapsed lease does not read as busy (nobody settles it)",
        file="langgraph_colosseum/_core/threads.py",
        original=(
            'STATUS_NOW = f"""CASE WHEN {_LAPSED}\n    THEN {_HEAD_STATUS} ELSE t.status END"""'
        ),
        mutant='STATUS_NOW = "t.status"',
        tests=(
            f"{RUNS}::test_a_killed_holder_is_no_longer_busy_or_running_for_any_reader[postgres]",
            "tests/integration/test_fencing.py::test_status_follows_runs_after_a_dead_holder[postgres]",
        ),
    ),
    Guard(
        name="threads.search (SEARCH): a row that says busy is matched by the status it reads as",
        file="langgraph_colosseum/_core/threads.py",
        original=(
            " WHERE t.status = 'busy' AND (%(status)s::text IS NULL OR {STATUS_NOW} = %(status)s::text)"
        ),
        mutant=" WHERE t.status = 'busy' AND (%(status)s::text IS NULL OR t.status = %(status)s::text)",
        tests=(
            f"{RUNS}::test_a_killed_holder_is_no_longer_busy_or_running_for_any_reader[postgres]",
        ),
    ),
    Guard(
        name="threads.search: a row of the page that says busy past its lease is read by SEARCH",
        file="langgraph_colosseum/_core/threads.py",
        original='SELECT {_thread_columns("t.status")}, {_LAPSED}\nFROM colosseum_threads t\n',
        mutant='SELECT {_thread_columns("t.status")}, false\nFROM colosseum_threads t\n',
        tests=(LAPSED_PAGES,),
    ),
    Guard(
        name="threads.search(status=...): the newest row that says busy past its lease is looked for",
        file="langgraph_colosseum/_core/threads.py",
        original=" WHERE {_LAPSED} AND {_FILTERS}\n {_NEWEST_FIRST} LIMIT 1)",
        mutant=" WHERE false AND {_FILTERS}\n {_NEWEST_FIRST} LIMIT 1)",
        tests=(
            LAPSED_PAGES,
            f"{RUNS}::test_a_killed_holder_is_no_longer_busy_or_running_for_any_reader[postgres]",
        ),
    ),
    Guard(
        name="threads.search(status=...): a row past its lease before the page's last row sends it to SEARCH",
        file="langgraph_colosseum/_core/threads.py",
        original="    after_last = lapsed[3] < last[3] or (lapsed[3] == last[3] and lapsed[0] > last[0])\n",
        mutant="    after_last = True\n",
        tests=(LAPSED_PAGES,),
    ),
    Guard(
        name="threads.search(status=...): a short page, with a row past its lease anywhere, goes to SEARCH",
        file="langgraph_colosseum/_core/threads.py",
        original=" or limit is None or len(page) < limit:\n",
        mutant=" or limit is None:\n",
        tests=(LAPSED_PAGES,),
    ),
    Guard(
        name="threads.count(status=...): a row that says busy past its lease counts by its head",
        file="langgraph_colosseum/_core/threads.py",
        original="        WHERE {_LAPSED} AND {_HEAD_STATUS} = %(status)s::text AND {_FILTERS})\n",
        mutant="        WHERE {_LAPSED} AND {_FILTERS})\n",
        tests=(LAPSED_PAGES,),
    ),
    Guard(
        name="threads.search / count(status='busy'): only a row whose lease is live",
        file="langgraph_colosseum/_core/threads.py",
        original="WHERE t.status = 'busy' AND t.run_lease_until > now() AND {_FILTERS}\n",
        mutant="WHERE t.status = 'busy' AND {_FILTERS}\n",
        tests=(
            LAPSED_PAGES,
            f"{RUNS}::test_a_killed_holder_is_no_longer_busy_or_running_for_any_reader[postgres]",
        ),
    ),
    Guard(
        name="run guard: a renewed lease makes the thread busy again (a put meanwhile set it idle)",
        file="langgraph_colosseum/_core/threads.py",
        original="SET run_lease_until = now() + make_interval(secs => %(lease)s), status = 'busy'\n",
        mutant="SET run_lease_until = now() + make_interval(secs => %(lease)s)\n",
        tests=(f"{RUNS}::test_the_thread_is_busy_exactly_while_a_runs_lease_is_live",),
    ),
    Guard(
        name="rekey: a value row is re-sealed only as it was read (a prune compacts it meanwhile)",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "  AND encoding = %(old_encoding)s AND value::text IS NOT DISTINCT FROM %(old_json)s\n"
            "  AND value_bytes IS NOT DISTINCT FROM %(old_data)s\n"
            "  AND value_type IS NOT DISTINCT FROM %(old_type)s\n"
        ),
        mutant="",
        tests=(f"{ENCRYPTION_TESTS}::test_rekey_leaves_rows_a_writer_changed_meanwhile[postgres]",),
    ),
    Guard(
        name="rekey: checkpoint metadata is re-sealed only as it was read (a re-put meanwhile)",
        file="langgraph_colosseum/_core/sql.py",
        original="  AND metadata::text = %(old)s\n",
        mutant="",
        tests=(f"{ENCRYPTION_TESTS}::test_rekey_leaves_rows_a_writer_changed_meanwhile[postgres]",),
    ),
    Guard(
        name="rekey: a Store item is re-sealed only as it was read (a put meanwhile)",
        file="langgraph_colosseum/_core/sql.py",
        original="WHERE prefix = %(prefix)s AND key = %(key)s AND value::text = %(old)s",
        mutant="WHERE prefix = %(prefix)s AND key = %(key)s",
        tests=(f"{ENCRYPTION_TESTS}::test_rekey_leaves_rows_a_writer_changed_meanwhile[postgres]",),
    ),
    Guard(
        name="rekey: a run record's metadata is re-sealed only as it was read",
        file="langgraph_colosseum/_core/sql.py",
        original="AND run_id = %(run_id)s AND metadata_before::text = %(old)s",
        mutant="AND run_id = %(run_id)s",
        tests=(f"{ENCRYPTION_TESTS}::test_rekey_leaves_rows_a_writer_changed_meanwhile[postgres]",),
    ),
    Guard(
        name="rekey: a registry row is re-sealed only as it was read (a merge meanwhile)",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "  AND metadata::text = %(old_metadata)s AND state_values::text = %(old_values)s\n"
            "  AND metadata_undo::text = %(old_undo)s"
        ),
        mutant="",
        tests=(f"{ENCRYPTION_TESTS}::test_rekey_leaves_rows_a_writer_changed_meanwhile[postgres]",),
    ),
    Guard(
        name="rekey: a ledger row is re-sealed only as it was read (a call completes meanwhile)",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "  AND input::text IS NOT DISTINCT FROM %(old_input)s\n"
            "  AND output::text IS NOT DISTINCT FROM %(old_output)s\n"
            "  AND output_bytes IS NOT DISTINCT FROM %(old_output_bytes)s\n"
            "  AND output_type IS NOT DISTINCT FROM %(old_output_type)s\n"
            "  AND error IS NOT DISTINCT FROM %(old_error)s\n"
        ),
        mutant="",
        tests=(f"{ENCRYPTION_TESTS}::test_rekey_leaves_rows_a_writer_changed_meanwhile[postgres]",),
    ),
    Guard(
        name="state migrate: a thread is re-read under its guard, and one at the version is left",
        file="langgraph_colosseum/_core/versions.py",
        original="    if stored >= versions.version:\n        return ALREADY",
        mutant="",
        tests=(
            f"{STATE_VERSIONS}::test_a_thread_another_migration_took_meanwhile_is_not_migrated_again",
        ),
    ),
    Guard(
        name="state migrate: its checkpoint's id is the one right after the head's",
        file="langgraph_colosseum/_core/versions.py",
        original=('    checkpoint["id"] = _id_after(found.checkpoint["id"]) or checkpoint["id"]\n'),
        mutant="",
        tests=(
            f"{STATE_VERSIONS_REVIEW}::test_a_write_racing_state_migrate_stays_the_head[postgres]",
        ),
    ),
    Guard(
        name="delete_for_runs: a run's writes on a checkpoint not its own go",
        file="langgraph_colosseum/_core/sql.py",
        original='"DELETE FROM colosseum_writes WHERE run_id = ANY(%(run_ids)b::text[])",',
        mutant="",
        tests=(
            f"{RUNS_STOPPED}::test_rollback_of_a_resuming_run_leaves_nothing_of_it",
            f"{DELETED}::test_a_deleted_runs_writes_on_a_checkpoint_not_its_own_go_and_stay_gone",
        ),
    ),
    Guard(
        name="delete_for_runs: the threads of a run's tool calls are its threads (ledger)",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "UNION\nSELECT thread_id FROM colosseum_tool_calls "
            "WHERE run_id = ANY(%(run_ids)b::text[])\n"
        ),
        mutant="",
        tests=(
            f"{LEDGER_ROLLBACK}::test_a_tool_still_running_at_the_rollback_stores_nothing"
            "_when_it_finishes[exit]",
        ),
    ),
    Guard(
        name="delete_for_runs: a tool call a later checkpoint still holds stays (ledger)",
        file="langgraph_colosseum/_core/sql.py",
        original="WHERE k.checkpoint_id IS NOT NULL OR held.kept IS NOT NULL",
        mutant="WHERE k.checkpoint_id IS NOT NULL",
        tests=(
            f"{LEDGER_ROLLBACK}::test_a_copy_made_mid_run_keeps_the_tool_call_it_still_shows"
            "[copy-went-on]",
            f"{LEDGER_ROLLBACK}::test_delete_for_runs_keeps_a_call_a_later_run_still_shows",
        ),
    ),
    Guard(
        name="delete_for_runs: a tool call made on a checkpoint that stays stays (ledger)",
        file="langgraph_colosseum/_core/sql.py",
        original="WHERE k.checkpoint_id IS NOT NULL OR held.kept IS NOT NULL",
        mutant="WHERE held.kept IS NOT NULL",
        tests=(
            f"{LEDGER_ROLLBACK}::test_a_rollback_of_a_run_that_resumed_a_pending_call_keeps"
            "_its_record",
        ),
    ),
    Guard(
        name="delete_for_runs: a kept tool call's site moves to a checkpoint that stays (ledger)",
        file="langgraph_colosseum/_core/sql.py",
        original="UPDATE colosseum_tool_calls c SET thread_id = d.heir, call_checkpoint_id = d.site",
        mutant="UPDATE colosseum_tool_calls c SET thread_id = d.heir",
        tests=(f"{LEDGER_ROLLBACK}::test_delete_for_runs_keeps_a_call_a_later_run_still_shows",),
    ),
    Guard(
        name="put_writes: a write of a deleted run is refused",
        file="langgraph_colosseum/_core/sql.py",
        original="{_DELETED.format(more=_DELETED_RUN)}\n{_FENCED}\nrefused AS (\n    SELECT 1 FROM deleted",
        mutant='{_DELETED.format(more="")}\n{_FENCED}\nrefused AS (\n    SELECT 1 FROM deleted',
        tests=(
            f"{DELETED}::test_a_deleted_runs_writes_on_a_checkpoint_not_its_own_go_and_stay_gone",
        ),
    ),
    Guard(
        name="rollback: only the keys the stopped run set last are put back",
        file="langgraph_colosseum/_core/multitask.py",
        original="    WHERE t.thread_id = %(thread_id)s AND u.value -> 't' = to_jsonb(run.token)\n",
        mutant="    WHERE t.thread_id = %(thread_id)s\n",
        tests=(
            f"{RUNS_STOPPED}::test_a_rollback_keeps_registry_metadata_set_by_others_meanwhile",
            f"{KEEPS}[run-other-plain-postgres]",
        ),
    ),
    Guard(
        name="rollback: older code rolling back a newer run leaves the registry metadata",
        file="langgraph_colosseum/_core/multitask.py",
        original="           clock_timestamp(), '{}'\n",
        mutant="           clock_timestamp(), NULL\n",
        tests=(
            "tests/integration/test_schema.py::"
            "test_older_code_rolling_back_a_newer_run_leaves_the_registry_metadata",
        ),
    ),
    Guard(
        name="rollback: a key threads.update set is no run's to put back",
        file="langgraph_colosseum/_core/threads.py",
        original=(
            "    metadata_undo = t.metadata_undo - ARRAY(SELECT jsonb_object_keys(%(metadata)s::jsonb)),\n"
        ),
        mutant="",
        tests=(f"{KEEPS}[run-other-plain-postgres]", f"{KEEPS}[run-other-run-encrypted-redis]"),
    ),
    Guard(
        name="rollback: a run setting its own key again keeps what the key held before it",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "                WHERE t.metadata_undo -> k.key -> 't'\n"
            "                      IS DISTINCT FROM to_jsonb(%(run_token)s::bigint)), '{{}}')"
        ),
        mutant="), '{{}}')",
        tests=(f"{KEEPS}[run-other-plain-postgres]",),
    ),
    Guard(
        name="rollback: a key a put outside any run set is no run's to put back",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "            THEN t.metadata_undo - ARRAY(SELECT jsonb_object_keys(EXCLUDED.metadata))\n"
        ),
        mutant="            THEN t.metadata_undo\n",
        tests=(
            f"{RUNS_STOPPED}::test_a_rollback_keeps_a_key_a_put_outside_any_run_set_after_the_run_did",
        ),
    ),
    Guard(
        name="on_conflict: a put continues only from the head",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "_PUT_HEAD_MOVED = (\n"
            '    "NOT (head.id IS NOT DISTINCT FROM %(parent_checkpoint_id)s::text"\n'
            '    " OR head.id = %(checkpoint_id)s)"\n'
            ")"
        ),
        mutant='_PUT_HEAD_MOVED = "false"',
        tests=(
            f"{ON_CONFLICT}::test_a_put_continuing_from_a_head_another_run_moved_past_is_refused",
        ),
    ),
    Guard(
        name="on_conflict: writes go only to the head, what the run read, or its own",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            '_WRITES_HEAD_MOVED = "(head.id IS NOT NULL AND head.id <> ALL(%(heads)s::text[]))"'
        ),
        mutant='_WRITES_HEAD_MOVED = "false"',
        tests=(f"{ON_CONFLICT}::test_a_write_to_a_checkpoint_the_head_moved_past_is_refused",),
    ),
    Guard(
        name="on_conflict: a claim another run made since the read refuses the write",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "        {{head_moved}}\n"
            "        OR (head.claim IS DISTINCT FROM %(seen_claim)s::text\n"
            "            AND head.claim IS DISTINCT FROM %(writer)s::text))"
        ),
        mutant="        {{head_moved}})",
        tests=(f"{ON_CONFLICT}::test_the_first_run_to_write_to_the_head_wins",),
    ),
    Guard(
        name="on_conflict: a write claims its checkpoint",
        file="langgraph_colosseum/_core/sql.py",
        original="    WHERE %(writer)s::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM refused)",
        mutant="    WHERE false",
        tests=(f"{ON_CONFLICT}::test_the_first_run_to_write_to_the_head_wins",),
    ),
    Guard(
        name="on_conflict: the head lock orders the checks",
        file="langgraph_colosseum/_core/sql.py",
        original="       pg_advisory_xact_lock({HEAD_LOCK_CLASS}, hashtext(%(thread_id)s))",
        mutant="       %(thread_id)s::text",
        tests=(f"{ON_CONFLICT}::test_two_checks_at_once_are_ordered_by_the_head_lock",),
    ),
    Guard(
        name="on_conflict: a subgraph's write is refused by the root's check too",
        file="langgraph_colosseum/_core/sql.py",
        original="    UNION ALL SELECT id FROM root_conflict\n",
        mutant="",
        tests=(
            f"{ON_CONFLICT_SUBGRAPHS}::test_resumes_of_a_subgraph_interrupt_split_across_namespaces_one_wins",
        ),
    ),
    Guard(
        name="on_conflict: a subgraph's write continues only from the root the run read or put",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "    WHERE NOT (root_head.id IS NOT DISTINCT FROM %(root_read)s::text\n"
            "               OR root_head.id = ANY(%(root_own)s::text[]))\n"
            "       OR (root_head.claim"
        ),
        mutant="    WHERE (root_head.claim",
        tests=(
            f"{ON_CONFLICT_SUBGRAPHS}::test_a_root_checkpoint_put_meanwhile_refuses_a_subgraph_write",
        ),
    ),
    Guard(
        name="on_conflict: a root claim another run made refuses a subgraph's write",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "       OR (root_head.claim IS DISTINCT FROM %(writer)s::text\n"
            "           AND root_head.claim IS DISTINCT FROM\n"
            "               CASE WHEN root_head.id = %(root_read)s::text THEN %(root_seen)s::text END)\n"
        ),
        mutant="",
        tests=(
            f"{ON_CONFLICT_SUBGRAPHS}::test_resumes_of_a_subgraph_interrupt_split_across_namespaces_one_wins",
        ),
    ),
    Guard(
        name="on_conflict: a subgraph's write claims the root head",
        file="langgraph_colosseum/_core/sql.py",
        original="    WHERE root_head.id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM refused)\n",
        mutant="    WHERE false\n",
        tests=(f"{ON_CONFLICT_SUBGRAPHS}::test_a_subgraph_write_first_decides_the_resume_race",),
    ),
    Guard(
        name="on_conflict: another run's subgraph task held at a checkpoint refuses writes to it",
        file="langgraph_colosseum/_core/sql.py",
        original="    UNION ALL SELECT id FROM held_here\n",
        mutant="",
        tests=(
            f"{ON_CONFLICT_IN_FLIGHT}::test_a_run_reading_mid_subgraph_cannot_take_the_head_over",
        ),
    ),
    Guard(
        name="on_conflict: another run's subgraph task held at the root refuses subgraph writes",
        file="langgraph_colosseum/_core/sql.py",
        original="    UNION ALL SELECT id FROM root_held\n",
        mutant="",
        tests=(
            f"{ON_CONFLICT_IN_FLIGHT}::test_a_subgraph_write_mid_subgraph_cannot_take_the_head_over",
        ),
    ),
    Guard(
        name="on_conflict: a subgraph's write holds its root task",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "           jsonb_build_object(%(root_task)s::text, "
            "extract(epoch FROM statement_timestamp())),\n"
        ),
        mutant="           'null'::jsonb,\n",
        tests=(
            f"{ON_CONFLICT_IN_FLIGHT}::test_a_run_reading_mid_subgraph_cannot_take_the_head_over",
        ),
    ),
    Guard(
        name="on_conflict: a run's subgraph tasks of one step are held together",
        file="langgraph_colosseum/_core/sql.py",
        original="                               THEN colosseum_writes.value || EXCLUDED.value\n",
        mutant="                               THEN EXCLUDED.value\n",
        tests=(
            f"{ON_CONFLICT_IN_FLIGHT}::test_a_task_held_stays_held_when_another_subgraph_of_the_step_ends",
        ),
    ),
    Guard(
        name="on_conflict: the run's own write of a held task closes it",
        file="langgraph_colosseum/_core/sql.py",
        original="                               THEN colosseum_writes.value - %(task_id)s::text\n",
        mutant="                               THEN colosseum_writes.value\n",
        tests=(
            f"{ON_CONFLICT_IN_FLIGHT}::test_after_an_interrupt_raised_again_in_the_subgraph_the_next_resume_goes_on",
        ),
    ),
    Guard(
        name="on_conflict: a held task lapses on_conflict_hold after its run's last write",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "            WHERE %(hold)s::float8 IS NULL\n"
            "               OR held.value::float8 > extract(epoch FROM statement_timestamp()) "
            "- %(hold)s::float8)"
        ),
        mutant="            WHERE true)",
        tests=(
            f"{ON_CONFLICT_IN_FLIGHT}::test_a_static_breakpoint_in_a_subgraph_holds_until_the_hold_ends",
        ),
    ),
    Guard(
        name="on_conflict: a refused run's subgraph checkpoints under its unstored root go",
        file="langgraph_colosseum/_core/store.py",
        original="        nested = run.take_nested()\n        if nested:\n",
        mutant="        nested = run.take_nested()\n        if False:\n",
        tests=(
            f"{ON_CONFLICT_SUBGRAPHS}::test_on_a_new_thread_the_losers_subgraph_checkpoints_are_deleted",
        ),
    ),
    Guard(
        name="on_conflict: a burial keeps subgraph checkpoints whose root is stored",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "    WHERE NOT EXISTS (\n"
            "        SELECT 1 FROM colosseum_checkpoints r\n"
            "        WHERE r.thread_id = k.thread_id AND r.checkpoint_ns = '' AND r.checkpoint_id = k.root_id)\n"
            "      AND NOT EXISTS ("
        ),
        mutant="    WHERE NOT EXISTS (",
        tests=(
            f"{ON_CONFLICT_SUBGRAPHS}::test_a_burial_keeps_what_another_run_wrote_to_or_continued",
        ),
    ),
    Guard(
        name="on_conflict: a burial keeps a checkpoint another run wrote to",
        file="langgraph_colosseum/_core/sql.py",
        original="          AND w.idx = {CLAIM_IDX} AND w.task_path <> %(writer)s::text)",
        mutant="          AND w.idx = {CLAIM_IDX} AND false)",
        tests=(
            f"{ON_CONFLICT_SUBGRAPHS}::test_a_burial_keeps_what_another_run_wrote_to_or_continued",
        ),
    ),
    Guard(
        name="on_conflict: a burial keeps a checkpoint another run continued",
        file="langgraph_colosseum/_core/sql.py",
        original="          AND c.parent_checkpoint_id = k.checkpoint_id\n",
        mutant="          AND false\n",
        tests=(
            f"{ON_CONFLICT_SUBGRAPHS}::test_a_burial_keeps_what_another_run_wrote_to_or_continued",
        ),
    ),
    Guard(
        name="on_conflict: a refused run's caller is told of the root checkpoints it stored",
        file="langgraph_colosseum/_core/runs.py",
        original="            if thread_id in self.newest_root:\n",
        mutant="            if False:\n",
        tests=(
            f"{ON_CONFLICT_ROOT_STEP}::test_a_run_reading_mid_root_step_keeps_what_the_other_stored_and_says_so",
        ),
    ),
    Guard(
        name="on_conflict: a refused run's caller is told of what it left on the checkpoint it read",
        file="langgraph_colosseum/_core/runs.py",
        original="            if thread_id in self.landed_on_read:\n",
        mutant="            if False:\n",
        tests=(f"{ON_CONFLICT_IN_FLIGHT}::test_a_run_quiet_past_the_hold_is_taken_over",),
    ),
    Guard(
        name="on_conflict: a refused run's subgraph steps under its unstored root are not kept",
        file="langgraph_colosseum/_core/runs.py",
        original=(
            "        if read is not None and under is not None and under == read.checkpoint_id:\n"
        ),
        mutant="        if read is not None:\n",
        tests=(
            f"{ON_CONFLICT_SUBGRAPHS}::test_subgraph_steps_buried_with_an_unstored_input_are_not_kept",
        ),
    ),
    Guard(
        name="tool ledger: a claim descending from a deleted checkpoint is refused",
        file="langgraph_colosseum/_core/ledger.py",
        original=(
            "    JOIN colosseum_tombstones d\n"
            "      ON d.thread_id = %(thread_id)s AND d.checkpoint_ns = l.ns "
            "AND d.checkpoint_id = l.id\n"
        ),
        mutant="    JOIN colosseum_tombstones d ON false\n",
        tests=(f"{LEDGER_LIFE}::test_a_claim_descending_from_a_pruned_checkpoint_is_refused",),
    ),
    Guard(
        name="tool ledger: a claim on a thread deleted since its run's first read is refused",
        file="langgraph_colosseum/_core/ledger.py",
        original="    WHERE g.thread_id = %(thread_id)s AND g.before <> %(seen)s::text\n",
        mutant="    WHERE false\n",
        tests=(
            f"{LEDGER_LIFE}"
            "::test_a_claim_for_a_checkpoint_made_before_its_thread_was_deleted_is_refused",
        ),
    ),
    Guard(
        name="tool ledger: a claim of a deleted run is refused",
        file="langgraph_colosseum/_core/ledger.py",
        original="    WHERE r.run_id = %(run_id)s::text\n",
        mutant="    WHERE false\n",
        tests=(f"{LEDGER_LIFE}::test_a_claim_of_a_deleted_run_is_refused",),
    ),
    Guard(
        name="tool ledger: a claim waits for a deletion of its thread in flight (write lock)",
        file="langgraph_colosseum/_core/ledger.py",
        original="return Transaction((Query(sql.WRITE_LOCK, lock, fetch=False), Query(CLAIM, params)))",
        mutant="return Transaction((Query('SELECT 1', lock, fetch=False), Query(CLAIM, params)))",
        tests=(f"{LEDGER_LIFE}::test_a_claim_waits_for_a_delete_in_flight",),
    ),
    Guard(
        name="tool ledger: a deleted thread's rows are rehomed before its deletion is recorded",
        file="langgraph_colosseum/_core/store.py",
        original="statements = [sql.DELETE_LOCK, rehome, *tombstones, *deletes]",
        mutant="statements = [sql.DELETE_LOCK, *tombstones, rehome, *deletes]",
        tests=(
            f"{LEDGER_LIFE}"
            "::test_deleting_a_source_copied_before_sources_were_recorded_hands_its_rows_on",
        ),
    ),
    Guard(
        name="tool ledger: copy_thread records the source in the lineage",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "    UNION ALL\n    SELECT %(source)s, lineage FROM source\n"
            "    WHERE %(target)s <> %(source)s\n"
        ),
        mutant="    UNION ALL\n    SELECT %(source)s, lineage FROM source\n    WHERE false\n",
        tests=(
            f"{LEDGER_LIFE}::test_deleting_a_copy_of_a_thread_on_a_reused_id_leaves_it_its_ledger",
        ),
    ),
    Guard(
        name="tool ledger: a source not recorded in the lineage is still an heir",
        file="langgraph_colosseum/_core/sql.py",
        original="        WHERE t.thread_id = {lineage}\n",
        mutant="        WHERE false\n",
        tests=(
            f"{LEDGER_LIFE}"
            "::test_a_copy_made_before_sources_were_recorded_still_leaves_the_source_its_ledger",
        ),
    ),
    Guard(
        name="deleted stays deleted: a run this process forgot counts as having read before any deletion",
        file="langgraph_colosseum/_core/runs.py",
        original="            if not begins:\n                writes.forgotten = True\n",
        mutant="            if False:\n                writes.forgotten = True\n",
        tests=(
            f"{DELETED}::test_a_forgotten_exit_run_met_again_at_a_subgraphs_read_is_refused",
            f"{DELETED}::test_a_forgotten_exit_run_of_a_thread_deleted_mid_run_is_refused_sync",
            f"{DELETED}::test_a_forgotten_exit_run_of_a_thread_deleted_mid_run_is_refused_async",
            f"{LEDGER_LIFE}::test_an_exit_run_whose_thread_is_deleted_does_not_pay_sync",
            f"{LEDGER_LIFE}::test_an_exit_run_whose_thread_is_deleted_does_not_pay_async",
        ),
    ),
    Guard(
        name="deleted stays deleted: only the root namespace's read begins a run",
        file="langgraph_colosseum/_core/store.py",
        original="        run = self.runs.of(config, begins=not checkpoint_ns)\n",
        mutant="        run = self.runs.of(config, begins=True)\n",
        tests=(f"{DELETED}::test_a_forgotten_exit_run_met_again_at_a_subgraphs_read_is_refused",),
    ),
    Guard(
        name="threads.update: an update, never an insert (a deleted thread stays deleted)",
        file="langgraph_colosseum/_core/threads.py",
        original=(
            "UPDATE colosseum_threads AS t\nSET metadata = t.metadata || %(metadata)s::jsonb,\n"
            "    metadata_undo = t.metadata_undo - ARRAY(SELECT jsonb_object_keys(%(metadata)s::jsonb)),\n"
            "    updated_at = now()\nWHERE t.thread_id = %(thread_id)s\n"
        ),
        mutant=(
            "INSERT INTO colosseum_threads AS t (thread_id, metadata) "
            "VALUES (%(thread_id)s, %(metadata)s::jsonb)\n"
            "ON CONFLICT (thread_id) DO UPDATE SET metadata = t.metadata || EXCLUDED.metadata, "
            "updated_at = now()\n"
        ),
        tests=(f"{LEDGER_LIFE}::test_updating_a_deleted_thread_is_refused_and_writes_nothing",),
    ),
    Guard(
        name="hot head: an advance applies only onto a hash of its own deletion epoch",
        file="langgraph_colosseum/_core/hot.py",
        original=(
            "if epoch_differs(ARGV[3]) then return -1 end\n"
            "local current = redis.call('HGET', key, P .. 'id')\nlocal id = ARGV[4]\n"
            "local function drop()"
        ),
        mutant=(
            "local current = redis.call('HGET', key, P .. 'id')\nlocal id = ARGV[4]\n"
            "local function drop()"
        ),
        tests=(
            f"{LATE_HEADS}::test_a_late_advance_of_a_deleted_run_is_never_served",
            f"{LATE_HEADS}::test_a_late_advance_of_a_deleted_run_is_never_served_async",
            f"{LATE_HEADS}::test_a_late_advance_after_delete_thread_is_never_served",
            f"{LATE_HEADS}::test_a_rollback_wins_over_the_stopped_runs_late_redis_head",
        ),
    ),
    Guard(
        name="hot head: writes are added only to a hash of their own deletion epoch",
        file="langgraph_colosseum/_core/hot.py",
        original=(
            "if epoch_differs(ARGV[3]) then return -1 end\n"
            "local current = redis.call('HGET', key, P .. 'id')\nlocal id = ARGV[4]\n"
            "local function merge(writes)"
        ),
        mutant=(
            "local current = redis.call('HGET', key, P .. 'id')\nlocal id = ARGV[4]\n"
            "local function merge(writes)"
        ),
        tests=(f"{LATE_HEADS}::test_a_late_add_writes_of_a_deleted_run_is_never_served",),
    ),
    Guard(
        name="hot head: a refill records the deletion epoch its read saw",
        file="langgraph_colosseum/_core/hot.py",
        original="    redis.call('HSET', key, 'epoch', ARGV[4])\n",
        mutant="",
        tests=(f"{LATE_HEADS}::test_a_late_advance_of_a_deleted_run_is_never_served",),
    ),
    Guard(
        name="hot head: a refilling read returns the epoch from its own snapshot",
        file="langgraph_colosseum/_core/sql.py",
        original='first = f"{THREAD_EPOCH} AS epoch, " if epoch else ""',
        mutant='first = "0 AS epoch, " if epoch else ""',
        tests=(
            f"{LATE_HEADS}::test_a_late_advance_of_a_deleted_run_is_never_served",
            f"{LATE_HEADS}::test_a_late_advance_after_delete_thread_is_never_served",
        ),
    ),
    Guard(
        name="hot head: a write (put, put_writes) returns the epoch it was written at",
        file="langgraph_colosseum/_core/sql.py",
        original='{STALE_HEADS} AS stale_heads, {THREAD_EPOCH} AS epoch"',
        mutant='{STALE_HEADS} AS stale_heads, 0 AS epoch"',
        tests=(
            f"{LATE_HEADS}::test_a_late_advance_of_a_deleted_run_is_never_served",
            f"{LATE_HEADS}::test_a_late_add_writes_of_a_deleted_run_is_never_served",
        ),
    ),
    Guard(
        name="hot head: delete_for_runs moves the epochs of the threads it deletes from",
        file="langgraph_colosseum/_core/store.py",
        original="        queries.append(Query(sql.MOVE_EPOCHS, thread_ids, fetch=False))\n",
        mutant="",
        tests=(
            f"{LATE_HEADS}::test_a_late_advance_of_a_deleted_run_is_never_served",
            f"{LATE_HEADS}::test_a_late_add_writes_of_a_deleted_run_is_never_served",
            f"{LATE_HEADS}::test_a_rollback_wins_over_the_stopped_runs_late_redis_head",
        ),
    ),
    Guard(
        name="hot head: delete_thread (and the sweep) moves the thread's epoch",
        file="langgraph_colosseum/_core/store.py",
        original="        statements.append(sql.MOVE_EPOCHS)  # the epochs move with the deletion\n",
        mutant="",
        tests=(f"{LATE_HEADS}::test_a_late_advance_after_delete_thread_is_never_served",),
    ),
    Guard(
        name="hot head: a refill read at an older epoch than the hash is refused",
        file="langgraph_colosseum/_core/hot.py",
        original="if epoch < held_epoch() then return 0 end  -- read before a deletion the hash reflects",
        mutant="-- (guard removed)",
        tests=(
            f"{LATE_HEADS}::test_a_refill_read_before_a_deletion_never_lands_after_one_read_after_it",
        ),
    ),
    Guard(
        name="hot head: a refill read at a newer epoch drops the rest of the hash",
        file="langgraph_colosseum/_core/hot.py",
        original="    redis.call('DEL', key)\n    redis.call('HSET', key, 'seq', ARGV[3])\n",
        mutant="    drop_namespace()\n",
        tests=(
            f"{LATE_HEADS}::test_a_refill_read_before_a_deletion_never_lands_after_one_read_after_it",
        ),
    ),
    Guard(
        name="lost reply: a retried tool claim recognises its own claim",
        file="langgraph_colosseum/_core/ledger.py",
        original="OR (t.status = 'RUNNING' AND t.lease_owner = EXCLUDED.lease_owner)",
        mutant="",
        tests=(f"{LOST_REPLIES}::test_a_claim_whose_reply_was_lost_runs_the_tool_once",),
    ),
    Guard(
        name="lost reply: a retried run_guard acquire recognises its own hold",
        file="langgraph_colosseum/_core/threads.py",
        original="OR t.run_owner = EXCLUDED.run_owner  -- OWN_ACQUIRE",
        mutant="",
        tests=(
            f"{LOST_REPLIES}::test_a_guard_whose_acquire_reply_was_lost_holds_the_thread",
            f"{LOST_REPLIES}::test_an_async_guard_whose_acquire_reply_was_lost_holds_the_thread",
        ),
    ),
    Guard(
        name="lost reply: a retried run TAKE recognises its own take",
        file="langgraph_colosseum/_core/multitask.py",
        original="SELECT coalesce((SELECT run_token FROM taken), (SELECT run_token FROM again)),",
        mutant="SELECT (SELECT run_token FROM taken),",
        tests=(f"{LOST_REPLIES}::test_a_run_whose_take_reply_was_lost_runs",),
    ),
    Guard(
        name="lost reply: a retried TAKE drops the thread's Redis heads",
        file="langgraph_colosseum/_core/multitask.py",
        original="if due or stopped is not None or again:",
        mutant="if due or stopped is not None:",
        tests=(
            "tests/unit/test_multitask.py::test_a_take_that_finds_its_own_earlier_take_drops_the_heads",
        ),
    ),
    Guard(
        name="lost reply: a retried ENQUEUE finds its own row",
        file="langgraph_colosseum/_core/multitask.py",
        original="ON CONFLICT (thread_id, run_id) DO NOTHING",
        mutant="",
        tests=(f"{LOST_REPLIES}::test_a_run_whose_take_reply_was_lost_runs",),
    ),
    Guard(
        name="lost reply: a retried run FINISH recognises its own end",
        file="langgraph_colosseum/_core/multitask.py",
        original="OR coalesce((SELECT status = %(status)s AND stopped_by IS NULL FROM run), false),",
        mutant=",",
        tests=(f"{LOST_REPLIES}::test_a_run_whose_finish_reply_was_lost_ends_as_success",),
    ),
    Guard(
        name="runs queue: a release tells the first in line its turn, and nobody else",
        file="langgraph_colosseum/_core/multitask.py",
        original="    ORDER BY r.seq\n    LIMIT 1\n)\nSELECT pg_notify(",
        mutant="    ORDER BY r.seq\n)\nSELECT pg_notify(",
        tests=(f"{RUNS}::test_a_queue_of_eight_drains_in_arrival_order_waking_only_the_next",),
    ),
    Guard(
        name="runs queue: FINISH tells the next in line",
        file="langgraph_colosseum/_core/multitask.py",
        original="            Query(WAKE, tell),\n        )\n    )\n    ended, stored, by, _",
        mutant=(
            '            Query(WAKE, {"thread_id": None, "ended": []}),\n        )\n    )\n'
            "    ended, stored, by, _"
        ),
        tests=(f"{RUNS_QUEUE}::test_a_release_tells_the_first_live_waiter_past_a_dead_one",),
    ),
    Guard(
        name="runs queue: a release passes over a queued run whose place lapsed",
        file="langgraph_colosseum/_core/multitask.py",
        original=(
            "    WHERE r.thread_id = %(thread_id)s AND r.status = 'pending' AND r.lease_until > now()\n"
            "      AND EXISTS (\n"
        ),
        mutant="    WHERE r.thread_id = %(thread_id)s AND r.status = 'pending'\n      AND EXISTS (\n",
        tests=(f"{RUNS_QUEUE}::test_a_release_tells_the_first_live_waiter_past_a_dead_one",),
    ),
    Guard(
        name="runs queue: a run leaving the queue holds the thread row before it tells the next",
        file="langgraph_colosseum/_core/multitask.py",
        original="            Query(LOCK_THREAD, params),  # see WAKE\n",
        mutant="",
        tests=(f"{RUNS_QUEUE}::test_a_waiter_leaving_as_the_holder_lets_go_leaves_the_next_told",),
    ),
    Guard(
        name="runs queue: a cancel tells the cancelled waiter on its own channel",
        file="langgraph_colosseum/_core/multitask.py",
        original='        Query(WAKE, {"thread_id": thread_id, "ended": ids}),\n',
        mutant="",
        tests=(f"{RUNS_STOPPED}::test_a_waiter_cancelled_while_it_sleeps_is_told_at_once",),
    ),
    Guard(
        name="runs queue: a waiter whose listening connection broke listens again",
        file="langgraph_colosseum/_notify.py",
        original="            self.close()\n            self.open()\n",
        mutant="            self.close()\n",
        tests=(f"{RUNS_QUEUE}::test_a_waiter_whose_listening_connection_breaks_listens_again",),
    ),
    Guard(
        name="retention: a read the Redis head serves pushes the expiry back",
        file="langgraph_colosseum/_core/store.py",
        original="yield from self._touch_on_hit(thread_id)",
        mutant="pass",
        tests=(
            f"{RETENTION}::test_a_thread_read_only_from_the_redis_head_is_kept",
            f"{RETENTION}::test_the_bound_a_thread_read_within_0_8_ttl_of_the_sweep_is_kept",
        ),
    ),
    Guard(
        name="retention: a hit's touch covers the next hits for 0.1 TTL only",
        file="langgraph_colosseum/_core/expiry.py",
        original="return at is None or self.clock() - at >= HIT_TOUCH_EVERY * ttl_seconds",
        mutant="return at is None or self.clock() - at >= ttl_seconds",
        tests=(f"{RETENTION}::test_the_bound_a_thread_read_within_0_8_ttl_of_the_sweep_is_kept",),
    ),
    Guard(
        name="runs: a run's end locks the thread row before its record, as a take does",
        file="langgraph_colosseum/_core/multitask.py",
        original="            Query(LOCK_THREAD, params),\n            Query(FINISH, params),\n",
        mutant="            Query(FINISH, params),\n",
        tests=(f"{RUNS_LOCK_ORDER}::test_a_finish_waiting_for_the_thread_row_holds_no_run_record",),
    ),
    Guard(
        name="runs: a take reads the thread row only once every holder of it has committed",
        file="langgraph_colosseum/_core/multitask.py",
        original="            Query(LOCK_THREAD, params),\n            Query(TAKE, params),\n",
        mutant="            Query(TAKE, params),\n",
        tests=(f"{RUNS_LOCK_ORDER}::test_a_take_arriving_while_the_holder_ends_waits_for_its_end",),
    ),
    Guard(
        name="runs: a rollback locks the thread row before the stopped run's record",
        file="langgraph_colosseum/_core/multitask.py",
        original='                Query(LOCK_THREAD, {"thread_id": thread_id}),\n',
        mutant="",
        tests=(
            f"{RUNS_LOCK_ORDER}::test_a_rollback_waiting_for_the_thread_row_holds_no_run_record",
        ),
    ),
    Guard(
        name="runs: a cancel locks the thread row before the records of the runs it stops",
        file="langgraph_colosseum/_core/multitask.py",
        original="        Query(LOCK_THREAD, params),\n        Query(CANCEL, params),\n",
        # The same statement locking no row, so the replies keep their places.
        mutant='        Query(LOCK_THREAD, {"thread_id": None}),\n        Query(CANCEL, params),\n',
        tests=(f"{RUNS_LOCK_ORDER}::test_a_cancel_waiting_for_the_thread_row_holds_no_run_record",),
    ),
    Guard(
        name="copy: both threads' write locks, exclusive, before the copy's first statement",
        file="langgraph_colosseum/_core/store.py",
        original="queries = [lock, *(Query(q, params, fetch=False) for q in statements)]",
        mutant="queries = [Query(q, params, fetch=False) for q in statements]",
        tests=(
            f"{COPY_RACES}::test_a_copy_racing_a_removal_of_its_source_is_the_source_as_it_was",
        ),
    ),
    Guard(
        name="hot head: ADVANCE drops the head at a version neither the put nor the head holds",
        file="langgraph_colosseum/_core/hot.py",
        original="    elseif old[channel] ~= version then\n",
        mutant="    elseif false then\n",
        tests=(
            f"{GUARD_TESTS}"
            "::test_a_put_pointing_a_channel_back_at_an_older_version_reads_alike_from_redis",
        ),
    ),
    Guard(
        name="deleted runs: a run's write holds its run's lock, shared",
        file="langgraph_colosseum/_core/sql.py",
        original="THEN pg_advisory_xact_lock_shared({RUN_LOCK_CLASS}, hashtext(%(run_id)s)) END,",
        mutant="THEN length(%(run_id)s) END,",
        tests=(f"{GUARD_TESTS}::test_a_put_in_flight_when_its_run_is_deleted_does_not_land",),
    ),
    Guard(
        name="deleted runs: delete_for_runs takes its runs' locks before recording them",
        file="langgraph_colosseum/_core/store.py",
        original=(
            "                Query(sql.RUNS_LOCK, params, fetch=False),\n"
            "                Query(sql.DELETED_RUNS"
        ),
        mutant="                Query(sql.DELETED_RUNS",
        tests=(f"{GUARD_TESTS}::test_a_put_in_flight_when_its_run_is_deleted_does_not_land",),
    ),
    Guard(
        name="stale heads: a worker forgets only the record of the head it dropped",
        file="langgraph_colosseum/_core/sql.py",
        original="\n  AND s.recorded_at = u.recorded_at::timestamptz\n",
        mutant="\n",
        tests=(
            f"{HOT_TRUTH}"
            "::test_a_head_recorded_stale_again_while_a_worker_drops_it_is_dropped_again",
        ),
    ),
    Guard(
        name="runs: a cancel stops only runs still pending or running",
        file="langgraph_colosseum/_core/multitask.py",
        original=(
            "WHERE thread_id = %(thread_id)s AND run_id = ANY(%(run_ids)s::text[])\n"
            "  AND status IN ('pending', 'running')\n"
        ),
        mutant="WHERE thread_id = %(thread_id)s AND run_id = ANY(%(run_ids)s::text[])\n",
        tests=(f"{GUARD_TESTS}::test_a_cancel_never_rewrites_a_run_that_ended_before_it",),
    ),
    Guard(
        name="registry: a put older than the head leaves the status as it is",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "            WHEN EXCLUDED.head_checkpoint_id < coalesce(t.head_checkpoint_id, '') "
            "THEN t.status\n"
        ),
        mutant="",
        tests=(
            f"{GUARD_TESTS}"
            "::test_a_put_that_lands_after_a_later_one_leaves_the_registry_at_the_later",
        ),
    ),
    Guard(
        name="registry: the head never moves back",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "        head_checkpoint_id = greatest(t.head_checkpoint_id, "
            "EXCLUDED.head_checkpoint_id),"
        ),
        mutant="        head_checkpoint_id = EXCLUDED.head_checkpoint_id,",
        tests=(
            f"{GUARD_TESTS}"
            "::test_a_put_that_lands_after_a_later_one_leaves_the_registry_at_the_later",
        ),
    ),
    Guard(
        name="registry: the searchable values are the head's",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "        state_values = CASE WHEN EXCLUDED.head_checkpoint_id >= "
            "coalesce(t.head_checkpoint_id, '')\n"
        ),
        mutant="        state_values = CASE WHEN true\n",
        tests=(
            f"{GUARD_TESTS}"
            "::test_a_put_that_lands_after_a_later_one_leaves_the_registry_at_the_later",
        ),
    ),
    Guard(
        name="driver: a request Postgres aborted as a deadlock victim is run again (blocking)",
        file="langgraph_colosseum/saver.py",
        original="            except CONFLICTS:\n",
        mutant="            except ZeroDivisionError:\n",
        tests=(f"{GUARD_TESTS}::test_a_delete_chosen_as_a_deadlock_victim_is_rerun_and_deletes",),
    ),
    Guard(
        name="driver: a request Postgres aborted as a deadlock victim is run again (asyncio)",
        file="langgraph_colosseum/aio.py",
        original="            except CONFLICTS:\n",
        mutant="            except ZeroDivisionError:\n",
        tests=(f"{GUARD_TESTS}::test_a_delete_chosen_as_a_deadlock_victim_is_rerun_and_deletes",),
    ),
    Guard(
        name="pending writes: a task's write sent again leaves the first (Postgres)",
        file="langgraph_colosseum/_core/sql.py",
        original="WHERE EXCLUDED.idx < 0\n)\nSELECT EXISTS (SELECT 1 FROM fenced)",
        mutant=")\nSELECT EXISTS (SELECT 1 FROM fenced)",
        tests=(
            f"{GUARD_TESTS}::test_a_tasks_write_sent_twice_keeps_the_first_as_the_reference_does",
        ),
    ),
    Guard(
        name="runs queue: a run leaving the queue gives up only a place still pending",
        file="langgraph_colosseum/_core/multitask.py",
        original=(
            "WHERE thread_id = %(thread_id)s AND run_id = %(run_id)s AND status = 'pending'\n"
            '"""\n\n# The run ends'
        ),
        mutant='WHERE thread_id = %(thread_id)s AND run_id = %(run_id)s\n"""\n\n# The run ends',
        tests=(f"{GUARD_TESTS}::test_a_queued_run_cancelled_as_it_times_out_stays_cancelled",),
    ),
    Guard(
        name="fence: a write reads the thread row FOR KEY SHARE, after a cancel or end in flight",
        file="langgraph_colosseum/_core/sql.py",
        original="    WHERE thread_id = %(thread_id)s\n    FOR KEY SHARE\n),",
        mutant="    WHERE thread_id = %(thread_id)s\n),",
        tests=(f"{GUARD_TESTS}::test_a_put_waiting_on_a_cancel_in_flight_is_judged_by_it",),
    ),
    Guard(
        name="fence: a run's write to a thread whose row is gone has lost its lease",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "    UNION ALL\n    SELECT 1 WHERE %(run_owner)s::text IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM fence)\n"
        ),
        mutant="",
        tests=(f"{GUARD_TESTS}::test_a_runs_first_put_after_its_thread_was_deleted_is_refused",),
    ),
    Guard(
        name="hot head: a recreated mutation counter starts from the server clock",
        file="langgraph_colosseum/_core/hot.py",
        original="    return t[1] .. string.format('%06d', tonumber(t[2])) .. '000'",
        mutant="    return '1000'",
        tests=(
            f"{STORE_HOT}::test_a_write_from_another_process_between_a_miss_and_its_refill_wins",
        ),
    ),
    Guard(
        name="registry: an interrupt or error recorded at the head or later outlives a put",
        file="langgraph_colosseum/_core/sql.py",
        original=(
            "            WHEN t.status IN ('interrupted', 'error')\n"
            "                 AND t.status_checkpoint_id >= EXCLUDED.head_checkpoint_id "
            "THEN t.status\n"
        ),
        mutant="",
        tests=("tests/integration/test_threads.py::test_status_not_lost_to_concurrent_put_sync",),
    ),
    Guard(
        name="run guard: a lease is renewed only by its owner",
        file="langgraph_colosseum/_core/threads.py",
        original=(
            "SET run_lease_until = now() + make_interval(secs => %(lease)s), status = 'busy'\n"
            "WHERE thread_id = %(thread_id)s AND run_owner = %(owner)s"
        ),
        mutant=(
            "SET run_lease_until = now() + make_interval(secs => %(lease)s), status = 'busy'\n"
            "WHERE thread_id = %(thread_id)s"
        ),
        tests=(
            "tests/integration/test_fencing.py"
            "::test_stale_holder_loses_its_lease_to_a_released_successor",
        ),
    ),
    Guard(
        name="pending writes: a task's write sent again leaves the first (Redis)",
        file="langgraph_colosseum/_core/hot.py",
        original="if ARGV[i + 2] == '1' or not writes[ARGV[i]] then",
        mutant="if true then",
        tests=(f"{GUARD_TESTS}::test_pending_writes_come_back_in_the_order_inmemorysaver_gives",),
    ),
    Guard(
        name="runs queue: a take is not held back by a queued run whose place lapsed",
        file="langgraph_colosseum/_core/multitask.py",
        original=(
            "    WHERE r.thread_id = %(thread_id)s AND r.status = 'pending' "
            "AND r.lease_until > now()\n      AND r.run_id <> %(run_id)s"
        ),
        mutant=(
            "    WHERE r.thread_id = %(thread_id)s AND r.status = 'pending'\n"
            "      AND r.run_id <> %(run_id)s"
        ),
        tests=(f"{RUNS_QUEUE}::test_the_next_in_line_goes_once_the_waiter_told_its_turn_has_died",),
    ),
    Guard(
        name="setup: migrations run under the schema's advisory lock",
        file="langgraph_colosseum/_core/store.py",
        original='            Query(schema.LOCK, {"key": schema.ADVISORY_LOCK_KEY}, fetch=False),\n',
        mutant="",
        tests=("tests/integration/test_schema.py::test_two_processes_set_up_at_once",),
    ),
    Guard(
        name="ledger: a heartbeat renews only its own running claim",
        file="langgraph_colosseum/_core/ledger.py",
        original=(
            "SET lease_until = now() + make_interval(secs => %(lease)s)\n"
            "WHERE idempotency_key = %(key)s AND lease_owner = %(owner)s AND status = 'RUNNING'"
        ),
        mutant=(
            "SET lease_until = now() + make_interval(secs => %(lease)s)\n"
            "WHERE idempotency_key = %(key)s"
        ),
        tests=(f"{GUARD_TESTS}::test_a_worker_whose_claim_was_taken_over_does_not_keep_it_alive",),
    ),
    Guard(
        name="state versions: a migration holds the thread's run guard, waiting for a run",
        file="langgraph_colosseum/_base.py",
        original='                with self.run_guard(thread_id, on_busy="wait", lease=lease):\n',
        mutant="                if True:\n",
        tests=(
            f"{STATE_VERSIONS}"
            "::test_a_migration_waits_for_the_run_holding_the_thread_and_migrates_its_last_step",
        ),
    ),
    Guard(
        name="read memo: Postgres leaves a checkpoint out only while its digest is the one sent",
        file="langgraph_colosseum/_core/sql.py",
        original="d.memo_digest = %(memo)s::bytea AS remembered",
        mutant="octet_length(%(memo)s::bytea) > 0 AS remembered",
        tests=(
            f"{READ_MEMO}::test_a_checkpoint_rewritten_by_another_process_is_read_as_rewritten",
            f"{READ_MEMO}::test_a_checkpoint_rewritten_twice_in_one_transaction_is_read_as_rewritten",
            f"{READ_MEMO}"
            "::test_a_checkpoint_that_took_the_place_of_the_remembered_one_is_read_as_itself",
        ),
    ),
    Guard(
        name="read memo: the digest covers the checkpoint's document, not only its metadata",
        file="langgraph_colosseum/_core/sql.py",
        original="        length(t.document)::text || ',' || t.document || t.metadata, 'UTF8'))",
        mutant="        t.metadata, 'UTF8'))",
        tests=(
            f"{READ_MEMO}::test_a_checkpoint_rewritten_in_its_document_only_is_read_as_rewritten",
        ),
    ),
    Guard(
        name="read memo: a remembered read is used only when Postgres says it is that checkpoint",
        file="langgraph_colosseum/_core/store.py",
        original="if row is not None and kept is not None and row[_REMEMBERED]:",
        mutant="if row is not None and kept is not None:",
        tests=(
            f"{READ_MEMO}::test_a_checkpoint_rewritten_by_another_process_is_read_as_rewritten",
            f"{READ_MEMO}::test_a_remembered_read_by_checkpoint_id",
        ),
    ),
    Guard(
        name="read memo: checkpoints only seen count against its bound",
        file="langgraph_colosseum/_core/bases.py",
        original="    return entry.size + 240 + len(key[0]) + len(key[1])\n",
        mutant="    return entry.size if isinstance(entry, Remembered) else 0\n",
        tests=(f"{READ_MEMO}::test_checkpoints_read_once_are_bounded_too",),
    ),
    Guard(
        name="list ahead: a page's values keep their chains of bases until the page is read",
        file="langgraph_colosseum/_core/values.py",
        original="cursor = None if base is None else (cursor[0], cursor[1], cursor[2], base)",
        mutant="cursor = None",
        tests=(f"{LIST_AHEAD}::test_every_page_reads_as_inmemorysaver_history",),
    ),
    Guard(
        name="list ahead: a page whose connection was lost is read again the usual way",
        file="langgraph_colosseum/saver.py",
        original="            except Exception:\n                # Sent ahead on the lean path alone",
        mutant="            except ZeroDivisionError:\n                # Sent ahead on the lean path alone",
        tests=(
            f"{LIST_AHEAD}::test_a_page_whose_connection_is_lost_while_read_ahead_is_read_again",
        ),
    ),
    Guard(
        name="list ahead: a connection taken to send ahead goes back when interrupted",
        file="langgraph_colosseum/saver.py",
        original="        except BaseException:\n            pool.putconn(conn)\n            raise\n",
        mutant="        except ZeroDivisionError:\n            raise\n",
        tests=(
            f"{LIST_AHEAD}::test_a_list_interrupted_while_it_sends_ahead_gives_back_its_connection",
        ),
    ),
    Guard(
        name="list ahead (asyncio): a page whose connection was lost is read again",
        file="langgraph_colosseum/aio.py",
        original="            except Exception:  # as the blocking saver's _collect\n",
        mutant="            except ZeroDivisionError:\n",
        tests=(
            f"{LIST_AHEAD}"
            "::test_an_async_page_whose_connection_is_lost_while_read_ahead_is_read_again",
        ),
    ),
    Guard(
        name="list ahead (asyncio): a connection taken to send ahead goes back when cancelled",
        file="langgraph_colosseum/aio.py",
        original=(
            "        except BaseException:  # cancelled: the connection still goes back\n"
            "            await pool.putconn(conn)\n"
            "            raise\n"
        ),
        mutant="        except ZeroDivisionError:\n            raise\n",
        tests=(
            f"{LIST_AHEAD}"
            "::test_an_async_list_cancelled_while_it_sends_ahead_gives_back_its_connection",
        ),
    ),
    Guard(
        name="list ahead (asyncio): a caller cancelled at its page leaves the reply to be read",
        file="langgraph_colosseum/aio.py",
        original="return await asyncio.shield(handle.task)",
        mutant="return await handle.task",
        tests=(f"{LIST_AHEAD}::test_an_async_list_cancelled_while_it_waits_for_a_page_read_ahead",),
    ),
    Guard(
        name="telemetry: a page read ahead is a round trip of its list",
        file="langgraph_colosseum/_otel.py",
        original="        if cls is Collect:  # the reply of a request sent ahead: its round trip\n",
        mutant="        if False:\n",
        tests=(f"{LIST_AHEAD}::test_telemetry_counts_the_pages_read_ahead",),
    ),
    Guard(
        name="shared commit: the writes' locks are all taken before any of them runs",
        file="langgraph_colosseum/_core/sql.py",
        original="SELECT pg_advisory_xact_lock_shared(keys.class, keys.h)",
        mutant="SELECT keys.class, keys.h",
        tests=(
            f"{SHARED_COMMIT}::test_a_delete_of_several_threads_never_waits_in_a_cycle_with_writes_of_them",
        ),
    ),
    Guard(
        name="shared commit: the writes' locks are taken in the order a delete takes its own",
        file="langgraph_colosseum/_core/sql.py",
        original="ORDER BY keys.class, keys.h\n",
        mutant="ORDER BY keys.class, keys.h DESC\n",
        tests=(
            f"{SHARED_COMMIT}::test_the_write_locks_of_a_shared_transaction_are_taken_in_a_deletes_order",
        ),
    ),
    Guard(
        name="shared commit: the writes run in the order of their threads",
        file="langgraph_colosseum/_driver.py",
        original="    together.sort(key=lambda pair: pair[1][0])\n",
        mutant="\n",
        tests=(
            f"{SHARED_COMMIT}::test_two_shared_transactions_lock_the_rows_they_share_in_one_order",
        ),
    ),
    Guard(
        name="shared commit: a write's result is never one of a transaction that failed",
        file="langgraph_colosseum/_driver.py",
        original="if not failed and start == len(results):",
        mutant="if start == len(results):",
        tests=(
            f"{SHARED_COMMIT}::test_a_write_that_fails_fails_alone_and_its_neighbours_are_stored",
        ),
    ),
    Guard(
        name="shared commit: no lock is waited for longer than SHARED_LOCK_TIMEOUT",
        file="langgraph_colosseum/_core/sql.py",
        original="FROM (SELECT set_config('lock_timeout', %(lock_timeout)s, true)) AS bounded,",
        mutant="FROM (SELECT 1) AS bounded,",
        tests=(
            f"{SHARED_COMMIT}::test_a_shared_transaction_waiting_for_one_thread_holds_up_no_other_thread",
        ),
    ),
    Guard(
        name="run_guard: taking a thread waits for the writes that passed its fence",
        file="langgraph_colosseum/_core/threads.py",
        original='            take_lock(params["thread_id"]),\n',
        mutant="",
        tests=(
            f"{SHARED_COMMIT}::test_a_guard_taken_while_a_write_is_in_flight_waits_for_its_commit",
            f"{SHARED_COMMIT}::test_a_write_of_a_new_thread_checked_while_its_first_guard_is_taken_is_refused",
        ),
    ),
    Guard(
        name="fence: a lease is judged at the write's statement, not its transaction's start",
        file="langgraph_colosseum/_core/sql.py",
        original="    WHERE (run_owner IS NOT NULL AND run_lease_until > statement_timestamp()\n",
        mutant="    WHERE (run_owner IS NOT NULL AND run_lease_until > now()\n",
        tests=(
            f"{SHARED_COMMIT}::test_a_lease_is_judged_at_the_time_of_the_write_not_of_its_lock_wait",
        ),
    ),
    Guard(
        name="run guard: a lease counts from the acquire's statement, after its wait",
        file="langgraph_colosseum/_core/threads.py",
        original="1, statement_timestamp() + make_interval(secs => %(lease)s))",
        mutant="1, now() + make_interval(secs => %(lease)s))",
        tests=(
            f"{SHARED_COMMIT}::test_a_guard_that_waited_for_a_write_in_flight_gets_its_whole_lease",
        ),
    ),
    Guard(
        name="shared commit: a failed shared transaction leaves the DEALLOCATE retry",
        file="langgraph_colosseum/_driver.py",
        original="_PASSES = 3\n",
        mutant="_PASSES = 2\n",
        tests=(
            f"{SHARED_COMMIT}::test_writes_whose_shared_transaction_failed_first_then_meet_deallocate_are_stored",
        ),
    ),
    Guard(
        name="runs: taking a thread waits for the writes that passed its fence",
        file="langgraph_colosseum/_core/multitask.py",
        original='            take_lock(params["thread_id"]),\n',
        mutant="",
        tests=(
            f"{SHARED_COMMIT}::test_a_write_of_a_new_thread_checked_while_its_first_run_takes_it_is_refused",
        ),
    ),
]

# Copied into the temporary tree: what the tests import and read.
_IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", "*.pyc",
    "results", "node_modules",
)  # fmt: skip


@dataclass
class Outcome:
    guard: Guard
    result: str  # killed | survived | error
    seconds: float
    detail: str = ""


def check_texts(root: Path = ROOT, guards: list[Guard] = GUARDS) -> list[str]:
    """Problems with the table: a guard text missing, or found more than once."""
    problems = []
    for guard in guards:
        path = root / guard.file
        if not path.exists():
            problems.append(f"{guard.name}: {guard.file} does not exist")
            continue
        count = path.read_text().count(guard.original)
        if count != 1:
            problems.append(
                f"{guard.name}: its text occurs {count} times in {guard.file} (must be once): "
                f"{guard.original!r}"
            )
        if guard.original == guard.mutant:
            problems.append(f"{guard.name}: the mutant equals the original")
        if not guard.tests:
            problems.append(f"{guard.name}: no tests named")
    return problems


def _pytest(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[int | None, str]:
    """(exit code, or None on timeout; the output) of pytest on `tests` in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [
        sys.executable, "-m", "pytest", "-x", "-q", "--tb=short", "-p", "no:cacheprovider", *tests,
    ]  # fmt: skip
    try:
        done = subprocess.run(
            command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        return None, out
    return done.returncode, done.stdout + done.stderr


def _failures(output: str) -> str:
    """Why a run failed: its FAILED / ERROR summary lines and the first `E` line of each."""
    lines = output.splitlines()
    reasons = [line.strip() for line in lines if line.startswith("E   ")][:3]
    failed = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return "\n".join(failed + reasons)


def _imports_from(tree: Path) -> Path:
    """Where `langgraph_colosseum` is imported from when the tests run in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-c", "import langgraph_colosseum; print(langgraph_colosseum.__file__)"],
        cwd=tree, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return Path(out).resolve()


def run(guards: list[Guard], timeout: float) -> list[Outcome]:
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="colosseum-guards-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(ROOT, tree, ignore=_IGNORED)
        package = _imports_from(tree)
        if not package.is_relative_to(tree.resolve()):
            raise SystemExit(f"the copy imports langgraph_colosseum from {package}, not {tree}")
        # The tests must pass before anything is removed, or every mutant looks killed.
        baseline = tuple(dict.fromkeys(t for g in guards for t in g.tests))
        started = time.monotonic()
        code, tail = _pytest(tree, baseline, timeout * max(1, len(guards)))
        print(f"baseline: {len(baseline)} test ids, exit {code}, {time.monotonic() - started:.1f}s")
        if code != 0:
            raise SystemExit(f"the guard tests fail without any mutation:\n{tail[-4000:]}")
        for guard in guards:
            path = tree / guard.file
            text = path.read_text()
            path.write_text(text.replace(guard.original, guard.mutant, 1))
            started = time.monotonic()
            try:
                code, tail = _pytest(tree, guard.tests, timeout)
            finally:
                path.write_text(text)
            seconds = time.monotonic() - started
            if code == 0:
                outcome = Outcome(guard, "survived", seconds, tail[-2000:])
            elif code == 1:
                outcome = Outcome(guard, "killed", seconds, _failures(tail))
            elif code is None:
                outcome = Outcome(guard, "killed", seconds, f"timed out after {timeout}s")
            else:  # 2 interrupted, 3 internal error, 4 usage, 5 nothing collected
                outcome = Outcome(guard, "error", seconds, f"pytest exit {code}\n{tail[-2000:]}")
            print(f"  {outcome.result:8} {seconds:6.1f}s  {guard.name}", flush=True)
            outcomes.append(outcome)
    return outcomes


def report(outcomes: list[Outcome]) -> str:
    lines = ["| guard | file | tests | result | seconds |", "|---|---|---|---|---|"]
    for o in outcomes:
        tests = "<br>".join(t.split("::", 1)[-1] for t in o.guard.tests)
        result = o.result + (f" ({o.detail})" if o.detail.startswith("timed out") else "")
        lines.append(f"| {o.guard.name} | {o.guard.file} | {tests} | {result} | {o.seconds:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.guards", description=__doc__.split("\n")[0]
    )
    parser.add_argument("-k", dest="select", help="only the guards whose name contains this")
    parser.add_argument("--check", action="store_true", help="only check the table's texts")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per mutant")
    args = parser.parse_args(argv)
    guards = [g for g in GUARDS if not args.select or args.select.lower() in g.name.lower()]
    if not guards:
        print(f"no guard matches {args.select!r}")
        return 2
    problems = check_texts(ROOT, guards)
    for problem in problems:
        print(f"error: {problem}")
    if problems:
        return 2
    if args.check:
        print(f"{len(guards)} guard texts found, each exactly once")
        return 0
    outcomes = run(guards, args.timeout)
    print()
    print(report(outcomes))
    for o in outcomes:
        print(f"\n{o.result}: {o.guard.name}\n{o.detail}")
    survived = sum(o.result == "survived" for o in outcomes)
    errors = sum(o.result == "error" for o in outcomes)
    print(f"\n{len(outcomes) - survived - errors} killed, {survived} survived, {errors} errors")
    return 0 if survived == errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
