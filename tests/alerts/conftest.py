"""Fixtures of the alert tests: `webhook_receiver` and `smtp_inbox`, real servers on 127.0.0.1 (alert_servers.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest
from aiosmtpd.controller import Controller
from alert_servers import SmtpInbox, WebhookReceiver, handler_for
from waiting import free_port


@pytest.fixture
def webhook_receiver() -> Iterator[WebhookReceiver]:
    port = free_port()
    receiver = WebhookReceiver(url=f"http://127.0.0.1:{port}/hook")
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(receiver))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    if receiver.hold_first is not None:
        receiver.hold_first.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def smtp_inbox() -> Iterator[SmtpInbox]:
    inbox = SmtpInbox(host="127.0.0.1", port=free_port())
    controller = Controller(inbox, hostname=inbox.host, port=inbox.port)
    controller.start()
    yield inbox
    controller.stop()
