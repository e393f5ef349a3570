"""Secret redaction: every known credential is scrubbed from any text storage code produces."""

from __future__ import annotations

import os

_SECRETS: set[str] = set()  # every secret seen in this process, longest first when redacting
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


def register_secret(value: str | None) -> None:
    if value and len(value) >= 4:
        _SECRETS.add(value)


def redact(text: str) -> str:
    """``text`` with every secret known to this process (env, resolved AWS credentials) replaced by ``***``."""
    for name in _SECRET_ENV:
        register_secret(os.environ.get(name))
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
