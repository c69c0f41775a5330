"""`colosseum ui` binds before it prints its URL: that URL must accept a
connection at once (uvicorn starts serving a moment later; until then the
connection waits in the backlog rather than being refused)."""

from __future__ import annotations

import socket

from langgraph_colosseum.ui.server import bind


def test_the_bound_socket_accepts_connections_before_the_server_runs() -> None:
    sock = bind("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname(), timeout=2):
            pass
    finally:
        sock.close()
