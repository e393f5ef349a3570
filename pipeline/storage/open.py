"""`open_store`: a path, ``file://`` URL or ``s3://bucket/prefix`` → its `Store`."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from bench_build.storage.base import Store, StoreSpec
from bench_build.storage.errors import StorageError
from bench_build.storage.local import LocalStore
from bench_build.storage.s3 import S3Store

# -- opening -----------------------------------------------------------------------------------------
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def is_remote(url: str | Path) -> bool:
    return isinstance(url, str) and url.lower().startswith("s3://")


def open_store(url: str | Path | Store | StoreSpec, *, endpoint_url: str | None = None,
               profile: str | None = None) -> Store:
    """A store for a plain path, ``file:///abs/path`` or ``s3://bucket[/prefix]``, or re-opened from the
    `StoreSpec` another process sent (a Ray worker opening its build's store)."""
    if isinstance(url, Store):
        return url
    if isinstance(url, StoreSpec):
        return open_store(url.url, endpoint_url=url.endpoint_url, profile=url.profile)
    if isinstance(url, Path):
        return LocalStore(url)
    m = _SCHEME.match(url)
    if m is None:
        return LocalStore(Path(url))
    scheme = m.group(1).lower()
    parsed = urlparse(url)
    if "@" in parsed.netloc:  # never echo it: it may hold a secret
        raise StorageError(f"{scheme}:// URLs must not carry credentials; use the AWS chain (env, profile)")
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise StorageError(f"file:// URL with a host is not supported: {url}")
        return LocalStore(Path(unquote(parsed.path)))
    if scheme == "s3":
        if not parsed.netloc:
            raise StorageError(f"{url}: no bucket (expected s3://bucket/prefix)")
        prefix = parsed.path.strip("/")
        if ".." in prefix.split("/"):
            raise StorageError(f"{url}: '..' is not allowed in an S3 prefix")
        return S3Store(parsed.netloc, prefix, endpoint_url=endpoint_url, profile=profile)
    raise StorageError(f"unsupported URL scheme {scheme}:// (use a path, file:// or s3://)")
