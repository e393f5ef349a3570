"""Preprocessing that makes scans of different sensors comparable before the classifier sees them.

Real weather data (STF: HDL-64E S3D; Boreas: Alpha-Prime 128) and the build's source (KITTI: HDL-64E)
differ in range, vertical field of view, point density and intensity scale. Every scan, real or
built, goes through the same steps, recorded in the report:

1. **Crop** to a common range band ``min_range ≤ ‖(x, y, z)‖ ≤ max_range`` (drops ego-vehicle returns
   and the far tail only long-range sensors have) and to a common field of view: elevation within
   ``elevation_deg`` (default the HDL-64E's −24.8°…+2.0°, which the Alpha-Prime's −25°…+15° contains)
   and azimuth within ``azimuth_deg`` (default the full 360°).
2. **Intensity to one scale**: the source's declared scale (``byte`` 0..255, ``unit`` [0, 1],
   ``tanh``) is mapped to [0, 1] and clipped.
3. **Fixed point count**: ``points`` points drawn uniformly without replacement (with replacement
   when the cropped scan has fewer), from an RNG keyed by (seed, scan key) — deterministic, and
   independent of which worker handles the scan.
4. **Normalise**: x, y, z divided by ``max_range`` (so coordinates lie in [−1, 1]).

The network input is the resulting ``points × 4`` array (x, y, z, intensity).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bench_build.errors import BenchBuildError
from bench_build.plan.tasks import example_rng
from bench_build.stages.frame import INTENSITY_SCALES

INPUT_CHANNELS = 4  # x, y, z, intensity


class EmptyScanError(BenchBuildError, ValueError):
    """No point of a scan survives the common crop."""


@dataclass(frozen=True)
class Preprocess:
    points: int = 16384
    min_range: float = 1.0  # m
    max_range: float = 70.0  # m
    elevation_deg: tuple[float, float] = (-24.8, 2.0)
    azimuth_deg: tuple[float, float] = (-180.0, 180.0)

    def __post_init__(self) -> None:
        if self.points < 1:
            raise ValueError(f"points must be ≥ 1, got {self.points}")
        if not 0 <= self.min_range < self.max_range:
            raise ValueError(f"need 0 ≤ min_range < max_range, got {self.min_range}, {self.max_range}")
        if self.elevation_deg[0] >= self.elevation_deg[1] or self.azimuth_deg[0] >= self.azimuth_deg[1]:
            raise ValueError("elevation_deg and azimuth_deg must be (low, high) with low < high")

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["steps"] = [
            f"crop {self.min_range:g} m ≤ range ≤ {self.max_range:g} m, elevation {self.elevation_deg[0]:g}°…"
            f"{self.elevation_deg[1]:g}°, azimuth {self.azimuth_deg[0]:g}°…{self.azimuth_deg[1]:g}°",
            "intensity mapped to [0, 1] from the source's scale (byte ÷ 255; unit, tanh as is), clipped",
            f"{self.points} points sampled uniformly (with replacement only if fewer), RNG keyed by (seed, scan key)",
            f"x, y, z ÷ {self.max_range:g} m; input channels x, y, z, intensity",
        ]
        return d

    def crop_mask(self, xyz: np.ndarray) -> np.ndarray:
        r = np.linalg.norm(xyz, axis=1)
        horiz = np.hypot(xyz[:, 0], xyz[:, 1])
        elev = np.degrees(np.arctan2(xyz[:, 2], horiz))
        azim = np.degrees(np.arctan2(xyz[:, 1], xyz[:, 0]))
        return ((r >= self.min_range) & (r <= self.max_range)
                & (elev >= self.elevation_deg[0]) & (elev <= self.elevation_deg[1])
                & (azim >= self.azimuth_deg[0]) & (azim <= self.azimuth_deg[1]))

    def apply(self, points: np.ndarray, fields: tuple[str, ...] | list[str], intensity_scale: str,
              key: str, seed: int) -> np.ndarray:
        """The ``points × 4`` float32 network input of one scan (see the module docstring)."""
        fields = tuple(fields)
        if "intensity" not in fields:
            raise ValueError(f"{key}: scan has no intensity column (fields {fields})")
        if intensity_scale not in INTENSITY_SCALES:
            raise ValueError(f"{key}: unknown intensity scale {intensity_scale!r}")
        xyz = points[:, :3].astype(np.float64)
        keep = np.flatnonzero(self.crop_mask(xyz))
        if keep.size == 0:
            raise EmptyScanError(f"{key}: no point left after the common crop ({len(points)} points before)")
        rng = example_rng(seed, key)
        pick = rng.choice(keep, size=self.points, replace=keep.size < self.points)
        pick.sort()  # PointNet is order-invariant; sorted indices keep the memory access regular
        out = np.empty((self.points, INPUT_CHANNELS), dtype=np.float32)
        out[:, :3] = xyz[pick] / self.max_range
        inten = points[pick, fields.index("intensity")].astype(np.float64) / INTENSITY_SCALES[intensity_scale]
        out[:, 3] = np.clip(inten, 0.0, 1.0)
        return out
