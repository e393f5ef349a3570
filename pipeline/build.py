"""`bench-build run`: recipe → plan → ledger filter → Ray shards → manifest + dataset card.

The driver never touches point data: Ray tasks read frames, run the stages and write Parquet
themselves, and return only their small ledger entries. At most ``2 × workers`` tasks are in
flight, so the driver's memory stays flat whatever the dataset size.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from manifests.card import card_with_renders, render_card
from manifests.card_sections import complete_card
from manifests.manifest import MANIFEST_NAME, MANIFEST_VERSION
from manifests.recipe import Recipe, load_recipe
from pipeline import __version__
from pipeline.costs import load_costs
from pipeline.ledger import Ledger, LedgerMismatch, LedgerUnreadable, identity_digest
from pipeline.numeric import build_profile, check_profile, profile_differences, worker_env
from pipeline.plan import ShardSpec, TaskSpec, group_partitions, groups_for, plan_shards
from pipeline.progress import BuildProgress, ProgressCounter
from pipeline.schema import SCHEMA_VERSION
from pipeline.shard import ShardFailed, build_shard, os_error_message, parquet_format, partition_table
from pipeline.sources import checked_frame_ids, open_source
from pipeline.storage import LocalStore, Store, StoreSpec, open_store, redact

DEMO_FRAMES = 8
DEMO_FRAMES_PER_SHARD = 2  # so the 8-frame demo has 4 shards to spread over workers
DEMO_OBJECTS_PER_SHARD = 16  # demo object sets hold 75–855 small shapes: 5–54 shards
RAYLET_GONE_GRACE_S = 2.0  # after the local raylet died: time for its workers to exit before the ledger is read


@dataclass
class BuildResult:
    version_dir: Path | str  # a local path, or the URL of a version on object storage
    shards_total: int
    shards_skipped: int  # already done in the ledger
    shards_built: list[str] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    failure_kinds: dict[str, str] = field(default_factory=dict)  # "input", "resource" or "internal"
    manifest: dict[str, Any] | None = None
    seconds: float = 0.0
    validation: dict[str, Any] | None = None  # per corruption, when the recipe has [validate]
    # contact-sheet panels of the first frame, painted by the tasks that built it ((corruption, severity) → Panel)
    sheet_panels: dict[tuple[str, int], Any] = field(default_factory=dict, repr=False)
    # wall seconds of the driver's phases (plan, ray_start, tasks, manifest, contact_sheet, validate)
    phases: dict[str, float] = field(default_factory=dict)
    # --reuse: what this run took from the earlier version instead of computing it
    reused: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.failures and self.manifest is not None


def _run_shard(spec: ShardSpec, recipe: Recipe, source: Any, root: StoreSpec, fingerprint: str, run_id: str,
               counter: Any = None, owner: dict[str, Any] | None = None, encoding: str = "full",
               numeric_profile: dict[str, Any] | None = None,
               reused_files: list[dict[str, Any]] | None = None) -> dict:
    """Ray task body: build one shard, or record why it failed. Never raises for bad input.

    ``root`` is a secret-free `StoreSpec`: a worker reads credentials from its own AWS chain. ``owner`` is
    the driver's writer-lock record: a task whose run is over (driver dead, lock taken over) writes nothing,
    so a killed run's surviving workers never race the next run. ``numeric_profile``: the build's
    (`pipeline.numeric.build_profile`); a worker computing under another one (a node whose NumPy still dispatches
    AVX-512, other library versions …) fails the shard, naming the node and the difference, and writes nothing."""
    store = open_store(root)
    if owner is not None and not store.still_writer(owner):
        return {"shard": spec.name, "ok": False, "error": "superseded: the run that started this task no longer "
                "holds the version's writer lock", "kind": "resource"}
    ledger = Ledger(store)
    mismatch = check_profile(numeric_profile)
    if mismatch is not None:
        _record_failure(ledger, spec.name, {"shard": spec.name, "error": mismatch, "kind": "resource",
                                            "run_id": run_id})
        return {"shard": spec.name, "ok": False, "error": mismatch, "kind": "resource"}
    on_file = None
    panels: dict = {}
    if counter is not None:
        counter.start.remote(spec.name)

        def on_file(rows: int) -> None:
            counter.add.remote(spec.name, rows)
    try:
        _test_kill_point("before-record", spec.name)
        entry = build_shard(spec, recipe, source, store, fingerprint, run_id, on_file,
                            before_commit=None if owner is None else lambda: store.still_writer(owner),
                            encoding=encoding, panels=panels, numeric_profile=numeric_profile,
                            reused_files=reused_files)
        _test_kill_point("after-record", spec.name)
        return {"shard": spec.name, "ok": True, "entry": entry, **({"panels": panels} if panels else {})}
    except ShardFailed as e:
        if e.kind == "superseded":  # this run is over: write nothing more into the version
            return {"shard": spec.name, "ok": False, "error": e.message, "kind": "resource"}
        _record_failure(ledger, spec.name, {"shard": spec.name, "error": e.message, "path": e.path,
                                            "kind": e.kind, "run_id": run_id})
        return {"shard": spec.name, "ok": False, "error": e.message, "kind": e.kind}


TEST_KILL_ENV = "BENCH_BUILD_TEST_KILL"


def _test_kill_point(moment: str, task: str) -> None:
    """Fault injection for the reliability tests, inert unless ``BENCH_BUILD_TEST_KILL`` is set.

    ``BENCH_BUILD_TEST_KILL="before-record:part-00001-of-00003,after-record:part-00000-of-00003"`` SIGKILLs the
    Ray worker running that task at that moment (before it builds anything / right after the ledger recorded
    it as done), on every attempt, so Ray's retries run out. Workers of a local Ray inherit the driver's
    environment, which is how a `bench-build run` subprocess passes it on."""
    wanted = os.environ.get(TEST_KILL_ENV)
    if wanted and f"{moment}:{task}" in wanted.split(","):
        os.kill(os.getpid(), signal.SIGKILL)


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _record_failure(ledger: Ledger, shard: str, entry: dict[str, Any]) -> None:
    """Record a failed shard in the ledger; if even that fails (the disk is full), say so on stderr and go on:
    recording a failure must never turn into a crash of its own."""
    try:
        ledger.record_failed(shard, entry)
    except Exception as e:
        print(f"[bench-build] could not record the failure of {shard} in the ledger "
              f"({os_error_message(e) if isinstance(e, OSError) else redact(str(e))}); it was: {entry['error']}",
              file=sys.stderr, flush=True)


def _ledger_read(ledger: Ledger, shard: str) -> dict[str, Any] | None:
    try:
        return ledger.done_entry(shard)
    except Exception:  # unreadable (e.g. the store is gone): not done
        return None


def describe_task_error(e: BaseException) -> tuple[str, str]:
    """(one line naming the root cause, kind) of an exception ``ray.get`` raised for a shard task.

    kind: "resource" (disk, memory, a dead worker or node: the input is fine) or "internal"."""
    import ray.exceptions as rx

    for _ in range(5):  # unwrap RayTaskError(OSError) → the OSError raised in the worker
        cause = getattr(e, "cause", None)
        if isinstance(e, rx.RayTaskError) and isinstance(cause, BaseException) and cause is not e:
            e = cause
        else:
            break
    if isinstance(e, OSError):
        return os_error_message(e), "resource"
    if isinstance(e, rx.OutOfMemoryError):
        return "worker killed by Ray's memory monitor (out of memory; retries exhausted)", "resource"
    if isinstance(e, rx.OutOfDiskError):
        return "Ray's local disk is full (object store spilling); retries exhausted", "resource"
    if isinstance(e, rx.NodeDiedError | rx.LocalRayletDiedError | rx.OwnerDiedError | rx.ObjectLostError):
        return f"Ray node died ({type(e).__name__}): the raylet or the machine running the shard is gone", "resource"
    if isinstance(e, rx.WorkerCrashedError):
        return "worker died (retries exhausted): its process exited unexpectedly (killed, out of memory or " \
               "crashed in native code)", "resource"
    if isinstance(e, rx.RaySystemError | rx.TaskCancelledError | rx.ActorDiedError):
        return f"Ray failure ({type(e).__name__}): {_first_line(str(e))}", "resource"
    if isinstance(e, rx.RayTaskError):  # an exception in the task body that is not an OSError
        cause = getattr(e, "cause", None)
        text = f"{type(cause).__name__}: {cause}" if cause is not None else str(e)
        return redact(_first_line(text)), "internal"
    return redact(_first_line(f"{type(e).__name__}: {e}")), "internal"


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in ANSI.sub("", text).splitlines() if ln.strip()]
    return lines[0] if lines else ""


def init_ray(workers: int | None, address: str | None) -> bool:
    """Start (or join) Ray; return True if this call started it (so the caller shuts it down).

    Every worker must start with the numeric pin (`worker_env`) in its environment. Joining a cluster, the pin
    travels in the job's ``runtime_env`` (its nodes were started elsewhere). A local Ray started here gets it by
    inheritance instead: its raylet, and so every worker, inherits this process's environment at ``ray.init``,
    so the pin is put there for the duration of the call (the caller's environment is restored). A job
    ``runtime_env`` would make Ray start the job's workers through its runtime-env agent rather than from its
    prestarted pool: measured here, ≈ 0.9 s more before the first task runs, on every build."""
    if "ray" not in sys.modules and not sys.stdout.isatty():
        # a log file: Ray's forwarded worker/raylet lines without colour codes. Its de-duplicated lines end in a
        # green "[repeated Nx across cluster]" whatever RAY_COLOR_PREFIX says, so a log keeps every line
        # instead (both read by Ray when first imported; a user's own setting wins)
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True, "configure_logging": False}
    with _keep_sigterm_handler():
        return _init_ray(ray, workers, address, kwargs)


class _DropTokenNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Token authentication is enabled for this Ray cluster")


def _quiet_token_notice() -> None:
    log = logging.getLogger("ray._private.authentication.authentication_token_setup")
    if not any(isinstance(f, _DropTokenNotice) for f in log.filters):
        log.addFilter(_DropTokenNotice())


@contextlib.contextmanager
def _keep_sigterm_handler():
    """ray.init installs its core worker's SIGTERM handler (it prints and dies), replacing the caller's: the CLI's
    turns SIGTERM into the interrupt path that stops Ray and says how to resume. Put a Python handler back."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if callable(previous) and previous is not signal.default_int_handler:
            signal.signal(signal.SIGTERM, previous)


def _init_ray(ray: Any, workers: int | None, address: str | None, kwargs: dict[str, Any]) -> bool:
    if address:
        # every worker of the job, on any node, starts with the numeric pin (before NumPy)
        ray.init(address=address, runtime_env={"env_vars": worker_env()}, **kwargs)
    else:
        from pipeline import reaper

        before = set(reaper.children(os.getpid()))
        # Ray 2.60 turns token authentication on for a new local cluster (a token made once in ~/.ray) and logs a
        # notice saying so on every run: the protection stays, the notice goes
        _quiet_token_notice()
        # "local": always a fresh instance — without it ray.init() joins any `ray start` cluster on this machine
        with _environ(worker_env()):
            ray.init(address="local", num_cpus=workers if workers is not None else os.cpu_count() or 1, **kwargs)
        # Ray's agents outlive a kill -9 of this driver by a minute; a watcher reaps them (pipeline/reaper.py)
        reaper.start(sorted(set(reaper.children(os.getpid())) - before))
    return True


@contextlib.contextmanager
def _environ(values: dict[str, str]):
    """``values`` in ``os.environ`` inside the block (for the processes it starts), the old values after."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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
) -> BuildResult:
    """Build (or resume) ``benchmark`` into ``OUT/<benchmark>/<version>``; ``out`` is a path, file:// or s3:// URL.

    ``roots`` names the dataset roots of a composite source (3dos: shapenet, modelnet40, scanobjectnn).
    ``reuse``: an earlier version of the benchmark (directory or URL) whose files with this build's partition
    fingerprints are taken instead of computed (`pipeline.reuse`)."""
    t0 = time.time()
    for name, value in (("max_frames", max_frames), ("frames_per_shard", frames_per_shard), ("workers", workers)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if recheck not in ("sha256", "size"):
        raise ValueError(f"recheck must be 'sha256' or 'size', got {recheck!r}")
    root = open_store(out or "bench-out", endpoint_url=endpoint_url, profile=profile)
    if isinstance(root, LocalStore):  # --out a file: refused (exit 2) before the source is read or Ray starts
        root.refuse_non_directory("--out")
    recipe = load_recipe(benchmark)
    earlier = None
    if reuse is not None:  # refused (exit 2) before the source is read or anything is written
        from pipeline.reuse import open_earlier

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
        raise ValueError(f"source {src.describe()} has no frames")
    from pipeline.sources import OBJECT_KINDS

    demo_fps = DEMO_OBJECTS_PER_SHARD if recipe.source in OBJECT_KINDS else DEMO_FRAMES_PER_SHARD
    fps = frames_per_shard if frames_per_shard is not None else (
        demo_fps if demo else recipe.frames_per_shard)
    # what decides the bytes besides the recipe and frames: shard size, encoding, Parquet writer options
    fingerprint = recipe.fingerprint([*frame_ids, f"frames_per_shard={fps}",
                                      *([f"encoding={encoding}"] if encoding != "full" else []),
                                      f"parquet={parquet_format()}"])
    store = root.child(f"{recipe.name}/{recipe.version}")
    if isinstance(store, LocalStore):  # OUT/<benchmark> may be a file too
        store.refuse_non_directory("the version directory under --out,")
    version_dir: Path | str = store.root if isinstance(store, LocalStore) else store.url
    specs = plan_shards(frame_ids, fps)
    # one writer per version: a second run (or --overwrite) while this one runs is refused, naming it
    with store.writer_lock("bench-build run") as owner:
        store.remove_dead_temps()  # temp files of killed earlier runs; a live writer's are never touched
        return _build_locked(recipe, src, frame_ids, fps, fingerprint, store, version_dir, specs, t0,
                             workers=workers, address=address, overwrite=overwrite, recheck=recheck,
                             progress=progress, owner=owner, groups=groups, encoding=encoding,
                             benchmark_split=recipe.split if other_split else None, earlier=earlier)


def _build_locked(recipe: Recipe, src: Any, frame_ids: list[str], fps: int, fingerprint: str,
                  store: Store, version_dir: Path | str, specs: list[ShardSpec], t0: float, *,
                  workers: int | None, address: str | None, overwrite: bool, recheck: str,
                  progress: bool, owner: dict[str, Any] | None = None,
                  groups: int | None = None, encoding: str = "full",
                  benchmark_split: str | None = None, earlier: Any = None) -> BuildResult:
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
    if _numeric_profile_changed(old_run, fingerprint, profile, overwrite, version_dir):
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

    pending = [t for t in tasks if not ledger.check_done(t.name, fingerprint, recheck, src)[0]]
    if pending:  # the version is being (re)built: no manifest may point at files that are changing
        store.delete(MANIFEST_NAME)
    result = BuildResult(version_dir, len(tasks), len(tasks) - len(pending))
    reused_files: dict[str, list[dict[str, Any]]] = {}
    if earlier is not None:
        pending, reused_files = _take_reused(earlier, recipe, src, pending, store, ledger, fingerprint, result,
                                             encoding, profile)
    result.phases["plan"] = round(time.time() - t0, 3)
    bar = BuildProgress(total=len(frame_ids) * recipe.examples_stored(1), enabled=progress)
    pending_names = {t.name for t in pending}
    bar.advance(sum(len(t.frame_ids) * len(t.parts) for t in tasks if t.name not in pending_names))
    stopping = None
    if pending:
        t = time.time()
        started = init_ray(workers, address)
        result.phases["ray_start"] = round(time.time() - t, 3)
        t = time.time()
        try:
            _execute(pending, recipe, src, store, fingerprint, result, bar, owner, encoding,
                     raylet=_local_raylet() if started and not address else None, numeric_profile=profile,
                     pinned_by_env=started and not address, reused_files=reused_files)
        finally:
            bar.close()
            result.phases["tasks"] = round(time.time() - t, 3)
            if started and not result.failures and sys.exc_info()[0] is None:
                stopping = _stop_ray_in_background()  # Ray stops (≈ 1 s) while the manifest and card are written
            elif started:  # a failed run (a dead raylet …) stops Ray in the foreground, as it always did
                import ray

                ray.shutdown()
    else:
        bar.close()
    try:
        return _finish(recipe, src, frame_ids, fps, fingerprint, store, version_dir, tasks, t0, ledger, result,
                       workers=workers, address=address, stopping=stopping, numeric_profile=profile,
                       benchmark_split=benchmark_split)
    finally:
        if stopping is not None:
            stopping.join()


def _take_reused(earlier: Any, recipe: Recipe, src: Any, pending: list[TaskSpec], store: Store, ledger: Ledger,
                 fingerprint: str, result: BuildResult, encoding: str,
                 profile: dict[str, Any]) -> tuple[list[TaskSpec], dict[str, list[dict[str, Any]]]]:
    """Put the earlier version's files with this build's partition fingerprints in place (verified by sha256) and
    return (the tasks still to run, reduced to their new partitions; task name → its reused ledger file entries).
    A task left with nothing to build is recorded done in the ledger here, its files marked ``reused_from``, so a
    killed run resumes past it like past a built task. Its ledger name stays the full task's name."""
    from pipeline.reuse import place_files, plan_reuse

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


def _numeric_profile_changed(old_run: dict[str, Any] | None, fingerprint: str, profile: dict[str, Any],
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


def _stop_ray_in_background():
    import threading

    import ray

    stopping = threading.Thread(target=ray.shutdown, name="bench-build-ray-shutdown")
    stopping.start()
    return stopping


def _finish(recipe: Recipe, src: Any, frame_ids: list[str], fps: int, fingerprint: str, store: Store,
            version_dir: Path | str, tasks: list[TaskSpec], t0: float, ledger: Ledger, result: BuildResult, *,
            workers: int | None, address: str | None, stopping: Any = None,
            numeric_profile: dict[str, Any] | None = None, benchmark_split: str | None = None) -> BuildResult:
    """After the tasks: the manifest and the card (if every task is done), then validation if the recipe has it."""
    result.seconds = time.time() - t0
    complete = False
    if not result.failures:  # every recorded file still there with its size: one listing, not a HEAD per file
        sizes = ledger.object_sizes()
        complete = all(ledger.check_done(t.name, fingerprint, "size", src, sizes)[0] for t in tasks)
    if complete:
        t = time.time()
        try:
            described = {**src.describe(), **({"benchmark_split": benchmark_split} if benchmark_split else {})}
            result.manifest = write_manifest(store, recipe, described, tasks, ledger, fingerprint,
                                             fps, result.seconds, panels=result.sheet_panels,
                                             phases=result.phases, numeric_profile=numeric_profile)
        except OSError as e:  # every shard is written and kept: re-running writes only the manifest
            result.failures[MANIFEST_NAME] = os_error_message(e, getattr(e, "filename", None) or
                                                              store.key_url(MANIFEST_NAME))
            result.failure_kinds[MANIFEST_NAME] = "resource"
        result.phases["manifest"] = round(time.time() - t - result.phases.get("contact_sheet", 0.0), 3)
    if result.manifest is not None and recipe.validate is not None:  # naturalness check of a sample of the build
        from pipeline.validate import validate_after_build

        if stopping is not None:  # validation may start a Ray of its own
            stopping.join()
        t = time.time()
        result.validation = validate_after_build(version_dir, recipe, workers=workers, address=address)
        result.phases["validate"] = round(time.time() - t, 3)
    result.sheet_panels = {}  # pictures of one frame: not kept with the result
    return result


def task_groups(recipe: Recipe, fps: int, groups: int | None, old_run: dict | None, fingerprint: str,
                overwrite: bool, *, shards: list[ShardSpec] | None = None,
                workers: int | None = None) -> tuple[tuple[tuple[str, int], ...], ...]:
    """How each block's partitions are split into tasks.

    A resumed build keeps the split its ledger recorded (whatever the cost table says today), so a done
    task is never redone and never half-overlaps a new one; asking for another number of groups on a build
    in progress is refused. A ledger from before grouping is one task per block. A new build cuts
    ``groups`` with `group_partitions`; by default, for a known number of ``workers`` (a local Ray) the
    number that minimises the simulated makespan (`scale.choose_groups`: one task per block on a few
    workers, as splitting rebuilds per-frame caches), else (a cluster) the cost-sized number (`groups_for`),
    whose thousands of short tasks also bound what a lost node or a straggler costs."""
    if old_run is not None and old_run.get("fingerprint") == fingerprint and not overwrite:
        recorded = old_run.get("task_groups")
        if recorded is None:  # one task per block, as builds were before tasks were split
            from pipeline.plan import CLEAN

            recorded = [[[CLEAN, 0]] + [[c.name, s] for c in recipe.corruptions
                                        for s in range(1, recipe.severities + 1)]]
        if groups is not None and groups != len(recorded):
            raise LedgerMismatch(
                f"this build was started with {len(recorded)} task group(s) per block, not {groups}: run again "
                f"without --groups (or with --groups {len(recorded)}) to resume it, or pass --overwrite to "
                "start over")
        return tuple(tuple((str(c), int(s)) for c, s in grp) for grp in recorded)
    costs = load_costs(recipe)
    if groups is None and workers is not None and shards:
        from pipeline.scale import choose_groups

        groups = choose_groups(recipe, costs, shards, workers)
    return group_partitions(recipe, costs, groups or groups_for(recipe, costs, fps))


def _local_raylet() -> Any:
    """The `Popen` of the raylet this process started (``ray.init(address="local")``), or None if unknown."""
    try:
        from ray._private import ray_constants, worker

        infos = worker._global_node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET) or []
        return infos[0].process if len(infos) == 1 and hasattr(infos[0].process, "poll") else None
    except Exception:  # a private Ray API: without it the build runs as before, only without this watch
        return None


def _raylet_death(raylet: Any, wait: float = 0.0) -> str | None:
    """The local raylet's death (``raylet``: its `Popen`, or None when not watched) as the failure message of
    the shards it took with it, or None while it runs. ``wait``: seconds to give it to be seen dead — an error
    a task or ``ray.wait`` raised can be that death, noticed by a worker (its socket closed) a moment before
    the raylet's exit completes."""
    if raylet is None:
        return None
    try:
        raylet.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        return None
    return (f"Ray node died (local raylet pid {raylet.pid} exited with {raylet.returncode}): the raylet "
            "or the machine running the shard is gone")


def _execute(pending, recipe, src, store: Store, fingerprint, result, bar, owner=None,
             encoding: str = "full", raylet: Any = None, numeric_profile: dict[str, Any] | None = None,
             pinned_by_env: bool = False, reused_files: dict[str, list[dict[str, Any]]] | None = None) -> None:
    """Run ``pending`` on Ray, recording each outcome in ``result``.

    ``raylet``: the local raylet's process, watched every second. When it dies Ray loses the driver's object
    store and, once the GCS declares the node dead (13 s later in a test), terminates this process from C++ (no Python
    runs then). So the driver does not wait for that: it reports every unfinished shard as failed with the
    cause (shards the ledger recorded count as built) and returns, so the summary is printed first."""
    import ray

    run_id = uuid.uuid4().hex[:12]
    # the numeric pin per task too, unless this build started the local Ray with the pin in its environment
    # (`init_ray`): a Ray the caller started, or a cluster, still runs it pinned (and every task checks its profile)
    options: dict[str, Any] = {} if pinned_by_env else {"runtime_env": {"env_vars": worker_env()}}
    task = ray.remote(num_cpus=1, max_retries=3, **options)(_run_shard)
    recipe_ref, src_ref = ray.put(recipe), ray.put(src)
    max_in_flight = max(2, int(2 * ray.cluster_resources().get("CPU", 1)))
    counter = ray.remote(num_cpus=0)(ProgressCounter).remote() if bar.enabled else None
    base, finished_rows = bar.done, 0  # the bar = base + rows of finished shards + rows of running ones
    queue = list(pending)
    in_flight: dict[Any, TaskSpec] = {}
    ledger = Ledger(store)

    def finish(spec: TaskSpec, res: dict[str, Any]) -> None:
        nonlocal finished_rows
        if not res["ok"]:
            # the worker may have finished and recorded the shard before it (or its node) died: the ledger decides
            entry = _ledger_read(ledger, spec.name)
            if entry is not None and entry.get("run_id") == run_id and entry.get("fingerprint") == fingerprint:
                res = {"shard": spec.name, "ok": True, "entry": entry}
            elif res.get("record"):
                _record_failure(ledger, spec.name, {"shard": spec.name, "error": res["error"],
                                                    "kind": res["kind"], "run_id": run_id})
        if res["ok"]:
            result.shards_built.append(spec.name)
            result.sheet_panels.update(res.get("panels") or {})
            finished_rows += sum(f["rows"] for f in res["entry"]["files"])
        else:
            result.failures[spec.name] = res["error"]
            result.failure_kinds[spec.name] = res.get("kind", "input")
            bar.fail(spec.name, res["error"])

    def fail_the_rest(message: str, kind: str, raylet_died: bool) -> None:
        """Every shard not finished has failed with this cause (those the ledger recorded count as built)."""
        if raylet_died:
            time.sleep(RAYLET_GONE_GRACE_S)  # its workers notice and exit: none records a shard after the reads
        for spec in [*in_flight.values(), *queue]:
            finish(spec, {"shard": spec.name, "ok": False, "error": message, "kind": kind, "record": True})

    while queue or in_flight:
        try:
            while queue and len(in_flight) < max_in_flight:
                spec = queue.pop(0)
                in_flight[task.remote(spec, recipe_ref, src_ref, store.spec, fingerprint, run_id, counter,
                                      owner, encoding, numeric_profile,
                                      (reused_files or {}).get(spec.name))] = spec
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
        except Exception as e:  # Ray itself is gone: every shard not recorded as done has failed with that cause
            dead = _raylet_death(raylet, 1.0)
            if dead:
                fail_the_rest(dead, "resource", raylet_died=True)
            else:
                fail_the_rest(*describe_task_error(e), raylet_died=False)
            return
        dead = _raylet_death(raylet)
        if dead:
            fail_the_rest(dead, "resource", raylet_died=True)
            return
        for ref in done:
            try:
                res = ray.get(ref)
            except Exception as e:  # the task crashed after its retries (a worker or node died, disk full …)
                # an exception raised in the task body (RayTaskError) is the task's own; anything else may be the
                # local raylet's death, seen by the worker first
                dead = _raylet_death(raylet, 0.0 if isinstance(e, ray.exceptions.RayTaskError) else 1.0)
                if dead:  # the whole local node, not this task: every unfinished shard fails with that cause
                    fail_the_rest(dead, "resource", raylet_died=True)
                    return
                message, kind = describe_task_error(e)
                res = {"shard": in_flight[ref].name, "ok": False, "error": message, "kind": kind, "record": True}
            finish(in_flight.pop(ref), res)
        try:
            running = ray.get(counter.snapshot.remote(), timeout=10) if counter is not None and in_flight and \
                (raylet is None or raylet.poll() is None) else {}
        except Exception:  # the progress actor is best effort; its death is not the build's
            counter, running = None, {}
        bar.update_to(base + finished_rows + sum(running.get(s.name, 0) for s in in_flight.values()))


def write_manifest(version_dir: str | Path | Store, recipe: Recipe, source: dict,
                   specs: list[ShardSpec] | list[TaskSpec], ledger: Ledger, fingerprint: str, fps: int,
                   seconds: float, *, panels: dict | None = None, phases: dict[str, float] | None = None,
                   numeric_profile: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the dataset card, then ``manifest.json`` last: a manifest only ever lists finished shards.

    ``panels``: the contact sheet's panels as the build tasks painted them (else the sheet's frame is read
    back from the files); ``phases`` gets the seconds the contact sheet took.

    Files are listed block by block in the recipe's partition order, whatever the tasks were, so the
    manifest does not depend on how blocks were split into tasks."""
    store = open_store(version_dir)
    shards, by_part = [], {}
    fields, scale = None, None
    rank = {("clean", 0): 0} | {(c.name, sv): 1 + i * recipe.severities + sv
                                 for i, c in enumerate(recipe.corruptions) for sv in range(1, recipe.severities + 1)}
    files = []
    for spec in specs:
        entry = ledger.done_entry(spec.name)
        assert entry is not None
        files += [(spec.file_stem, f) for f in entry["files"]]
    files.sort(key=lambda sf: (sf[0], rank.get((sf[1]["corruption"], sf[1]["severity"]), 0)))
    for stem, f in files:
        shards.append({"path": f["path"], "corruption": f["corruption"], "severity": f["severity"],
                       "shard": stem, "rows": f["rows"], "bytes": f["bytes"], "sha256": f["sha256"],
                       **({"partition_fingerprint": f["partition_fingerprint"]} if "partition_fingerprint" in f
                          else {}),
                       **({"reused_from": f["reused_from"]} if "reused_from" in f else {})})
        part = by_part.setdefault(f"{f['corruption']}/{f['severity']}", {"examples": 0, "bytes": 0, "seconds": 0.0})
        part["examples"] += f["rows"]
        part["bytes"] += f["bytes"]
        part["seconds"] = round(part["seconds"] + f["seconds"], 4)
    if shards:
        import pyarrow.parquet as pq

        from pipeline.schema import file_metadata

        with store.open_input(shards[0]["path"]) as f:
            meta = file_metadata(pq.read_schema(f))
        fields, scale = meta.get("fields"), meta.get("intensity_scale")
    columns = meta.get("columns", []) if shards else []
    encoding = meta.get("encoding", "full") if shards else "full"
    n_frames = sum(len(ids) for ids in {s.file_stem: s.frame_ids for s in specs}.values())
    frame_digests = {}
    for spec in specs:
        recorded = (ledger.done_entry(spec.name) or {}).get("sources") or {}
        frame_digests.update({fid: identity_digest(recorded.get(fid)) for fid in spec.frame_ids})
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "schema_version": SCHEMA_VERSION,
        "dataset": recipe.name,
        "version": recipe.version,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "build_seconds": round(seconds, 2),
        "code_version": __version__,
        # what every task computed under (each checked its own against it): platform, library versions, NumPy
        # SIMD dispatch, OpenBLAS core, and whether that is bench-build's pin or a user's override
        **({"numeric_profile": numeric_profile} if numeric_profile is not None else {}),
        "fingerprint": fingerprint,
        "recipe": recipe.canonical(),
        "source": {**{k: v for k, v in source.items() if k != "root"}, **({"demo": True} if _demo(source) else {})},
        "frames": n_frames,
        "frames_per_shard": fps,
        "fields": fields,
        "intensity_scale": scale,
        "columns": columns,
        "encoding": encoding,
        "partitions": partition_table(recipe),
        # row r of every partition file of a shard is frame shard_frames[shard][r]: loaders index without a scan
        "shard_frames": {spec.file_stem: list(spec.frame_ids) for spec in specs},
        "counts": {
            "examples_defined": recipe.examples_defined(n_frames),
            "examples_stored": sum(s["rows"] for s in shards),
            "bytes": sum(s["bytes"] for s in shards),
            "by_partition": by_part,
        },
        "shards": shards,
        # what each frame was built from: sha256 over its source files' (path, size, sha256); null when the
        # reader cannot name a frame's files. A changed scan changes its digest (and is rebuilt by `run`).
        "source_identity": {
            "digest": hashlib.sha256(json.dumps(sorted(frame_digests.items())).encode()).hexdigest(),
            "frames": frame_digests,
        },
    }
    reused = [s for s in shards if s.get("reused_from")]
    if reused:  # provenance only: the files are the ones this version would have computed, byte for byte
        manifest["reused"] = {"from_versions": sorted({s["reused_from"] for s in reused}), "files": len(reused),
                              "bytes": sum(s["bytes"] for s in reused)}
    validation = "validation/summary.md" if store.exists("validation/summary.md") else None
    card = complete_card(render_card(manifest, recipe, validation=validation), manifest, recipe)
    if reused:
        card = card.rstrip("\n") + "\n\n" + reuse_card_section(manifest) + "\n"
    t = time.time()
    sheet = _contact_sheet(store, manifest, panels)
    if phases is not None:
        phases["contact_sheet"] = round(time.time() - t, 3)
    store.write_text("README.md", card_with_renders(card, sheet) if sheet else card)
    # what the build drew for its card, with checksums: publish and pull move exactly these (never whatever a
    # listing of renders/ holds), verify checks them; an empty list says "none", unlike an old build's absent key
    manifest["renders"] = _render_entries(store, sheet)
    store.write_text(MANIFEST_NAME, json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False))
    return manifest


def reuse_card_section(manifest: dict[str, Any]) -> str:
    """The card's note on files taken from an earlier version (`run --reuse`): which, from which version."""
    r = manifest["reused"]
    parts = sorted({f"{s['corruption']}/{s['severity']}" for s in manifest["shards"] if s.get("reused_from")})
    built = sorted({f"{s['corruption']}/{s['severity']}" for s in manifest["shards"] if not s.get("reused_from")})
    return (f"## Reused partitions\n\n{r['files']} of {len(manifest['shards'])} files "
            f"({r['bytes'] / 1e6:.1f} MB) were taken unchanged from version {', '.join(r['from_versions'])} of "
            f"{manifest['dataset']}: their partition fingerprints (stage, version, parameters, seed, source, "
            f"writer) are equal, so their bytes are identical (each checked against that version's sha256). "
            f"Reused partitions: {', '.join(parts)}. Computed for this version: {', '.join(built) or 'none'}.")


def _render_entries(store: Store, sheet: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The manifest's ``renders``: path, bytes and sha256 of the contact sheet as stored (read back)."""
    if not sheet:
        return []
    data = store.read_bytes(sheet["path"])
    return [{"path": sheet["path"], "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]


def _demo(source: dict[str, Any]) -> bool:
    """Built from bench-build's generated demo data (its marker file in a source root)?"""
    from pipeline.sources.demo import is_demo_root

    return any(isinstance(v, str) and k.endswith("root") and Path(v).is_dir() and is_demo_root(v)
               for k, v in source.items())


def _contact_sheet(store, manifest: dict[str, Any], panels: dict | None = None) -> dict[str, Any] | None:
    """Render the card's contact sheet into ``renders/``; a picture never fails a finished build."""
    from pipeline.render import write_contact_sheet

    try:
        return write_contact_sheet(store, manifest, panels=panels)
    except Exception as e:  # matplotlib, an odd frame: say so and keep the build
        warnings.warn(f"contact sheet not rendered: {type(e).__name__}: {e}", stacklevel=2)
        return None


def build_status(benchmark: str, out: str | Path, *, endpoint_url: str | None = None,
                 profile: str | None = None) -> dict[str, Any]:
    """Shards done / failed / pending, examples written and an ETA, from the ledger alone."""
    recipe = load_recipe(benchmark)
    store = open_store(out, endpoint_url=endpoint_url, profile=profile).child(f"{recipe.name}/{recipe.version}")
    version_dir = store.root if isinstance(store, LocalStore) else store.url
    ledger = Ledger(store)
    info = ledger.run_info()
    if info is None:
        raise FileNotFoundError(f"{version_dir}: no build here (no _ledger/run.json)")
    cut = task_groups(recipe, info["frames_per_shard"], None, info, info["fingerprint"], False)
    specs = [TaskSpec(s, g, len(cut), parts) for s in plan_shards(info["frames"], info["frames_per_shard"])
             for g, parts in enumerate(cut)]
    done, failed, pending = [], {}, []
    seconds, examples = 0.0, 0
    for s in specs:
        e = ledger.done_entry(s.name)
        if e and e.get("fingerprint") == info["fingerprint"]:
            done.append(s.name)
            seconds += e["seconds"]
            examples += sum(f["rows"] for f in e["files"])
        elif (fe := ledger.failed_entry(s.name)) is not None:
            failed[s.name] = fe["error"]
        else:
            pending.append(s.name)
    remaining = len(specs) - len(done)
    eta = (seconds / len(done)) * remaining if done else None
    return {"version_dir": str(version_dir), "fingerprint": info["fingerprint"], "shards": len(specs),
            "done": len(done), "failed": failed, "pending": len(pending), "examples_written": examples,
            "examples_total": len(info["frames"]) * (1 + len(info["recipe"]["corruptions"])
                                                      * info["recipe"]["severities"]),
            "eta_cpu_seconds": eta, "complete": store.exists(MANIFEST_NAME)}
