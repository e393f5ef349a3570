"""Publishing built versions to object storage, listing, pulling and verifying them remotely.

Layout of a publication root (``--to s3://bench/datasets``; a path or file:// works the same)::

    <root>/<dataset>/latest                        {"version": "1.0.0", "manifest_sha256": "..."}
    <root>/<dataset>/<version>/manifest.json       the build's manifest, byte for byte
    <root>/<dataset>/<version>/README.md           the dataset card
    <root>/<dataset>/<version>/clean/…, data/…     every shard the manifest lists (never ``_ledger/``)
    <root>/<dataset>/<version>/renders/…           the card's pictures the manifest lists (``renders``)

Protocol of `publish_version` (why each step is safe to kill and re-run, and why two concurrent
publishes never mix):

0. A local version holding a symbolic link anywhere is refused, naming the link, before anything is
   written: publishing follows no link out of the version (a link to ``~/.aws/credentials`` under
   ``renders/`` would otherwise be uploaded as a picture).
1. Take the version's publish lease ``<dataset>/_publishing/<version>/_lease.json`` — *outside* the
   version's prefix, created only if absent, renewed while the publish runs (see
   `Store.writer_lock`). Another live publish of this version is refused, naming its holder; a dead
   one's lease (its process gone on this host, or expired after 2 min) is taken over, ``--takeover``
   takes it over at once.
2. Only then check ``<version>/manifest.json``: if it exists the version is published and immutable:
   refused, having written nothing. (Checked under the lease, a publish that lost the race can never
   write into a committed version.)
3. Upload every shard (and listed render) not already there with the same size and sha256 (recorded as object metadata,
   so the check is a HEAD). A file that another committed version of the dataset lists with the same sha256 and
   size (a partition a recipe change did not touch: `run --reuse`, `build.reuse`) is copied from there on the
   store (S3 CopyObject: no byte uploaded; a hard link for a local ``--to``), and the copy's bytes checked against
   the manifest's sha256 by the store's checksum (a multipart upload's: against the local file's) or by reading it
   back (`S3Store.copy_from`); a copy that fails is
   deleted and the file uploaded instead, with a note.
   Each version stays self-contained: its prefix holds every file it lists, so reads, `verify` and `pull`
   never need another version, and deleting an old version never breaks a newer one. Otherwise: local hash
   first (a file that no longer matches its manifest is never
   uploaded), then one PUT — multipart above 64 MB — that makes the object appear whole.
4. Delete anything else under the (uncommitted) version prefix — leftovers of an interrupted publish
   of other content — so the committed prefix holds exactly the manifest's files plus the card.
5. Check every listed shard and render is present with the right size and sha256, upload the dataset card, then
   commit with ``manifest.json`` written *only if absent* (``If-None-Match: *``). A reader sees either
   no version or a complete one: the manifest never lists a shard that is not there.
6. Release the lease, then move ``<dataset>/latest`` (``If-Match: <etag>``, retried on contention); it
   never moves to an older version than the one it names.
"""

from bench_build.publish.common import (
    LATEST,
    PublishConflict,
    PublishError,
    PublishIncomplete,
    PullError,
    TransferReport,
    VersionExists,
    content_identity,
    version_key,
)
from bench_build.publish.pull import pull_version
from bench_build.publish.push import publish_version, refuse_symlinks
from bench_build.publish.versions import list_versions, verify_remote

__all__ = [
    "LATEST", "PublishConflict", "PublishError", "PublishIncomplete", "PullError", "TransferReport", "VersionExists",
    "content_identity", "list_versions", "publish_version", "pull_version", "refuse_symlinks", "verify_remote",
    "version_key",
]
