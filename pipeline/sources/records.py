"""Flat binary point files: N records of C little-endian float32 values, validated loudly.

Shared by the readers of the real adverse-weather sources (STF, Boreas): both store a scan as a raw
``.bin`` of float32 records and differ only in the record width and the meaning of the columns.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench_build.sources.base import SourceError
from bench_build.stages.frame import Frame
from bench_build.stages.sensor import Sensor


def read_records(path: Path, width: int, layout: str) -> np.ndarray:
    """N×``width`` float32 records of ``path``; SourceError naming the file on a bad size or NaN/inf."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise SourceError(path, "file not found") from None
    record = 4 * width
    if size == 0:
        raise SourceError(path, "empty file (0 points)")
    if size % record:
        raise SourceError(path, f"size {size} bytes is not a multiple of {record} "
                                f"({width} float32 per point: {layout})")
    pts = np.fromfile(path, dtype="<f4").reshape(-1, width)
    bad = ~np.isfinite(pts).all(axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise SourceError(path, f"{int(bad.sum())} point(s) with NaN/inf values (first at point {first})")
    return pts


def write_records(path: Path, points: np.ndarray, width: int) -> None:
    """Write N×``width`` points as little-endian float32 (the inverse of `read_records`)."""
    pts = np.ascontiguousarray(points, dtype="<f4")
    if pts.ndim != 2 or pts.shape[1] != width:
        raise ValueError(f"{path}: expected N×{width} points, got shape {pts.shape}")
    path.parent.mkdir(parents=True, exist_ok=True)
    pts.tofile(path)


def list_scans(root: Path) -> list[Path]:
    """Every ``*.bin`` under ``root`` (recursively), sorted; loud when the directory is missing or empty."""
    if not root.exists():
        raise SourceError(root, "directory not found")
    if not root.is_dir():
        raise SourceError(root, "not a directory")
    files = sorted(p for p in root.rglob("*.bin") if p.is_file())
    if not files:
        raise SourceError(root, "no *.bin scans found (empty directory?)")
    return files


def frame_id_of(root: Path, path: Path) -> str:
    """A scan's id: its path relative to the source root, without ``.bin`` (stable, unique)."""
    return path.relative_to(root).with_suffix("").as_posix()


class RecordSource:
    """A directory of raw ``.bin`` scans (searched recursively, stable sorted order).

    Subclasses set ``kind``, ``fields`` (one per float32 of a record) and ``intensity_scale``.
    """

    kind = "records"
    fields: tuple[str, ...] = ()
    intensity_scale = "unit"
    sensor: Sensor | None = None  # the recording LiDAR (bench_build.stages.sensor), None when unknown

    def __init__(self, root: str | Path, split: str | None = None) -> None:
        self.root = Path(root)
        self._files: dict[str, Path] | None = None

    def _index(self) -> dict[str, Path]:
        if self._files is None:
            self._files = {frame_id_of(self.root, p): p for p in list_scans(self.root)}
        return self._files

    def list_frames(self) -> list[str]:
        return list(self._index())

    def path(self, frame_id: str) -> Path:
        return self.root / f"{frame_id}.bin"

    def read_points(self, frame_id: str) -> np.ndarray:
        return read_records(self.path(frame_id), len(self.fields), ", ".join(self.fields))

    def read(self, frame_id: str):
        return Frame(frame_id=frame_id, points=self.read_points(frame_id), fields=self.fields,
                     intensity_scale=self.intensity_scale, sensor=self.sensor)

    def describe(self) -> dict:
        return {"kind": self.kind, "root": str(self.root), "fields": list(self.fields),
                "intensity_scale": self.intensity_scale}
