"""pyarrow filesystems for a version's root: local, or S3 with the AWS chain's credentials (never in a URL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.fs as pafs

from bench_build.storage import LocalStore, StorageError, Store, open_store, redact, register_secret, s3_client


def s3_filesystem(*, endpoint_url: str | None = None, profile: str | None = None) -> Any:
    """A ``pyarrow.fs.S3FileSystem`` configured from the AWS chain (path-style addressing on custom endpoints)."""
    import boto3

    client = s3_client(endpoint_url, profile)  # resolves the endpoint and region exactly as publish does
    creds = boto3.session.Session(profile_name=profile).get_credentials()
    kwargs: dict[str, Any] = {"region": client.meta.region_name}
    if creds is not None:
        frozen = creds.get_frozen_credentials()
        register_secret(frozen.secret_key)
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
        raise StorageError(redact(f"cannot open pyarrow's S3 filesystem: {e}")) from None


def filesystem_for(root: Any, *, endpoint_url: str | None = None, profile: str | None = None
                   ) -> tuple[Any, str]:
    """(pyarrow filesystem, base path inside it) of a version directory: a path, ``file://`` or ``s3://`` URL,
    or an open `bench_build.storage.Store`."""

    store = root if isinstance(root, Store) else open_store(
        root if isinstance(root, Path) else str(root), endpoint_url=endpoint_url, profile=profile)
    if isinstance(store, LocalStore):
        return pafs.LocalFileSystem(), str(store.root)
    return s3_filesystem(endpoint_url=store.endpoint_url, profile=store.profile), \
        f"{store.bucket}/{store.prefix}".rstrip("/")
