"""Drop a fixed fraction of points at random (ModelNet-C "Drop-Global", Ren et al. Appendix A).

Models an uneven, sparser scan. The cloud is shuffled (a permutation of the example's RNG) and the
first ⌊N·(1 − ρ)⌋ points are kept, in shuffled order (released generator). ρ = 0.25, 0.375, 0.5,
0.625, 0.75 (released code; the paper's text gives 0.675 at level 4 — the ``text`` variant).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class ObjectDropGlobalParams:
    ratio: float  # ρ: fraction of points dropped


@stage("object_drop_global", params=ObjectDropGlobalParams)
def object_drop_global(frame: Frame, params: ObjectDropGlobalParams, rng: np.random.Generator) -> Frame:
    if not 0 <= params.ratio < 1:
        raise ValueError(f"object_drop_global: ratio must be in [0, 1), got {params.ratio}")
    n = len(frame)
    keep = int(n * (1.0 - params.ratio))
    return frame.take(rng.permutation(n)[:keep])
