"""SQL of the long-term memory Store (`ColosseumStore`), as named constants.

A namespace is stored as its labels joined by "." (`("users", "u1")` is
``users.u1``): `BaseStore` forbids "." and empty labels, so the text is
unambiguous, and under the "C" collation every descendant of ``users.u1`` sorts
between ``users.u1.`` and ``users.u1/`` ("/" follows "." in ASCII). A prefix
search is then an index range scan, with nothing to escape (LIKE would need its
`_` and `%` escaped in labels).

Every statement that reads items repeats `ALIVE`: an expired item is never
returned, swept or not. Timestamps are Postgres' `now()`, the transaction's
start, so every row a batch writes carries the same `updated_at`.

The vector table's DDL is completed by `vector_ddl` with the configured
dimensions and vector type (validated there; nothing else is formatted in).
"""

from __future__ import annotations

from langgraph_colosseum._core.sql import INCARNATION, STALE_HEADS

SCHEMA_TABLE = "colosseum_store_schema"

CREATE_SCHEMA_TABLE = f"""
CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (
    component  text NOT NULL,
    version    integer NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (component, version)
)
"""
CURRENT_VERSION = f"SELECT coalesce(max(version), 0) FROM {SCHEMA_TABLE} WHERE component = 'items'"

# Append only; see _core/schema.py for the rules. Component 'items'.
ITEM_MIGRATIONS: list[str] = [
    # 1: items. ttl_minutes is kept so a read can push expires_at forward by it.
    # text_search holds the indexed fields' text for hybrid retrieval (NULL when
    # the store has no index, or the item was put with index=False).
    """
    CREATE TABLE IF NOT EXISTS colosseum_store_items (
        prefix      text COLLATE "C" NOT NULL,
        key         text COLLATE "C" NOT NULL,
        value       jsonb NOT NULL,
        created_at  timestamptz NOT NULL DEFAULT now(),
        updated_at  timestamptz NOT NULL DEFAULT now(),
        expires_at  timestamptz,
        ttl_minutes double precision,
        text_search tsvector,
        PRIMARY KEY (prefix, key)
    );
    CREATE INDEX IF NOT EXISTS colosseum_store_items_expires
        ON colosseum_store_items (expires_at) WHERE expires_at IS NOT NULL;
    -- filter={...} equality goes through containment (@>) on this index.
    CREATE INDEX IF NOT EXISTS colosseum_store_items_value
        ON colosseum_store_items USING gin (value jsonb_path_ops);
    CREATE INDEX IF NOT EXISTS colosseum_store_items_text
        ON colosseum_store_items USING gin (text_search) WHERE text_search IS NOT NULL;
    """,
]

# Component 'vectors', run only by a store configured with an index.
VECTOR_MIGRATIONS: list[str] = [
    # 1: one embedding per (item, indexed field). text_hash is a digest of the
    # text that was embedded: a put re-embeds only the fields whose text changed.
    """
    CREATE TABLE IF NOT EXISTS colosseum_store_vectors (
        prefix     text COLLATE "C" NOT NULL,
        key        text COLLATE "C" NOT NULL,
        field_name text COLLATE "C" NOT NULL,
        text_hash  text NOT NULL,
        embedding  {vector_type}({dims}) NOT NULL,
        PRIMARY KEY (prefix, key, field_name),
        FOREIGN KEY (prefix, key) REFERENCES colosseum_store_items (prefix, key)
            ON DELETE CASCADE
    );
    """,
]

LOCK = "SELECT pg_advisory_xact_lock(%(key)s)"

PGVECTOR = """
SELECT (SELECT extversion FROM pg_extension WHERE extname = 'vector'),
       EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')
"""
CREATE_PGVECTOR = "CREATE EXTENSION IF NOT EXISTS vector"
VECTOR_COLUMN_TYPE = """
SELECT format_type(atttypid, atttypmod) FROM pg_attribute
 WHERE attrelid = 'colosseum_store_vectors'::regclass AND attname = 'embedding'
"""
# The ANN index is named for its operator class, so a store configured with
# another distance gets its own index instead of a sequential scan.
HNSW_INDEX = """
CREATE INDEX IF NOT EXISTS colosseum_store_vectors_{ops}
    ON colosseum_store_vectors USING hnsw (embedding {ops}) WITH (m = {m}, ef_construction = {ef})
"""

ALIVE = "(i.expires_at IS NULL OR i.expires_at > now())"
# Namespace scoping: the namespace itself, or a descendant (see module docstring).
IN_NAMESPACE = "(i.prefix = %(ns)s OR (i.prefix > %(ns_lo)s AND i.prefix < %(ns_hi)s))"

# ------------------------------------------------------------------- reads

# An item's lifetime left, as this statement's now() counts it (NULL: no TTL):
# how long a hot copy of it may live in Redis (hot_items.py).
REMAINING_MS = "extract(epoch FROM i.expires_at - now())::float8 * 1000 AS remaining_ms"

GET = f"""
SELECT i.prefix, i.key, i.value::text, i.created_at, i.updated_at, {REMAINING_MS}
FROM unnest(%(prefixes)s::text[], %(keys)s::text[]) AS w(prefix, key)
JOIN colosseum_store_items i ON i.prefix = w.prefix AND i.key = w.key
WHERE {ALIVE}
"""

# A read that refreshes: the UPDATE runs whether or not it is referenced (it is
# a data-modifying CTE), and sees the same snapshot as the SELECT. An expired
# row is not brought back by its refresh.
GET_REFRESHING = f"""
WITH wanted AS (
    SELECT * FROM unnest(%(prefixes)s::text[], %(keys)s::text[], %(refresh)s::bool[])
        AS w(prefix, key, refresh)
), refreshed AS (
    UPDATE colosseum_store_items i
       SET expires_at = now() + i.ttl_minutes * interval '1 minute'
      FROM wanted w
     WHERE i.prefix = w.prefix AND i.key = w.key AND w.refresh
       AND i.ttl_minutes IS NOT NULL AND i.expires_at > now()
)
SELECT i.prefix, i.key, i.value::text, i.created_at, i.updated_at, {REMAINING_MS}
FROM wanted w
JOIN colosseum_store_items i ON i.prefix = w.prefix AND i.key = w.key
WHERE {ALIVE}
"""

# Search templates: {where} is IN_NAMESPACE / ALIVE / compiled filters, all
# parameterised. Each returns prefix, key, value, created_at, updated_at, score
# and rank (the order of the page), so a refreshing wrapper can keep the order.
SEARCH_RECENT = """
SELECT i.prefix, i.key, i.value::text, i.created_at, i.updated_at, NULL::float8 AS score,
       row_number() OVER (ORDER BY i.updated_at DESC, i.prefix, i.key) AS rank
FROM colosseum_store_items i
WHERE {where}
ORDER BY i.updated_at DESC, i.prefix, i.key
LIMIT %(limit)s OFFSET %(offset)s
"""

# The inner ORDER BY is the bare distance operator, so pgvector's HNSW index
# can serve it (with iterative scans when filters reject candidates); an item
# indexed on several fields scores by its best field.
_VECTOR_HITS = """
SELECT c.prefix, c.key, min(c.distance) AS distance,
       row_number() OVER (ORDER BY min(c.distance), c.prefix, c.key) AS rank
FROM (
    SELECT v.prefix, v.key, v.embedding {op} %(q)s::{vector_type} AS distance
    FROM colosseum_store_vectors v
    JOIN colosseum_store_items i ON i.prefix = v.prefix AND i.key = v.key
    WHERE {where}
    ORDER BY v.embedding {op} %(q)s::{vector_type}
    LIMIT %(candidates)s
) c
GROUP BY c.prefix, c.key
"""

# Any word of the query may match (plainto_tsquery ANDs them): the ranking, not
# the match, decides. The cast back from text does not re-normalise lexemes.
_TEXT_HITS = """
SELECT i.prefix, i.key, ts_rank_cd(i.text_search, tq.q) AS text_rank,
       row_number() OVER (ORDER BY ts_rank_cd(i.text_search, tq.q) DESC, i.prefix, i.key) AS rank
FROM colosseum_store_items i,
     (SELECT replace(plainto_tsquery(%(ts_config)s::regconfig, %(text)s)::text, '&', '|')::tsquery
             AS q) tq
WHERE i.text_search @@ tq.q AND {where}
ORDER BY text_rank DESC, i.prefix, i.key
LIMIT %(candidates)s
"""

SEARCH_VECTOR = (
    "WITH hits AS ("
    + _VECTOR_HITS
    + """)
SELECT i.prefix, i.key, i.value::text, i.created_at, i.updated_at, {score} AS score, h.rank
FROM hits h JOIN colosseum_store_items i ON i.prefix = h.prefix AND i.key = h.key
ORDER BY h.rank
LIMIT %(limit)s OFFSET %(offset)s
"""
)

SEARCH_TEXT = (
    "WITH hits AS ("
    + _TEXT_HITS
    + """)
SELECT i.prefix, i.key, i.value::text, i.created_at, i.updated_at, h.text_rank::float8 AS score,
       h.rank
FROM hits h JOIN colosseum_store_items i ON i.prefix = h.prefix AND i.key = h.key
ORDER BY h.rank
LIMIT %(limit)s OFFSET %(offset)s
"""
)

# Reciprocal rank fusion: 1/(k + rank) summed over the two rankings.
SEARCH_HYBRID = (
    "WITH vector_hits AS ("
    + _VECTOR_HITS
    + "), text_hits AS ("
    + _TEXT_HITS
    + """), fused AS (
    SELECT coalesce(v.prefix, t.prefix) AS prefix, coalesce(v.key, t.key) AS key,
           coalesce(1.0 / (%(rrf_k)s + v.rank), 0) + coalesce(1.0 / (%(rrf_k)s + t.rank), 0)
               AS score
    FROM vector_hits v FULL OUTER JOIN text_hits t ON v.prefix = t.prefix AND v.key = t.key
), ranked AS (
    SELECT f.*, row_number() OVER (ORDER BY f.score DESC, f.prefix, f.key) AS rank FROM fused f
)
SELECT i.prefix, i.key, i.value::text, i.created_at, i.updated_at, h.score::float8, h.rank
FROM ranked h JOIN colosseum_store_items i ON i.prefix = h.prefix AND i.key = h.key
ORDER BY h.rank
LIMIT %(limit)s OFFSET %(offset)s
"""
)

# Wraps a search whose reads refresh the TTL of what they return.
SEARCH_REFRESHING = """
WITH found AS ({search}), refreshed AS (
    UPDATE colosseum_store_items i
       SET expires_at = now() + i.ttl_minutes * interval '1 minute'
      FROM found f
     WHERE i.prefix = f.prefix AND i.key = f.key AND i.ttl_minutes IS NOT NULL
)
SELECT * FROM found ORDER BY rank
"""

# Namespaces compare as label arrays (the order of InMemoryStore's tuples),
# under "C" (code point order, as Python compares str).
LIST_NAMESPACES = f"""
SELECT DISTINCT CASE WHEN %(depth)s::int IS NULL THEN n.labels
                     ELSE n.labels[1:%(depth)s::int] END AS ns
FROM (
    SELECT string_to_array(d.prefix, '.') AS labels
    FROM (SELECT DISTINCT i.prefix FROM colosseum_store_items i WHERE {ALIVE}) d
) n
WHERE {{where}}
ORDER BY ns
LIMIT %(limit)s OFFSET %(offset)s
"""

# ------------------------------------------------------------------ writes

# created_at survives an update, unless the row it replaces had expired.
UPSERT = """
INSERT INTO colosseum_store_items AS i
    (prefix, key, value, expires_at, ttl_minutes, text_search)
SELECT p.prefix, p.key, p.value::jsonb,
       now() + p.ttl * interval '1 minute', p.ttl,
       CASE WHEN p.text IS NULL THEN NULL ELSE to_tsvector(%(ts_config)s::regconfig, p.text) END
FROM unnest(%(prefixes)s::text[], %(keys)s::text[], %(values)s::text[], %(ttls)s::float8[],
            %(texts)s::text[]) AS p(prefix, key, value, ttl, text)
ON CONFLICT (prefix, key) DO UPDATE
   SET value = EXCLUDED.value,
       created_at = CASE WHEN i.expires_at <= now() THEN now() ELSE i.created_at END,
       updated_at = now(),
       expires_at = EXCLUDED.expires_at,
       ttl_minutes = EXCLUDED.ttl_minutes,
       text_search = EXCLUDED.text_search
"""

# With hot items: in every write's transaction, so that after its commit the
# writer drops the items' Redis copies under the right incarnation, and drops
# a page of the copies other writers could not (see store.py, the hot head's truth).
# {write} runs as a data-modifying CTE (always executed, referenced or not).
WITH_WRITE_TRUTH = (
    f"WITH written AS ({{write}}) SELECT {INCARNATION} AS incarnation, {STALE_HEADS} AS stale_heads"
)

DELETE = """
DELETE FROM colosseum_store_items i
USING unnest(%(prefixes)s::text[], %(keys)s::text[]) AS d(prefix, key)
WHERE i.prefix = d.prefix AND i.key = d.key
"""

VECTOR_HASHES = """
SELECT v.prefix, v.key, v.field_name, v.text_hash
FROM unnest(%(prefixes)s::text[], %(keys)s::text[]) AS w(prefix, key)
JOIN colosseum_store_vectors v ON v.prefix = w.prefix AND v.key = w.key
"""

# Drops every vector of the put items except those whose text is still the
# text embedded: removed fields, index=False, and a vector another writer
# changed since VECTOR_HASHES read it (missing beats wrong; the next put of
# the item embeds it again).
VECTOR_PRUNE = """
DELETE FROM colosseum_store_vectors v
USING unnest(%(prefixes)s::text[], %(keys)s::text[]) AS w(prefix, key)
WHERE v.prefix = w.prefix AND v.key = w.key
  AND (v.field_name, v.text_hash) NOT IN (
      SELECT k.field_name, k.text_hash
      FROM unnest(%(keep_prefixes)s::text[], %(keep_keys)s::text[], %(keep_fields)s::text[],
                  %(keep_hashes)s::text[]) AS k(prefix, key, field_name, text_hash)
      WHERE k.prefix = v.prefix AND k.key = v.key)
"""

VECTOR_UPSERT = """
INSERT INTO colosseum_store_vectors (prefix, key, field_name, text_hash, embedding)
SELECT e.prefix, e.key, e.field_name, e.text_hash, e.embedding::{vector_type}
FROM unnest(%(prefixes)s::text[], %(keys)s::text[], %(fields)s::text[], %(hashes)s::text[],
            %(embeddings)s::text[]) AS e(prefix, key, field_name, text_hash, embedding)
ON CONFLICT (prefix, key, field_name) DO UPDATE
   SET text_hash = EXCLUDED.text_hash, embedding = EXCLUDED.embedding
"""

# ------------------------------------------------------------- maintenance

# SKIP LOCKED: two sweepers share the work; a row being refreshed is rechecked
# under its lock, so a refresh that commits first saves it.
SWEEP = """
WITH expired AS (
    SELECT prefix, key FROM colosseum_store_items
    WHERE expires_at <= now()
    ORDER BY expires_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM colosseum_store_items i USING expired e
WHERE i.prefix = e.prefix AND i.key = e.key AND i.expires_at <= now()
RETURNING 1
"""
