"""`publish`: upload a verified build, commit its manifest, advance ``latest`` (each step safe to kill and re-run)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_build.build.progress import TransferProgress
from bench_build.manifests.manifest import MANIFEST_NAME, ManifestError, check_manifest, parse_manifest, sha256_file
from bench_build.publish.common import (
    CARD,
    DEFAULT_JOBS,
    LATEST,
    PUBLISHED,
    PUBLISHING,
    PublishConflict,
    PublishError,
    PublishIncomplete,
    TransferReport,
    VersionExists,
    listed_renders,
    parallel,
    read_stored_manifest,
    remote_matches,
    version_key,
)
from bench_build.publish.versions import latest_version
from bench_build.storage import LocalStore, PreconditionFailed, StorageError, Store, VersionLocked, open_store


# -- publish ---------------------------------------------------------------------------------------
def publish_version(version_dir: str | Path, to: str, *, endpoint_url: str | None = None, profile: str | None = None,
                    jobs: int = DEFAULT_JOBS, progress: bool = True, takeover: bool = False,
                    update_latest: bool = True) -> TransferReport:
    """Publish a built version to ``<to>/<dataset>/<version>/`` (see the module docstring for the protocol)."""
    t0 = time.time()
    src = open_store(version_dir, endpoint_url=endpoint_url, profile=profile)
    raw, manifest = read_stored_manifest(src, "is the build finished? `bench-build status` tells")
    refuse_pulled_copy(src.url, manifest)
    if isinstance(src, LocalStore):
        refuse_symlinks(src.root)
    dataset, version = manifest["dataset"], manifest["version"]
    root = open_store(to, endpoint_url=endpoint_url, profile=profile).child(dataset)
    if isinstance(root, LocalStore):  # --to a file (or under one, or where nothing can be made): refused before
        root.refuse_unwritable("the dataset folder under --to,")  # the lease is written
    dest = root.child(version)
    report = TransferReport(dest.url, dataset, version, files=len(manifest["shards"]))
    manifest_sha = hashlib.sha256(raw).hexdigest()

    try:
        lease = root.child(PUBLISHING).child(version).writer_lock("bench-build publish", force=takeover)
        with lease:
            existing = dest.get(MANIFEST_NAME)  # under the lease: nothing can commit meanwhile
            if existing is not None:
                same = existing[0] == raw
                if same:  # a publish killed after its commit: finish recording it and moving the pointer
                    record_published(root, version, manifest_sha, if_absent=True)
                    if update_latest:
                        _advance_latest(root, version, manifest_sha)
                raise VersionExists(f"{dest.url} is already published{' (same content)' if same else ''}: "
                                    "published versions are immutable; bump the recipe's version to publish a new "
                                    "one")
            written: list[str] = []  # files put on the store by this run, whatever happens next
            try:
                _upload_and_commit(src, dest, raw, manifest, manifest_sha, report, jobs, progress,
                                   elsewhere=_published_files(root, version), written=written)
            except StorageError as e:
                committed = _committed(dest, raw)
                if committed:  # the store failed to say so, but kept the manifest: the version is published
                    report.notes.append(f"the store answered the manifest's upload with an error ({e}) but kept it, "
                                        "byte for byte: the version is committed")
                else:
                    if not written:
                        raise
                    went = f"{len(written)} file" + (" it uploaded before is" if len(written) == 1 else
                                                     "s it uploaded before are")
                    state = ("nothing was committed (no manifest, `latest` unchanged; `versions` lists the version "
                             "as incomplete)" if committed is False else
                             "whether the manifest (the commit) went up cannot be told while the store fails "
                             "(`versions` tells)")
                    raise PublishIncomplete(
                        f"{str(e).rstrip('.')}; the {went} kept on the store and {state}: re-run the same command "
                        "once the store takes writes again, and what is already there is not uploaded again") \
                        from None
            if not report.problems:
                record_published(root, version, manifest_sha)
    except VersionLocked as e:
        raise PublishConflict(f"a concurrent publish of {dest.url} holds its lease: {e}; if it is dead, "
                              "wait for the lease to expire (2 min) or re-run with --takeover") from None
    if report.problems:
        report.seconds = time.time() - t0
        return report  # nothing committed: fix the build and re-run (uploaded shards are kept)
    if update_latest:
        report.latest = _advance_latest(root, version, manifest_sha)
    report.seconds = time.time() - t0
    return report


def _committed(dest: Store, raw: bytes) -> bool | None:
    """After a storage error in a publish: is ``raw`` the manifest at ``dest`` now (True: the store kept the
    commit although it answered with an error), is there none (False), or can it not be read (None)?"""
    try:
        got = dest.get(MANIFEST_NAME)
    except (StorageError, OSError):
        return None
    return got is not None and got[0] == raw


def refuse_pulled_copy(where: str, manifest: dict[str, Any]) -> None:
    """Refuse (`PublishError`, before anything is written) to publish a pulled copy that is not the version: a
    partial pull (some partitions) would be committed, immutably, as the whole version; a materialised pull holds
    other bytes than the published files under the same version name."""
    partial = manifest.get("partial")
    if partial:
        raise PublishError(f"{where}: a partial pull ({len(manifest.get('shards', []))} of the version's "
                           f"{partial.get('files_in_version', '?')} files), not a version: published versions are "
                           "immutable, so this would publish those files as the whole version; publish the built "
                           "version, or pull all of it first")
    if manifest.get("materialized"):
        raise PublishError(f"{where}: a pull rewritten with --materialize (full encoding, other bytes than the "
                           "published files): publish the built version instead")


def refuse_symlinks(version_dir: Path) -> None:
    """Refuse (`PublishError`) a version directory holding a symbolic link anywhere below it, naming the link.

    Publishing reads files by path; a link would publish its target's bytes (a link to ``~/.aws/credentials``
    under ``renders/`` would go up as a picture). Links are not entered (``os.walk`` does not follow them)."""
    for dirpath, dirnames, filenames in os.walk(version_dir):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            if path.is_symlink():
                raise PublishError(f"{path}: is a symbolic link (to {os.readlink(path)}); publish follows no link "
                                   "out of the version: replace it with the file itself or remove it; nothing was "
                                   "published")


def _upload_and_commit(src: Store, dest: Store, raw: bytes, manifest: dict[str, Any], manifest_sha: str,
                       report: TransferReport, jobs: int, progress: bool,
                       elsewhere: dict[tuple[str, int], tuple[Store, str]], written: list[str]) -> None:
    """Steps 3–5 of the protocol; the caller holds the publish lease and saw no manifest. ``elsewhere``:
    `_published_files` of the dataset, copied store-side instead of uploaded. ``written`` gets each file's path
    as soon as it is on the store (copied or uploaded), so a caller whose store failed midway knows what went up.

    Two passes, each with its own progress line: first what needs no upload (already there, or copied on the
    store), then the uploads. So the upload line's total, rate and ETA count only bytes that go up, and the
    report's upload rate (`TransferReport.upload_mb_per_s`) only the time they took."""
    dataset, version = manifest["dataset"], manifest["version"]
    shards = sorted(manifest["shards"], key=lambda s: s["path"])
    renders = listed_renders(manifest, src.key_url(MANIFEST_NAME), report, "published")
    files = shards + renders
    copies = [e for e in files if (e["sha256"], e["bytes"]) in elsewhere]
    bar = TransferProgress(sum(e["bytes"] for e in copies), f"store-side copy {dataset} {version}",
                           enabled=progress and bool(copies))
    try:
        def place(entry: dict[str, Any]) -> str | None:
            """"skipped" / "copied", or None: to upload."""
            rel, size, sha = entry["path"], entry["bytes"], entry["sha256"]
            other = elsewhere.get((sha, size))
            if remote_matches(dest, rel, size, sha):
                if other is not None:
                    bar.skip(size)
                return "skipped"
            if other is None:
                return None
            try:
                dest.copy_from(other[0], other[1], rel, sha256=sha,
                               local=src.path(rel) if src.is_local else None)  # type: ignore[attr-defined]
            except (StorageError, OSError) as e:  # gone, or not what its manifest says: upload ours instead
                bar.skip(size)
                report.notes.append(f"{rel}: not copied from {other[0].url} ({e}); uploaded this build's file "
                                    "instead")
                return None
            bar.advance(size)
            written.append(rel)
            return "copied"

        done = parallel(place, files, jobs)
    finally:
        bar.close()
    uploads = [e for e, how in zip(files, done, strict=True) if how is None]
    t0 = time.time()
    bar = TransferProgress(sum(e["bytes"] for e in uploads), f"upload {dataset} {version}",
                           enabled=progress and bool(uploads))
    try:
        def upload(entry: dict[str, Any]) -> str | None:
            """"transferred", or None after recording a problem."""
            rel, size, sha = entry["path"], entry["bytes"], entry["sha256"]
            if src.is_local:
                local = src.path(rel)  # type: ignore[attr-defined]
                if not local.is_file():
                    report.problems.append(f"{rel}: missing from {src.url}")
                    return None
                got = sha256_file(local)
                if local.stat().st_size != size or got != sha:
                    report.problems.append(f"{rel}: does not match its manifest (run `bench-build verify`)")
                    return None
                dest.upload_file(local, rel, sha256=sha, progress=bar.advance)
                written.append(rel)
            else:  # from another store: through a local temporary copy, checked before it goes up

                with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
                    local = Path(tmp) / "shard"
                    src.download_file(rel, local)
                    if local.stat().st_size != size or sha256_file(local) != sha:
                        report.problems.append(f"{rel}: does not match its manifest at {src.url}")
                        return None
                    dest.upload_file(local, rel, sha256=sha, progress=bar.advance)
                    written.append(rel)
            return "transferred"

        uploaded = iter(parallel(upload, uploads, jobs))
    finally:
        bar.close()
    if uploads:
        report.upload_seconds = time.time() - t0
    done = [how if how is not None else next(uploaded) for how in done]
    report.upload_bytes = sum(e["bytes"] for e, how in zip(files, done, strict=True) if how == "transferred")
    for entry, how in zip(shards, done[:len(shards)], strict=True):
        if how is not None:
            {"skipped": report.skipped, "copied": report.copied}.get(how, report.transferred).append(entry["path"])
    report.renders = [e["path"] for e, how in zip(renders, done[len(shards):], strict=True) if how is not None]
    tally(report, manifest["shards"])
    if report.problems:
        return
    # leftovers of an interrupted publish of other content: the committed prefix holds only what is listed
    keep = {e["path"] for e in files} | {CARD}
    for obj in list(dest.list()):
        if obj.key not in keep:
            dest.delete(obj.key)

    # every listed file must be there, whole, before the manifest can name it
    present = parallel(lambda e: _remote_matches_head(dest, e), files, jobs)
    missing = [e["path"] for e, ok in zip(files, present, strict=True) if not ok]
    if missing:
        raise PublishConflict(f"{dest.url}: shards changed during the publish ({', '.join(missing[:3])}); "
                              "is another publish of this version running? nothing was committed")
    card = src.get(CARD)
    if card is not None:
        dest.put_bytes(CARD, card[0])
    try:
        dest.put_bytes(MANIFEST_NAME, raw, if_absent=True, sha256=manifest_sha)  # the commit point
    except PreconditionFailed:
        raise VersionExists(f"{dest.url} was published by a concurrent publish while this one ran; "
                            "this one lost the race and committed nothing (the published version is complete)") \
            from None


def tally(report: TransferReport, shards: list[dict[str, Any]]) -> None:
    size = {s["path"]: s["bytes"] for s in shards}
    report.transferred_bytes = sum(size[p] for p in report.transferred)
    report.skipped_bytes = sum(size[p] for p in report.skipped)
    report.copied_bytes = sum(size[p] for p in report.copied)


def _published_files(root: Store, version: str) -> dict[tuple[str, int], tuple[Store, str]]:
    """(sha256, bytes) → (version store, path) of every file the other committed versions of the dataset at
    ``root`` list. Only committed versions (a manifest that parses and passes `check_manifest`): an uncommitted
    prefix's files may still change or be deleted."""
    out: dict[tuple[str, int], tuple[Store, str]] = {}
    for name in root.list_dirs():
        if name.startswith(("_", ".")) or name == version:
            continue
        store = root.child(name)
        got = store.get(MANIFEST_NAME)
        if got is None:
            continue
        try:
            m = parse_manifest(got[0], store.key_url(MANIFEST_NAME))
            check_manifest(m, store.key_url(MANIFEST_NAME))
        except ManifestError:
            continue
        for e in [*m.get("shards", []), *(m.get("renders") or [])]:
            out.setdefault((e["sha256"], e["bytes"]), (store, e["path"]))
    return out


def _remote_matches_head(dest: Store, entry: dict[str, Any]) -> bool:
    info = dest.head(entry["path"])
    return info is not None and info.size == entry["bytes"] and info.sha256 in (None, entry["sha256"])


def _advance_latest(root: Store, version: str, manifest_sha: str, attempts: int = 20) -> str:
    """Point ``latest`` at ``version`` unless it names a newer one; compare-and-swap on the pointer's etag."""
    body = json.dumps({"version": version, "manifest_sha256": manifest_sha}, sort_keys=True).encode()
    for _ in range(attempts):
        cur = root.get(LATEST)
        try:
            if cur is None:
                root.put_bytes(LATEST, body, if_absent=True)
                return version
            named = latest_version(cur[0])
            if named == version:
                return version
            if named is not None and version_key(named) > version_key(version):
                return named
            root.put_bytes(LATEST, body, if_match=cur[1])
            return version
        except PreconditionFailed:
            time.sleep(0.05)
    raise StorageError(f"{root.key_url(LATEST)}: could not update the pointer (too much contention); "
                       f"the version is published, re-run `publish` to retry")


def record_published(root: Store, version: str, manifest_sha: str, *, if_absent: bool = False) -> None:
    """Write ``_published/<version>.json`` (UTC publish time, the committed manifest's sha256) for `list_versions`.
    ``if_absent``: keep an existing record (a re-run after a kill between commit and record fills the gap only)."""
    body = json.dumps({"version": version, "manifest_sha256": manifest_sha,
                       "published": datetime.now(UTC).isoformat(timespec="seconds")}, sort_keys=True).encode()
    try:
        root.child(PUBLISHED).put_bytes(f"{version}.json", body, if_absent=if_absent)
    except PreconditionFailed:
        pass
