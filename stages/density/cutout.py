"""Local cutout of point clusters (KITTI-C `cutout`, Li et al. Appendix C-A).

Models occlusion or dropped patches of the scan: ⌊N / d⌋ centres (d = 2000, 1500, 1000, 800, 600 at
severities 1–5) are drawn uniformly without replacement from the N points, and each centre's k = 100
nearest neighbours (the centre itself included, Euclidean distance in xyz) are erased.
Decisions the paper leaves open: all neighbourhoods are taken on the original scan and their union is
removed (overlapping neighbourhoods remove fewer than centres·k points); survivors keep their order.
If N < k a neighbourhood is the whole scan (so any centre erases everything); k = 0,
count_divisor = inf, or a centre count that rounds to 0 return the input frame unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stages.frame import Frame
from stages.registry import stage


@dataclass(frozen=True)
class CutoutParams:
    count_divisor: float  # floor(N / count_divisor) centres; inf erases nothing
    k: int = 100  # points erased around each centre (its k nearest neighbours, itself included)


@stage("cutout", params=CutoutParams)
def cutout(frame: Frame, params: CutoutParams, rng: np.random.Generator) -> Frame:
    if not params.count_divisor > 0:
        raise ValueError(f"cutout: count_divisor must be > 0, got {params.count_divisor}")
    if params.k < 0:
        raise ValueError(f"cutout: k must be ≥ 0, got {params.k}")
    n = len(frame)
    n_centres = 0 if math.isinf(params.count_divisor) else min(n, int(n // params.count_divisor))
    k = min(params.k, n)
    if n_centres == 0 or k == 0:
        return frame
    centres = rng.choice(n, size=n_centres, replace=False)
    _, nn = frame.kdtree.query(frame.xyz[centres].astype(np.float64), k=k)
    keep = np.ones(n, dtype=bool)
    keep[np.asarray(nn).ravel()] = False
    return frame.take(keep)
