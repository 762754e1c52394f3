"""Where the CLI finds its server and token.

Precedence: `--url` / `STREAMRL_URL`, then the config file's `url`, then http://127.0.0.1:8000. The token comes from
`--token` / `STREAMRL_TOKEN`, else the config file's token *for that URL* (a token saved for one server is never
sent to another). The file is `$STREAMRL_CONFIG` or `~/.config/streamrl/config.json`, mode 0600:
`{"url": "...", "tokens": {"<url>": "<token>"}}`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8000"


def config_path() -> Path:
    override = os.environ.get("STREAMRL_CONFIG")
    if override:
        return Path(override).expanduser()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "streamrl" / "config.json"


def normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"server URL must start with http:// or https:// (got {url!r})")
    return url


@dataclass
class CLIConfig:
    url: str | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None = None) -> CLIConfig:
        path = path or config_path()
        if not path.exists():
            return cls()
        try:
            raw = json.loads(path.read_text())
        except ValueError as exc:
            raise ValueError(f"config file {path} is not valid JSON ({exc}); fix or delete it") from None
        if not isinstance(raw, dict):
            raise ValueError(f"config file {path} must hold a JSON object; fix or delete it")
        tokens = raw.get("tokens") or {}
        return cls(url=raw.get("url"), tokens={str(k): str(v) for k, v in tokens.items()})

    def save(self, path: Path | None = None) -> Path:
        path = path or config_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        # Created 0600 from the start: the file holds bearer tokens.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"url": self.url, "tokens": self.tokens}, fh, indent=2)
        tmp.replace(path)
        return path

    def remember(self, url: str, token: str) -> None:
        """Make `url` the default server and keep `token` for it."""
        self.url = url
        self.tokens[url] = token

    def forget(self, url: str) -> bool:
        return self.tokens.pop(url, None) is not None


def resolve(url: str | None, token: str | None, config: CLIConfig) -> tuple[str, str | None]:
    """(server URL, token) after applying the precedence above."""
    chosen = normalize_url(url or config.url or DEFAULT_URL)
    return chosen, token or config.tokens.get(chosen)
