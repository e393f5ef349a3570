"""Object cutout (KITTI-C `cutout_obj`, Li et al. Appendix C-B).

For every annotated object (every box except DontCare), c of its points are chosen uniformly without
replacement as centres and, for each centre, its k nearest object points (the centre included) are
erased, with (c, k) = (1, 20), (2, 20), (3, 20), (4, 20), (5, 20) at severities 1–5. Overlapping
neighbourhoods are erased once, so an object loses between k and c·k points.

Decisions the paper leaves open:

* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0), and the
  neighbourhoods are searched among the object's own points only (a per-object KD-tree), so no
  ground or neighbouring-object point is erased.
* An object with N < c points uses c' = N centres; an object with N < k points uses k' = N, i.e. a
  sparse object (N ≤ k) is erased completely, which is what erasing k neighbours means for it.
  Empty objects are skipped.
* The boxes are kept (the object is still there, partly unobserved), also for objects erased
  entirely. Surviving points keep their order and all their columns and labels.
* c = 0 or k = 0 is identity.

The above is ``rule = "text"``. ``rule = "code"`` (default) follows Li et al.'s released generator,
which produced the published numbers: an object with more than c·k points gets c operations one after
another, each erasing the k nearest points still present around a centre drawn among them (exactly
c·k points go); an object with c·k points or fewer is deleted entirely (a 55-point car vanishes at
severities 3–5). Boxes are kept.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import check_rule
from bench_build.stages.kernels.box_unit import delete_sequentially
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class CutoutObjParams:
    centers: int  # centres per object
    k: int = 20  # points erased around each centre (k nearest object points)
    rule: str = "code"  # "code": Li et al.'s released generator (sequential, small objects deleted); "text": union



@stage("cutout_obj", params=CutoutObjParams, version=2)  # v2: rule (code: sequential, small objects deleted)
def cutout_obj(frame: Frame, params: CutoutObjParams, rng: np.random.Generator) -> Frame:
    if params.centers < 0 or params.k < 0:
        raise ValueError(f"cutout_obj: centers and k must be ≥ 0, got {params}")
    check_rule(params.rule, "cutout_obj")
    if params.centers == 0 or params.k == 0:
        return frame
    if params.rule == "code":
        return delete_in_objects(frame, params.centers, params.k, params.k, params.centers * params.k, rng)
    from scipy.spatial import cKDTree  # lazy: scipy costs ≈ 0.3 s to import and only this path needs it

    erased = []
    for idx in frame.box_points:
        n = len(idx)
        if n == 0:
            continue
        c, k = min(params.centers, n), min(params.k, n)
        xyz = frame.xyz[idx].astype(np.float64)
        centres = rng.choice(n, size=c, replace=False)
        _, nn = cKDTree(xyz).query(xyz[centres], k=k)
        erased.append(idx[np.asarray(nn).reshape(-1)])
    if not erased:
        return frame
    keep = np.ones(len(frame), dtype=bool)
    keep[np.concatenate(erased)] = False
    return frame.take(keep)


def delete_in_objects(frame: Frame, ops: int, k: int, n_drop: int, threshold: int,
                      rng: np.random.Generator) -> Frame:
    """The released object density rule: objects with more than ``threshold`` points get ``ops``
    sequential deletions (`delete_sequentially`); the others are deleted entirely."""
    keep = np.ones(len(frame), dtype=bool)
    for idx in frame.box_points:
        if len(idx) == 0:
            continue
        if len(idx) <= threshold:
            keep[idx] = False
        else:
            keep[idx] = delete_sequentially(frame.xyz[idx].astype(np.float64), ops, k, n_drop, rng)
    return frame if keep.all() else frame.take(keep)
