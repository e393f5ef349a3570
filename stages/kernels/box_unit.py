"""Li et al.'s box-normalised object frame ("Max2"), in which their released object-level code works.

An object's points are shifted by the box centre, divided by max(l, w, h)/2 and rotated by −heading, so
the box's longest side spans [−1, 1]. Every constant of the released object corruptions is in these
units: a value c means c · max(l, w, h)/2 metres (Appendix C-B states metres). Two clamps follow the
corruptions in Li et al.'s released code:

* `clamp_unit` ("normalize", after noise, upsampling and local increase): if any coordinate of the
  object's points exceeds 1 in magnitude, all of them are divided by the largest magnitude;
* "normalize_gt" (after shear and FFD): per axis, coordinates are divided by max|p_i| / (dim_i / max(dim))
  when that ratio exceeds 1, squeezing the object back into its box. The stages do it in metres, in the box
  frame (`bench_build.stages.per_box.shear.squeeze_into_boxes`), which is the same ratio.
"""

from __future__ import annotations

import numpy as np


def unit_scale(dims: np.ndarray) -> float:
    """Metres per box-normalised unit: max(l, w, h)/2 (1 for a degenerate box)."""
    s = float(np.max(dims)) / 2.0
    return s if s > 0 else 1.0


def to_unit(xyz: np.ndarray, center: np.ndarray, dims: np.ndarray, heading: float) -> np.ndarray:
    d = (np.asarray(xyz, dtype=np.float64) - center) / unit_scale(dims)
    c, s = np.cos(heading), np.sin(heading)
    return np.stack([d[:, 0] * c + d[:, 1] * s, -d[:, 0] * s + d[:, 1] * c, d[:, 2]], axis=1)


def from_unit(local: np.ndarray, center: np.ndarray, dims: np.ndarray, heading: float) -> np.ndarray:
    c, s = np.cos(heading), np.sin(heading)
    xyz = np.stack([local[:, 0] * c - local[:, 1] * s, local[:, 0] * s + local[:, 1] * c, local[:, 2]], axis=1)
    return xyz * unit_scale(dims) + center


def clamp_unit(local: np.ndarray) -> np.ndarray:
    """The released `normalize`: keep the object inside the ±1 cube by one common shrink."""
    if len(local) == 0:
        return local
    m = float(np.abs(local).max())
    return local / m if m > 1 else local


def delete_sequentially(xyz: np.ndarray, ops: int, k: int, n_drop: int, rng: np.random.Generator) -> np.ndarray:
    """Keep-mask of an object's points after ``ops`` operations one after another on the shrinking set:
    a centre drawn among the points still present, its ``k`` nearest present points (itself included,
    at most present − 1 when ``n_drop < k``, as the released local_dec_obj), and a random ``n_drop`` of
    them (all k when n_drop ≥ k) deleted. Brute force: objects have at most a few thousand points."""
    keep = np.ones(len(xyz), dtype=bool)
    for _ in range(ops):
        alive = np.flatnonzero(keep)
        if len(alive) == 0:
            break
        centre = alive[int(rng.integers(len(alive)))]
        d = ((xyz[alive] - xyz[centre]) ** 2).sum(axis=1)
        kk = min(k, len(alive) - 1) if n_drop < k else min(k, len(alive))
        near = alive[np.argsort(d, kind="stable")[:kk]]
        if n_drop < k:
            near = near[rng.choice(kk, size=min(n_drop, kk), replace=False)]
        keep[near] = False
    return keep
