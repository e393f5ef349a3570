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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from stages.frame import Frame, PointTag
from stages.registry import stage


@dataclass(frozen=True)
class UpsampleObjParams:
    count_divisor: float  # floor(N / count_divisor) new points per object; inf adds none
    offset: float = 0.05  # metres; each coordinate of a new point is parent + U(-offset, offset)



@stage("upsample_obj", params=UpsampleObjParams)
def upsample_obj(frame: Frame, params: UpsampleObjParams, rng: np.random.Generator) -> Frame:
    d, o = params.count_divisor, params.offset
    if not d > 0:
        raise ValueError(f"upsample_obj: count_divisor must be > 0, got {d}")
    if not o >= 0:
        raise ValueError(f"upsample_obj: offset must be ≥ 0, got {o}")
    if math.isinf(d):
        return frame
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
