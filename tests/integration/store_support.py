"""Shared pieces of the Store tests: a deterministic embedding, the embedded
PostgreSQL 18 (pgvector) on a private data directory, and a driver-neutral
facade so each behaviour is written once and run on both stores."""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from langchain_core.embeddings import Embeddings
from psycopg import conninfo

from langgraph_colosseum import embedded

_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbeddings(Embeddings):
    """Feature hashing of lower-cased words and character trigrams: texts sharing
    words or spelling land close, with no model. `calls` records every call."""

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims
        self.calls: list[tuple[str, list[str]]] = []

    def _features(self, text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        grams = [w[i : i + 3] for w in words for i in range(max(1, len(w) - 2))]
        return [f"w:{w}" for w in words] + [f"g:{g}" for g in grams]

    def vector(self, text: str) -> list[float]:
        v = [0.0] * self.dims
        for feature in self._features(text) or ["<empty>"]:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dims
            v[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(("documents", list(texts)))
        return [self.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.calls.append(("query", [text]))
        return self.vector(text)

    def documents_embedded(self) -> list[str]:
        return [t for kind, texts in self.calls if kind == "documents" for t in texts]


@contextmanager
def private_embedded_postgres() -> Iterator[str]:
    """The embedded PostgreSQL 18 in a data directory of our own (short: it holds
    the unix socket), so no other user of the shared one is disturbed."""
    directory = tempfile.mkdtemp(prefix="cst-", dir="/tmp")
    previous = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = directory
    try:
        server = embedded._postgres()
        url = embedded.embedded_postgres_url()
    finally:
        if previous is None:
            os.environ.pop("XDG_DATA_HOME", None)
        else:
            os.environ["XDG_DATA_HOME"] = previous
    try:
        yield url
    finally:
        embedded._release(server)
        # Its data directory too: a 100,000-vector benchmark leaves half a gigabyte.
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def fresh_database(admin_url: str, prefix: str = "colosseum_store") -> Iterator[str]:
    """An empty database of the caller's own on `admin_url`'s server, dropped after."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield conninfo.make_conninfo(admin_url, dbname=name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Facade:
    """The Store API as coroutines, on a blocking store (run in a thread, through
    its sync methods) or an async one (its a-methods): one test, both drivers."""

    def __init__(self, store: Any, is_async: bool) -> None:
        self.store = store
        self.is_async = is_async

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(self.store, f"a{name}")(*args, **kwargs)
        return await asyncio.to_thread(getattr(self.store, name), *args, **kwargs)

    async def put(self, *args: Any, **kwargs: Any) -> None:
        await self._call("put", *args, **kwargs)

    async def get(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("get", *args, **kwargs)

    async def delete(self, *args: Any, **kwargs: Any) -> None:
        await self._call("delete", *args, **kwargs)

    async def search(self, *args: Any, **kwargs: Any) -> Any:
        return await self._call("search", *args, **kwargs)

    async def list_namespaces(self, **kwargs: Any) -> Any:
        return await self._call("list_namespaces", **kwargs)

    async def batch(self, ops: list) -> list:
        return await self._call("batch", ops)

    async def sweep_ttl(self) -> int:
        if self.is_async:
            return await self.store.sweep_ttl()
        return await asyncio.to_thread(self.store.sweep_ttl)

    async def setup(self) -> int:
        if self.is_async:
            return await self.store.setup()
        return await asyncio.to_thread(self.store.setup)


def sql(url: str, statement: str, params: Any = None) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []
