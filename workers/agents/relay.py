"""The outside end of a jailed agent's only network: a unix socket (bound into its jail at /gateway.sock) that answers
HTTP for ONE episode's gateway at a time and nothing else: a jail runs its episodes one after another
(jailed.py), and the relay is attached to each in turn (`attach`), answering nothing between them (`detach`).

Each connection carries one request (`Connection: close`). The path is the agent's view of its base URL:
`/v1/...` (chat completions, models) maps to `{gateway}/api/v1/rollouts/{episode}/v1/...` and `/reward` to
`{gateway}/api/v1/rollouts/{episode}/reward`; anything else is a 404 here and never leaves the worker. The request
goes upstream with the agent's own Authorization header (the API checks it is this episode's token: another
episode's token is a 401 there, and another episode's URL cannot even be named). Bodies are capped, chunked request
bodies refused; the response (an SSE stream too) is relayed as it arrives.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import threading
from typing import Any

import httpx

MAX_HEADER_BYTES = 64 << 10
MAX_BODY_BYTES = 8 << 20
FORWARDED_HEADERS = ("authorization", "content-type", "accept", "openai-organization", "openai-project")
READ_TIMEOUT_S = 600.0


class RelayRequestError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _read_request(conn: socket.socket) -> tuple[str, str, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise RelayRequestError(400, "the request ended before its headers")
        data += chunk
        if len(data) > MAX_HEADER_BYTES and b"\r\n\r\n" not in data[:MAX_HEADER_BYTES + 4]:
            raise RelayRequestError(431, "request headers over 64 KB")
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise RelayRequestError(400, "malformed request line")
    method, target = parts[0], parts[1]
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise RelayRequestError(400, "malformed header")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise RelayRequestError(411, "chunked request bodies are not accepted; send Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise RelayRequestError(400, "bad Content-Length") from None
    if length < 0 or length > MAX_BODY_BYTES:
        raise RelayRequestError(413, f"request body over {MAX_BODY_BYTES >> 20} MB")
    while len(body) < length:
        chunk = conn.recv(min(65536, length - len(body)))
        if not chunk:
            raise RelayRequestError(400, "the request ended before its body")
        body += chunk
    return method, target, headers, body[:length]


def _send_head(conn: socket.socket, status: int, reason: str, content_type: str) -> None:
    conn.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nConnection: close\r\n"
                 "Cache-Control: no-cache\r\n\r\n".encode("latin-1"))


class EpisodeRelay:
    """A unix socket in a private temp dir serving the gateway of one episode at a time; `close` ends it."""

    def __init__(self, client: httpx.Client, gateway_url: str, episode_id: str | None):
        """`episode_id` None: a relay made for a jail started ahead of its episode; nothing is reachable through it
        until `attach` names the episode."""
        self.client, self.gateway_url = client, gateway_url.rstrip("/")
        self.episode: str | None = None
        self.base: str | None = None
        self.refused: list[str] = []  # paths the agent asked for that are not its gateway (for its episode's error)
        if episode_id is not None:
            self.attach(episode_id)
        self.dir = tempfile.mkdtemp(prefix="streamrl-agent-")
        self.path = os.path.join(self.dir, "gateway.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        os.chmod(self.path, 0o666)  # the jail's uid connects; the dir (0700) keeps everyone else out on the host
        self.server.listen(64)
        self._closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, name=f"relay-{(episode_id or 'next')[:40]}", daemon=True)
        self.thread.start()

    def attach(self, episode_id: str) -> None:
        """Serve `episode_id`'s gateway from now on (a request read before, to the episode before, went there: the
        gateway refuses that episode's token once it is over, and its URL is never reachable again from here)."""
        assert self.episode is None, "a relay serves one episode at a time"
        self.refused = []
        self.episode, self.base = episode_id, f"{self.gateway_url}/api/v1/rollouts/{episode_id}"

    def detach(self) -> None:
        """Between episodes: nothing is reachable until the next `attach`."""
        self.episode = self.base = None

    def upstream(self, target: str) -> str | None:
        base = self.base  # read once: the relay moves to the next episode between requests
        if base is None:  # no episode now (before the jail's first, between two)
            return None
        path, sep, query = target.partition("?")
        if ".." in path or "//" in path or "%" in path:
            return None
        if path == "/reward":
            suffix = "/reward"
        elif path.startswith("/v1/") and len(path) > 4:
            suffix = path
        else:
            return None
        return base + suffix + (sep + query if sep else "")

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        sent = False
        with conn:
            try:
                conn.settimeout(READ_TIMEOUT_S)
                method, target, headers, body = _read_request(conn)
                url = self.upstream(target)
                if url is None or method not in ("GET", "POST"):
                    self.refused.append(f"{method} {target[:100]}")
                    raise RelayRequestError(404, f"{method} {target[:100]}: only this episode's gateway "
                                            "(/v1/... and /reward under base_url) is reachable")
                forwarded = {k: v for k, v in headers.items() if k in FORWARDED_HEADERS}
                with self.client.stream(method, url, headers=forwarded, content=body or None) as answer:
                    _send_head(conn, answer.status_code, answer.reason_phrase or "OK",
                               answer.headers.get("content-type", "application/json"))
                    sent = True
                    for chunk in answer.iter_bytes():
                        conn.sendall(chunk)
            except RelayRequestError as exc:
                _reply_error(conn, exc.status, str(exc))
            except (httpx.HTTPError, OSError) as exc:
                if not sent:  # else the agent sees the stream cut short
                    _reply_error(conn, 502, f"the gateway could not be reached: {type(exc).__name__}")

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.server.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)


def _reply_error(conn: socket.socket, status: int, message: str) -> None:
    body: dict[str, Any] = {"error": {"message": message, "type": "invalid_request_error", "code": "relay"}}
    with contextlib.suppress(OSError):
        _send_head(conn, status, "Error", "application/json")
        conn.sendall(json.dumps(body).encode())
