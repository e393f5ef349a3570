"""Random point deletion (KITTI-C `beam_del`, Li et al. Appendix C-A).

Models random loss of individual returns (laser beams that never come back): ⌊N / d⌋ of the N points,
chosen uniformly without replacement, are deleted, for d = 100, 30, 10, 5, 3 at severities 1–5.
Despite the name the paper deletes single points, not whole laser rings (that is `layer_del`).
The surviving points keep their original order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class BeamDelParams:
    count_divisor: float  # delete floor(N / count_divisor) points; inf deletes none


@stage("beam_del", params=BeamDelParams)
def beam_del(frame: Frame, params: BeamDelParams, rng: np.random.Generator) -> Frame:
    if not params.count_divisor > 0:
        raise ValueError(f"beam_del: count_divisor must be > 0, got {params.count_divisor}")
    n = len(frame)
    n_drop = 0 if math.isinf(params.count_divisor) else min(n, int(n // params.count_divisor))
    if n_drop == 0:
        return frame
    drop = rng.choice(n, size=n_drop, replace=False)
    keep = np.ones(n, dtype=bool)
    keep[drop] = False
    return frame.take(keep)
