"""Real servers the alert tests deliver to: an HTTP webhook receiver (answers a programmed status per request, can
hold the first request until released) and an SMTP inbox for aiosmtpd; waits are in tests/waiting.py."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookReceiver:
    url: str
    statuses: list[int] = field(default_factory=list)  # answered in order; 200 once they run out
    requests: list[Received] = field(default_factory=list)
    hold_first: threading.Event | None = None  # set: the first request waits for it before answering
    answer: bytes = b"ok"  # the body of every answer


def handler_for(receiver: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            receiver.requests.append(Received({k.lower(): v for k, v in self.headers.items()}, body))
            if len(receiver.requests) == 1 and receiver.hold_first is not None:
                receiver.hold_first.wait(60)
            status = receiver.statuses.pop(0) if receiver.statuses else 200
            try:
                self.send_response(status)
                self.send_header("Content-Length", str(len(receiver.answer)))
                self.end_headers()
                self.wfile.write(receiver.answer)
            except OSError:
                pass  # the sender is gone (killed mid-request)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@dataclass
class SmtpInbox:
    host: str
    port: int
    messages: list[dict[str, Any]] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's name
        self.messages.append({"from": envelope.mail_from, "to": list(envelope.rcpt_tos),
                              "data": envelope.content.decode("utf-8", "replace")})
        return "250 Message accepted for delivery"
