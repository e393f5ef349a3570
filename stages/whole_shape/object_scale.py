"""Anisotropic scaling, then back into the unit sphere (ModelNet-C "Scale", Ren et al. Appendix A).

Models a shape whose proportions are off. Each axis is multiplied by its own factor drawn from
U(1/s, s) (released generator: one ``uniform(1/s, s, 3)`` draw), the result cast to float32 and
renormalised: centroid subtracted, divided by the largest norm (paper: "re-normalized to a unit
sphere"). ``s`` = 1.6 … 2.0 over the five levels. ``renormalize = false`` skips the last step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.registry import stage
from bench_build.stages.whole_shape import normalize_unit_sphere


@dataclass(frozen=True)
class ObjectScaleParams:
    scale: float  # s: factors per axis ~ U(1/s, s)
    renormalize: bool = True


@stage("object_scale", params=ObjectScaleParams)
def object_scale(frame: Frame, params: ObjectScaleParams, rng: np.random.Generator) -> Frame:
    if params.scale < 1:
        raise ValueError(f"object_scale: scale must be ≥ 1, got {params.scale}")
    factors = rng.uniform(1.0 / params.scale, params.scale, 3)
    xyz = (frame.xyz.astype(np.float64) * factors).astype(np.float32)
    if params.renormalize:
        xyz = normalize_unit_sphere(xyz)
    points = frame.points.copy()
    points[:, :3] = xyz
    return frame.with_points(points).with_info(scale_factors=[float(f) for f in factors])
