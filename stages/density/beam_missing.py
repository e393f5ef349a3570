"""Beam missing: every point of K randomly drawn laser rings is deleted (Robo3D, Kong et al. ICCV 2023).

Models dust or insects stuck on the sensor window that block some lasers completely. K ring ids are
drawn from ``[ring_low, ring_high]`` (inclusive; KITTI 4..58, nuScenes 2..28) and every point whose
ring is among them is deleted; the survivors keep their order, boxes are kept.

* ``replace = True`` (paper parity, the generation scripts' behaviour): the K ids are drawn *with
  replacement*, so fewer than K distinct rings go — on 55 candidate rings K = 16 / 32 / 48 deletes on
  average 14.0 / 24.4 / 32.2 distinct rings (``55·(1 − (54/55)^K)``).
* ``replace = False``: exactly K distinct rings (K must not exceed the number of candidates). Not
  parity; the name-true variant.

Paper vs scripts: the paper's Appendix 8.5 lists m = {48, 32, 16} "beams to be dropped" for
KITTI-C; taken literally that would make *light* the strongest level. We follow Robo3D's released generation scripts
(``create/*/beam_missing``): K = 16 / 32 / 48 for light / moderate / heavy, drawn with replacement; the paper's
list reads as the beams *kept* of a 64-beam sensor (64 − 16 = 48, …).

Ring ids come from `bench_build.stages.ring.frame_rings` with ``ring_method`` (default ``auto``: a valid ring
column, else azimuth-wrap recovery when the file is in raw sensor order, else the nearest HDL-64E
laser elevation). Robo3D recovered rings by azimuth-wrap on KITTI's raw point order; on a raw
KITTI ``.bin`` ``auto`` resolves to exactly that. Ring 0 is the first ring of the file (the top laser).
The method used is recorded in the example's ``info`` (``ring_method``), written to the row's ``info`` column.
K = 0 or an empty scan returns the input frame unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.registry import stage
from bench_build.stages.ring import METHODS as RING_METHODS
from bench_build.stages.ring import frame_rings


@dataclass(frozen=True)
class BeamMissingParams:
    beams: int  # K: number of ring ids drawn
    ring_low: int = 4  # smallest candidate ring id (inclusive)
    ring_high: int = 58  # largest candidate ring id (inclusive)
    replace: bool = True  # paper: draw with replacement; False: exactly K distinct rings
    ring_method: str = "auto"  # see bench_build.stages.ring.frame_rings

    def __post_init__(self) -> None:
        if not 0 <= self.ring_low <= self.ring_high:
            raise ValueError(f"beam_missing: need 0 ≤ ring_low ≤ ring_high, got {self.ring_low}, {self.ring_high}")
        if self.beams < 0:
            raise ValueError(f"beam_missing: beams must be ≥ 0, got {self.beams}")
        n_cand = self.ring_high - self.ring_low + 1
        if not self.replace and self.beams > n_cand:
            raise ValueError(
                f"beam_missing: beams = {self.beams} distinct rings requested (replace = False) but only "
                f"{n_cand} candidates in [{self.ring_low}, {self.ring_high}]"
            )
        if self.ring_method not in RING_METHODS:
            raise ValueError(f"beam_missing: ring_method must be one of {RING_METHODS}, got {self.ring_method!r}")


def draw_beams(params: BeamMissingParams, rng: np.random.Generator) -> np.ndarray:
    """The K ring ids (with repeats when ``replace``), in draw order."""
    candidates = np.arange(params.ring_low, params.ring_high + 1)
    return rng.choice(candidates, size=params.beams, replace=params.replace)


@stage("beam_missing", params=BeamMissingParams)
def beam_missing(frame: Frame, params: BeamMissingParams, rng: np.random.Generator) -> Frame:
    if params.beams == 0 or len(frame) == 0:
        return frame
    drawn = draw_beams(params, rng)
    rings, method = frame_rings(frame, params.ring_method)
    out = frame.take(~np.isin(rings, drawn))
    return out.with_info(ring_method=method)
