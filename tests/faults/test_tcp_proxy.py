"""The TCP fault proxy itself: a blackhole loses what the client sent, as a partition does (never delivered later)."""

from __future__ import annotations

import socket
import threading
import time

from tests.faults.tcp_proxy import TcpFaultProxy

SETTLE_S = 2.0
"""Upper bound for the proxy to notice the client left; never a speed check."""


def test_what_a_client_sent_into_a_blackhole_is_never_delivered():
    received: list[bytes] = []
    with socket.create_server(("127.0.0.1", 0)) as upstream:

        def record() -> None:
            connection, _ = upstream.accept()
            with connection:
                while data := connection.recv(65536):
                    received.append(data)

        recorder = threading.Thread(target=record)
        recorder.start()
        with TcpFaultProxy(upstream.getsockname()[1]) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port)) as client:
                client.sendall(b"before;")
                while not received:
                    time.sleep(0.01)
                proxy.set("blackhole")
                client.sendall(b"lost;")
            gone_by = time.monotonic() + SETTLE_S
            while proxy.open_links() and time.monotonic() < gone_by:  # the proxy drops it and sees the client leave
                time.sleep(0.01)
            proxy.set("pass")
            recorder.join(SETTLE_S)
    assert b"".join(received) == b"before;"
