"""SQL text, as named constants. Nothing here opens a socket.

Parameters are named (``%(thread_id)s``). Values travel as jsonb text cast in
SQL (``::jsonb``), so no per-connection adapter setup is needed and a
user-supplied connection or pool works as it is. Arrays go in binary format
(``%(x)b``): in text format every quote of a JSON document would be escaped and
unescaped, which costs three times the jsonb parse itself.
"""

from __future__ import annotations


def compact(statement: str) -> str:
    """The statement without comments and indentation.

    psycopg caches the parsing of a statement only up to 4 KB
    (MAX_CACHED_STATEMENT_LENGTH); above that it reparses it on every call.
    The comments and layout here are for readers, not for the wire.
    """
    lines = (" ".join(line.split("--", 1)[0].split()) for line in statement.splitlines())
    return "\n".join(line for line in lines if line)


# A channel value row, as `values.ValueRow` reads it.
_VALUE_COLUMNS = """
    v.channel, v.version, v.base_version, v.encoding, v.value::text, v.value_bytes, v.value_type
"""

# A checkpoint's pending writes as one JSON text: an array of [task_id, idx,
# task_path, channel, encoding, value as JSON text, value_bytes in hex (whatever
# the server's bytea_output), value_type, state_version] (NULL: none), which the reader splits back into
# columns (store._expanded). Not one array per column: psycopg parses text[]
# and bytea[] results in Python, ~1.2 us per array, so nine per checkpoint cost
# 10.6 ms of client CPU per list page of 1,000 (the looping graph: two writes
# each), where orjson reads the same page's JSON in 0.7 ms. The value stays a
# JSON string inside it, parsed on its own as before: a tampered value nested
# deeper than orjson reads is that write's error, not the whole row's.
_WRITES = """
LEFT JOIN LATERAL (
    SELECT json_agg(json_build_array(
               w.task_id, w.idx, w.task_path, w.channel, w.encoding, w.value::text,
               encode(w.value_bytes, 'hex'), w.value_type, w.state_version))::text AS writes
    FROM colosseum_writes w
    WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
      AND w.checkpoint_id = c.checkpoint_id
) w ON true
"""

_CHECKPOINT_COLUMNS = """
    c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
    c.checkpoint::text, c.metadata::text, w.writes
"""

# A checkpoint, its pending writes, and every value row needed to rebuild the
# channel versions it names (each version and its chain of bases back to a
# full row): one row, one round trip. Versions the caller already holds
# decoded (`known`, a jsonb object channel -> version) are left out.
# A tampered row's channel_versions may be no object: read as none here, so
# that the reader reports the row (CorruptRowError) instead of the statement
# failing (jsonb_each_text on a non-object).
_VERSIONS_OF_C = """CASE jsonb_typeof(c.checkpoint -> 'channel_versions')
    WHEN 'object' THEN c.checkpoint -> 'channel_versions' ELSE '{}'::jsonb END"""

# The checkpoint's digest (`memo_digest`: SHA-256 of its document and
# metadata texts, the document's length first so that where one ends is not
# guessed), and whether it is the one the reader remembers decoded (`memo`:
# the digest it was sent with when it decoded it; empty: none, sent as bytes
# all the same, or the statement would be prepared twice): then its document,
# metadata and value rows are not sent (a conditional read, like HTTP's
# If-None-Match). The digest is of the row's content, not of where or when it
# was written: a rewritten row is another checkpoint even at the place and in
# the transaction of the one it replaced (CLUSTER, a restore), and an
# unchanged row moved by VACUUM FULL is still the one remembered. It is made
# here, not by the reader from the texts it got: the server's conversion to
# UTF-8 and Python's disagree on some characters of EUC_JP and EUC_KR. Its
# pending writes are sent either way: they are other rows, and change while
# the checkpoint does not. Value rows are taken as what their versions name,
# as the bases are (`known`): a version names one value forever.
_DIGEST = """sha256(convert_to(
        length(t.document)::text || ',' || t.document || t.metadata, 'UTF8'))"""
# Made in the joins, for the one checkpoint read, after the LIMIT that chose
# it: inside the LIMIT a plan could make it for every row of the thread before
# choosing (a generic plan at 5,000 checkpoints took 3-7 ms a read).

# The values a document carries (store.py, _inline_values) need no row; but a
# refill of the hot head carries every row: the head a later put advances it
# to does not carry a channel that put left unchanged, and its readers take
# that value from the hash's row (hot.py, `chains`).
_SKIP_INLINE = "AND NOT coalesce(d.inline ? ver.channel, false)"


def _tuple_joins(*, every_row: bool) -> str:
    """The joins of a get_tuple statement (see above); `every_row`: for a refill."""
    skip_inline = "" if every_row else _SKIP_INLINE
    return f"""
CROSS JOIN LATERAL (
    -- the texts made once, for the digest and the reply (OFFSET 0: pulled up,
    -- each was made again for each column naming it); so are the values the
    -- document carries (store.py, _inline_values), which need no row
    SELECT t.document, t.metadata, {_DIGEST} AS memo_digest, t.inline
    FROM (SELECT c.checkpoint::text AS document, c.metadata::text AS metadata,
                 c.checkpoint -> 'channel_values' AS inline OFFSET 0) AS t
    OFFSET 0
) AS d
CROSS JOIN LATERAL (
    SELECT d.memo_digest = %(memo)s::bytea AS remembered
) AS r
{_WRITES}
LEFT JOIN LATERAL (
    WITH RECURSIVE chain AS (
        -- LATERAL: one primary-key lookup per channel, never a join over every
        -- value row of the thread (which grows with its length).
        SELECT v.* FROM jsonb_each_text({_VERSIONS_OF_C}) AS ver(channel, version)
        CROSS JOIN LATERAL (
            SELECT * FROM colosseum_channel_values v
            WHERE v.thread_id = c.thread_id AND v.checkpoint_ns = c.checkpoint_ns
              AND v.channel = ver.channel AND v.version = ver.version
            LIMIT 1
        ) AS v
        WHERE %(known)s::jsonb ->> ver.channel IS DISTINCT FROM ver.version
          AND NOT r.remembered  -- the reader has them all (_DIGEST)
          {skip_inline}
      UNION ALL
        SELECT b.* FROM chain
        CROSS JOIN LATERAL (
            SELECT * FROM colosseum_channel_values b
            WHERE b.thread_id = chain.thread_id AND b.checkpoint_ns = chain.checkpoint_ns
              AND b.channel = chain.channel AND b.version = chain.base_version
            LIMIT 1
        ) AS b
    ) CYCLE channel, version SET in_cycle USING visited  -- a corrupt, cyclic chain ends
    -- as one JSON text, as the writes (_WRITES): [channel, version, base_version,
    -- encoding, value as JSON text, value_bytes, value_type] per row
    SELECT json_agg(json_build_array(
               v.channel, v.version, v.base_version, v.encoding, v.value::text,
               encode(v.value_bytes, 'hex'), v.value_type))::text AS value_rows
    FROM chain AS v
) cv ON true
"""


_TUPLE_COLUMNS = """
    c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
    CASE WHEN r.remembered THEN NULL ELSE d.document END,
    CASE WHEN r.remembered THEN NULL ELSE d.metadata END,
    w.writes, cv.value_rows, r.remembered, d.memo_digest
"""

_GET_TUPLE_BY_ID = f"""
SELECT {_TUPLE_COLUMNS}
FROM (
    SELECT * FROM colosseum_checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
      AND c.checkpoint_id = %(checkpoint_id)s
) AS c
{_tuple_joins(every_row=False)}
"""


# The latest checkpoint is chosen first, alone, and the joins read its one
# row. With the LIMIT above the joins instead, the plan's cost was the joins'
# cost divided by the rows the thread was estimated to have, which a custom
# plan (this thread) and the generic one (a thread of average length)
# estimate differently, and Postgres kept planning the statement afresh: in
# conc-32 (32 threads x 10 turns, load ~13) on 320 of 320 calls, 0.84 ms of
# planning per invoke; chosen first, on 170 of 320, 0.41 ms.
def _get_tuple_latest(*, every_row: bool) -> str:
    return f"""
SELECT {_TUPLE_COLUMNS}
FROM (
    SELECT * FROM colosseum_checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
    ORDER BY c.checkpoint_id DESC
    LIMIT 1
) AS c
{_tuple_joins(every_row=every_row)}
"""


# The thread's deletion epoch (schema migration 11; no row: 0), returned by
# every statement whose result goes to Redis (put, put_writes, a read that
# refills the head): the scripts compare it with the epoch the hash's contents
# came from (see hot.py, "Never stale"). In a write's own statement, which
# runs under the thread's write lock (WRITE_LOCK), no deletion can commit
# between this read and the write's commit: it is the epoch the write is of.
THREAD_EPOCH = """coalesce(
    (SELECT e.epoch FROM colosseum_thread_epochs e WHERE e.thread_id = %(thread_id)s), 0)"""

# The thread's last deletion as a run's first read saw it: its stamp
# (colosseum_deleted_threads.before, NULL: the thread id was never deleted).
# A run's writes and tool claims are refused once the stamp is another
# (_DELETED, ledger.CLAIM). Every deletion of a thread id writes a stamp
# unlike its last one (_DELETED_THREAD), so "another stamp" is "deleted since
# the read": an equality of values Postgres made, no clock compared with another.
THREAD_DELETED = """(SELECT g.before FROM colosseum_deleted_threads g
        WHERE g.thread_id = %(thread_id)s)"""


def _read_with_deletion(read: str, epoch: bool = False) -> str:
    """`read`'s row after the thread's deletion stamp (and, for a refill of the
    hot head, its deletion epoch), from one snapshot, and a row even when
    `read` finds no checkpoint (its columns then NULL): what the run read and
    the deletion it read after are one answer."""
    first = f"{THREAD_EPOCH} AS epoch, " if epoch else ""
    return f"""
SELECT {first}{THREAD_DELETED} AS deleted, found.*
FROM (SELECT 1) AS one
LEFT JOIN LATERAL ({read}) AS found ON true
"""


GET_TUPLE_BY_ID = _read_with_deletion(_GET_TUPLE_BY_ID)
GET_TUPLE_LATEST = _read_with_deletion(_get_tuple_latest(every_row=False))
# The latest checkpoint for a refill of the hot head: the thread's deletion
# epoch first, read in the same statement (one snapshot) as the checkpoint,
# and a row even when there is no checkpoint (the head then records "none"
# at that epoch, and the deletion stamp the run reading it is given).
GET_TUPLE_LATEST_FOR_HEAD = _read_with_deletion(_get_tuple_latest(every_row=True), epoch=True)

# A get_tuple's statement on its generic plan, as a write's (WRITE_LOCK): sent
# before it in one implicit transaction (set_config(..., true) is SET LOCAL).
# Left to choose, Postgres planned GET_TUPLE afresh on long stretches of calls
# (0.23-0.27 ms a plan against 0.03-0.04 ms of execution): at 10,000 threads
# on a fresh thread of 22 turns, 50 of 50 reads, then 50 of the next 50;
# after a bulk load, 41 of 50 while autovacuum ran; chat-200, 74 of 200. Its
# generic plan is the index lookups it must be (tests/integration/test_plans.py).
GENERIC_PLAN = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"

# `list` pages: checkpoints and writes only; their values come from VALUE_CHAINS,
# once per page, shared by every checkpoint that names the same versions.
# `where` is built from fixed fragments in `store.py` only.
LIST_PAGE = f"""
SELECT {_CHECKPOINT_COLUMNS}
FROM (
    SELECT * FROM colosseum_checkpoints c
    WHERE {{where}}
    ORDER BY {{order}}
    LIMIT %(page_size)s
) AS c
{_WRITES}
ORDER BY {{order}}
"""
# Newest first. With the thread (and namespace) fixed, the order and the page
# cursor follow an index, so each page is an index range scan, not a sort of the
# whole thread: (thread, ns, id) is the primary key, (thread, id, ns) the
# colosseum_checkpoints_thread_order index.
LIST_ORDER_IN_NAMESPACE = "c.checkpoint_id DESC"
LIST_CURSOR_IN_NAMESPACE = "c.checkpoint_id < %(cursor_id)s"
LIST_ORDER_IN_THREAD = "c.checkpoint_id DESC, c.checkpoint_ns DESC"
LIST_CURSOR_IN_THREAD = "(c.checkpoint_id, c.checkpoint_ns) < (%(cursor_id)s, %(cursor_ns)s)"
LIST_ORDER_ANYWHERE = "c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC"
LIST_CURSOR_ANYWHERE = (
    "(c.checkpoint_id, c.thread_id, c.checkpoint_ns) "
    "< (%(cursor_id)s, %(cursor_thread)s, %(cursor_ns)s)"
)
LIST_WHERE_THREAD = "c.thread_id = %(thread_id)s"
LIST_WHERE_NS = "c.checkpoint_ns = %(checkpoint_ns)s"
LIST_WHERE_ID = "c.checkpoint_id = %(checkpoint_id)s"
LIST_WHERE_BEFORE = "c.checkpoint_id < %(before)s"
# Exact jsonb equality per key, which is InMemorySaver's
# `query_value == metadata.get(key)`: a missing key equals a None filter value.
LIST_WHERE_METADATA = "coalesce(c.metadata -> %(mk{i})s, 'null'::jsonb) = %(mv{i})s::jsonb"
# A filter value holding a dict whose key order the stored value may have
# recorded: containment first (a necessary condition, the recorded order being
# an extra key), then `==` in Python on the decoded metadata (`list`).
LIST_WHERE_METADATA_CONTAINS = "c.metadata -> %(mk{i})s @> %(mv{i})s::jsonb"

# The value rows of some (thread, ns, channel, version) keys and of their bases,
# each row once. The walk stops at keys the caller already has (`known_*`).
# The walk carries each row's key and its `ctid`, not its value (UNION compares
# whole rows, and a value may be large); the rows found are then read back by
# `ctid`, a TID scan, not a second descent of the primary key per row: a `list`
# page of 1,000 checkpoints of two value rows each spent 18.8 ms in this
# statement, half of it in that second lookup. A ctid names the row version
# this statement's snapshot saw when it walked, and that snapshot reads it back.
VALUE_CHAINS = f"""
WITH RECURSIVE wanted(thread_id, checkpoint_ns, channel, version, base_version, row_id) AS (
    SELECT v.thread_id, v.checkpoint_ns, v.channel, v.version, v.base_version, v.ctid
    FROM unnest(%(threads)b::text[], %(namespaces)b::text[], %(channels)b::text[],
                %(versions)b::text[]) AS k(thread_id, checkpoint_ns, channel, version)
    CROSS JOIN LATERAL (
        SELECT *, ctid FROM colosseum_channel_values v
        WHERE v.thread_id = k.thread_id AND v.checkpoint_ns = k.checkpoint_ns
          AND v.channel = k.channel AND v.version = k.version
        LIMIT 1
    ) AS v
  UNION
    SELECT b.thread_id, b.checkpoint_ns, b.channel, b.version, b.base_version, b.ctid
    FROM wanted
    CROSS JOIN LATERAL (
        SELECT *, ctid FROM colosseum_channel_values b
        WHERE b.thread_id = wanted.thread_id AND b.checkpoint_ns = wanted.checkpoint_ns
          AND b.channel = wanted.channel AND b.version = wanted.base_version
        LIMIT 1
    ) AS b
    WHERE NOT EXISTS (
        SELECT 1 FROM unnest(%(known_threads)b::text[], %(known_namespaces)b::text[],
                             %(known_channels)b::text[], %(known_versions)b::text[])
             AS known(thread_id, checkpoint_ns, channel, version)
        WHERE known.thread_id = b.thread_id AND known.checkpoint_ns = b.checkpoint_ns
          AND known.channel = b.channel AND known.version = b.version)
)
SELECT v.thread_id, v.checkpoint_ns, {_VALUE_COLUMNS}
FROM wanted
JOIN colosseum_channel_values v ON v.ctid = wanted.row_id
"""

# The database incarnation a Redis head must belong to (see hot.py): the
# token, the database's oid and the token table's oid. A restore into another
# database changes the first oid, one into this database (which recreates
# the table) the second, and recovery that empties UNLOGGED tables the token.
# NULL when the token is gone: the caller makes one (ENSURE_INCARNATION).
INCARNATION = """
(SELECT i.token || '.' || d.oid || '.' || 'colosseum_incarnation'::regclass::oid
 FROM colosseum_incarnation i, pg_database d WHERE d.datname = current_database())
"""

# Stale heads waiting to be dropped, as (thread_id, head_key, recorded_at):
# the writes that piggy-back them return a few each time.
STALE_HEADS_PAGE = 64
STALE_HEADS = f"""
ARRAY(SELECT ARRAY[s.thread_id, s.head_key, s.recorded_at::text]
      FROM colosseum_stale_heads s LIMIT {STALE_HEADS_PAGE})
"""

# Deleted stays deleted. A write is refused when a checkpoint of its
# `lineage` is recorded as deleted (colosseum_tombstones), when its thread was
# deleted since its run first read it (`seen`: the deletion stamp that read
# returned, '' for none or for a run this process forgot, see store.seen_of;
# NULL for a write outside a LangGraph run, which read nothing: not checked),
# or (a put) when its run was deleted. A checkpoint that was never stored is
# not a deleted one: LangGraph sends a step's writes before its checkpoint's
# put, and a put may name a parent this saver never saw.
#
# Writes and deletes of a thread exclude each other with an advisory lock on
# it (WRITE_LOCK, shared, in the write's transaction, before the write's
# statement; DELETE_LOCK, exclusive, first in a delete's): a delete waits for
# the writes in flight and deletes what they wrote, and a write that comes
# after it starts its statement after the delete's commit, so it sees what the
# delete recorded. One statement alone could not: what commits while it waits
# is not in its snapshot (READ COMMITTED), and a new thread has no row to lock.
# delete_for_runs does the same per run (a run's first put names no thread it
# could know of): RUNS_LOCK, exclusive, then it records the runs as deleted.
THREAD_LOCK_CLASS = 0x636F6C  # the advisory lock spaces of colosseum threads and runs
RUN_LOCK_CLASS = 0x636F6D
#
# The same statement makes the write's own statement, prepared, run on its
# generic plan (set_config(..., true) is SET LOCAL: this transaction only, so
# safe behind a transaction-mode pooler). Postgres's default plan choice kept
# planning PUT afresh once the tables had statistics: its estimate of the
# generic plan, made without the keys, loses to the custom plans' by a little,
# so each put paid ~1 ms of planning for ~0.2 ms of execution. Every lookup in
# PUT and PUT_WRITES is by primary key, so the generic plan is the right one
# whatever the keys (tests/integration/test_plans.py checks it).
WRITE_LOCK = f"""
SELECT pg_advisory_xact_lock_shared({THREAD_LOCK_CLASS}, hashtext(%(thread_id)s)),
       CASE WHEN %(run_id)s::text IS NOT NULL
            THEN pg_advisory_xact_lock_shared({RUN_LOCK_CLASS}, hashtext(%(run_id)s)) END,
       set_config('plan_cache_mode', 'force_generic_plan', true)
"""
# With on_conflict="raise" (see _OPTIMISTIC below) every write of a thread
# also takes the thread's head lock, exclusive, before its statement: the
# statement's snapshot is then taken after the commit of the write before it,
# so its check of the head and the claim sees that write. Without the lock two
# writers that read the same head both pass the check (READ COMMITTED: neither
# sees the other's uncommitted row). One lock for the whole thread, not one per
# namespace: a subgraph's write is checked against the root as well, and must
# see the root writes committed before it.
HEAD_LOCK_CLASS = 0x636F6E
WRITE_LOCK_ON_CONFLICT = (
    WRITE_LOCK.rstrip()
    + f""",
       pg_advisory_xact_lock({HEAD_LOCK_CLASS}, hashtext(%(thread_id)s))
"""
)
# The write locks of several writes committed as one transaction (see
# _driver._SHARED_COMMIT), taken before any of them runs, threads first, then
# runs, each class in the order of its keys: the order DELETE_LOCK and
# RUNS_LOCK take theirs, so a delete of several threads and such a
# transaction never each hold a lock the other waits for. Each write's own
# WRITE_LOCK then finds its locks held. `lock_timeout`, for this transaction
# alone (SET LOCAL), bounds every lock wait of it (_driver.SHARED_LOCK_TIMEOUT).
SHARED_WRITE_LOCKS = f"""
SELECT pg_advisory_xact_lock_shared(keys.class, keys.h)
FROM (SELECT set_config('lock_timeout', %(lock_timeout)s, true)) AS bounded,
     (SELECT {THREAD_LOCK_CLASS} AS class, hashtext(t) AS h
      FROM unnest(%(thread_ids)b::text[]) AS t
      UNION
      SELECT {RUN_LOCK_CLASS}, hashtext(r) FROM unnest(%(run_ids)b::text[]) AS r
      WHERE r IS NOT NULL) AS keys
ORDER BY keys.class, keys.h
"""
RUNS_LOCK = f"""
SELECT pg_advisory_xact_lock({RUN_LOCK_CLASS}, h)
FROM (SELECT DISTINCT hashtext(r) AS h FROM unnest(%(run_ids)b::text[]) AS r) AS keys
ORDER BY h
"""
DELETE_LOCK = f"""
SELECT pg_advisory_xact_lock({THREAD_LOCK_CLASS}, h)
FROM (SELECT DISTINCT hashtext(t) AS h FROM unnest(%(thread_ids)b::text[]) AS t) AS keys
ORDER BY h  -- two deletes of the same threads take them in one order
"""

_DELETED = """
fence AS (
    SELECT run_owner, run_token, run_lease_until FROM colosseum_threads
    WHERE thread_id = %(thread_id)s
    FOR KEY SHARE
),
deleted AS (
    -- a checkpoint of the write's lineage (store.lineage_params: the pairs
    -- (ns, id) of its parent, itself and each enclosing namespace's checkpoint,
    -- as `length(ns):ns id` keys, whose ns and ids the index probe narrows to)
    SELECT d.checkpoint_id FROM colosseum_tombstones d
    WHERE d.thread_id = %(thread_id)s AND d.checkpoint_ns = ANY(%(lineage_ns)b::text[])
      AND d.checkpoint_id = ANY(%(lineage_ids)b::text[])
      AND length(d.checkpoint_ns) || ':' || d.checkpoint_ns || d.checkpoint_id
          = ANY(%(lineage_keys)b::text[])
    UNION ALL
    -- the thread was deleted since the run's first read (see THREAD_DELETED;
    -- its put, or the put of the run's first checkpoint, had not landed yet)
    SELECT %(checkpoint_id)s AS checkpoint_id FROM colosseum_deleted_threads g
    WHERE g.thread_id = %(thread_id)s AND g.before <> %(seen)s::text
    {more}
),
"""

# A fence checked where the write happens. Refused: a write while another run
# holds the thread (run_guard) with a live lease; and a write made inside a
# guard that no longer owns the thread with its token (lease lost: its lease
# lapsed and another run took the thread, or the row is gone). The row is
# locked (`fence`, KEY SHARE), and its thread's write lock held from before
# the check to the commit (WRITE_LOCK), so a guard taken meanwhile waits for
# this write's commit (threads.TAKE_LOCK). A lease is judged at the
# statement's own time (statement_timestamp(), not now(), the transaction's
# start: a write may have waited for its thread's lock, or run after other
# writes of its transaction, _driver._SHARED_COMMIT).
_FENCED = """
fenced AS (
    SELECT 1 FROM fence
    WHERE (run_owner IS NOT NULL AND run_lease_until > statement_timestamp()
           AND run_owner IS DISTINCT FROM %(run_owner)s::text)
       OR (%(run_owner)s::text IS NOT NULL
           AND (run_owner IS DISTINCT FROM %(run_owner)s::text
                OR run_token IS DISTINCT FROM %(run_token)s::bigint))
    UNION ALL
    SELECT 1 WHERE %(run_owner)s::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM fence)
),
"""

# A put of a run that delete_for_runs removed.
_DELETED_RUN = """
    UNION ALL
    SELECT %(checkpoint_id)s AS checkpoint_id FROM colosseum_deleted_runs r
    WHERE r.run_id = %(run_id)s::text
"""

# on_conflict="raise": optimistic concurrency without a run guard. Two
# workers that read the same head cannot both continue from it: the first to
# write wins, the other's write is refused in its statement (nothing stored).
#
# Which writes are checked (`checked`, decided in store.py): those of a run
# whose first read of this (thread, namespace) asked for the latest
# checkpoint. A run that named its checkpoint (time travel, a replay,
# update_state on a past checkpoint, LangGraph's own "fork" puts) forks on
# purpose and is not checked. The put itself cannot tell them apart: LangGraph
# copies the loaded checkpoint's config into every later put, so each put
# names its parent whichever way the run began; metadata "source" is "input"
# or "update" both for a continuation and for a fork from a past checkpoint;
# and a run_id is there only when the caller set one. The read is what
# differs, and LangGraph makes one RunControl per run (its subgraphs share
# it) that every get_tuple, put and put_writes config of the run carries.
#
# The head of (thread, namespace) is its newest checkpoint, which is what a
# latest read returns. The claim of a checkpoint is a write row in a reserved
# slot (CLAIM_TASK_ID, CLAIM_IDX) whose task_path names the run (a token)
# that wrote to the checkpoint last; readers drop it from pending writes
# (store.py) and remember the claim they saw. It lives in the pending writes
# so that it travels with them to and from the Redis head unchanged.
#   put (parent P):          refused unless the head is P (or this checkpoint,
#                            put again), and P's claim is the one the run saw or its own;
#   put_writes (to C):       refused unless the head is C, the checkpoint the run
#                            read, or one it put, and C's claim is the one it saw or its own;
#                            then C's claim becomes this run's.
# A run's steps after the checkpoint it read are its own, so it saw no claim
# on them: a claim there is another run that read them as latest meanwhile.
#
# One decision per run, not one per namespace. A subgraph's writes go to a
# namespace of their own ("node:<task id>"), whose head and claims say nothing
# about the root: two runs resuming an interrupt() raised in a subgraph write
# the resume value at the root and the subgraph's steps in its namespace, and
# checked apart each could lose in a different one (both refused, or one
# handed the other's answer). So a write in a subgraph namespace is also
# checked against the root (`root_head`, `root_conflict`), as the run read it
# (params root_*): the root head must be the root checkpoint the run read or
# one it put, and its claim the one the run saw there or its own; then the
# write claims the root head (`root_claimed`). Whichever write of the two runs
# reaches Postgres first, in any namespace, decides: every later write of the
# other, in any namespace, is refused. The root's own writes need nothing more:
# they check the root already.
#
# A claim alone cannot tell a run that stopped at a checkpoint (an interrupt,
# an error: the next run may go on from there) from one still under way in a
# subgraph: a run that read the claim mid-run and took the head over would
# read the other's half-done subgraph (and finish with its answer, or both be
# refused). So the root claim also says which of its run's subgraph tasks are
# under way (`held`): its value is {root task id: when the run last wrote
# under it, epoch seconds on Postgres's clock}. A write in a subgraph
# namespace ("name:<task id>|...") adds its root task (`root_claimed`); the
# run's own write of that task at the root closes it (`claimed`): LangGraph
# records every task that ends, at the parent checkpoint (its output, its
# interrupt, its error), before the run moves on or stops. While another
# run's task is held, a checked write to that checkpoint or under it is
# refused. A run that never closes its task (it died, or stopped at a static
# breakpoint inside the subgraph: LangGraph records nothing for that at the
# root) holds it for `hold` seconds after its last write there (NULL: until
# the head moves, e.g. by update_state).
CLAIM_TASK_ID = "__colosseum_claim__"
CLAIM_IDX = -100  # negative: a special slot, replaced on write, in Postgres and Redis
CLAIM_CHANNEL = "__colosseum_claim__"

# Whether the open tasks `{open}` of a claim (see above) still hold it.
_HELD = """EXISTS (
            SELECT 1 FROM jsonb_each_text(CASE WHEN jsonb_typeof({open}) = 'object'
                                               THEN {open} END) AS held
            WHERE %(hold)s::float8 IS NULL
               OR held.value::float8 > extract(epoch FROM statement_timestamp()) - %(hold)s::float8)"""

_OPTIMISTIC = f"""
head AS (
    SELECT (SELECT h.checkpoint_id FROM colosseum_checkpoints h
            WHERE h.thread_id = %(thread_id)s AND h.checkpoint_ns = %(checkpoint_ns)s
            ORDER BY h.checkpoint_id DESC LIMIT 1) AS id,
           c.task_path AS claim, c.value AS open
    FROM (SELECT) AS one
    LEFT JOIN colosseum_writes c
      ON c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
     AND c.checkpoint_id = %(claimed_id)s::text
     AND c.task_id = '{CLAIM_TASK_ID}' AND c.idx = {CLAIM_IDX}
),
root_head AS (
    SELECT r.id, c.task_path AS claim, c.value AS open
    FROM (SELECT (SELECT h.checkpoint_id FROM colosseum_checkpoints h
                  WHERE h.thread_id = %(thread_id)s AND h.checkpoint_ns = ''
                  ORDER BY h.checkpoint_id DESC LIMIT 1) AS id) AS r
    LEFT JOIN colosseum_writes c
      ON c.thread_id = %(thread_id)s AND c.checkpoint_ns = '' AND c.checkpoint_id = r.id
     AND c.task_id = '{CLAIM_TASK_ID}' AND c.idx = {CLAIM_IDX}
    WHERE %(root_checked)s::boolean
),
root_held AS (
    SELECT root_head.id FROM root_head
    WHERE root_head.claim IS DISTINCT FROM %(writer)s::text
      AND {_HELD.format(open="root_head.open")}
),
root_conflict AS (
    SELECT root_head.id FROM root_head
    WHERE NOT (root_head.id IS NOT DISTINCT FROM %(root_read)s::text
               OR root_head.id = ANY(%(root_own)s::text[]))
       OR (root_head.claim IS DISTINCT FROM %(writer)s::text
           AND root_head.claim IS DISTINCT FROM
               CASE WHEN root_head.id = %(root_read)s::text THEN %(root_seen)s::text END)
    UNION ALL SELECT id FROM root_held
),
held_here AS (
    SELECT head.id FROM head
    WHERE %(checked)s::boolean AND head.claim IS DISTINCT FROM %(writer)s::text
      AND {_HELD.format(open="head.open")}
),
conflict AS (
    SELECT head.id FROM head
    WHERE %(checked)s::boolean AND (
        {{head_moved}}
        OR (head.claim IS DISTINCT FROM %(seen_claim)s::text
            AND head.claim IS DISTINCT FROM %(writer)s::text))
    UNION ALL SELECT id FROM held_here
    UNION ALL SELECT id FROM root_conflict
),
"""
# A subgraph's write that passed claims the root head for its run (see above),
# and holds its root task there, as of now.
_ROOT_CLAIMED = f"""
root_claimed AS (
    INSERT INTO colosseum_writes
        (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
         encoding, value, run_id)
    SELECT %(thread_id)s, '', root_head.id, '{CLAIM_TASK_ID}', {CLAIM_IDX}, %(writer)s::text,
           '{CLAIM_CHANNEL}', 'json',
           jsonb_build_object(%(root_task)s::text, extract(epoch FROM statement_timestamp())),
           %(run_id)s::text
    FROM root_head
    WHERE root_head.id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM refused)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    DO UPDATE SET task_path = EXCLUDED.task_path, run_id = EXCLUDED.run_id,
                  value = CASE WHEN colosseum_writes.task_path = EXCLUDED.task_path
                                    AND jsonb_typeof(colosseum_writes.value) = 'object'
                               THEN colosseum_writes.value || EXCLUDED.value
                               ELSE EXCLUDED.value END
    RETURNING checkpoint_id
),"""
# The optimistic statements' last columns: whether refused as a loser, the
# namespace's head; whether the root refused it, the root head; the root
# checkpoint whose claim became this run's (for the Redis head); whether
# another run's subgraph task held what it wrote to.
_CONFLICT_COLUMNS = """,
       EXISTS (SELECT 1 FROM conflict) AS conflict, (SELECT id FROM head) AS head,
       EXISTS (SELECT 1 FROM root_conflict) AS root_conflict,
       (SELECT id FROM root_head) AS root_head,
       (SELECT checkpoint_id FROM root_claimed
        WHERE (SELECT claim FROM root_head) IS DISTINCT FROM %(writer)s::text) AS root_claimed,
       EXISTS (SELECT 1 FROM held_here UNION ALL SELECT 1 FROM root_held) AS held"""
_PUT_HEAD_MOVED = (
    "NOT (head.id IS NOT DISTINCT FROM %(parent_checkpoint_id)s::text"
    " OR head.id = %(checkpoint_id)s)"
)
_WRITES_HEAD_MOVED = "(head.id IS NOT NULL AND head.id <> ALL(%(heads)s::text[]))"


# What the Redis head needs of a write (hot.py): the database incarnation,
# heads to drop, and the thread's deletion epoch. A saver without Redis sends
# the statement without them (the `_NO_HEAD` variants, NULL in their place):
# four reads and four more tables to lock and set up per write, which took
# ~12% of a direct put's backend CPU and answer nothing such a saver uses.
_HEAD_COLUMNS = (
    f"{INCARNATION} AS incarnation, {STALE_HEADS} AS stale_heads, {THREAD_EPOCH} AS epoch"
)
_PUT_HEAD_COLUMNS = f"""
       -- The checkpoint's writes that committed first (LangGraph sends puts in
       -- the background): the hot head may only advance if it holds them all.
       ARRAY(SELECT w.idx || ':' || w.task_id FROM colosseum_writes w
             WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
               AND w.checkpoint_id = %(checkpoint_id)s) AS writes_before,
       {_HEAD_COLUMNS}"""
_NO_HEAD_COLUMNS = "NULL AS incarnation, NULL AS stale_heads, NULL AS epoch"


# The checkpoint row and its changed values in one statement. A delta row
# needs its base: the base rows are locked (FOR KEY SHARE, so a concurrent
# prune skips them) and if any is gone (pruned after this process cached it),
# nothing is written and `missing_bases` tells the caller to retry full.
def _put(optimistic: bool, head: bool = True) -> str:
    conflict = _OPTIMISTIC.format(head_moved=_PUT_HEAD_MOVED) if optimistic else ""
    conflicted = "UNION ALL SELECT 1 FROM conflict" if optimistic else ""
    root_claimed = _ROOT_CLAIMED if optimistic else ""
    conflict_columns = _CONFLICT_COLUMNS if optimistic else ""
    return compact(
        f"""
WITH
{_DELETED.format(more=_DELETED_RUN)}
input AS (
    SELECT * FROM unnest(%(channels)b::text[], %(versions)b::text[], %(encodings)b::text[],
                         %(jsons)b::text[], %(datas)b::bytea[], %(types)b::text[],
                         %(bases)b::text[], %(depths)b::int[])
         AS u(channel, version, encoding, value, value_bytes, value_type, base_version, depth)
),
-- each delta row's base, locked; `found` NULL: the base is gone
bases AS (
    SELECT i.channel, b.version AS found FROM input i
    LEFT JOIN LATERAL (
        SELECT b.version FROM colosseum_channel_values b
        WHERE b.thread_id = %(thread_id)s AND b.checkpoint_ns = %(checkpoint_ns)s
          AND b.channel = i.channel AND b.version = i.base_version
        LIMIT 1
        FOR KEY SHARE
    ) AS b ON true
    WHERE i.base_version IS NOT NULL
),
missing AS (SELECT channel FROM bases WHERE found IS NULL),
{_FENCED}
{conflict}
refused AS (
    SELECT 1 FROM missing UNION ALL SELECT 1 FROM deleted UNION ALL SELECT 1 FROM fenced
    {conflicted}
),{root_claimed}
-- A refused put is recorded as deleted too, so the writes of its tasks are
-- refused after it; those that landed first (durability="async") go with it.
-- (The writes of the steps LangGraph runs after it: see _core/runs.py.)
bury AS (
    INSERT INTO colosseum_tombstones (thread_id, checkpoint_ns, checkpoint_id)
    SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s
    WHERE EXISTS (SELECT 1 FROM deleted)
    ON CONFLICT DO NOTHING
),
early_writes_gone AS (
    DELETE FROM colosseum_writes
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
      AND checkpoint_id = %(checkpoint_id)s AND EXISTS (SELECT 1 FROM deleted)
),
-- with the registry row those writes alone made (a status, no checkpoint);
-- not a row a run holds (run_guard, saver.runs): it is the fence of that run's writes
early_row_gone AS (
    DELETE FROM colosseum_threads t
    WHERE t.thread_id = %(thread_id)s AND EXISTS (SELECT 1 FROM deleted)
      AND t.head_checkpoint_id IS NULL AND t.run_owner IS NULL
      AND NOT EXISTS (SELECT 1 FROM colosseum_checkpoints c WHERE c.thread_id = t.thread_id)
),
-- An interrupt or error written before this put (durability="async") is the
-- status a new registry row starts with.
early AS (
    SELECT CASE WHEN bool_or(channel = '__error__') THEN 'error'
                WHEN bool_or(channel = '__interrupt__') THEN 'interrupted' END AS status
    FROM colosseum_writes
    WHERE thread_id = %(thread_id)s AND checkpoint_ns = '' AND %(checkpoint_ns)s = ''
      AND checkpoint_id = %(checkpoint_id)s AND idx < 0
),
registry AS (
    INSERT INTO colosseum_threads AS t
        (thread_id, metadata, state_values, head_checkpoint_id, expires_at, status,
         status_checkpoint_id)
    SELECT %(thread_id)s, %(run_metadata)s::jsonb, %(values_set)s::jsonb, %(checkpoint_id)s,
           statement_timestamp() + %(ttl)s::interval, coalesce(early.status, 'idle'),
           CASE WHEN early.status IS NOT NULL THEN %(checkpoint_id)s END
    FROM early
    WHERE %(checkpoint_ns)s = '' AND NOT EXISTS (SELECT 1 FROM refused)
    ON CONFLICT (thread_id) DO UPDATE
    -- LangGraph sends puts and put_writes in the background, on several
    -- connections, in no fixed order: the interrupt of a later checkpoint can
    -- land before the put of an earlier one. A status recorded for this
    -- checkpoint or a later one stays. Decided from the row itself, which the
    -- upsert has locked, so no commit order can lose it.
    -- updated_at moves at most once a second: the other puts of a run then
    -- change no indexed column, and Postgres updates the row in place (HOT).
    SET updated_at = CASE WHEN t.updated_at < statement_timestamp() - interval '1 second'
                          THEN statement_timestamp() ELSE t.updated_at END,
        -- 'busy' only while its guard's lease is live: a holder that died
        -- leaves the status to the runs after it.
        status = CASE
            WHEN t.status = 'busy' AND t.run_lease_until > statement_timestamp() THEN 'busy'
            WHEN EXCLUDED.head_checkpoint_id < coalesce(t.head_checkpoint_id, '') THEN t.status
            WHEN EXCLUDED.status <> 'idle' THEN EXCLUDED.status
            WHEN t.status IN ('interrupted', 'error')
                 AND t.status_checkpoint_id >= EXCLUDED.head_checkpoint_id THEN t.status
            ELSE 'idle' END,
        status_checkpoint_id = CASE
            WHEN EXCLUDED.status <> 'idle'
                 AND EXCLUDED.head_checkpoint_id >= coalesce(t.head_checkpoint_id, '')
            THEN EXCLUDED.status_checkpoint_id ELSE t.status_checkpoint_id END,
        metadata = t.metadata || EXCLUDED.metadata,
        -- Who set each key last (schema migration 12), for `rollback`: a run's
        -- put makes the key its own and keeps what the key held before, unless
        -- the key is its own already (what it held before the run stays); a
        -- put outside any run sets it for nobody a rollback would undo.
        metadata_undo = CASE
            WHEN EXCLUDED.metadata = '{{}}'::jsonb THEN t.metadata_undo
            WHEN %(run_token)s::bigint IS NULL
            THEN t.metadata_undo - ARRAY(SELECT jsonb_object_keys(EXCLUDED.metadata))
            ELSE t.metadata_undo || coalesce((
                SELECT jsonb_object_agg(k.key, CASE
                    WHEN t.metadata ? k.key
                    THEN jsonb_build_object('t', %(run_token)s::bigint, 'v', t.metadata -> k.key)
                    ELSE jsonb_build_object('t', %(run_token)s::bigint) END)
                FROM jsonb_object_keys(EXCLUDED.metadata) AS k(key)
                WHERE t.metadata_undo -> k.key -> 't'
                      IS DISTINCT FROM to_jsonb(%(run_token)s::bigint)), '{{}}')
            END,
        state_values = CASE WHEN EXCLUDED.head_checkpoint_id >= coalesce(t.head_checkpoint_id, '')
                            THEN (t.state_values - %(values_del)s::text[]) || EXCLUDED.state_values
                            ELSE t.state_values END,
        head_checkpoint_id = greatest(t.head_checkpoint_id, EXCLUDED.head_checkpoint_id),
        expires_at = EXCLUDED.expires_at
),
new_values AS (
    INSERT INTO colosseum_channel_values
        (thread_id, checkpoint_ns, channel, version, encoding, value, value_bytes, value_type,
         base_version, depth)
    SELECT %(thread_id)s, %(checkpoint_ns)s, i.channel, i.version, i.encoding,
           i.value::jsonb, i.value_bytes, i.value_type, i.base_version, i.depth
    FROM input i
    WHERE NOT EXISTS (SELECT 1 FROM refused)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
    RETURNING channel
),
new_checkpoint AS (
    INSERT INTO colosseum_checkpoints
        (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, checkpoint, metadata)
    SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(parent_checkpoint_id)s,
           %(run_id)s, %(checkpoint)s::jsonb, %(metadata)s::jsonb
    WHERE NOT EXISTS (SELECT 1 FROM refused)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id)
    DO UPDATE SET checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata,
                  run_id = EXCLUDED.run_id
)
SELECT ARRAY(SELECT channel FROM missing) AS missing_bases,
       ARRAY(SELECT channel FROM new_values) AS inserted,
       EXISTS (SELECT 1 FROM fenced) AS fenced,
       (SELECT checkpoint_id FROM deleted LIMIT 1) AS deleted,
       {_PUT_HEAD_COLUMNS if head else "NULL AS writes_before, " + _NO_HEAD_COLUMNS}
       {conflict_columns}
"""
    )


PUT = _put(optimistic=False)
PUT_ON_CONFLICT = _put(optimistic=True)
PUT_NO_HEAD = _put(optimistic=False, head=False)


# The thread's status, when a write is an interrupt or an error at the root
# (store.py: `status`). The writes of a task, the common case, are sent
# without it: its INSERT would set nothing, but opening colosseum_threads and
# its indexes for it was paid on every call (0.73 -> 0.65 ms of backend CPU
# per put_writes, README "The Postgres side of a write").
_WRITES_STATUS = """
status AS (
    -- An interrupt or an error at the root head is the thread's status.
    -- An upsert: these writes may reach Postgres before their checkpoint's put
    -- (and before the put that creates the row, which it then waits for). A
    -- deleted thread is not created again: its writes are refused.
    INSERT INTO colosseum_threads AS t (thread_id, status, status_checkpoint_id)
    SELECT %(thread_id)s, %(status)s, %(checkpoint_id)s
    WHERE %(status)s::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM refused)
    ON CONFLICT (thread_id) DO UPDATE
    SET status = CASE WHEN t.status = 'busy' AND t.run_lease_until > statement_timestamp() THEN 'busy'
                      ELSE EXCLUDED.status END,
        status_checkpoint_id = EXCLUDED.status_checkpoint_id, updated_at = statement_timestamp()
    WHERE coalesce(t.head_checkpoint_id, '') <= EXCLUDED.status_checkpoint_id
),
"""


# Regular writes are insert-if-absent (a retried task must not change what
# was recorded); special channels (negative idx: errors, interrupts, resumes)
# replace, as InMemorySaver does.
def _put_writes(optimistic: bool, head: bool = True, status: bool = True) -> str:
    conflict = _OPTIMISTIC.format(head_moved=_WRITES_HEAD_MOVED) if optimistic else ""
    conflicted = "UNION ALL SELECT 1 FROM conflict" if optimistic else ""
    # the writing run claims the checkpoint (a run without a RunControl: none)
    claim = (
        f"""
claimed AS (
    INSERT INTO colosseum_writes
        (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
         encoding, value, run_id)
    SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, '{CLAIM_TASK_ID}',
           {CLAIM_IDX}, %(writer)s::text, '{CLAIM_CHANNEL}', 'json', 'null'::jsonb,
           %(run_id)s::text
    WHERE %(writer)s::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM refused)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    DO UPDATE SET task_path = EXCLUDED.task_path, run_id = EXCLUDED.run_id,
                  -- the run's own write of a task it holds (a subgraph's) closes it
                  value = CASE WHEN colosseum_writes.task_path = EXCLUDED.task_path
                                    AND jsonb_typeof(colosseum_writes.value) = 'object'
                               THEN colosseum_writes.value - %(task_id)s::text
                               ELSE EXCLUDED.value END
),"""
        if optimistic
        else ""
    )
    if optimistic:
        claim += _ROOT_CLAIMED
    conflict_columns = _CONFLICT_COLUMNS if optimistic else ""
    return f"""
WITH{conflict}
{_DELETED.format(more=_DELETED_RUN)}
{_FENCED}
refused AS (
    SELECT 1 FROM deleted UNION ALL SELECT 1 FROM fenced
    {conflicted}
),{claim}{_WRITES_STATUS if status or optimistic else ""}
inserted AS (
INSERT INTO colosseum_writes
    (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
     encoding, value, value_bytes, value_type, run_id, state_version)
SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, u.idx,
       %(task_path)s, u.channel, u.encoding, u.value::jsonb, u.value_bytes, u.value_type,
       %(run_id)s::text, %(state_version)s::int
FROM unnest(%(idxs)b::int[], %(channels)b::text[], %(encodings)b::text[],
            %(jsons)b::text[], %(datas)b::bytea[], %(types)b::text[])
     AS u(idx, channel, encoding, value, value_bytes, value_type)
WHERE NOT EXISTS (SELECT 1 FROM refused)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
DO UPDATE SET channel = EXCLUDED.channel, task_path = EXCLUDED.task_path,
              encoding = EXCLUDED.encoding, value = EXCLUDED.value,
              value_bytes = EXCLUDED.value_bytes, value_type = EXCLUDED.value_type,
              run_id = EXCLUDED.run_id, state_version = EXCLUDED.state_version
WHERE EXCLUDED.idx < 0
)
SELECT EXISTS (SELECT 1 FROM fenced), (SELECT checkpoint_id FROM deleted LIMIT 1),
       {_HEAD_COLUMNS if head else _NO_HEAD_COLUMNS}
       {conflict_columns}
"""


# Without on_conflict, by (a Redis head, a status to record).
PUT_WRITES_BY = {
    (head, status): _put_writes(optimistic=False, head=head, status=status)
    for head in (True, False)
    for status in (True, False)
}
PUT_WRITES = PUT_WRITES_BY[True, True]
PUT_WRITES_ON_CONFLICT = _put_writes(optimistic=True)

# The writes a refused run stored for checkpoints that were never stored
# (see _core/runs.py): deleted, and their checkpoints recorded as deleted.
BURY_ORPHAN_WRITES = """
WITH orphans AS (
    SELECT k.thread_id, k.checkpoint_ns, k.checkpoint_id
    FROM unnest(%(threads)b::text[], %(namespaces)b::text[], %(ids)b::text[])
         AS k(thread_id, checkpoint_ns, checkpoint_id)
    WHERE NOT EXISTS (
        SELECT 1 FROM colosseum_checkpoints c
        WHERE c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns
          AND c.checkpoint_id = k.checkpoint_id)
),
bury AS (
    INSERT INTO colosseum_tombstones (thread_id, checkpoint_ns, checkpoint_id)
    SELECT * FROM orphans
    ON CONFLICT DO NOTHING
),
gone AS (
    DELETE FROM colosseum_writes w USING orphans o
    WHERE w.thread_id = o.thread_id AND w.checkpoint_ns = o.checkpoint_ns
      AND w.checkpoint_id = o.checkpoint_id
)
-- and a registry row that only those writes made (a status, no checkpoint)
DELETE FROM colosseum_threads t
WHERE t.thread_id IN (SELECT thread_id FROM orphans) AND t.head_checkpoint_id IS NULL
  AND NOT EXISTS (SELECT 1 FROM colosseum_checkpoints c WHERE c.thread_id = t.thread_id)
"""

# The subgraph checkpoints a refused run stored under a root checkpoint of
# its own that was never stored (durability="async" sends a subgraph's puts
# while the root's are on their way; see _core/runs.py): nothing can reach
# them but list(), which would show them under a root checkpoint that does
# not exist. Deleted with their writes, and recorded as deleted. Only while
# that root checkpoint is absent, and only a checkpoint no other run has
# written to (its claim) or continued (a child not among them): nothing
# another run stored goes. Their channel values go with
# COLLECT_UNREFERENCED_VALUES after.
BURY_ORPHAN_CHECKPOINTS = f"""
WITH given AS (
    SELECT * FROM unnest(%(threads)b::text[], %(namespaces)b::text[], %(ids)b::text[],
                         %(roots)b::text[]) AS k(thread_id, checkpoint_ns, checkpoint_id, root_id)
),
orphans AS (
    SELECT k.thread_id, k.checkpoint_ns, k.checkpoint_id FROM given k
    WHERE NOT EXISTS (
        SELECT 1 FROM colosseum_checkpoints r
        WHERE r.thread_id = k.thread_id AND r.checkpoint_ns = '' AND r.checkpoint_id = k.root_id)
      AND NOT EXISTS (
        SELECT 1 FROM colosseum_writes w
        WHERE w.thread_id = k.thread_id AND w.checkpoint_ns = k.checkpoint_ns
          AND w.checkpoint_id = k.checkpoint_id AND w.task_id = '{CLAIM_TASK_ID}'
          AND w.idx = {CLAIM_IDX} AND w.task_path <> %(writer)s::text)
      AND NOT EXISTS (
        SELECT 1 FROM colosseum_checkpoints c
        WHERE c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns
          AND c.parent_checkpoint_id = k.checkpoint_id
          AND NOT EXISTS (SELECT 1 FROM given g
                          WHERE g.thread_id = c.thread_id AND g.checkpoint_ns = c.checkpoint_ns
                            AND g.checkpoint_id = c.checkpoint_id))
),
bury AS (
    INSERT INTO colosseum_tombstones (thread_id, checkpoint_ns, checkpoint_id)
    SELECT * FROM orphans
    ON CONFLICT DO NOTHING
),
writes_gone AS (
    DELETE FROM colosseum_writes w USING orphans o
    WHERE w.thread_id = o.thread_id AND w.checkpoint_ns = o.checkpoint_ns
      AND w.checkpoint_id = o.checkpoint_id
),
histories_gone AS (
    DELETE FROM colosseum_delta_histories h USING orphans o
    WHERE h.thread_id = o.thread_id AND h.checkpoint_ns = o.checkpoint_ns
      AND h.checkpoint_id = o.checkpoint_id
)
DELETE FROM colosseum_checkpoints c USING orphans o
WHERE c.thread_id = o.thread_id AND c.checkpoint_ns = o.checkpoint_ns
  AND c.checkpoint_id = o.checkpoint_id
"""

_THREAD_TABLES = (
    "colosseum_threads",
    "colosseum_thread_lineage",
    "colosseum_tool_calls",
    "colosseum_delta_histories",
    "colosseum_writes",
    "colosseum_channel_values",
    "colosseum_checkpoints",
)

# Every checkpoint of the threads, and every checkpoint their writes name (a
# step's writes may land before its checkpoint's put), recorded as deleted.
_TOMBSTONE_THREADS = """
INSERT INTO colosseum_tombstones (thread_id, checkpoint_ns, checkpoint_id)
SELECT thread_id, checkpoint_ns, checkpoint_id FROM colosseum_checkpoints
WHERE thread_id = ANY(%(thread_ids)b::text[]) {only}
UNION
SELECT thread_id, checkpoint_ns, checkpoint_id FROM colosseum_writes
WHERE thread_id = ANY(%(thread_ids)b::text[]) {only}
ON CONFLICT DO NOTHING
"""
# ... and the thread itself, with its deletion stamp (THREAD_DELETED): the
# time of the deletion on Postgres's clock as a uuid6 timestamp (100 ns since
# 1582-10-15, 15 hex digits, as the lineage of a reused id spells it, see
# lineage_of), and always past the thread's last stamp, so that a stamp is
# never written twice for one thread id, even by a clock that went back.
# (Older versions of this code wrote the same time without the move, and
# compared it with checkpoint times from the application host's clock: during
# a rolling upgrade their deletions are stamps as any other, and their runs
# are judged as they were.)
_DELETED_THREAD = """
INSERT INTO colosseum_deleted_threads AS g (thread_id, before)
SELECT t, lpad(to_hex((extract(epoch FROM clock_timestamp()) * 10000000)::bigint
                      + 122192928000000000), 15, '0')
FROM unnest(%(thread_ids)b::text[]) AS t {only}
ON CONFLICT (thread_id) DO UPDATE
SET before = CASE WHEN EXCLUDED.before > g.before THEN EXCLUDED.before
                  ELSE lpad(to_hex(('x' || lpad(g.before, 16, '0'))::bit(64)::bigint + 1), 15, '0')
             END,
    deleted_at = now()
"""
_EXPIRED = "AND thread_id IN (SELECT thread_id FROM colosseum_threads WHERE expires_at < now())"
# The sweep's first statement after the thread locks (its delete, its prune):
# the rows of the threads still expired, locked. A thread written since the
# sweep chose it (threads.EXPIRED) has a later expiry now and is left alone; a
# read that pushes its expiry back (which takes no thread lock) waits for this
# transaction.
LOCK_STILL_EXPIRED = """
SELECT thread_id FROM colosseum_threads
WHERE thread_id = ANY(%(thread_ids)b::text[]) AND expires_at < now()
FOR UPDATE
"""
TOMBSTONE_THREADS = (_TOMBSTONE_THREADS.format(only=""), _DELETED_THREAD.format(only=""))
TOMBSTONE_EXPIRED_THREADS = (
    _TOMBSTONE_THREADS.format(only=_EXPIRED),
    _DELETED_THREAD.format(
        only="WHERE t IN (SELECT thread_id FROM colosseum_threads WHERE expires_at < now())"
    ),
)


# The lineage a thread's tool calls are keyed by (see schema migration 6 and
# ledger.ToolCallIdentity): the one recorded for it (a copy, or the source of
# a copy), else the thread itself. A thread id used again after a deletion is
# another thread: its lineage is the id and the deletion's time
# ("t#<before>"), so nothing keyed by the deleted thread's lineage (rows a
# surviving copy inherited) answers the new thread's calls. A deletion changes
# `before`, so a lineage is read before its thread is recorded as deleted.
def lineage_of(thread: str) -> str:
    """SQL for the lineage of the thread id that the SQL `thread` gives."""
    return f"""coalesce(
        (SELECT x.lineage FROM colosseum_thread_lineage x WHERE x.thread_id = {thread}),
        (SELECT {thread} || '#' || x.before FROM colosseum_deleted_threads x
         WHERE x.thread_id = {thread}),
        {thread})"""


# The living threads of the lineage that the SQL `lineage` gives: the ones
# copy_thread recorded in it (copies, and the source a copy was made from),
# and a source without a row of its own (copied before sources were
# recorded), the living, never deleted thread whose id is the lineage. A
# record of the ledger is handed only to one of these: their calls have its key.
def _threads_of_lineage(lineage: str) -> str:
    return f"""
        SELECT l.thread_id FROM colosseum_thread_lineage l WHERE l.lineage = {lineage}
        UNION ALL
        SELECT t.thread_id FROM colosseum_threads t
        WHERE t.thread_id = {lineage}
          AND NOT EXISTS (SELECT 1 FROM colosseum_thread_lineage x
                          WHERE x.thread_id = t.thread_id)
          AND NOT EXISTS (SELECT 1 FROM colosseum_deleted_threads g
                          WHERE g.thread_id = t.thread_id)"""


# Before a thread's ledger rows go with it: the rows are handed to another
# living thread of its lineage, so deleting one of them does not make another
# repeat a side effect that it recorded. Run before the deletion is recorded
# (which changes the lineage of the id, see lineage_of).
_REHOME_TOOL_CALLS = f"""
UPDATE colosseum_tool_calls c SET thread_id = heir.thread_id
FROM (
    SELECT d.thread_id AS dying, min(h.thread_id) AS thread_id
    FROM unnest(%(thread_ids)b::text[]) AS d(thread_id)
    CROSS JOIN LATERAL (SELECT {lineage_of("d.thread_id")} AS lineage) AS own
    CROSS JOIN LATERAL ({_threads_of_lineage("own.lineage")}
    ) AS h
    WHERE NOT h.thread_id = ANY(%(thread_ids)b::text[])
    GROUP BY d.thread_id
) AS heir
WHERE c.thread_id = heir.dying {{only}}
"""
REHOME_TOOL_CALLS = _REHOME_TOOL_CALLS.format(only="")
REHOME_EXPIRED_TOOL_CALLS = _REHOME_TOOL_CALLS.format(
    only="AND c.thread_id IN (SELECT thread_id FROM colosseum_threads WHERE expires_at < now())"
)

DELETE_THREADS = tuple(
    f"DELETE FROM {table} WHERE thread_id = ANY(%(thread_ids)b::text[])" for table in _THREAD_TABLES
)

# The same, for threads the sweep holds locked and that are still expired.
DELETE_EXPIRED_THREADS = (
    *(
        f"""DELETE FROM {table} WHERE thread_id = ANY(%(thread_ids)b::text[])
            AND thread_id IN (SELECT thread_id FROM colosseum_threads WHERE expires_at < now())"""
        for table in _THREAD_TABLES
        if table != "colosseum_threads"
    ),
    "DELETE FROM colosseum_threads WHERE thread_id = ANY(%(thread_ids)b::text[]) "
    "AND expires_at < now()",
)

# Prefixed to a read when a retention policy is set. It writes only when less
# than 90% of the time to live is left, so a polled thread is not rewritten on
# every read.
TOUCH_THREAD = """
WITH touch AS (
    UPDATE colosseum_threads SET expires_at = now() + %(ttl)s::interval
    WHERE thread_id = %(thread_id)s AND expires_at < now() + %(ttl)s::interval * 0.9
)
"""
# TOUCH_THREAD alone (a read the Redis head served, see expiry.py): a
# data-modifying WITH runs whether or not the statement reads it.
TOUCHED = "SELECT NULL"

# Copy every row of a thread; the target keeps whatever it already had. A
# copied checkpoint is stored again on the target, so it is no longer a deleted
# one there (a target deleted before, then copied into again).
COPY_THREAD = (
    """
    DELETE FROM colosseum_tombstones d USING colosseum_checkpoints c
    WHERE c.thread_id = %(source)s AND d.thread_id = %(target)s
      AND d.checkpoint_ns = c.checkpoint_ns AND d.checkpoint_id = c.checkpoint_id
    """,
    """
    INSERT INTO colosseum_checkpoints
        (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
         checkpoint, metadata, created_at)
    SELECT %(target)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
           checkpoint, metadata, created_at
    FROM colosseum_checkpoints WHERE thread_id = %(source)s
    ON CONFLICT DO NOTHING
    """,
    """
    INSERT INTO colosseum_channel_values
        (thread_id, checkpoint_ns, channel, version, encoding, value, value_bytes, value_type,
         base_version, depth)
    SELECT %(target)s, checkpoint_ns, channel, version, encoding, value, value_bytes, value_type,
           base_version, depth
    FROM colosseum_channel_values WHERE thread_id = %(source)s
    ON CONFLICT DO NOTHING
    """,
    """
    INSERT INTO colosseum_writes
        (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
         encoding, value, value_bytes, value_type, state_version, run_id)
    SELECT %(target)s, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
           encoding, value, value_bytes, value_type, state_version, run_id
    FROM colosseum_writes WHERE thread_id = %(source)s
    ON CONFLICT DO NOTHING
    """,
    """
    INSERT INTO colosseum_delta_histories
        (thread_id, checkpoint_ns, checkpoint_id, channel, seq, task_id,
         encoding, value, value_bytes, value_type)
    SELECT %(target)s, checkpoint_ns, checkpoint_id, channel, seq, task_id,
           encoding, value, value_bytes, value_type
    FROM colosseum_delta_histories WHERE thread_id = %(source)s
    ON CONFLICT DO NOTHING
    """,
    # The copy keys its tool calls as its source does (a target that had a
    # lineage of its own keeps it), and the source is recorded in the lineage
    # too: deleting the copy then hands the rows they share back to it.
    f"""
    WITH source AS (SELECT {lineage_of("%(source)s::text")} AS lineage)
    INSERT INTO colosseum_thread_lineage (thread_id, lineage)
    SELECT %(target)s, lineage FROM source WHERE %(target)s <> %(source)s
    UNION ALL
    SELECT %(source)s, lineage FROM source
    WHERE %(target)s <> %(source)s
      AND EXISTS (SELECT 1 FROM colosseum_threads WHERE thread_id = %(source)s)
    ON CONFLICT (thread_id) DO NOTHING
    """,
)

# copy_thread with encryption=: each row is bound to its thread, so the copy
# is read, re-sealed for the target in Python, and inserted from arrays.
COPY_READ_CHECKPOINTS = """
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, checkpoint::text,
       metadata::text, created_at
FROM colosseum_checkpoints WHERE thread_id = %(source)s
"""
COPY_READ_VALUES = """
SELECT checkpoint_ns, channel, version, encoding, value::text, value_bytes, value_type,
       base_version, depth
FROM colosseum_channel_values WHERE thread_id = %(source)s
"""
COPY_READ_WRITES = """
SELECT checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
       encoding, value::text, value_bytes, value_type, state_version, run_id
FROM colosseum_writes WHERE thread_id = %(source)s
"""
COPY_READ_HISTORIES = """
SELECT checkpoint_ns, checkpoint_id, channel, seq, task_id,
       encoding, value::text, value_bytes, value_type
FROM colosseum_delta_histories WHERE thread_id = %(source)s
"""
COPY_SEALED = (
    """
    INSERT INTO colosseum_checkpoints
        (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
         checkpoint, metadata, created_at)
    SELECT %(target)s, u.ns, u.id, u.parent, u.run_id, u.checkpoint::jsonb, u.metadata::jsonb,
           u.created_at
    FROM unnest(%(c_ns)s::text[], %(c_ids)s::text[], %(c_parents)s::text[],
                %(c_runs)s::text[], %(c_checkpoints)s::text[], %(c_metadata)s::text[],
                %(c_created)s::timestamptz[])
         AS u(ns, id, parent, run_id, checkpoint, metadata, created_at)
    ON CONFLICT DO NOTHING
    """,
    """
    INSERT INTO colosseum_channel_values
        (thread_id, checkpoint_ns, channel, version, encoding, value, value_bytes, value_type,
         base_version, depth)
    SELECT %(target)s, u.ns, u.channel, u.version, u.encoding, u.value::jsonb, u.value_bytes,
           u.value_type, u.base, u.depth
    FROM unnest(%(v_ns)s::text[], %(v_channels)s::text[], %(v_versions)s::text[],
                %(v_encodings)s::text[], %(v_jsons)s::text[], %(v_datas)s::bytea[],
                %(v_types)s::text[], %(v_bases)s::text[], %(v_depths)s::int[])
         AS u(ns, channel, version, encoding, value, value_bytes, value_type, base, depth)
    ON CONFLICT DO NOTHING
    """,
    """
    INSERT INTO colosseum_writes
        (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
         encoding, value, value_bytes, value_type, state_version, run_id)
    SELECT %(target)s, u.ns, u.id, u.task_id, u.idx, u.task_path, u.channel, u.encoding,
           u.value::jsonb, u.value_bytes, u.value_type, u.state_version, u.run_id
    FROM unnest(%(w_ns)s::text[], %(w_ids)s::text[], %(w_tasks)s::text[], %(w_idxs)s::int[],
                %(w_paths)s::text[], %(w_channels)s::text[], %(w_encodings)s::text[],
                %(w_jsons)s::text[], %(w_datas)s::bytea[], %(w_types)s::text[],
                %(w_state_versions)s::int[], %(w_runs)s::text[])
         AS u(ns, id, task_id, idx, task_path, channel, encoding, value, value_bytes, value_type,
              state_version, run_id)
    ON CONFLICT DO NOTHING
    """,
    """
    INSERT INTO colosseum_delta_histories
        (thread_id, checkpoint_ns, checkpoint_id, channel, seq, task_id,
         encoding, value, value_bytes, value_type)
    SELECT %(target)s, u.ns, u.id, u.channel, u.seq, u.task_id, u.encoding, u.value::jsonb,
           u.value_bytes, u.value_type
    FROM unnest(%(h_ns)s::text[], %(h_ids)s::text[], %(h_channels)s::text[], %(h_seqs)s::int[],
                %(h_tasks)s::text[], %(h_encodings)s::text[], %(h_jsons)s::text[],
                %(h_datas)s::bytea[], %(h_types)s::text[])
         AS u(ns, id, channel, seq, task_id, encoding, value, value_bytes, value_type)
    ON CONFLICT DO NOTHING
    """,
)

# Delta channels (LangGraph lists them in counters_since_delta_snapshot) that
# have no stored value at checkpoint `c`, so rebuilding them walks ancestors.
_DELTA_CHANNELS_TO_FREEZE = """
    ARRAY(
        SELECT k FROM jsonb_object_keys(
            coalesce(c.metadata -> 'counters_since_delta_snapshot', '{}'::jsonb)) AS k
        WHERE NOT EXISTS (
            SELECT 1 FROM colosseum_channel_values v
            WHERE v.thread_id = c.thread_id AND v.checkpoint_ns = c.checkpoint_ns
              AND v.channel = k AND v.version = c.checkpoint -> 'channel_versions' ->> k
              AND v.encoding <> 'empty')
    )
"""

# The oldest of the `keep` newest checkpoints of each namespace: prune keeps it
# and everything after it. A namespace with fewer checkpoints is not pruned.
OLDEST_KEPT_PER_NAMESPACE = f"""
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, {_DELTA_CHANNELS_TO_FREEZE},
       (c.checkpoint -> 'channel_versions')::text
FROM (
    SELECT *, row_number() OVER (PARTITION BY thread_id, checkpoint_ns
                                 ORDER BY checkpoint_id DESC) AS newest
    FROM colosseum_checkpoints
    WHERE thread_id = ANY(%(thread_ids)b::text[])
) AS c
WHERE c.newest = %(keep)s
"""

# Surviving checkpoints whose parent belongs to a run being deleted: the
# boundary where delete_for_runs cuts a thread's chain.
RUN_BOUNDARIES = f"""
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, {_DELTA_CHANNELS_TO_FREEZE}
FROM colosseum_checkpoints p
JOIN colosseum_checkpoints c
  ON c.thread_id = p.thread_id AND c.checkpoint_ns = p.checkpoint_ns
 AND c.parent_checkpoint_id = p.checkpoint_id
WHERE p.run_id = ANY(%(run_ids)b::text[])
  AND (c.run_id IS NULL OR NOT c.run_id = ANY(%(run_ids)b::text[]))
"""

# The threads the runs wrote to: checkpoints, pending writes, and tool calls
# (a run with durability="exit" stopped mid-run has stored nothing else).
THREADS_OF_RUNS = """
SELECT thread_id FROM colosseum_checkpoints WHERE run_id = ANY(%(run_ids)b::text[])
UNION
SELECT thread_id FROM colosseum_writes WHERE run_id = ANY(%(run_ids)b::text[])
UNION
SELECT thread_id FROM colosseum_tool_calls WHERE run_id = ANY(%(run_ids)b::text[])
"""

INSERT_DELTA_HISTORY = """
INSERT INTO colosseum_delta_histories
    (thread_id, checkpoint_ns, checkpoint_id, channel, seq, task_id,
     encoding, value, value_bytes, value_type)
SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(channel)s, u.seq, u.task_id,
       u.encoding, u.value::jsonb, u.value_bytes, u.value_type
FROM unnest(%(seqs)b::int[], %(task_ids)b::text[], %(encodings)b::text[],
            %(jsons)b::text[], %(datas)b::bytea[], %(types)b::text[])
     AS u(seq, task_id, encoding, value, value_bytes, value_type)
ON CONFLICT DO NOTHING
"""

# The kept checkpoint of each namespace. The retention sweep prunes only the
# threads still expired (`only_expired`), checked under the prune's locks: a
# thread written (or read, which pushes its expiry back) since the sweep chose
# it is live again, and keeps its whole history.
_KEPT = """
(SELECT * FROM unnest(%(kept_threads)b::text[], %(kept_namespaces)b::text[], %(kept_ids)b::text[])
     AS u(thread_id, checkpoint_ns, checkpoint_id)
 WHERE NOT %(only_expired)s::boolean OR u.thread_id IN (
     SELECT thread_id FROM colosseum_threads WHERE expires_at < now())) AS k
"""

# Older than the kept checkpoint of the same namespace. A checkpoint that a
# concurrent run adds after the kept one was chosen is newer, and survives.
# They are recorded as deleted first (the prune holds DELETE_LOCK).
PRUNE_KEEP_LATEST = (
    f"""
    INSERT INTO colosseum_tombstones (thread_id, checkpoint_ns, checkpoint_id)
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id FROM colosseum_checkpoints c, {_KEPT}
    WHERE c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns
      AND c.checkpoint_id < k.checkpoint_id
    UNION
    SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id FROM colosseum_writes c, {_KEPT}
    WHERE c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns
      AND c.checkpoint_id < k.checkpoint_id
    ON CONFLICT DO NOTHING
    """,
    f"""
    DELETE FROM colosseum_checkpoints c USING {_KEPT}
    WHERE c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns
      AND c.checkpoint_id < k.checkpoint_id
    """,
    f"""
    DELETE FROM colosseum_writes c USING {_KEPT}
    WHERE c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns
      AND c.checkpoint_id < k.checkpoint_id
    """,
    f"""
    DELETE FROM colosseum_delta_histories c USING {_KEPT}
    WHERE c.thread_id = k.thread_id AND c.checkpoint_ns = k.checkpoint_ns
      AND c.checkpoint_id < k.checkpoint_id
    """,
)

# A thread whose registry head was deleted (delete_for_runs) no longer shows
# its values: the head becomes the newest root checkpoint left, its values
# come back with the next put.
RESET_DELETED_HEADS = """
UPDATE colosseum_threads t
SET state_values = '{}', updated_at = now(),
    head_checkpoint_id = (SELECT max(c.checkpoint_id) FROM colosseum_checkpoints c
                          WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = '')
WHERE t.thread_id = ANY(%(thread_ids)b::text[])
  AND NOT EXISTS (SELECT 1 FROM colosseum_checkpoints c
                  WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = ''
                    AND c.checkpoint_id = t.head_checkpoint_id)
"""

# A deletion moves the epochs of the threads it removes content of, in its
# own transaction (after DELETE_LOCK). A write's Redis script that arrives
# after it carries an older epoch than a head refilled since, and is refused
# (see hot.py). Counted up, never reset: delete_thread keeps the row.
MOVE_EPOCHS = """
INSERT INTO colosseum_thread_epochs AS e (thread_id, epoch)
SELECT DISTINCT t, 1 FROM unnest(%(thread_ids)b::text[]) AS t
ON CONFLICT (thread_id) DO UPDATE SET epoch = e.epoch + 1
"""

DELETED_RUNS = """
INSERT INTO colosseum_deleted_runs (run_id) SELECT unnest(%(run_ids)b::text[])
ON CONFLICT (run_id) DO UPDATE SET deleted_at = now()
"""

# delete_for_runs and the tool ledger, before DELETE_RUNS (under its
# DELETE_LOCK): the record of a call the runs made (its run_id), or one made
# on a checkpoint of theirs (its call site), goes with them when no checkpoint
# that stays holds the call: neither its call site, nor one that descends from
# it (`held`: a checkpoint of the runs with a later one staying below it, of
# another run: a run after them, or one that went on from a copy). A state
# holding the call can present its key again, and must get the recorded
# output rather than a second side effect; one that does not is as it was
# before the call. A record some state still holds stays with its thread, or
# else goes to a thread of its lineage that holds it (a copy), as
# REHOME_TOOL_CALLS hands a deleted thread's records on; a call site that goes
# becomes the checkpoint below it that stays, so the record is judged by that
# one when its run is deleted in turn. A record whose run is deleted and whose
# call site was never stored (its run stopped before its put landed) goes.
# The runs are recorded as deleted before (DELETED_RUNS): no claim of theirs
# lands after this, and their late COMPLETE finds no row.
DELETE_RUNS_TOOL_CALLS = f"""
WITH RECURSIVE gone AS (
    SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id
    FROM colosseum_checkpoints WHERE run_id = ANY(%(run_ids)b::text[])
),
held(thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, kept) AS (
    SELECT g.thread_id, g.checkpoint_ns, g.checkpoint_id, g.parent_checkpoint_id,
           c.checkpoint_id
    FROM gone g
    JOIN colosseum_checkpoints c
      ON c.thread_id = g.thread_id AND c.checkpoint_ns = g.checkpoint_ns
     AND c.parent_checkpoint_id = g.checkpoint_id
    WHERE c.run_id IS NULL OR NOT c.run_id = ANY(%(run_ids)b::text[])
  UNION
    SELECT g.thread_id, g.checkpoint_ns, g.checkpoint_id, g.parent_checkpoint_id, h.kept
    FROM held h
    JOIN gone g
      ON g.thread_id = h.thread_id AND g.checkpoint_ns = h.checkpoint_ns
     AND g.checkpoint_id = h.parent_checkpoint_id
),
calls AS (
    SELECT c.thread_id, c.idempotency_key, c.call_ns, c.call_checkpoint_id
    FROM colosseum_tool_calls c WHERE c.run_id = ANY(%(run_ids)b::text[])
    UNION
    SELECT c.thread_id, c.idempotency_key, c.call_ns, c.call_checkpoint_id
    FROM gone g
    JOIN colosseum_tool_calls c
      ON c.thread_id = g.thread_id AND c.call_ns = g.checkpoint_ns
     AND c.call_checkpoint_id = g.checkpoint_id
),
decided AS (
    SELECT calls.thread_id, calls.idempotency_key, holder.thread_id AS heir, holder.site
    FROM calls
    CROSS JOIN LATERAL (SELECT {lineage_of("calls.thread_id")} AS lineage) AS own
    LEFT JOIN LATERAL (
        SELECT h.thread_id, coalesce(k.checkpoint_id, held.kept) AS site
        FROM (SELECT calls.thread_id UNION {_threads_of_lineage("own.lineage")}
        ) AS h(thread_id)
        LEFT JOIN colosseum_checkpoints k
          ON k.thread_id = h.thread_id AND k.checkpoint_ns = calls.call_ns
         AND k.checkpoint_id = calls.call_checkpoint_id
         AND (k.run_id IS NULL OR NOT k.run_id = ANY(%(run_ids)b::text[]))
        LEFT JOIN held
          ON held.thread_id = h.thread_id AND held.checkpoint_ns = calls.call_ns
         AND held.checkpoint_id = calls.call_checkpoint_id
        WHERE k.checkpoint_id IS NOT NULL OR held.kept IS NOT NULL
        ORDER BY h.thread_id <> calls.thread_id, k.checkpoint_id IS NULL, h.thread_id, held.kept
        LIMIT 1
    ) AS holder ON true
),
handed AS (
    UPDATE colosseum_tool_calls c SET thread_id = d.heir, call_checkpoint_id = d.site
    FROM decided d
    WHERE c.thread_id = d.thread_id AND c.idempotency_key = d.idempotency_key
      AND d.heir IS NOT NULL
      AND (d.heir <> c.thread_id OR d.site IS DISTINCT FROM c.call_checkpoint_id)
)
DELETE FROM colosseum_tool_calls c USING decided d
WHERE c.thread_id = d.thread_id AND c.idempotency_key = d.idempotency_key AND d.heir IS NULL
"""

DELETE_RUNS = (
    """
    INSERT INTO colosseum_tombstones (thread_id, checkpoint_ns, checkpoint_id)
    SELECT thread_id, checkpoint_ns, checkpoint_id FROM colosseum_checkpoints
    WHERE run_id = ANY(%(run_ids)b::text[])
    ON CONFLICT DO NOTHING
    """,
    """
    DELETE FROM colosseum_writes w USING colosseum_checkpoints c
    WHERE c.run_id = ANY(%(run_ids)b::text[])
      AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
      AND w.checkpoint_id = c.checkpoint_id
    """,
    # and the runs' writes on checkpoints not their own (a resumed one); a late
    # one is refused by PUT_WRITES, the runs being recorded as deleted
    "DELETE FROM colosseum_writes WHERE run_id = ANY(%(run_ids)b::text[])",
    """
    DELETE FROM colosseum_delta_histories h USING colosseum_checkpoints c
    WHERE c.run_id = ANY(%(run_ids)b::text[])
      AND h.thread_id = c.thread_id AND h.checkpoint_ns = c.checkpoint_ns
      AND h.checkpoint_id = c.checkpoint_id
    """,
    "DELETE FROM colosseum_checkpoints WHERE run_id = ANY(%(run_ids)b::text[])",
)

# Channel values no remaining checkpoint of the thread needs: not named by one,
# nor the base of a row that is. A row a concurrent put is basing a delta on
# is locked by that put, and skipped here.
COLLECT_UNREFERENCED_VALUES = """
WITH RECURSIVE live(thread_id, checkpoint_ns, channel, version) AS (
    SELECT c.thread_id, c.checkpoint_ns, ver.channel COLLATE "C", ver.version COLLATE "C"
    FROM colosseum_checkpoints c,
         jsonb_each_text(c.checkpoint -> 'channel_versions') AS ver(channel, version)
    WHERE c.thread_id = ANY(%(thread_ids)b::text[])
  UNION
    SELECT v.thread_id, v.checkpoint_ns, v.channel, v.base_version
    FROM live
    JOIN colosseum_channel_values v
      ON v.thread_id = live.thread_id AND v.checkpoint_ns = live.checkpoint_ns
     AND v.channel = live.channel AND v.version = live.version
    WHERE v.base_version IS NOT NULL
),
dead AS (
    SELECT v.thread_id, v.checkpoint_ns, v.channel, v.version
    FROM colosseum_channel_values v
    WHERE v.thread_id = ANY(%(thread_ids)b::text[])
      AND NOT EXISTS (
          SELECT 1 FROM live
          WHERE live.thread_id = v.thread_id AND live.checkpoint_ns = v.checkpoint_ns
            AND live.channel = v.channel AND live.version = v.version)
    FOR UPDATE OF v SKIP LOCKED
)
DELETE FROM colosseum_channel_values v USING dead
WHERE v.thread_id = dead.thread_id AND v.checkpoint_ns = dead.checkpoint_ns
  AND v.channel = dead.channel AND v.version = dead.version
"""

# Rewrite a delta row as the full value it stands for (prune compacts what it keeps).
MAKE_FULL = """
UPDATE colosseum_channel_values
SET encoding = %(encoding)s, value = %(json)s::jsonb, value_bytes = %(data)s,
    value_type = %(type)s, base_version = NULL, depth = 0
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
  AND channel = %(channel)s AND version = %(version)s
"""


# The history of some channels as of one checkpoint, in one round trip.
# `chain` walks parent links from the target (depth 0). Each row carries the
# channels still being walked when it was reached (`entering`) and those left
# after it (`remaining`). A channel stops at the first ancestor holding a value
# for it, or at a checkpoint holding its frozen history (the target included).
# The target's own writes are pending for the next step and are not history.
#
# Every lookup is a LATERAL subquery with LIMIT 1 / OFFSET 0 (or a sublink with
# OFFSET 0): the planner cannot flatten those into joins, so each step is a
# primary-key probe whatever the table statistics say. Flattened, a fresh or
# stale table's "1 row" estimate made it scan the whole thread at every step.
#
# It runs on its generic plan (sql.GENERIC_PLAN): left to choose, Postgres
# planned it on every call (0.67 ms a plan against 0.96 ms of execution, once
# per invoke of a DeltaChannel graph). Hence two statements, one per way of
# naming the target, as GET_TUPLE: in one generic plan `(id IS NULL OR
# checkpoint_id = id) ORDER BY checkpoint_id DESC LIMIT 1` would walk the
# thread down from its head to find an old checkpoint.
def _delta_history(by_id: bool) -> str:
    target = (
        "AND checkpoint_id = %(checkpoint_id)s LIMIT 1"
        if by_id
        else "ORDER BY checkpoint_id DESC LIMIT 1"
    )
    return compact(f"""
WITH RECURSIVE chain(checkpoint_id, parent_checkpoint_id, versions, depth, entering, remaining) AS (
    SELECT t.checkpoint_id, t.parent_checkpoint_id, t.checkpoint -> 'channel_versions', 0,
           %(channels)b::text[],
           ARRAY(SELECT ch FROM unnest(%(channels)b::text[]) AS ch
                 WHERE NOT EXISTS (
                     SELECT 1 FROM colosseum_delta_histories h
                     WHERE h.thread_id = %(thread_id)s AND h.checkpoint_ns = %(checkpoint_ns)s
                       AND h.checkpoint_id = t.checkpoint_id AND h.channel = ch
                     OFFSET 0))
    FROM (SELECT * FROM colosseum_checkpoints
          WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
          {target}) AS t
  UNION ALL
    SELECT c.checkpoint_id, c.parent_checkpoint_id, c.versions, chain.depth + 1, chain.remaining,
           ARRAY(SELECT ch FROM unnest(chain.remaining) AS ch
                 WHERE NOT EXISTS (
                     SELECT 1 FROM colosseum_channel_values v
                     WHERE v.thread_id = %(thread_id)s AND v.checkpoint_ns = %(checkpoint_ns)s
                       AND v.channel = ch AND v.version = c.versions ->> ch
                       AND v.encoding <> 'empty'
                     OFFSET 0)
                   AND NOT EXISTS (
                     SELECT 1 FROM colosseum_delta_histories h
                     WHERE h.thread_id = %(thread_id)s AND h.checkpoint_ns = %(checkpoint_ns)s
                       AND h.checkpoint_id = c.checkpoint_id AND h.channel = ch
                     OFFSET 0))
    FROM chain
    CROSS JOIN LATERAL (
        SELECT p.checkpoint_id, p.parent_checkpoint_id, p.checkpoint -> 'channel_versions' AS versions
        FROM colosseum_checkpoints p
        WHERE p.thread_id = %(thread_id)s AND p.checkpoint_ns = %(checkpoint_ns)s
          AND p.checkpoint_id = chain.parent_checkpoint_id
        LIMIT 1
    ) AS c
    WHERE cardinality(chain.remaining) > 0
),
-- The value that ends a channel's walk, and the bases it is a delta of.
seed_chain(depth, top, channel, version, base_version, known) AS (
    SELECT chain.depth, true, v.channel, v.version, v.base_version,
           EXISTS (SELECT 1 FROM unnest(%(known_channels)b::text[], %(known_versions)b::text[])
                        AS k(channel, version)
                   WHERE k.channel = v.channel AND k.version = v.version)
    FROM chain
    CROSS JOIN LATERAL unnest(chain.entering) AS ch(channel)
    CROSS JOIN LATERAL (
        SELECT v.channel, v.version, v.base_version FROM colosseum_channel_values v
        WHERE v.thread_id = %(thread_id)s AND v.checkpoint_ns = %(checkpoint_ns)s
          AND v.channel = ch.channel AND v.version = chain.versions ->> ch.channel
          AND v.encoding <> 'empty'
        LIMIT 1
    ) AS v
    WHERE chain.depth > 0 AND NOT ch.channel = ANY(chain.remaining)
  UNION ALL
    SELECT seed_chain.depth, false, b.channel, b.version, b.base_version, false
    FROM seed_chain
    CROSS JOIN LATERAL (
        SELECT b.channel, b.version, b.base_version FROM colosseum_channel_values b
        WHERE b.thread_id = %(thread_id)s AND b.checkpoint_ns = %(checkpoint_ns)s
          AND b.channel = seed_chain.channel AND b.version = seed_chain.base_version
        LIMIT 1
    ) AS b
    WHERE NOT seed_chain.known  -- the caller holds this seed already decoded
) CYCLE channel, version SET in_cycle USING visited
SELECT 'write', chain.depth, w.channel, w.task_id, w.task_path, w.idx, chain.checkpoint_id, NULL,
       w.encoding, w.value::text, w.value_bytes, w.value_type
FROM chain
CROSS JOIN LATERAL (
    SELECT * FROM colosseum_writes w
    WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
      AND w.checkpoint_id = chain.checkpoint_id AND w.channel = ANY(chain.entering)
    OFFSET 0
) AS w
WHERE chain.depth > 0
UNION ALL
SELECT CASE WHEN seed_chain.known THEN 'known'
            WHEN seed_chain.top THEN 'value' ELSE 'base' END, seed_chain.depth,
       v.channel, NULL, NULL, NULL, v.version, v.base_version, v.encoding,
       CASE WHEN seed_chain.known THEN NULL ELSE v.value::text END,
       CASE WHEN seed_chain.known THEN NULL ELSE v.value_bytes END, v.value_type
FROM seed_chain
CROSS JOIN LATERAL (
    SELECT * FROM colosseum_channel_values v
    WHERE v.thread_id = %(thread_id)s AND v.checkpoint_ns = %(checkpoint_ns)s
      AND v.channel = seed_chain.channel AND v.version = seed_chain.version
    LIMIT 1
) AS v
UNION ALL
SELECT 'frozen', chain.depth, h.channel, h.task_id, NULL, h.seq, chain.checkpoint_id, NULL,
       h.encoding, h.value::text, h.value_bytes, h.value_type
FROM chain
CROSS JOIN LATERAL (
    SELECT * FROM colosseum_delta_histories h
    WHERE h.thread_id = %(thread_id)s AND h.checkpoint_ns = %(checkpoint_ns)s
      AND h.checkpoint_id = chain.checkpoint_id
      AND h.channel = ANY(chain.entering) AND NOT h.channel = ANY(chain.remaining)
    OFFSET 0
) AS h
""")


DELTA_HISTORY_BY_ID = _delta_history(by_id=True)
DELTA_HISTORY_LATEST = _delta_history(by_id=False)

# ---------------------------------------------------------------- the hot head's truth

# The incarnation, making the token when there is none. NULL only when a
# concurrent caller made it first (this statement's snapshot does not see it
# yet): the caller asks again.
ENSURE_INCARNATION = """
WITH made AS (
    INSERT INTO colosseum_incarnation (token) VALUES (gen_random_uuid()::text)
    ON CONFLICT DO NOTHING
    RETURNING token
)
SELECT coalesce((SELECT token FROM made), (SELECT token FROM colosseum_incarnation))
       || '.' || oid || '.' || 'colosseum_incarnation'::regclass::oid
FROM pg_database WHERE datname = current_database()
"""

# The incarnation a hit's re-check asks for (store.bound_incarnation): a read,
# so it works on a server that takes no writes; NULL makes the caller ensure one.
CURRENT_INCARNATION = f"SELECT {INCARNATION}"

LIST_STALE_HEADS = f"SELECT {STALE_HEADS}"

RECORD_STALE_HEADS = """
INSERT INTO colosseum_stale_heads AS s (thread_id, head_key)
SELECT * FROM unnest(%(thread_ids)b::text[], %(head_keys)b::text[])
ON CONFLICT (thread_id, head_key) DO UPDATE SET recorded_at = clock_timestamp()
"""

# Only the recordings that were dropped: one recorded again meanwhile stays.
FORGET_STALE_HEADS = """
DELETE FROM colosseum_stale_heads s
USING unnest(%(thread_ids)b::text[], %(head_keys)b::text[], %(recorded)b::text[])
      AS u(thread_id, head_key, recorded_at)
WHERE s.thread_id = u.thread_id AND s.head_key = u.head_key
  AND s.recorded_at = u.recorded_at::timestamptz
"""

# ---------------------------------------------------------------- rekey (encryption=)

# Rows to (re-)seal, a batch at a time: `_REKEY_OLD_KEY` those sealed with
# another key than the current one; `_REKEY_PLAINTEXT` plaintext rows of
# channels that are to be encrypted (a database written before encryption=).
# Not a hot path: it crosses threads on purpose. Each update names the row as
# read, so a row rewritten meanwhile is left for the next batch.
REKEY_OLD_KEY = "value_type LIKE 'aes256gcm:%%' AND value_type <> %(current)s"
REKEY_PLAINTEXT = (
    "(value_type IS NULL OR value_type NOT LIKE 'aes256gcm:%%') "
    "AND channel <> ALL(%(plaintext_channels)s::text[])"
)
_REKEY_COLUMNS = "encoding, value::text, value_bytes, value_type"
_REKEY_GUARD = """
  AND encoding = %(old_encoding)s AND value::text IS NOT DISTINCT FROM %(old_json)s
  AND value_bytes IS NOT DISTINCT FROM %(old_data)s
  AND value_type IS NOT DISTINCT FROM %(old_type)s
"""
REKEY_SELECT_VALUES = f"""
SELECT thread_id, checkpoint_ns, channel, version, base_version, {_REKEY_COLUMNS}
FROM colosseum_channel_values WHERE {{where}} LIMIT %(limit)s
"""
REKEY_UPDATE_VALUE = f"""
UPDATE colosseum_channel_values SET value = NULL, value_bytes = %(data)s, value_type = %(type)s
WHERE thread_id = %(k0)s AND checkpoint_ns = %(k1)s AND channel = %(k2)s AND version = %(k3)s
{_REKEY_GUARD}"""
REKEY_SELECT_WRITES = f"""
SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path,
       {_REKEY_COLUMNS}
FROM colosseum_writes WHERE {{where}} LIMIT %(limit)s
"""
REKEY_UPDATE_WRITE = f"""
UPDATE colosseum_writes SET value = NULL, value_bytes = %(data)s, value_type = %(type)s
WHERE thread_id = %(k0)s AND checkpoint_ns = %(k1)s AND checkpoint_id = %(k2)s
  AND task_id = %(k3)s AND idx = %(k4)s
{_REKEY_GUARD}"""
REKEY_SELECT_HISTORIES = f"""
SELECT thread_id, checkpoint_ns, checkpoint_id, channel, seq, task_id, {_REKEY_COLUMNS}
FROM colosseum_delta_histories WHERE {{where}} LIMIT %(limit)s
"""
REKEY_UPDATE_HISTORY = f"""
UPDATE colosseum_delta_histories SET value = NULL, value_bytes = %(data)s, value_type = %(type)s
WHERE thread_id = %(k0)s AND checkpoint_ns = %(k1)s AND checkpoint_id = %(k2)s
  AND channel = %(k3)s AND seq = %(k4)s
{_REKEY_GUARD}"""
# Before the value passes of encrypt_plaintext: a row for every value a
# document carries inline (store.py, _inline_values) that has none, so the
# passes seal it and the metadata pass may take the plaintext copy out of the
# document. inline_values=True writes the rows as well; a document whose
# values are only inline (a form every release since 2026-12-07 reads, README,
# "Stored forms change in two releases") would otherwise lose them.
REKEY_ROWS_OF_INLINE_VALUES = """
INSERT INTO colosseum_channel_values
    (thread_id, checkpoint_ns, channel, version, encoding, value)
SELECT c.thread_id, c.checkpoint_ns, i.channel,
       c.checkpoint -> 'channel_versions' ->> i.channel, 'json', i.value
FROM colosseum_checkpoints c
CROSS JOIN LATERAL jsonb_each(CASE jsonb_typeof(c.checkpoint -> 'channel_values')
    WHEN 'object' THEN c.checkpoint -> 'channel_values' ELSE '{}'::jsonb END) AS i(channel, value)
WHERE c.checkpoint ? 'channel_values'
  AND c.checkpoint -> 'channel_versions' ->> i.channel IS NOT NULL
ON CONFLICT DO NOTHING
RETURNING 1
"""
# Checkpoint metadata: sealed with another key, or not sealed at all.
REKEY_METADATA_OLD_KEY = "metadata #>> '{$sealed,k}' <> %(key_id)s"
REKEY_METADATA_PLAINTEXT = "NOT metadata ? '$sealed'"
# A document's inline values (inline_values=True: plaintext; their rows are
# sealed by the value passes) leave it as its metadata is sealed (what that
# binds of the document, crypt.metadata_aad, stays).
REKEY_SELECT_METADATA = """
SELECT thread_id, checkpoint_ns, checkpoint_id, metadata::text, checkpoint::text
FROM colosseum_checkpoints WHERE {where} LIMIT %(limit)s
"""
REKEY_UPDATE_METADATA = """
UPDATE colosseum_checkpoints
SET metadata = %(new)s::jsonb, checkpoint = checkpoint - 'channel_values'
WHERE thread_id = %(k0)s AND checkpoint_ns = %(k1)s AND checkpoint_id = %(k2)s
  AND metadata::text = %(old)s
"""
# The registry, every row in thread order (keyset pages): which of its keys
# must be sealed is decided per key in Python.
REKEY_SELECT_REGISTRY = """
SELECT thread_id, metadata::text, state_values::text, metadata_undo::text FROM colosseum_threads
WHERE thread_id > %(after)s ORDER BY thread_id LIMIT %(limit)s
"""
REKEY_UPDATE_REGISTRY = """
UPDATE colosseum_threads
SET metadata = %(metadata)s::jsonb, state_values = %(values)s::jsonb,
    metadata_undo = %(undo)s::jsonb
WHERE thread_id = %(thread_id)s
  AND metadata::text = %(old_metadata)s AND state_values::text = %(old_values)s
  AND metadata_undo::text = %(old_undo)s
"""
# The tool ledger, every row in key order (keyset pages), as the registry.
REKEY_SELECT_LEDGER = """
SELECT idempotency_key, thread_id, input::text, output::text, output_bytes, output_type, error
FROM colosseum_tool_calls WHERE idempotency_key > %(after)s
ORDER BY idempotency_key LIMIT %(limit)s
"""
REKEY_UPDATE_LEDGER = """
UPDATE colosseum_tool_calls
SET input = %(input)s::jsonb, output = %(output)s::jsonb, output_bytes = %(output_bytes)s,
    output_type = %(output_type)s, error = %(error)s
WHERE idempotency_key = %(key)s
  AND input::text IS NOT DISTINCT FROM %(old_input)s
  AND output::text IS NOT DISTINCT FROM %(old_output)s
  AND output_bytes IS NOT DISTINCT FROM %(old_output_bytes)s
  AND output_type IS NOT DISTINCT FROM %(old_output_type)s
  AND error IS NOT DISTINCT FROM %(old_error)s
"""
# The Store's items (when the Store's tables exist), in key order.
REKEY_HAS_STORE = "SELECT to_regclass('colosseum_store_items') IS NOT NULL"
REKEY_SELECT_STORE = """
SELECT prefix, key, value::text FROM colosseum_store_items
WHERE (prefix, key) > (%(after_prefix)s, %(after_key)s)
ORDER BY prefix, key LIMIT %(limit)s
"""
REKEY_UPDATE_STORE = """
UPDATE colosseum_store_items SET value = %(new)s::jsonb
WHERE prefix = %(prefix)s AND key = %(key)s AND value::text = %(old)s
"""


# ------------------------------------------------------------ state versions
# (see _core/versions.py): the state version of each thread is its root head's
# metadata.state_version, 1 when it records none or, as StateVersions.version_of
# reads it, a value that is no positive integer (the application's own key, say).
_HEAD_STATE_VERSION = """CASE
  WHEN jsonb_typeof(c.metadata -> 'state_version') = 'number'
   AND c.metadata ->> 'state_version' ~ '^[1-9][0-9]{0,8}$'
  THEN (c.metadata ->> 'state_version')::int ELSE 1 END"""

STATE_VERSION_COUNTS = f"""
SELECT {_HEAD_STATE_VERSION} AS version, count(*)
FROM colosseum_threads t
JOIN colosseum_checkpoints c
  ON c.thread_id = t.thread_id AND c.checkpoint_ns = '' AND c.checkpoint_id = t.head_checkpoint_id
GROUP BY 1 ORDER BY 1
"""

# The next threads (by id, after a cursor) whose head is below a version.
THREADS_BELOW_STATE_VERSION = f"""
SELECT t.thread_id
FROM colosseum_threads t
JOIN colosseum_checkpoints c
  ON c.thread_id = t.thread_id AND c.checkpoint_ns = '' AND c.checkpoint_id = t.head_checkpoint_id
WHERE t.thread_id > %(after)s AND {_HEAD_STATE_VERSION} < %(version)s
  AND (%(thread_ids)s::text[] IS NULL OR t.thread_id = ANY(%(thread_ids)s::text[]))
ORDER BY t.thread_id
LIMIT %(batch_size)s
"""
# The registry metadata a run record keeps to restore on rollback (its values
# sealed as the registry's: bound to the thread and key), in key order.
REKEY_SELECT_RUN_METADATA = """
SELECT thread_id, run_id, metadata_before::text FROM colosseum_runs
WHERE (thread_id, run_id) > (%(after_thread)s, %(after_run)s) AND metadata_before IS NOT NULL
ORDER BY thread_id, run_id LIMIT %(limit)s
"""
REKEY_UPDATE_RUN_METADATA = """
UPDATE colosseum_runs SET metadata_before = %(new)s::jsonb
WHERE thread_id = %(thread_id)s AND run_id = %(run_id)s AND metadata_before::text = %(old)s
"""
