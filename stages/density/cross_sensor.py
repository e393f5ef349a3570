"""Cross-sensor: a 64-beam scan thinned to look like a sparser LiDAR (Robo3D, Kong et al. ICCV 2023).

Two steps, after Wei et al.'s 64→32-beam simulation:

1. delete every point of a fixed set of rings, ``int(arange(ring_start, ring_stop, ring_step))``;
2. keep every ``subsample``-th (2nd) remaining point, ``[::2]`` in file order, starting with the first.

KITTI-C (light / moderate / heavy) deletes rings ``1:64:4`` (16 rings), ``1:64:2`` (32) and
``int(arange(1, 64, 1.33))`` (48), i.e. ``ring_step`` = 4 / 2 / 1.33 with ``ring_start`` = 1,
``ring_stop`` = 64. The step is a float so the heavy level's truncated 1.33 spacing is reproduced exactly
(1, 2, 3, 4, 6, 7, 8, 10, …: ``1 + 3·1.33 = 4.99`` truncates to 4).

Paper vs scripts: the paper (Appendix 8.8) gives m = {48, 32, 16} for light / moderate / heavy — the
beams *kept* (64 − 16, 64 − 32, 64 − 48), consistent with the scripts — and "sub-sample k_c percent
points from each beam" / "50 % … with an equal interval". We follow Robo3D's released generation scripts
(``create/*/cross_sensor``): the ``[::2]`` runs over the whole remaining cloud in file order, not per
beam (the two differ only in the parity at ring boundaries).

Ring ids come from `bench_build.stages.ring.frame_rings` with ``ring_method`` (default ``auto``); Robo3D used the
azimuth-wrap recovery on KITTI's raw point order, which ``auto`` picks on a raw KITTI ``.bin``
(a frame with a valid ring column uses that column, as Robo3D did on nuScenes). The ``[::2]`` step
needs the raw file order too, so this stage must run on an unshuffled scan. The method used is recorded
in the example's ``info`` (``ring_method``).

Identity: ``ring_step = inf`` (no ring deleted) with ``subsample = 1`` (every point kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.registry import stage
from bench_build.stages.ring import METHODS as RING_METHODS
from bench_build.stages.ring import frame_rings


@dataclass(frozen=True)
class CrossSensorParams:
    ring_step: float  # spacing of the deleted rings; inf deletes none
    ring_start: int = 1  # first deleted ring
    ring_stop: int = 64  # deleted rings are < ring_stop
    subsample: int = 2  # keep every subsample-th remaining point (file order); 1 keeps all
    ring_method: str = "auto"  # see bench_build.stages.ring.frame_rings

    def __post_init__(self) -> None:
        if not self.ring_step > 0:  # also rejects NaN
            raise ValueError(f"cross_sensor: ring_step must be > 0 (inf: no ring deleted), got {self.ring_step!r}")
        if not 0 <= self.ring_start <= self.ring_stop:
            raise ValueError(
                f"cross_sensor: need 0 ≤ ring_start ≤ ring_stop, got {self.ring_start}, {self.ring_stop}"
            )
        if self.subsample < 1:
            raise ValueError(f"cross_sensor: subsample must be ≥ 1, got {self.subsample}")
        if self.ring_method not in RING_METHODS:
            raise ValueError(f"cross_sensor: ring_method must be one of {RING_METHODS}, got {self.ring_method!r}")


def deleted_rings(params: CrossSensorParams) -> np.ndarray:
    """The ring ids deleted: ``int(arange(ring_start, ring_stop, ring_step))`` (empty for an infinite step)."""
    if math.isinf(params.ring_step):
        return np.zeros(0, dtype=np.int64)
    return np.arange(params.ring_start, params.ring_stop, params.ring_step).astype(np.int64)


@stage("cross_sensor", params=CrossSensorParams)
def cross_sensor(frame: Frame, params: CrossSensorParams, rng: np.random.Generator) -> Frame:
    drop = deleted_rings(params)
    if (drop.size == 0 and params.subsample == 1) or len(frame) == 0:
        return frame
    keep = np.ones(len(frame), dtype=bool)
    method = None
    if drop.size:
        rings, method = frame_rings(frame, params.ring_method)
        keep = ~np.isin(rings, drop)
    survivors = np.flatnonzero(keep)[:: params.subsample]
    out = frame.take(survivors)
    if method is None:
        return out
    return out.with_info(ring_method=method)
