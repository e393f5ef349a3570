"""Synthetic scans of any spinning LiDAR, ray-cast against the demo street scene, with per-point classes.

The dataset fixture writers (`demo.semantickitti.write_semantickitti`, `demo.nuscenes.write_nuscenes`,
`demo.waymo.write_waymo`) and the demo data of the Robo3D recipes use this: the same scene generator as
`bench_build.sources.demo.kitti` (ground, façades, poles, cars, pedestrians, cyclists), cast with the caller's
laser elevations and azimuths (a 64-beam HDL-64E, a 32-beam HDL-32E, a 64×2650 Waymo range image) and
with a generic class per return that each writer maps to its dataset's raw label ids:

- ground inside the street (|y| < 8.5 m, where the kerb poles start) is ``road``, outside ``sidewalk``;
- façades are ``building``, poles ``pole``;
- a car is one of the vehicle classes by its object index (`VEHICLE_CYCLE`: car, truck, car, bus,
  moving car, so every frame has several vehicle classes for incomplete echo), pedestrians are
  ``pedestrian`` and cyclists ``bicyclist``; every object point carries the object's instance id (index + 1).

Part kinds are recovered from the demo's part list: part 0 is the ground, parts with an object index
are objects, the other parts are façades (8-vertex boxes) or poles (cylinders).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.sources.demo.cache import DEMO_SEED
from bench_build.sources.demo.kitti import MAX_RANGE, cast_grid, place_objects, scene_meshes

GENERIC_CLASSES = ("unlabelled", "road", "sidewalk", "building", "pole", "car", "car_moving", "truck", "bus",
                   "pedestrian", "bicyclist")
CLASS_INDEX = {name: i for i, name in enumerate(GENERIC_CLASSES)}
VEHICLE_CYCLE = ("car", "truck", "car", "bus", "car_moving")
STREET_HALF_WIDTH = 8.5


@dataclass(frozen=True)
class RayScan:
    """One cast: per ray (H rows × W columns) the range (NaN: no return), unit intensity, class, instance."""

    range: np.ndarray  # (H, W) float64, NaN where there is no return
    intensity: np.ndarray  # (H, W) float64 in [0, 1]
    cls: np.ndarray  # (H, W) int64 index into GENERIC_CLASSES (0 where no return)
    instance: np.ndarray  # (H, W) int64, object index + 1, 0 for stuff
    directions: np.ndarray  # (H, W, 3) unit ray directions (sensor frame)
    objects: tuple  # the demo scene's objects (class, centre, dims, heading in the sensor frame)
    object_classes: tuple[str, ...]  # generic class of each object

    @property
    def hit(self) -> np.ndarray:
        return np.isfinite(self.range)

    def xyz(self) -> np.ndarray:
        """(H, W, 3) points (NaN where there is no return)."""
        return self.directions * self.range[..., None]


def object_class(obj_cls: str, index: int) -> str:
    if obj_cls == "Car":
        return VEHICLE_CYCLE[index % len(VEHICLE_CYCLE)]
    return "pedestrian" if obj_cls == "Pedestrian" else "bicyclist"


def cast_scan(index: int, elevations_deg: np.ndarray, azimuths_rad: np.ndarray, *, seed: int = DEMO_SEED,
              max_range: float = MAX_RANGE, min_range: float = 1.0, dropout: bool = True) -> RayScan:
    """Ray-cast demo scene ``index`` with rays at every (elevation row, azimuth column)."""

    rng = np.random.default_rng(np.random.SeedSequence([seed, index, 11]))
    objs = place_objects(rng)
    parts = scene_meshes(rng, objs)
    albedo = np.array([p[1] for p in parts], dtype=np.float64)
    obj_of_part = np.array([p[2] for p in parts], dtype=np.int64)
    obj_classes = tuple(object_class(o.cls, i) for i, o in enumerate(objs))
    part_cls = np.zeros(len(parts), dtype=np.int64)
    for k, (mesh, _, obj) in enumerate(parts):
        if k == 0:
            part_cls[k] = CLASS_INDEX["road"]  # refined below by the lateral position
        elif obj >= 0:
            part_cls[k] = CLASS_INDEX[obj_classes[obj]]
        else:
            part_cls[k] = CLASS_INDEX["building" if len(mesh.vertices) == 8 else "pole"]

    el = np.radians(np.asarray(elevations_deg, dtype=np.float64))[:, None]
    az = np.asarray(azimuths_rad, dtype=np.float64)[None, :]
    dirs, t, geom, normals = cast_grid(parts, el, az)
    h, w = dirs.shape[:2]
    flat = dirs.reshape(-1, 3)
    hit = np.isfinite(t) & (t < max_range) & (t > min_range)
    geom = np.where(hit, geom, 0)
    cos_inc = np.abs(np.einsum("ij,ij->i", flat, normals))
    signal = np.where(hit, albedo[geom] * (0.3 + 0.7 * cos_inc) / (1.0 + (np.where(hit, t, 0) / 60.0) ** 2), 0.0)
    if dropout:  # weak returns are lost, as in the demo source
        hit &= rng.random(len(t)) < np.clip(signal / 0.25, 0.0, 1.0) * 0.97
    r = np.where(hit, t + rng.normal(0.0, 0.01, len(t)), np.nan)
    intensity = np.where(hit, np.clip(signal * 1.6 + rng.normal(0, 0.02, len(t)), 0.0, 1.0), 0.0)
    cls = np.where(hit, part_cls[geom], 0)
    y = flat[:, 1] * np.nan_to_num(r)
    cls = np.where(hit & (geom == 0) & (np.abs(y) >= STREET_HALF_WIDTH), CLASS_INDEX["sidewalk"], cls)
    inst = np.where(hit & (obj_of_part[geom] >= 0), obj_of_part[geom] + 1, 0)
    return RayScan(range=r.reshape(h, w), intensity=intensity.reshape(h, w), cls=cls.reshape(h, w),
                   instance=inst.reshape(h, w), directions=dirs, objects=tuple(objs), object_classes=obj_classes)


def spinning_azimuths(step_deg: float, rng_offset: float = 0.0) -> np.ndarray:
    """Azimuths of a spinning LiDAR's firings, counter-clockwise from 0 (KITTI's raw order)."""
    n = round(360.0 / step_deg)
    return np.arange(n) * (2 * np.pi / n) + rng_offset
