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

from dataclasses import dataclass

import numpy as np

from stages.frame import Frame
from stages.geometry import random_neighbourhoods
from stages.registry import stage


@dataclass(frozen=True)
class CutoutParams:
    count_divisor: float  # floor(N / count_divisor) centres; inf erases nothing
    k: int = 100  # points erased around each centre (its k nearest neighbours, itself included)


@stage("cutout", params=CutoutParams)
def cutout(frame: Frame, params: CutoutParams, rng: np.random.Generator) -> Frame:
    try:
        nn = random_neighbourhoods(frame, params.count_divisor, params.k, rng)
    except ValueError as e:
        raise ValueError(f"cutout: {e}") from None
    if nn is None:
        return frame
    keep = np.ones(len(frame), dtype=bool)
    keep[nn.ravel()] = False
    return frame.take(keep)
