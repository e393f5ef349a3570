"""Planning: (recipe, frames) → shard specs with deterministic, parseable names. Pure: no Ray, no I/O.

A shard is a block of consecutive frames carried through the clean copy and every corruption ×
severity. Block ``b`` of ``B`` writes one file per partition, all named ``part-{b:05d}-of-{B:05d}``::

    data/corruption=clean/severity=0/part-00003-of-00117.parquet
    data/corruption=fog/severity=3/part-00003-of-00117.parquet

(layout v2: clean is a partition of the one hive tree, so every hive reader sees it with the rest.)

An example's key is ``benchmark/frame_id/corruption/severity`` and its RNG is
``default_rng(SeedSequence([recipe_seed, stable_hash(key)]))`` — independent of worker count,
scheduling order and shard layout.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import numpy as np

from manifests.manifest import partition_dir
from manifests.recipe import Recipe

CLEAN = "clean"
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
