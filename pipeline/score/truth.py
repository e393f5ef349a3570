"""Ground truth of a built version, read column-wise from its Parquet files (no point decoding).

Partition (corruption, severity) comes from the manifest's shard list, so this works whether or
not the files carry those columns. Object benchmarks are read from these columns when present:
``class_id`` (int, the benchmark's class id), ``sigma`` (list<float>, per-point noise σ;
ModelNet40-E), ``known`` (bool; 3DOS) and ``unknown_set`` (string, the unknown set an unknown
example belongs to; 3DOS).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bench_build.format.checked import CheckedParquetFile, unreadable
from bench_build.format.schema import decode_points
from bench_build.manifests.manifest import read_manifest
from bench_build.score.validate import ScoreError


@dataclass(frozen=True)
class Partition:
    corruption: str
    severity: int


def read_truth(root: str | Path, rel: str, columns: list[str], *, present_only: bool = False) -> pa.Table:
    """``columns`` of the version file ``root/rel`` (with ``present_only``, those of them it has), read with page
    checksums verified: a damaged page is an `IntegrityError` naming the file, never ground truth decoded from
    other bytes into the scores; a file that cannot be read is a `ScoreError` naming it."""
    try:
        pf = CheckedParquetFile.local(Path(root) / rel)
        return pf.read(columns=[c for c in columns if c in pf.schema_arrow.names] if present_only else columns)
    except OSError as e:  # missing, unreadable (each names the file)
        raise ScoreError(unreadable(e, root)) from None


def iter_columns(version_dir: str | Path, columns: list[str]) -> Iterator[tuple[Partition, dict[str, list[Any]]]]:
    """For every shard in manifest order: its partition and the requested columns that exist in it."""
    root = Path(version_dir)
    manifest = read_manifest(root)
    for s in manifest["shards"]:
        table = read_truth(root, s["path"], columns, present_only=True)
        present = table.column_names
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
            raise ScoreError(f"{version_dir}: the version has no 'class_id' column: not an object benchmark")
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


def points_in_boxes(points: np.ndarray, boxes: list[dict[str, Any]]) -> list[int]:
    """LiDAR points inside each box (boundaries included, as the devkit's ``points_in_box``). Points are sorted
    by x once, so each box tests only the slice within its bounding circle's x range."""
    xyz = np.asarray(points[:, :3], np.float64)
    order = np.argsort(xyz[:, 0], kind="stable")
    xs = xyz[order, 0]
    out = []
    for b in boxes:
        reach = math.hypot(b["dx"], b["dy"]) / 2 + 1e-6  # a rotated box reaches at most its half-diagonal in x
        lo = int(np.searchsorted(xs, b["x"] - reach, side="left"))
        hi = int(np.searchsorted(xs, b["x"] + reach, side="right"))
        d = xyz[order[lo:hi]] - np.array([b["x"], b["y"], b["z"]], np.float64)
        c, s = math.cos(b["heading"]), math.sin(b["heading"])
        u, v = d[:, 0] * c + d[:, 1] * s, -d[:, 0] * s + d[:, 1] * c
        inside = (np.abs(u) <= b["dx"] / 2) & (np.abs(v) <= b["dy"] / 2) & (np.abs(d[:, 2]) <= b["dz"] / 2)
        out.append(int(inside.sum()))
    return out


def read_build(version_dir: str | Path, *, count_points: bool = True) -> tuple[
        dict[Partition, dict[str, tuple[list | None, str]]], dict[tuple[Partition, str], list[int]]]:
    """(partition → frame id → (box rows, example key), (partition, frame id) → LiDAR points in each box).

    Point counts are the clean frame's for every partition (the ground truth of a corrupted scan is the clean
    scan's boxes, as in the papers' evaluations); a version without a clean partition counts each frame's own.
    Without ``count_points`` no point is read and the counts are empty.
    """
    root = Path(version_dir)
    shards = manifest_of(root)["shards"]
    has_clean = any(s["corruption"] == "clean" for s in shards)
    parts: dict[Partition, dict[str, tuple[list | None, str]]] = {}
    own: dict[tuple[Partition, str], list[int]] = {}
    clean: dict[str, list[int]] = {}
    for s in shards:
        part = Partition(s["corruption"], int(s["severity"]))
        with_points = count_points and (part.corruption == "clean" or not has_clean)
        table = read_truth(root, s["path"], ["key", "frame_id", "boxes"] + (["points"] * with_points))
        fids, keys, boxes = table["frame_id"].to_pylist(), table["key"].to_pylist(), table["boxes"].to_pylist()
        parts.setdefault(part, {}).update(zip(fids, zip(boxes, keys, strict=True), strict=True))
        if with_points:
            for fid, b, pts in zip(fids, boxes, decode_points(table["points"], writable=False), strict=True):
                own[(part, fid)] = clean[fid] = points_in_boxes(pts, b or [])
    if not count_points:
        return parts, {}
    unclean = sorted({fid for frames in parts.values() for fid in frames} - set(clean)) if has_clean else []
    if unclean:
        raise ScoreError(f"{root}: {len(unclean)} frames have no clean example to count box points in, e.g. "
                         + ", ".join(unclean[:5]))
    counts = {(p, fid): (clean[fid] if has_clean else own[(p, fid)]) for p, frames in parts.items() for fid in frames}
    return parts, counts
