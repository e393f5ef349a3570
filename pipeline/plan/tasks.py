"""Planning: (recipe, frames) → shard specs with deterministic, parseable names, and the schedule model that
predicts a build's wall time. Pure: no Ray, no I/O but reading the cost table.

A shard is a block of consecutive frames carried through the clean copy and every corruption ×
severity. Block ``b`` of ``B`` writes one file per partition, all named ``part-{b:05d}-of-{B:05d}``::

    data/corruption=clean/severity=0/part-00003-of-00117.parquet
    data/corruption=fog/severity=3/part-00003-of-00117.parquet

(layout v2: clean is a partition of the one hive tree, so every hive reader sees it with the rest.)

An example's key is ``benchmark/frame_id/corruption/severity`` and its RNG is
``default_rng(SeedSequence([recipe_seed, stable_hash(key)]))`` — independent of worker count,
scheduling order and shard layout.

**Tasks.** A Ray task is one frame block × one *group* of that block's partitions (`TaskSpec`), so a build
has ``blocks × groups`` tasks of roughly equal cost even though there are only ~117 blocks in full KITTI-C.
Groups are cut from the recipe's partitions in a fixed order (clean first, then by the per-frame caches the
stage uses, then recipe order and severity) into contiguous runs of roughly equal estimated cost
(`bench_build.plan.costs`), so stages that share a KD-tree or a box index share a task and build it once. File names
do not depend on grouping: every file is still ``<partition>/part-{b}-of-{B}.parquet`` and its bytes are the
same whatever the number of groups or workers. A block's clean copy lives in its group 0 (the first
partition of the order): it is encoded once per frame, like before; every group reads its block's scans
itself (≈ 5 ms per frame, negligible next to the stages).
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench_build.errors import LedgerMismatch
from bench_build.manifests.manifest import CLEAN, partition_dir
from bench_build.manifests.recipe import Recipe
from bench_build.plan.costs import CostTable, load_costs


def example_key(benchmark: str, frame_id: str, corruption: str, severity: int) -> str:
    return f"{benchmark}/{frame_id}/{corruption}/{severity}"


def stable_hash(key: str) -> int:
    """128-bit hash of a key, stable across processes and Python versions (unlike ``hash``)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:16], "little")


def example_rng(seed: int, key: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, stable_hash(key)]))


def partition_path(corruption: str, severity: int, shard: str) -> str:
    return f"{partition_dir(corruption, severity)}/{shard}.parquet"


@dataclass(frozen=True)
class BlockSpec:
    index: int
    count: int
    frame_ids: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"part-{self.index:05d}-of-{self.count:05d}"

    @property
    def file_stem(self) -> str:
        """The stem of every file this block writes (what a file's footer names as its shard)."""
        return self.name

    def partitions(self, recipe: Recipe) -> list[tuple[str, int, str]]:
        """(corruption, severity, relative path) of every file this shard writes, in write order."""
        out = [(CLEAN, 0, partition_path(CLEAN, 0, self.name))]
        for c in recipe.corruptions:
            out += [(c.name, s, partition_path(c.name, s, self.name)) for s in range(1, recipe.severities + 1)]
        return out


def plan_shards(frame_ids: list[str], frames_per_shard: int) -> list[BlockSpec]:
    if frames_per_shard < 1:
        raise ValueError("frames_per_shard must be ≥ 1")
    if len(set(frame_ids)) != len(frame_ids):
        raise ValueError("frame ids must be unique")
    count = max(1, -(-len(frame_ids) // frames_per_shard))
    return [
        BlockSpec(i, count, tuple(frame_ids[i * frames_per_shard: (i + 1) * frames_per_shard]))
        for i in range(count)
        if frame_ids[i * frames_per_shard: (i + 1) * frames_per_shard]
    ]


# A task's target cost (CPU-seconds on one core, from the cost table, which is scaled to what real tasks cost):
# long enough that Ray's per-task overhead (≈ 10 ms) and each task's own scan reads stay below 1 %, short
# enough that full KITTI-C has > 2,000 tasks and the last wave of a 256-worker build is short. With the
# shipped table (6.25 CPU-hours one task per block): 25 groups per block, 2,925 tasks of 4.7–9.1 CPU-s,
# +7 % CPU for rebuilt caches and re-read scans; a table measured on a slower machine gives more tasks.
TARGET_TASK_SECONDS = 8.0


@dataclass(frozen=True)
class TaskSpec:
    """One Ray task: frame block ``shard`` × one group of its partitions ((corruption, severity) pairs)."""

    shard: BlockSpec
    group: int
    groups: int
    parts: tuple[tuple[str, int], ...]

    @property
    def name(self) -> str:
        """The ledger name: the block's name when a block is one task (as before grouping), else with
        ``-g{group}-of-{groups}``."""
        if self.groups == 1:
            return self.shard.name
        return f"{self.shard.name}-g{self.group:03d}-of-{self.groups:03d}"

    @property
    def frame_ids(self) -> tuple[str, ...]:
        return self.shard.frame_ids

    @property
    def file_stem(self) -> str:
        """Files keep their block's name, so their bytes never depend on the grouping."""
        return self.shard.name

    def partitions(self, recipe: Recipe | None = None) -> list[tuple[str, int, str]]:
        """(corruption, severity, relative path) of every file this task writes, in write order."""
        return [(c, s, partition_path(c, s, self.shard.name)) for c, s in self.parts]


def partition_order(recipe: Recipe, costs: CostTable) -> list[tuple[str, int]]:
    """Every partition of ``recipe``: clean first, then grouped by the per-frame caches their stage uses
    (so a group builds each cache for as few stages' sake as possible), then recipe order and severity."""
    index = {c.name: i for i, c in enumerate(recipe.corruptions)}
    corrupted = [(c.name, s) for c in recipe.corruptions for s in range(1, recipe.severities + 1)]
    corrupted.sort(key=lambda p: (costs.needs_of(p[0]), index[p[0]], p[1]))
    return [(CLEAN, 0), *corrupted]


def group_cost_ms(parts: Sequence[tuple[str, int]], costs: CostTable) -> float:
    """Estimated ms per frame of one task holding ``parts``: its reads, its caches once, its partitions."""
    caches = {n for c, s in parts if s > 0 for n in costs.needs_of(c)}
    return costs.read() + sum(costs.prep(n) for n in caches) + sum(costs.partition_ms(c, s) for c, s in parts)


def _pack(order: list[tuple[str, int]], costs: CostTable, cap: float) -> list[list[tuple[str, int]]]:
    """Greedy contiguous packing under ``cap`` (ms per frame), costs kept incrementally (O(partitions))."""
    groups: list[list[tuple[str, int]]] = []
    total, caches = cap + 1.0, set()  # forces a first group
    for p in order:
        new = [n for n in costs.needs_of(p[0]) if n not in caches] if p[1] > 0 else []
        add = costs.partition_ms(*p) + sum(costs.prep(n) for n in new)
        if not groups or total + add > cap:
            groups.append([])
            caches = set(costs.needs_of(p[0])) if p[1] > 0 else set()
            total = costs.read() + costs.partition_ms(*p) + sum(costs.prep(n) for n in caches)
        else:
            caches.update(new)
            total += add
        groups[-1].append(p)
    return groups


def group_partitions(recipe: Recipe, costs: CostTable, groups: int) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Cut `partition_order` into at most ``groups`` contiguous groups minimising the costliest group
    (binary search on the cap; deterministic: a function of recipe, table and ``groups`` only)."""
    order = partition_order(recipe, costs)
    groups = max(1, min(groups, len(order)))
    if groups == 1:
        return (tuple(order),)
    lo = max(group_cost_ms([p], costs) for p in order)
    hi = group_cost_ms(order, costs)
    for _ in range(60):
        mid = (lo + hi) / 2
        if len(_pack(order, costs, mid)) <= groups:
            hi = mid
        else:
            lo = mid
    return tuple(tuple(g) for g in _pack(order, costs, hi))


def groups_for(recipe: Recipe, costs: CostTable, frames_per_shard: int,
               target_seconds: float = TARGET_TASK_SECONDS) -> int:
    """Groups per block so that a task of a full block costs about ``target_seconds``."""
    block_s = frames_per_shard * group_cost_ms(partition_order(recipe, costs), costs) / 1e3
    return max(1, min(recipe.examples_stored(1), math.ceil(block_s / target_seconds)))


def plan_tasks(shards: Sequence[BlockSpec], recipe: Recipe, costs: CostTable, groups: int) -> list[TaskSpec]:
    """Every (block × group) task, block-major: a block's groups are submitted together, so its scans are
    read while still in the page cache and a block's files complete early."""
    cut = group_partitions(recipe, costs, groups)
    return [TaskSpec(shard, g, len(cut), parts) for shard in shards for g, parts in enumerate(cut)]


# --- the schedule model: what `plan` predicts and what the local group choice minimises ---------------------------

TASK_OVERHEAD_S = 0.05  # Ray task scheduling + start + ledger write per task, measured on loopback (order of)
#: seconds from a worker's start to its first task computing as fast as the cost table says: Ray starting the
#: worker process and the task code's imports (≈ 0.65–0.75 s from `ray.init` returning to the first tasks starting,
#: `BuildResult.phases["worker_start"]`), and its first task's one-off warm-up (numba's kernels loaded from the
#: cache, first-call caches: ≈ 0.7 s), on this project's machine (2026-11-27, after the progress actor and the
#: up-front trimesh import went; 2.0 s before). A worker that has to compile the kernels (no cache entry for the
#: CPU numba compiles for) pays ≈ 11 s more for KITTI-C's stages. A cost table measured by `bench scale` replaces
#: it with its own measurement (`Runtime`).
WORKER_START_S = 1.4
#: seconds the driver takes to draw the contact sheet (tiling the panels block 0's tasks painted, then the PNG),
#: on a thread from the moment block 0's last task ends (`build.finish.EarlySheet`): what of it runs past the
#: build's last task adds to the finish. 2.9–3.5 s on a 2-core VM whose speed probe reads 122 ms (2026-11-29:
#: matplotlib's import 1.15 s, tiling 1.55 s, PNG 0.38 s; machines of 4 cores or more import while Ray starts); a
#: table measured by `bench scale --costs-out` replaces it with its own (``sheet_s``)
SHEET_S = 2.5


@dataclass(frozen=True)
class Runtime:
    """What a build costs besides its tasks' CPU, measured by `bench-build bench scale` on one machine and stored
    in the cost table's ``runtime`` (defaults: the model before it was measured).

    ``inflation``: task CPU with every one of ``cores`` busy over task CPU on one worker (memory bandwidth,
    caches, SMT siblings); a build on ``w`` workers pays ``1 + (inflation - 1) × (w - 1) / (cores - 1)`` per
    task, at most the full factor. ``driver_start_s``: the driver before the first task can start (planning, the
    ledger, `ray.init`); ``finish_s`` (+ ``finish_s_per_task``): the driver after the last task (ledger check,
    manifest, card, Ray's stop) besides the contact sheet; ``sheet_s``: the sheet's drawing, which starts when
    block 0's tasks have all ended, so only what of it outlasts the last task is serial (`predict`)."""

    worker_start_s: float = WORKER_START_S
    driver_start_s: float = 0.0
    finish_s: float = 0.0
    finish_s_per_task: float = 0.0
    inflation: float = 1.0
    cores: int = 1
    sheet_s: float = SHEET_S

    def inflation_at(self, workers: int) -> float:
        if self.cores <= 1 or workers <= 1:
            return 1.0
        return 1.0 + (self.inflation - 1.0) * min(1.0, (workers - 1) / (self.cores - 1))

    @classmethod
    def of(cls, costs: CostTable, worker_start_s: float | None = None) -> Runtime:
        r = costs.extra.get("runtime") or {}
        known = {k: float(r[k]) for k in ("worker_start_s", "driver_start_s", "finish_s", "finish_s_per_task",
                                          "inflation", "sheet_s") if k in r}
        out = cls(**known, cores=int(r.get("cores", 1)))  # type: ignore[arg-type]
        if worker_start_s is not None:
            out = dataclasses.replace(out, worker_start_s=worker_start_s)
        return out


def simulate(task_seconds: Iterable[float], workers: int, overhead_s: float = TASK_OVERHEAD_S,
             start_s: float = 0.0, inflation: float = 1.0, first: int = 0) -> dict[str, float]:
    """List scheduling in submission order, every worker free from ``start_s``, each task costing ``inflation`` ×
    its one-worker seconds: makespan (s), busy CPU-s (one-worker seconds), utilisation = busy / (N × makespan)
    (a worker's start and the inflation are not useful work), and occupancy = utilisation × inflation: the share
    of the workers' time a task runs, however slow the hardware makes it at that occupancy (how well the split
    keeps workers busy, apart from what the machine costs). Workers beyond one per task never get one, so only
    as many are simulated (``--workers 10**9`` allocated a list of that many). ``first_done_s``: when the first
    ``first`` tasks (block 0's) have all ended."""
    task_seconds = list(task_seconds)
    free = [start_s] * min(workers, max(len(task_seconds), 1))
    busy, first_done = 0.0, 0.0
    for i, cost in enumerate(task_seconds):
        start = heapq.heappop(free)
        heapq.heappush(free, end := start + cost * inflation + overhead_s)
        busy += cost
        if i < first:
            first_done = max(first_done, end)
    makespan = max(free) if free else 0.0
    utilisation = busy / (workers * makespan) if makespan else 1.0
    return {"workers": workers, "makespan_s": makespan, "busy_cpu_s": busy, "utilisation": utilisation,
            "occupancy": utilisation * inflation if makespan else 1.0, "first_done_s": first_done}


def predict(task_seconds: Sequence[float], workers: int, runtime: Runtime, first_block: int = 1) -> dict[str, float]:
    """`simulate` at ``workers`` with ``runtime``'s worker start and inflation, plus the driver's serial parts:
    ``wall_s`` = the driver's start + makespan + finish, and ``wall_utilisation`` = one-worker task CPU / (N × wall).
    The finish includes ``sheet_tail_s``, what of the contact sheet's drawing outlasts the last task: it starts
    when block 0's tasks (the first ``first_block`` submitted: its groups) have all ended, so where every task
    ends at once (as many workers as tasks) all of it is serial."""
    m = simulate(task_seconds, workers, start_s=runtime.worker_start_s, inflation=runtime.inflation_at(workers),
                 first=first_block)
    tail = max(0.0, m["first_done_s"] + runtime.sheet_s - m["makespan_s"]) if task_seconds else 0.0
    finish = runtime.finish_s + runtime.finish_s_per_task * len(task_seconds) + tail
    wall = runtime.driver_start_s + m["makespan_s"] + finish
    return {**m, "inflation": runtime.inflation_at(workers), "driver_start_s": runtime.driver_start_s,
            "sheet_tail_s": tail, "finish_s": finish, "wall_s": wall,
            "wall_utilisation": m["busy_cpu_s"] / (workers * wall) if wall else 1.0}


def task_seconds(shards: Sequence[BlockSpec], cut, costs: CostTable) -> list[float]:
    """One-worker seconds of every task of ``shards`` cut into ``cut``, block-major (submission order)."""
    per = [group_cost_ms(parts, costs) / 1e3 for parts in cut]
    return [len(s.frame_ids) * c for s in shards for c in per]


def choose_groups(recipe: Recipe, costs: CostTable, shards: Sequence[BlockSpec], workers: int,
                  max_groups: int | None = None, worker_start_s: float | None = None) -> int:
    """Groups per block that minimise the predicted wall time on ``workers`` (worker start and the per-task CPU
    inflation at that occupancy included: `Runtime`), up to the cost-sized number (`groups_for`) or as many as
    give every worker a task, whichever is more (2 demo frames in one block on 2 workers: 2 tasks, not 1 task and
    an idle worker). Splitting is not free — every group rebuilds the per-frame caches its stages use — so a split
    must shorten the makespan by ≥ 2 % to be preferred to a coarser one: a few workers get one task per block
    (least CPU), hundreds get thousands of tasks."""
    runtime = Runtime.of(costs, worker_start_s)
    fps = max(len(s.frame_ids) for s in shards)
    most = max_groups or max(groups_for(recipe, costs, fps), math.ceil(workers / len(shards)))
    best_s, best_g = float("inf"), 1
    for g in range(1, most + 1):
        cut = group_partitions(recipe, costs, g)
        if len(cut) < g:  # no finer cut exists
            break
        m = predict(task_seconds(shards, cut, costs), workers, runtime, len(cut))["wall_s"]
        if m < best_s * 0.98:
            best_s, best_g = m, g
    return best_g


def recorded_groups(recipe: Recipe, old_run: dict[str, Any]) -> list[list[list[Any]]]:
    """The split a ledger recorded; a ledger from before grouping is one task per block."""
    recorded = old_run.get("task_groups")
    if recorded is None:
        recorded = [[[CLEAN, 0]] + [[c.name, s] for c in recipe.corruptions for s in range(1, recipe.severities + 1)]]
    return recorded


def task_groups(recipe: Recipe, fps: int, groups: int | None, old_run: dict | None, fingerprint: str,
                overwrite: bool, *, shards: list[BlockSpec] | None = None,
                workers: int | None = None) -> tuple[tuple[tuple[str, int], ...], ...]:
    """How each block's partitions are split into tasks.

    A resumed build keeps the split its ledger recorded (whatever the cost table says today), so a done
    task is never redone and never half-overlaps a new one; asking for another number of groups on a build
    in progress is refused. A new build cuts ``groups`` with `group_partitions`; by default, for a known number
    of ``workers`` (a local Ray) the number that minimises the predicted wall time (`choose_groups`: one task per
    block on a few workers, as splitting rebuilds per-frame caches), else (a cluster) the cost-sized number
    (`groups_for`), whose thousands of short tasks also bound what a lost node or a straggler costs."""
    if old_run is not None and old_run.get("fingerprint") == fingerprint and not overwrite:
        recorded = recorded_groups(recipe, old_run)
        if groups is not None and groups != len(recorded):
            raise LedgerMismatch(
                f"this build was started with {len(recorded)} task group(s) per block, not {groups}: run again "
                f"without --groups (or with --groups {len(recorded)}) to resume it, or pass --overwrite to "
                "start over")
        return tuple(tuple((str(c), int(s)) for c, s in grp) for grp in recorded)
    costs = load_costs(recipe)
    if groups is None and workers is not None and shards:
        groups = choose_groups(recipe, costs, shards, workers)
    return group_partitions(recipe, costs, groups or groups_for(recipe, costs, fps))
