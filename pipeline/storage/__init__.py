"""Where builds and published versions live: a local directory or an S3 prefix, behind one small interface.

``open_store(url)`` takes a plain path, a ``file://`` URL or ``s3://bucket/prefix`` and returns a
`Store` whose keys are ``/``-separated paths relative to that root. Everything that writes a build
(ledger, shards, manifest) or publishes / pulls a version goes through it, so the same invariants
hold on both backends:

- **Atomic appearance.** `Store.staged_file` hands out a local temporary file; only a complete file
  appears under its final name — by fsync + rename locally, by one PUT (or one completed multipart
  upload, which S3 also makes visible atomically) of the finished file on S3. A killed writer leaves
  at most a temporary file ``.<name>.<host>~<pid>.<random>.tmp`` beside the target; a later attempt
  removes it once its owner process is dead (a live process's temp file of this host is never touched),
  and a holder of the writer lock also once it has been idle for `TEMP_IDLE` seconds, whatever host wrote
  it (`LocalStore.remove_dead_temps`): no other host's process can be checked from here.
  A local folder whose files belong together (a validation report) is written into a temp folder of that
  pattern beside it and put in its place whole (`staged_dir`, `replace_dir`, `remove_dead_temp_dirs`).
- **Durable names.** Locally every rename or link that publishes a name is followed by an fsync of the
  directory holding it (`replace_durably`, `fsync_dir`; `make_dirs` for new directories), so a power loss
  cannot take back a file a ledger entry or manifest written after it records.
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

The modules: `errors`, `owners`, `secrets`, `files`, `base`, `uploads`, `local`, `s3_client`, `s3`, `open`.
"""

from bench_build.storage.base import (
    CHECKSUM_ENV,
    DEFAULT_REGION,
    MULTIPART_CHUNK,
    MULTIPART_THRESHOLD,
    OVERLAP_ENV,
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
from bench_build.storage.files import (
    HASH_CHUNK,
    atomic_write_text,
    atomic_write_with,
    cannot_create,
    current_umask,
    fsync_dir,
    fsync_replace,
    fsync_replace_named,
    in_the_way,
    make_dirs,
    mkstemp_in,
    refuse_non_directory,
    refuse_unwritable,
    remove_dead_temp_dirs,
    replace_dir,
    replace_durably,
    sha256_file,
    staged_dir,
)
from bench_build.storage.local import LocalStore
from bench_build.storage.open import is_remote, open_store
from bench_build.storage.owners import (
    LEASE_NAME,
    LEASE_TTL,
    LOCK_NAME,
    TEMP_IDLE,
    describe_holder,
    elsewhere_hint,
    glob_escape,
    host_name,
    owner_dead,
    owner_info,
    owner_tag,
    pid_alive,
    remove_dead_temps,
    temp_owner_dead,
)
from bench_build.storage.s3 import S3Store
from bench_build.storage.s3_client import denied_message, endpoint_from_env, s3_client
from bench_build.storage.secrets import redact, register_secret
from bench_build.storage.uploads import BackgroundUploads

__all__ = [
    "CHECKSUM_ENV", "DEFAULT_REGION", "HASH_CHUNK", "LEASE_NAME", "LEASE_TTL", "LOCK_NAME", "MULTIPART_CHUNK",
    "MULTIPART_THRESHOLD", "OVERLAP_ENV", "TEMP_IDLE", "UPLOAD_THREADS", "AccessDenied", "BackgroundUploads",
    "LocalStore", "NotFound", "ObjectInfo", "PreconditionFailed", "Progress", "S3Store", "StagedFile", "StorageError",
    "Store", "StoreSpec", "VersionLocked", "atomic_write_text", "atomic_write_with", "cannot_create", "check_key",
    "current_umask", "denied_message", "describe_holder", "elsewhere_hint", "endpoint_from_env", "fsync_dir",
    "fsync_replace", "fsync_replace_named", "glob_escape", "host_name", "in_the_way", "is_remote", "make_dirs",
    "mkstemp_in", "open_store", "overlap_uploads", "owner_dead", "owner_info", "owner_tag", "pid_alive", "redact",
    "refuse_non_directory", "refuse_unwritable", "register_secret", "remove_dead_temp_dirs", "remove_dead_temps",
    "replace_dir", "replace_durably", "s3_client", "sha256_file", "staged_dir", "temp_owner_dead",
    "upload_checksum_mode",
]
