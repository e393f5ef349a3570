"""Local density decrease on objects (KITTI-C `local_dec_obj`, Li et al. Appendix C-B).

For every annotated object (every box except DontCare), c of its points are chosen uniformly without
replacement as centres; from the k nearest object points of each centre (the centre included),
round(f·k) are chosen uniformly without replacement and deleted, with f = 0.75 and
(c, k) = (1, 30), (2, 30), (3, 30), (4, 30), (5, 30) at severities 1–5. Deletions of overlapping
neighbourhoods are merged, so an object loses between round(f·k) and c·round(f·k) points.

Decisions the paper leaves open:

* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0), and the
  neighbourhoods are searched among the object's own points only (a per-object KD-tree).
* "75 % of the neighbourhood" is rounded half up: round(0.75 · 30) = 23 points per centre.
* An object with N < c points uses c' = N centres; an object with N < k points uses k' = N (and
  deletes round(f·k') of them). Empty objects are skipped.
* The boxes are kept. Surviving points keep their order and all their columns and labels.
* c = 0, k = 0 or f = 0 is identity.

The above is ``rule = "text"``. ``rule = "code"`` (default) follows Li et al.'s released generator,
which produced the published numbers: int(0.75·30) = 22 points per centre (not 23); an object with
more than c·22 points gets c operations one after another, each deleting a random 22 of the k
nearest points still present around a centre drawn among them; an object with c·22 points or fewer
is deleted entirely. Boxes are kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import check_rule
from bench_build.stages.per_box.cutout_obj import delete_in_objects
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class LocalDecObjParams:
    centers: int  # centres per object
    k: int = 30  # neighbourhood size (k nearest object points of each centre)
    drop_fraction: float = 0.75  # fraction of each neighbourhood deleted
    rule: str = "code"  # "code": Li et al.'s released generator (int, sequential, small objects deleted); "text"



def drop_count(k: int, fraction: float) -> int:
    """round(fraction · k), halves rounded up."""
    return math.floor(fraction * k + 0.5)


@stage("local_dec_obj", params=LocalDecObjParams, version=2)  # v2: rule (code: sequential, small objects deleted)
def local_dec_obj(frame: Frame, params: LocalDecObjParams, rng: np.random.Generator) -> Frame:
    if params.centers < 0 or params.k < 0:
        raise ValueError(f"local_dec_obj: centers and k must be ≥ 0, got {params}")
    if not 0 <= params.drop_fraction <= 1:
        raise ValueError(f"local_dec_obj: drop_fraction must be in [0, 1], got {params.drop_fraction}")
    check_rule(params.rule, "local_dec_obj")
    if params.centers == 0 or params.k == 0 or params.drop_fraction == 0:
        return frame
    if params.rule == "code":
        n_drop = int(params.drop_fraction * params.k)
        if n_drop == 0:
            return frame
        return delete_in_objects(frame, params.centers, params.k, n_drop, params.centers * n_drop, rng)
    from scipy.spatial import cKDTree  # lazy: scipy costs ≈ 0.3 s to import and only this path needs it

    deleted = []
    for idx in frame.box_points:
        n = len(idx)
        if n == 0:
            continue
        c, k = min(params.centers, n), min(params.k, n)
        n_drop = drop_count(k, params.drop_fraction)
        xyz = frame.xyz[idx].astype(np.float64)
        centres = rng.choice(n, size=c, replace=False)
        _, nn = cKDTree(xyz).query(xyz[centres], k=k)
        nn = np.asarray(nn).reshape(c, k)
        pick = np.argsort(rng.random((c, k)), axis=1)[:, :n_drop]  # a random subset of each row
        deleted.append(idx[np.take_along_axis(nn, pick, axis=1).reshape(-1)])
    if not deleted:
        return frame
    keep = np.ones(len(frame), dtype=bool)
    keep[np.concatenate(deleted)] = False
    return frame.take(keep)
