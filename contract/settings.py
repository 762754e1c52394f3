"""Control-plane configuration: environment variables `STREAMRL_*` and an optional `.env` file.

Defaults give the embedded setup (SQLite file + Redis started by the app under `data_dir`). Bad configuration fails
fast with one message naming every wrong variable (`ConfigError`), never a traceback deep inside a request.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from contract.devices import parse_device_sets

DATABASE_SCHEMES = ("sqlite", "postgresql", "postgres", "postgresql+psycopg")
REDIS_SCHEMES = ("redis", "rediss", "unix")


class ConfigError(RuntimeError):
    """Invalid configuration; the message names the offending variables."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STREAMRL_", env_file=".env", extra="ignore")

    data_dir: Path = Path("./data")
    database_url: str = Field("", description="default: sqlite:///<data_dir>/streamrl.db")
    redis_url: str | None = Field(None, description="None: an embedded Redis started under data_dir")
    artifact_dir: Path | None = Field(None, description="default: <data_dir>/artifacts")
    secret_key: str = Field("", description="signs session tokens; default: generated once into <data_dir>/secret_key")
    allowed_model_roots: list[Path] = Field(
        default_factory=list, description="extra dirs models may be registered from"
    )
    max_upload_bytes: int = Field(50 * 1024 * 1024, ge=1, description="cap of a dataset or model-archive upload")
    hub_endpoint: str | None = Field(None, description="Hugging Face Hub URL for model downloads (default: "
                                     "HF_ENDPOINT, else https://huggingface.co)")
    max_request_bytes: int = Field(1024 * 1024, ge=1024, description="cap of every non-upload request body (413)")
    session_ttl_s: int = Field(7 * 24 * 3600, ge=60)
    platform_admins: list[str] = Field(
        default_factory=list, description="emails of operators (device catalog) whose accounts the operator made "
        "(`streamrl init-admin --direct`, `streamrl up`), never a self-registered one; the first user ever is one too"
    )
    login_window_s: int = Field(900, ge=1, description="failed logins are counted over this many seconds")
    login_free_failures: int = Field(
        3, ge=1, description="failed logins per (account, client address) before its attempts wait 1, 2, 4, ... s"
    )
    login_base_delay_s: float = Field(
        1.0, gt=0, le=3600, description="the first wait of an (account, address) past its free failures; it doubles "
        "after each further failure"
    )
    login_max_delay_s: int = Field(900, ge=1, description="the longest wait between attempts of one (account, address)")
    login_max_failures_per_address: int = Field(
        50, ge=1, description="failed logins (any accounts) per address before its attempts wait too (1, 2, 4, ... s)"
    )
    login_address_max_delay_s: int = Field(
        30, ge=1, le=3600, description="the longest wait between attempts of one address: what others on a shared "
        "address wait at most for their own right password"
    )
    invitation_ttl_s: int = Field(7 * 24 * 3600, ge=60, le=365 * 24 * 3600,
                                  description="how long a team invitation may be accepted")
    auto_migrate: bool = Field(True, description="run `alembic upgrade head` when the app starts")
    allow_registration: bool = Field(True, description="POST /auth/register may create new teams")
    api_concurrency: int = Field(
        8, ge=1, le=1024, description="requests an API process works on at once (the rest wait their turn in arrival "
        "order): a few at a time keep the tail short; uploads and event streams are not counted"
    )
    auth_cache_s: float = Field(
        5.0, ge=0, le=300, description="reads reuse a token's resolved caller for up to this long while the API is "
        "subscribed to revocations in Redis (changes through the API apply at once); 0: each request reads the database"
    )
    cors_origins: list[str] = Field(default_factory=list)
    metrics_token: str = Field(
        "", description="bearer token GET /metrics requires (Prometheus: `authorization.credentials`); empty: /metrics "
        "is off (404)"
    )
    trusted_proxies: str = Field(
        "", max_length=4096, description="comma-separated IPs or CIDRs of the reverse proxies whose X-Forwarded-For "
        "/ X-Forwarded-Proto are believed (login limits key on that address); empty: none, the peer is the client"
    )
    public_url: str = Field(
        "http://127.0.0.1:8000", max_length=2000, pattern=r"^https?://[^\s]+$", description="the API's base URL as "
        "agents reach it: a remote agent (`agent.url`) is handed {public_url}/api/v1/rollouts/{episode}/v1 as its "
        "OpenAI base_url (read by the generation workers)"
    )
    egress_allow: str = Field(
        "", max_length=4096, description="comma-separated IPs, CIDRs or host names that webhooks, tracker servers and "
        "the Hub endpoint may reach although they are loopback, private, link-local or this host's own addresses "
        "(backend/services/egress.py); empty: only public addresses"
    )
    disabled_routers: list[str] = Field(
        default_factory=list, description="optional API routers this API process leaves out (backend/main.py "
        "OPTIONAL_ROUTERS: plans, runs, exports, samples, cluster, graders); an unknown name stops the API at startup"
    )
    device: str = Field(
        "auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$", description="workers' accelerator: auto = cuda when available"
    )
    devices: str = Field(
        "", max_length=4096, description="a worker's device sets, one per slot: `0-3;4-7` (CPU cores, or GPU ids on "
        "CUDA); each task process runs pinned to its set. Empty: no pinning (`streamrl worker --devices`)"
    )

    inference_idle_s: float = Field(
        60.0, gt=0, le=86400, description="an on-demand inference instance (chat completions, sampling) stops after "
        "this many seconds without requests, freeing its generation slot (read by the generation workers)"
    )

    tinker_idle_s: float = Field(
        60.0, gt=0, le=7 * 86400, description="a Tinker training session (docs/tinker.md) that got no call for this "
        "many seconds is parked: its adapter and optimizer state go to disk and its training slot is free; its next "
        "call restores it (read by the training workers)"
    )
    tinker_park_every: int = Field(
        20, ge=1, le=1_000_000, description="a Tinker training session also saves its park state every this many "
        "optimizer steps while it runs: after a kill -9 of its worker it resumes from there (read by the training "
        "workers)"
    )

    smtp_host: str | None = Field(None, description="SMTP server for e-mail alerts; unset: e-mail rules are refused")
    smtp_port: int = Field(587, ge=1, le=65535)
    smtp_tls: Literal["starttls", "ssl", "none"] = Field("starttls", description="starttls (port 587), ssl (465), none")
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_from: str = Field("streamrl@localhost", max_length=320, description="From: of alert e-mails")
    alert_retry_base_s: float = Field(
        10.0, gt=0, le=3600, description="a failed alert delivery is retried after base * 2**(attempt-1) seconds"
    )
    alert_max_attempts: int = Field(6, ge=1, le=50, description="attempts before a delivery is marked failed")
    alert_timeout_s: float = Field(10.0, gt=0, le=300, description="timeout of one webhook or SMTP attempt")

    @field_validator("devices")
    @classmethod
    def _device_sets(cls, text: str) -> str:
        if text.strip():
            parse_device_sets(text)  # DeviceSetError (a ValueError) names the bad part
        return text.strip()

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_addresses(cls, text: str) -> str:
        entries = [entry.strip() for entry in text.split(",") if entry.strip()]
        for entry in entries:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or CIDR") from None
        return ",".join(entries)

    @field_validator("egress_allow")
    @classmethod
    def _egress_entries(cls, text: str) -> str:
        entries = [entry.strip().lower() for entry in text.split(",") if entry.strip()]
        for entry in entries:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                if not re.fullmatch(r"[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9_])?\.?", entry):
                    raise ValueError(f"{entry!r} is not an IP address, CIDR or host name") from None
        return ",".join(entries)

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, url: str) -> str:
        if url and url.split(":", 1)[0] not in DATABASE_SCHEMES:
            raise ValueError(f"must start with one of {', '.join(s + '://' for s in DATABASE_SCHEMES)}")
        return url

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str | None) -> str | None:
        if not url:
            return None
        if url.split(":", 1)[0] not in REDIS_SCHEMES:
            raise ValueError("must be a redis://, rediss:// or unix:// URL (unset: embedded Redis)")
        return url

    @field_validator("secret_key")
    @classmethod
    def _secret_long_enough(cls, key: str) -> str:
        if key and len(key) < 16:
            raise ValueError("must be at least 16 characters")
        return key

    @model_validator(mode="after")
    def _derive_paths(self) -> Settings:
        self.data_dir = self.data_dir.expanduser().resolve()
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'streamrl.db'}"
        self.artifact_dir = (self.artifact_dir or self.data_dir / "artifacts").expanduser().resolve()
        self.allowed_model_roots = [root.expanduser().resolve() for root in self.allowed_model_roots]
        if not self.secret_key:
            self.secret_key = _persistent_secret(self.data_dir / "secret_key")
        return self

    @property
    def artifacts(self) -> Path:
        """`artifact_dir`, never None after validation."""
        assert self.artifact_dir is not None
        return self.artifact_dir


def _persistent_secret(path: Path) -> str:
    """A random key kept in `path`, so sessions survive restarts of the embedded setup."""
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(32)
    path.write_text(key)
    path.chmod(0o600)
    return key


def load_settings(**overrides: object) -> Settings:
    """Settings from env/.env plus `overrides`; raises `ConfigError` with one readable message."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(
            f"STREAMRL_{'.'.join(str(p) for p in err['loc']).upper() or 'SETTINGS'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid configuration: {problems}") from None


@lru_cache
def get_settings() -> Settings:
    return load_settings()
