"""Deletion of whole elevation layers (KITTI-C `layer_del`, Li et al. Appendix C-A).

Models dead lasers of a multi-beam LiDAR: the elevation angle of every point is computed, its observed
range [min, max] over the scan is divided into 64 equal bins (KITTI's HDL-64E has 64 layers), and all
points of 3, 7, 11, 15, 19 bins (severities 1–5), chosen uniformly without replacement, are deleted.
Decisions the paper leaves open: we bin the elevation asin(z / r) rather than the polar angle
θ = 90° − elevation — the bins are the same sets mirrored, so with bins drawn uniformly the result has
the same distribution; bins are half-open [lo, hi) except the last, which includes the maximum; bins
are drawn among all ``num_bins`` bins, empty or not, as the paper describes (on a sparse scan a chosen
bin may hold no point); no outlier trimming of the angle range is done; survivors keep their order.
A scan whose points all share one elevation has all of them in bin 0. layers = 0 or an empty scan
return the input frame unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stages.frame import Frame
from stages.geometry import to_spherical
from stages.registry import stage


@dataclass(frozen=True)
class LayerDelParams:
    layers: int  # number of elevation bins deleted
    num_bins: int = 64  # equal bins over the scan's observed elevation range


def elevation_bins(xyz: np.ndarray, num_bins: int) -> np.ndarray:
    """Index in [0, num_bins) of each point's elevation bin over the observed elevation range."""
    _, _, el = to_spherical(xyz)
    lo, hi = float(el.min()), float(el.max())
    if hi <= lo:
        return np.zeros(len(el), dtype=np.int64)
    b = np.floor((el - lo) / (hi - lo) * num_bins).astype(np.int64)
    return np.clip(b, 0, num_bins - 1)


@stage("layer_del", params=LayerDelParams)
def layer_del(frame: Frame, params: LayerDelParams, rng: np.random.Generator) -> Frame:
    if params.num_bins < 1:
        raise ValueError(f"layer_del: num_bins must be ≥ 1, got {params.num_bins}")
    if not 0 <= params.layers <= params.num_bins:
        raise ValueError(f"layer_del: layers must be in [0, num_bins = {params.num_bins}], got {params.layers}")
    if params.layers == 0 or len(frame) == 0:
        return frame
    chosen = rng.choice(params.num_bins, size=params.layers, replace=False)
    bins = elevation_bins(frame.xyz, params.num_bins)
    return frame.take(~np.isin(bins, chosen))
