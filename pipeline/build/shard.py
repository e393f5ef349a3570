"""Building one shard: read its frames once, run every corruption × severity, write Parquet atomically.

This runs inside a Ray task but knows nothing about Ray: it is a plain function of
(spec, recipe, source, output directory) so it can be tested and profiled on its own.
"""

from __future__ import annotations

import errno as errno_mod
import hashlib
import json
import os
import re
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.build.ledger import Ledger, frame_identity, identity_digest
from bench_build.errors import BenchBuildError
from bench_build.format.schema import SCHEMA_VERSION, canonical_columns, schema_with_metadata
from bench_build.format.writer import (
    ENCODINGS,
    parquet_format,
    record_batches,
    write_parquet_atomic,
)
from bench_build.manifests.manifest import config_name, partition_dir
from bench_build.manifests.recipe import Recipe, jsonable
from bench_build.plan.tasks import CLEAN, BlockSpec, TaskSpec, example_key, example_rng
from bench_build.render import View, make_panel, sheet_extent, sheet_focus
from bench_build.render.views import semantic_classes
from bench_build.runtime.numeric import COMPARED
from bench_build.sources.base import Source, SourceError
from bench_build.sources.labels import map_labels
from bench_build.stages.frame import Frame
from bench_build.stages.registry import get_stage
from bench_build.storage import AccessDenied, Store, StoreSpec, in_the_way, open_store


def build_columns(recipe: Recipe, source: Any) -> tuple[str, ...]:
    """The optional columns of every file of a build: those the source fills (``Source.columns``) and those
    its recipe's stages add (``@stage(..., columns=...)``), in canonical order. Known before any file is
    written, so all files of a build share one schema (what DuckDB and pyarrow need to read them as one)."""
    names = set(getattr(source, "columns", ()))
    for c in recipe.corruptions:
        names |= set(get_stage(c.stage).columns)
    return canonical_columns(names)


def partition_meta(recipe: Recipe, corruption: str, severity: int) -> dict[str, Any]:
    """What a partition is: its stage, stage version and that severity's parameters (``stage`` None for clean).

    The same dict is written into each of the partition's file footers and into the manifest's
    ``partitions`` table, so no reader has to guess one partition's parameters from another's file."""
    if corruption == CLEAN:
        return {"corruption": CLEAN, "severity": 0, "stage": None}
    entry = recipe.corruption(corruption)
    stage = get_stage(entry.stage)
    return {"corruption": corruption, "severity": severity, "stage": stage.name, "stage_version": stage.version,
            "params": jsonable(asdict(entry.params_for(severity))),
            **({"origin": entry.origin} if entry.origin != "points" else {})}


def partition_table(recipe: Recipe) -> dict[str, dict[str, Any]]:
    """The manifest's ``partitions``: ``"fog/3"`` → what the partition is, where it lives, its card config."""
    parts = [(CLEAN, 0)] + [(c.name, s) for c in recipe.corruptions for s in range(1, recipe.severities + 1)]
    return {f"{c}/{s}": {**partition_meta(recipe, c, s), "path": partition_dir(c, s), "config": config_name(c, s)}
            for c, s in parts}


def numeric_identity(profile: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fields of a numeric profile that decide computed bytes (those `profile_differences` compares)."""
    if profile is None:
        return None

    return {k: profile.get(k) for k in COMPARED}


def partition_fingerprint(recipe: Recipe, corruption: str, severity: int, block: str, frame_ids: Sequence[str],
                          frame_digests: Sequence[str | None], *, columns: Sequence[str], encoding: str,
                          numeric: dict[str, Any] | None) -> str:
    """sha256 of everything that decides the bytes of one partition file (one block of one corruption × severity).

    Two files with equal partition fingerprints are byte-identical, whatever version of the benchmark they belong
    to: that is what lets a new version reuse an earlier version's files (`bench_build.build.reuse`). In it: what each
    example's key and RNG derive from (benchmark name, seed), the source (kind, split, options, preprocess, the
    block's frame ids and each frame's content digest), the partition (stage, stage version, that severity's
    parameters), the block's name (it is in the footer), the file schema (optional columns, which other stages
    of the recipe can add), the writer (Parquet options, row-group size, encoding, schema version) and the numeric
    profile's compared fields. Not in it: the version, the other corruptions' parameters, the build fingerprint."""

    canonical = recipe.canonical_source()
    payload = {
        "benchmark": recipe.name, "seed": recipe.seed, "source": recipe.source, "split": recipe.split,
        "source_options": canonical.get("source_options"), "preprocess": canonical.get("preprocess"),
        "partition": partition_meta(recipe, corruption, severity), "block": block,
        "frames": list(frame_ids), "frame_digests": list(frame_digests), "columns": list(columns),
        "encoding": encoding, "parquet": parquet_format(), "schema_version": SCHEMA_VERSION, "numeric": numeric,
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


class TaskSplit:
    """Where a task's wall time goes, by exclusive phase (seconds, summed over its files): ``read`` (scans),
    ``compute`` (the stages), ``encode`` (examples → Arrow record batches, ours), ``parquet`` (Arrow's column
    encoding + zstd compression + the write into the OS, one C++ call per row group and the footer), ``commit``
    (fsync, sha256, rename or upload hand-off), ``paint`` (the contact sheet's panels). Recorded in each ledger
    entry as ``split`` (wall seconds, plus ``other``: the rest of the task's wall time), ``split_cpu`` (the task
    thread's CPU seconds in each phase) and ``cpu`` / ``wait`` (wall − the task thread's CPU: runnable without a
    core, or blocked on I/O) / ``other_threads_cpu`` (the process's other threads during the task: library
    thread pools, uploads)."""

    PHASES = ("read", "compute", "encode", "parquet", "commit", "paint")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self.cpu = dict.fromkeys(self.PHASES, 0.0)
        self.wall0, self.cpu0, self.thread0 = time.perf_counter(), time.process_time(), time.thread_time()
        self.mark = (self.wall0, self.thread0)

    def start(self) -> float:
        """Mark the start of a phase (returns its wall clock, for `add`)."""
        self.mark = (time.perf_counter(), time.thread_time())
        return self.mark[0]

    def add(self, phase: str, since: float | None = None) -> float:
        """End ``phase`` begun at the last `start` (or ``since``, a wall clock from `start`); the next one starts
        now. Returns the wall clock."""
        now, cpu = time.perf_counter(), time.thread_time()
        self.seconds[phase] += now - (self.mark[0] if since is None else since)
        self.cpu[phase] += cpu - self.mark[1]
        self.mark = (now, cpu)
        return now

    def record(self) -> dict[str, Any]:
        wall = time.perf_counter() - self.wall0
        own = time.thread_time() - self.thread0
        out: dict[str, Any] = {k: round(v, 4) for k, v in self.seconds.items()}
        out["other"] = round(max(0.0, wall - sum(self.seconds.values())), 4)
        out["cpu"] = round(own, 4)
        out["wait"] = round(max(0.0, wall - own), 4)
        out["other_threads_cpu"] = round(max(0.0, time.process_time() - self.cpu0 - own), 4)
        return out


def process_threads() -> int | None:
    """Threads this process runs now (Linux: /proc/self/task), or None where that cannot be read."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None



def _block_index(spec: BlockSpec | TaskSpec) -> int:
    return spec.shard.index if isinstance(spec, TaskSpec) else spec.index


class _SheetPainter:
    """Paints the contact-sheet panel of ``frame`` (the version's default sheet frame: first frame of the
    first block) in every partition a task writes, with the clean frame's extent, into ``panels``. A
    picture never fails a shard: a panel that cannot be painted is left out (the driver then reads the
    files back, as `bench-build render` does)."""

    def __init__(self, frame: Frame, panels: dict, source: Source | None = None) -> None:
        self.frame, self.panels = frame, panels
        c = time.process_time()
        try:
            clean = self.view(CLEAN, 0, frame)
            classes = semantic_classes(source.describe()) if frame.boxes is None and source is not None else None
            if classes is not None and "semantic" in frame.labels:  # a scan without boxes zooms on its labels
                clean = replace(clean, semantic=map_labels(frame.labels["semantic"], classes[0]),
                                class_names=classes[1], instance=frame.labels.get("instance"))
            self.extent, self.radius = sheet_extent(clean)
            self.focus = sheet_focus(clean, self.extent)  # the object every panel's inset zooms on
        except Exception:
            self.frame = None  # type: ignore[assignment]
        self.cpu_seconds = time.process_time() - c  # a picture of one frame: not a cost of the dataset

    @staticmethod
    def view(corruption: str, severity: int, f: Frame, copy: bool = True):
        """The `View` a reader of the files would make (float64 xyz); ``copy=False``: the frame's float32 xyz in
        place, which paints the same raster (`render.paint` computes in float64) without a 3 MB copy."""

        pts = np.asarray(f.points[:, :3], dtype=np.float64) if copy else f.points[:, :3]
        is_object = f.boxes is None and (len(pts) == 0 or float(np.abs(pts).max()) <= 5.0)
        return View(corruption, severity, pts, f.point_tag.astype(np.uint8, copy=False), f.boxes, is_object)

    def __call__(self, corruption: str, severity: int, source: Frame, out: Frame) -> None:
        if source is not self.frame:
            return
        c = time.process_time()
        try:

            self.panels[(corruption, severity)] = make_panel(self.view(corruption, severity, out, copy=False),
                                                             extent=self.extent, radius=self.radius,
                                                             focus=self.focus)
        except Exception:
            self.panels.pop((corruption, severity), None)
        self.cpu_seconds += time.process_time() - c


class ShardFailed(BenchBuildError, RuntimeError):
    """A shard could not be built. ``kind``: "input" (bad data or parameters: fix them), "resource" (disk full, I/O
    error: the input is fine, the machine is not), "permission" (the output may not be written) or "blocked" (a file
    where a folder must be): `os_error_kind`."""

    exit_code = 1  # work had begun

    def __init__(self, shard: str, message: str, path: str | None = None, kind: str = "input") -> None:
        super().__init__(message)
        self.shard, self.message, self.path, self.kind = shard, message, path, kind


_TEMP_NAME = re.compile(r"^\.(.+)\.[A-Za-z0-9_-]+~\d+\.[^.]+\.tmp$")  # `mkstemp_in`'s .<name>.<host>~<pid>.<random>.tmp


def error_path(e: BaseException) -> str | None:
    """The file an I/O error was writing: a rename's or link's destination (``filename2``), not its source, the
    temp file it was written to; a temp file ``.<name>.<host>~<pid>.<random>.tmp`` named alone (opening, writing
    it) is told as the ``<name>`` beside it, the file the user knows. None when the error names no file."""
    if path := getattr(e, "filename2", None):
        return str(path)
    if not (path := getattr(e, "filename", None)):
        return None
    p = Path(path)
    m = _TEMP_NAME.match(p.name)
    return str(p.with_name(m.group(1))) if m else str(path)


def os_error_message(e: BaseException, where: str | None = None) -> str:
    """``<cause>: <path>`` of an I/O error (``No space left on device: /out/…/part-….parquet``); when a file stands
    where a folder of the path must be, that file (`blocking_file`), not the path it blocks.

    pyarrow's write errors carry no errno; their text does, so ENOSPC is recognised from either."""

    err = getattr(e, "errno", None)
    text = str(e)
    path = where or error_path(e)
    if (blocker := blocking_file(e, where)) is not None:
        kind = "a broken link" if blocker.is_symlink() and not blocker.exists() else "a file"
        target = f" (to write {path})" if path and Path(path) != blocker else ""
        return f"{blocker} is {kind} where a folder is needed{target}: move or remove it"
    if err == errno_mod.ENOSPC or "No space left on device" in text:
        cause = "No space left on device"
    elif isinstance(err, int) and err > 0:
        cause = os.strerror(err)
    else:
        cause = text.splitlines()[0] if text else type(e).__name__
    return f"{cause}: {path}" if path else cause


def blocking_file(e: BaseException, where: str | None = None) -> Path | None:
    """The file (or link) standing where a folder must be, if that is what ``e`` is: ``mkdir -p`` of a file's folder
    fails with EEXIST (the folder's name is a file) or ENOTDIR (a folder above it is), naming the folder or the file
    to write, never the file in the way. `make_dirs` names it (``in_the_way``); else it is looked for above ``where``
    (the file being written) and above the error's own path. None for any other error, and on object storage."""
    if getattr(e, "errno", None) not in (errno_mod.EEXIST, errno_mod.ENOTDIR):
        return None
    if isinstance(blocker := getattr(e, "in_the_way", None), Path):
        return blocker
    for path in (where, getattr(e, "filename", None)):
        if isinstance(path, str | Path) and "://" not in str(path) and \
                (blocker := in_the_way(Path(path).parent)) is not None:
            return blocker
    return None


#: errnos of an output this user may not write: its mode or owner, an immutable file (``chattr +i``: EPERM even for
#: root), a read-only mount; pyarrow's write errors carry no errno, only these texts
PERMISSION_ERRNOS = (errno_mod.EACCES, errno_mod.EPERM, errno_mod.EROFS)
PERMISSION_TEXTS = ("Permission denied", "Operation not permitted", "Read-only file system")


def os_error_kind(e: BaseException, where: str | None = None) -> str:
    """The failure kind of an I/O error (`ShardFailed.kind`): "permission" when the output may not be written (the
    closing hint then names permissions, immutability and read-only mounts), "blocked" when a file stands where a
    folder must be (`blocking_file`) or a folder where the file goes, else "resource" (disk full, I/O error).
    ``where``: the file being written, as given to `os_error_message`."""
    if blocking_file(e, where) is not None or getattr(e, "errno", None) == errno_mod.EISDIR:
        return "blocked"
    text = str(e)
    if getattr(e, "errno", None) in PERMISSION_ERRNOS or any(t in text for t in PERMISSION_TEXTS):
        return "permission"
    return "resource"


def _preprocess(spec: BlockSpec | TaskSpec, recipe: Recipe, frame: Frame) -> Frame:
    """The recipe's [preprocess] stage on a source frame; it draws from the clean example's RNG."""
    entry = recipe.preprocess
    assert entry is not None
    key = example_key(recipe.name, frame.frame_id, CLEAN, 0)
    try:
        return entry.apply(frame, 1, example_rng(recipe.seed, key))
    except Exception as e:
        raise ShardFailed(spec.name, f"preprocess {entry.stage} failed on {key}: {type(e).__name__}: {e}") from e


def build_shard(spec: BlockSpec | TaskSpec, recipe: Recipe, source: Source, root: str | Path | Store | StoreSpec,
                fingerprint: str, run_id: str, on_file: Callable[[int], None] | None = None,
                before_commit: Callable[[], bool] | None = None, encoding: str = "full",
                panels: dict | None = None, numeric_profile: dict[str, Any] | None = None,
                reused_files: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Build and record one shard; return its ledger entry. Raises ShardFailed on bad input or a stage error.

    ``root`` is the version directory: a path, a URL, or a `StoreSpec` (how Ray workers get an S3 root).
    ``on_file(rows)`` is called after each partition file is written (live progress; on object storage with
    overlapped uploads it may still be uploading: the ledger entry is recorded only once every upload finished).
    ``before_commit()`` is asked before the shard is recorded as done; False (the run that started this
    task lost the version's writer lock) fails the shard instead of recording it. ``encoding="compact"``
    stores corrupted examples as references into the clean scan (pipeline/format/compact.py). ``panels``: if given
    and this is the first block, filled with the contact-sheet panels of its first frame ((corruption,
    severity) → `bench_build.render.Panel`), painted from memory so the driver need not read the files back.
    ``numeric_profile``: the build's (`runtime.numeric.build_profile`), part of each partition's fingerprint.
    ``reused_files``: ledger file entries of the task's partitions that `run --reuse` already put in place (the
    spec then holds only the others); recorded with the built ones, so the ledger entry covers the whole task."""
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; use one of {', '.join(ENCODINGS)}")
    split = TaskSplit()
    t0, cpu0 = split.wall0, split.cpu0
    store = open_store(root)
    ledger = Ledger(store)
    frames: list[Frame] = []
    sources: dict[str, Any] = {}
    for fid in spec.frame_ids:
        try:
            sources[fid] = frame_identity(source, fid)  # before reading: a later change is then always seen
            frames.append(source.read(fid))
        except SourceError as e:
            raise ShardFailed(spec.name, f"frame {fid}: {e}", e.path) from None
    if recipe.preprocess is not None:
        frames = [_preprocess(spec, recipe, f) for f in frames]
    read_seconds = time.perf_counter() - t0
    split.add("read")
    try:
        try:
            return _write_shard(spec, recipe, source, store, ledger, fingerprint, run_id, frames, on_file,
                                (t0, cpu0), read_seconds, sources, before_commit, encoding, panels,
                                numeric_identity(numeric_profile), reused_files, split)
        finally:  # a task that failed mid-way drops its queued uploads and waits for the running one
            store.end_background_uploads()
    except ShardFailed:
        raise
    except AccessDenied as e:  # object storage refused a write: not the disk, not the input
        raise ShardFailed(spec.name, str(e), store.url, kind="permission") from None
    except OSError as e:  # disk full, quota, I/O error: name the cause and the file, not a traceback
        where = getattr(e, "bench_build_key", None) or error_path(e) or store.url
        raise ShardFailed(spec.name, os_error_message(e, where), where, kind=os_error_kind(e, where)) from None


def _write_shard(spec: BlockSpec, recipe: Recipe, source: Source, store: Store, ledger: Ledger, fingerprint: str,
                 run_id: str, frames: list[Frame], on_file: Callable[[int], None] | None, t0: tuple[float, float],
                 read_seconds: float, sources: dict[str, Any],
                 before_commit: Callable[[], bool] | None = None, encoding: str = "full",
                 panels: dict | None = None, numeric: dict[str, Any] | None = None,
                 reused_files: list[dict[str, Any]] | None = None,
                 split: TaskSplit | None = None) -> dict[str, Any]:
    split = split or TaskSplit()
    fields = frames[0].fields if frames else source.fields
    paint = _SheetPainter(frames[0], panels, source) if panels is not None and frames and _block_index(spec) == 0 \
        else None
    columns = build_columns(recipe, source)
    # no version and no build fingerprint in the footer (format change of 0.x): a file's bytes depend only on its
    # partition, so a later version whose partition is unchanged has the identical file and can reuse it
    base_meta = {
        "benchmark": recipe.name, "shard": spec.file_stem,
        "fields": list(fields), "intensity_scale": frames[0].intensity_scale if frames else source.intensity_scale,
        "columns": list(columns), "encoding": encoding,
    }
    digests = [identity_digest(sources.get(fid)) for fid in spec.frame_ids]
    files = []
    uploads = store.background_uploads()  # object storage: file k uploads while file k+1 is computed
    for corruption, severity, rel in spec.partitions(recipe):
        t = time.perf_counter()
        pfp = partition_fingerprint(recipe, corruption, severity, spec.file_stem, spec.frame_ids, digests,
                                    columns=columns, encoding=encoding, numeric=numeric)
        meta = {**base_meta, **partition_meta(recipe, corruption, severity), "partition_fingerprint": pfp}
        if corruption == CLEAN:

            def examples(corruption=corruption):
                for f in frames:
                    if paint is not None:
                        split.start()
                        paint(corruption, 0, f, f)
                        split.add("paint")
                    yield example_key(recipe.name, f.frame_id, corruption, 0), corruption, 0, f
        else:
            entry = recipe.corruption(corruption)

            def examples(corruption=corruption, severity=severity, entry=entry):
                for f in frames:
                    key = example_key(recipe.name, f.frame_id, corruption, severity)
                    split.start()
                    try:
                        out = entry.apply(f, severity, example_rng(recipe.seed, key))
                    except Exception as e:
                        raise ShardFailed(spec.name, f"stage {entry.stage} failed on {key}: "
                                          f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}") from e
                    split.add("compute")
                    if paint is not None:
                        paint(corruption, severity, f, out)
                        split.add("paint")
                    yield key, corruption, severity, out, (f if encoding == "compact" else None)
        schema = schema_with_metadata(meta)
        try:
            batches = record_batches(examples(), schema, split=split)
            rows, size, sha256 = write_parquet_atomic(rel, schema, batches, store, split)
        except OSError as e:
            e.bench_build_key = store.key_url(rel)  # type: ignore[attr-defined]  # the file, not its temp name
            raise
        files.append({"path": rel, "corruption": corruption, "severity": severity, "rows": rows,
                      "bytes": size, "sha256": sha256, "seconds": round(time.perf_counter() - t, 4),
                      "partition_fingerprint": pfp})
        if on_file is not None:
            on_file(rows)
    uploads.finish()  # every file is in place before the ledger says so (raises the first failed upload)
    entry = {"shard": spec.name, "fingerprint": fingerprint, "run_id": run_id, "frames": list(spec.frame_ids),
             "files": [*(reused_files or []), *files], "sources": sources, "read_seconds": round(read_seconds, 4),
             "seconds": round(time.perf_counter() - t0[0], 4), "pid": os.getpid(),
             # CPU time of the worker process for this task (all its threads): what `bench` extrapolates from
             "cpu_seconds": round(time.process_time() - t0[1], 4),
             # the process's CPU time when the task started: the smallest per pid marks its first task, which
             # also paid the process's one-off warm-up (imports, numba's cached code)
             "process_cpu_start": round(t0[1], 4),
             **({"sheet_cpu_seconds": round(paint.cpu_seconds, 4)} if paint is not None else {}),
             # where the task's wall time went (`TaskSplit`) and the threads its process ran at its end
             "split": split.record(), "split_cpu": {k: round(v, 4) for k, v in split.cpu.items()},
             "threads": process_threads(), "started": round(time.time() - (time.perf_counter() - t0[0]), 3),
             # object storage: CPU of the threads that uploaded this task's files (part of cpu_seconds)
             **({"upload_cpu_seconds": round(store.upload_cpu_seconds, 4)} if not store.is_local else {})}
    if before_commit is not None and not before_commit():
        raise ShardFailed(spec.name, "superseded: the run that started this task no longer holds the version's "
                                     "writer lock; not recorded", kind="superseded")
    ledger.record_done(spec.name, entry)
    return entry
