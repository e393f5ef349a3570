"""Crosstalk: a small random share of points gets a large Gaussian offset (Robo3D, Kong et al. ICCV 2023).

Models interference from another LiDAR on the road (its pulses are taken for our echoes), which puts
spurious returns at wrong ranges. ``m = floor(p·N)`` points are chosen uniformly without replacement
and each gets ``σ·N(0, 1)`` (σ = 3) added independently to x, y, z and — in paper mode — intensity.
No points are added or deleted; the perturbed rows are tagged CROSSTALK, the others keep their tag.
KITTI-C uses p = 0.006 / 0.008 / 0.01 (light / moderate / heavy; paper Appendix 8.6).

Paper vs scripts: the paper calls p "k_t percent" and gives no value for the noise scale σ_c; we
follow Robo3D's released generation scripts: p is a fraction (0.6 % … 1 % of the points) and σ = 3.

Columns. The reference adds the noise to every column of KITTI's 4-column ``.bin``, i.e. x, y, z and
intensity. ``perturb_intensity = True`` (default, parity) does the same: the intensity noise is in the
frame's own units (3 on KITTI's [0, 1] scale, so crosstalk intensities are mostly far out of range and
often negative: a quirk of the reference kept for parity); ``clip_intensity = True`` (non-parity) clips them back into
``[0, intensity_max]``. ``perturb_intensity = False`` moves the points only. Columns after intensity
(e.g. ``ring``) are never perturbed: they are not part of KITTI's file, and a ring must stay an integer
laser id, so a crosstalk point keeps the ring of the point it replaced (no ``perturb_extra_columns``
option: a non-integer ring would break every ring-based stage downstream).

Labels: with ``label_id`` set, the perturbed rows' ``semantic`` label becomes that id (Robo3D's scripts
label them 23 on SemanticKITTI-C, 43 on nuScenes-C; WOD-C 25 per the paper); other rows keep theirs.

p = 0 (or ⌊p·N⌋ = 0) returns the input frame unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.labels import set_semantic
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class CrosstalkParams:
    fraction: float  # p: share of points perturbed, m = floor(p·N)
    sigma: float = 3.0  # std of the additive noise (metres for x, y, z; intensity units for intensity)
    perturb_intensity: bool = True  # paper: the intensity column gets the same σ·N(0, 1) noise
    clip_intensity: bool = False  # non-parity: clip perturbed intensities into [0, intensity_max]
    label_id: int | None = None  # Robo3D: semantic id of the perturbed points (SemanticKITTI 23, nuScenes 43)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fraction) and 0 <= self.fraction <= 1):
            raise ValueError(f"crosstalk: fraction must be in [0, 1], got {self.fraction!r}")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ValueError(f"crosstalk: sigma must be finite and ≥ 0, got {self.sigma!r}")


def crosstalk_count(n: int, fraction: float) -> int:
    """m = ⌊p·N⌋, with p·N computed in float64."""
    return min(n, math.floor(fraction * n))


@stage("crosstalk", params=CrosstalkParams)
def crosstalk(frame: Frame, params: CrosstalkParams, rng: np.random.Generator) -> Frame:
    n = len(frame)
    m = crosstalk_count(n, params.fraction)
    if m == 0 or params.sigma == 0:
        return frame
    idx = np.sort(rng.choice(n, size=m, replace=False))
    cols = [0, 1, 2]
    icol = frame.fields.index("intensity") if "intensity" in frame.fields else None
    if params.perturb_intensity and icol is not None:
        cols.append(icol)
    noise = params.sigma * rng.standard_normal((m, len(cols)))
    points = frame.points.copy()
    sub = points[np.ix_(idx, cols)].astype(np.float64) + noise
    if params.perturb_intensity and icol is not None and params.clip_intensity:
        sub[:, 3] = np.clip(sub[:, 3], 0.0, frame.intensity_max)
    points[np.ix_(idx, cols)] = sub.astype(np.float32)
    tag = frame.point_tag.astype(np.uint8, copy=True)
    tag[idx] = PointTag.CROSSTALK
    return set_semantic(frame.with_points(points, point_tag=tag), idx, params.label_id)
