"""Preprocessing of an object cloud: pick a fixed number of points, centre and scale into the unit sphere.

Two uses (recipes' ``[preprocess]``, applied to every shape before the clean copy is stored):

* ModelNet-C: ``method = "first"`` keeps the first 1,024 of the 2,048 stored points (PointNet /
  DGCNN convention that the released generator follows), no normalisation (the h5 clouds already
  are in the unit sphere).
* 3DOS: ``method = "random"`` draws ``num_points`` without replacement (with replacement only when the
  cloud is smaller), seeded per example — 1,024 of the 4,096-point FPS cloud for synthetic shapes,
  ``real_num_points`` = 2,048 for ScanObjectNN scans (``attrs.domain == "real"``: all points, in random
  order), then ``pc_normalize``: centroid subtracted, divided by the largest norm (unit sphere; the
  paper's text says unit cube — the ``text`` variant would set ``normalize = "cube"``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.registry import stage
from bench_build.stages.whole_shape import normalize_unit_sphere

METHODS = ("first", "random")
NORMALIZE = ("none", "sphere", "cube")


@dataclass(frozen=True)
class ObjectSampleParams:
    num_points: int
    method: str = "random"
    normalize: str = "sphere"
    real_num_points: int = 0  # points for attrs["domain"] == "real" (0: num_points)

    def __post_init__(self) -> None:  # refused when a recipe is loaded, not in a worker's first task
        if self.method not in METHODS:
            raise ValueError(f"object_sample: method must be one of {METHODS}, got {self.method!r}")
        if self.normalize not in NORMALIZE:
            raise ValueError(f"object_sample: normalize must be one of {NORMALIZE}, got {self.normalize!r}")


@stage("object_sample", params=ObjectSampleParams)
def object_sample(frame: Frame, params: ObjectSampleParams, rng: np.random.Generator) -> Frame:
    if params.method not in METHODS or params.normalize not in NORMALIZE or params.num_points < 1:
        raise ValueError(f"object_sample: bad parameters {params}")
    real = frame.attrs.get("domain", frame.info.get("domain")) == "real"
    n = params.real_num_points if real and params.real_num_points else params.num_points
    if params.method == "first":
        if len(frame) < n:
            raise ValueError(f"object_sample: {frame.frame_id} has {len(frame)} points, fewer than {n}")
        out = frame.take(np.arange(n))
    else:
        out = frame.take(rng.choice(len(frame), n, replace=len(frame) < n))
    if params.normalize == "none":
        return out
    xyz = normalize_unit_sphere(out.xyz)
    if params.normalize == "cube":  # the text's "unit cube": largest |coordinate| = 1 after centring
        xyz = xyz / np.abs(xyz).max()
    points = out.points.copy()
    points[:, :3] = xyz
    return out.with_points(points)
