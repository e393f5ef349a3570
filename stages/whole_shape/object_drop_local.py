"""Remove K points in C local clusters (ModelNet-C "Drop-Local", Ren et al. Appendix A).

Models occlusion / missing parts. C ~ U{1 … max_clusters} (released code: ``randint(1, 8)`` → 1…7;
the paper's text says U{1, 8}: the ``text`` variant sets ``max_clusters = 8``), and each of the K
points is assigned uniformly to a cluster (sizes Nᵢ, which can be 0). Cluster by cluster on the
shrinking cloud, a random point is the centre and the Nᵢ points nearest to it — the centre
included — are removed. K = 100 … 500. The output keeps the released generator's order (points
sorted by decreasing distance to the last centre). C is recorded in ``info.clusters``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.registry import stage
from bench_build.stages.whole_shape import cluster_sizes


@dataclass(frozen=True)
class ObjectDropLocalParams:
    points: int  # K: total points removed
    max_clusters: int = 7  # C ~ U{1..max_clusters}; released 7, paper text 8


@stage("object_drop_local", params=ObjectDropLocalParams)
def object_drop_local(frame: Frame, params: ObjectDropLocalParams, rng: np.random.Generator) -> Frame:
    if params.points < 0 or params.points >= len(frame):
        raise ValueError(f"object_drop_local: points must be in [0, {len(frame)}), got {params.points}")
    sizes = cluster_sizes(rng, params.points, params.max_clusters)
    index = np.arange(len(frame))
    xyz = frame.xyz.astype(np.float64)
    for n_i in sizes:
        p = xyz[index]
        centre = p[rng.integers(len(index))]
        d2 = ((p - centre) ** 2).sum(axis=1)
        order = np.argsort(-d2, kind="stable")  # farthest first; the n_i nearest (centre included) go last
        index = index[order[: len(index) - int(n_i)]]
    return frame.take(index).with_info(clusters=len(sizes))
