"""Secrets the platform must read back (webhook signing keys, tracker credentials), encrypted at rest.

Fernet (AES-128-CBC + HMAC-SHA256) under a key derived from the platform's `secret_key`: a database dump alone does
not reveal them. Changing `secret_key` makes stored secrets unreadable (`SecretUnreadable`): set them again.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

_CONTEXT = b"streamrl secret box v1:"


class SecretUnreadable(RuntimeError):
    """The stored secret was encrypted under another platform secret_key."""


def _fernet(platform_secret: str) -> Fernet:
    key = hashlib.sha256(_CONTEXT + platform_secret.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def seal(platform_secret: str, value: Any) -> str:
    """`value` (JSON-able) encrypted and authenticated, as text for a database column."""
    return _fernet(platform_secret).encrypt(json.dumps(value).encode()).decode()


def unseal(platform_secret: str, token: str) -> Any:
    try:
        return json.loads(_fernet(platform_secret).decrypt(token.encode()))
    except InvalidToken:
        raise SecretUnreadable("a stored secret cannot be decrypted (was STREAMRL_SECRET_KEY changed?): "
                               "set it again") from None
