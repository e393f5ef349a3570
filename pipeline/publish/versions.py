"""The published versions of a dataset (`list_versions`) and checking one where it lies (`verify_remote`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pyarrow.parquet as pq

from bench_build.build.progress import TransferProgress
from bench_build.manifests.manifest import (
    MANIFEST_NAME,
    SAFE_NAME,
    ManifestError,
    VerifyReport,
    check_counts,
    check_file_set,
    check_manifest,
    name_problems,
    parse_manifest,
)
from bench_build.publish.common import (
    DEFAULT_JOBS,
    LATEST,
    PUBLISHED,
    PUBLISHING,
    parallel,
    read_stored_manifest,
    version_key,
)
from bench_build.storage import Store, open_store


def latest_version(raw: bytes) -> str | None:
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
    paths escape the version directory, or that names another version: `pull` refuses these). ``datasets``: when
    ``dataset_url`` is a publication root instead (no version, no ``latest``, and folders that are datasets), the
    datasets under it (empty otherwise). ``is_version``: when it is a version's own URL instead (a manifest at
    its top), that version's ``{"dataset", "version"}`` (None otherwise)."""
    root = open_store(dataset_url, endpoint_url=endpoint_url, profile=profile)
    latest_raw = root.get(LATEST)
    latest = latest_version(latest_raw[0]) if latest_raw else None
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
        versions.append({"version": name, "created": m.get("created"), "published": published_time(root, name, got[0]),
                         "fingerprint": m.get("fingerprint"),
                         "files": len(m.get("shards", [])), "bytes": m.get("counts", {}).get("bytes"),
                         "examples_stored": m.get("counts", {}).get("examples_stored"), "latest": name == latest})
    versions.sort(key=lambda v: version_key(v["version"]))
    # no version and no pointer: a publication ROOT (its folders are datasets) is a likelier reading than a dataset
    # whose every publish is unfinished; then its folders are listed as datasets, not as incomplete versions
    datasets = [] if versions or unsafe or latest else [n for n in incomplete if is_dataset(root.child(n))]
    if datasets:
        incomplete = [n for n in incomplete if n not in datasets]
    # a version's own URL (the one `verify` takes): its data/ and renders/ are no unfinished versions
    is_version = None if versions or unsafe or latest or datasets else version_here(root)
    if is_version:
        incomplete = []
    elif not (versions or unsafe or latest or datasets or incomplete):
        incomplete = started_publishes(root)  # killed before any file: only the lease says a publish began
    return {"url": root.url, "latest": latest, "versions": versions, "incomplete": incomplete, "unsafe": unsafe,
            "datasets": datasets, "is_version": is_version}


def version_here(store: Store) -> dict[str, str] | None:
    """``{"dataset", "version"}`` when ``store`` is a version itself (a readable manifest at its top), else None."""
    got = store.get(MANIFEST_NAME)
    if got is None:
        return None
    try:
        m = parse_manifest(got[0], store.key_url(MANIFEST_NAME))
    except ManifestError:
        return None
    return {"dataset": str(m.get("dataset")), "version": str(m.get("version"))}


def not_a_dataset(store: Store, command: str) -> str | None:
    """One line for a dataset URL one level off (a version's URL, or a publication root), naming the URL to pass
    ``command`` instead; None when ``store`` is neither."""
    here = store.url.rstrip("/")
    if (v := version_here(store)) is not None:
        parent = here.rsplit("/", 1)[0] if "/" in here.removeprefix("s3://") else here
        return (f"{here}: this is a version ({v['dataset']} {v['version']}), not a dataset: pass the dataset's URL "
                f"and the version (bench-build {command} {parent} --version {v['version']} …)")
    datasets = [n for n in store.list_dirs() if not n.startswith(("_", ".")) and is_dataset(store.child(n))]
    if datasets and store.get(LATEST) is None:
        return (f"{here}: this is a publication root; datasets: {', '.join(datasets)} "
                f"(bench-build {command} {here}/<dataset>)")
    return None


def nothing_here(url: str) -> str:
    """One line for a dataset URL with nothing under it (no version, no pointer, no folder): a typo in the URL is
    likelier than a dataset never published, so name the URL above it, whose `versions` lists its datasets."""
    here = url.rstrip("/")
    parent = here.rsplit("/", 1)[0] if "/" in here.removeprefix("s3://") else None
    hint = f": `bench-build versions {parent}` lists the datasets published there" if parent else ""
    return f"{here}: nothing published here (nothing under this URL); check the dataset URL{hint}"


def started_publishes(root: Store) -> list[str]:
    """The versions of ``root`` (a dataset) whose publish took its lease (``_publishing/<version>/``) but has no
    version folder: a publish interrupted before its first file (or running and not there yet). Without them,
    such a dataset read as nothing at all ("check the dataset URL")."""
    have = set(root.list_dirs())
    return sorted((n for n in root.child(PUBLISHING).list_dirs() if not n.startswith(("_", ".")) and n not in have),
                  key=version_key)


def is_dataset(store: Store) -> bool:
    """Does ``store`` hold a dataset: a ``latest`` pointer or a version folder with a manifest (published), or
    only unfinished publishes, whose lease folder (``_publishing/``) or version folders with ``data/`` and no
    manifest yet are there? A version's own folders (``data/``, ``renders/``) are none of these."""
    if store.get(LATEST) is not None:
        return True
    names = store.list_dirs()
    if PUBLISHING in names:
        return True
    folders = [store.child(name) for name in names if not name.startswith(("_", "."))]
    return any(f.exists(MANIFEST_NAME) for f in folders) or any("data" in f.list_dirs() for f in folders)


# -- remote verify -------------------------------------------------------------------------------------
def verify_remote(version_url: str, *, endpoint_url: str | None = None, profile: str | None = None,
                  jobs: int = DEFAULT_JOBS, progress: bool = True) -> VerifyReport:
    """`verify` in place on object storage: every listed object's size, streamed sha256 and Parquet row count,
    and every listed render's size and sha256."""

    store = open_store(version_url, endpoint_url=endpoint_url, profile=profile)
    _, manifest = read_stored_manifest(store, "not a published or built version", check_names=False)
    report = VerifyReport(problems=name_problems(manifest))  # reported as locally, and the rest checked
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
        for problem in parallel(check, manifest["shards"], jobs):
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


def published_time(root: Store, version: str, manifest_raw: bytes) -> str | None:
    """The publish time `record_published` wrote for this manifest; None for versions published before it was
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
