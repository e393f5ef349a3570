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
   size (a partition a recipe change did not touch: `run --reuse`, `pipeline.reuse`) is copied from there on the
   store (S3 CopyObject: no byte uploaded; a hard link for a local ``--to``), its stored sha256 checked first.
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

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from manifests.manifest import (
    MANIFEST_NAME,
    SAFE_NAME,
    ManifestError,
    VerifyReport,
    check_counts,
    check_file_set,
    check_manifest,
    local_path,
    parse_manifest,
)
from pipeline.plan import CLEAN
from pipeline.progress import TransferProgress
from pipeline.storage import (
    LocalStore,
    NotFound,
    PreconditionFailed,
    StorageError,
    Store,
    VersionLocked,
    open_store,
    sha256_file,
)

LATEST = "latest"
PUBLISHING = "_publishing"  # <dataset>/_publishing/<version>/_lease.json: the publish lease, outside the version
# <dataset>/_published/<version>.json: when the version was committed. Outside the version because the version's
# manifest is the build's, byte for byte (its ``created`` is the build time), and its prefix holds only listed files.
PUBLISHED = "_published"
CARD = "README.md"
DEFAULT_JOBS = 8
STAGING = "_pull"  # <version dir>/_pull/<path>.partial: a pull's verified downloads, until the whole pull verified
PARTIAL = ".partial"  # no `*.parquet` glob matches a staged file, and pyarrow skips `_` directories
PULL_LOCK_WAIT = 600.0  # seconds a pull waits for another pull (or a run) of the same version directory


class PublishError(RuntimeError):
    """A publish was refused; nothing that readers can see was changed."""


class VersionExists(PublishError):
    pass


class PublishConflict(PublishError):
    pass


class PullError(RuntimeError):
    """A pull stopped on a local error (disk full, not a directory, permission denied), one line naming the file.

    ``code`` 2: refused before anything was written; 1: stopped part-way, with nothing unverified (and nothing of
    this pull) under a final name — its verified downloads wait in ``_pull/`` and the next pull reuses them."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class TransferReport:
    url: str  # the version's URL (publish: remote; pull: local directory)
    dataset: str
    version: str
    files: int = 0
    transferred: list[str] = field(default_factory=list)
    transferred_bytes: int = 0
    skipped: list[str] = field(default_factory=list)  # already there with the same size and sha256
    skipped_bytes: int = 0
    # publish: byte-identical files of another published version of the dataset, copied store-side (no upload)
    copied: list[str] = field(default_factory=list)
    copied_bytes: int = 0
    problems: list[str] = field(default_factory=list)
    renders: list[str] = field(default_factory=list)  # listed renders uploaded / downloaded or already there
    notes: list[str] = field(default_factory=list)  # one line each, for the user (e.g. an old build's renders)
    kept: int = 0  # pull that failed: verified files left in _pull/ (not in place), reused by the next pull
    latest: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def mb_per_s(self) -> float:
        return self.transferred_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def version_key(version: str) -> tuple:
    """Order versions: PEP 440 when they parse (1.0.0rc1 < 1.0.0 < 1.10.0), else natural order."""
    try:
        from packaging.version import InvalidVersion, Version

        try:
            return (1, Version(version))
        except InvalidVersion:
            pass
    except ImportError:  # pragma: no cover - packaging is nearly always there
        pass
    return (0, tuple((1, int(t)) if t.isdigit() else (0, t) for t in re.findall(r"\d+|[^\d.+-]+", version)))


def content_identity(manifest: dict[str, Any]) -> str:
    """What a publish writes, shard by shard: the same for two builds with identical shards."""
    rows = sorted((s["path"], s["bytes"], s["sha256"]) for s in manifest["shards"])
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def _parallel(fn: Callable[[Any], Any], items: list, jobs: int) -> list:
    if jobs <= 1 or len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(fn, items))


def _read_manifest(store: Store, hint: str) -> tuple[bytes, dict[str, Any]]:
    raw = store.get(MANIFEST_NAME)
    if raw is None:
        raise ManifestError(f"{store.key_url(MANIFEST_NAME)}: no manifest ({hint})")
    manifest = parse_manifest(raw[0], store.key_url(MANIFEST_NAME))
    check_manifest(manifest, store.key_url(MANIFEST_NAME))
    return raw[0], manifest


def _remote_matches(store: Store, key: str, size: int, sha256: str) -> bool:
    """Is ``key`` there with this size and sha256? A HEAD on S3 (sha256 metadata), a re-hash locally."""
    info = store.head(key)
    if info is None or info.size != size:
        return False
    if info.sha256 is not None:
        return info.sha256 == sha256
    return store.sha256(key) == sha256


# -- publish ---------------------------------------------------------------------------------------
def publish_version(version_dir: str | Path, to: str, *, endpoint_url: str | None = None, profile: str | None = None,
                    jobs: int = DEFAULT_JOBS, progress: bool = True, takeover: bool = False,
                    update_latest: bool = True) -> TransferReport:
    """Publish a built version to ``<to>/<dataset>/<version>/`` (see the module docstring for the protocol)."""
    t0 = time.time()
    src = open_store(version_dir, endpoint_url=endpoint_url, profile=profile)
    raw, manifest = _read_manifest(src, "is the build finished? `bench-build status` tells")
    if isinstance(src, LocalStore):
        refuse_symlinks(src.root)
    dataset, version = manifest["dataset"], manifest["version"]
    root = open_store(to, endpoint_url=endpoint_url, profile=profile).child(dataset)
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
                    _record_published(root, version, manifest_sha, if_absent=True)
                    if update_latest:
                        _advance_latest(root, version, manifest_sha)
                raise VersionExists(f"{dest.url} is already published{' (same content)' if same else ''}: "
                                    "published versions are immutable; bump the recipe's version to publish a new "
                                    "one")
            _upload_and_commit(src, dest, raw, manifest, manifest_sha, report, jobs, progress,
                               elsewhere=_published_files(root, version))
            if not report.problems:
                _record_published(root, version, manifest_sha)
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


def _record_published(root: Store, version: str, manifest_sha: str, *, if_absent: bool = False) -> None:
    """Write ``_published/<version>.json`` (UTC publish time, the committed manifest's sha256) for `list_versions`.
    ``if_absent``: keep an existing record (a re-run after a kill between commit and record fills the gap only)."""
    body = json.dumps({"version": version, "manifest_sha256": manifest_sha,
                       "published": datetime.now(UTC).isoformat(timespec="seconds")}, sort_keys=True).encode()
    try:
        root.child(PUBLISHED).put_bytes(f"{version}.json", body, if_absent=if_absent)
    except PreconditionFailed:
        pass


def _published_time(root: Store, version: str, manifest_raw: bytes) -> str | None:
    """The publish time `_record_published` wrote for this manifest; None for versions published before it was
    recorded (or a record that belongs to other content)."""
    got = root.child(PUBLISHED).get(f"{version}.json")
    if got is None:
        return None
    try:
        rec = json.loads(got[0])
    except json.JSONDecodeError:
        return None
    if not isinstance(rec, dict) or rec.get("manifest_sha256") != hashlib.sha256(manifest_raw).hexdigest():
        return None
    t = rec.get("published")
    return t if isinstance(t, str) else None


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


def _listed_renders(manifest: dict[str, Any], where: str, report: TransferReport, verb: str) -> list[dict]:
    """The manifest's ``renders`` (what the build drew for its card); an old manifest without the list gets a note."""
    renders = manifest.get("renders")
    if renders is None:
        report.notes.append(f"{where}: its manifest lists no renders (built before bench-build listed them): the "
                            f"card's pictures are not {verb}")
        return []
    return list(renders)


def _upload_and_commit(src: Store, dest: Store, raw: bytes, manifest: dict[str, Any], manifest_sha: str,
                       report: TransferReport, jobs: int, progress: bool,
                       elsewhere: dict[tuple[str, int], tuple[Store, str]] | None = None) -> None:
    """Steps 3–5 of the protocol; the caller holds the publish lease and saw no manifest. ``elsewhere``:
    `_published_files` of the dataset, copied store-side instead of uploaded."""
    elsewhere = elsewhere or {}
    dataset, version = manifest["dataset"], manifest["version"]
    shards = sorted(manifest["shards"], key=lambda s: s["path"])
    renders = _listed_renders(manifest, src.key_url(MANIFEST_NAME), report, "published")
    files = shards + renders
    bar = TransferProgress(sum(s["bytes"] for s in files), f"upload {dataset} {version}", enabled=progress)
    try:
        def upload(entry: dict[str, Any]) -> str | None:
            """"skipped" / "copied" / "transferred", or None after recording a problem."""
            rel, size, sha = entry["path"], entry["bytes"], entry["sha256"]
            if _remote_matches(dest, rel, size, sha):
                bar.skip(size)
                return "skipped"
            other = elsewhere.get((sha, size))
            if other is not None:
                try:
                    dest.copy_from(other[0], other[1], rel, sha256=sha)
                    bar.skip(size)
                    return "copied"
                except (StorageError, OSError):  # gone, or not what its manifest says: upload ours instead
                    pass
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
            else:  # from another store: through a local temporary copy, checked before it goes up
                import tempfile

                with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
                    local = Path(tmp) / "shard"
                    src.download_file(rel, local)
                    if local.stat().st_size != size or sha256_file(local) != sha:
                        report.problems.append(f"{rel}: does not match its manifest at {src.url}")
                        return None
                    dest.upload_file(local, rel, sha256=sha, progress=bar.advance)
            return "transferred"

        done = _parallel(upload, files, jobs)
    finally:
        bar.close()
    for entry, how in zip(shards, done[:len(shards)], strict=True):
        if how is not None:
            {"skipped": report.skipped, "copied": report.copied}.get(how, report.transferred).append(entry["path"])
    report.renders = [e["path"] for e, how in zip(renders, done[len(shards):], strict=True) if how is not None]
    _tally(report, manifest["shards"])
    if report.problems:
        return
    # leftovers of an interrupted publish of other content: the committed prefix holds only what is listed
    keep = {e["path"] for e in files} | {CARD}
    for obj in list(dest.list()):
        if obj.key not in keep:
            dest.delete(obj.key)

    # every listed file must be there, whole, before the manifest can name it
    present = _parallel(lambda e: _remote_matches_head(dest, e), files, jobs)
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


def _tally(report: TransferReport, shards: list[dict[str, Any]]) -> None:
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
            named = _latest_version(cur[0])
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


def _latest_version(raw: bytes) -> str | None:
    try:
        v = json.loads(raw).get("version")
    except (json.JSONDecodeError, AttributeError):
        return None
    return v if isinstance(v, str) and SAFE_NAME.match(v) else None


# -- versions ----------------------------------------------------------------------------------------
def list_versions(dataset_url: str, *, endpoint_url: str | None = None,
                  profile: str | None = None) -> dict[str, Any]:
    """Published versions under ``<root>/<dataset>`` (those with a safe manifest), which one is latest, and
    the prefixes that are ``incomplete`` (no or unreadable manifest) or ``unsafe`` (a manifest whose shard
    paths escape the version directory, or that names another version: `pull` refuses these)."""
    root = open_store(dataset_url, endpoint_url=endpoint_url, profile=profile)
    latest_raw = root.get(LATEST)
    latest = _latest_version(latest_raw[0]) if latest_raw else None
    versions, incomplete, unsafe = [], [], []
    for name in root.list_dirs():
        if name.startswith(("_", ".")):  # the publish leases (_publishing/), never a version
            continue
        got = root.child(name).get(MANIFEST_NAME)
        if got is None:
            incomplete.append(name)
            continue
        where = root.key_url(f"{name}/{MANIFEST_NAME}")
        try:
            m = parse_manifest(got[0], where)
        except ManifestError as e:
            incomplete.append(f"{name} ({e})")
            continue
        try:  # a manifest whose paths escape the version (or names another version) is never listed as usable
            check_manifest(m, where)
            if m.get("version") != name:
                raise ManifestError(f"{where}: says version {m.get('version')!r}, but it is published as {name!r}")
        except ManifestError as e:
            unsafe.append({"version": name, "reason": str(e)})
            continue
        # "created" is the build time (the manifest's); "published" the commit time, None for old publishes
        versions.append({"version": name, "created": m.get("created"), "published": _published_time(root, name, got[0]),
                         "fingerprint": m.get("fingerprint"),
                         "files": len(m.get("shards", [])), "bytes": m.get("counts", {}).get("bytes"),
                         "examples_stored": m.get("counts", {}).get("examples_stored"), "latest": name == latest})
    versions.sort(key=lambda v: version_key(v["version"]))
    return {"url": root.url, "latest": latest, "versions": versions, "incomplete": incomplete, "unsafe": unsafe}


# -- pull ----------------------------------------------------------------------------------------------
def _selected(shards: list[dict], corruption: str | None, severity: int | None) -> list[dict]:
    """Shards of the requested partitions (severity 0 / corruption 'clean' = the clean copy)."""
    if corruption is None and severity is None:
        return list(shards)
    out = []
    for s in shards:
        if severity == 0 or corruption == CLEAN:
            if s["corruption"] == CLEAN:
                out.append(s)
            continue
        if corruption is not None and s["corruption"] != corruption:
            continue
        if severity is not None and s["severity"] != severity:
            continue
        out.append(s)
    return out


def pull_version(dataset_url: str, out: str | Path, *, version: str | None = None, corruption: str | None = None,
                 severity: int | None = None, endpoint_url: str | None = None, profile: str | None = None,
                 jobs: int = DEFAULT_JOBS, progress: bool = True, materialize: bool = False,
                 lock_wait: float = PULL_LOCK_WAIT, on_wait: Callable[[str], None] | None = None) -> TransferReport:
    """Download ``<dataset_url>/<version>`` (default: latest) into ``out/<dataset>/<version>``, verifying
    every file's size and sha256; a partial pull (corruption / severity) writes a manifest of what it holds,
    and composes with earlier pulls of the same version into ``out``: the union, every file verified.
    ``materialize`` rewrites compact-encoded files in full encoding after they are verified (the clean files
    of their shards are pulled too); the local manifest then lists the rewritten files' sizes and hashes.

    Everything written comes from the checked manifest (shards, the ``renders`` it lists, the card, the
    manifest), each path through `local_path`; nothing is taken from a listing of the store. The pull holds
    the version directory's writer lock (the one `run` takes), waiting up to ``lock_wait`` seconds for another
    holder (``on_wait`` is told once, with the holder). Downloads are staged in ``_pull/`` as ``<path>.partial``
    and move to their final names only once every file verified, then the manifest is written: a failed pull
    leaves the directory's files and manifest as they were (its verified downloads wait in ``_pull/``, and the
    next pull reuses them). A local OS error (disk full, permission denied, ``out`` not a directory) raises
    `PullError`, one line naming the file."""
    t0 = time.time()
    root = open_store(dataset_url, endpoint_url=endpoint_url, profile=profile)
    if version is None:
        got = root.get(LATEST)
        version = _latest_version(got[0]) if got else None
        if version is None:
            raise NotFound(f"{root.key_url(LATEST)}: no latest pointer; pass --version (see `bench-build versions`)")
    if not SAFE_NAME.match(version):
        raise ManifestError(f"version {version!r} is not a safe name")
    src = root.child(version)
    raw, manifest = _read_manifest(src, "not a published version: see `bench-build versions`")
    if manifest["version"] != version:
        raise ManifestError(f"{src.key_url(MANIFEST_NAME)}: says version {manifest['version']!r}, "
                            f"but it is published as {version!r}")
    if not _selected(manifest["shards"], corruption, severity):
        raise ManifestError(f"{src.url}: no shard of corruption={corruption} severity={severity}")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise PullError(f"--out {out}: not a directory; pass a directory (the version goes to "
                        f"OUT/{manifest['dataset']}/{version}); nothing was written", code=2)
    dest = out / manifest["dataset"] / version
    with _pull_lock(dest, lock_wait, on_wait):
        report = _pull_locked(src, raw, manifest, dest, corruption, severity, jobs, progress, materialize)
    report.seconds = time.time() - t0
    return report


@contextlib.contextmanager
def _pull_lock(dest: Path, wait: float, on_wait: Callable[[str], None] | None) -> Iterator[None]:
    """The version directory's writer lock (`LocalStore.writer_lock`, as `run` takes it), waited for up to
    ``wait`` seconds: two pulls into one directory run one after the other, so the second composes with the
    manifest the first wrote instead of overwriting it."""
    store = LocalStore(dest)
    deadline = time.monotonic() + wait
    told = False
    while True:
        lock = contextlib.ExitStack()
        try:
            lock.enter_context(store.writer_lock("bench-build pull"))
        except VersionLocked as e:
            if time.monotonic() >= deadline:
                raise VersionLocked(f"{e} (waited {wait:g} s)") from None
            if not told and on_wait is not None:
                holder = store.writer_holder() or {}
                on_wait(f"{dest} is held by another {holder.get('purpose', 'process')} (pid {holder.get('pid', '?')} "
                        f"on {holder.get('host', '?')} since {holder.get('started', '?')}): waiting up to "
                        f"{wait:g} s for it to finish")
                told = True
            time.sleep(0.1)
            continue
        except OSError as e:  # a parent is a file, permission denied, disk full: nothing was written
            raise PullError(f"cannot create {dest}: {_os_cause(e, dest)}; nothing was written", code=2) from None
        with lock:
            yield
        return


def _os_cause(e: OSError, where: Path) -> str:
    """``<cause>: <file>`` of a local OS error (the file it names, else ``where``)."""
    from pipeline.shard import os_error_message

    return os_error_message(e, None if getattr(e, "filename", None) else str(where))


def _local_failure(e: OSError, where: Path) -> PullError:
    hint = {errno.ENOSPC: "free disk space", errno.EDQUOT: "free disk space (quota)",
            errno.EACCES: "make it writable", errno.EPERM: "make it writable",
            errno.EROFS: "pull to a writable file system"}.get(e.errno or 0, "fix it")
    return PullError(f"pull stopped: {_os_cause(e, where)}; {hint}, then run the same pull again (files already "
                     "verified are kept and reused; nothing unverified was put in place)", code=1)


def _pull_locked(src: Store, raw: bytes, manifest: dict[str, Any], dest: Path, corruption: str | None,
                 severity: int | None, jobs: int, progress: bool, materialize: bool) -> TransferReport:
    """`pull_version` once it holds the version directory's lock."""
    version = manifest["version"]
    shards = _selected(manifest["shards"], corruption, severity)
    full_sha = hashlib.sha256(raw).hexdigest()
    selections = [{"corruption": corruption, "severity": severity}]
    earlier = _earlier_pull(dest, raw, full_sha)
    if earlier is not None:  # compose with an earlier pull of the same published version: pull the union
        wanted = {e["path"] for e in shards} | {e["path"] for e in earlier["shards"]}
        shards = [e for e in manifest["shards"] if e["path"] in wanted]  # earlier files are re-verified below
        selections = earlier.get("partial", {}).get("selections", []) + selections
    if materialize and manifest.get("encoding") == "compact":  # compact rows refer to their shard's clean file
        need = {e.get("shard") for e in shards}
        have = {e["path"] for e in shards}
        shards += [e for e in manifest["shards"] if e["corruption"] == CLEAN and e.get("shard") in need
                   and e["path"] not in have]
    report = TransferReport(str(dest), manifest["dataset"], version, files=len(shards))
    renders = _listed_renders(manifest, src.key_url(MANIFEST_NAME), report, "pulled")
    files = shards + renders
    staging = dest / STAGING
    # every path this pull may write, checked before the first download (a link on the way is refused here)
    targets = {e["path"]: (local_path(dest, e["path"]), local_path(staging, e["path"] + PARTIAL)) for e in files}
    bar = TransferProgress(sum(s["bytes"] for s in files), f"download {manifest['dataset']} {version}",
                           enabled=progress)
    verified: dict[str, Path] = {}  # path → its staged, verified download (moved into place at the end)
    stop = threading.Event()  # a local error (disk full) stops the remaining downloads
    failures: list[PullError] = []

    def fetch(entry: dict[str, Any]) -> str | None:
        """"skipped" (already in place or staged, verified), "transferred", or None (a problem / stopped)."""
        if stop.is_set():
            return None
        rel, size, sha = entry["path"], entry["bytes"], entry["sha256"]
        final, staged = targets[rel]
        try:
            if final.is_file() and final.stat().st_size == size and sha256_file(final) == sha:
                bar.skip(size)
                return "skipped"
            if staged.is_file() and staged.stat().st_size == size and sha256_file(staged) == sha:
                verified[rel] = staged  # downloaded and verified by an earlier pull that failed later
                bar.skip(size)
                return "skipped"
            try:
                src.download_file(rel, staged, progress=bar.advance)
            except NotFound:
                report.problems.append(f"{rel}: missing from {src.url}")
                return None
            except StorageError as e:
                report.problems.append(f"{rel}: {e}")
                return None
            got_size, got = staged.stat().st_size, sha256_file(staged)
            if got_size != size or got != sha:
                staged.unlink(missing_ok=True)
                report.problems.append(f"{rel}: sha256 mismatch ({got_size} bytes, manifest says {size}): "
                                       "the published object is altered or corrupt; not kept")
                return None
        except OSError as e:
            stop.set()
            staged.unlink(missing_ok=True)
            failures.append(_local_failure(e, staged))
            return None
        except BaseException:
            stop.set()
            staged.unlink(missing_ok=True)
            raise
        verified[rel] = staged
        return "transferred"

    try:
        done = _parallel(fetch, files, jobs)
    finally:
        bar.close()
    if failures:
        raise failures[0]
    for entry, how in zip(shards, done[:len(shards)], strict=True):
        if how is not None:
            (report.skipped if how == "skipped" else report.transferred).append(entry["path"])
    report.renders = [e["path"] for e, how in zip(renders, done[len(shards):], strict=True) if how is not None]
    _tally(report, shards)
    if not report.ok:  # nothing moves into place: the directory is as it was; verified downloads wait in _pull/
        report.kept = len(verified)
        return report
    installed: list[tuple[Path, Path]] = []
    try:
        _install(src, raw, manifest, dest, shards, verified, selections, full_sha, materialize, installed)
    except OSError as e:
        # the manifest could not be written (disk full): files moved into place go back to _pull/, so no glob
        # reader takes them for part of the version the directory's manifest describes
        for final, staged in reversed(installed):
            with contextlib.suppress(OSError):
                os.replace(final, staged)
        raise _local_failure(e, dest) from None
    shutil.rmtree(staging, ignore_errors=True)
    return report


def _install(src: Store, raw: bytes, manifest: dict[str, Any], dest: Path, shards: list[dict],
             verified: dict[str, Path], selections: list[dict[str, Any]], full_sha: str, materialize: bool,
             installed: list[tuple[Path, Path]]) -> None:
    """Every file verified: move the staged ones into place (recorded in ``installed``), materialise if asked, then
    the card and the manifest last (a local copy with a manifest is complete and verified; its manifest lists
    exactly what it holds)."""
    for rel, staged in sorted(verified.items()):
        final = local_path(dest, rel)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, final)
        installed.append((final, staged))
    materialized = materialize and manifest.get("encoding") == "compact"
    if materialized:  # verified compact files → full encoding, then a manifest of what is on disk
        from pipeline.compact import materialize_file

        clean_of = {e.get("shard"): e for e in manifest["shards"] if e["corruption"] == CLEAN}
        rewritten = []
        for e in shards:
            if e["corruption"] != CLEAN and (e.get("shard") in clean_of):
                size, sha = materialize_file(local_path(dest, e["path"]),
                                             local_path(dest, clean_of[e["shard"]]["path"]))
                # other bytes than the partition's fingerprint stands for: never offered for reuse
                e = {**{k: v for k, v in e.items() if k != "partition_fingerprint"}, "bytes": size, "sha256": sha}
            rewritten.append(e)
        shards = rewritten
    card = src.get(CARD)
    if len(shards) == len(manifest["shards"]) and not materialized:
        if card is not None:
            _write_local(dest / CARD, card[0])
        _write_local(dest / MANIFEST_NAME, raw)
        return
    local = _partial_manifest(manifest, shards, selections, full_sha)
    if materialized:
        local["encoding"] = "full"
        local["materialized"] = {"of_manifest_sha256": full_sha, "from_encoding": "compact"}
        if len(shards) == len(manifest["shards"]):
            local.pop("partial")
    if card is not None:  # its YAML configs name only the partitions this copy holds
        from manifests.card import card_with_header

        _write_local(dest / CARD, card_with_header(card[0].decode(), local).encode())
    _write_local(dest / MANIFEST_NAME, json.dumps(local, indent=1, sort_keys=True, allow_nan=False).encode())


def _write_local(path: Path, data: bytes) -> None:
    try:
        LocalStore(path.parent).put_bytes(path.name, data)
    except OSError as e:
        if not e.filename:  # a failed write()/fsync names no file: the error message must
            e.filename = str(path)
        raise


def _earlier_pull(dest: Path, raw: bytes, full_sha: str) -> dict[str, Any] | None:
    """The local manifest of an earlier pull of the same published manifest into ``dest``, if any.

    A partial pull then composes with it (union of files, one manifest) instead of replacing its manifest,
    which left the earlier files on disk but invisible. A manifest of another publication is replaced."""
    path = dest / MANIFEST_NAME
    if not path.is_file():
        return None
    data = path.read_bytes()
    if data == raw:
        return json.loads(raw)  # a complete earlier pull: the union is the whole version
    try:
        local = parse_manifest(data, str(path))
    except ManifestError:
        return None
    of = local.get("partial", {}).get("of_manifest_sha256") or local.get("materialized", {}).get("of_manifest_sha256")
    return local if of == full_sha else None


def _partial_manifest(manifest: dict[str, Any], shards: list[dict], selections: list[dict[str, Any]],
                      full_sha: str) -> dict[str, Any]:
    """The manifest of a partial pull: only the pulled shards, counts recomputed, and what it is part of
    (``selections``: every ``--corruption``/``--severity`` pull composed into this copy)."""
    keep = {f"{s['corruption']}/{s['severity']}" for s in shards}
    counts = dict(manifest["counts"])
    counts["examples_stored"] = sum(s["rows"] for s in shards)
    counts["bytes"] = sum(s["bytes"] for s in shards)
    counts["by_partition"] = {k: dict(v) for k, v in counts.get("by_partition", {}).items() if k in keep}
    for k, part in counts["by_partition"].items():  # from the files held (materialised files have new sizes)
        held = [e for e in shards if f"{e['corruption']}/{e['severity']}" == k]
        part["examples"], part["bytes"] = sum(e["rows"] for e in held), sum(e["bytes"] for e in held)
    return {**manifest, "counts": counts, "shards": shards,
            "partial": {"selections": selections, "of_manifest_sha256": full_sha,
                        "files_in_version": len(manifest["shards"])}}


# -- remote verify -------------------------------------------------------------------------------------
def verify_remote(version_url: str, *, endpoint_url: str | None = None, profile: str | None = None,
                  jobs: int = DEFAULT_JOBS, progress: bool = True) -> VerifyReport:
    """`verify` in place on object storage: every listed object's size, streamed sha256 and Parquet row count,
    and every listed render's size and sha256."""
    import pyarrow.parquet as pq

    store = open_store(version_url, endpoint_url=endpoint_url, profile=profile)
    _, manifest = _read_manifest(store, "not a published or built version")
    report = VerifyReport()
    bar = TransferProgress(sum(s["bytes"] for s in manifest["shards"]), "verify", enabled=progress)

    def check(entry: dict[str, Any], parquet: bool = True) -> str | None:
        """Size, streamed sha256 and (for shards) the Parquet row count of one listed object."""
        rel = entry["path"]
        info = store.head(rel)
        if info is None:
            return f"{rel}: missing"
        if info.size != entry["bytes"]:
            return f"{rel}: {info.size} bytes, manifest says {entry['bytes']}"
        h = hashlib.sha256()
        for chunk in store.iter_chunks(rel):
            h.update(chunk)
            if parquet:  # the bar counts the shards' bytes
                bar.advance(len(chunk))
        if h.hexdigest() != entry["sha256"]:
            return f"{rel}: sha256 mismatch (object altered or corrupt)"
        if not parquet:
            return None
        try:
            with store.open_input(rel) as f:
                rows = pq.ParquetFile(f).metadata.num_rows
        except Exception as e:
            return f"{rel}: unreadable Parquet: {e}"
        if rows != entry["rows"]:
            return f"{rel}: {rows} rows, manifest says {entry['rows']}"
        return None

    try:
        for problem in _parallel(check, manifest["shards"], jobs):
            report.checked += 1
            if problem:
                report.problems.append(problem)
    finally:
        bar.close()
    for entry in manifest.get("renders", []):  # check_manifest checked the list's shape and paths
        report.renders += 1
        if problem := check(entry, parquet=False):
            report.problems.append(problem)
    extra, report.warnings = check_file_set(manifest, [o.key for o in store.list()])
    report.problems += extra + check_counts(manifest)
    return report
