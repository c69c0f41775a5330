"""The Store benchmark: ColosseumStore against PostgresStore, one process, one database.

Run (from the repository root):

    .venv/bin/python -m benchmarks.store                  # defaults below
    .venv/bin/python -m benchmarks.store --items 2000 --vectors 20000 --dims 256

The database: a fresh one on the embedded PostgreSQL 18 (pgvector), started in
a private data directory for this run and stopped after it, unless
COLOSSEUM_BENCH_STORE_URL names an admin URL of a server with pgvector. Both
stores run in this process on that database (their tables do not overlap), each
opened as its users open it: `X.from_conn_string(url, pool_config=..., index=...)`.

Workloads:
  kv      `--items` items of ~300 bytes in 20 namespaces: p50 of a single put,
          a get of one of 200 existing items (read again and again), a filtered
          search (limit 10) of a namespace; bytes per item (tables and indexes,
          after VACUUM). Three cells take turns sample by sample: ours, ours
          with hot items in Redis (COLOSSEUM_BENCH_REDIS_URL, else the local
          Redis, under a prefix of this run's, flushed after), the reference.
  vector  `--vectors` items with `--dims`-dimension vectors from a seeded
          generator (noisy copies of 1,000 topic centres, unit length); the
          "embedding model" looks the vector up, so no model runs. recall@10 of
          each store's `search(query=...)` against an exact scan (numpy) over
          `--queries` queries, and p50 of the search.
  hybrid  a small labelled set shipped below (LABELLED_DOCS / LABELLED_QUERIES):
          MRR and recall@3 of vector, full-text and hybrid retrieval with a
          feature-hashing embedding (tests' HashEmbeddings).

Output: a table on stdout and benchmarks/results/store.{md,json}. Times are
measured, never asserted; ratios are ColosseumStore / PostgresStore.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from langgraph.store.base import PutOp
from langgraph.store.postgres import PostgresStore

from langgraph_colosseum import telemetry
from langgraph_colosseum.memory import ColosseumStore

telemetry.disable()  # measured without the `otel` extra (see benchmarks/common.py)

RESULTS = Path(__file__).resolve().parent / "results"
OURS, REF = "ColosseumStore", "PostgresStore"
# Ours with hot items in Redis (the saver's cache, `redis_url=`).
OURS_HOT = "ColosseumStore+Redis"
REDIS_URL = os.environ.get("COLOSSEUM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
CACHE_PREFIX = f"colosseum-bench-store-{uuid.uuid4().hex[:8]}:"
OUR_TABLES = ("colosseum_store_items", "colosseum_store_vectors")
REF_TABLES = ("store", "store_vectors")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@contextmanager
def database() -> Iterator[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.integration.store_support import fresh_database, private_embedded_postgres

    admin = os.environ.get("COLOSSEUM_BENCH_STORE_URL")
    if admin is None:
        with private_embedded_postgres() as url, fresh_database(url) as db:
            yield db
    else:
        with fresh_database(admin) as db:
            yield db


@contextmanager
def open_store(name: str, url: str, index: dict | None = None) -> Iterator[Any]:
    cls = PostgresStore if name == REF else ColosseumStore
    options: dict[str, Any] = {}
    if name == OURS_HOT:
        options = {"redis_url": REDIS_URL, "cache_prefix": CACHE_PREFIX}
    with cls.from_conn_string(url, pool_config={"max_size": 4}, index=index, **options) as store:
        store.setup()
        try:
            yield store
        finally:
            if name == OURS_HOT:
                store.saver.flush_cache()  # this run's keys, and nothing else


def sql(url: str, statement: str, params: Any = None) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def table_bytes(url: str, tables: tuple[str, ...]) -> int:
    total = 0
    for table in tables:
        if sql(url, "SELECT to_regclass(%s)", (table,)) == [(None,)]:
            continue
        sql(url, f"VACUUM {table}")
        total += sql(url, "SELECT pg_total_relation_size(%s::regclass)", (table,))[0][0]
    return total


def p50_ms(fn: Callable[[int], Any], n: int) -> float:
    times = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def truncate(url: str) -> None:
    for table in (*OUR_TABLES, *REF_TABLES):
        if sql(url, "SELECT to_regclass(%s)", (table,)) != [(None,)]:
            sql(url, f"TRUNCATE {table} CASCADE")


# ----------------------------------------------------------------- kv


def kv_value(rng: random.Random, i: int) -> dict:
    return {
        "text": "".join(rng.choice("abcdefghij ") for _ in range(200)),
        "kind": rng.choice(["pref", "fact", "summary"]),
        "score": rng.randint(0, 100),
        "i": i,
    }


def run_kv(url: str, items: int, samples: int) -> dict:
    """The three cells side by side, sample by sample (a load spike hits all
    three alike): ours on Postgres, ours with hot items in Redis, the reference."""
    truncate(url)
    rng = random.Random(7)
    values = [kv_value(rng, i) for i in range(items)]
    names = (OURS, OURS_HOT, REF)
    with (
        open_store(OURS, url) as ours,
        open_store(OURS_HOT, url) as hot,
        open_store(REF, url) as ref,
    ):
        stores = dict(zip(names, (ours, hot, ref)))
        for name in (OURS, REF):  # the hot cell reads our tables
            ops = [PutOp(("bench", f"ns{i % 20}"), f"k{i}", v) for i, v in enumerate(values)]
            for start in range(0, items, 500):
                stores[name].batch(ops[start : start + 500])
        prefix = {OURS: "puts", OURS_HOT: "hot-puts", REF: "puts"}
        put = p50s(
            stores,
            lambda name, store, j: store.put(("bench", prefix[name]), f"p{j}", values[j % items]),
            samples,
        )
        # The same items, read again and again, as memory lookups are (read
        # once before timing, by every store alike).
        for store in stores.values():
            for k in range(200):
                assert get_existing(store, k) is not None
        get = p50s(
            stores,
            lambda _, store, j: get_existing(store, (j * 7919) % 200),
            samples,
        )
        search = p50s(
            stores,
            lambda _, store, j: store.search(
                ("bench", f"ns{j % 20}"), filter={"kind": "fact"}, limit=10
            ),
            samples,
        )
    ours_bytes = table_bytes(url, OUR_TABLES) / (items + 2 * samples)
    out = {
        name: {
            "put_p50_ms": put[name],
            "get_p50_ms": get[name],
            "search_p50_ms": search[name],
            "bytes_per_item": ours_bytes
            if name != REF
            else table_bytes(url, REF_TABLES) / (items + samples),
        }
        for name in names
    }
    for name in names:
        log(f"kv {name}: {out[name]}")
    return out


def get_existing(store: Any, i: int) -> Any:
    return store.get(("bench", f"ns{i % 20}"), f"k{i}")


def p50s(stores: dict[str, Any], fn: Callable[[str, Any, int], Any], n: int) -> dict[str, float]:
    """p50 (ms) of `fn` per store, the stores taking turns sample by sample."""
    times: dict[str, list[float]] = {name: [] for name in stores}
    for i in range(n):
        for name, store in stores.items():
            start = time.perf_counter()
            fn(name, store, i)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1000 for name, t in times.items()}


# ------------------------------------------------------------- vector


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def seeded_vectors(n: int, dims: int, seed: int, centres: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(centres), n)
    return unit(centres[picks] + 0.35 * rng.standard_normal((n, dims)) / np.sqrt(dims) * 4)


class LookupEmbeddings:
    """An embedding "model" that looks the text's vector up: "v123" is row 123."""

    def __init__(self, table: dict[str, np.ndarray]) -> None:
        self.table = table

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t].tolist() for t in texts]


def run_vector(url: str, n: int, dims: int, queries: int, ef_search: int | None) -> dict:
    """Both stores loaded through their API, each ANN index built once over the
    loaded table (as `CREATE INDEX` after a bulk load; inserting 100k vectors
    into a live HNSW index took over an hour per store here), then the two
    stores take turns query by query."""
    rng = np.random.default_rng(42)
    centres = unit(rng.standard_normal((1000, dims)))
    docs = seeded_vectors(n, dims, 1, centres).astype(np.float32)
    qs = seeded_vectors(queries, dims, 2, centres).astype(np.float32)
    table = {f"v{i}": docs[i] for i in range(n)} | {f"q{i}": qs[i] for i in range(queries)}
    exact = np.argsort(-(qs @ docs.T), axis=1)[:, :10]
    truncate(url)
    sql(url, "DROP TABLE IF EXISTS store_vectors, colosseum_store_vectors CASCADE")
    if sql(url, "SELECT to_regclass('vector_migrations')") != [(None,)]:
        sql(url, "DELETE FROM vector_migrations WHERE true")
    if sql(url, "SELECT to_regclass('colosseum_store_schema')") != [(None,)]:
        sql(url, "DELETE FROM colosseum_store_schema WHERE component = 'vectors'")
    out: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        stores = {}
        for name in (OURS, REF):
            index = {
                "dims": dims,
                "embed": LookupEmbeddings(table),
                "fields": ["text"],
                "distance_type": "cosine",
                "ann_index_config": {"kind": "hnsw", "ef_search": ef_search}
                if name == OURS and ef_search
                else {"kind": "hnsw"},
            }
            store = stores[name] = stack.enter_context(open_store(name, url, index))
            vectors = "colosseum_store_vectors" if name == OURS else "store_vectors"
            ann = sql(
                url,
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s "
                "AND indexdef LIKE '%%USING hnsw%%'",
                (vectors,),
            )
            for index_name, _ in ann:
                sql(url, f'DROP INDEX "{index_name}"')
            started = time.perf_counter()
            for start in range(0, n, 1000):
                store.batch(
                    [
                        PutOp(("vec",), f"d{i}", {"text": f"v{i}"})
                        for i in range(start, min(n, start + 1000))
                    ]
                )
                if (start // 1000) % 10 == 9:
                    log(f"vector {name}: loaded {min(n, start + 1000)}/{n}")
            load_s = time.perf_counter() - started
            started = time.perf_counter()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("SET maintenance_work_mem = '512MB'")
                for _, definition in ann:
                    conn.execute(definition)
                conn.execute(f"ANALYZE {vectors}")
            build_s = time.perf_counter() - started
            log(f"vector {name}: loaded in {load_s:.0f} s, index built in {build_s:.0f} s")
            tables = OUR_TABLES if name == OURS else REF_TABLES
            out[name] = {
                "load_s": load_s,
                "index_build_s": build_s,
                "bytes_per_item": table_bytes(url, tables) / n,
            }
        hits: dict[str, list[float]] = {name: [] for name in stores}
        times: dict[str, list[float]] = {name: [] for name in stores}
        for qi in range(-3, queries):  # three warm-up queries each
            for name, store in stores.items():
                t0 = time.perf_counter()
                found = store.search(("vec",), query=f"q{max(qi, 0)}", limit=10)
                if qi < 0:
                    continue
                times[name].append(time.perf_counter() - t0)
                got = {int(item.key[1:]) for item in found}
                hits[name].append(len(got & set(exact[qi].tolist())) / 10)
        for name in stores:
            out[name]["recall_at_10"] = float(np.mean(hits[name]))
            out[name]["search_p50_ms"] = statistics.median(times[name]) * 1000
            log(f"vector {name}: {out[name]}")
    return out


# -------------------------------------------------------------- hybrid

LABELLED_DOCS = {
    "risk1": "The CIO caps portfolio leverage at 1.2x and forbids margin loans.",
    "risk2": "Drawdown limit: cut exposure when a position loses 8 percent.",
    "risk3": "No single ticker may exceed 5 percent of the book.",
    "esg1": "Exclude coal miners and tobacco companies from every mandate.",
    "esg2": "Prefer issuers with published net-zero transition plans.",
    "div1": "Income sleeve targets a 4 percent dividend yield with monthly payers.",
    "div2": "Reinvest dividends unless the client asks for cash distributions.",
    "fx1": "Hedge euro exposure back to dollars above 20 percent of assets.",
    "fx2": "Yen positions stay unhedged; the CIO sees them as a crisis hedge.",
    "tax1": "Harvest tax losses in December, avoiding wash sales for 30 days.",
    "tax2": "Municipal bonds go to taxable accounts of high-bracket clients.",
    "ops1": "The broker session token expires after 15 minutes of inactivity.",
    "ops2": "Orders above 1 million dollars need a second approver.",
    "ops3": "Trading halts at 15:45 for the end-of-day reconciliation.",
    "mkt1": "Momentum signals are ignored during earnings week.",
    "mkt2": "Volatility above 30 on the VIX halves all new position sizes.",
}
LABELLED_QUERIES = {
    "how much leverage is allowed": {"risk1"},
    "maximum position size per stock": {"risk3"},
    "rules on dividends": {"div1", "div2"},
    "currency hedging policy": {"fx1", "fx2"},
    "tax loss harvesting": {"tax1"},
    "when does the broker token expire": {"ops1"},
    "approval needed for large orders": {"ops2"},
    "what to do when volatility spikes": {"mkt2"},
    "excluded sectors coal tobacco": {"esg1"},
    "stop loss drawdown rule": {"risk2"},
}


def run_hybrid(url: str) -> dict:
    from tests.integration.store_support import HashEmbeddings

    truncate(url)
    sql(url, "DROP TABLE IF EXISTS colosseum_store_vectors CASCADE")
    sql(url, "DELETE FROM colosseum_store_schema WHERE component = 'vectors'")
    index = {"dims": 256, "embed": HashEmbeddings(256), "fields": ["text"]}
    out: dict[str, dict] = {}
    with open_store(OURS, url, index) as store:
        store.batch([PutOp(("kb",), k, {"text": t}) for k, t in LABELLED_DOCS.items()])
        for mode in ("vector", "text", "hybrid"):
            rr, rec = [], []
            for query, relevant in LABELLED_QUERIES.items():
                ranked = [
                    item.key for item in store.search(("kb",), query=query, limit=5, mode=mode)
                ]
                first = next((i for i, k in enumerate(ranked) if k in relevant), None)
                rr.append(0.0 if first is None else 1 / (first + 1))
                rec.append(len(set(ranked[:3]) & relevant) / len(relevant))
            out[mode] = {"mrr": statistics.mean(rr), "recall_at_3": statistics.mean(rec)}
    log(f"hybrid: {out}")
    return out


# --------------------------------------------------------------- main


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def report(results: dict, args: argparse.Namespace) -> str:
    kv, vec, hyb = results.get("kv"), results.get("vector"), results.get("hybrid")
    lines = [
        "# Store benchmark",
        "",
        f"Run {results['when']} on {results['server']}; {args.items} kv items, "
        f"{args.vectors} vectors x {args.dims} dims, {args.queries} queries.",
        "",
    ]
    if kv:
        lines += [
            f"| kv | {OURS} | {OURS_HOT} | {REF} | ratio | ratio +Redis |",
            "|---|---|---|---|---|---|",
        ]
        for field, label in (
            ("get_p50_ms", "get p50 (ms)"),
            ("put_p50_ms", "put p50 (ms)"),
            ("search_p50_ms", "filtered search p50 (ms)"),
            ("bytes_per_item", "bytes per item"),
        ):
            a, h, b = kv[OURS][field], kv[OURS_HOT][field], kv[REF][field]
            lines.append(
                f"| {label} | {a:.3f} | {h:.3f} | {b:.3f} | {ratio(a, b)} | {ratio(h, b)} |"
            )
        lines.append("")
    if vec:
        lines += ["| vector | ColosseumStore | PostgresStore | ratio |", "|---|---|---|---|"]
        for field, label in (
            ("recall_at_10", "recall@10 vs exact scan"),
            ("search_p50_ms", "search p50 (ms)"),
            ("load_s", "load time (s)"),
            ("index_build_s", "index build (s)"),
            ("bytes_per_item", "bytes per item"),
        ):
            a, b = vec[OURS][field], vec[REF][field]
            lines.append(f"| {label} | {a:.3f} | {b:.3f} | {ratio(a, b)} |")
        lines.append("")
    if hyb:
        lines += ["| labelled set (ColosseumStore) | MRR | recall@3 |", "|---|---|---|"]
        for mode, row in hyb.items():
            lines.append(f"| {mode} | {row['mrr']:.3f} | {row['recall_at_3']:.3f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--dims", type=int, default=256)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument(
        "--ef-search", type=int, default=None, help="ours; default: the server's (pgvector: 40)"
    )
    parser.add_argument("--workloads", nargs="*", default=["kv", "vector", "hybrid"])
    parser.add_argument("--out", default="store")
    args = parser.parse_args()
    results: dict[str, Any] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    with database() as url:
        results["server"] = (
            sql(url, "SHOW server_version")[0][0]
            + " + pgvector "
            + str(
                sql(url, "SELECT default_version FROM pg_available_extensions WHERE name='vector'")[
                    0
                ][0]
            )
        )
        if "kv" in args.workloads:
            results["kv"] = run_kv(url, args.items, args.samples)
        if "vector" in args.workloads:
            results["vector"] = run_vector(
                url, args.vectors, args.dims, args.queries, args.ef_search
            )
        if "hybrid" in args.workloads:
            results["hybrid"] = run_hybrid(url)
    results["args"] = vars(args)
    text = report(results, args)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.md").write_text(text + "\n")
    (RESULTS / f"{args.out}.json").write_text(json.dumps(results, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
