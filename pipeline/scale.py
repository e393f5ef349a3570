"""`bench-build plan`: how a build splits into tasks and how it would run on N workers, without building.

The task costs come from the cost table (`pipeline.costs`, measured by `bench-build bench --costs-out`); the
schedule is simulated the way the executor submits (tasks in plan order, each to the first free worker),
plus a fixed per-task overhead for Ray's scheduling and the task's start. Memory stays flat as plans grow:
the driver holds the frame ids, one `ShardSpec` per block and one small `TaskSpec` per task (parts tuples
are shared by every block), and the simulation keeps one heap entry per worker.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

from manifests.recipe import Recipe, load_recipe
from pipeline.costs import CostTable, load_costs
from pipeline.plan import group_cost_ms, groups_for, plan_shards, plan_tasks

TASK_OVERHEAD_S = 0.05  # Ray task scheduling + start + ledger write per task, measured on loopback (order of)


def simulate(task_seconds: Iterable[float], workers: int, overhead_s: float = TASK_OVERHEAD_S) -> dict[str, float]:
    """List scheduling in submission order: makespan (s), busy CPU-s, and utilisation = busy / (N × makespan)."""
    free = [0.0] * workers
    busy = 0.0
    for cost in task_seconds:
        start = heapq.heappop(free)
        heapq.heappush(free, start + cost + overhead_s)
        busy += cost
    makespan = max(free) if free else 0.0
    return {"workers": workers, "makespan_s": makespan, "busy_cpu_s": busy,
            "utilisation": busy / (workers * makespan) if makespan else 1.0}


def plan_build(recipe: Recipe | str, frame_ids: Sequence[str], *, frames_per_shard: int,
               workers: Sequence[int] = (2, 16, 64, 256), groups: int | None = None,
               costs: CostTable | None = None) -> dict[str, Any]:
    """Tasks, per-task cost estimate, and makespan/utilisation per worker count for building ``frame_ids``."""
    recipe = load_recipe(recipe) if isinstance(recipe, str) else recipe
    costs = costs or load_costs(recipe)
    shards = plan_shards(list(frame_ids), frames_per_shard)
    g = groups or groups_for(recipe, costs, frames_per_shard)
    tasks = plan_tasks(shards, recipe, costs, g)
    per_group = {parts: group_cost_ms(parts, costs) / 1e3 for parts in {t.parts for t in tasks}}
    seconds = [len(t.frame_ids) * per_group[t.parts] for t in tasks]
    n = len(seconds)
    mean = sum(seconds) / n
    whole = group_cost_ms(tuple(p for parts in tasks[0:tasks[0].groups] for p in parts.parts), costs) / 1e3
    unsplit = sum(len(s.frame_ids) for s in shards) * whole  # one task per block: each cache built once
    return {
        "recipe": recipe.name, "costs": costs.measured, "frames": len(frame_ids),
        "frames_per_shard": frames_per_shard, "blocks": len(shards), "groups_per_block": tasks[0].groups,
        "tasks": n, "examples_stored": recipe.examples_stored(len(frame_ids)),
        "examples_defined": recipe.examples_defined(len(frame_ids)),
        "task_seconds": {"min": min(seconds), "mean": mean, "max": max(seconds)},
        "cpu_hours": sum(seconds) / 3600, "cpu_hours_one_task_per_block": unsplit / 3600,
        "overhead_s_per_task": TASK_OVERHEAD_S,
        "schedule": [simulate(seconds, w) for w in workers],
    }
