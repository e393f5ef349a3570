"""What publishing and pulling share: the layout's names, the errors, the transfer report, small helpers."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from bench_build.errors import BenchBuildError
from bench_build.manifests.manifest import CLEAN, MANIFEST_NAME, ManifestError, check_manifest, parse_manifest
from bench_build.storage import Store

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


class PublishError(BenchBuildError, RuntimeError):
    """A publish was refused; nothing that readers can see was changed."""


class VersionExists(PublishError):
    pass


class PublishConflict(PublishError):
    pass


class PublishIncomplete(PublishError):
    """The store failed after files had gone up (the CLI's exit 1): they are kept, nothing was committed."""


class PullError(BenchBuildError, RuntimeError):
    """A pull stopped on a local error (disk full, not a directory, permission denied), one line naming the file.

    ``code`` 2: refused before anything was written; 1: stopped part-way, with nothing unverified (and nothing of
    this pull) under a final name — its verified downloads wait in ``_pull/`` and the next pull reuses them."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = self.exit_code = code


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
    # publish: the bytes its uploads sent (shards and renders) and the wall time of that pass alone (no hashing of
    # what was already there, no store-side copy, no check, no commit)
    upload_bytes: int = 0
    upload_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def mb_per_s(self) -> float:
        """Transferred shard bytes over the whole operation's wall time."""
        return self.transferred_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    @property
    def upload_mb_per_s(self) -> float:
        """publish: what its uploads sent over the time they took (store-side copies count in neither)."""
        return self.upload_bytes / 1e6 / self.upload_seconds if self.upload_seconds > 0 else 0.0


def version_key(version: str) -> tuple:
    """Order versions: PEP 440 when they parse (1.0.0rc1 < 1.0.0 < 1.10.0), else natural order."""
    try:

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


def parallel(fn: Callable[[Any], Any], items: list, jobs: int) -> list:
    if jobs <= 1 or len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(fn, items))


def read_stored_manifest(store: Store, hint: str, *, check_names: bool = True) -> tuple[bytes, dict[str, Any]]:
    raw = store.get(MANIFEST_NAME)
    if raw is None:
        raise ManifestError(f"{store.key_url(MANIFEST_NAME)}: no manifest ({hint})")
    manifest = parse_manifest(raw[0], store.key_url(MANIFEST_NAME))
    check_manifest(manifest, store.key_url(MANIFEST_NAME), check_names=check_names)
    return raw[0], manifest


def remote_matches(store: Store, key: str, size: int, sha256: str) -> bool:
    """Is ``key`` there with this size and sha256? A HEAD on S3 (sha256 metadata), a re-hash locally."""
    info = store.head(key)
    if info is None or info.size != size:
        return False
    if info.sha256 is not None:
        return info.sha256 == sha256
    return store.sha256(key) == sha256


def listed_renders(manifest: dict[str, Any], where: str, report: TransferReport, verb: str) -> list[dict]:
    """The manifest's ``renders`` (what the build drew for its card); an old manifest without the list gets a note."""
    renders = manifest.get("renders")
    if renders is None:
        report.notes.append(f"{where}: its manifest lists no renders (built before bench-build listed them): the "
                            f"card's pictures are not {verb}")
        return []
    return list(renders)


# -- pull ----------------------------------------------------------------------------------------------
def selected(shards: list[dict], corruption: str | None, severity: int | None) -> list[dict]:
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
