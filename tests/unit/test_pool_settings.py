"""from_conn_string's pool and connection settings: defaults, precedence, refusals."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver, InvalidConfigError
from langgraph_colosseum._pool import PoolSettings, pool_arguments

URL = "postgresql://app@db.internal:5432/agents"


def kwargs_of(url: str = URL, **given: object) -> dict:
    options = dict(given)
    settings = PoolSettings.take(options, pgbouncer=bool(options.pop("pgbouncer", False)))
    assert options == {}  # every name was a pool setting
    return settings.connection_kwargs(url)


def test_production_defaults() -> None:
    kwargs = kwargs_of()
    assert kwargs == {
        "autocommit": True,
        "prepare_threshold": 5,
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
        "application_name": "langgraph-colosseum",
    }
    arguments = pool_arguments(URL, PoolSettings(), asynchronous=False)
    named = ("min_size", "max_size", "max_idle", "max_lifetime", "timeout", "max_waiting")
    assert {k: arguments[k] for k in (*named, "reconnect_timeout")} == {
        "min_size": 1,
        "max_size": 10,
        "max_idle": 300.0,
        "max_lifetime": 3600.0,
        "timeout": 30.0,
        "max_waiting": 0,
        "reconnect_timeout": 300.0,
    }
    assert PoolSettings().check_idle_after == 5.0  # the README's Configuration table
    assert callable(arguments["check"])


def test_the_url_wins_over_a_default_and_an_argument_over_the_url() -> None:
    url = URL + "?application_name=from-url&keepalives_idle=60"
    kwargs = kwargs_of(url)
    assert "application_name" not in kwargs and "keepalives_idle" not in kwargs
    kwargs = kwargs_of(url, application_name="from-arg", keepalives_idle=5)
    assert kwargs["application_name"] == "from-arg" and kwargs["keepalives_idle"] == 5


def test_pool_size_is_max_size_unless_max_size_is_given() -> None:
    assert PoolSettings.take({}, pool_size=3).max_size == 3
    assert PoolSettings.take({"max_size": 7}, pool_size=3).max_size == 7


def test_check_can_be_turned_off() -> None:
    arguments = pool_arguments(URL, PoolSettings(check_idle_after=None), asynchronous=True)
    assert "check" not in arguments and "reset" not in arguments


def test_pgbouncer_prepares_nothing() -> None:
    assert kwargs_of(pgbouncer=True)["prepare_threshold"] is None
    assert kwargs_of(prepare_threshold=None)["prepare_threshold"] is None


def test_pgbouncer_refuses_prepared_statements() -> None:
    with pytest.raises(InvalidConfigError, match=r"prepare_threshold=5.*transaction mode"):
        kwargs_of(pgbouncer=True, prepare_threshold=5)


def test_pgbouncer_refuses_session_options() -> None:
    with pytest.raises(InvalidConfigError, match=r"options.*ALTER ROLE"):
        kwargs_of(URL + "?options=-c%20statement_timeout%3D5s", pgbouncer=True)
    # Without a pooler they are the user's business.
    assert kwargs_of(URL + "?options=-c%20statement_timeout%3D5s")


def test_inconsistent_sizes_are_refused() -> None:
    with pytest.raises(InvalidConfigError, match="min_size"):
        kwargs_of(min_size=5, max_size=2)


@pytest.mark.parametrize("saver_class", [ColosseumSaver, AsyncColosseumSaver])
async def test_pgbouncer_refuses_a_pool_that_prepares(saver_class: type) -> None:
    pool_class = AsyncConnectionPool if saver_class is AsyncColosseumSaver else ConnectionPool
    preparing = pool_class(URL, kwargs={"autocommit": True}, open=False)
    with pytest.raises(InvalidConfigError, match=r"prepare_threshold=5.*pgbouncer=True"):
        saver_class(preparing, pgbouncer=True)
    safe = pool_class(URL, kwargs={"autocommit": True, "prepare_threshold": None}, open=False)
    assert saver_class(safe, pgbouncer=True).conn is safe
