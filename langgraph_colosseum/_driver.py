"""Performing one request on one psycopg connection: the sync and async twins.

The hot reads (`get_tuple`, `list` pages and their value chains) are sent
prepared (`Query.prepare` True): planning them cost more than running them
(pg_stat_statements at 20,000 checkpoints: ~1 ms planning, ~0.3 ms execution;
10 ms on a loaded 2-core machine). Every table they read is reached by a
primary-key lookup (LATERAL ... LIMIT 1), so the generic plan Postgres caches
stays an index plan as tables grow (tests/integration/test_plans.py checks it at
20,000 checkpoints among 100,000 threads). The one window: a statement prepared
while the tables were analyzed nearly empty may keep a scan until autovacuum
analyzes them again, which re-plans it. The hot writes, `put` and `put_writes`,
are prepared at once too: a pool spreads them over its connections, and under
psycopg's default policy (prepare after 5 runs, then 5 custom plans server-side)
most of a short run's puts were planned (pg_stat_statements, chat-200 in quick
mode: 60 plans for 80 PUTs, 1.7 ms planning against 0.9 ms execution each). `pgbouncer=True` turns all of it off
(`prepare_threshold=None`, see _pool.py; psycopg then prepares nothing, even
when asked to).

These are the only places that touch a connection; keep them side by side so
a change to one is made to the other.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

import psycopg
from psycopg import _queries as psycopg_queries
from psycopg import conninfo, pq
from psycopg._encodings import conn_encoding
from psycopg.adapt import PyFormat, Transformer
from psycopg.waiting import Ready, Wait

# Imported for its effect: psycopg dumps the typed array parameters of
# _core/arrays.py with it (registered once, for every connection).
from langgraph_colosseum import _arrays  # noqa: F401
from langgraph_colosseum._core import io, sql
from langgraph_colosseum._core.arrays import TextArray
from langgraph_colosseum._core.io import Query, Request, Transaction
from langgraph_colosseum._redact import redact
from langgraph_colosseum.errors import (
    DatabaseUnavailableError,
    InvalidConfigError,
    SchemaMissingError,
)

logger = logging.getLogger("langgraph_colosseum")

# psycopg caches the conversion of a statement's %(name)s placeholders only
# for statements up to MAX_CACHED_STATEMENT_LENGTH (4 KB); a longer one is
# split by a regular expression on every execute. PUT is ~6 KB: splitting it
# cost 0.33 ms of client CPU per put (cProfile, long-20k direct puts), more
# than the rest of the put's Python. The cache is an LRU of 128 statements,
# and the statements of this package are a fixed few, so a larger limit costs
# a few kilobytes. tests/unit/test_statement_cache.py keeps the hot ones under it.
CACHED_STATEMENT_LENGTH = 16384
if getattr(psycopg_queries, "MAX_CACHED_STATEMENT_LENGTH", 0) < CACHED_STATEMENT_LENGTH:
    psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = CACHED_STATEMENT_LENGTH

# Seconds a new connection may take (libpq's connect_timeout; at least 2). A
# wrong host fails after this instead of hanging; the `connect_timeout=` of
# from_conn_string, else the URL's own connect_timeout, overrides it.
DEFAULT_CONNECT_TIMEOUT = 5

_CONNECT_HINT = (
    "Check the URL (host, port, database name, user, password) and that the server "
    "is running; the connect timeout is from_conn_string(..., connect_timeout=seconds)"
)


def connection_kwargs(conn_string: str, connect_timeout: float | None) -> dict[str, Any]:
    """The settings of every connection of a `from_conn_string` pool.

    A string that is not a connection string at all fails here, at once,
    before any pool is made (a pool would retry it in the background forever).
    """
    try:
        params = conninfo.conninfo_to_dict(conn_string)
    except psycopg.ProgrammingError as exc:
        raise InvalidConfigError(
            f"{redact(conn_string)!r} is not a Postgres connection string: "
            f"{str(exc).strip()}. Expected "
            "a URL such as postgresql://user:password@host:5432/dbname, or "
            "'host=... dbname=... user=...'"
        ) from None
    kwargs: dict[str, Any] = {"autocommit": True}
    if connect_timeout is not None or "connect_timeout" not in params:
        kwargs["connect_timeout"] = connect_timeout or DEFAULT_CONNECT_TIMEOUT
    return kwargs


def unreachable(target: str, exc: BaseException) -> DatabaseUnavailableError:
    return DatabaseUnavailableError(target, str(exc), _CONNECT_HINT)


def probe(conn_string: str, kwargs: dict[str, Any]) -> None:
    """Connect once, so a wrong URL fails now with the server's reason.

    Without it the pool would open "successfully", retry in the background,
    and the first statement would time out after the pool's 30 s with no reason.
    """
    try:
        psycopg.connect(conn_string, **kwargs).close()
    except psycopg.OperationalError as exc:
        raise unreachable(conn_string, exc) from None


async def aprobe(conn_string: str, kwargs: dict[str, Any]) -> None:
    try:
        conn = await psycopg.AsyncConnection.connect(conn_string, **kwargs)
    except psycopg.OperationalError as exc:
        raise unreachable(conn_string, exc) from None
    await conn.close()


def never_connected(pool: Any, exc: BaseException) -> DatabaseUnavailableError:
    """No connection of `pool` ever worked: a configuration error, not an outage."""
    return unreachable(getattr(pool, "conninfo", "the pool's database"), exc)


@contextmanager
def schema_errors() -> Iterator[None]:
    """A statement on a table that is not there means setup() was never run."""
    try:
        yield
    except psycopg.errors.UndefinedTable as exc:
        raise SchemaMissingError(str(exc.diag.message_primary or exc)) from exc


# Every request our operations issue is idempotent (upserts, insert-if-absent,
# deletes), so one retry on a fresh connection after the old one broke (a
# Postgres restart, a dropped socket) cannot apply anything twice. The break
# may come after the commit, before the reply: a statement that takes something
# (a tool claim, a run_guard acquire, a run's take) recognises a row held under
# its own owner as its own success (tests/integration/test_lost_replies.py).
RETRIES_ON_BROKEN_CONNECTION = 2


def is_connection_failure(exc: BaseException, conn: Any) -> bool:
    return isinstance(exc, psycopg.OperationalError) and (
        conn is None or conn.broken or conn.closed
    )


# Postgres aborted the transaction to break a deadlock (a put meeting a delete
# of its thread: they lock rows in different orders) or a serialization
# conflict. The statement did nothing and, being idempotent, is simply rerun.
CONFLICTS = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
RETRIES_ON_CONFLICT = 5


def conflict_pause(conflicts: int) -> float:
    """A short random pause before rerunning, so the two sides do not meet again."""
    return random.uniform(0, 0.005 * conflicts)


# _IMPLICIT_TRANSACTION. A `Transaction` on an autocommit connection is sent as
# one pipeline with no BEGIN / COMMIT: Postgres runs everything up to the
# pipeline's Sync as one implicit transaction (a failure rolls all of it back,
# and `pg_advisory_xact_lock` holds until the Sync), while each statement still
# takes its own snapshot (READ COMMITTED), which is what the thread write lock
# needs (sql.WRITE_LOCK). The two statements saved were half of every put's
# and put_writes' (conc-32: 21 statements per invoke before, 13 after).


# _LEAN. A request whose statements are all text with named parameters, on an
# autocommit connection, skips psycopg's cursors and its Pipeline object and is
# driven through the connection's own libpq handle (`conn.pgconn`): the
# statements in pipeline mode, one Sync (so one implicit transaction, as
# _IMPLICIT_TRANSACTION says), their results read up to the Sync's, all in one
# generator that `conn.wait` runs: one wait per round trip, which is also what
# benchmarks/common.py counts. Parameters are dumped, and rows loaded, by a
# psycopg Transformer of the connection (its adapters, ours in _arrays.py too),
# so values go and come back exactly as through a cursor. What it saves is
# psycopg's per-statement machinery: a cursor and its Transformer, the query
# conversion, the prepared-statement bookkeeping, and the pipeline's enter /
# exit waits (cProfile of conc-32: about a third of the client's CPU).
#
# It keeps what the cursor path did: errors are psycopg's own exceptions built
# from the failing result (so SQLSTATE -> our errors, conflict reruns and
# connection retries in the drivers are unchanged); a statement with
# `prepare=True` is prepared on the connection, once, under a name of ours
# (psycopg's own names are `_pg3_*`), and nothing is prepared when the
# connection's prepare_threshold is None (pgbouncer=True); the first use
# prepares and runs it in the same round trip. A round trip cut short (a
# cancelled task, Ctrl-C, a failure mid-way) that leaves the connection in
# pipeline mode with replies unread closes it, so the pool replaces it
# (psycopg's own wait first tries to cancel the query and read to the end).
_PLACEHOLDER = re.compile(r"%\((.*?)\)([sbt])|%%|%")
_PLACEHOLDER_FORMATS = {"s": PyFormat.AUTO, "b": PyFormat.BINARY, "t": PyFormat.TEXT}
_PIPELINE_SYNC = pq.ExecStatus.PIPELINE_SYNC
_FATAL_ERROR = pq.ExecStatus.FATAL_ERROR
_PIPELINE_ABORTED = pq.ExecStatus.PIPELINE_ABORTED
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_BAD = pq.ConnStatus.BAD
_IDLE = pq.TransactionStatus.IDLE
_PIPELINE_OFF = pq.PipelineStatus.OFF
_WAIT_R, _WAIT_RW, _READY_R = Wait.R, Wait.RW, Ready.R

# A test's hook: called with the libpq connection and a request's index in its
# round trip once that request's Sync was read (tests/integration/
# test_coalesce.py breaks the connection there, between two requests' replies).
on_reply: Callable[[Any, int], None] | None = None


class _Statement(NamedTuple):
    """A statement's text with `$n` placeholders, and its parameters' names and formats."""

    text: bytes
    names: tuple[str, ...]
    formats: tuple[PyFormat, ...]


# Statement text -> its conversion, or None when the lean path cannot send it
# (a positional or malformed placeholder: psycopg's cursor then reports it).
_statements: dict[str, _Statement | None] = {}
_STATEMENTS_KEPT = 512  # the package's statements are a few dozen; list filters vary


def _statement(text: str) -> _Statement | None:
    try:
        return _statements[text]
    except KeyError:
        pass
    names: list[str] = []
    formats: list[PyFormat] = []
    number: dict[str, int] = {}
    valid = text.isascii()  # sent as is, whatever the connection's encoding

    def placeholder(match: re.Match[str]) -> str:
        nonlocal valid
        if match.group(0) == "%%":
            return "%"
        if match.group(0) == "%":
            valid = False
            return "%"
        name, form = match.group(1), _PLACEHOLDER_FORMATS[match.group(2)]
        if name not in number:
            names.append(name)
            formats.append(form)
            number[name] = len(names)
        elif formats[number[name] - 1] != form:
            valid = False
        return f"${number[name]}"

    converted = _PLACEHOLDER.sub(placeholder, text)
    statement = _Statement(converted.encode(), tuple(names), tuple(formats)) if valid else None
    if len(_statements) >= _STATEMENTS_KEPT:
        _statements.clear()
    _statements[text] = statement
    return statement


class _Session:
    """What the lean path keeps per connection: its Transformer and the names
    of the statements it prepared there, by (statement, parameter types)."""

    def __init__(self, conn: Any) -> None:
        self.transformer = Transformer(conn)
        self.prepared: dict[tuple[str, tuple[int, ...]], bytes] = {}
        self.names = itertools.count()
        self.encoding = conn_encoding(conn)


# Kept on the connection itself, so it goes with it: a Transformer refers to
# its connection, and a weak-keyed table of them would keep every one alive.
_SESSION = "_colosseum_lean_session"

# One step of a round trip: PREPARE (name, text, types), or EXECUTE (name or
# None, text, values, types, formats) with None for an unnamed statement.
_PREPARE, _EXECUTE = 0, 1


class _Exchange(NamedTuple):
    steps: list[tuple[Any, ...]]
    executes: list[int]  # the step of each query
    prepares: dict[int, tuple[tuple[str, tuple[int, ...]], bytes]]  # step -> its key, name
    session: _Session


def lean_statements(request: Request) -> list[_Statement] | None:
    """The converted statements of `request`, or None when it takes the cursor
    path (an autocommit connection is needed too)."""
    queries = request.queries if isinstance(request, Transaction) else (request,)
    statements = []
    for query in queries:
        if type(query.sql) is not str or not isinstance(query.params, Mapping):
            return None
        statement = _statement(query.sql)
        if statement is None:
            return None
        statements.append(statement)
    return statements


def _lean_ready(conn: Any) -> bool:
    """An autocommit connection with nothing of its user's open on it (an
    explicit transaction, a psycopg pipeline): those take the cursor path."""
    pgconn = conn.pgconn
    return bool(
        conn.autocommit
        and pgconn.transaction_status == _IDLE
        and pgconn.pipeline_status == _PIPELINE_OFF
    )


def _lean_exchange(conn: Any, request: Request, statements: list[_Statement]) -> _Exchange:
    session = conn.__dict__.get(_SESSION)
    if session is None:
        session = conn.__dict__[_SESSION] = _Session(conn)
    transformer = session.transformer
    prepare_all = conn.prepare_threshold is not None
    # psycopg's own bound on a connection's prepared statements; past it (list
    # filters make many texts) a statement not prepared yet is sent unnamed.
    prepared_max = conn.prepared_max if conn.prepared_max is not None else math.inf
    queries = request.queries if isinstance(request, Transaction) else (request,)
    steps: list[tuple[Any, ...]] = []
    executes: list[int] = []
    prepares: dict[int, tuple[tuple[str, tuple[int, ...]], bytes]] = {}
    for query, statement in zip(queries, statements):
        params = query.params
        try:
            ordered = [params[name] for name in statement.names]  # type: ignore[index]
        except KeyError as exc:
            raise psycopg.ProgrammingError(f"query parameter missing: {exc.args[0]}") from None
        values = transformer.dump_sequence(ordered, statement.formats)
        types = transformer.types or ()
        formats = transformer.formats
        name = None
        if query.prepare and prepare_all:
            key = (query.sql, types)
            name = session.prepared.get(key)
            if name is None and len(session.prepared) + len(prepares) < prepared_max:
                name = b"_colosseum_%d" % next(session.names)
                prepares[len(steps)] = (key, name)
                steps.append((_PREPARE, name, statement.text, types))
        executes.append(len(steps))
        steps.append((_EXECUTE, name, statement.text, values, types, formats))
    return _Exchange(steps, executes, prepares, session)


def _round_trip(
    pgconn: Any, segments: list[list[tuple[Any, ...]]], replies: list[list[Any]]
) -> Any:
    """The generator `conn.wait` runs: each request's steps followed by a Sync
    (so each is its own implicit transaction), all sent at once; appends to
    `replies`, per request, its results (one per step) once its Sync is read,
    so a round trip cut short still tells whose replies were read; leaves
    pipeline mode."""
    yield from _send_all(pgconn, segments)
    yield from _read_all(pgconn, len(segments), replies)


def _send_all(pgconn: Any, segments: list[list[tuple[Any, ...]]]) -> Any:
    """The first half of `_round_trip`: everything sent, nothing read."""
    pgconn.enter_pipeline_mode()
    for steps in segments:
        for step in steps:
            if step[0] == _PREPARE:
                pgconn.send_prepare(step[1], step[2], step[3])
            elif step[1] is None:
                pgconn.send_query_params(step[2], step[3], step[4], step[5])
            else:
                pgconn.send_query_prepared(step[1], step[3], step[5])
        pgconn.pipeline_sync()
    while pgconn.flush():  # a large request: the server may answer while we send
        if (yield _WAIT_RW) & _READY_R:
            pgconn.consume_input()


def _read_all(pgconn: Any, count: int, replies: list[list[Any]]) -> Any:
    """The second half of `_round_trip`: the replies of `count` requests."""
    results: list[Any] = []
    while len(replies) < count:
        while pgconn.is_busy():
            yield _WAIT_R
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:  # the end of one step's results
            continue
        if result.status == _PIPELINE_SYNC:
            replies.append(results)
            results = []
            if on_reply is not None:
                on_reply(pgconn, len(replies) - 1)
        else:
            results.append(result)
    # A LISTENing connection's notifications go where psycopg sends its own.
    while (notify := pgconn.notifies()) is not None:
        if pgconn.notify_handler is not None:
            pgconn.notify_handler(notify)
    pgconn.exit_pipeline_mode()


def _lean_results(request: Request, exchange: _Exchange, results: list[Any]) -> Any:
    session = exchange.session
    _note_prepared(exchange, results)
    for result in results:
        if result.status == _FATAL_ERROR:
            raise psycopg.errors.error_from_result(result, encoding=session.encoding)
    queries = request.queries if isinstance(request, Transaction) else (request,)
    out = []
    transformer = session.transformer
    for query, position in zip(queries, exchange.executes):
        if not query.fetch:
            out.append(None)
            continue
        result = results[position]
        if result.status != _TUPLES_OK:
            raise psycopg.ProgrammingError("the last operation didn't produce records")
        transformer.set_pgresult(result)
        out.append(transformer.load_rows(0, result.ntuples, tuple))
    return out if isinstance(request, Transaction) else out[0]


def _note_prepared(exchange: _Exchange, results: list[Any]) -> None:
    """The statements `exchange` prepared, by the results read of it: each
    PREPARE that succeeded stays on the connection, whatever became of the
    transaction it was sent in."""
    for position, (key, name) in exchange.prepares.items():
        if position < len(results) and results[position].status == _COMMAND_OK:
            exchange.session.prepared[key] = name


class Outcome(NamedTuple):
    """One request's end in a shared round trip: its result, or what it raised."""

    value: Any
    error: BaseException | None


# _SHARED_COMMIT. A round trip of the asyncio saver carries several requests
# at once (_coalesce.py). Each was its own implicit transaction, so each write
# paid a commit: conc-32's writes replayed on one connection took 389 us of
# backend CPU a write committed one by one, 213 us committed six together.
# So the writes of one round trip that take only their thread's shared write
# locks (`Transaction.shared_write_lock`, every put and put_writes but those of
# on_conflict="raise") commit as one implicit transaction: their locks first,
# in one statement (sql.SHARED_WRITE_LOCKS), then each write's statements,
# unchanged, in the order of their threads, and one Sync. What a caller sees
# is unchanged:
# - a write's outcome is read after the one commit, so a result is never of
#   a write that is not kept;
# - if any statement of them fails (or the commit does), all of them are
#   rolled back, and each is sent again alone, its own transaction, in the
#   next round trip: no write's outcome is another's;
# - a connection lost before the Sync's reply is read is each one's loss, as
#   for a request whose reply was not read (the drivers' retry).
# Each write holds its thread's write lock until the one commit: a delete of
# the thread waits for all of them, as for one write in flight, and the
# writes that follow the delete see it (sql.WRITE_LOCK). The writes' locks
# are taken in the order a delete of several threads takes its own, and the
# rows in the order of their threads, so two such transactions, or one and a
# delete, never each hold what the other waits for
# (tests/integration/test_shared_commit.py). And a lock they wait for is
# waited for at most SHARED_LOCK_TIMEOUT.
#
# How long a shared transaction may wait for any one lock (SET LOCAL
# lock_timeout). Each of its writes holds its thread's locks until the one
# commit, so a wait of one (for a row a slow transaction holds, for a delete
# of its thread) would hold up the writes, deletes and guards of the other
# threads; and a statement that locks rows of several threads in an order of
# its own (threads.CLEAR_EXPIRY, a user's UPDATE) could wait for them round a
# cycle. Past it the transaction fails, and each write is sent again alone,
# to wait for its own locks as long as it must.
SHARED_LOCK_TIMEOUT = "50ms"


def _lean_begin(
    conn: Any,
    batch: list[tuple[Request, list[_Statement]]],
    indices: list[int],
    outcomes: list[Outcome | None],
    share: bool,
) -> tuple[list[int], list[_Exchange], _Shared | None]:
    """The exchanges of the requests of `indices`, and which of them are sent,
    in the order they are sent; with `share`, the writes among them that
    commit as one transaction (_SHARED_COMMIT), sent first.

    A request whose parameters psycopg refuses (a value no dumper takes, a
    string the connection's encoding cannot hold) gets that error as its
    outcome here, before any I/O, and is left out: the requests sharing its
    round trip are sent without it."""
    sent: list[int] = []
    exchanges: list[_Exchange] = []
    for index in indices:
        request, statements = batch[index]
        try:
            exchanges.append(_lean_exchange(conn, request, statements))
        except Exception as exc:
            outcomes[index] = Outcome(None, exc)
        else:
            sent.append(index)
    if not share or len(sent) < 2:
        return sent, exchanges, None
    together = [
        (k, lock)
        for k, index in enumerate(sent)
        if isinstance(request := batch[index][0], Transaction)
        and (lock := request.shared_write_lock) is not None
    ]
    if len(together) < 2:
        return sent, exchanges, None
    # In the order of their threads (a stable sort: one thread's writes keep
    # theirs): each write locks rows of its own thread, so two such
    # transactions lock the rows they both write in one order.
    together.sort(key=lambda pair: pair[1][0])
    lock_query = Query(
        sql.SHARED_WRITE_LOCKS,
        {
            "thread_ids": TextArray(thread for _, (thread, _) in together),
            "run_ids": TextArray(run for _, (_, run) in together),
            "lock_timeout": SHARED_LOCK_TIMEOUT,
        },
        fetch=False,
        prepare=True,
    )
    statement = _statement(lock_query.sql)
    assert statement is not None
    shared = _Shared(_lean_exchange(conn, lock_query, [statement]), len(together))
    first = [k for k, _ in together]
    order = first + sorted(set(range(len(sent))) - set(first))
    return [sent[k] for k in order], [exchanges[k] for k in order], shared


class _Shared(NamedTuple):
    """The first `size` requests of a round trip, committed as one
    transaction after `locks`, their write locks (_SHARED_COMMIT)."""

    locks: _Exchange
    size: int


def _segments(exchanges: list[_Exchange], shared: _Shared | None) -> list[list[tuple[Any, ...]]]:
    """The steps of each implicit transaction of a round trip (each ends in a Sync)."""
    if shared is None:
        return [exchange.steps for exchange in exchanges]
    together = list(shared.locks.steps)
    for exchange in exchanges[: shared.size]:
        together += exchange.steps
    return [together, *(exchange.steps for exchange in exchanges[shared.size :])]


def _shared_replies(
    shared: _Shared, exchanges: list[_Exchange], results: list[Any]
) -> list[list[Any]] | None:
    """Each write's results, from their one transaction's; None when any
    statement failed (or the commit did): then none of them was kept."""
    start = len(shared.locks.steps)
    _note_prepared(shared.locks, results[:start])
    replies = []
    for exchange in exchanges[: shared.size]:
        replies.append(results[start : start + len(exchange.steps)])
        start += len(exchange.steps)
    failed = any(r.status in (_FATAL_ERROR, _PIPELINE_ABORTED) for r in results)
    if not failed and start == len(results):
        return replies  # each write's own statements are noted with its results
    for exchange, reply in zip(exchanges, replies):
        _note_prepared(exchange, reply)
    return None


def _lean_end(
    indices: list[int],
    batch: list[tuple[Request, list[_Statement]]],
    exchanges: list[_Exchange],
    replies: list[list[Any]],
    lost: Exception | None,
    outcomes: list[Outcome | None],
    last: bool,
    shared: _Shared | None,
) -> list[int]:
    """Fill `outcomes` from the replies; the requests to send again
    (_DEALLOCATED; the writes of a shared transaction that failed, each alone).

    A request whose reply (up to its Sync, so its commit) was read has its
    own outcome even when the connection was `lost` after it; only those not
    read get `lost`, for the drivers' retries on a lost connection."""
    again: list[int] = []
    if shared is not None and replies:
        split = _shared_replies(shared, exchanges, replies[0])
        if split is None:
            again, indices = indices[: shared.size], indices[shared.size :]
            exchanges, replies = exchanges[shared.size :], replies[1:]
            if io.observer is not None:
                for _ in again:
                    io.observer.retried("shared_commit")
        else:
            replies = split + replies[1:]
    for index, exchange, results in zip(indices, exchanges, replies):
        try:
            outcomes[index] = Outcome(_lean_results(batch[index][0], exchange, results), None)
        except psycopg.errors.InvalidSqlStatementName as exc:
            exchange.session.prepared.clear()
            if last:
                outcomes[index] = Outcome(None, exc)
            else:
                again.append(index)
        except Exception as exc:  # psycopg's, or a loader's own: this request's alone
            outcomes[index] = Outcome(None, exc)
    for index in indices[len(replies) :]:
        assert lost is not None  # every request sent has its reply otherwise
        outcomes[index] = Outcome(None, lost)
    return again


# The round trips of a batch: the first (writes shared, _SHARED_COMMIT); the
# writes of a shared transaction that failed, each alone; and the requests a
# DEALLOCATE ALL failed, prepared again (_DEALLOCATED). A shared transaction
# that fails before it meets a dropped statement (a lock timeout in its first
# statement) aborts the rest unrun, so the second round trip may be the first
# to meet them: the third is theirs.
_PASSES = 3


def _abandon(conn: Any) -> None:
    """A round trip cut short left replies unread: no request can follow on it."""
    pgconn = conn.pgconn
    if pgconn.status != _BAD and pgconn.pipeline_status != _PIPELINE_OFF:
        pgconn.finish()


def _closed() -> psycopg.OperationalError:
    return psycopg.OperationalError("the connection is closed")


# A cancellation or Ctrl-C during a round trip is raised, not made an outcome:
# psycopg's wait reads such a round trip to its end first, and its caller must
# still stop.
def lean_batch(
    conn: psycopg.Connection, batch: list[tuple[Request, list[_Statement]]]
) -> list[Outcome]:
    """Send every request of `batch` in one round trip; each one's outcome."""
    outcomes: list[Outcome | None] = [None] * len(batch)
    indices = list(range(len(batch)))
    for attempt in range(_PASSES):
        last = attempt == _PASSES - 1
        replies: list[list[Any]] = []
        lost = None
        with conn.lock:
            indices, exchanges, shared = _lean_begin(conn, batch, indices, outcomes, attempt == 0)
            if not indices:
                break
            try:
                if conn.pgconn.status == _BAD:
                    raise _closed()
                conn.wait(_round_trip(conn.pgconn, _segments(exchanges, shared), replies))
            except Exception as exc:
                _abandon(conn)
                lost = exc
            except BaseException:
                _abandon(conn)
                raise
        indices = _lean_end(indices, batch, exchanges, replies, lost, outcomes, last, shared)
        if not indices:
            break
    return outcomes  # type: ignore[return-value]


async def alean_batch(
    conn: psycopg.AsyncConnection, batch: list[tuple[Request, list[_Statement]]]
) -> list[Outcome]:
    outcomes: list[Outcome | None] = [None] * len(batch)
    indices = list(range(len(batch)))
    for attempt in range(_PASSES):
        last = attempt == _PASSES - 1
        replies: list[list[Any]] = []
        lost = None
        async with conn.lock:
            indices, exchanges, shared = _lean_begin(conn, batch, indices, outcomes, attempt == 0)
            if not indices:
                break
            try:
                if conn.pgconn.status == _BAD:
                    raise _closed()
                await conn.wait(_round_trip(conn.pgconn, _segments(exchanges, shared), replies))
            except Exception as exc:
                _abandon(conn)
                lost = exc
            except BaseException:
                _abandon(conn)
                raise
        indices = _lean_end(indices, batch, exchanges, replies, lost, outcomes, last, shared)
        if not indices:
            break
    return outcomes  # type: ignore[return-value]


def _raise_or_return(outcome: Outcome) -> Any:
    if outcome.error is not None:
        raise outcome.error
    return outcome.value


class SentAhead:
    """A request sent on a connection and not yet read (io.Ahead): the
    connection is its own, and its lock held, until it is read (`read`, or
    `aread` on an asyncio connection)."""

    def __init__(self, conn: Any, request: Request, statements: list[_Statement]) -> None:
        self.conn = conn
        self.batch = [(request, statements)]
        self.exchange = _lean_exchange(conn, request, statements)

    def read(self) -> Any:
        """The request's result, or its error; the connection is free after
        (closed if its reply could not be read to the end)."""
        replies: list[list[Any]] = []
        with _on_the_wire(self.conn, release=True):
            self.conn.wait(_read_all(self.conn.pgconn, 1, replies))
        return self._result(replies)

    async def aread(self) -> Any:
        replies: list[list[Any]] = []
        with _on_the_wire(self.conn, release=True):
            await self.conn.wait(_read_all(self.conn.pgconn, 1, replies))
        return self._result(replies)

    def _result(self, replies: list[list[Any]]) -> Any:
        outcomes: list[Outcome | None] = [None]
        _lean_end([0], self.batch, [self.exchange], replies, None, outcomes, True, None)
        with schema_errors():
            return _raise_or_return(outcomes[0])  # type: ignore[arg-type]


@contextmanager
def _on_the_wire(conn: Any, *, release: bool) -> Iterator[None]:
    """The I/O of a request sent ahead, its connection's lock held: a failure
    (anything raised, a cancellation too) leaves replies unread, so the
    connection is closed and its lock freed; `release`: freed after success too."""
    try:
        with schema_errors():
            yield
    except BaseException:
        _abandon(conn)
        conn.lock.release()
        raise
    if release:
        conn.lock.release()


class Deferred(NamedTuple):
    """An io.Ahead request the driver did not send (no pool, no idle
    connection, not a lean request, a send that failed): performed when it
    is collected."""

    request: Request


def send_ahead(conn: psycopg.Connection, request: Request) -> SentAhead | None:
    """`request` sent on `conn` (lean only), its reply left to `SentAhead.read`;
    None when it cannot go that way (then nothing was sent)."""
    statements = lean_statements(request) if _lean_ready(conn) else None
    if statements is None:
        return None
    conn.lock.acquire()
    with _on_the_wire(conn, release=False):
        sent = _sent(conn, request, statements)
        conn.wait(_send_all(conn.pgconn, [sent.exchange.steps]))
    return sent


async def asend_ahead(conn: psycopg.AsyncConnection, request: Request) -> SentAhead | None:
    statements = lean_statements(request) if _lean_ready(conn) else None
    if statements is None:
        return None
    await conn.lock.acquire()
    with _on_the_wire(conn, release=False):
        sent = _sent(conn, request, statements)
        await conn.wait(_send_all(conn.pgconn, [sent.exchange.steps]))
    return sent


def _sent(conn: Any, request: Request, statements: list[_Statement]) -> SentAhead:
    if conn.pgconn.status == _BAD:
        raise _closed()
    return SentAhead(conn, request, statements)


# _DEALLOCATED. Someone ran DEALLOCATE ALL or DISCARD ALL on the connection
# (a pool's reset hook, a proxy): our prepared statements are gone, and the
# first EXECUTE of one failed, aborting the request's implicit transaction
# before anything was kept. The request is sent again, preparing afresh.


def perform(conn: psycopg.Connection, request: Request) -> Any:
    with schema_errors():
        return _perform(conn, request)


def _perform(conn: psycopg.Connection, request: Request) -> Any:
    statements = lean_statements(request) if _lean_ready(conn) else None
    if statements is not None:
        return _raise_or_return(lean_batch(conn, [(request, statements)])[0])
    if isinstance(request, Query):
        if conn.autocommit:
            cursor = conn.execute(request.sql, request.params, prepare=request.prepare)
        else:
            with conn.transaction():
                cursor = conn.execute(request.sql, request.params, prepare=request.prepare)
        return cursor.fetchall() if request.fetch else None
    assert isinstance(request, Transaction)
    if conn.autocommit:  # one implicit transaction: see _IMPLICIT_TRANSACTION
        with conn.pipeline():
            cursors = [conn.execute(q.sql, q.params, prepare=q.prepare) for q in request.queries]
    else:
        with conn.pipeline(), conn.transaction():
            cursors = [conn.execute(q.sql, q.params, prepare=q.prepare) for q in request.queries]
    return [c.fetchall() if q.fetch else None for c, q in zip(cursors, request.queries)]


async def aperform(conn: psycopg.AsyncConnection, request: Request) -> Any:
    with schema_errors():
        return await _aperform(conn, request)


async def _aperform(conn: psycopg.AsyncConnection, request: Request) -> Any:
    statements = lean_statements(request) if _lean_ready(conn) else None
    if statements is not None:
        return _raise_or_return((await alean_batch(conn, [(request, statements)]))[0])
    if isinstance(request, Query):
        if conn.autocommit:
            cursor = await conn.execute(request.sql, request.params, prepare=request.prepare)
        else:
            async with conn.transaction():
                cursor = await conn.execute(request.sql, request.params, prepare=request.prepare)
        return await cursor.fetchall() if request.fetch else None
    assert isinstance(request, Transaction)
    if conn.autocommit:  # one implicit transaction: see _IMPLICIT_TRANSACTION
        async with conn.pipeline():
            cursors = [
                await conn.execute(q.sql, q.params, prepare=q.prepare) for q in request.queries
            ]
    else:
        async with conn.pipeline(), conn.transaction():
            cursors = [
                await conn.execute(q.sql, q.params, prepare=q.prepare) for q in request.queries
            ]
    return [await c.fetchall() if q.fetch else None for c, q in zip(cursors, request.queries)]
