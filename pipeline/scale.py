"""`bench-build plan`: how a build splits into tasks and how it would run on N workers, without building.

The task costs come from the cost table (`pipeline.costs`, measured by `bench-build bench --costs-out`); the
schedule is simulated the way the executor submits (tasks in plan order, each to the first free worker),
plus a fixed per-task overhead for Ray's scheduling and the task's start, and each worker's own start before its
first task (process, imports, kernels loaded: `WORKER_START_S`). Memory stays flat as plans grow:
the driver holds the frame ids, one `ShardSpec` per block and one small `TaskSpec` per task (parts tuples
are shared by every block), and the simulation keeps one heap entry per worker.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

from manifests.recipe import Recipe, load_recipe
from pipeline.costs import CostTable, load_costs
from pipeline.plan import ShardSpec, group_cost_ms, group_partitions, groups_for, plan_shards

TASK_OVERHEAD_S = 0.05  # Ray task scheduling + start + ledger write per task, measured on loopback (order of)
#: seconds from a worker's start to its first task computing as fast as the cost table says: Ray starting the
#: worker process (≈ 0.6 CPU-s), the task code's imports (≈ 0.4 s), and its first task's one-off warm-up (numba's
#: kernels loaded from the cache, first-call caches: ≈ 0.6–0.9 s), on this project's machine. A worker that has to
#: compile the kernels (no cache entry for the CPU numba compiles for) pays ≈ 11 s more for KITTI-C's stages.
WORKER_START_S = 2.0


def simulate(task_seconds: Iterable[float], workers: int, overhead_s: float = TASK_OVERHEAD_S,
             start_s: float = 0.0) -> dict[str, float]:
    """List scheduling in submission order, every worker free from ``start_s``: makespan (s), busy CPU-s, and
    utilisation = busy / (N × makespan) (a worker's start is not busy time)."""
    free = [start_s] * workers
    busy = 0.0
    for cost in task_seconds:
        start = heapq.heappop(free)
        heapq.heappush(free, start + cost + overhead_s)
        busy += cost
    makespan = max(free) if free else 0.0
    return {"workers": workers, "makespan_s": makespan, "busy_cpu_s": busy,
            "utilisation": busy / (workers * makespan) if makespan else 1.0}


def _task_seconds(shards: Sequence[ShardSpec], cut, costs: CostTable) -> list[float]:
    per = [group_cost_ms(parts, costs) / 1e3 for parts in cut]
    return [len(s.frame_ids) * c for s in shards for c in per]


def choose_groups(recipe: Recipe, costs: CostTable, shards: Sequence[ShardSpec], workers: int,
                  max_groups: int | None = None, worker_start_s: float = WORKER_START_S) -> int:
    """Groups per block that minimise the simulated makespan on ``workers``, up to the cost-sized number
    (`groups_for`). Splitting is not free — every group rebuilds the per-frame caches its stages use — so
    a split must shorten the makespan by ≥ 2 % to be preferred to a coarser one: a few workers get one
    task per block (least CPU), hundreds get thousands of tasks."""
    fps = max(len(s.frame_ids) for s in shards)
    best_s, best_g = float("inf"), 1
    for g in range(1, (max_groups or groups_for(recipe, costs, fps)) + 1):
        cut = group_partitions(recipe, costs, g)
        if len(cut) < g:  # no finer cut exists
            break
        m = simulate(_task_seconds(shards, cut, costs), workers, start_s=worker_start_s)["makespan_s"]
        if m < best_s * 0.98:
            best_s, best_g = m, g
    return best_g


def plan_build(recipe: Recipe | str, frame_ids: Sequence[str], *, frames_per_shard: int,
               workers: Sequence[int] = (2, 16, 64, 256), groups: int | None = None,
               costs: CostTable | None = None, worker_start_s: float = WORKER_START_S) -> dict[str, Any]:
    """Tasks, per-task cost estimate, and makespan/utilisation per worker count for building ``frame_ids``.

    Per worker count: the groups per block `choose_groups` picks for it (or ``groups``), the tasks, their
    cost, the simulated makespan and utilisation (every worker starting ``worker_start_s`` after the build), and
    the CPU-hours of the tasks (caches rebuilt by each group included; workers' starts not). ``sized`` is the
    plan at the cost-sized split (`groups_for`), independent of workers."""
    if worker_start_s < 0:
        raise ValueError(f"a worker's start cannot take {worker_start_s} s")
    recipe = load_recipe(recipe) if isinstance(recipe, str) else recipe
    costs = costs or load_costs(recipe)
    shards = plan_shards(list(frame_ids), frames_per_shard)

    def at(g: int) -> dict[str, Any]:
        cut = group_partitions(recipe, costs, g)
        seconds = _task_seconds(shards, cut, costs)
        return {"groups_per_block": len(cut), "tasks": len(seconds),
                "task_seconds": {"min": min(seconds), "mean": sum(seconds) / len(seconds), "max": max(seconds)},
                "cpu_hours": sum(seconds) / 3600, "_seconds": seconds}

    sized = at(groups or groups_for(recipe, costs, frames_per_shard))
    rows = []
    for w in workers:
        p = at(groups or choose_groups(recipe, costs, shards, w, worker_start_s=worker_start_s))
        rows.append({"workers": w, **{k: v for k, v in p.items() if k != "_seconds"},
                     **{k: v for k, v in simulate(p["_seconds"], w, start_s=worker_start_s).items()
                        if k != "workers"},
                     "sized": {k: v for k, v in simulate(sized["_seconds"], w, start_s=worker_start_s).items()
                               if k != "workers"}})
    return {
        "recipe": recipe.name, "costs": costs.measured + (f"; scale {costs.scale:g} (real task CPU / the parts' "
                                                          "prediction)" if costs.scale != 1.0 else
                                                          "; unscaled (parts timed alone)"),
        "frames": len(frame_ids),
        "frames_per_shard": frames_per_shard, "blocks": len(shards),
        "examples_stored": recipe.examples_stored(len(frame_ids)),
        "examples_defined": recipe.examples_defined(len(frame_ids)),
        "cpu_hours_one_task_per_block": at(1)["cpu_hours"], "overhead_s_per_task": TASK_OVERHEAD_S,
        "worker_start_s": worker_start_s,
        "sized": {k: v for k, v in sized.items() if k != "_seconds"},
        "schedule": rows,
    }
