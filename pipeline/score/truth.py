"""Ground truth of a built version, read column-wise from its Parquet files (no point decoding).

Partition (corruption, severity) comes from the manifest's shard list, so this works whether or
not the files carry those columns. Object benchmarks are read from these columns when present:
``class_id`` (int, the benchmark's class id), ``sigma`` (list<float>, per-point noise σ;
ModelNet40-E), ``known`` (bool; 3DOS) and ``unknown_set`` (string, the unknown set an unknown
example belongs to; 3DOS).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from manifests.manifest import read_manifest


@dataclass(frozen=True)
class Partition:
    corruption: str
    severity: int


def iter_columns(version_dir: str | Path, columns: list[str]) -> Iterator[tuple[Partition, dict[str, list[Any]]]]:
    """For every shard in manifest order: its partition and the requested columns that exist in it."""
    root = Path(version_dir)
    manifest = read_manifest(root)
    for s in manifest["shards"]:
        pf = pq.ParquetFile(root / s["path"])
        present = [c for c in columns if c in pf.schema_arrow.names]
        table = pf.read(columns=present)
        yield Partition(s["corruption"], int(s["severity"])), {c: table[c].to_pylist() for c in present}


def manifest_of(version_dir: str | Path) -> dict[str, Any]:
    return read_manifest(Path(version_dir))


@dataclass(frozen=True)
class ObjectTruth:
    keys: list[str]
    partition: list[Partition]
    class_id: np.ndarray
    sigma_mean: np.ndarray | None
    known: np.ndarray | None
    unknown_set: list[str | None] | None
    scenario: list[str | None] | None
    #: examples of the build that are not scored (train / val of a build holding several splits): key → split
    other_split: dict[str, str] = field(default_factory=dict)


def object_truth(version_dir: str | Path) -> ObjectTruth:
    keys, parts, cls, sig, known, uset, scen = [], [], [], [], [], [], []
    other: dict[str, str] = {}
    has = {"sigma": False, "known": False, "unknown_set": False, "scenario": False}
    for part, cols in iter_columns(version_dir, ["key", "class_id", "sigma", "known", "unknown_set", "scenario",
                                                 "split"]):
        if "class_id" not in cols:
            raise ValueError(f"{version_dir}: the version has no 'class_id' column: not an object benchmark")
        n = len(cols["key"])
        split = cols.get("split", ["test"] * n)
        keep = [i for i in range(n) if split[i] in ("test", None)]
        other.update((cols["key"][i], split[i]) for i in range(n) if split[i] not in ("test", None))
        for c in has:
            has[c] |= c in cols
        for name, dest in (("key", keys), ("class_id", cls), ("known", known), ("unknown_set", uset),
                           ("scenario", scen)):
            col = cols.get(name, [None] * n)
            dest += [col[i] for i in keep]
        parts += [part] * len(keep)
        sigma = cols.get("sigma", [None] * n)
        sig += [float(np.mean(sigma[i])) if sigma[i] else np.nan for i in keep]
    return ObjectTruth(keys, parts, np.asarray(cls, np.int64), np.asarray(sig) if has["sigma"] else None,
                       np.asarray(known, bool) if has["known"] else None, uset if has["unknown_set"] else None,
                       scen if has["scenario"] else None, other)
