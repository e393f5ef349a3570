"""What a stage may need to know about the LiDAR that recorded a frame (beam count, elevations, range).

A source reader attaches a `Sensor` to every frame it reads, so ring-based and physical stages use the
recording sensor's own beam count, per-ring elevations, maximum range and beam divergence instead of
assuming an HDL-64E. ``elevations_deg[r]`` is the elevation of ring id ``r`` *as the dataset numbers its
rings* (KITTI / demo / Waymo: ring 0 is the top laser; nuScenes: ring 0 is the lowest), so a ring id
read from a file and a ring id recovered from geometry mean the same laser.

Known sensors (values from the manufacturers' public data sheets and the datasets' papers; the beam
divergence is the 3 mrad Robo3D's snow script uses for every dataset):

| sensor            | beams | elevations                                        | max range |
|-------------------|-------|---------------------------------------------------|-----------|
| `HDL64E` (KITTI)  | 64    | +2.0° … −8.33° (1/3° apart), −8.83° … −24.8°      | 120 m     |
| `HDL32E` (nuScenes)| 32   | −30.67° … +10.67°, 1.33° apart, ring 0 lowest     | 100 m     |
| `WAYMO_TOP`       | 64    | +2.4° … −17.6°, denser near the horizon (nominal)  | 75 m      |

(A Waymo frame carries its segment's own calibrated inclinations instead of the nominal table.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sensor:
    """A spinning LiDAR: ``beams`` lasers with ``elevations_deg[r]`` the elevation of ring id r."""

    name: str
    elevations_deg: tuple[float, ...]
    max_range: float  # m
    beam_divergence_mrad: float = 3.0
    #: the LiDAR's position (m) in the frame its points are given in: (0, 0, 0) where they are in its own frame
    #: (KITTI, nuScenes); Waymo's are in the vehicle frame, so its extrinsic's translation (`stages.origin`)
    origin: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        if len(self.elevations_deg) < 1:
            raise ValueError(f"sensor {self.name}: needs at least one elevation")
        if not self.max_range > 0:
            raise ValueError(f"sensor {self.name}: max_range must be > 0, got {self.max_range}")

    @property
    def beams(self) -> int:
        return len(self.elevations_deg)

    @property
    def elevations(self) -> np.ndarray:
        return np.asarray(self.elevations_deg, dtype=np.float64)

    @property
    def top_ring_first(self) -> bool:
        """True when ring 0 is the highest laser (KITTI, Waymo), False when it is the lowest (nuScenes)."""
        e = self.elevations
        return bool(e[0] >= e[-1])

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "beams": self.beams, "elevations_deg": [round(v, 4) for v in self.elevations_deg],
                "max_range": self.max_range, "beam_divergence_mrad": self.beam_divergence_mrad,
                **({"origin": list(self.origin)} if any(self.origin) else {})}


def _hdl64e() -> tuple[float, ...]:
    return tuple(float(v) for v in np.concatenate([2.0 - np.arange(32) / 3.0, np.linspace(-8.83, -24.8, 32)]))


def waymo_top_elevations(beams: int = 64) -> np.ndarray:
    """Nominal TOP-laser elevations (degrees, row 0 = top): +2.4° … −17.6°, spacing growing downwards
    (a real segment's calibration gives the exact, non-uniform values; this is for synthetic scans)."""
    t = np.linspace(0.0, 1.0, beams)
    return 2.4 - 20.0 * t**1.35


HDL64E = Sensor("velodyne-hdl64e", _hdl64e(), max_range=120.0)
HDL32E = Sensor("velodyne-hdl32e", tuple(float(v) for v in np.linspace(-30.67, 10.67, 32)), max_range=100.0)
WAYMO_TOP = Sensor("waymo-top", tuple(float(v) for v in waymo_top_elevations()), max_range=75.0)
