"""``serve`` takes a burst of clients (issue 59, item 6): of 20 clients connecting at
once, 4 were reset, for the listen backlog was the stdlib's 5.

Fifty clients connect while the server accepts nothing yet: the kernel's listen backlog
alone must hold every one (with a backlog of 5 it holds 6, and the rest wait on a
handshake the server never finished). Then each is served, as ``serve_forever`` serves a
connection, and every one gets its /health answer. Planted bug: ``request_queue_size``
left at 5 — the seventh accept finds no one waiting.
"""

from __future__ import annotations

import socket
from types import SimpleNamespace

from specchat.serve.http import make_server

BURST = 50


def test_a_burst_of_fifty_clients_is_held_and_served():
    server = make_server(SimpleNamespace(api_key=None), "127.0.0.1", 0, quiet=True)
    clients = []
    try:
        for _ in range(BURST):
            client = socket.create_connection(server.server_address, timeout=10)
            client.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            clients.append(client)
        server.socket.settimeout(5)  # a connection the backlog held is there at once; this bounds a failure
        for _ in range(BURST):
            server.process_request(*server.socket.accept())
        answers = [client.makefile("rb").readline() for client in clients]
    finally:
        for client in clients:
            client.close()
        server.server_close()
    assert all(a.split()[1:2] == [b"200"] for a in answers), answers
