"""`bench-build plan`: how a build splits into tasks and how it would run on N workers, without building.

The task costs come from the cost table (`bench_build.plan.costs`, measured by `bench-build bench stages --costs-out`);
the schedule is simulated the way the executor submits (tasks in plan order, each to the first free worker),
plus a fixed per-task overhead for Ray's scheduling and the task's start, each worker's own start before its
first task, the per-task CPU inflation at that occupancy, and the driver's serial parts (Ray's start, the finish):
`bench_build.plan.tasks.Runtime`, measured by `bench-build bench scale --costs-out`. Memory stays flat as plans grow:
the driver holds the frame ids, one `BlockSpec` per block and one small `TaskSpec` per task (parts tuples
are shared by every block), and the simulation keeps one heap entry per worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench_build.manifests.recipe import Recipe, load_recipe
from bench_build.plan.costs import CostTable, load_costs
from bench_build.plan.tasks import (
    TASK_OVERHEAD_S,
    WORKER_START_S,
    Runtime,
    choose_groups,
    group_partitions,
    groups_for,
    plan_shards,
    predict,
    simulate,
    task_seconds,
)

__all__ = ["TASK_OVERHEAD_S", "WORKER_START_S", "plan_build", "simulate"]


def plan_build(recipe: Recipe | str, frame_ids: Sequence[str], *, frames_per_shard: int,
               workers: Sequence[int] = (2, 16, 64, 256), groups: int | None = None,
               costs: CostTable | None = None, worker_start_s: float | None = None) -> dict[str, Any]:
    """Tasks, per-task cost estimate, and makespan/utilisation per worker count for building ``frame_ids``.

    Per worker count: the groups per block `choose_groups` picks for it (or ``groups``), the tasks, their
    cost, the simulated makespan and utilisation (every worker starting ``worker_start_s`` after Ray's start,
    tasks inflated at that occupancy), the predicted wall time of the whole build (``wall_s``: Ray start +
    makespan + the driver's finish), and the CPU-hours of the tasks (caches rebuilt by each group included;
    workers' starts not). ``sized`` is the plan at the cost-sized split (`groups_for`), independent of workers.
    ``worker_start_s``: None takes the cost table's measurement (`Runtime`)."""
    if worker_start_s is not None and worker_start_s < 0:
        raise ValueError(f"a worker's start cannot take {worker_start_s} s")
    recipe = load_recipe(recipe) if isinstance(recipe, str) else recipe
    costs = costs or load_costs(recipe)
    runtime = Runtime.of(costs, worker_start_s)
    shards = plan_shards(list(frame_ids), frames_per_shard)

    def at(g: int) -> dict[str, Any]:
        cut = group_partitions(recipe, costs, g)
        seconds = task_seconds(shards, cut, costs)
        return {"groups_per_block": len(cut), "tasks": len(seconds),
                "task_seconds": {"min": min(seconds), "mean": sum(seconds) / len(seconds), "max": max(seconds)},
                "cpu_hours": sum(seconds) / 3600, "_seconds": seconds}

    def row(p: dict[str, Any], w: int) -> dict[str, Any]:
        return {k: v for k, v in predict(p["_seconds"], w, runtime, p["groups_per_block"]).items() if k != "workers"}

    sized = at(groups or groups_for(recipe, costs, frames_per_shard))
    rows = []
    for w in workers:
        p = at(groups or choose_groups(recipe, costs, shards, w, worker_start_s=runtime.worker_start_s))
        rows.append({"workers": w, **{k: v for k, v in p.items() if k != "_seconds"}, **row(p, w),
                     "sized": row(sized, w)})
    return {
        "recipe": recipe.name, "costs": costs.measured + (f"; scale {costs.scale:g} (real task CPU / the parts' "
                                                          "prediction)" if costs.scale != 1.0 else
                                                          "; unscaled (parts timed alone)"),
        "frames": len(frame_ids),
        "frames_per_shard": frames_per_shard, "blocks": len(shards),
        "examples_stored": recipe.examples_stored(len(frame_ids)),
        "examples_defined": recipe.examples_defined(len(frame_ids)),
        "cpu_hours_one_task_per_block": at(1)["cpu_hours"], "overhead_s_per_task": TASK_OVERHEAD_S,
        "worker_start_s": runtime.worker_start_s,
        "runtime": {"driver_start_s": runtime.driver_start_s, "finish_s": runtime.finish_s, "sheet_s": runtime.sheet_s,
                    "finish_s_per_task": runtime.finish_s_per_task, "inflation_full": runtime.inflation,
                    "cores_measured": runtime.cores,
                    "measured": bool(costs.extra.get("runtime")), "default_worker_start_s": WORKER_START_S},
        "sized": {k: v for k, v in sized.items() if k != "_seconds"},
        "schedule": rows,
    }
