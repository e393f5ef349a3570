"""What `bench-build bench` measures a cost table with, and checks it against: a recipe's demo examples as a task
holds them (`bench_examples`), the Parquet commit of every partition, a scan's read, the per-frame caches each
stage touches (and what it keeps on the frame for its other severities), a speed probe for comparing runs, and
the table's own predictions (CPU-hours of a full benchmark, ms per example of a finished build's tasks) beside
what the tasks took."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench_build.bench.timing import median_time, timeit
from bench_build.build.ledger import Ledger
from bench_build.build.run import DEMO_FRAMES, DEMO_OBJECTS_PER_SHARD
from bench_build.build.shard import build_columns, partition_meta
from bench_build.format.schema import schema_with_metadata
from bench_build.format.writer import record_batches, write_parquet_atomic
from bench_build.plan.costs import CACHES, CostTable, derived_cache
from bench_build.plan.tasks import CLEAN, example_key, example_rng, group_cost_ms, partition_order
from bench_build.sources import OBJECT_KINDS, open_source
from bench_build.sources.demo.kitti import generate_frame
from bench_build.sources.kitti import KittiSource, write_frame
from bench_build.stages.frame import Frame
from bench_build.stages.registry import get_stage
from bench_build.stages.ring import frame_rings, rings_cached
from bench_build.storage import LocalStore, open_store


def full_frames(recipe) -> int | None:
    """Source frames of the full-size benchmark (the recipe's ``paper_frames``); None where it does not say."""
    return recipe.paper_frames


def model_cpu_hours(recipe, table, frames: int | None = None) -> float:
    """CPU-hours of the full benchmark (or of ``frames``) from a cost table, one task per block (each cache built
    once per frame)."""

    frames = full_frames(recipe) if frames is None else frames
    if frames is None:
        raise ValueError(f"{recipe.name}: no paper_frames, so no full size; pass frames")
    return frames * group_cost_ms(partition_order(recipe, table), table) / 3.6e6


@dataclass(frozen=True)
class BenchExamples:
    """A recipe's demo examples as a build task holds them, and what reading them cost.

    ``frames``: read by the recipe's source and through its ``[preprocess]`` stage; ``read_ms``: CPU ms per frame
    for that (what every task pays per frame); ``rows_per_file``: how many of them a partition file holds when
    the write cost is measured (None: all in one file); ``what``: "scans" or "shapes"; ``source``: the reader,
    whose ``columns`` (ModelNet's class, 3DOS's scenario) every file of a build carries."""

    frames: list[Frame]
    read_ms: float
    rows_per_file: int | None
    what: str
    source: Any = None


def bench_examples(recipe, frames: int, repeat: int, clock=time.process_time) -> BenchExamples:
    """``frames`` demo scans of ``recipe``'s source, or for an object benchmark ``frames`` demo blocks of
    `DEMO_OBJECTS_PER_SHARD` shapes spread over its demo list (its tracks, splits and classes), written in files of
    one block as a demo build writes them: a shape is ≈ 16 KB, so a file's fixed part (footer, fsync, sha256,
    rename: ≈ 3 ms) is a large share of its cost per shape, which a file of every measured shape would dilute.
    KITTI-layout recipes keep the generated scans `bench` has always measured (their reader's cost is the same)."""

    if recipe.source == "kitti":  # as the KITTI source reads them: x, y, z, intensity (no ring column in a .bin)
        demo = [replace(f, points=np.ascontiguousarray(f.points[:, :4]), fields=f.fields[:4])
                for f in (generate_frame(i) for i in range(frames))]
        return BenchExamples(demo, read_ms(demo, repeat, clock), None, "scans")  # no source columns
    objects = recipe.source in OBJECT_KINDS
    src = open_source(recipe, None, demo_frames=max(frames, DEMO_FRAMES))
    ids = src.list_frames()
    if objects:
        want = frames * DEMO_OBJECTS_PER_SHARD
        ids = ids[::max(1, len(ids) // want)][:want]
    else:
        ids = ids[:frames]
    pre = recipe.preprocess

    def read() -> list[Frame]:
        out = [src.read(i) for i in ids]
        if pre is None:
            return out
        stage = get_stage(pre.stage)
        return [stage.apply(f, pre.params[0], example_rng(recipe.seed, example_key(recipe.name, f.frame_id, CLEAN, 0)))
                for f in out]

    demo = read()  # also pays the reader's one-offs (opening files, imports) outside the timing
    ms = timeit(read, repeat, clock) / len(ids) * 1e3
    return BenchExamples(demo, ms, DEMO_OBJECTS_PER_SHARD if objects else None, "shapes" if objects else "scans",
                         src)


def model_ms_per_example(version_dir, tasks, table) -> float:
    """What ``table`` predicts a finished build's tasks cost per stored example: each task's frames × (read + the
    caches its partitions need + its partitions), from the ledger — to check the table against
    `task_cpu_per_example`."""

    ledger = Ledger(open_store(version_dir))
    ms = rows = 0.0
    for e in (ledger.done_entry(name) for name in tasks):
        if e is None:
            continue
        parts = sorted({(f["corruption"], f["severity"]) for f in e["files"]})
        ms += len(e["frames"]) * group_cost_ms(parts, table)
        rows += sum(f["rows"] for f in e["files"])
    return ms / rows if rows else 0.0


def task_cpu_per_example(version_dir, tasks) -> tuple[float, float]:
    """(CPU seconds per stored example, warm-up CPU seconds per worker process) of a finished
    build, from its ledger: the tasks' own CPU time, minus the contact-sheet panels the first block paints (a
    picture of one frame). A worker process's first task also pays its one-off warm-up (imports, numba's
    cached code: a cost per process, not per example), so the rate comes from the other tasks when every
    process ran more than one, and the warm-up is what a first task cost beyond that rate."""

    ledger = Ledger(open_store(version_dir))
    entries = [e for e in (ledger.done_entry(name) for name in tasks) if e is not None]
    for e in entries:
        e["_cpu"] = e.get("cpu_seconds", 0.0) - e.get("sheet_cpu_seconds", 0.0)
        e["_rows"] = sum(f["rows"] for f in e["files"])
    first: dict = {}
    for e in entries:
        pid = e.get("pid")
        if "process_cpu_start" in e and (pid not in first or e["process_cpu_start"] < first[pid]["process_cpu_start"]):
            first[pid] = e
    warm = [e for e in entries if e is not first.get(e.get("pid"))]
    if not first or len(warm) < len(first):  # some process ran a single task: no warm rate to separate
        rows = sum(e["_rows"] for e in entries)
        return (sum(e["_cpu"] for e in entries) / rows if rows else 0.0), 0.0
    rate = sum(e["_cpu"] for e in warm) / sum(e["_rows"] for e in warm)
    warmup = sum(e["_cpu"] - rate * e["_rows"] for e in first.values()) / len(first)
    return rate, warmup


def speed_probe(repeat: int = 5) -> float:
    """ms of CPU for a fixed workload like a build's (a sort, float32 arithmetic, a Python loop), best of
    ``repeat``. This project's VM runs the same code 0.6–0.95× as fast from one minute to the next; printed at
    the start and end of `bench` (and kept in a cost table), it tells whether two runs' absolute numbers are
    comparable. Ratios measured within one run do not need it."""
    rng = np.random.default_rng(0)
    x = rng.random(1 << 20, dtype=np.float32)

    def work() -> None:
        np.sort(x)
        np.sqrt(x * x + x).sum()
        sum(i * i for i in range(200_000))

    return timeit(work, repeat, time.process_time) * 1e3


def other_machine_note(table: CostTable, recipe: str) -> str | None:
    """A note when this machine runs the speed probe more than 15 % slower or faster than the one that measured
    ``table`` did (its `speed_probe_ms`, the best of start and end): times planned from it are that machine's.
    None when they agree, or the table holds no probe. `plan` and `bench scale` print it; a plan stays a pure
    function of its table."""
    probes = table.extra.get("speed_probe_ms")
    if not isinstance(probes, list) or not probes or not all(isinstance(p, int | float) and p > 0 for p in probes):
        return None
    there, here = min(probes), speed_probe(repeat=3)
    if 1 / 1.15 <= here / there <= 1.15:
        return None
    return (f"this machine runs the speed probe in {here:.0f} ms, the one that measured these costs in {there:.0f} "
            f"ms: its tasks take ≈ ×{here / there:.2f} the times planned (the probe leaves out the disk; a VM "
            f"drifts ±25 %). `bench-build bench stages --recipe {recipe} --costs-out FILE` and `bench-build bench "
            "scale --costs-out FILE` measure this machine's table for --costs FILE (pipeline/bench/README.md)")


def write_costs(recipe, demo, repeat: int, clock=time.process_time, rows_per_file: int | None = None,
                source: Any = None) -> tuple[float, dict[str, list[float]], float]:
    """(clean ms, {corruption: ms at severities 1..S}, clean bytes) per example to commit a partition's examples
    to Parquet exactly as a build task does (`write_parquet_atomic` into a local store: encode, zstd, write,
    fsync, sha256, rename), each corruption's own output on ``demo``: in one file, or in files of
    ``rows_per_file`` examples (a block's), with the columns of ``source``'s build. Median of ``repeat`` after a
    warm-up: a write's cost varies by ±20 % from call to call, and the best of two undercounted what tasks pay."""

    columns = list(build_columns(recipe, source))
    with tempfile.TemporaryDirectory(prefix="bench-build-write-") as tmp:
        store = LocalStore(Path(tmp))

        def commit(corruption: str, severity: int, outs) -> tuple[float, int]:
            meta = {"benchmark": recipe.name, "fields": list(demo[0].fields), "columns": columns,
                    **partition_meta(recipe, corruption, severity)}
            schema = schema_with_metadata(meta)
            rows = [(example_key(recipe.name, f.frame_id, corruption, severity), corruption, severity, o, None)
                    for f, o in zip(demo, outs, strict=True)]
            step = rows_per_file or len(rows)
            t = size = 0
            for i in range(0, len(rows), step):
                part, rel = rows[i:i + step], Path(f"{corruption}-{severity}-{i // step}.parquet")
                t += median_time(lambda part=part, rel=rel: write_parquet_atomic(
                    rel, schema, record_batches(iter(part), schema), store), repeat, clock)
                size += store.path(rel.as_posix()).stat().st_size
            return t / len(demo) * 1e3, size // len(demo)

        clean, size = commit(CLEAN, 0, demo)
        by = {}
        for c in recipe.corruptions:
            row = []
            for s in range(1, recipe.severities + 1):
                outs = [c.apply(f, s, example_rng(recipe.seed, example_key(recipe.name, f.frame_id, c.name, s)))
                        for f in demo]
                row.append(commit(c.name, s, outs)[0])
            by[c.name] = row
    return clean, by, size


def read_ms(demo, repeat: int, clock=time.perf_counter) -> float:
    """ms per frame to read one scan back through the KITTI reader (what every task pays per frame)."""

    with tempfile.TemporaryDirectory() as tmp:
        for f in demo:
            write_frame(Path(tmp), f)
        src = KittiSource(tmp)
        ids = src.list_frames()
        return timeit(lambda: [src.read(i) for i in ids], repeat, clock) / len(ids) * 1e3


def build_cache(frame: Frame, cache: str) -> None:
    """Build one of the shared per-frame caches (`plan.costs.CACHES`) on ``frame``."""
    if cache == "rings":
        frame_rings(frame)
    else:
        getattr(frame, cache)


def cache_needs(recipe, frame) -> dict[str, tuple[str, ...]]:
    """Which shared per-frame caches each corruption's stage touches (on a fresh copy of one frame), and
    ``derived:<corruption>`` where it keeps data on the frame for its other severities (``Frame.derived``)."""

    out = {}
    for c in recipe.corruptions:
        fresh = replace(frame)
        get_stage(c.stage).apply(fresh, c.params_for(1), example_rng(recipe.seed, example_key(
            recipe.name, fresh.frame_id, c.name, 1)))
        used = fresh.__dict__
        out[c.name] = (*(k for k in CACHES if k in used or (k == "box_index" and "box_points" in used)
                         or (k == "rings" and rings_cached(fresh))),
                       *((derived_cache(c.name),) if used.get("derived") else ()))
    return out


def derived_costs(recipe, demo, needs: dict[str, tuple[str, ...]], warm_ms: dict[str, list[float]], repeat: int,
                  clock=time.process_time) -> dict[str, float]:
    """ms per frame of what each corruption's stage keeps on the frame for its other severities (``Frame.derived``:
    ModelNet40-E's normals, ``upsample``'s search grid), for the corruptions ``needs`` marks: its first severity on
    frames without it (their shared caches built beforehand) less the same on frames that have it
    (``warm_ms``, the stage table's cost per example)."""

    out = {}
    for c in recipe.corruptions:
        key = derived_cache(c.name)
        if key not in needs.get(c.name, ()):
            continue
        shared = [n for n in needs[c.name] if n in CACHES]
        best = float("inf")
        for _ in range(repeat):
            fresh = [replace(f) for f in demo]
            for f in fresh:
                for n in shared:
                    build_cache(f, n)
            t = clock()
            for f in fresh:
                c.apply(f, 1, example_rng(recipe.seed, example_key(recipe.name, f.frame_id, c.name, 1)))
            best = min(best, clock() - t)
        out[key] = max(0.0, best / len(demo) * 1e3 - warm_ms[c.name][0])
    return out
