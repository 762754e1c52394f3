"""`environment.type: openenv`: an OpenEnv environment server (the `openenv-core` HTTP/WebSocket protocol) as a
StreamRL environment (docs/user-guide.md#openenv-environments).

OpenEnv environments are stateful: each episode is one WebSocket session of the server (`{url}/ws`), opened at the
episode's reset and closed when it ends (`finish`). The wire protocol, as openenv-core 0.3 serves it:

    -> {"type": "reset", "data": {"seed", "episode_id", "row"}}          <- {"type": "observation", "data": {
    -> {"type": "step", "data": <action>}                                       "observation": {...}, "reward", "done"}}
    (the connection closed: the session ends)                             <- {"type": "error", "data": {"message"}}

Mapping to the episode loop's messages:
- reset: `seed` is the row's (every sample of a group faces the same task), `row` the dataset row; the observation
  becomes the opening: its `messages` list if it has one, else one user message with its text (`observation_field`,
  or its only string field).
- the policy's reply without tool calls: the action `{action_field: text}` (default `message`, as echo_env's);
  the observation's text is the next user message (none once the episode is done).
- tool calls, MCP style: each call is the action `{"type": "call_tool", "tool_name", "arguments"}` and its
  observation's `result` (or `error`) a `tool` message; rewards add up, any `done` ends the episode. The tools the
  template is given are the server's answer to `{"type": "list_tools"}` (none if it has no MCP tools).

A server that refuses or drops the connection raises `EnvironmentLost` (the episode loop retries the episode from
its reset); connecting is retried with backoff for `reconnect_s` (5 min) first, so a restarting server fails no
episodes.
An error answer or a step past `step_timeout_s` fails that episode only.

With `code` instead of `url` the platform serves the environment itself in the jail (openenv_jail.py): the sessions
go over the unix socket it listens on, and a server found dead at a connect is started again.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import zlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.sync.client import ClientConnection, connect, unix_connect

from contract.environments import OPENENV, Message, StepResultError, check_messages
from workers.environments.base import MAX_ERROR_CHARS, Environment, EnvironmentFailure, EnvironmentLost
from workers.environments.openenv_jail import JailedServer

RECONNECT_S = 300.0  # how long connecting to a server that is down is retried before the episode is lost (a restart)
BACKOFF_S = (0.2, 2.0)  # first and longest wait between connection attempts
MAX_MESSAGE_BYTES = 4 << 20
CLOSE_TIMEOUT_S = 1.0  # an ended episode's session: the server drops it when the connection closes
MCP_TEXT_FIELDS = ("tools", "result", "error", "tool_name")


def ws_url(url: str) -> str:
    """The server's session endpoint: http(s)://host/base -> ws(s)://host/base/ws."""
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss"}[parts.scheme]
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + "/ws", "", ""))


def row_seed(row: Mapping[str, Any]) -> int:
    """The reset seed of a row: the same for every sample of its group (as built-ins seed by the row)."""
    key = str(row.get("prompt_id", "")) + "\x00" + str(row.get("prompt", ""))
    return zlib.crc32(f"openenv:{key}".encode()) & 0x7FFFFFFF


class OpenEnvEnvironment(Environment):
    name = OPENENV

    def __init__(self, url: str | None, *, step_timeout_s: float, action_field: str = "message",
                 observation_field: str | None = None, reconnect_s: float = RECONNECT_S,
                 server: JailedServer | None = None):
        """`url`: the server's; or `server`: the server the platform runs in the jail (openenv_jail.py)."""
        assert (url is None) != (server is None)
        self.server = server
        self.url = url or "(served in the jail)"
        self.endpoint = ws_url(url) if url else "ws://openenv/ws"
        self.step_timeout_s, self.reconnect_s = step_timeout_s, reconnect_s
        self.action_field, self.observation_field = action_field, observation_field
        self.sessions: dict[str, ClientConnection] = {}
        self._tools: list[dict[str, Any]] | None = None
        self._lock = threading.Lock()
        self._lost = 0  # sessions lost since the last note
        self._notes: list[str] = []

    # -- the server ---------------------------------------------------------------------------------------------------
    def _connect(self) -> ClientConnection:
        deadline, wait, error = time.monotonic() + self.reconnect_s, BACKOFF_S[0], ""
        while True:
            try:
                if self.server is not None:  # started (again) if it is not running; EnvironmentFailure if it cannot
                    self.server.ensure_running()
                    return unix_connect(self.server.path, self.endpoint, open_timeout=self.step_timeout_s,
                                        close_timeout=CLOSE_TIMEOUT_S, max_size=MAX_MESSAGE_BYTES, legacy=True)
                return connect(self.endpoint, open_timeout=self.step_timeout_s, close_timeout=CLOSE_TIMEOUT_S,
                               max_size=MAX_MESSAGE_BYTES, proxy=None, legacy=True)
            except (OSError, InvalidHandshake, TimeoutError, ConnectionClosed) as exc:  # closed: dying mid-handshake
                error = f"{type(exc).__name__}: {exc}"
            except InvalidURI as exc:
                raise EnvironmentFailure(f"openenv url {self.url!r}: {exc}"[:MAX_ERROR_CHARS]) from None
            if time.monotonic() + wait > deadline:
                raise EnvironmentLost(f"openenv server {self.url} unreachable for {self.reconnect_s:.0f}s: "
                                      f"{error}"[:MAX_ERROR_CHARS])
            time.sleep(wait)
            wait = min(wait * 2, BACKOFF_S[1])

    def _call(self, conn: ClientConnection, kind: str, data: dict[str, Any], what: str) -> dict[str, Any]:
        """One request of a session and its observation (`{"observation", "reward", "done"}`)."""
        try:
            conn.send(json.dumps({"type": kind, "data": data}))
            raw = conn.recv(timeout=self.step_timeout_s)
        except (ConnectionClosed, OSError) as exc:
            self._note_lost()
            raise EnvironmentLost(f"openenv {what}: the server closed the session ({exc})"[:MAX_ERROR_CHARS]) from None
        except TimeoutError:
            raise EnvironmentFailure(f"openenv {what}: no answer within step_timeout_s "
                                     f"{self.step_timeout_s:g}s") from None
        try:
            answer = json.loads(raw)
        except ValueError:
            raise EnvironmentFailure(f"openenv {what}: the answer is not JSON") from None
        body = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(body, dict):
            raise EnvironmentFailure(f"openenv {what}: malformed answer {str(raw)[:200]!r}")
        if answer.get("type") == "error":
            raise EnvironmentFailure(f"openenv {what}: {body.get('message', body)}"[:MAX_ERROR_CHARS])
        if answer.get("type") != "observation" or not isinstance(body.get("observation"), dict):
            raise EnvironmentFailure(f"openenv {what}: expected an observation, got {str(raw)[:200]!r}")
        reward = body.get("reward")
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, int | float)):
            raise EnvironmentFailure(f"openenv {what}: reward {reward!r} is not a number")
        return body

    def _note_lost(self) -> None:
        with self._lock:
            self._lost += 1

    def take_notes(self) -> list[str]:
        with self._lock:
            notes, self._notes = self._notes, []
            if self._lost:
                notes.append(f"openenv server {self.url}: {self._lost} episode sessions lost (server gone or "
                             "restarted); those episodes are retried from their reset")
                self._lost = 0
        return notes

    # -- tools --------------------------------------------------------------------------------------------------------
    @property
    def tools(self) -> list[dict[str, Any]]:
        """The server's MCP tools as chat-template tool definitions (asked once, in a session of its own); a server
        unreachable now is a ValueError (the job's setup error)."""
        if self._tools is None:
            try:
                conn = self._connect()
            except EnvironmentFailure as exc:
                raise ValueError(str(exc)) from None
            try:
                self._call(conn, "reset", {}, "reset")
                listed = self._call(conn, "step", {"type": "list_tools"}, "list_tools")["observation"].get("tools")
            except EnvironmentFailure:  # not an MCP environment: it has no tools to offer
                listed = None
            finally:
                _close(conn)
            self._tools = [_tool_definition(t) for t in listed or [] if isinstance(t, dict) and t.get("name")]
        return self._tools

    # -- episodes -----------------------------------------------------------------------------------------------------
    def reset(self, row: Mapping[str, Any], episode: str = "") -> list[Message]:
        self.finish(episode)
        conn = self._connect()
        self.sessions[episode] = conn
        body = self._call(conn, "reset", {"seed": row_seed(row), "episode_id": episode[:255] or None,
                                          "row": dict(row)}, "reset")
        messages = self._messages(body["observation"], "reset", done=False)
        if not messages:
            raise EnvironmentFailure("openenv reset: the observation has no text to open the episode with")
        return messages

    def step(self, messages: list[Message], row: Mapping[str, Any],
             episode: str = "") -> tuple[list[Message], float | None, bool]:
        conn = self.sessions.get(episode)
        if conn is None:
            raise EnvironmentLost("openenv step: the episode has no session (reset first)")
        last = messages[-1] if messages else {}
        calls = [c for c in last.get("tool_calls") or [] if isinstance(c, dict) and isinstance(c.get("function"), dict)]
        if not calls:
            body = self._call(conn, "step", {self.action_field: str(last.get("content") or "")}, "step")
            done = bool(body.get("done"))
            return self._messages(body["observation"], "step", done=done), body.get("reward"), done
        out: list[Message] = []
        total: float | None = None
        done = False
        for call in calls:
            fn = call["function"]
            args = fn.get("arguments") if isinstance(fn.get("arguments"), dict) else {}
            body = self._call(conn, "step", {"type": "call_tool", "tool_name": str(fn.get("name", "")),
                                             "arguments": args}, f"tool call {fn.get('name')!r}")
            observation = body["observation"]
            result = observation.get("error") or observation.get("result")
            out.append({"role": "tool", "tool_call_id": str(call.get("id", "")), "name": str(fn.get("name", "")),
                        "content": _text(result)})
            if body.get("reward") is not None:
                total = (total or 0.0) + float(body["reward"])
            if body.get("done"):
                done = True
                break
        return _checked(out, "tool results"), total, done

    def finish(self, episode: str) -> None:
        conn = self.sessions.pop(episode, None)
        if conn is not None:
            _close(conn)

    def close(self) -> None:
        for episode in list(self.sessions):
            self.finish(episode)
        if self.server is not None:
            self.server.close()

    # -- observations -------------------------------------------------------------------------------------------------
    def _messages(self, observation: dict[str, Any], what: str, *, done: bool) -> list[Message]:
        if isinstance(observation.get("messages"), list):
            return _checked(observation["messages"], what)
        text = self._text_of(observation, what)
        return [] if done or not text else _checked([{"role": "user", "content": text}], what)

    def _text_of(self, observation: dict[str, Any], what: str) -> str:
        if self.observation_field is not None:
            if self.observation_field not in observation:
                raise EnvironmentFailure(f"openenv {what}: the observation has no field {self.observation_field!r} "
                                         f"(it has {sorted(observation)})")
            return _text(observation[self.observation_field])
        strings = [v for k, v in observation.items() if isinstance(v, str) and k not in MCP_TEXT_FIELDS]
        return strings[0] if len(strings) == 1 else _text(observation)


def _checked(messages: list[Any], what: str) -> list[Message]:
    try:
        return check_messages(messages, f"openenv {what}")
    except StepResultError as exc:
        raise EnvironmentFailure(str(exc)[:MAX_ERROR_CHARS]) from None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("message"), str):  # an MCP ToolError
        return f"error: {value['message']}"
    return json.dumps(value, sort_keys=True, default=str)


def _tool_definition(tool: dict[str, Any]) -> dict[str, Any]:
    """An MCP tool (`name`, `description`, `input_schema`) as a chat template's function tool."""
    schema = tool.get("input_schema") or tool.get("inputSchema") or {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": str(tool["name"]), "description": str(tool.get("description")
                                                                                          or ""),
                                             "parameters": schema}}


def _close(conn: ClientConnection) -> None:
    """Close the session's connection (the server ends the session with it)."""
    with contextlib.suppress(OSError):
        conn.close()
