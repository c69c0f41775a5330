"""Running the inspector: bind, print the URL (with the token when there is
one, printed once), serve until interrupted.

Example:
    >>> serve(host="127.0.0.1", port=0, read_only=True)   # port 0: any free port
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable

import uvicorn

from langgraph_colosseum import telemetry
from langgraph_colosseum.inspection import Inspector
from langgraph_colosseum.saver import ColosseumSaver
from langgraph_colosseum.ui import LOOPBACK, is_loopback
from langgraph_colosseum.ui.app import create_app


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    # Listening now, before the URL is printed: a client that connects at once
    # waits in the backlog until uvicorn serves, instead of being refused.
    sock.listen(128)
    return sock


def url_of(host: str, sock: socket.socket, token: str | None) -> str:
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def serve(
    *, host: str = "127.0.0.1", port: int = 8765, read_only: bool = False,
    echo: Callable[[str], None] = print,
) -> None:  # fmt: skip
    """Serve the configured database (ColosseumSaver.from_env) until Ctrl-C.

    On a loopback address no token is needed, and requests naming another
    host are refused (a web page cannot reach it by DNS rebinding). On any
    other address a fresh token is made and printed once; every request must
    present it.
    """
    local = is_loopback(host)
    token = None if local else secrets.token_urlsafe(24)
    sock = bind(host, port)
    telemetry.serve_prometheus()  # /metrics: this server's own operations
    with ColosseumSaver.from_env(pool_size=4) as saver:
        app = create_app(
            Inspector(saver), read_only=read_only, token=token,
            allowed_hosts=LOOPBACK if local else None,
        )  # fmt: skip
        echo(f"colosseum ui: {url_of(host, sock, token)}" + ("  (read-only)" if read_only else ""))
        if token:
            echo("the token in this URL is shown only now; every request must present it")
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2)
        uvicorn.Server(config).run(sockets=[sock])
