"""boto3 clients: one per process and settings (never shared across fork), and what their errors mean."""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

from bench_build.storage.base import DEFAULT_REGION
from bench_build.storage.errors import StorageError
from bench_build.storage.secrets import register_secret

# -- S3 --------------------------------------------------------------------------------------------
_CLIENTS: dict[tuple, Any] = {}


_CLIENTS_LOCK = threading.Lock()


def _forget_clients_after_fork() -> None:
    """A forked child (a PyTorch DataLoader worker) must not use its parent's clients: boto3's connection pool
    is not fork-safe, and a socket both processes read hands one of them the other's response (another object's
    size, a truncated body). The lock is new too: another thread may have held it at the fork."""
    global _CLIENTS_LOCK
    _CLIENTS.clear()
    _CLIENTS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_clients_after_fork)


DIGEST_CODES = {"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch", "XAmzContentChecksumMismatch"}


AUTH_CODES = {"SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "InvalidToken", "ExpiredToken",
               "InvalidClientTokenId", "UnrecognizedClientException", "AuthorizationHeaderMalformed", "403"}


def denied_message(where: str, op: str, code: str) -> str:
    """The one line every reader and writer gives when the endpoint rejects the AWS chain's credentials."""
    return (f"{where}: {op} denied ({code}): the endpoint rejected the credentials of the AWS chain "
            "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or --profile, ~/.aws/credentials); "
            "check them and the endpoint (--endpoint-url / AWS_ENDPOINT_URL)")


def endpoint_from_env() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def endpoint_source(endpoint_url: str | None, profile: str | None) -> str:
    """Where the endpoint in use was set, with its value: the flag, the environment, else the profile."""
    if endpoint_url:
        return f"--endpoint-url {endpoint_url}"
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if os.environ.get(name):
            return f"{name}={os.environ[name]}"
    config = os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config"
    return f"endpoint_url of AWS profile {profile or os.environ.get('AWS_PROFILE') or 'default'} ({config})"


def profile_not_found(profile: str | None) -> str:
    """The line for an AWS profile that neither of the AWS chain's files defines, naming where it was set."""
    where = f"--profile {profile}" if profile else f"AWS_PROFILE={os.environ.get('AWS_PROFILE', '')}"
    config = os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config"
    credentials = os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials"
    return (f"{where}: no such AWS profile in {config} (nor in {credentials}); pass a profile defined there, "
            "or none to use the AWS_* environment")


def s3_client(endpoint_url: str | None = None, profile: str | None = None, *, unsigned_payload: bool = False):
    """One boto3 S3 client per (endpoint, profile, payload signing) per process (clients are thread-safe).

    ``unsigned_payload``: requests are signed with ``UNSIGNED-PAYLOAD`` instead of the body's sha256, even over
    plain http; only for requests whose body carries its own verified checksum header (`S3Store.upload_file`)."""
    # the environment's part of the AWS chain is part of the key: a changed secret gets a new client
    chain = "\0".join(os.environ.get(k, "") for k in (
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"))
    key = (endpoint_url, profile, hashlib.sha256(chain.encode()).hexdigest(), unsigned_payload)
    with _CLIENTS_LOCK:
        if key in _CLIENTS:
            return _CLIENTS[key]
        import boto3
        import botocore.exceptions
        from botocore.config import Config

        try:
            session = boto3.session.Session(profile_name=profile)
        except botocore.exceptions.ProfileNotFound:
            raise StorageError(profile_not_found(profile)) from None
        custom = endpoint_url or endpoint_from_env()
        s3: dict[str, Any] = {"addressing_style": "path"} if custom else {}
        if unsigned_payload:
            s3["payload_signing_enabled"] = False
        config = Config(
            retries={"max_attempts": 3, "mode": "standard"},
            max_pool_connections=32,
            connect_timeout=10,
            read_timeout=120,
            # S3-compatible stores: path-style addressing, and no optional CRC trailers they may not know
            s3=s3,
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        try:
            client = session.client("s3", endpoint_url=endpoint_url,
                                    region_name=session.region_name or DEFAULT_REGION, config=config)
        except ValueError as e:  # botocore's "Invalid endpoint: notaurl" (no scheme), raised before any request
            if not str(e).startswith("Invalid endpoint"):
                raise
            raise StorageError(f"{endpoint_source(endpoint_url, profile)}: not a valid endpoint URL; "
                               "expected http(s)://host[:port]") from None
        creds = session.get_credentials()
        if creds is not None:
            frozen = creds.get_frozen_credentials()
            register_secret(frozen.secret_key)
            register_secret(frozen.token)
        _CLIENTS[key] = client
        return client
