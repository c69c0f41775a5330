"""Nothing Colosseum sends may outlive its transaction (PgBouncer, transaction mode).

Behind PgBouncer in transaction mode each transaction may run on a different
server session, so session state set by one is missing, or someone else's, in
the next: session advisory locks, LISTEN, SQL-level PREPARE, cursors WITH HOLD,
temporary tables, session SETs. Every SQL string of the package is checked here,
so a new statement that needs a session fails this test instead of failing
under a pooler in production. (The checks recognise the forms they refuse:
see `test_the_checks_recognise_session_state`.)
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterator
from typing import Any

import langgraph_colosseum

SESSION_STATE = {
    "session advisory lock": re.compile(r"pg_(try_)?advisory_(un)?lock(_shared|_all)?\s*\(", re.I),
    "LISTEN": re.compile(r"(\A|;)\s*(UN)?LISTEN\b", re.I),
    "SQL-level PREPARE": re.compile(r"(\A|;)\s*PREPARE\s+\w+", re.I),
    "cursor WITH HOLD": re.compile(r"\bDECLARE\b[^;]*\bWITH\s+HOLD\b", re.I),
    "temporary table": re.compile(r"\bCREATE\s+(GLOBAL\s+|LOCAL\s+)?TEMP(ORARY)?\s+TABLE\b", re.I),
    "session SET": re.compile(
        r"(\A|;)\s*(SET|RESET)\s+(SESSION\s+)?(?!LOCAL\b|TRANSACTION\b)\w+", re.I
    ),
    "session set_config": re.compile(r"set_config\s*\([^)]*,\s*false\s*\)", re.I),
}


def session_state(sql: str) -> list[str]:
    return [name for name, pattern in SESSION_STATE.items() if pattern.search(sql)]


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple, frozenset, set)):
        for item in value:
            yield from strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)


def package_strings() -> Iterator[tuple[str, str]]:
    """(module.NAME, text) of every string held at the top level of every module."""
    for info in pkgutil.walk_packages(langgraph_colosseum.__path__, "langgraph_colosseum."):
        if info.name.startswith("langgraph_colosseum.ui"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if getattr(value, "__module__", None) not in (None, info.name):
                continue
            for text in strings(value):
                yield f"{info.name}.{name}", text


def test_the_checks_recognise_session_state() -> None:
    assert session_state("SELECT pg_advisory_lock(1)") == ["session advisory lock"]
    assert session_state("select pg_try_advisory_lock(1, 2)") == ["session advisory lock"]
    assert session_state("LISTEN colosseum") == ["LISTEN"]
    assert session_state("PREPARE q AS SELECT 1") == ["SQL-level PREPARE"]
    assert session_state("DECLARE c CURSOR WITH HOLD FOR SELECT 1") == ["cursor WITH HOLD"]
    assert session_state("CREATE TEMP TABLE t (a int)") == ["temporary table"]
    assert session_state("SELECT 1; SET statement_timeout = 0") == ["session SET"]
    assert session_state("SET SESSION work_mem TO '1GB'") == ["session SET"]
    assert session_state("SELECT set_config('a.b', 'x', false)") == ["session set_config"]
    # What transaction mode allows.
    for fine in (
        "SELECT pg_advisory_xact_lock(%(key)s)",
        "SET LOCAL lock_timeout = '1s'",
        "SELECT set_config('a.b', 'x', true)",
        "UPDATE colosseum_threads\nSET status = 'idle' WHERE thread_id = %(thread_id)s",
        "INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET b = 2",
    ):
        assert session_state(fine) == [], fine


def test_no_statement_needs_a_session() -> None:
    found = {where: kinds for where, text in package_strings() if (kinds := session_state(text))}
    assert found == {}


# Statements sent with `prepare=True` are not prepared under pgbouncer=True either:
# psycopg honours prepare_threshold=None over the statement's request. That is
# checked against a real server in tests/integration/test_plans.py.
