"""Loaders for users of a built version: pyarrow's S3 filesystem from the AWS chain, PyTorch datasets.

``s3_filesystem`` gives pyarrow (and therefore ``open_version``, ``pyarrow.dataset``, pandas) the same
credentials and endpoint as ``publish``/``pull``: the standard AWS chain (environment, profile, role) and
``--endpoint-url`` / ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` / the profile's ``endpoint_url``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse


def s3_filesystem(*, endpoint_url: str | None = None, profile: str | None = None) -> Any:
    """A ``pyarrow.fs.S3FileSystem`` configured from the AWS chain (path-style addressing on custom endpoints)."""
    import boto3
    import pyarrow.fs as pafs

    from pipeline.storage import StorageError, _register_secret, s3_client

    client = s3_client(endpoint_url, profile)  # resolves the endpoint and region exactly as publish does
    creds = boto3.session.Session(profile_name=profile).get_credentials()
    kwargs: dict[str, Any] = {"region": client.meta.region_name}
    if creds is not None:
        frozen = creds.get_frozen_credentials()
        _register_secret(frozen.secret_key)
        kwargs.update(access_key=frozen.access_key, secret_key=frozen.secret_key, session_token=frozen.token)
    else:
        kwargs["anonymous"] = True
    endpoint = client.meta.endpoint_url
    parsed = urlparse(endpoint)
    if parsed.hostname and not parsed.hostname.endswith("amazonaws.com"):
        kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme or "https",
                      force_virtual_addressing=False)
    try:
        return pafs.S3FileSystem(**kwargs)
    except Exception as e:  # never let a secret reach the message
        from pipeline.storage import redact

        raise StorageError(redact(f"cannot open pyarrow's S3 filesystem: {e}")) from None
