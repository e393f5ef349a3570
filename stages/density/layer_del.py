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
return the input frame unchanged. The above is ``rule = "text"``.

``rule = "code"`` (default) follows the released generator behind the published numbers: it deletes
c − 1, c or c + 1 layers (equally likely; c = 3 … 19), chosen without replacement among 64 bins of the
polar angle θ = acos(z / r) in degrees; the bins split the θ range that remains after trimming: a
1000-bin histogram of θ, bins of density ≤ 1/4000 per degree (≈ empty) dropped at both ends, and the
points strictly inside the rest define [min, max]. A point is deleted when it lies strictly inside a
chosen bin; points outside the trimmed range are never deleted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import check_rule
from bench_build.stages.kernels.spherical import to_spherical
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class LayerDelParams:
    layers: int  # number of elevation bins deleted
    num_bins: int = 64  # equal bins over the scan's observed elevation range
    rule: str = "code"  # "code": Li et al.'s released generator; "text": Appendix C (see the module docstring)


def elevation_bins(xyz: np.ndarray, num_bins: int) -> np.ndarray:
    """Index in [0, num_bins) of each point's elevation bin over the observed elevation range."""
    _, _, el = to_spherical(xyz)
    lo, hi = float(el.min()), float(el.max())
    if hi <= lo:
        return np.zeros(len(el), dtype=np.int64)
    b = np.floor((el - lo) / (hi - lo) * num_bins).astype(np.int64)
    return np.clip(b, 0, num_bins - 1)


@stage("layer_del", params=LayerDelParams, version=3)  # v3: rule (code: c ± 1 layers, trimmed polar bins)
def layer_del(frame: Frame, params: LayerDelParams, rng: np.random.Generator) -> Frame:
    if params.num_bins < 1:
        raise ValueError(f"layer_del: num_bins must be ≥ 1, got {params.num_bins}")
    if not 0 <= params.layers <= params.num_bins:
        raise ValueError(f"layer_del: layers must be in [0, num_bins = {params.num_bins}], got {params.layers}")
    check_rule(params.rule, "layer_del")
    if params.rule == "code":
        return _layer_del_code(frame, params, rng)
    if params.layers == 0 or len(frame) == 0:
        return frame
    chosen = rng.choice(params.num_bins, size=params.layers, replace=False)
    bins = elevation_bins(frame.xyz, params.num_bins)
    return frame.take(~np.isin(bins, chosen))


HIST_BINS = 1000  # the released code's trimming histogram
HIST_THRESHOLD = 1 / HIST_BINS / 4  # density (per degree) at or below which a histogram bin counts as empty


def polar_bin_edges(theta_deg: np.ndarray, num_bins: int) -> np.ndarray:
    """The released code's ``num_bins + 1`` layer edges over the trimmed polar-angle range (degrees)."""
    counts, edges = np.histogram(theta_deg, bins=HIST_BINS)
    density = counts / (len(theta_deg) * np.diff(edges))
    full = np.flatnonzero(density > HIST_THRESHOLD)
    lo, hi = edges[full[0]], edges[full[-1] + 1]
    inside = theta_deg[(lo < theta_deg) & (theta_deg < hi)]
    return np.linspace(inside.min(), inside.max(), num_bins + 1)


def _layer_del_code(frame: Frame, params: LayerDelParams, rng: np.random.Generator) -> Frame:
    n_del = min(params.num_bins, max(0, params.layers + int(rng.integers(0, 3)) - 1))
    if n_del == 0 or len(frame) == 0:
        return frame
    chosen = rng.choice(params.num_bins, size=n_del, replace=False)
    xyz = frame.xyz.astype(np.float64)
    cos = np.sqrt(np.einsum("ij,ij->i", xyz, xyz))
    at_origin = cos == 0
    np.divide(xyz[:, 2], cos, out=cos, where=~at_origin)
    np.clip(cos, -1.0, 1.0, out=cos)
    theta = np.degrees(np.arccos(cos, out=cos), out=cos)
    if at_origin.any():  # no angle: never deleted (NaN sorts past every bound), not in the histogram
        theta[at_origin] = np.nan
        if at_origin.all():
            return frame
        edges = polar_bin_edges(theta[~at_origin], params.num_bins)
    else:
        edges = polar_bin_edges(theta, params.num_bins)
    # deleted iff strictly inside one of the chosen bins (edges[c], edges[c + 1]): one binary search over
    # the chosen bins' bounds; an odd count of bounds ≤ θ means inside an interval or on its lower edge
    chosen.sort()
    bounds = np.stack([edges[chosen], edges[chosen + 1]], axis=1).ravel()
    k = np.searchsorted(bounds, theta, side="right")
    inside = (k & 1).astype(bool)
    inside &= theta != bounds[k - 1]
    return frame.take(~inside)
