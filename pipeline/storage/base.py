"""The `Store` interface and its value types (`StoreSpec`, `ObjectInfo`, `StagedFile`), plus upload settings."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_build.storage.errors import NotFound, StorageError
from bench_build.storage.files import HASH_CHUNK
from bench_build.storage.owners import owner_dead
from bench_build.storage.uploads import BackgroundUploads

SHA256_META = "sha256"  # object metadata key (x-amz-meta-sha256) holding the hex sha256 of the content


MULTIPART_THRESHOLD = 64 << 20  # larger files go up in parts (KITTI-C shards are 100–150 MB)


MULTIPART_CHUNK = 16 << 20


DEFAULT_REGION = "us-east-1"  # S3-compatible stores ignore it, but botocore needs one to sign


Progress = Callable[[int], None]  # called with the number of bytes just transferred


UPLOAD_THREADS = 2  # PUTs of one task's files in flight at once (object stores; local flushes run one at a time)


OVERLAP_ENV = "BENCH_BUILD_OVERLAP_UPLOADS"  # "0": an s3 build uploads each file before computing the next


CHECKSUM_ENV = "BENCH_BUILD_S3_CHECKSUM"  # "sha256" (default) or "sigv4": how a single-PUT upload is verified


def upload_checksum_mode() -> str:
    """How a single-PUT upload proves its bytes: ``sha256`` (default: the file's known sha256 in the signed
    ``x-amz-checksum-sha256`` header, verified by the store; the body is not hashed again) or ``sigv4``
    (botocore hashes the body into the SigV4 signature: one more pass over every byte, for stores without
    S3 checksum headers). From ``BENCH_BUILD_S3_CHECKSUM`` in the uploading process's environment."""
    mode = os.environ.get(CHECKSUM_ENV, "sha256").strip().lower() or "sha256"
    if mode not in ("sha256", "sigv4"):
        raise StorageError(f"{CHECKSUM_ENV}={mode!r}: use 'sha256' (default) or 'sigv4'")
    return mode


def overlap_uploads() -> bool:
    """Do build tasks commit each file in the background while the next is computed (s3: its upload; local: its
    fsync + rename)? Yes unless ``BENCH_BUILD_OVERLAP_UPLOADS`` is ``0`` / ``false`` / ``no`` / ``off`` in the
    workers' environment."""
    return os.environ.get(OVERLAP_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


# -- secrets ---------------------------------------------------------------------------------------


def check_key(key: str) -> str:
    if key.startswith("/") or ".." in key.split("/") or "\\" in key:
        raise StorageError(f"refusing key {key!r}: it escapes the store root")
    return key.strip("/")


@dataclass
class ObjectInfo:
    key: str  # relative to the store root
    size: int
    etag: str | None = None
    sha256: str | None = None  # recorded at upload (S3 metadata); None when the backend does not keep it


@dataclass
class StagedFile:
    """A local temporary file that becomes the object ``key`` when the `Store.staged_file` block exits."""

    key: str
    path: Path
    size: int = -1
    sha256: str = ""


@dataclass(frozen=True)
class StoreSpec:
    """Everything needed to re-open a store in another process (a Ray worker). Holds no secret."""

    url: str
    endpoint_url: str | None = None
    profile: str | None = None


class Store:
    """Objects under one root. Keys are relative, ``/``-separated; ``child`` narrows the root."""

    spec: StoreSpec
    is_local = False
    upload_cpu_seconds = 0.0  # object stores: CPU seconds their uploads took on the uploading threads

    @property
    def url(self) -> str:
        return self.spec.url

    def key_url(self, key: str) -> str:
        return f"{self.url.rstrip('/')}/{key}" if key else self.url

    def child(self, rel: str) -> Store:
        raise NotImplementedError

    # reading
    def head(self, key: str) -> ObjectInfo | None:
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        return self.head(key) is not None

    def get(self, key: str) -> tuple[bytes, str | None] | None:
        """(content, etag), or None if absent."""
        raise NotImplementedError

    def read_bytes(self, key: str) -> bytes:
        got = self.get(key)
        if got is None:
            raise NotFound(f"{self.key_url(key)}: not found")
        return got[0]

    def read_text(self, key: str) -> str:
        return self.read_bytes(key).decode()

    def iter_chunks(self, key: str, chunk: int = HASH_CHUNK) -> Iterator[bytes]:
        raise NotImplementedError

    def sha256(self, key: str) -> str:
        h = hashlib.sha256()
        for chunk in self.iter_chunks(key):
            h.update(chunk)
        return h.hexdigest()

    def open_input(self, key: str):
        """A seekable binary file over the object (what ``pyarrow.parquet`` needs to read a footer)."""
        raise NotImplementedError

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under ``prefix`` (recursively), keys relative to the store root."""
        raise NotImplementedError

    def list_dirs(self, prefix: str = "") -> list[str]:
        """Names of the immediate "directories" under ``prefix``."""
        raise NotImplementedError

    # writing
    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None,
                  sha256: str | None = None) -> str | None:
        """Write a whole object atomically; return its new etag. Raises PreconditionFailed on a lost condition."""
        raise NotImplementedError

    def write_text(self, key: str, text: str) -> None:
        self.put_bytes(key, text.encode())

    def upload_file(self, local: str | Path, key: str, *, sha256: str | None = None,
                    progress: Progress | None = None) -> None:
        raise NotImplementedError

    def download_file(self, key: str, local: str | Path, *, progress: Progress | None = None) -> None:
        """Copy the object to ``local`` (temp + rename: a partial download never has the final name)."""
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def delete_prefix(self, prefix: str) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def staged_file(self, key: str) -> Iterator[StagedFile]:
        raise NotImplementedError
        yield  # pragma: no cover

    def copy_from(self, src: Store, src_key: str, key: str, *, sha256: str, local: Path | None = None) -> str:
        """Make ``key`` a copy of ``src``'s ``src_key``, whose content must have ``sha256`` (hex); return how
        ("linked", "server-side" or "copied"). Streamed through this machine here (hashed on the way, so a
        source whose bytes are not ``sha256`` is refused and nothing is written); stores override it with a
        hard link or a server-side copy where both sides allow one. ``local``: a local file that should hold
        those bytes, which a server-side copy may be checked against instead of reading it back
        (`S3Store.copy_from`); unused here."""
        with self.staged_file(key) as staged, open(staged.path, "wb") as f:
            h = hashlib.sha256()
            for chunk in src.iter_chunks(src_key):
                h.update(chunk)
                f.write(chunk)
            if h.hexdigest() != sha256:
                raise StorageError(f"{src.key_url(src_key)}: sha256 {h.hexdigest()} is not the {sha256} its "
                                   "manifest lists; rebuild without reusing it")
        return "copied"

    @contextlib.contextmanager
    def writer_lock(self, purpose: str, *, force: bool = False) -> Iterator[dict[str, Any]]:
        """Hold this root's exclusive writer lock for the block (yields the holder record: host, pid, id …);
        raise `VersionLocked` naming the holder."""
        raise NotImplementedError
        yield  # pragma: no cover

    def writer_holder(self) -> dict[str, Any] | None:
        """The current holder record of the writer lock, or None."""
        return None

    def still_writer(self, owner: dict[str, Any]) -> bool:
        """Does ``owner`` (a record `writer_lock` yielded) still hold the lock? A worker whose driver died or
        was superseded must not write: its run is over even if the worker has not noticed yet."""
        holder = self.writer_holder()
        return holder is not None and holder.get("id") == owner.get("id") and \
            not owner_dead(owner.get("host"), owner.get("pid"))

    def remove_dead_temps(self, owner: dict[str, Any] | None = None) -> int:
        """Delete temp files under the root whose owner process is dead; how many. ``owner``: the record
        `writer_lock` yielded, the lock still held (then also those unchanged for `TEMP_IDLE` s, whatever host)."""
        return 0

    def background_uploads(self, depth: int = 2) -> BackgroundUploads:
        """From now on, `staged_file` may hand finished files to a background upload (object stores) or
        fsync + rename (local stores), so the caller computes its next file meanwhile; at most ``depth`` files
        wait. ``finish()`` waits for every one and raises the first error: call it before recording anything
        that says the files exist. A store without background work returns an inactive batch."""
        return BackgroundUploads(None)

    def end_background_uploads(self) -> None:
        """Abandon a batch of `background_uploads` its caller did not `finish` (it is failing): no upload
        outlives the task that staged it. A no-op after `finish`, and for stores without background uploads."""
