"""What `bench-build bench` measures a cost table with, and checks it against: the Parquet commit of every
partition, a scan's read, the per-frame caches each stage touches, a speed probe for comparing runs, and the
table's own predictions (CPU-hours of a full benchmark, ms per example of a finished build's tasks) beside what
the tasks took."""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench_build.bench.timing import median_time, timeit
from bench_build.build.ledger import Ledger
from bench_build.build.shard import build_columns, partition_meta
from bench_build.format.schema import schema_with_metadata
from bench_build.format.writer import record_batches, write_parquet_atomic
from bench_build.plan.costs import CACHES
from bench_build.plan.tasks import CLEAN, example_key, example_rng, group_cost_ms, partition_order
from bench_build.sources.kitti import KittiSource, write_frame
from bench_build.stages.registry import get_stage
from bench_build.storage import LocalStore, open_store

FULL_FRAMES = {"kitti-c": 7481, "robo3d-kitti-c": 3769}  # frames of the full benchmark (KITTI val: 3,769)
FULL_FRAMES_DEFAULT = 7481


def model_cpu_hours(recipe, table, frames: int | None = None) -> float:
    """CPU-hours of the full benchmark from a cost table, one task per block (each cache built once per frame)."""

    frames = FULL_FRAMES.get(recipe.name, FULL_FRAMES_DEFAULT) if frames is None else frames
    return frames * group_cost_ms(partition_order(recipe, table), table) / 3.6e6


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




def write_costs(recipe, demo, repeat: int, clock=time.process_time) -> tuple[float, dict[str, list[float]], float]:
    """(clean ms, {corruption: ms at severities 1..S}, clean bytes) per example to commit a partition's examples
    to one Parquet file exactly as a build task does (`write_parquet_atomic` into a local store: encode, zstd,
    write, fsync, sha256, rename), each corruption's own output on ``demo``. Median of ``repeat`` after a warm-up:
    a write's cost varies by ±20 % from call to call, and the best of two undercounted what tasks pay."""

    columns = list(build_columns(recipe, None))
    with tempfile.TemporaryDirectory(prefix="bench-build-write-") as tmp:
        store = LocalStore(Path(tmp))

        def commit(corruption: str, severity: int, outs) -> tuple[float, int]:
            meta = {"benchmark": recipe.name, "fields": list(demo[0].fields), "columns": columns,
                    **partition_meta(recipe, corruption, severity)}
            schema = schema_with_metadata(meta)
            rows = [(example_key(recipe.name, f.frame_id, corruption, severity), corruption, severity, o, None)
                    for f, o in zip(demo, outs, strict=True)]
            rel = Path(f"{corruption}-{severity}.parquet")
            t = median_time(lambda: write_parquet_atomic(rel, schema, record_batches(iter(rows), schema), store),
                             repeat, clock)
            return t / len(demo) * 1e3, store.path(rel.as_posix()).stat().st_size // len(demo)

        clean, size = commit(CLEAN, 0, demo)
        by = {}
        for c in recipe.corruptions:
            stage, row = get_stage(c.stage), []
            for s in range(1, recipe.severities + 1):
                outs = [stage.apply(f, c.params_for(s), example_rng(recipe.seed, example_key(recipe.name, f.frame_id,
                                                                                              c.name, s)))
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


def cache_needs(recipe, frame) -> dict[str, tuple[str, ...]]:
    """Which shared per-frame caches each corruption's stage touches (on a fresh copy of one frame)."""

    out = {}
    for c in recipe.corruptions:
        fresh = replace(frame)
        get_stage(c.stage).apply(fresh, c.params_for(1), example_rng(recipe.seed, example_key(
            recipe.name, fresh.frame_id, c.name, 1)))
        used = fresh.__dict__
        out[c.name] = tuple(k for k in CACHES if k in used or (k == "box_index" and "box_points" in used))
    return out
