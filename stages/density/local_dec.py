"""Local density decrease (KITTI-C `local_dec`, Li et al. Appendix C-A).

Models locally sparser returns (e.g. dark or specular patches): ⌊N / d⌋ centres (d = 300, 250, 200,
150, 100 at severities 1–5) are drawn uniformly without replacement from the N points; in each
centre's k = 100 nearest-neighbour neighbourhood (centre included) round(0.75·k) = 75 points, chosen
uniformly without replacement within that neighbourhood, are deleted.
Decisions the paper leaves open: all neighbourhoods and draws are made on the original scan and the
union of the chosen points is removed, so overlapping neighbourhoods delete fewer than centres·75
points (a point is kept only if no neighbourhood containing it picked it); "round" is round half up;
survivors keep their order. If N < k a neighbourhood is the whole scan (k is clipped to N and the
count to delete is computed from the clipped k). k = 0, drop_fraction = 0, count_divisor = inf, or a
centre count that rounds to 0 return the input frame unchanged.

``rule = "code"`` (default): the released generator behind the published numbers runs the operations
one after another on the shrinking cloud: each picks a centre among the points still present, takes
its k = 100 nearest present points and deletes int(drop_fraction·k) of them (its table: 0.8 → 80), so
exactly centres·80 points go (26.7 / 40.0 / 80.0 % at severities 1 / 3 / 5). ``rule = "text"``: the
union on the original scan described above, round half up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from bench_build.stages.density.cutout import operation_count
from bench_build.stages.frame import Frame
from bench_build.stages.geometry import check_rule, random_neighbourhoods, remove_neighbourhoods_sequentially
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class LocalDecParams:
    count_divisor: float  # floor(N / count_divisor) centres; inf deletes nothing
    k: int = 100  # neighbourhood size (nearest neighbours of the centre, itself included)
    drop_fraction: float = 0.75  # fraction of each neighbourhood deleted
    rule: str = "code"  # "code": one after another on the shrinking cloud (released code); "text": union


@stage("local_dec", params=LocalDecParams, version=2)  # v2: rule (code: sequential)
def local_dec(frame: Frame, params: LocalDecParams, rng: np.random.Generator) -> Frame:
    if not 0.0 <= params.drop_fraction <= 1.0:
        raise ValueError(f"local_dec: drop_fraction must be in [0, 1], got {params.drop_fraction}")
    n = len(frame)
    check_rule(params.rule, "local_dec")
    if params.rule == "code":
        n_ops = operation_count(n, params.count_divisor, params.k, "local_dec")
        n_drop = int(params.drop_fraction * params.k)
        return frame.take(remove_neighbourhoods_sequentially(frame, n_ops, params.k, n_drop, rng))
    if math.floor(params.drop_fraction * min(params.k, n) + 0.5) == 0:
        params = replace(params, k=0)  # nothing to delete: no centres are drawn
    try:
        nn = random_neighbourhoods(frame, params.count_divisor, params.k, rng)
    except ValueError as e:
        raise ValueError(f"local_dec: {e}") from None
    if nn is None:
        return frame
    n_centres, k = nn.shape
    n_drop = math.floor(params.drop_fraction * k + 0.5)
    # an independent random subset of n_drop of the k neighbours of every centre, all at once
    pick = np.argsort(rng.random((n_centres, k)), axis=1)[:, :n_drop]
    keep = np.ones(n, dtype=bool)
    keep[np.take_along_axis(nn, pick, axis=1).ravel()] = False
    return frame.take(keep)
