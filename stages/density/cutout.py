"""Local cutout of point clusters (KITTI-C `cutout`, Li et al. Appendix C-A).

Models occlusion or dropped patches of the scan: ⌊N / d⌋ centres (d = 2000, 1500, 1000, 800, 600 at
severities 1–5) are drawn uniformly without replacement from the N points, and each centre's k = 100
nearest neighbours (the centre itself included, Euclidean distance in xyz) are erased.
Decisions the paper leaves open: all neighbourhoods are taken on the original scan and their union is
removed (overlapping neighbourhoods remove fewer than centres·k points); survivors keep their order.
If N < k a neighbourhood is the whole scan (so any centre erases everything); k = 0,
count_divisor = inf, or a centre count that rounds to 0 return the input frame unchanged.

``rule = "code"`` (default): the released generator behind the published numbers (its table is
N/200 … N/60 centres × k = 20) runs the operations one after another on the shrinking cloud: each
picks a centre among the points still present and erases its k nearest present points, so exactly
centres·k points go (10.0 / 20.0 / 33.3 % at severities 1 / 3 / 5). ``rule = "text"``: the union on
the original scan described above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import check_rule, random_neighbourhoods, remove_neighbourhoods_sequentially
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class CutoutParams:
    count_divisor: float  # floor(N / count_divisor) centres; inf erases nothing
    k: int = 100  # points erased around each centre (its k nearest neighbours, itself included)
    rule: str = "code"  # "code": one after another on the shrinking cloud (released code); "text": union


@stage("cutout", params=CutoutParams, version=2)  # v2: rule (code: sequential)
def cutout(frame: Frame, params: CutoutParams, rng: np.random.Generator) -> Frame:
    check_rule(params.rule, "cutout")
    if params.rule == "code":
        n_ops = operation_count(len(frame), params.count_divisor, params.k, "cutout")
        return frame.take(remove_neighbourhoods_sequentially(frame, n_ops, params.k, params.k, rng))
    try:
        nn = random_neighbourhoods(frame, params.count_divisor, params.k, rng)
    except ValueError as e:
        raise ValueError(f"cutout: {e}") from None
    if nn is None:
        return frame
    keep = np.ones(len(frame), dtype=bool)
    keep[nn.ravel()] = False
    return frame.take(keep)


def operation_count(n: int, count_divisor: float, k: int, name: str) -> int:
    if not count_divisor > 0:
        raise ValueError(f"{name}: count_divisor must be > 0, got {count_divisor}")
    if k < 0:
        raise ValueError(f"{name}: k must be ≥ 0, got {k}")
    return 0 if math.isinf(count_divisor) else int(n // count_divisor)
