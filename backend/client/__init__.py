"""Python SDK for the StreamRL REST API (docs/api.md)."""

from backend.client.client import StreamRLClient
from backend.client.errors import APIError, ConnectionFailed
from backend.client.sse import SSEEvent, parse_sse

__all__ = ["APIError", "ConnectionFailed", "SSEEvent", "StreamRLClient", "parse_sse"]
