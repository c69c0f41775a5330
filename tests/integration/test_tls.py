"""TLS and passwords to both servers, against private servers the tests start.

Postgres: `sslmode=verify-full` against a CA made here, SCRAM-SHA-256, and no
way in without TLS. Redis: `rediss://` with the CA file, an ACL user with a
password, the default user off and no plaintext port. A graph runs through
both (its steps are pipelined transactions, which upstream users saw closed
under SSL), and each way of getting it wrong is refused: a wrong password, no
TLS, another CA, a certificate for another host name.
"""

from __future__ import annotations

import logging
import ssl
import tempfile
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_colosseum import AsyncColosseumSaver, ColosseumSaver
from langgraph_colosseum.cache import client_from_url
from langgraph_colosseum.errors import DatabaseUnavailableError
from tests.integration.tls_servers import CertificateAuthority, TlsServers

TURNS = 12


def chat_graph(saver: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", lambda s: {"messages": [AIMessage(f"echo {len(s['messages'])}")]})
    builder.add_edge(START, "reply")
    return builder.compile(checkpointer=saver)


def backends_on_tls(tls_servers: TlsServers, application_name: str) -> list[tuple[bool, str]]:
    with psycopg.connect(tls_servers.postgres.admin_url(), autocommit=True) as admin:
        return admin.execute(
            "SELECT s.ssl, coalesce(s.version, '') FROM pg_stat_ssl s"
            " JOIN pg_stat_activity a USING (pid) WHERE a.application_name = %s",
            (application_name,),
        ).fetchall()


def heads_in_redis(tls_servers: TlsServers, prefix: str) -> list[bytes]:
    with client_from_url(tls_servers.redis.url()) as client:
        return list(client.scan_iter(match=f"{prefix}*"))


# What a cache warning says when TLS or the ACL refused a request (a timeout on
# a loaded machine is a miss the design allows, and is not one of these).
REFUSALS = ("NOPERM", "WRONGPASS", "SSL", "certificate", "uthenticat")


def assert_no_refusal(caplog: pytest.LogCaptureFixture) -> None:
    refused = [r.getMessage() for r in caplog.records if any(w in r.getMessage() for w in REFUSALS)]
    assert refused == []


def _check_run(tls_servers: TlsServers, name: str, prefix: str, state: Any, history: list) -> None:
    assert len(state.values["messages"]) == 2 * TURNS
    assert state.values["messages"][-1].content == f"echo {2 * TURNS - 1}"
    assert len(history) == 3 * TURNS
    sessions = backends_on_tls(tls_servers, name)
    assert sessions and all(on and version.startswith("TLS") for on, version in sessions)
    assert heads_in_redis(tls_servers, prefix), "the hot head is in the TLS Redis"


def test_a_graph_runs_over_tls_with_passwords_sync(
    tls_servers: TlsServers, caplog: pytest.LogCaptureFixture
) -> None:
    name, prefix = f"tls-{uuid.uuid4().hex[:8]}", f"tls-{uuid.uuid4().hex[:8]}:"
    tid = {"configurable": {"thread_id": name}}
    with caplog.at_level(logging.WARNING, logger="langgraph_colosseum"):
        with ColosseumSaver.from_conn_string(
            tls_servers.postgres.url(),
            redis_url=tls_servers.redis.url(),
            cache_prefix=prefix,
            application_name=name,
        ) as saver:
            graph = chat_graph(saver)
            for turn in range(TURNS):
                graph.invoke({"messages": [HumanMessage(f"turn {turn}")]}, tid)
            state = graph.get_state(tid)
            history = list(graph.get_state_history(tid))
            _check_run(tls_servers, name, prefix, state, history)
    assert_no_refusal(caplog)


async def test_a_graph_runs_over_tls_with_passwords_async(
    tls_servers: TlsServers, caplog: pytest.LogCaptureFixture
) -> None:
    name, prefix = f"atls-{uuid.uuid4().hex[:8]}", f"atls-{uuid.uuid4().hex[:8]}:"
    tid = {"configurable": {"thread_id": name}}
    with caplog.at_level(logging.WARNING, logger="langgraph_colosseum"):
        async with AsyncColosseumSaver.from_conn_string(
            tls_servers.postgres.url(),
            redis_url=tls_servers.redis.url(),
            cache_prefix=prefix,
            application_name=name,
        ) as saver:
            graph = chat_graph(saver)
            for turn in range(TURNS):
                await graph.ainvoke({"messages": [HumanMessage(f"turn {turn}")]}, tid)
            state = await graph.aget_state(tid)
            history = [s async for s in graph.aget_state_history(tid)]
            _check_run(tls_servers, name, prefix, state, history)
    assert_no_refusal(caplog)


def test_postgres_stores_the_password_as_scram(tls_servers: TlsServers) -> None:
    with psycopg.connect(tls_servers.postgres.admin_url()) as admin:
        (stored,) = admin.execute(
            "SELECT rolpassword FROM pg_authid WHERE rolname = %s", (tls_servers.postgres.user,)
        ).fetchone()
    assert stored.startswith("SCRAM-SHA-256$")


def _refused(url: str) -> str:
    with pytest.raises(DatabaseUnavailableError) as caught:
        with ColosseumSaver.from_conn_string(url):
            pass
    return str(caught.value)


def test_postgres_refuses_a_wrong_password(tls_servers: TlsServers) -> None:
    message = _refused(tls_servers.postgres.url(password="not-the-password"))
    assert "password authentication failed" in message
    assert "not-the-password" not in message and tls_servers.postgres.password not in message


def test_postgres_refuses_a_connection_without_tls(tls_servers: TlsServers) -> None:
    message = _refused(tls_servers.postgres.url(sslmode="disable"))
    assert "no encryption" in message


def test_verify_full_refuses_a_server_signed_by_another_ca(tls_servers: TlsServers) -> None:
    other = CertificateAuthority(Path(tempfile.mkdtemp(prefix="colosseum-other-ca-")), "other")
    message = _refused(tls_servers.postgres.url(sslrootcert=str(other.ca_file)))
    assert "certificate verify failed" in message


def test_verify_full_refuses_a_certificate_for_another_host(tls_servers: TlsServers) -> None:
    # The certificate names "localhost"; the same server reached as 127.0.0.1 is refused.
    url = tls_servers.postgres.url().replace("@localhost:", "@127.0.0.1:")
    message = _refused(url)
    assert 'does not match host name "127.0.0.1"' in message


def test_redis_refuses_a_wrong_password(tls_servers: TlsServers) -> None:
    with client_from_url(tls_servers.redis.url(password="not-the-password")) as client:
        with pytest.raises(redis.AuthenticationError):
            client.ping()


def test_redis_refuses_a_server_signed_by_another_ca(tls_servers: TlsServers) -> None:
    other = CertificateAuthority(Path(tempfile.mkdtemp(prefix="colosseum-other-ca-")), "other")
    with client_from_url(tls_servers.redis.url(ca_file=other.ca_file)) as client:
        with pytest.raises(redis.ConnectionError) as caught:
            client.ping()
    assert isinstance(caught.value.__context__, ssl.SSLCertVerificationError) or (
        "certificate verify failed" in str(caught.value)
    )


def test_redis_has_no_plaintext_way_in(tls_servers: TlsServers) -> None:
    plain = f"redis://{tls_servers.redis.user}:{tls_servers.redis.password}@localhost:{tls_servers.redis.port}/0"
    with client_from_url(plain) as client:
        with pytest.raises(redis.ConnectionError):
            client.ping()


def test_a_redis_refusing_the_password_costs_only_the_cache(
    tls_servers: TlsServers, caplog: pytest.LogCaptureFixture
) -> None:
    """Postgres is the truth: with the cache's credentials wrong, the graph still runs."""
    name = f"tls-nocache-{uuid.uuid4().hex[:8]}"
    tid = {"configurable": {"thread_id": name}}
    with ColosseumSaver.from_conn_string(
        tls_servers.postgres.url(), redis_url=tls_servers.redis.url(password="wrong")
    ) as saver:
        graph = chat_graph(saver)
        for turn in range(3):
            graph.invoke({"messages": [HumanMessage(f"turn {turn}")]}, tid)
        assert len(graph.get_state(tid).values["messages"]) == 6
    assert any("Redis" in r.getMessage() for r in caplog.records)
    assert "wrong" not in caplog.text.replace("wrong password", "")
