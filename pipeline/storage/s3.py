"""`S3Store`: a version under an S3 prefix (lease object, conditional PUTs, sha256-checked uploads)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_build.storage.base import (
    CHECKSUM_ENV,
    MULTIPART_CHUNK,
    MULTIPART_THRESHOLD,
    SHA256_META,
    UPLOAD_THREADS,
    ObjectInfo,
    Progress,
    StagedFile,
    Store,
    StoreSpec,
    check_key,
    overlap_uploads,
    upload_checksum_mode,
)
from bench_build.storage.errors import AccessDenied, NotFound, PreconditionFailed, StorageError, VersionLocked
from bench_build.storage.files import HASH_CHUNK, fsync_replace, mkstemp_in, sha256_file
from bench_build.storage.owners import (
    LEASE_NAME,
    LEASE_TTL,
    describe_holder,
    owner_dead,
    owner_info,
    remove_dead_temps,
)
from bench_build.storage.s3_client import AUTH_CODES, DIGEST_CODES, denied_message, endpoint_from_env, s3_client
from bench_build.storage.secrets import redact
from bench_build.storage.uploads import BackgroundUploads

#: what an S3-compatible store without checksum headers or aws-chunked trailers answers an upload that sends them
CHECKSUM_UNSUPPORTED = {"NotImplemented", "InvalidArgument", "InvalidRequest", "UnsupportedOperation", "501"}
COPY_OBJECT_MAX = 5 << 30  # S3's largest CopyObject source: a larger object is copied in parts (UploadPartCopy)


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
        ≈ 2.4 s; `bench-build bench s3-build --isolate-server`, README "Publishing")."""
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
        key = check_key(key)
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
            if code in DIGEST_CODES:
                return StorageError(f"{where}: {op} refused ({code}): the bytes the store received do not match "
                                    "the sha256 sent with them (the local file changed, or was damaged in transit)")
            if code == "NoSuchBucket":
                return StorageError(f"{where}: bucket {self.bucket!r} does not exist")
            if code in AUTH_CODES:
                return AccessDenied(denied_message(where, op, code))
            hint = ""
            if op in ("upload", "write") and code in CHECKSUM_UNSUPPORTED and upload_checksum_mode() == "sha256":
                hint = (f"; if this store does not take S3 checksums (x-amz-checksum-sha256, or a multipart part's "
                        f"checksum trailer), set {CHECKSUM_ENV}=sigv4")
            return StorageError(redact(f"{where}: {op} failed ({code}): {err.get('Message', '')}".rstrip(": ")
                                       + hint))
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
        do not match it is refused, never stored. Each part of a multipart upload carries its own SHA-256 (botocore
        hashes the part; the store verifies it, and keeps the checksum of the parts' checksums that `copy_from`
        checks a copy by), signed with ``UNSIGNED-PAYLOAD`` as a single PUT is: one SHA-256 pass per byte, the one
        the payload's signature cost over plain http. With ``BENCH_BUILD_S3_CHECKSUM=sigv4`` parts go up without
        checksums, their payload hash signed. The calling thread's CPU time is added to ``upload_cpu_seconds``
        (a multipart upload's parts run on s3transfer's threads: not counted)."""
        sha256 = sha256 or sha256_file(local)
        cpu0 = time.thread_time()
        try:
            size = os.path.getsize(local)
            if size > MULTIPART_THRESHOLD:
                extra: dict[str, Any] = {"Metadata": {SHA256_META: sha256}}
                client = self.client
                if upload_checksum_mode() == "sha256":
                    extra["ChecksumAlgorithm"] = "SHA256"
                    client = self.put_client
                with self._calls(key, "upload"):
                    client.upload_file(str(local), self.bucket, self._k(key), ExtraArgs=extra, Callback=progress,
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
        fd, tmp = mkstemp_in(local.parent, local.name)
        os.close(fd)
        try:
            with self._calls(key, "download"):
                self.client.download_file(self.bucket, self._k(key), tmp, Callback=progress,
                                          Config=self._transfer_config())
            fsync_replace(tmp, local)
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

    def copy_from(self, src: Store, src_key: str, key: str, *, sha256: str, local: Path | None = None) -> str:
        """A server-side copy when ``src`` is on the same S3 endpoint (no byte goes up from this machine; one
        CopyObject up to `COPY_OBJECT_MAX`, a multipart copy above), else streamed and hashed (`Store.copy_from`).
        A source whose ``sha256`` metadata names other bytes is refused before anything is written. Then the
        copy's bytes themselves are checked against ``sha256``, by the first of these that the store offers:

        1. the SHA-256 the store computed over the bytes it copied, which CopyObject returns when asked
           (``ChecksumAlgorithm``; AWS S3 does; SeaweedFS 4.48 returns none);
        2. the copy's stored full-object SHA-256 checksum (HeadObject with ``ChecksumMode``): the one the store
           verified when those bytes were uploaded (a single-PUT upload of bench-build sends it by default),
           carried by a copy with the bytes (SeaweedFS does). Any write to the source key replaces it, so an object
           overwritten with other bytes but the old metadata is caught; the bytes are not re-read, so rot at
           rest is left to the store's own checks (SeaweedFS fails the copy of a chunk whose CRC is wrong);
        3. the copy's stored COMPOSITE SHA-256 (a multipart upload's: the SHA-256 of its parts' SHA-256 digests,
           each verified by the store on upload; bench-build's multipart uploads send them by default), when
           ``local`` is a file with the expected bytes (`publish` passes the version's own file): the file is
           read once, here, and must have ``sha256`` and, cut in `MULTIPART_CHUNK` parts (the layout of
           bench-build's uploads; the stored part count must be ``ceil(size / MULTIPART_CHUNK)``), that
           composite. Equal part digests mean equal parts, so this proves the copy's bytes are the file's: a
           local disk read instead of the copy coming down;
        4. else (no ``local``, another part layout, a composite that does not match, a
           ``BENCH_BUILD_S3_CHECKSUM=sigv4`` upload, an object another tool wrote) the copy is read back and
           hashed here: its bytes come down once.

        A copy that fails its check is deleted and a `StorageError` names both keys."""
        if not (isinstance(src, S3Store) and src.endpoint_url == self.endpoint_url):
            return super().copy_from(src, src_key, key, sha256=sha256)
        info = src.head(src_key)
        if info is None:
            raise NotFound(f"{src.key_url(src_key)}: not found")
        if info.sha256 not in (None, sha256):
            raise StorageError(f"{src.key_url(src_key)}: stored sha256 {info.sha256} is not the {sha256} its "
                               "manifest lists")
        source = {"Bucket": src.bucket, "Key": src._k(src_key)}
        meta = {"Metadata": {SHA256_META: sha256}, "MetadataDirective": "REPLACE"}
        with self._calls(key, "copy"):
            if info.size <= COPY_OBJECT_MAX:
                r = self.client.copy_object(CopySource=source, Bucket=self.bucket, Key=self._k(key),
                                            ChecksumAlgorithm="SHA256", **meta)
                got = full_object_sha256(r.get("CopyObjectResult") or {})
            else:
                self.client.copy(source, self.bucket, self._k(key), ExtraArgs=meta, Config=self._transfer_config())
                got = None
        if got is None:
            got, composite = self.stored_checksums(key)
            if got is None and composite is not None and local is not None and \
                    local_matches_composite(Path(local), info.size, sha256, composite):
                got = sha256
        if got is None:
            got = self.sha256(key)
        if got != sha256:
            with contextlib.suppress(StorageError):
                self.delete(key)
            raise StorageError(f"{self.key_url(key)}: the server-side copy of {src.key_url(src_key)} has sha256 "
                               f"{got}, not the {sha256} its manifest lists (the source's bytes changed after "
                               "it was written); the copy was deleted")
        return "server-side"

    def stored_checksums(self, key: str) -> tuple[str | None, tuple[str, int] | None]:
        """The SHA-256 checksums the store keeps for the object, from one HeadObject with ``ChecksumMode``: the
        full-object one (hex; the one it verified on upload), and a multipart upload's composite (hex of the
        SHA-256 of its parts' SHA-256 digests, and the part count); each None when the store keeps none."""
        with self._calls(key, "head"):
            r = self.client.head_object(Bucket=self.bucket, Key=self._k(key), ChecksumMode="ENABLED")
        return full_object_sha256(r), composite_sha256(r)

    def stored_sha256(self, key: str) -> str | None:
        """The object's full-object SHA-256 checksum as the store keeps it (hex; the one it verified on upload),
        or None when it keeps none (or only a checksum of a multipart upload's parts)."""
        return self.stored_checksums(key)[0]

    @contextlib.contextmanager
    def staged_file(self, key: str) -> Iterator[StagedFile]:
        """Write locally, then upload the finished file: never a partial object under the final key."""
        tag = hashlib.sha256(self.key_url(key).encode()).hexdigest()[:16]
        staging = Path(os.environ.get("BENCH_BUILD_STAGING") or Path(tempfile.gettempdir()) / "bench-build-staging")
        staging.mkdir(parents=True, exist_ok=True)
        remove_dead_temps(staging, f".{tag}.*.tmp")  # left by a killed earlier attempt of this object
        fd, name = mkstemp_in(staging, tag)
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

    def remove_dead_temps(self, owner: dict[str, Any] | None = None) -> int:
        return 0  # S3 has no temp objects: staged files live in the local staging directory


def full_object_sha256(fields: dict[str, Any]) -> str | None:
    """Hex of the ``ChecksumSHA256`` of an S3 response (base64 of the digest) when it is the whole object's: not a
    multipart upload's checksum of checksums (``ChecksumType`` ``COMPOSITE``, a ``-<parts>`` suffix); else None."""
    value = fields.get("ChecksumSHA256")
    if not value or "-" in value or fields.get("ChecksumType") not in (None, "FULL_OBJECT"):
        return None
    try:
        digest = base64.b64decode(value, validate=True)
    except ValueError:
        return None
    return digest.hex() if len(digest) == 32 else None


def composite_sha256(fields: dict[str, Any]) -> tuple[str, int] | None:
    """The composite SHA-256 of a multipart upload in an S3 response (``ChecksumSHA256`` ``<base64>-<parts>``,
    ``ChecksumType`` ``COMPOSITE``): hex of the SHA-256 of the parts' SHA-256 digests, and the part count; else
    None (SeaweedFS 4.48 forms it so, as AWS S3 does)."""
    value = fields.get("ChecksumSHA256") or ""
    b64, _, parts = value.rpartition("-")
    if not b64 or not parts.isdigit() or int(parts) < 1 or fields.get("ChecksumType") not in (None, "COMPOSITE"):
        return None
    try:
        digest = base64.b64decode(b64, validate=True)
    except ValueError:
        return None
    return (digest.hex(), int(parts)) if len(digest) == 32 else None


def sha256_and_composite(path: Path, part_size: int) -> tuple[str, str]:
    """One read of the file: its sha256 and the composite SHA-256 a multipart upload of it in ``part_size`` parts
    gets (both hex)."""
    whole, parts = hashlib.sha256(), []
    with open(path, "rb") as f:
        while True:
            part, left = hashlib.sha256(), part_size
            while left and (chunk := f.read(min(HASH_CHUNK, left))):
                whole.update(chunk)
                part.update(chunk)
                left -= len(chunk)
            if left == part_size:
                break
            parts.append(part.digest())
            if left:
                break
    return whole.hexdigest(), hashlib.sha256(b"".join(parts)).hexdigest()


def local_matches_composite(local: Path, size: int, sha256: str, composite: tuple[str, int]) -> bool:
    """Is ``local`` a file of ``size`` bytes with ``sha256`` whose composite SHA-256 in bench-build's multipart
    layout (`MULTIPART_CHUNK` parts) is ``composite`` (hex, part count)? False for another layout (a part count
    other than ``ceil(size / MULTIPART_CHUNK)``: not worth reading the file), other bytes, or no such file."""
    digest, parts = composite
    try:
        if local.stat().st_size != size or parts != -(-size // MULTIPART_CHUNK):
            return False
        whole, got = sha256_and_composite(local, MULTIPART_CHUNK)
    except OSError:
        return False
    return whole == sha256 and got == digest


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
