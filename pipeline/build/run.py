"""`bench-build run`: recipe → plan → ledger filter → Ray tasks (`execute`) → manifest + dataset card (`finish`)."""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_build.build.execute import execute
from bench_build.build.finish import EarlySheet, finish
from bench_build.build.ledger import Ledger, LedgerMismatch, LedgerUnreadable
from bench_build.build.progress import BuildProgress
from bench_build.build.reuse import open_earlier, place_files, plan_reuse
from bench_build.build.shard import os_error_message
from bench_build.errors import WROTE, UsageError
from bench_build.format.writer import ENCODINGS, parquet_format
from bench_build.manifests.manifest import MANIFEST_NAME, is_version_dir, versions_in
from bench_build.manifests.recipe import Recipe, load_recipe, refuse_output_folder
from bench_build.plan.costs import load_costs
from bench_build.plan.tasks import BlockSpec, TaskSpec, plan_shards, task_groups
from bench_build.runtime.numeric import build_profile, profile_differences
from bench_build.runtime.ray import (
    MAX_LOCAL_CPUS,
    init_ray,
    local_raylet,
    missing_packages_message,
    missing_task_packages,
    stop_ray,
    stop_ray_in_background,
    unreachable,
)
from bench_build.sources import OBJECT_KINDS, checked_frame_ids, open_source
from bench_build.sources.base import point_labels_missing
from bench_build.storage import LocalStore, StorageError, Store, open_store, redact

DEMO_FRAMES = 8
DEMO_FRAMES_PER_SHARD = 2  # so the 8-frame demo has 4 shards to spread over workers
DEMO_OBJECTS_PER_SHARD = 16  # demo object sets hold 75–855 small shapes: 5–54 shards


@dataclass
class BuildResult:
    version_dir: Path | str  # a local path, or the URL of a version on object storage
    shards_total: int  # tasks: blocks (shards) × task groups per block
    shards_skipped: int  # already done in the ledger
    shards_built: list[str] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    failure_kinds: dict[str, str] = field(default_factory=dict)  # "input", "resource", "permission", "internal" …
    manifest: dict[str, Any] | None = None
    seconds: float = 0.0
    groups: int = 1  # task groups per block: each shard is built by this many tasks
    validation: dict[str, Any] | None = None  # per corruption, when the recipe has [validate]
    # contact-sheet panels of the first frame, painted by the tasks that built it ((corruption, severity) → Panel)
    sheet_panels: dict[tuple[str, int], Any] = field(default_factory=dict, repr=False)
    # wall seconds of the driver's phases (plan, ray_start, tasks, manifest, contact_sheet, validate)
    phases: dict[str, float] = field(default_factory=dict)
    # --reuse: what this run took from the earlier version instead of computing it
    reused: dict[str, Any] | None = None
    # worker pid → unix time its first task of this run started (`phases["worker_start"]`: their median after
    # the tasks phase began, what `plan` models as a worker's start)
    first_task_starts: dict[int, float] = field(default_factory=dict, repr=False)
    early_sheet: Any = field(default=None, repr=False)  # `finish.EarlySheet`: the sheet drawn while tasks run
    node_died: str | None = None  # the local raylet died during the tasks: why (Ray is then stopped in the foreground)
    kept: bool = False  # nothing to do: the version an earlier run finished was left byte for byte as it was
    strays: list[str] = field(default_factory=list)  # Parquet files in the version its manifest does not list

    @property
    def ok(self) -> bool:
        return not self.failures and self.manifest is not None


def default_frames_per_shard(recipe: Recipe, *, demo: bool) -> int:
    """Frames per block when ``--frames-per-shard`` is not given: the recipe's, or for demo data small blocks
    (the demo's few frames or shapes still spread over workers)."""
    if not demo:
        return recipe.frames_per_shard
    return DEMO_OBJECTS_PER_SHARD if recipe.source in OBJECT_KINDS else DEMO_FRAMES_PER_SHARD


def build_fingerprint(recipe: Recipe, frame_ids: list[str], *, frames_per_shard: int,
                      encoding: str = "full") -> str:
    """A build's fingerprint, as its ledger, manifest and card record it: `Recipe.fingerprint` over the frames
    plus what decides the bytes besides the recipe: the shard size, the encoding (when not ``full``) and the
    Parquet writer options. ``frames_per_shard`` is the build's (a demo build's default is 2, 16 for objects)."""
    return recipe.fingerprint([*frame_ids, f"frames_per_shard={frames_per_shard}",
                               *([f"encoding={encoding}"] if encoding != "full" else []),
                               f"parquet={parquet_format()}"])


def run_build(
    benchmark: str,
    *,
    source: str | None = None,
    out: str | Path | None = None,
    workers: int | None = None,
    address: str | None = None,
    max_frames: int | None = None,
    split: str | None = None,
    frames_per_shard: int | None = None,
    overwrite: bool = False,
    recheck: str = "sha256",
    progress: bool = True,
    endpoint_url: str | None = None,
    profile: str | None = None,
    roots: dict[str, str] | None = None,
    allow_empty_frames: bool = False,
    groups: int | None = None,
    encoding: str = "full",
    reuse: str | Path | None = None,
    after: Callable[..., dict[str, Any]] | None = None,
) -> BuildResult:
    """Build (or resume) ``benchmark`` into ``OUT/<benchmark>/<version>``; ``out`` is a path, file:// or s3:// URL.

    ``roots`` names the dataset roots of a composite source (3dos: shapenet, modelnet40, scanobjectnn).
    ``reuse``: an earlier version of the benchmark (directory or URL) whose files with this build's partition
    fingerprints are taken instead of computed (`bench_build.build.reuse`). ``after(version_dir, recipe,
    workers=, address=)``: run once the manifest is written, its result kept as ``result.validation``; the CLI
    passes `bench_build.validate.validate_after_build` for a recipe with ``[validate]`` (the build layer knows
    nothing of validation)."""
    t0 = time.time()
    for name, value in (("max_frames", max_frames), ("frames_per_shard", frames_per_shard), ("workers", workers)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise UsageError(f"{name} must be a positive integer, got {value!r}")
    if workers is not None and workers > MAX_LOCAL_CPUS:
        raise UsageError(f"--workers {workers}: a local Ray takes at most {MAX_LOCAL_CPUS:,} CPUs (Ray's limit); "
                         f"it is the count of worker processes, best this machine's {os.cpu_count() or 1}")
    for name, value in (("out", out), ("source", source), ("reuse", reuse)):
        if value == "":  # an unset variable: read as a path, "" is the working directory (the CLI refuses it too)
            raise UsageError(f"{name} is an empty string, which would mean the working directory ({os.getcwd()}); "
                             "give a path (. for the working directory)")
    if recheck not in ("sha256", "size"):
        raise UsageError(f"recheck must be 'sha256' or 'size', got {recheck!r}")
    if encoding not in ENCODINGS:  # refused before anything is written: a ledger of a build that cannot run
        raise UsageError(f"encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    if missing := missing_task_packages():  # the tasks would each fail on it: refused before anything is written
        raise UsageError(missing_packages_message(missing))
    root = open_store(out or "bench-out", endpoint_url=endpoint_url, profile=profile)
    if isinstance(root, LocalStore):  # --out in a version, a file, or where nothing can be made: refused (exit 2)
        refuse_out_in_a_version(root.root)  # before the source is read or Ray starts; first, so that the
        root.refuse_unwritable("--out")  # probe file of this check never goes into a version
    refuse_output_folder(Path(benchmark), "run")
    recipe = load_recipe(benchmark)
    load_costs(recipe)  # a table that does not price the recipe: refused (exit 2) before the version's lock is made
    if address and (why := unreachable(address)):  # Ray would retry it for ever, after the ledger was written
        raise UsageError(why)
    earlier = None
    if reuse is not None:  # refused (exit 2) before the source is read or anything is written

        earlier = open_earlier(reuse, recipe, endpoint_url=endpoint_url, profile=profile)
    demo = source is None and not any((roots or {}).values())
    src = open_source(recipe, source, split=split, demo_frames=DEMO_FRAMES, roots=roots,
                      allow_empty=allow_empty_frames)
    frame_ids = checked_frame_ids(src, src.list_frames())
    other_split = split is not None and recipe.split is not None and split.rpartition(":")[2] != recipe.split
    if other_split:  # allowed, but said at once and in the card: its numbers are not the benchmark's
        print(f"[bench-build] building split {split!r}, not {recipe.name}'s benchmark split {recipe.split!r} "
              f"(--split); the card says so", file=sys.stderr, flush=True)
    if max_frames is not None:
        frame_ids = frame_ids[:max_frames]
    if not frame_ids:
        raise UsageError(f"source {src.describe()} has no frames")
    if (uses := recipe.label_stages()) and (missing := point_labels_missing(src)):  # each task would fail on it
        raise UsageError(f"{recipe.name}'s {' and '.join(uses)} read{'s' if len(uses) == 1 else ''} per-point semantic "
                         f"labels, but {missing}")

    fps = frames_per_shard if frames_per_shard is not None else default_frames_per_shard(recipe, demo=demo)
    fingerprint = build_fingerprint(recipe, frame_ids, frames_per_shard=fps, encoding=encoding)
    store = root.child(f"{recipe.name}/{recipe.version}")
    if isinstance(store, LocalStore):  # OUT/<benchmark> may be a file too
        store.refuse_non_directory("the version directory under --out,")
    Ledger(store).refuse_blocked()  # a file at _ledger/shards: no task could be recorded, not even as failed
    version_dir: Path | str = store.root if isinstance(store, LocalStore) else store.url
    specs = plan_shards(frame_ids, fps)
    # one writer per version: a second run (or --overwrite) while this one runs is refused, naming it
    with contextlib.ExitStack() as held:
        try:
            owner = held.enter_context(store.writer_lock("bench-build run"))
        except OSError as e:  # under /proc, a read-only disk, no permission: before the ledger, so exit 2
            raise StorageError(f"--out {out or 'bench-out'}: cannot write in the version directory {version_dir} "
                               f"({os_error_message(e)}); nothing was written") from None
        # temp files of killed earlier runs: a dead process's of this host, and any unchanged for TEMP_IDLE (the
        # lock is ours, so no other run writes here: a temp of another host's writer that idle is a dead one's)
        if removed := store.remove_dead_temps(owner):
            print(f"[bench-build] removed {removed} temp file{'s' if removed != 1 else ''} of dead writers "
                  f"under {version_dir}", file=sys.stderr, flush=True)
        return build_locked(recipe, src, frame_ids, fps, fingerprint, store, version_dir, specs, t0,
                             workers=workers, address=address, overwrite=overwrite, recheck=recheck,
                             progress=progress, owner=owner, groups=groups, encoding=encoding,
                             benchmark_split=recipe.split if other_split else None, earlier=earlier,
                             after=after)


def refuse_out_in_a_version(out: Path) -> None:
    """`UsageError` for an --out that is a version folder, lies inside one, or is a benchmark's folder (it holds
    versions): the build would go to OUT/<benchmark>/<version> inside it, where `verify` of that version finds the
    files its manifest does not list and a glob reader (pandas, DuckDB) reads their rows with its own."""
    full = Path(os.path.abspath(out))
    for p in (full, *full.parents):
        with contextlib.suppress(OSError):  # an unreadable folder: not known as a version, its mkdir says more
            if is_version_dir(p):
                raise UsageError(f"--out {out}: {p} is a version folder, and the build would go inside it; --out is "
                                 f"the output root the build goes under (OUT/<benchmark>/<version>): --out "
                                 f"{p.parent.parent}")
    if versions := versions_in(full):
        raise UsageError(f"--out {out} is a benchmark's folder (versions {', '.join(versions)}), and the build would "
                         f"go inside it; --out is the output root the build goes under (OUT/<benchmark>/<version>): "
                         f"--out {full.parent}")


def build_locked(recipe: Recipe, src: Any, frame_ids: list[str], fps: int, fingerprint: str,
                  store: Store, version_dir: Path | str, specs: list[BlockSpec], t0: float, *,
                  workers: int | None, address: str | None, overwrite: bool, recheck: str,
                  progress: bool, owner: dict[str, Any] | None = None,
                  groups: int | None = None, encoding: str = "full",
                  benchmark_split: str | None = None, earlier: Any = None,
                  after: Callable[..., dict[str, Any]] | None = None) -> BuildResult:
    """``benchmark_split``: the recipe's split when ``--split`` chose another one (recorded in the manifest's
    source, so the card says the build is not the benchmark's split)."""
    ledger = Ledger(store)
    try:
        old_run = ledger.run_info()
    except LedgerUnreadable:
        if not overwrite:
            raise
        old_run = None  # --overwrite starts the version over (begin clears the damaged ledger)
    profile = build_profile()
    if numeric_profile_changed(old_run, fingerprint, profile, overwrite, version_dir):
        ledger.clear()  # --overwrite of a build started under another numeric profile: start it over
        old_run = None
    # a local Ray's size is known: split only as far as it shortens the build; a cluster gets the cost-sized split
    cut = task_groups(recipe, fps, groups, old_run, fingerprint, overwrite,
                      shards=specs, workers=None if address else (workers or os.cpu_count() or 1))
    tasks = [TaskSpec(s, g, len(cut), parts) for s in specs for g, parts in enumerate(cut)]
    ledger.begin({"fingerprint": fingerprint, "recipe": recipe.canonical(), "source": src.describe(),
                  "frames": frame_ids, "frames_per_shard": fps, "shards": len(specs),
                  "task_groups": [[list(p) for p in grp] for grp in cut], "numeric_profile": profile,
                  "parquet_format": parquet_format()},
                 overwrite=overwrite)
    try:
        return _build_begun(recipe, src, frame_ids, fps, fingerprint, store, version_dir, t0, ledger, tasks, cut,
                            workers=workers, address=address, recheck=recheck, progress=progress, owner=owner,
                            encoding=encoding, benchmark_split=benchmark_split, earlier=earlier, after=after,
                            profile=profile)
    except Exception as e:  # the ledger is written: not "refused, nothing written" (exit 2), whatever its type
        setattr(e, WROTE, True)
        raise


def _build_begun(recipe: Recipe, src: Any, frame_ids: list[str], fps: int, fingerprint: str, store: Store,
                 version_dir: Path | str, t0: float, ledger: Ledger, tasks: list[TaskSpec], cut: Any, *,
                 workers: int | None, address: str | None, recheck: str, progress: bool,
                 owner: dict[str, Any] | None, encoding: str, benchmark_split: str | None, earlier: Any,
                 after: Callable[..., dict[str, Any]] | None, profile: dict[str, Any]) -> BuildResult:
    """`build_locked` once the ledger is begun: the tasks the ledger lacks, Ray, the finish."""
    pending, redo = [], []
    failed_keys = ledger.failed_keys()  # one listing, not a look-up per task
    for t in tasks:
        ok, why = ledger.check_done(t.name, fingerprint, recheck, src, refresh_times=True, failed_keys=failed_keys)
        if not ok:
            pending.append(t)
            if why != "not built":  # a task the ledger holds as done is computed again: say why, and its entry
                redo.append(f"{t.name}: {why}")  # goes, so a rebuild that fails leaves it failed, not done
                ledger.forget_done(t.name)
    for line in redo[:5]:
        print(f"[bench-build] building again {line}", file=sys.stderr, flush=True)
    if len(redo) > 5:
        print(f"[bench-build] … and {len(redo) - 5} more tasks recorded as done are built again", file=sys.stderr,
              flush=True)
    if pending:  # the version is being (re)built: no manifest may point at files that are changing
        store.delete(MANIFEST_NAME)
    result = BuildResult(version_dir, len(tasks), len(tasks) - len(pending), groups=len(cut))
    reused_files: dict[str, list[dict[str, Any]]] = {}
    if earlier is not None:
        pending, reused_files = take_reused(earlier, recipe, src, pending, store, ledger, fingerprint, result,
                                             encoding, profile)
    result.phases["plan"] = round(time.time() - t0, 3)
    bar = BuildProgress(total=len(frame_ids) * recipe.examples_stored(1), enabled=progress)
    pending_names = {t.name for t in pending}
    bar.advance(sum(len(t.frame_ids) * len(t.parts) for t in tasks if t.name not in pending_names))
    stopping = None
    if pending:
        result.early_sheet = EarlySheet(recipe, tasks)
        t = time.time()
        started = init_ray(workers, address)
        result.phases["ray_start"] = round(time.time() - t, 3)
        t = time.time()
        try:
            execute(pending, recipe, src, store, fingerprint, result, bar, owner, encoding,
                     raylet=local_raylet() if started and not address else None, numeric_profile=profile,
                     pinned_by_env=started and not address, reused_files=reused_files)
        finally:
            bar.close()
            result.phases["tasks"] = round(time.time() - t, 3)
            if result.first_task_starts:
                result.phases["worker_start"] = round(statistics.median(result.first_task_starts.values()) - t, 3)
            if started and not result.failures and result.node_died is None and sys.exc_info()[0] is None:
                stopping = stop_ray_in_background()  # Ray stops (≈ 0.3 s) while the manifest and card are written
            elif started:  # a failed run, or one whose raylet died, stops Ray in the foreground: after that
                # death, a stop racing the manifest could end this process midway (`hold_until_stopped`)
                stop_ray()
    else:
        bar.close()
    t = time.time()
    sheet = result.early_sheet  # `finish` lets go of it; a failed build never took it
    try:
        return finish(recipe, src, frame_ids, fps, fingerprint, store, version_dir, tasks, t0, ledger, result,
                      workers=workers, address=address, stopping=stopping, numeric_profile=profile,
                      benchmark_split=benchmark_split, after=after)
    finally:
        if sheet is not None:  # its drawing ends before the build returns, built or not
            sheet.wait()
        if stopping is not None:
            stopping.join()
        # the driver after its last task, Ray's stop included: what `plan` models as the finish
        result.phases["finish"] = round(time.time() - t - result.phases.get("validate", 0.0), 3)


def take_reused(earlier: Any, recipe: Recipe, src: Any, pending: list[TaskSpec], store: Store, ledger: Ledger,
                 fingerprint: str, result: BuildResult, encoding: str,
                 profile: dict[str, Any]) -> tuple[list[TaskSpec], dict[str, list[dict[str, Any]]]]:
    """Put the earlier version's files with this build's partition fingerprints in place (verified by sha256) and
    return (the tasks still to run, reduced to their new partitions; task name → its reused ledger file entries).
    A task left with nothing to build is recorded done in the ledger here, its files marked ``reused_from``, so a
    killed run resumes past it like past a built task. Its ledger name stays the full task's name."""

    t0 = time.time()
    plan = plan_reuse(earlier, recipe, src, pending, encoding=encoding, numeric_profile=profile)
    still, carry = [], {}
    how: dict[str, int] = {}  # linked / server-side / copied / kept (in place from a killed earlier run)
    for t in pending:
        if t.name not in plan.reused:
            still.append(t)
            continue
        files = place_files(plan, t.name, store)
        for f in files:
            how[f["placed"]] = how.get(f["placed"], 0) + 1
        rest = plan.remaining[t.name]
        if rest is None:
            ledger.record_done(t.name, {"shard": t.name, "fingerprint": fingerprint, "run_id": "reuse",
                                        "frames": list(t.frame_ids), "files": files,
                                        "sources": {fid: plan.identities.get(fid) for fid in t.frame_ids},
                                        "read_seconds": 0.0, "seconds": 0.0, "cpu_seconds": 0.0,
                                        "reused_from": earlier.manifest["version"]})
        else:
            still.append(rest)
            carry[t.name] = files
    result.reused = {"from": earlier.label, "where": redact(earlier.where), "files": plan.files,
                     "bytes": plan.bytes, "tasks_skipped": len(pending) - len(still), "placed": how,
                     "seconds": round(time.time() - t0, 3)}
    result.phases["reuse"] = round(time.time() - t0, 3)
    return still, carry


def numeric_profile_changed(old_run: dict[str, Any] | None, fingerprint: str, profile: dict[str, Any],
                             overwrite: bool, version_dir: Path | str) -> bool:
    """True if the build in progress was started under another numeric profile and ``overwrite`` starts it over;
    without ``overwrite`` that is refused (LedgerMismatch, exit 2): its done shards and this run's could differ in
    bytes for the same keys. A ledger from before profiles were recorded is resumed (and gets this one)."""
    if old_run is None or old_run.get("fingerprint") != fingerprint or not old_run.get("numeric_profile"):
        return False
    diffs = profile_differences(old_run["numeric_profile"], profile)
    if not diffs:
        return False
    if overwrite:
        return True
    raise LedgerMismatch(
        f"{version_dir} was started under another numeric profile ({'; '.join(diffs)}): resuming it here could mix "
        "shards whose bytes differ for the same keys. Resume it with the image and environment it started with, "
        "or pass --overwrite to rebuild it from scratch (README: Reproducibility across machines)")

