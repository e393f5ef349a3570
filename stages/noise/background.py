"""Uniform background points (KITTI-C `background`, Li et al. Appendix C-A).

Models floating particles such as dust: ⌊N / d⌋ points (d = 45, 40, 35, 30, 20 at severities 1–5)
are drawn uniformly in the axis-aligned bounding box of the scan ("within the spatial range of the
scene") and appended. The paper is silent on their intensity: we resample intensities of the scan's
own points, so the intensity histogram gives the added points away no more than their positions do.
Extra columns (e.g. ring) of added points are −1 ("no laser"). Added points carry
``point_tag = SYNTHETIC``.

``rule = "code"`` (default) follows the released generator behind the published numbers: x and y span
the scan's raw range, but z spans the range left after deleting the 200 points of largest |z-score|
(the scan's hard z boundaries, e.g. 2.50 → 1.47 m on a demo scan), and each added point's intensity is
the mean intensity of its 5 nearest original points. ``rule = "text"`` is the raw bounding box with
resampled intensities (the paper's text).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.geometry import check_rule, mean_intensity_of_nearest
from bench_build.stages.kernels.buckets import bounds
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class BackgroundParams:
    count_divisor: float  # add floor(N / count_divisor) points; inf adds none
    rule: str = "code"  # "code": Li et al.'s released generator; "text": Appendix C (see the module docstring)
    z_trim: int = 200  # code rule: points of largest |z-score| left out of the z range


@stage("background", params=BackgroundParams, version=2)  # v2: rule (code: trimmed z, 5-NN intensity)
def background(frame: Frame, params: BackgroundParams, rng: np.random.Generator) -> Frame:
    if not params.count_divisor > 0:
        raise ValueError(f"background: count_divisor must be > 0, got {params.count_divisor}")
    n = len(frame)
    n_add = 0 if math.isinf(params.count_divisor) or n == 0 else int(n // params.count_divisor)
    if n_add == 0:
        return frame
    check_rule(params.rule, "background")
    lo, hi = bounds(frame.xyz)  # float64 min / max of x, y, z (numpy's axis-0 reduction of the view: ≈ 5 ms)
    if params.rule == "code":
        key = ("background.trimmed_z_range", params.z_trim)  # the same at every severity of a frame
        if key not in frame.derived:
            frame.derived[key] = trimmed_z_range(frame.xyz[:, 2], params.z_trim)
        lo[2], hi[2] = frame.derived[key]
    new = np.full((n_add, len(frame.fields)), -1.0, dtype=np.float32)
    new[:, :3] = rng.uniform(lo, hi, size=(n_add, 3))
    if params.rule == "code":
        new[:, frame.fields.index("intensity")] = mean_intensity_of_nearest(frame, new[:, :3], 5)
    else:
        new[:, frame.fields.index("intensity")] = frame.intensity[rng.integers(0, n, size=n_add)]
    return frame.append(new, tag=PointTag.SYNTHETIC)


def trimmed_z_range(z: np.ndarray, trim: int) -> tuple[float, float]:
    """(min, max) of z without its ``trim`` values of largest |z − mean| / std (the released code's
    outlier rule; the std scaling does not change which values those are)."""
    z = z.astype(np.float64)
    if trim <= 0 or trim >= len(z):
        return float(z.min()), float(z.max())
    dev = np.abs(z - z.mean())
    rest = z[np.argpartition(dev, len(z) - trim)[: len(z) - trim]]
    return float(rest.min()), float(rest.max())
