"""The Baton API served from a thread of the benchmark's own process, on a free local port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from orchestrator.api.main import create_app
from orchestrator.config import Settings
from orchestrator.service import build_services, prestart


@contextmanager
def served_api(settings: Settings, *, embedded_loop: bool = True) -> Iterator[str]:
    """`baton serve` over `settings` in a thread (with its reconcile loop unless told not to);
    yields its URL, and stops it on the way out."""
    prestart(settings)
    services = build_services(settings, embedded_loop=embedded_loop)
    # Bound here and handed to the server: a port probed free and bound later may be taken in
    # between by any outgoing connection's local port.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(services), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [listener]}, name="baton-api", daemon=True
    )
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the API server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()
        listener.close()
        services.db.dispose()
