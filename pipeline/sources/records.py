"""Flat binary point files: N records of C little-endian float32 values, validated loudly.

Shared by the readers of the real adverse-weather sources (STF, Boreas): both store a scan as a raw
``.bin`` of float32 records and differ only in the record width and the meaning of the columns.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench_build.sources.base import SourceError

#: the farthest a return of any automotive LiDAR lies is a few hundred metres: a coordinate past this is no return
MAX_COORDINATE = 1e4  # m


def implausible(pts: np.ndarray) -> str | None:
    """Why records read as x, y, z, intensity, … are no LiDAR scan, or None: a coordinate beyond `MAX_COORDINATE`
    or a negative intensity (every format read here records intensity as 0..1 or 0..255). Float64 records read as
    float32 give both: each value's two halves become two numbers, the low half of a coordinate up to 1e19."""
    far = np.flatnonzero((np.abs(pts[:, :3]) > MAX_COORDINATE).any(axis=1))
    if far.size:
        return (f"{far.size} point(s) beyond {MAX_COORDINATE:g} m (first at point {far[0]}: "
                f"{', '.join(f'{v:.3g}' for v in pts[far[0], :3])})")
    dark = np.flatnonzero(pts[:, 3] < 0)
    if dark.size:
        return f"{dark.size} point(s) with a negative intensity (first at point {dark[0]}: {pts[dark[0], 3]:.3g})"
    return None


def reads_as_float64(path: Path, width: int) -> bool:
    """Whether ``path`` holds plausible records of ``width`` float64 values (finite, not `implausible`)."""
    try:
        size = path.stat().st_size
    except OSError:
        return False
    if size == 0 or size % (8 * width):
        return False
    pts = np.fromfile(path, dtype="<f8").reshape(-1, width)
    return bool(np.isfinite(pts).all()) and implausible(pts) is None


def float64_hint(path: Path, width: int, name: str) -> str:
    """``"; its bytes read as plausible float64 records: …"`` when they do (`reads_as_float64`), else ``""``: the
    end of a reader's error for a scan saved from a float64 array, whose size passes the float32 size check (N
    float64 records are 2N float32 ones). Computed on the error path only."""
    if not reads_as_float64(path, width):
        return ""
    return (f"; its bytes read as plausible float64 records: {name} scans are {width} float32 per point, convert "
            "it (numpy: np.fromfile(f, '<f8').astype('<f4').tofile(f))")


def check_points(path: Path, pts: np.ndarray, width: int, name: str) -> np.ndarray:
    """``pts`` (a scan's float32 records), or a SourceError naming the file when a point holds NaN/inf or they are
    no LiDAR scan (`implausible`), saying float64 when the bytes read as such (`float64_hint`)."""
    bad = ~np.isfinite(pts).all(axis=1)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise SourceError(path, f"{int(bad.sum())} point(s) with NaN/inf values (first at point {first})"
                                f"{float64_hint(path, width, name)}")
    why = implausible(pts)
    if why is not None:
        raise SourceError(path, f"not a LiDAR scan of {name} float32 records: {why}{float64_hint(path, width, name)}")
    return pts


def read_records(path: Path, width: int, layout: str, name: str) -> np.ndarray:
    """N×``width`` float32 records of ``path`` (a ``name`` scan); SourceError naming the file on a bad size, NaN/inf
    or values no LiDAR returns (the last two: `check_points`)."""
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
    return check_points(path, np.fromfile(path, dtype="<f4").reshape(-1, width), width, name)


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
