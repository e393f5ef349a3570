"""Incomplete echo: most returns of each vehicle are lost (Robo3D, Kong et al. ICCV 2023).

Models dark (black) car paint and glass that absorb the near-infrared pulse, so a vehicle returns only
a few of its points. For every vehicle object holding more than ``min_points`` (10) points, ``int(r·n)``
of its n points, chosen uniformly without replacement, are deleted. KITTI-C uses r = 0.75 / 0.85 / 0.95
(light / moderate / heavy; paper Appendix 8.7). Boxes are not changed (the object is still there);
survivors keep their order; all other points are untouched.

Robo3D ships no KITTI-C generation script for it (a placeholder only) and the paper says only that
"3D bounding box labels" build the mask for KITTI-C [inferred]:

* The objects are the GT boxes whose class is in ``classes`` (default Car, Van, Truck, Tram — KITTI's
  vehicle classes; the paper's bicycle / motorcycle have no KITTI class of their own — add "Cyclist"
  to include them, rider included). DontCare rows never count.
* An object's points are the points inside its exact oriented box (`Frame.box_index`, margin 0); a point
  in two overlapping boxes belongs to the first one.
* The rule is applied per *object* (per box), as the semantic-label scripts apply it per vehicle class
  of the scan: an instance mask is what boxes give, and it is what "each vehicle" means on KITTI.
  Objects are processed in box-row order, one draw each, for determinism.

Point labels (SemanticKITTI-C, nuScenes-C, WOD-C): with ``label_ids`` set, the objects are the vehicle
*classes* of the frame's ``semantic`` labels, as Robo3D's generation scripts do: raw id
``label_ids[k]`` belongs to class ``label_classes[k]`` (e.g. SemanticKITTI car = raw 10 and 252 → class 1);
classes are processed in ascending class id, each holding more than ``min_points`` points loses
``int(r·n)`` of them, chosen uniformly without replacement. Boxes are ignored in that mode. A frame without
semantic labels raises (the benchmark is defined by them).

Paper vs scripts: the paper's "randomly querying k_e percent points" is, in Robo3D's generation scripts
(SemanticKITTI-C, nuScenes-C), the exact count ``int(r·n)`` with the more-than-10-points guard; we follow the scripts.
r = 0 (or a frame without boxes) returns the input frame unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.registry import stage

VEHICLE_CLASSES = ("Car", "Van", "Truck", "Tram")


@dataclass(frozen=True)
class IncompleteEchoParams:
    ratio: float  # r: share of each vehicle's points deleted, int(r·n)
    classes: tuple[str, ...] = VEHICLE_CLASSES  # box classes treated as vehicles
    min_points: int = 10  # only objects with more than this many points are thinned
    label_ids: tuple[int, ...] = ()  # raw semantic ids of vehicle points (label mode; empty: box mode)
    label_classes: tuple[int, ...] = ()  # class of each raw id (same length; default: each id its own class)

    def __post_init__(self) -> None:
        if self.label_classes and len(self.label_classes) != len(self.label_ids):
            raise ValueError(f"incomplete_echo: label_classes has {len(self.label_classes)} entries, "
                             f"label_ids {len(self.label_ids)}")
        if not all(isinstance(v, int) and v >= 0 for v in (*self.label_ids, *self.label_classes)):
            raise ValueError("incomplete_echo: label_ids and label_classes must be integers ≥ 0")
        if not (math.isfinite(self.ratio) and 0 <= self.ratio <= 1):
            raise ValueError(f"incomplete_echo: ratio must be in [0, 1], got {self.ratio!r}")
        if self.min_points < 0:
            raise ValueError(f"incomplete_echo: min_points must be ≥ 0, got {self.min_points}")
        if not all(isinstance(c, str) for c in self.classes):
            raise ValueError(f"incomplete_echo: classes must be class names, got {self.classes!r}")


    def unused(self) -> frozenset[str]:
        """Label mode reads no box classes; box mode no label ids (`Stage.unused_params`)."""
        return frozenset({"classes"} if self.label_ids else {"label_ids", "label_classes"})


def echo_drop_count(n: int, ratio: float) -> int:
    """``int(r·n)`` points of an object with n points (0 for objects with ≤ min_points is the caller's job)."""
    return int(ratio * n)


def vehicle_classes(params: IncompleteEchoParams, semantic: np.ndarray) -> list[np.ndarray]:
    """Label mode: per vehicle class (ascending class id), the ascending indices of its points."""
    ids = np.asarray(params.label_ids, dtype=np.int64)
    classes = np.asarray(params.label_classes or params.label_ids, dtype=np.int64)
    return [np.flatnonzero(np.isin(semantic, ids[classes == c])) for c in np.unique(classes)]


def _drop_per_group(frame: Frame, groups, params: IncompleteEchoParams, rng: np.random.Generator) -> Frame:
    drop = []
    for pts in groups:
        if len(pts) <= params.min_points:
            continue
        k = echo_drop_count(len(pts), params.ratio)
        if k:
            drop.append(rng.choice(pts, size=k, replace=False))
    if not drop:
        return frame
    keep = np.ones(len(frame), dtype=bool)
    keep[np.concatenate(drop)] = False
    return frame.take(keep)


@stage("incomplete_echo", params=IncompleteEchoParams)
def incomplete_echo(frame: Frame, params: IncompleteEchoParams, rng: np.random.Generator) -> Frame:
    if params.label_ids:
        if "semantic" not in frame.labels:
            raise ValueError(f"incomplete_echo: frame {frame.frame_id} has no semantic labels (label_ids is set)")
        if params.ratio == 0 or len(frame) == 0:
            return frame
        return _drop_per_group(frame, vehicle_classes(params, frame.labels["semantic"]), params, rng)
    if params.ratio == 0 or not frame.has_boxes or len(frame) == 0:
        return frame
    boxes = frame.boxes
    vehicle = np.isin(boxes.cls.astype(str), list(params.classes)) & boxes.valid
    return _drop_per_group(frame, [frame.box_points[j] for j in np.flatnonzero(vehicle)], params, rng)
