"""Add K points in C Gaussian clusters around surface points (ModelNet-C "Add-Local", Appendix A).

Models local clutter. C ~ U{1 … max_clusters} (released 7, paper text 8), cluster sizes Nᵢ as in
Drop-Local. The cloud is shuffled once; the first C points are the centres; cluster i adds
centreᵢ + σᵢ·N(0, I) with σᵢ ~ U(0.075, 0.125). Added points outside the unit sphere are mapped
by the released generator to p/‖p‖² (spherical inversion, ``outside = "invert"``, so they land at
norm 1/‖p‖ < 1); the paper does not mention it (``outside = "keep"``). Output: shuffled shape, then
the added points in cluster order, tagged ``SYNTHETIC``. K = 100 … 500.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.registry import stage
from bench_build.stages.whole_shape import cluster_sizes

OUTSIDE = ("invert", "keep")


@dataclass(frozen=True)
class ObjectAddLocalParams:
    points: int  # K: points added
    max_clusters: int = 7  # C ~ U{1..max_clusters}; released 7, paper text 8
    sigma_min: float = 0.075
    sigma_max: float = 0.125
    outside: str = "invert"  # released: p/‖p‖² for ‖p‖ > 1; "keep" leaves them

    def __post_init__(self) -> None:  # refused when a recipe is loaded, not in a worker's first task
        if self.outside not in OUTSIDE:
            raise ValueError(f"object_add_local: outside must be one of {OUTSIDE}, got {self.outside!r}")


@stage("object_add_local", params=ObjectAddLocalParams)
def object_add_local(frame: Frame, params: ObjectAddLocalParams, rng: np.random.Generator) -> Frame:
    if params.points < 0 or params.outside not in OUTSIDE or not 0 <= params.sigma_min <= params.sigma_max:
        raise ValueError(f"object_add_local: bad parameters {params}")
    sizes = cluster_sizes(rng, params.points, params.max_clusters)
    shuffled = frame.take(rng.permutation(len(frame)))
    if len(sizes) > len(frame):
        raise ValueError(f"object_add_local: {len(sizes)} clusters but only {len(frame)} points")
    sigma = rng.uniform(params.sigma_min, params.sigma_max, len(sizes))
    owner = np.repeat(np.arange(len(sizes)), sizes)
    centres = shuffled.xyz.astype(np.float64)[: len(sizes)]
    added = centres[owner] + sigma[owner, None] * rng.standard_normal((params.points, 3))
    if params.outside == "invert":
        d2 = (added**2).sum(axis=1)
        out = d2 > 1.0
        added[out] /= d2[out, None]
    new = np.zeros((params.points, frame.points.shape[1]), np.float32)
    new[:, :3] = added
    return shuffled.append(new, PointTag.SYNTHETIC).with_info(clusters=len(sizes))
