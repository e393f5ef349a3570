"""Planning: (recipe, frames) → shard specs with deterministic, parseable names. Pure: no Ray, no I/O.

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
(`pipeline.costs`), so stages that share a KD-tree or a box index share a task and build it once. File names
do not depend on grouping: every file is still ``<partition>/part-{b}-of-{B}.parquet`` and its bytes are the
same whatever the number of groups or workers. A block's clean copy lives in its group 0 (the first
partition of the order): it is encoded once per frame, like before; every group reads its block's scans
itself (≈ 5 ms per frame, negligible next to the stages).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from manifests.manifest import CLEAN, partition_dir
from manifests.recipe import Recipe
from pipeline.costs import CostTable

SHARD_RE = re.compile(r"^part-(\d{5})-of-(\d{5})$")


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
class ShardSpec:
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


def parse_shard_name(name: str) -> tuple[int, int]:
    m = SHARD_RE.match(name)
    if not m:
        raise ValueError(f"not a shard name: {name!r}")
    return int(m.group(1)), int(m.group(2))


def plan_shards(frame_ids: list[str], frames_per_shard: int) -> list[ShardSpec]:
    if frames_per_shard < 1:
        raise ValueError("frames_per_shard must be ≥ 1")
    if len(set(frame_ids)) != len(frame_ids):
        raise ValueError("frame ids must be unique")
    count = max(1, -(-len(frame_ids) // frames_per_shard))
    return [
        ShardSpec(i, count, tuple(frame_ids[i * frames_per_shard: (i + 1) * frames_per_shard]))
        for i in range(count)
        if frame_ids[i * frames_per_shard: (i + 1) * frames_per_shard]
    ]


# A task's target cost (CPU-seconds on one core, from the cost table, which is scaled to what real tasks cost):
# long enough that Ray's per-task overhead (≈ 10 ms) and each task's own scan reads stay below 1 %, short
# enough that full KITTI-C has > 2,000 tasks and the last wave of a 256-worker build is short. With the
# shipped table (7.1 CPU-hours, measured in a slow hour of this VM): 28 groups per block, 3,276 tasks of
# 5.8–9.8 CPU-s, +8 % CPU for rebuilt caches and re-read scans; a table measured in a fast hour (≈ 5.3
# CPU-hours) gives 21 groups, 2,457 tasks, still above 2,000.
TARGET_TASK_SECONDS = 8.0


@dataclass(frozen=True)
class TaskSpec:
    """One Ray task: frame block ``shard`` × one group of its partitions ((corruption, severity) pairs)."""

    shard: ShardSpec
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


def plan_tasks(shards: Sequence[ShardSpec], recipe: Recipe, costs: CostTable, groups: int) -> list[TaskSpec]:
    """Every (block × group) task, block-major: a block's groups are submitted together, so its scans are
    read while still in the page cache and a block's files complete early."""
    cut = group_partitions(recipe, costs, groups)
    return [TaskSpec(shard, g, len(cut), parts) for shard in shards for g, parts in enumerate(cut)]
