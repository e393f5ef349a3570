"""`bench scale --control`: how much the machine alone slows a task down when every core is busy.

Two loops with no bench-build code run in one process, then in N processes at once (fresh processes, each pool
pinned to one thread like a Ray task's):

- the **streaming** loop works on a scan-sized array (NumPy sort, arithmetic, a gather, then zstd as the writer
  compresses): like a task, its working set is far past a core's own cache, so it shares the L3 and the memory
  bandwidth with its neighbours;
- the **in-cache** loop does the same kind of work on an array that fits a core's L2: it shares only the core
  itself (with a hyper-thread sibling) and the clock (an all-core clock is lower than a single core's boost).

The CPU per copy at N ÷ alone is each loop's inflation. Together with `cpu_topology` they say whose the
inflation of a build's tasks is: both loops inflated alike and more logical CPUs than cores means the cores
are shared (or clocked down); only the streaming loop inflated means caches and memory.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench_build.format.writer import PARQUET_OPTIONS
from bench_build.runtime.ray import environ

#: a task's working set is several MB (a block's scans, a KD-tree, a 15 MB row group): past the 2 MB L2 of a core,
#: so the streaming loop shares the L3 and memory bandwidth with its neighbours as a task does
CONTROL_POINTS = 1_000_000
#: 4,096 points × 4 float32 (64 KB) and their order and copy: ≈ 160 KB, inside any current core's L2
CACHE_POINTS = 4_096
#: in-cache passes per iteration: about the CPU of one streaming iteration (≈ 0.2 s on a 2.6 GHz EPYC core)
CACHE_REPEATS = 2_400


def control_loop(iterations: int, seed: int = 0) -> dict[str, float]:
    """The streaming loop: NumPy on a scan-sized array (sort, arithmetic, a gather) and zstd of the result at the
    writer's level (pyarrow's codec). Returns its CPU and wall seconds."""

    rng = np.random.default_rng(seed)
    pts = rng.normal(size=(CONTROL_POINTS, 4)).astype(np.float32)
    codec = pa.Codec("zstd", compression_level=PARQUET_OPTIONS["compression_level"])
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(iterations):
        order = np.argsort(pts[:, 0], kind="stable")
        out = pts[order] * np.float32(1.0001) + rng.normal(scale=0.01, size=pts.shape).astype(np.float32)
        codec.compress(out.tobytes())
    return {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall}


def cache_loop(iterations: int, seed: int = 0) -> dict[str, float]:
    """The in-cache loop: the same sort, gather and arithmetic on `CACHE_POINTS` points, in place, `CACHE_REPEATS`
    times per iteration: no memory traffic past the core's L2. Returns its CPU and wall seconds."""

    pts = np.random.default_rng(seed).normal(size=(CACHE_POINTS, 4)).astype(np.float32)
    out = np.empty_like(pts)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(iterations * CACHE_REPEATS):
        order = np.argsort(pts[:, 0], kind="stable")
        np.take(pts, order, axis=0, out=out)
        np.multiply(out, np.float32(1.0001), out=out)
        np.add(out, pts, out=out)
        np.sqrt(np.abs(out, out=out), out=out)
    return {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall}


LOOPS = {"streaming": control_loop, "in_cache": cache_loop}


def _control_child(args: tuple[str, int, int]) -> dict[str, float]:
    loop, iterations, seed = args
    return LOOPS[loop](iterations, seed)


def run_control(copies: int, iterations: int = 8, rounds: int = 3) -> dict[str, Any]:
    """CPU per copy of each loop alone and with ``copies`` running at once, ``rounds`` times alternating;
    inflation = median CPU at ``copies`` ÷ median CPU alone. The streaming loop's figures are at the top level
    (``inflation`` …), the in-cache loop's under ``in_cache``, the machine's `cpu_topology` under ``topology``.
    ``together_wall_s_max`` far above the CPU says the copies did not each get a core (other load on the
    machine): the inflation is then not only the hardware's."""
    ctx = multiprocessing.get_context("spawn")
    env = {k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    runs: dict[str, tuple[list[dict[str, float]], list[dict[str, float]]]] = {loop: ([], []) for loop in LOOPS}
    with environ(env), ctx.Pool(1) as one, ctx.Pool(copies) as many:
        for loop in LOOPS:  # imports, first touch: not part of the loop
            one.map(_control_child, [(loop, 1, 0)])
            many.map(_control_child, [(loop, 1, i) for i in range(copies)])
        for _ in range(rounds):
            for loop, (alone, together) in runs.items():
                alone += one.map(_control_child, [(loop, iterations, 0)])
                together += many.map(_control_child, [(loop, iterations, i) for i in range(copies)])
    summary = {loop: _inflation(alone, together) for loop, (alone, together) in runs.items()}
    return {"copies": copies, "iterations": iterations, "rounds": rounds, **summary["streaming"],
            "in_cache": summary["in_cache"], "topology": cpu_topology()}


def _inflation(alone: list[dict[str, float]], together: list[dict[str, float]]) -> dict[str, float]:
    alone_cpu = statistics.median(r["cpu_s"] for r in alone)
    together_cpu = statistics.median(r["cpu_s"] for r in together)
    return {"alone_cpu_s": round(alone_cpu, 3), "together_cpu_s_median": round(together_cpu, 3),
            "together_wall_s_max": round(max(r["wall_s"] for r in together), 3),
            "inflation": round(together_cpu / alone_cpu, 3)}


def cpu_topology(sys_cpu: str | Path = "/sys/devices/system/cpu") -> dict[str, Any]:
    """The logical CPUs this process may run on, the physical cores they belong to (distinct package and core
    ids in Linux's sysfs) and the CPU model: 16 logical CPUs on 8 cores means 16 workers share cores pairwise.
    ``cores`` and ``threads_per_core`` are None where sysfs does not say."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    cores: set[tuple[str, str]] = set()
    for cpu in cpus:
        topo = Path(sys_cpu) / f"cpu{cpu}" / "topology"
        try:
            cores.add(((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip()))
        except OSError:
            cores = set()
            break
    model = None
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), None)
    except OSError:
        pass
    return {"logical_cpus": len(cpus), "cores": len(cores) or None,
            "threads_per_core": round(len(cpus) / len(cores), 2) if cores else None, "model": model}


def describe(control: dict[str, Any]) -> str:
    """One paragraph for `bench scale`'s output: both loops' inflation and what they say together."""
    c, k, t = control, control["in_cache"], control["topology"]
    cores = (f"{t['logical_cpus']} logical CPUs on {t['cores']} cores" if t["cores"]
             else f"{t['logical_cpus']} logical CPUs (cores unknown)")
    text = (f"control ({c['copies']} copies at once, no bench-build code; {cores}): streaming NumPy + zstd "
            f"×{c['inflation']:.3f}, in-cache NumPy ×{k['inflation']:.3f}")
    if c["inflation"] < 1.05:
        return text + ": the hardware adds next to nothing with every core busy"
    if k["inflation"] >= 1 + 0.6 * (c["inflation"] - 1):
        shared = t["cores"] is not None and c["copies"] > t["cores"]
        return text + (": the cores themselves slow down — more copies than physical cores share them"
                       if shared else ": the cores themselves slow down (an all-core clock below one core's boost)")
    return text + ": caches and memory bandwidth, shared by every busy core"
