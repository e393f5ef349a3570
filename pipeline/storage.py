"""Where builds and published versions live: a local directory or an S3 prefix, behind one small interface.

``open_store(url)`` takes a plain path, a ``file://`` URL or ``s3://bucket/prefix`` and returns a
`Store` whose keys are ``/``-separated paths relative to that root. Everything that writes a build
(ledger, shards, manifest) or publishes / pulls a version goes through it, so the same invariants
hold on both backends:

- **Atomic appearance.** `Store.staged_file` hands out a local temporary file; only a complete file
  appears under its final name — by fsync + rename locally, by one PUT (or one completed multipart
  upload, which S3 also makes visible atomically) of the finished file on S3. A killed writer leaves
  at most a temporary file ``.<name>.<host>~<pid>.<random>.tmp`` beside the target; a later attempt
  removes it only once its owner process is dead (a live writer's temp file is never touched).
- **One writer per version.** `Store.writer_lock` is held by a build for its whole run: locally an
  ``flock`` on ``.bench-build.lock`` in the version directory (the kernel releases it when the holder
  dies, so a lock is never stale), on S3 a lease object ``_lease.json`` created with
  ``If-None-Match: *``, renewed with ``If-Match`` and taken over only once expired or its owner is
  known dead. A second writer gets `VersionLocked` naming the holder (host, pid, command, start).
- **Conditional writes.** `Store.put_bytes(if_absent=True)` creates an object only if it does not
  exist; ``if_match=etag`` replaces it only if it is still the version that was read. On S3 these are
  the ``If-None-Match: *`` / ``If-Match`` headers of PutObject (AWS S3 since 2024; SeaweedFS ≥ 3.80
  honours both, atomically, which the test-suite checks with a real server); locally ``os.link`` of a
  finished temp file (fails if the name exists) and an ``flock``-guarded compare-and-rename.
- **Checksums travel with objects.** Uploads record the file's sha256 as object metadata
  (``x-amz-meta-sha256``) so a resumed publish can skip files already present without re-reading them.
  A file up to `MULTIPART_THRESHOLD` goes up in one PutObject whose ``x-amz-checksum-sha256`` header is
  that same sha256 (signed with the request): the store hashes what it received and refuses the PUT
  (``BadDigest``) unless it matches, so the bytes are checked end to end against the hash the ledger and
  manifest record, and botocore need not hash the body a second time for the SigV4 signature
  (``UNSIGNED-PAYLOAD``). ``BENCH_BUILD_S3_CHECKSUM=sigv4`` restores the signed payload without the
  header, for a store that does not implement S3's checksum headers. Multipart uploads keep SigV4-signed parts.

Credentials come only from the standard AWS chain (environment, ``AWS_PROFILE`` / ``--profile`` and
``~/.aws/config`` + ``credentials``, instance roles); the endpoint from ``--endpoint-url`` or
``AWS_ENDPOINT_URL[_S3]`` (or the profile's ``endpoint_url``). They are never part of a URL, a
`StoreSpec` (which Ray ships to workers), a manifest or an error message: `redact` scrubs every
known secret from any text this module produces.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from manifests.manifest import sha256_file

HASH_CHUNK = 8 << 20
SHA256_META = "sha256"  # object metadata key (x-amz-meta-sha256) holding the hex sha256 of the content
MULTIPART_THRESHOLD = 64 << 20  # larger files go up in parts (KITTI-C shards are 100–150 MB)
MULTIPART_CHUNK = 16 << 20
DEFAULT_REGION = "us-east-1"  # S3-compatible stores ignore it, but botocore needs one to sign

Progress = Callable[[int], None]  # called with the number of bytes just transferred


class StorageError(RuntimeError):
    """A storage operation failed. The message names the object and never holds credentials."""


class NotFound(StorageError):
    pass


class PreconditionFailed(StorageError):
    """A conditional write lost: the object exists (if_absent) or changed since it was read (if_match)."""


class VersionLocked(StorageError):
    """Another process holds the version's writer lock (or lease); the message names it."""


LOCK_NAME = ".bench-build.lock"  # local writer lock (a dot file: never listed, published or read as data)
LEASE_NAME = "_lease.json"  # S3 writer lease, beside the version's data (never listed in a manifest)
UPLOAD_THREADS = 2  # PUTs of one task's files in flight at once (object stores; local flushes run one at a time)
OVERLAP_ENV = "BENCH_BUILD_OVERLAP_UPLOADS"  # "0": an s3 build uploads each file before computing the next
CHECKSUM_ENV = "BENCH_BUILD_S3_CHECKSUM"  # "sha256" (default) or "sigv4": how a single-PUT upload is verified
LEASE_TTL = 120.0  # seconds a lease lives without renewal; the holder renews every TTL / 4


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


# -- owners (who writes a temp file or holds a lock) ------------------------------------------------
def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname().split(".")[0]) or "host"


def owner_tag() -> str:
    """``<host>~<pid>`` of this process: part of every temp file name, so its liveness can be checked."""
    return f"{_host()}~{os.getpid()}"


def owner_info(purpose: str) -> dict[str, Any]:
    return {"host": _host(), "pid": os.getpid(), "purpose": purpose, "id": uuid.uuid4().hex,
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:200]}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_dead(host: Any, pid: Any) -> bool:
    """True only when the owner is known dead: a process of this host that no longer exists."""
    return host == _host() and isinstance(pid, int) and pid > 0 and not pid_alive(pid)


_TEMP_OWNER = re.compile(r"\.([A-Za-z0-9_-]+)~(\d+)\.[^.]+\.tmp$")


def temp_owner_dead(name: str) -> bool:
    """May the temp file ``name`` be removed? Only if its owner is dead (untagged legacy temps: yes)."""
    m = _TEMP_OWNER.search(name)
    if m is None:
        return True
    return owner_dead(m.group(1), int(m.group(2)))


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def remove_dead_temps(directory: Path, pattern: str = ".*.tmp", *, recursive: bool = False) -> int:
    """Delete temp files under ``directory`` whose owner process is dead; return how many."""
    if not directory.is_dir():
        return 0
    n = 0
    for p in (directory.rglob(pattern) if recursive else directory.glob(pattern)):
        if p.is_file() and temp_owner_dead(p.name):
            p.unlink(missing_ok=True)
            n += 1
    return n


def describe_holder(where: str, other: dict[str, Any]) -> str:
    return (f"{where} is being written by another {other.get('purpose', 'process')}: pid {other.get('pid', '?')} "
            f"on {other.get('host', '?')} since {other.get('started', '?')} ({other.get('command', '?')}); "
            "wait for it to finish, or stop it and run again")


# -- secrets ---------------------------------------------------------------------------------------
_SECRETS: set[str] = set()
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")


def _register_secret(value: str | None) -> None:
    if value and len(value) >= 4:
        _SECRETS.add(value)


def redact(text: str) -> str:
    """``text`` with every secret known to this process (env, resolved AWS credentials) replaced by ``***``."""
    for name in _SECRET_ENV:
        _register_secret(os.environ.get(name))
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


# -- helpers ---------------------------------------------------------------------------------------
def current_umask() -> int:
    """The process umask, read without changing it (``/proc/self/status`` on Linux; elsewhere a set-and-restore,
    which is not thread-safe, hence only the fallback)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mkstemp(directory: Path, name: str) -> tuple[int, str]:
    """A temp file ``.<name>.<host>~<pid>.<random>.tmp`` in ``directory`` (its owner is in its name).

    mkstemp creates it 0600; it is set to what ``open()`` would give (0666 & ~umask, 0644 by default) so the
    file renamed into place from it (shards, manifests, cards, pulled files) is readable by the group."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.{owner_tag()}.", suffix=".tmp", dir=directory)
    os.fchmod(fd, 0o666 & ~current_umask())
    return fd, tmp


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same dir, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _mkstemp(path.parent, path.name)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _fsync_replace(tmp: str | Path, path: Path) -> None:
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_replace_named(tmp: Path, path: Path) -> None:
    """`_fsync_replace` on a background thread: a failure (disk full, I/O error) names the file it was for, as the
    task's error message must (`fsync` itself names no file)."""
    try:
        _fsync_replace(tmp, path)
    except OSError as e:
        e.bench_build_key = str(path)  # type: ignore[attr-defined]
        raise


def _check_key(key: str) -> str:
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

    def open(self) -> Store:
        return open_store(self.url, endpoint_url=self.endpoint_url, profile=self.profile)


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

    def copy_from(self, src: Store, src_key: str, key: str, *, sha256: str) -> str:
        """Make ``key`` a copy of ``src``'s ``src_key``, whose content must have ``sha256`` (hex); return how
        ("linked", "server-side" or "copied"). Streamed through this machine here (hashed on the way, so a
        source whose bytes are not ``sha256`` is refused and nothing is written); stores override it with a
        hard link or a server-side copy where both sides allow one."""
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

    def remove_dead_temps(self) -> int:
        """Delete temp files under the root whose owner process is dead; how many."""
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


class BackgroundUploads:
    """Uploads running on ``threads`` background threads, bounded (staging disk stays at ``depth`` files).

    The owner must end every batch with `finish` (success: wait, raise the first failure) or `abandon`
    (its task failed: drop what has not started, wait for what has), so no upload outlives its task."""

    def __init__(self, depth: int | None, threads: int = 1) -> None:
        self.depth, self.threads = depth, threads
        self._pool = None
        self._slots = threading.BoundedSemaphore(depth) if depth else None
        self._jobs: list[tuple[Any, Path]] = []  # (future, staged file)
        self._closed = False

    @property
    def active(self) -> bool:
        """Does `staged_file` hand files over? Not after `finish` / `abandon`: a later file uploads in place,
        never to a batch nobody waits for."""
        return self.depth is not None and not self._closed

    def submit(self, upload: Callable[[], None], staged: Path) -> None:
        """Run ``upload`` in the background, then delete ``staged``; blocks while ``depth`` are waiting."""
        from concurrent.futures import ThreadPoolExecutor

        assert self._slots is not None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="bench-build-upload")
        self._slots.acquire()

        def job() -> None:
            try:
                upload()
            finally:
                staged.unlink(missing_ok=True)
                self._slots.release()

        try:
            self._jobs.append((self._pool.submit(job), staged))
        except BaseException:
            self._slots.release()
            raise

    def finish(self) -> None:
        """Wait for every upload; raise the first failure (the others have finished or failed too)."""
        try:
            for f, _ in self._jobs:
                f.result()
        finally:
            self._close()

    def abandon(self) -> None:
        """Cancel uploads not yet started (deleting their staged files), wait for the running one, ignore
        failures: the caller is already failing, and an object is either whole or absent."""
        for f, staged in self._jobs:
            if f.cancel():
                staged.unlink(missing_ok=True)
                assert self._slots is not None
                self._slots.release()
        self._close()

    def _close(self) -> None:
        self._closed = True
        self._jobs = []
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


# -- local -----------------------------------------------------------------------------------------
class LocalStore(Store):
    is_local = True

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.spec = StoreSpec(str(self.root))
        self._uploads: BackgroundUploads | None = None

    def background_uploads(self, depth: int = 2) -> BackgroundUploads:
        """A finished file's fsync and rename run on a background thread while the caller computes the next
        file (its size and sha256 are taken first, by the caller): the worker's core is not idle while the disk
        flushes. Until ``finish()`` a staged file may still be under its temp name; it never has its final name
        before its bytes are on disk. ``BENCH_BUILD_OVERLAP_UPLOADS=0`` commits in place instead."""
        self._uploads = BackgroundUploads(depth if overlap_uploads() else None)
        return self._uploads

    def end_background_uploads(self) -> None:
        if self._uploads is not None:
            self._uploads.abandon()

    def path(self, key: str) -> Path:
        return self.root / _check_key(key) if key else self.root

    def key_url(self, key: str) -> str:
        return str(self.path(key))

    def child(self, rel: str) -> LocalStore:
        return LocalStore(self.path(rel))

    def refuse_non_directory(self, what: str) -> None:
        """StorageError (a refusal: nothing was written) unless the root is a directory or can be made one: the
        nearest existing one of it and its ancestors must be a directory, not a file or a broken link. Checked
        before a command starts work, so the mkdir deep inside it cannot fail half-way with NotADirectoryError."""
        for p in (self.root, *self.root.absolute().parents):
            if os.path.lexists(p):
                if p.is_dir():
                    return
                kind = "a broken link" if p.is_symlink() else "a file"
                raise StorageError(f"{what} {self.root}: {p} is {kind}, not a directory; give a directory (or a "
                                   "path where one can be created)")

    @staticmethod
    def _etag(st: os.stat_result) -> str:
        # a rename gives a new inode, so any atomic replacement changes the etag
        return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"

    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self.path(key).stat()
        except FileNotFoundError:
            return None
        if not os.path.isfile(self.path(key)):
            return None
        return ObjectInfo(key, st.st_size, self._etag(st))

    def get(self, key: str) -> tuple[bytes, str | None] | None:
        p = self.path(key)
        try:
            with open(p, "rb") as f:
                etag = self._etag(os.fstat(f.fileno()))
                return f.read(), etag
        except (FileNotFoundError, IsADirectoryError):
            return None

    def iter_chunks(self, key: str, chunk: int = HASH_CHUNK) -> Iterator[bytes]:
        try:
            f = open(self.path(key), "rb")
        except FileNotFoundError:
            raise NotFound(f"{self.path(key)}: not found") from None
        with f:
            while data := f.read(chunk):
                yield data

    def sha256(self, key: str) -> str:
        return sha256_file(self.path(key))

    def open_input(self, key: str):
        return open(self.path(key), "rb")

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        base = self.path(prefix)
        if base.is_file():
            yield ObjectInfo(prefix, base.stat().st_size)
            return
        if not base.is_dir():
            return
        for p in sorted(base.rglob("*")):
            if p.is_file() and not p.name.startswith("."):  # temp and lock files are not objects
                yield ObjectInfo(p.relative_to(self.root).as_posix(), p.stat().st_size)

    def list_dirs(self, prefix: str = "") -> list[str]:
        base = self.path(prefix)
        return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")) \
            if base.is_dir() else []

    def _temp(self, path: Path) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _mkstemp(path.parent, path.name)
        os.close(fd)
        return tmp

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None,
                  sha256: str | None = None) -> str | None:
        path = self.path(key)
        tmp = self._temp(path)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if if_absent:
                try:
                    os.link(tmp, path)  # atomic create-if-absent of a complete file
                except FileExistsError:
                    raise PreconditionFailed(f"{path}: already exists") from None
            elif if_match is not None:
                with self._lock(path):
                    cur = self.head(key)
                    if cur is None or cur.etag != if_match:
                        raise PreconditionFailed(f"{path}: changed since it was read")
                    os.replace(tmp, path)
            else:
                os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return self._etag(path.stat())

    @contextlib.contextmanager
    def _lock(self, path: Path) -> Iterator[None]:
        lock = path.parent / f".{path.name}.lock"
        with open(lock, "a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def write_text(self, key: str, text: str) -> None:
        atomic_write_text(self.path(key), text)

    def _copy(self, src: Path, dst: Path, progress: Progress | None) -> None:
        tmp = self._temp(dst)
        try:
            with open(src, "rb") as fi, open(tmp, "wb") as fo:
                while data := fi.read(HASH_CHUNK):
                    fo.write(data)
                    if progress:
                        progress(len(data))
            _fsync_replace(tmp, dst)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def upload_file(self, local: str | Path, key: str, *, sha256: str | None = None,
                    progress: Progress | None = None) -> None:
        self._copy(Path(local), self.path(key), progress)

    def copy_from(self, src: Store, src_key: str, key: str, *, sha256: str) -> str:
        """A hard link when both are local (same filesystem): no bytes written. Published and built files are
        never modified in place (every writer replaces a file by rename), so a link shares bytes, not fate:
        deleting the other version's directory leaves this one whole. Else (another filesystem, S3) a copy."""
        if not isinstance(src, LocalStore):
            return super().copy_from(src, src_key, key, sha256=sha256)
        source, dst = src.path(src_key), self.path(key)
        if sha256_file(source) != sha256:
            raise StorageError(f"{source}: sha256 is not the {sha256} its manifest lists; rebuild without "
                               "reusing it")
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(self._temp(dst))  # a dead-temp-style name (owner tagged), freed for the link to take it
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:  # another filesystem, or links not allowed: copy
            tmp.unlink(missing_ok=True)
            return super().copy_from(src, src_key, key, sha256=sha256)
        try:
            os.replace(tmp, dst)
        finally:
            tmp.unlink(missing_ok=True)
        return "linked"

    def download_file(self, key: str, local: str | Path, *, progress: Progress | None = None) -> None:
        src = self.path(key)
        if not src.is_file():
            raise NotFound(f"{src}: not found")
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        self._copy(src, local, progress)

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> None:
        p = self.path(prefix)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)

    @contextlib.contextmanager
    def staged_file(self, key: str) -> Iterator[StagedFile]:
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # left by a killed earlier attempt; a live writer's temp (another run) is never touched
        remove_dead_temps(path.parent, f".{glob_escape(path.name)}.*.tmp")
        tmp = Path(self._temp(path))
        staged = StagedFile(key, tmp)
        handed_over = False
        try:
            yield staged
            staged.size, staged.sha256 = tmp.stat().st_size, sha256_file(tmp)
            if self._uploads is not None and self._uploads.active:  # fsync + rename while the next file is computed
                self._uploads.submit(lambda: _fsync_replace_named(tmp, path), tmp)
                handed_over = True
            else:
                _fsync_replace(tmp, path)
        finally:
            if not handed_over:
                tmp.unlink(missing_ok=True)
        staged.path = path


    @contextlib.contextmanager
    def writer_lock(self, purpose: str, *, force: bool = False) -> Iterator[dict[str, Any]]:
        """``flock`` on ``<root>/.bench-build.lock``: released by the kernel when the holder dies (never stale).

        The lock file is never deleted (deleting it would let a second writer lock a new inode while
        the first still holds the old one); it holds the holder's pid/host/command while locked. ``force`` has
        no meaning here: the kernel already frees the lock of a dead holder."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes (PEP 446)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other: dict[str, Any] = {}
                for _ in range(20):  # the holder writes its name just after locking: give it a moment
                    with contextlib.suppress(OSError, ValueError):
                        other = json.loads(path.read_text() or "{}")
                    if other:
                        break
                    time.sleep(0.05)
                raise VersionLocked(describe_holder(str(self.root), other)) from None
            me = owner_info(purpose)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode(), 0)
            try:
                yield me
            finally:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def writer_holder(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.root / LOCK_NAME).read_text() or "null")
        except (OSError, ValueError):
            return None

    def remove_dead_temps(self) -> int:
        """Delete every temp file under the root whose owner is dead (call while holding the writer lock)."""
        return remove_dead_temps(self.root, ".*.tmp", recursive=True)


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
_DIGEST_CODES = {"BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch", "XAmzContentChecksumMismatch"}
_AUTH_CODES = {"SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "InvalidToken", "ExpiredToken",
               "InvalidClientTokenId", "UnrecognizedClientException", "AuthorizationHeaderMalformed", "403"}


def denied_message(where: str, op: str, code: str) -> str:
    """The one line every reader and writer gives when the endpoint rejects the AWS chain's credentials."""
    return (f"{where}: {op} denied ({code}): the endpoint rejected the credentials of the AWS chain "
            "(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or --profile, ~/.aws/credentials); "
            "check them and the endpoint (--endpoint-url / AWS_ENDPOINT_URL)")


def endpoint_from_env() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


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
        except botocore.exceptions.ProfileNotFound as e:
            raise StorageError(f"AWS profile not found: {e}") from None
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
        client = session.client("s3", endpoint_url=endpoint_url, region_name=session.region_name or DEFAULT_REGION,
                                config=config)
        creds = session.get_credentials()
        if creds is not None:
            frozen = creds.get_frozen_credentials()
            _register_secret(frozen.secret_key)
            _register_secret(frozen.token)
        _CLIENTS[key] = client
        return client


class S3Store(Store):
    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 profile: str | None = None) -> None:
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.endpoint_url, self.profile = endpoint_url, profile
        url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.spec = StoreSpec(url, endpoint_url, profile)
        self._client = None
        self._put_client = None
        self._client_lock = threading.Lock()
        self._uploads: BackgroundUploads | None = None
        self.upload_cpu_seconds = 0.0  # CPU time of the threads that ran this store's uploads (see upload_file)

    def background_uploads(self, depth: int = 2) -> BackgroundUploads:
        """As `Store.background_uploads`, with up to `UPLOAD_THREADS` PUTs in flight at once (never more than
        ``depth``, so the staging disk bound is unchanged): one PUT at a time left the worker idle ≈ 5 of a
        28 s demo build, waiting on a store whose request latency, not bandwidth, was the limit (two at once:
        ≈ 2.4 s; `bench-build bench --s3-build --isolate-server`, README "Publishing")."""
        self._uploads = BackgroundUploads(depth if overlap_uploads() else None, threads=min(depth, UPLOAD_THREADS))
        return self._uploads

    def end_background_uploads(self) -> None:
        if self._uploads is not None:
            self._uploads.abandon()

    @property
    def client(self):
        with self._client_lock:  # the background upload thread may ask at the same time
            if self._client is None:
                self._client = s3_client(self.endpoint_url, self.profile)
        return self._client

    @property
    def put_client(self):
        """The client of single-PUT uploads that carry ``x-amz-checksum-sha256``: no payload hash in the signature."""
        with self._client_lock:
            if self._put_client is None:
                self._put_client = s3_client(self.endpoint_url, self.profile, unsigned_payload=True)
        return self._put_client

    def _k(self, key: str) -> str:
        key = _check_key(key)
        return f"{self.prefix}/{key}" if self.prefix and key else (key or self.prefix)

    def child(self, rel: str) -> S3Store:
        return S3Store(self.bucket, self._k(rel), endpoint_url=self.endpoint_url, profile=self.profile)

    def _error(self, e: BaseException, key: str, op: str) -> StorageError:
        """Map a botocore/boto3 exception to a StorageError with a clear, secret-free message."""
        import botocore.exceptions as bx

        where = self.key_url(key)
        cause: BaseException | None = e
        while cause is not None and not isinstance(cause, bx.ClientError | bx.BotoCoreError):
            cause = cause.__cause__ or cause.__context__
        if isinstance(cause, bx.ClientError):
            err = cause.response.get("Error", {})
            code = str(err.get("Code") or cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?"))
            if code in ("404", "NoSuchKey", "NotFound"):
                return NotFound(f"{where}: not found")
            if code in ("412", "PreconditionFailed", "ConditionalRequestConflict", "409"):
                return PreconditionFailed(f"{where}: conditional {op} refused ({code})")
            if code in _DIGEST_CODES:
                return StorageError(f"{where}: {op} refused ({code}): the bytes the store received do not match "
                                    "the sha256 sent with them (the local file changed, or was damaged in transit)")
            if code == "NoSuchBucket":
                return StorageError(f"{where}: bucket {self.bucket!r} does not exist")
            if code in _AUTH_CODES:
                return StorageError(denied_message(where, op, code))
            return StorageError(redact(f"{where}: {op} failed ({code}): {err.get('Message', '')}".rstrip(": ")))
        if isinstance(cause, bx.NoCredentialsError | bx.PartialCredentialsError):
            return StorageError(f"{where}: no usable AWS credentials (set AWS_ACCESS_KEY_ID and "
                                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE / --profile)")
        if isinstance(cause, bx.EndpointConnectionError | bx.ConnectionError):
            endpoint = self.endpoint_url or endpoint_from_env() or "the AWS S3 endpoint"
            return StorageError(f"{where}: cannot reach {endpoint} ({type(cause).__name__})")
        return StorageError(redact(f"{where}: {op} failed: {type(e).__name__}: {e}"))

    @contextlib.contextmanager
    def _calls(self, key: str, op: str) -> Iterator[None]:
        try:
            yield
        except StorageError:
            raise
        except Exception as e:
            import botocore.exceptions as bx
            from boto3.exceptions import Boto3Error

            if isinstance(e, bx.ClientError | bx.BotoCoreError | Boto3Error) or \
                    type(e).__module__.startswith("s3transfer"):
                raise self._error(e, key, op) from None
            raise

    def head(self, key: str) -> ObjectInfo | None:
        try:
            with self._calls(key, "head"):
                r = self.client.head_object(Bucket=self.bucket, Key=self._k(key))
        except NotFound:
            return None
        return ObjectInfo(key, r["ContentLength"], r.get("ETag"), (r.get("Metadata") or {}).get(SHA256_META))

    def get(self, key: str) -> tuple[bytes, str | None] | None:
        try:
            with self._calls(key, "get"):
                r = self.client.get_object(Bucket=self.bucket, Key=self._k(key))
                return r["Body"].read(), r.get("ETag")
        except NotFound:
            return None

    def iter_chunks(self, key: str, chunk: int = HASH_CHUNK) -> Iterator[bytes]:
        with self._calls(key, "get"):
            body = self.client.get_object(Bucket=self.bucket, Key=self._k(key))["Body"]
            yield from body.iter_chunks(chunk)

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object."""
        if end <= start:
            return b""
        with self._calls(key, "get"):
            r = self.client.get_object(Bucket=self.bucket, Key=self._k(key), Range=f"bytes={start}-{end - 1}")
            return r["Body"].read()

    def open_input(self, key: str):
        info = self.head(key)
        if info is None:
            raise NotFound(f"{self.key_url(key)}: not found")
        return io.BufferedReader(_RangeReader(self, key, info.size), buffer_size=1 << 20)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        base = self._k(prefix)
        base = f"{base}/" if base and not base.endswith("/") else base
        strip = f"{self.prefix}/" if self.prefix else ""
        with self._calls(prefix, "list"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base):
                for o in page.get("Contents", []):
                    yield ObjectInfo(o["Key"][len(strip):], o["Size"], o.get("ETag"))

    def list_dirs(self, prefix: str = "") -> list[str]:
        base = self._k(prefix)
        base = f"{base}/" if base else ""
        out = []
        with self._calls(prefix, "list"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=base,
                                                                             Delimiter="/"):
                out += [p["Prefix"][len(base):].rstrip("/") for p in page.get("CommonPrefixes", [])]
        return sorted(out)

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None,
                  sha256: str | None = None) -> str | None:
        kw: dict[str, Any] = {"Metadata": {SHA256_META: sha256 or hashlib.sha256(data).hexdigest()}}
        if if_absent:
            kw["IfNoneMatch"] = "*"
        if if_match is not None:
            kw["IfMatch"] = if_match
        with self._calls(key, "write"):
            return self.client.put_object(Bucket=self.bucket, Key=self._k(key), Body=data, **kw).get("ETag")

    def _transfer_config(self):
        from boto3.s3.transfer import TransferConfig

        return TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=MULTIPART_CHUNK,
                              max_concurrency=4)

    def upload_file(self, local: str | Path, key: str, *, sha256: str | None = None,
                    progress: Progress | None = None) -> None:
        """One PUT, or a multipart upload above `MULTIPART_THRESHOLD`: either way the object appears only when
        complete. ``sha256`` (the file's, hex; computed if not given) is stored as metadata and, on a single PUT,
        sent as the ``x-amz-checksum-sha256`` the store verifies (see the module docstring): a file whose bytes
        do not match it is refused, never stored. The calling thread's CPU time is added to
        ``upload_cpu_seconds`` (a multipart upload's parts run on s3transfer's threads: not counted)."""
        sha256 = sha256 or sha256_file(local)
        cpu0 = time.thread_time()
        try:
            size = os.path.getsize(local)
            if size > MULTIPART_THRESHOLD:
                with self._calls(key, "upload"):
                    self.client.upload_file(str(local), self.bucket, self._k(key),
                                            ExtraArgs={"Metadata": {SHA256_META: sha256}}, Callback=progress,
                                            Config=self._transfer_config())
                return
            # one PutObject straight from the file: no s3transfer machinery (a thread pool per call) for a
            # file that goes up in one request anyway; botocore rewinds the file itself on a retry
            kw: dict[str, Any] = {"Metadata": {SHA256_META: sha256}}
            client = self.client
            if upload_checksum_mode() == "sha256":
                kw["ChecksumSHA256"] = base64.b64encode(bytes.fromhex(sha256)).decode()
                client = self.put_client
            with open(local, "rb") as body, self._calls(key, "upload"):
                client.put_object(Bucket=self.bucket, Key=self._k(key), Body=body, **kw)
            if progress is not None:
                progress(size)
        finally:
            cpu = time.thread_time() - cpu0
            with self._client_lock:
                self.upload_cpu_seconds += cpu

    def download_file(self, key: str, local: str | Path, *, progress: Progress | None = None) -> None:
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _mkstemp(local.parent, local.name)
        os.close(fd)
        try:
            with self._calls(key, "download"):
                self.client.download_file(self.bucket, self._k(key), tmp, Callback=progress,
                                          Config=self._transfer_config())
            _fsync_replace(tmp, local)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def delete(self, key: str) -> None:
        with self._calls(key, "delete"):
            self.client.delete_object(Bucket=self.bucket, Key=self._k(key))

    def delete_prefix(self, prefix: str) -> None:
        keys = [o.key for o in self.list(prefix)]
        for i in range(0, len(keys), 1000):
            with self._calls(prefix, "delete"):
                self.client.delete_objects(Bucket=self.bucket, Delete={
                    "Objects": [{"Key": self._k(k)} for k in keys[i:i + 1000]], "Quiet": True})

    def copy_from(self, src: Store, src_key: str, key: str, *, sha256: str) -> str:
        """A server-side copy when ``src`` is on the same S3 endpoint (no byte crosses this machine; multipart
        copy above 5 GB), else streamed. The source is checked first against ``sha256`` by its stored checksum
        metadata (set by every bench-build upload, which the store verified on PUT) and size; an object
        without that metadata is streamed and hashed instead."""
        if not (isinstance(src, S3Store) and src.endpoint_url == self.endpoint_url):
            return super().copy_from(src, src_key, key, sha256=sha256)
        info = src.head(src_key)
        if info is None:
            raise NotFound(f"{src.key_url(src_key)}: not found")
        if info.sha256 is None:
            return super().copy_from(src, src_key, key, sha256=sha256)
        if info.sha256 != sha256:
            raise StorageError(f"{src.key_url(src_key)}: stored sha256 {info.sha256} is not the {sha256} its "
                               "manifest lists")
        with self._calls(key, "copy"):
            self.client.copy({"Bucket": src.bucket, "Key": src._k(src_key)}, self.bucket, self._k(key),
                             ExtraArgs={"Metadata": {SHA256_META: sha256}, "MetadataDirective": "REPLACE"},
                             Config=self._transfer_config())
        return "server-side"

    @contextlib.contextmanager
    def staged_file(self, key: str) -> Iterator[StagedFile]:
        """Write locally, then upload the finished file: never a partial object under the final key."""
        tag = hashlib.sha256(self.key_url(key).encode()).hexdigest()[:16]
        staging = Path(os.environ.get("BENCH_BUILD_STAGING") or Path(tempfile.gettempdir()) / "bench-build-staging")
        staging.mkdir(parents=True, exist_ok=True)
        remove_dead_temps(staging, f".{tag}.*.tmp")  # left by a killed earlier attempt of this object
        fd, name = _mkstemp(staging, tag)
        os.close(fd)
        tmp = Path(name)
        staged = StagedFile(key, tmp)
        handed_over = False
        try:
            yield staged
            staged.size, staged.sha256 = tmp.stat().st_size, sha256_file(tmp)
            if self._uploads is not None and self._uploads.active:  # overlap: the next file is computed meanwhile
                digest = staged.sha256
                self._uploads.submit(lambda: self.upload_file(tmp, key, sha256=digest), tmp)
                handed_over = True
            else:
                self.upload_file(tmp, key, sha256=staged.sha256)
        finally:
            if not handed_over:
                tmp.unlink(missing_ok=True)


    @contextlib.contextmanager
    def writer_lock(self, purpose: str, *, ttl: float = LEASE_TTL, force: bool = False) -> Iterator[dict[str, Any]]:
        """A lease ``_lease.json``: created only if absent, renewed by compare-and-swap every ``ttl / 4``,
        taken over only when expired (or its holder is a dead process of this host, or ``force``: the
        user says the holder is dead), deleted at the end."""
        me = owner_info(purpose)

        def body() -> bytes:
            return json.dumps({**me, "expires": time.time() + ttl}).encode()

        etag: str | None = None
        for _ in range(10):
            try:
                etag = self.put_bytes(LEASE_NAME, body(), if_absent=True)
                break
            except PreconditionFailed:
                pass
            cur = self.get(LEASE_NAME)
            if cur is None:
                continue  # released meanwhile
            try:
                other = json.loads(cur[0])
            except ValueError:
                other = {}
            expired = not isinstance(other.get("expires"), int | float) or other["expires"] < time.time()
            if not (force or expired or owner_dead(other.get("host"), other.get("pid"))):
                raise VersionLocked(describe_holder(self.url, other) + f" (lease {self.key_url(LEASE_NAME)})")
            try:
                etag = self.put_bytes(LEASE_NAME, body(), if_match=cur[1])  # take over a dead holder's lease
                break
            except PreconditionFailed:
                continue
        if etag is None:
            raise VersionLocked(f"{self.url}: could not take the writer lease (too much contention)")
        stop = threading.Event()
        state = {"etag": etag}

        def renew() -> None:
            while not stop.wait(ttl / 4):
                try:
                    state["etag"] = self.put_bytes(LEASE_NAME, body(), if_match=state["etag"])
                except PreconditionFailed:
                    print(f"[bench-build] warning: lost the writer lease {self.key_url(LEASE_NAME)}",
                          file=sys.stderr, flush=True)
                    return
                except Exception as e:  # a network blip: try again at the next period
                    print(f"[bench-build] warning: could not renew the lease: {redact(str(e))}",
                          file=sys.stderr, flush=True)

        thread = threading.Thread(target=renew, name="lease-renew", daemon=True)
        thread.start()
        try:
            yield me
        finally:
            stop.set()
            thread.join(timeout=5)
            with contextlib.suppress(Exception):
                cur = self.get(LEASE_NAME)
                if cur is not None and json.loads(cur[0]).get("id") == me["id"]:
                    self.delete(LEASE_NAME)

    def writer_holder(self) -> dict[str, Any] | None:
        try:
            got = self.get(LEASE_NAME)
            return json.loads(got[0]) if got is not None else None
        except (StorageError, ValueError):
            return None

    def remove_dead_temps(self) -> int:
        return 0  # S3 has no temp objects: staged files live in the local staging directory


class _RangeReader(io.RawIOBase):
    """A seekable read-only file over an S3 object, one ranged GET per (buffered) read."""

    def __init__(self, store: S3Store, key: str, size: int) -> None:
        self.store, self.key, self.size, self.pos = store, key, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, b) -> int:
        end = min(self.size, self.pos + len(b))
        data = self.store.read_range(self.key, self.pos, end)
        b[: len(data)] = data
        self.pos += len(data)
        return len(data)


# -- opening -----------------------------------------------------------------------------------------
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def is_remote(url: str | Path) -> bool:
    return isinstance(url, str) and url.lower().startswith("s3://")


def open_store(url: str | Path | Store, *, endpoint_url: str | None = None, profile: str | None = None) -> Store:
    """A store for a plain path, ``file:///abs/path`` or ``s3://bucket[/prefix]``."""
    if isinstance(url, Store):
        return url
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
