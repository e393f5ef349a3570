"""Ring (laser channel) index of every point: from the source's ring column, or recovered (as Robo3D's scripts do).

Ring 0 is the top laser, as in the demo source and Robo3D's elevation rows. Recovery methods:

- ``azimuth_wrap`` (Robo3D beam-missing / cross-sensor): ``u = (atan2(y, x) mod 2π)/2π``; a new
  ring starts at point k when ``u[k-1] > 0.8`` and ``u[k] < 0.2``; ring = running count, clipped to 63.
  Exact on a file in raw sensor order (KITTI ``.bin``: ring by ring, each a counter-clockwise sweep),
  meaningless after any reordering or filtering.
- ``elevation_bins`` (Robo3D snow): ``row = floor(64·(1 − (ψ + 25°)/28°))`` clipped to [0, 63]. The
  0.4375° rows do not match the HDL-64's 1/3° / 1/2° laser spacing (some rows hold two lasers, some none);
  kept for parity only.
- ``laser_table``: the nearest elevation of `HDL64E_ELEVATIONS_DEG`. Order-independent.

`frame_rings` picks one: the frame's ``ring`` column when it is present and valid, otherwise (``auto``)
the azimuth-wrap result when it looks like a real 64-ring sweep, otherwise the laser table. It never
raises on a missing or broken ring column; it returns the method it used so callers can record it.
"""

from __future__ import annotations

import weakref

import numpy as np

from bench_build.stages.frame import Frame

#: frame -> {(method, n): (rings, method used)}: beam_missing and cross_sensor (6 examples a frame) and
#: snow share one recovery per frame, like the frame's KD-tree; frames are immutable, so it never goes stale
_RINGS_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

N_RINGS = 64

#: Elevation (degrees) of the 64 HDL-64E lasers, ring 0 = top, as used by `rings_from_laser_table`.
#: Derived from the nominal HDL-64E geometry (Velodyne's datasheet) (KITTI's sensor is an S2): vertical FOV +2.0° to
#: −24.8°; upper block of 32 lasers 1/3° apart, +2.0° … −8.333°; lower block of 32 lasers evenly spaced
#: from −8.83° to −24.8° (31 gaps of 0.5152°). This is the same geometry the demo source ray-casts. The
#: measured STF S3 table (+1.867° … −24.816°, only its first 8 entries are listed) differs by up to
#: ≈0.3° in the lower block, i.e. by more than half a laser gap, so it is *not* used; pass your own
#: table to `rings_from_laser_table` for a sensor with a known calibration.
HDL64E_ELEVATIONS_DEG: np.ndarray = np.concatenate([2.0 - np.arange(32) / 3.0, np.linspace(-8.83, -24.8, 32)])
HDL64E_ELEVATIONS_DEG.setflags(write=False)

#: Small integer codes for the method names (e.g. to store the method in a per-point label column).
RING_METHOD_CODES: dict[str, int] = {"column": 0, "azimuth_wrap": 1, "laser_table": 2, "elevation_bins": 3}
#: ``row`` is the ring column of a range-image source (Waymo: the row, so the laser, by construction), taken as it
#: is: `ring_column_valid`'s elevation check needs points in the sensor's own frame, and Waymo's are in the vehicle
#: frame, where it fails and ``column`` would fall back to a recovery. Recorded as ``column``.
METHODS = ("auto", "row", *RING_METHOD_CODES)


def _xyz64(xyz: np.ndarray) -> np.ndarray:
    xyz = np.asarray(xyz, dtype=np.float64).reshape(-1, 3)
    return np.nan_to_num(xyz, nan=0.0, posinf=0.0, neginf=0.0)


def elevation_deg(xyz: np.ndarray) -> np.ndarray:
    """Elevation ψ = asin(z/R) in degrees (0 for R = 0 or non-finite points)."""
    xyz = _xyz64(xyz)
    r = np.linalg.norm(xyz, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(r > 0, xyz[:, 2] / np.where(r > 0, r, 1.0), 0.0)
    return np.degrees(np.arcsin(np.clip(s, -1.0, 1.0)))


def _raw_wrap_count(xyz: np.ndarray) -> np.ndarray:
    xyz = _xyz64(xyz)
    u = np.mod(np.arctan2(xyz[:, 1], xyz[:, 0]), 2 * np.pi) / (2 * np.pi)
    starts = (u[:-1] > 0.8) & (u[1:] < 0.2)
    out = np.zeros(len(xyz), dtype=np.int64)
    if len(xyz) > 1:
        np.cumsum(starts, out=out[1:])
    return out


def rings_from_azimuth_wrap(xyz: np.ndarray, n: int = N_RINGS) -> np.ndarray:
    """ring = number of azimuth wraps before the point (needs the raw sensor order), clipped."""
    return np.clip(_raw_wrap_count(xyz), 0, n - 1)


def rings_from_elevation_bins(xyz: np.ndarray, n: int = N_RINGS) -> np.ndarray:
    """Robo3D's rows, ``floor(n·(1 − (ψ + 25°)/28°))`` clipped to [0, n − 1]; row 0 is the top."""
    psi = elevation_deg(xyz)
    return np.clip(np.floor(n * (1.0 - (psi + 25.0) / 28.0)), 0, n - 1).astype(np.int64)


def rings_from_laser_table(xyz: np.ndarray, elevations_deg: np.ndarray = HDL64E_ELEVATIONS_DEG) -> np.ndarray:
    """index (into ``elevations_deg``) of the laser whose elevation is nearest to the point's."""
    table = np.asarray(elevations_deg, dtype=np.float64).ravel()
    if table.size == 0:
        raise ValueError("rings_from_laser_table: empty elevation table")
    order = np.argsort(table, kind="stable")
    srt = table[order]
    mids = 0.5 * (srt[1:] + srt[:-1])
    return order[np.searchsorted(mids, elevation_deg(xyz))].astype(np.int64)


def _coherent(rings: np.ndarray, psi: np.ndarray, *, max_iqr_deg: float = 1.0) -> bool:
    """True when points of one ring share an elevation: the point-weighted median of the per-ring
    elevation IQR is below ``max_iqr_deg`` (a random ring assignment gives ≈10° on an HDL-64 scan)."""
    if len(rings) < 100:
        return True
    order = np.argsort(psi, kind="stable")  # = lexsort((psi, rings)): elevation order within each ring,
    order = order[np.argsort(rings[order], kind="stable")]  # two stable sorts, the int one a fast radix
    r, p = rings[order], psi[order]
    bounds = np.flatnonzero(np.diff(r)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(r)]])
    sizes = ends - starts
    q1 = p[starts + (sizes - 1) // 4]
    q3 = p[starts + (3 * (sizes - 1)) // 4]
    iqr = np.repeat(q3 - q1, sizes)
    return bool(np.median(iqr) < max_iqr_deg)


def ring_column_in_range(frame: Frame, n: int = N_RINGS) -> bool:
    """The frame has a ``ring`` column of integers in [0, n)."""
    if "ring" not in frame.fields:
        return False
    col = frame.column("ring").astype(np.float64)
    return len(col) == 0 or bool(np.all(np.isfinite(col)) and np.all(col == np.round(col)) and col.min() >= 0
                                 and col.max() < n)


def ring_column_valid(frame: Frame, n: int = N_RINGS) -> bool:
    """The frame has a ``ring`` column of integers in [0, n) whose rings are coherent in elevation."""
    if not ring_column_in_range(frame, n):
        return False
    col = frame.column("ring").astype(np.float64)
    if len(col) == 0:
        return True
    # returns within 2 m (the ego vehicle's roof, no-return placeholders at the origin: 23 % of a real
    # nuScenes sweep) have elevations unrelated to their laser; judge coherence on the others
    far = np.linalg.norm(frame.xyz.astype(np.float64), axis=1) > 2.0
    return _coherent(col[far].astype(np.int64), elevation_deg(frame.xyz[far]))


def azimuth_wrap_plausible(xyz: np.ndarray, n: int = N_RINGS) -> bool:
    """Heuristic check that `rings_from_azimuth_wrap` saw a raw n-ring sweep: n to n + 2 wrap-delimited
    runs, ring elevations decreasing from ring 0 (top) downwards, and each run coherent in elevation."""
    if len(xyz) < 10 * n:
        return False
    raw = _raw_wrap_count(xyz)
    n_runs = int(raw[-1]) + 1
    if not n <= n_runs <= n + 2:
        return False
    rings = np.clip(raw, 0, n - 1)
    psi = elevation_deg(xyz)
    if not _coherent(rings, psi, max_iqr_deg=0.5):
        return False
    counts = np.bincount(rings, minlength=n)
    sums = np.bincount(rings, weights=psi, minlength=n)
    present = counts > 0
    mean = sums[present] / counts[present]
    return bool(np.mean(np.diff(mean) < 0) >= 0.9)


def frame_rings(frame: Frame, method: str = "auto", *, n: int | None = None) -> tuple[np.ndarray, str]:
    """(ring index per point, method used).

    ``method``: ``auto`` (ring column if valid, else azimuth-wrap if plausible, else laser table),
    ``column`` (the ring column; falls back like ``auto`` when it is missing or invalid), ``row`` (the ring column
    as it is, a range-image source's row: ValueError when it is missing or out of [0, n)), or one of the
    recovery methods, applied as asked. The method used is one of `RING_METHOD_CODES`.

    The beam count ``n`` and the laser table come from the frame's `Sensor` (a 32-beam nuScenes scan has
    rings 0–31 and its own elevations); without one, an HDL-64E is assumed (KITTI files carry no sensor).
    """
    if method not in METHODS:
        raise ValueError(f"frame_rings: unknown method {method!r}; expected one of {METHODS}")
    per_frame = _RINGS_CACHE.setdefault(frame, {})
    if (method, n) not in per_frame:
        rings, used = _frame_rings(frame, method, n)
        rings.setflags(write=False)  # shared between callers
        per_frame[(method, n)] = (rings, used)
    return per_frame[(method, n)]


def rings_cached(frame: Frame) -> bool:
    """Whether `frame_rings` has recovered ``frame``'s rings (a stage used them: what `bench` records as the frame's
    ``rings`` cache, paid once per frame like its KD-tree)."""
    return frame in _RINGS_CACHE


def _frame_rings(frame: Frame, method: str, n: int | None) -> tuple[np.ndarray, str]:
    sensor = frame.sensor
    if n is None:
        n = sensor.beams if sensor is not None else N_RINGS
    table = sensor.elevations if sensor is not None else HDL64E_ELEVATIONS_DEG
    xyz = frame.xyz
    if method == "row":
        if not ring_column_in_range(frame, n):
            has = "has none" if "ring" not in frame.fields else "has other values"
            raise ValueError(f"ring_method 'row' needs a ring column of integers in [0, {n}) (a range-image "
                             f"source's row), and this frame {has}")
        return frame.column("ring").astype(np.int64), "column"
    if method == "azimuth_wrap":
        return rings_from_azimuth_wrap(xyz, n), method
    if method == "elevation_bins":
        return rings_from_elevation_bins(xyz, n), method
    if method == "laser_table":
        return rings_from_laser_table(xyz, table), method
    if ring_column_valid(frame, n):
        return frame.column("ring").astype(np.int64), "column"
    if azimuth_wrap_plausible(xyz, n):
        return rings_from_azimuth_wrap(xyz, n), "azimuth_wrap"
    return rings_from_laser_table(xyz, table), "laser_table"
