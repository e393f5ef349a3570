"""`pull`: download what a checked manifest lists, verify it, and only then put it in place."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench_build.build.ledger import LEDGER_DIR
from bench_build.build.progress import TransferProgress
from bench_build.build.shard import os_error_message
from bench_build.format.compact_files import materialize_file
from bench_build.format.reader import OPTIONAL_READ_KEYS, key_problems
from bench_build.manifests.card import card_with_header
from bench_build.manifests.manifest import (
    CLEAN,
    MANIFEST_NAME,
    SAFE_NAME,
    ManifestError,
    check_shard_entries,
    local_path,
    parse_manifest,
    sha256_file,
)
from bench_build.manifests.partial import severities_by_corruption, severity_runs
from bench_build.publish.common import (
    CARD,
    DEFAULT_JOBS,
    LATEST,
    PARTIAL,
    PULL_LOCK_WAIT,
    STAGING,
    PullError,
    TransferReport,
    listed_renders,
    parallel,
    read_stored_manifest,
    selected,
)
from bench_build.publish.push import tally
from bench_build.publish.versions import latest_version, not_a_dataset, nothing_here, started_publishes
from bench_build.storage import (
    LocalStore,
    NotFound,
    StorageError,
    Store,
    VersionLocked,
    in_the_way,
    make_dirs,
    open_store,
    replace_durably,
)

#: what a pull takes from the manifest of an earlier pull into the same folder when it has the key (in the form of
#: `READ_KEYS`): the partial pull's ``partial`` and its ``selections``, as the reader checks them, and ``materialized``
EARLIER_PULL_KEYS = (*(k for k in OPTIONAL_READ_KEYS if k[0].split(".")[0] == "partial"),
                     ("materialized", lambda v: isinstance(v, dict), "an object"))


def pull_version(dataset_url: str, out: str | Path, *, version: str | None = None, corruption: str | None = None,
                 severity: int | None = None, endpoint_url: str | None = None, profile: str | None = None,
                 jobs: int = DEFAULT_JOBS, progress: bool = True, materialize: bool = False,
                 lock_wait: float = PULL_LOCK_WAIT, on_wait: Callable[[str], None] | None = None,
                 on_dest: Callable[[Path], None] | None = None) -> TransferReport:
    """Download ``<dataset_url>/<version>`` (default: latest) into ``out/<dataset>/<version>``, verifying
    every file's size and sha256; a partial pull (corruption / severity) writes a manifest of what it holds,
    and composes with earlier pulls of the same version into ``out``: the union, every file verified.
    ``materialize`` rewrites compact-encoded files in full encoding after they are verified (the clean files
    of their shards are pulled too); the local manifest then lists the rewritten files' sizes and hashes. A pull
    into such a copy keeps its rewritten files (checked against that manifest) and materialises too.

    Everything written comes from the checked manifest (shards, the ``renders`` it lists, the card, the
    manifest), each path through `local_path`; nothing is taken from a listing of the store. The pull holds
    the version directory's writer lock (the one `run` takes), waiting up to ``lock_wait`` seconds for another
    holder (``on_wait`` is told once, with the holder; ``on_dest`` is told the version directory before anything
    is written there, so an interrupt can name its ``_pull/``). Downloads are staged in ``_pull/`` as ``<path>.partial``
    and move to their final names only once every file verified, then the manifest is written: a failed pull
    leaves the directory's files and manifest as they were (its verified downloads wait in ``_pull/``, and the
    next pull reuses them). A directory holding other content of the same name (a local build, another
    publication's copy) is refused, `PullError` code 2, nothing written, and so is a file where the version
    directory or one of its parents must go, naming it; a copy whose manifest has an `EARLIER_PULL_KEYS` entry of
    another kind than a pull writes is a `ManifestError` naming it and the key, nothing written. A local OS error
    (disk full, permission denied) raises `PullError`, one line naming the file."""
    t0 = time.time()
    root = open_store(dataset_url, endpoint_url=endpoint_url, profile=profile)
    if version is None:
        got = root.get(LATEST)
        version = latest_version(got[0]) if got else None
        if version is None:
            if (hint := not_a_dataset(root, "pull")) is not None:  # a version's URL, or a publication root
                raise NotFound(hint)
            folders = [d for d in root.list_dirs() if not d.startswith(("_", "."))]  # not the publish leases
            folders = folders or started_publishes(root)  # a publish killed before its first file
            if not folders:  # nothing published there at all: a typo in the URL is likelier than a missing pointer
                raise NotFound(nothing_here(root.url))
            versions = [d for d in folders if root.child(d).exists(MANIFEST_NAME)]
            if not versions:  # only unfinished publishes: --version of one of them would fail too
                raise NotFound(f"{root.url}: no complete version; {_names(folders)} "
                               f"{'is' if len(folders) == 1 else 'are'} incomplete (no manifest: an interrupted or "
                               "running publish); `bench-build publish` of the version again completes it")
            raise NotFound(f"{root.key_url(LATEST)}: no latest pointer; pass --version (it has {_names(versions)})")
    if not SAFE_NAME.match(version):
        raise ManifestError(f"version {version!r} is not a safe name")
    src = root.child(version)
    try:
        raw, manifest = read_stored_manifest(src, "not a published version: see `bench-build versions`")
    except ManifestError:  # none there: was the URL a version's own, or a publication root?
        if not src.exists(MANIFEST_NAME):
            if (hint := not_a_dataset(root, "pull")) is not None:
                raise NotFound(hint) from None
            if next(iter(src.list()), None) is not None:
                raise NotFound(f"{src.url}: incomplete version (no manifest: an interrupted or running publish); "
                               "`bench-build publish` of it again completes it") from None
        raise
    if manifest["version"] != version:
        raise ManifestError(f"{src.key_url(MANIFEST_NAME)}: says version {manifest['version']!r}, "
                            f"but it is published as {version!r}")
    if not _matches(manifest["shards"], corruption, severity):
        asked = " ".join(f"{k} {v}" for k, v in (("--corruption", corruption), ("--severity", severity))
                         if v is not None)
        why = " (clean is severity 0 only)" if corruption == CLEAN else ""
        raise ManifestError(f"{src.url}: no partition matches {asked}{why}; it has "
                            f"{held_partitions(manifest['shards'])}")
    out = Path(out)
    dest = out / manifest["dataset"] / version
    _refuse_a_file_on_the_way(out, dest)
    if on_dest is not None:
        on_dest(dest)
    with _pull_lock(dest, lock_wait, on_wait):
        report = _pull_locked(src, raw, manifest, dest, corruption, severity, jobs, progress, materialize)
    report.seconds = time.time() - t0
    return report


def _matches(shards: list[dict[str, Any]], corruption: str | None, severity: int | None) -> bool:
    """Whether ``--corruption``/``--severity`` name partitions the version has. Each is checked on its own as
    well: ``--severity 0`` selects the clean copy whatever the corruption, so a corruption the version lacks
    (``--corruption fgo --severity 0``) pulled clean as if it were fine, and so did ``--corruption clean
    --severity 3``, a partition no version has."""
    if corruption is not None and corruption not in {s["corruption"] for s in shards}:
        return False
    if corruption == CLEAN and severity not in (None, 0):
        return False
    return bool(selected(shards, corruption, severity))


def _names(names: list[str]) -> str:
    return f"{', '.join(names[:5])}{', …' if len(names) > 5 else ''}"


def _refuse_a_file_on_the_way(out: Path, dest: Path) -> None:
    """``dest`` (``out/<dataset>/<version>``) must be a directory or creatable as one: the nearest of it and its
    parents that exists (a link counts, even a broken one) must be a directory. Else one line naming that path,
    `PullError` code 2, before anything is written (before, mkdir's "Not a directory" / "File exists" named
    ``dest``, not the file in the way)."""
    if (on_the_way := in_the_way(dest)) is None:
        return
    what = "a file" if on_the_way.is_file() else "a broken link" if on_the_way.is_symlink() else "a special file"
    if on_the_way.absolute() == out.absolute():
        raise PullError(f"--out {out}: not a directory ({what}); pass a directory (the version goes to "
                        f"OUT/{dest.parent.name}/{dest.name}); nothing was written", code=2)
    if on_the_way.absolute() in out.absolute().parents:
        raise PullError(f"--out {out}: {on_the_way} is {what}, not a directory; pass another --out; nothing was "
                        "written", code=2)
    raise PullError(f"--out {out}: {on_the_way} is {what}, not the {'version' if on_the_way == dest else 'dataset'}'s "
                    "folder; remove it or pass another --out; nothing was written", code=2)


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
    shards = selected(manifest["shards"], corruption, severity)
    full_sha = hashlib.sha256(raw).hexdigest()
    selections = [{"corruption": corruption, "severity": severity}]
    earlier = _earlier_pull(dest, raw, full_sha)
    if earlier is None:
        _refuse_other_content(dest, src)
    if earlier is not None:  # compose with an earlier pull of the same published version: pull the union
        wanted = {e["path"] for e in shards} | {e["path"] for e in earlier["shards"]}
        shards = [e for e in manifest["shards"] if e["path"] in wanted]  # earlier files are re-verified below
        selections = _once(earlier.get("partial", {}).get("selections", []) + selections)
    # an earlier --materialize pull: its rewritten files are verified against its own manifest and kept, and this
    # pull materialises too (before, they no longer matched the published sha256, so every pull downloaded them
    # again, and one without --materialize put compact files back under the names plain readers had read in full)
    rewritten = {e["path"]: e for e in earlier["shards"]} if earlier is not None and "materialized" in earlier else {}
    inherited = bool(rewritten) and not materialize
    materialize = materialize or bool(rewritten)
    if materialize and manifest.get("encoding") == "compact":  # compact rows refer to their shard's clean file
        need = {e.get("shard") for e in shards}
        have = {e["path"] for e in shards}
        shards += [e for e in manifest["shards"] if e["corruption"] == CLEAN and e.get("shard") in need
                   and e["path"] not in have]
    report = TransferReport(str(dest), manifest["dataset"], version, files=len(shards))
    if inherited and manifest.get("encoding") == "compact":
        report.notes.append(f"{dest}: holds files pulled with --materialize; this pull materialises too, so that the "
                            "folder holds one encoding (pull into another --out for the published compact files)")
    if materialize and manifest.get("encoding") != "compact":  # nothing to rewrite: say so, not nothing
        report.notes.append(f"{src.url}: stored in full encoding already; --materialize has nothing to rewrite "
                            "(the pulled files are the published ones)")
    renders = listed_renders(manifest, src.key_url(MANIFEST_NAME), report, "pulled")
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
            if final.is_file() and _holds(final, [(size, sha), *_kept(rewritten.get(rel))]):
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
                what = f"{got_size} bytes, manifest says {size}" if got_size != size else "sha256 mismatch"
                report.problems.append(f"{rel}: {what}: the published object is altered or corrupt; not kept")
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
        done = parallel(fetch, files, jobs)
    finally:
        bar.close()
    if failures:
        raise failures[0]
    for entry, how in zip(shards, done[:len(shards)], strict=True):
        if how is not None:
            (report.skipped if how == "skipped" else report.transferred).append(entry["path"])
    report.renders = [e["path"] for e, how in zip(renders, done[len(shards):], strict=True) if how is not None]
    tally(report, shards)
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


def _once(selections: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each selection once, in the order of its first pull: repeating a pull (or one an earlier bench-build recorded
    twice) listed it again on every run."""
    out: list[dict[str, Any]] = []
    for sel in selections:
        if sel not in out:
            out.append(sel)
    return out


def _kept(entry: dict[str, Any] | None) -> list[tuple[int, str]]:
    """(bytes, sha256) of a file as an earlier --materialize pull rewrote it (its local manifest's entry), if any."""
    return [] if entry is None else [(entry["bytes"], entry["sha256"])]


def _holds(path: Path, wanted: list[tuple[int, str]]) -> bool:
    """Whether the file at ``path`` has one of the (bytes, sha256) pairs ``wanted`` (hashed once, if a size fits)."""
    size = path.stat().st_size
    if not any(n == size for n, _ in wanted):
        return False
    got = sha256_file(path)
    return any(n == size and h == got for n, h in wanted)


def _install(src: Store, raw: bytes, manifest: dict[str, Any], dest: Path, shards: list[dict],
             verified: dict[str, Path], selections: list[dict[str, Any]], full_sha: str, materialize: bool,
             installed: list[tuple[Path, Path]]) -> None:
    """Every file verified: move the staged ones into place (recorded in ``installed``), materialise if asked, then
    the card and the manifest last (a local copy with a manifest is complete and verified; its manifest lists
    exactly what it holds)."""
    for rel, staged in sorted(verified.items()):
        final = local_path(dest, rel)
        make_dirs(final.parent)
        replace_durably(staged, final)  # on disk under its final name before the manifest that lists it
        installed.append((final, staged))
    materialized = materialize and manifest.get("encoding") == "compact"
    if materialized:  # verified compact files → full encoding, then a manifest of what is on disk

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
    which left the earlier files on disk but invisible. None for anything else (`_refuse_other_content`)."""
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
    if bad := key_problems(local, EARLIER_PULL_KEYS, required=False):  # hand-edited: was a bare AttributeError
        raise ManifestError(f"{path}: {'; '.join(bad)}, which a pull into this folder composes with (the manifest was "
                            f"edited: remove {dest} or pull into another --out); nothing was written")
    of = local.get("partial", {}).get("of_manifest_sha256") or local.get("materialized", {}).get("of_manifest_sha256")
    if of != full_sha:
        return None
    try:  # its entries' paths and hashes are read for the union: a hand-edited entry was a bare KeyError there
        check_shard_entries(local, str(path))
    except ManifestError as e:
        raise ManifestError(f"{e}; a pull into this folder composes with it: remove {dest} or pull into another "
                            "--out; nothing was written") from None
    return local


def _refuse_other_content(dest: Path, src: Store) -> None:
    """A pull never writes into a version directory that holds other content than the publication it pulls: a
    local build (finished or not), a copy of another publication of the same name, or a manifest it cannot read.
    Replacing that manifest left the other content's files in place, unlisted: ``verify`` failed on every one of
    them and glob readers read both. Exit 2, nothing written."""
    if (dest / MANIFEST_NAME).is_file():
        what = "a local build" if (dest / LEDGER_DIR).is_dir() else "a copy of another publication"
        try:
            local = parse_manifest((dest / MANIFEST_NAME).read_bytes(), str(dest / MANIFEST_NAME))
            what += f" ({local['dataset']} {local['version']}, built {local.get('created', '?')})"
        except (OSError, ManifestError):
            what = "a manifest that cannot be read"
        raise PullError(f"{dest}: holds {what}, not the version published at {src.url}; pull into another --out "
                        "(or remove that folder first); nothing was written", code=2)
    if (dest / LEDGER_DIR).is_dir():
        raise PullError(f"{dest}: holds an unfinished build (_ledger/, no manifest); finish it with `bench-build "
                        "run`, or pull into another --out; nothing was written", code=2)


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


def held_partitions(shards: list[dict[str, Any]]) -> str:
    """The partitions ``shards`` hold, in words: ``clean; fog 1–5; snow 1, 3`` (corruptions in first-seen order)."""
    by = severities_by_corruption((s["corruption"], s["severity"]) for s in shards)
    return "; ".join(c if c == CLEAN else f"{c} {severity_runs(sev)}" for c, sev in by.items())


def pulled_part(dest: str | Path) -> dict[str, Any] | None:
    """What a partial pull into ``dest`` (a local version directory) holds: ``held`` (its partitions, in words),
    ``files`` and ``files_in_version``; None for a whole version (or no manifest)."""
    try:
        local = json.loads((Path(dest) / MANIFEST_NAME).read_bytes())
    except (OSError, ValueError):
        return None
    part = local.get("partial") if isinstance(local, dict) else None
    if not isinstance(part, dict):
        return None
    return {"held": held_partitions(local.get("shards", [])), "files": len(local.get("shards", [])),
            "files_in_version": part.get("files_in_version")}
