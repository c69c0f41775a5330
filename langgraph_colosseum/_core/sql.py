"""SQL text, as named constants. Nothing here opens a socket.

Parameters are named (``%(thread_id)s``). Values travel as jsonb text cast in
SQL (``::jsonb``), so no per-connection adapter setup is needed and a
user-supplied connection or pool works as it is. Arrays go in binary format
(``%(x)b``): in text format every quote of a JSON document would be escaped and
unescaped, which costs three times the jsonb parse itself.
"""

from __future__ import annotations

# The columns `rows.tuple_from_row` reads, in this order.
_TUPLE_COLUMNS = """
    c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
    c.checkpoint::text, c.metadata::text,
    cv.channels, cv.encodings, cv.jsons, cv.datas, cv.types,
    w.task_ids, w.idxs, w.task_paths, w.channels, w.encodings, w.jsons, w.datas, w.types
"""

# A checkpoint, the channel values at the versions it names, and its pending
# writes: one row, one round trip.
_TUPLE_FROM = """
FROM colosseum_checkpoints c
LEFT JOIN LATERAL (
    SELECT array_agg(v.channel) AS channels, array_agg(v.encoding) AS encodings,
           array_agg(v.value::text) AS jsons, array_agg(v.value_bytes) AS datas,
           array_agg(v.value_type) AS types
    FROM jsonb_each_text(c.checkpoint -> 'channel_versions') AS ver(channel, version)
    JOIN colosseum_channel_values v
      ON v.thread_id = c.thread_id AND v.checkpoint_ns = c.checkpoint_ns
     AND v.channel = ver.channel AND v.version = ver.version
    WHERE v.encoding <> 'empty'
) cv ON true
LEFT JOIN LATERAL (
    SELECT array_agg(w.task_id) AS task_ids, array_agg(w.idx) AS idxs,
           array_agg(w.task_path) AS task_paths, array_agg(w.channel) AS channels,
           array_agg(w.encoding) AS encodings, array_agg(w.value::text) AS jsons,
           array_agg(w.value_bytes) AS datas, array_agg(w.value_type) AS types
    FROM colosseum_writes w
    WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
      AND w.checkpoint_id = c.checkpoint_id
) w ON true
"""

GET_TUPLE_BY_ID = f"""
SELECT {_TUPLE_COLUMNS} {_TUPLE_FROM}
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
  AND c.checkpoint_id = %(checkpoint_id)s
"""

GET_TUPLE_LATEST = f"""
SELECT {_TUPLE_COLUMNS} {_TUPLE_FROM}
WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
ORDER BY c.checkpoint_id DESC
LIMIT 1
"""

# `list` pages. `where` is built from fixed fragments in `store.py` only.
LIST_PAGE = f"""
SELECT {_TUPLE_COLUMNS} {_TUPLE_FROM}
WHERE {{where}}
ORDER BY c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC
LIMIT %(page_size)s
"""
LIST_WHERE_THREAD = "c.thread_id = %(thread_id)s"
LIST_WHERE_NS = "c.checkpoint_ns = %(checkpoint_ns)s"
LIST_WHERE_ID = "c.checkpoint_id = %(checkpoint_id)s"
LIST_WHERE_BEFORE = "c.checkpoint_id < %(before)s"
LIST_WHERE_CURSOR = (
    "(c.checkpoint_id, c.thread_id, c.checkpoint_ns) "
    "< (%(cursor_id)s, %(cursor_thread)s, %(cursor_ns)s)"
)
# Exact jsonb equality per key, which is InMemorySaver's
# `query_value == metadata.get(key)`: a missing key equals a None filter value.
LIST_WHERE_METADATA = "coalesce(c.metadata -> %(mk{i})s, 'null'::jsonb) = %(mv{i})s::jsonb"

PUT = """
WITH new_values AS (
    INSERT INTO colosseum_channel_values
        (thread_id, checkpoint_ns, channel, version, encoding, value, value_bytes, value_type)
    SELECT %(thread_id)s, %(checkpoint_ns)s, u.channel, u.version, u.encoding,
           u.value::jsonb, u.value_bytes, u.value_type
    FROM unnest(%(channels)b::text[], %(versions)b::text[], %(encodings)b::text[],
                %(jsons)b::text[], %(datas)b::bytea[], %(types)b::text[])
         AS u(channel, version, encoding, value, value_bytes, value_type)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
)
INSERT INTO colosseum_checkpoints
    (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id, checkpoint, metadata)
VALUES (%(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(parent_checkpoint_id)s,
        %(run_id)s, %(checkpoint)s::jsonb, %(metadata)s::jsonb)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id)
DO UPDATE SET checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata,
              run_id = EXCLUDED.run_id
"""

# Regular writes are insert-if-absent (a retried task must not change what
# was recorded); special channels (negative idx: errors, interrupts, resumes)
# replace, as InMemorySaver does.
PUT_WRITES = """
INSERT INTO colosseum_writes
    (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
     encoding, value, value_bytes, value_type)
SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, u.idx,
       %(task_path)s, u.channel, u.encoding, u.value::jsonb, u.value_bytes, u.value_type
FROM unnest(%(idxs)b::int[], %(channels)b::text[], %(encodings)b::text[],
            %(jsons)b::text[], %(datas)b::bytea[], %(types)b::text[])
     AS u(idx, channel, encoding, value, value_bytes, value_type)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
DO UPDATE SET channel = EXCLUDED.channel, task_path = EXCLUDED.task_path,
              encoding = EXCLUDED.encoding, value = EXCLUDED.value,
              value_bytes = EXCLUDED.value_bytes, value_type = EXCLUDED.value_type
WHERE EXCLUDED.idx < 0
"""

_THREAD_TABLES = (
    "colosseum_delta_histories",
    "colosseum_writes",
    "colosseum_channel_values",
    "colosseum_checkpoints",
)

DELETE_THREADS = tuple(
    f"DELETE FROM {table} WHERE thread_id = ANY(%(thread_ids)b::text[])" for table in _THREAD_TABLES
)

# Copy every row of a thread; the target keeps whatever it already had.
COPY_THREAD = (
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
        (thread_id, checkpoint_ns, channel, version, encoding, value, value_bytes, value_type)
    SELECT %(target)s, checkpoint_ns, channel, version, encoding, value, value_bytes, value_type
    FROM colosseum_channel_values WHERE thread_id = %(source)s
    ON CONFLICT DO NOTHING
    """,
    """
    INSERT INTO colosseum_writes
        (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
         encoding, value, value_bytes, value_type)
    SELECT %(target)s, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
           encoding, value, value_bytes, value_type
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

# The newest checkpoint of each namespace of the given threads: what
# prune(keep_latest) keeps.
LATEST_PER_NAMESPACE = f"""
SELECT DISTINCT ON (c.thread_id, c.checkpoint_ns)
       c.thread_id, c.checkpoint_ns, c.checkpoint_id, {_DELTA_CHANNELS_TO_FREEZE}
FROM colosseum_checkpoints c
WHERE c.thread_id = ANY(%(thread_ids)b::text[])
ORDER BY c.thread_id, c.checkpoint_ns, c.checkpoint_id DESC
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

THREADS_OF_RUNS = """
SELECT DISTINCT thread_id FROM colosseum_checkpoints WHERE run_id = ANY(%(run_ids)b::text[])
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

_KEPT = """
unnest(%(kept_threads)b::text[], %(kept_namespaces)b::text[], %(kept_ids)b::text[])
    AS k(thread_id, checkpoint_ns, checkpoint_id)
"""

# Older than the kept checkpoint of the same namespace. A checkpoint that a
# concurrent run adds after the kept one was chosen is newer, and survives.
PRUNE_KEEP_LATEST = (
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

DELETE_RUNS = (
    """
    DELETE FROM colosseum_writes w USING colosseum_checkpoints c
    WHERE c.run_id = ANY(%(run_ids)b::text[])
      AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
      AND w.checkpoint_id = c.checkpoint_id
    """,
    """
    DELETE FROM colosseum_delta_histories h USING colosseum_checkpoints c
    WHERE c.run_id = ANY(%(run_ids)b::text[])
      AND h.thread_id = c.thread_id AND h.checkpoint_ns = c.checkpoint_ns
      AND h.checkpoint_id = c.checkpoint_id
    """,
    "DELETE FROM colosseum_checkpoints WHERE run_id = ANY(%(run_ids)b::text[])",
)

# Channel values that no remaining checkpoint of the thread names any more.
COLLECT_UNREFERENCED_VALUES = """
DELETE FROM colosseum_channel_values v
WHERE v.thread_id = ANY(%(thread_ids)b::text[])
  AND NOT EXISTS (
      SELECT 1 FROM colosseum_checkpoints c
      WHERE c.thread_id = v.thread_id AND c.checkpoint_ns = v.checkpoint_ns
        AND c.checkpoint -> 'channel_versions' ->> v.channel = v.version)
"""

# The history of some channels as of one checkpoint, in one round trip.
# `chain` walks parent links from the target (depth 0). Each row carries the
# channels still being walked when it was reached (`entering`) and those left
# after it (`remaining`). A channel stops at the first ancestor holding a value
# for it, or at a checkpoint holding its frozen history (the target included).
# The target's own writes are pending for the next step and are not history.
DELTA_HISTORY = """
WITH RECURSIVE chain(checkpoint_id, parent_checkpoint_id, versions, depth, entering, remaining) AS (
    SELECT t.checkpoint_id, t.parent_checkpoint_id, t.checkpoint -> 'channel_versions', 0,
           %(channels)b::text[],
           ARRAY(SELECT ch FROM unnest(%(channels)b::text[]) AS ch
                 WHERE NOT EXISTS (
                     SELECT 1 FROM colosseum_delta_histories h
                     WHERE h.thread_id = %(thread_id)s AND h.checkpoint_ns = %(checkpoint_ns)s
                       AND h.checkpoint_id = t.checkpoint_id AND h.channel = ch))
    FROM (SELECT * FROM colosseum_checkpoints
          WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
            AND (%(checkpoint_id)s::text IS NULL OR checkpoint_id = %(checkpoint_id)s)
          ORDER BY checkpoint_id DESC LIMIT 1) AS t
  UNION ALL
    SELECT c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint -> 'channel_versions',
           chain.depth + 1, chain.remaining,
           ARRAY(SELECT ch FROM unnest(chain.remaining) AS ch
                 WHERE NOT EXISTS (
                     SELECT 1 FROM colosseum_channel_values v
                     WHERE v.thread_id = %(thread_id)s AND v.checkpoint_ns = %(checkpoint_ns)s
                       AND v.channel = ch AND v.version = c.checkpoint -> 'channel_versions' ->> ch
                       AND v.encoding <> 'empty')
                   AND NOT EXISTS (
                     SELECT 1 FROM colosseum_delta_histories h
                     WHERE h.thread_id = %(thread_id)s AND h.checkpoint_ns = %(checkpoint_ns)s
                       AND h.checkpoint_id = c.checkpoint_id AND h.channel = ch))
    FROM chain
    JOIN colosseum_checkpoints c
      ON c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
     AND c.checkpoint_id = chain.parent_checkpoint_id
    WHERE cardinality(chain.remaining) > 0
)
SELECT 'write', chain.depth, w.channel, w.task_id, w.task_path, w.idx,
       w.encoding, w.value::text, w.value_bytes, w.value_type
FROM chain
JOIN colosseum_writes w
  ON w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
 AND w.checkpoint_id = chain.checkpoint_id AND w.channel = ANY(chain.entering)
WHERE chain.depth > 0
UNION ALL
SELECT 'value', chain.depth, v.channel, NULL, NULL, NULL,
       v.encoding, v.value::text, v.value_bytes, v.value_type
FROM chain
JOIN colosseum_channel_values v
  ON v.thread_id = %(thread_id)s AND v.checkpoint_ns = %(checkpoint_ns)s
 AND v.channel = ANY(chain.entering) AND NOT v.channel = ANY(chain.remaining)
 AND v.version = chain.versions ->> v.channel AND v.encoding <> 'empty'
WHERE chain.depth > 0
UNION ALL
SELECT 'frozen', chain.depth, h.channel, h.task_id, NULL, h.seq,
       h.encoding, h.value::text, h.value_bytes, h.value_type
FROM chain
JOIN colosseum_delta_histories h
  ON h.thread_id = %(thread_id)s AND h.checkpoint_ns = %(checkpoint_ns)s
 AND h.checkpoint_id = chain.checkpoint_id
 AND h.channel = ANY(chain.entering) AND NOT h.channel = ANY(chain.remaining)
"""
