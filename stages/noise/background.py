"""Uniform background points (KITTI-C `background`, Li et al. Appendix C-A).

Models floating particles such as dust: ⌊N / d⌋ points (d = 45, 40, 35, 30, 20 at severities 1–5)
are drawn uniformly in the axis-aligned bounding box of the scan ("within the spatial range of the
scene") and appended. The paper is silent on their intensity: we resample intensities of the scan's
own points, so the intensity histogram gives the added points away no more than their positions do.
Extra columns (e.g. ring) of added points are −1 ("no laser"). Added points carry
``point_tag = SYNTHETIC``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stages.frame import Frame, PointTag
from stages.registry import stage


@dataclass(frozen=True)
class BackgroundParams:
    count_divisor: float  # add floor(N / count_divisor) points; inf adds none


@stage("background", params=BackgroundParams)
def background(frame: Frame, params: BackgroundParams, rng: np.random.Generator) -> Frame:
    if not params.count_divisor > 0:
        raise ValueError(f"background: count_divisor must be > 0, got {params.count_divisor}")
    n = len(frame)
    n_add = 0 if math.isinf(params.count_divisor) or n == 0 else int(n // params.count_divisor)
    if n_add == 0:
        return frame
    lo, hi = frame.xyz.min(axis=0), frame.xyz.max(axis=0)
    new = np.full((n_add, len(frame.fields)), -1.0, dtype=np.float32)
    new[:, :3] = rng.uniform(lo, hi, size=(n_add, 3))
    new[:, 3] = frame.intensity[rng.integers(0, n, size=n_add)]
    return frame.append(new, tag=PointTag.SYNTHETIC)
