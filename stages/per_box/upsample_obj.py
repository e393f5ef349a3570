"""Object upsampling (KITTI-C `upsample_obj`, Li et al. Appendix C-B).

For every annotated object (every box except DontCare) with N points, ⌊N / d⌋ parent points are
chosen uniformly without replacement and one new point is added at each parent + U(−o, o)³, with
d = 5, 4, 3, 2, 1 at severities 1–5 and o = 0.05 m ("spatial bias within [−0.05, 0.05]").

Decisions the paper leaves open:

* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0).
* "N" is counted per object; an object with fewer than d points gets nothing. For d < 1 (more new
  points than parents) parents are drawn with replacement.
* A new point copies its parent's intensity and extra columns (e.g. ring) and every label column
  except ``point_tag``, which is SYNTHETIC. New points are appended after all source points, object
  by object; the source points keep their order.
* The boxes are kept; new points are not clipped, so a point added next to a parent on the box
  face may lie up to o outside the box on each axis (it then has ``box_index == −1``).
* d = inf is identity; o = 0 still adds exact duplicates of the parents.

The above is ``rule = "text"``. ``rule = "code"`` (default) follows Li et al.'s released generator,
which produced the published numbers: it works in the box-normalised frame (`bench_build.stages.kernels.box_unit`), so
the constant is in units of max(l, w, h)/2 (a car of length 3.9 m: × 1.95 m), and afterwards, if any
coordinate of the object's points exceeds the ±1 cube, all of the object's points are shrunk by one
common factor towards the box centre (the released `normalize`). Under it a new point's intensity and other
attributes come from the nearest original object point, and the shrink applies to the originals and
new points together (originals may move).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.geometry import check_rule
from bench_build.stages.kernels.box_unit import clamp_unit, from_unit, to_unit
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class UpsampleObjParams:
    count_divisor: float  # floor(N / count_divisor) new points per object; inf adds none
    offset: float = 0.05  # new point = parent + U(-offset, offset) per axis: metres (text), box units (code)
    rule: str = "code"  # "code": Li et al.'s released generator (box-normalised frame + joint clamp); "text": metres



@stage("upsample_obj", params=UpsampleObjParams, version=2)  # v2: rule (code: box-normalised frame)
def upsample_obj(frame: Frame, params: UpsampleObjParams, rng: np.random.Generator) -> Frame:
    d, o = params.count_divisor, params.offset
    if not d > 0:
        raise ValueError(f"upsample_obj: count_divisor must be > 0, got {d}")
    if not o >= 0:
        raise ValueError(f"upsample_obj: offset must be ≥ 0, got {o}")
    check_rule(params.rule, "upsample_obj")
    if math.isinf(d):
        return frame
    if params.rule == "code":
        return _upsample_code(frame, d, o, rng)
    chosen = []
    for idx in frame.box_points:
        n = int(len(idx) // d)
        if n > 0:
            chosen.append(rng.choice(idx, size=n, replace=n > len(idx)))
    if not chosen:
        return frame
    parents = np.concatenate(chosen)
    new = frame.points[parents].copy()
    new[:, :3] = (frame.xyz[parents].astype(np.float64) + rng.uniform(-o, o, size=(parents.size, 3))).astype(
        np.float32
    )
    labels = {k: v[parents] for k, v in frame.labels.items() if k != "point_tag"}
    return frame.append(new, tag=PointTag.SYNTHETIC, **labels)


def _upsample_code(frame: Frame, d: float, o: float, rng: np.random.Generator) -> Frame:
    from scipy.spatial import cKDTree  # lazy: scipy costs ≈ 0.3 s to import and only this path needs it

    boxes = frame.boxes
    if boxes is None:
        return frame
    points = frame.points.copy()
    new_xyz, sources = [], []
    for j, idx in enumerate(frame.box_points):
        n = len(idx)
        n_new = min(n, int(n // d))  # drawn without replacement, as the released code
        if n_new == 0:
            continue
        local = to_unit(frame.xyz[idx], boxes.center[j], boxes.dims[j], boxes.heading[j])
        parents = rng.choice(n, size=n_new, replace=False)
        add = local[parents] + rng.uniform(-o, o, size=(n_new, 3))
        _, nearest = cKDTree(local).query(add, k=1)  # attributes of the nearest original object point
        both = clamp_unit(np.concatenate([local, add]))  # one shrink for originals and new points
        xyz = from_unit(both, boxes.center[j], boxes.dims[j], boxes.heading[j])
        points[idx, :3] = xyz[:n].astype(np.float32)
        new_xyz.append(xyz[n:])
        sources.append(idx[np.asarray(nearest).reshape(-1)])
    if not sources:
        return frame
    src = np.concatenate(sources)
    new = frame.points[src].copy()
    new[:, :3] = np.concatenate(new_xyz).astype(np.float32)
    labels = {k: v[src] for k, v in frame.labels.items() if k != "point_tag"}
    return frame.with_points(points).append(new, tag=PointTag.SYNTHETIC, **labels)
