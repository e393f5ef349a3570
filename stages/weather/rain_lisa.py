"""LISA rain (Kilic et al. 2021; KITTI-C `rain`, Li et al.): Mie extinction of Marshall–Palmer rain
and a Monte Carlo of the drops in every beam (Kilic et al. 2021; the core is `bench_build.stages.physics.lisa`).

For a rate R (mm/h): Λ = 4.1·R^{−0.21} mm⁻¹, N₀ = 8000 m⁻³mm⁻¹, α from Mie theory (water), and per
point the drops in its beam cone compete with the attenuated target:
- kept (``point_tag = ATTENUATED``): same direction, range R + N(0, σ²) with σ = ΔR/√(2·P_0/P_min),
  intensity ρ·e^{−2αR} (in the source scale);
- scattered (``SCATTER_RAIN``): a drop's return wins; the point moves along its ray to the drop and
  takes the drop's intensity ρ_p·e^{−2αr}·min((D/D_b)², 1);
- lost: neither the target nor any drop reaches P_min = 0.9/r_max².

ρ = intensity / frame.intensity_max (the source declares its scale; LISA wants reflectance in [0, 1]),
results are written back in the source scale. A "tanh" source is treated as [0, 1) as is.

Modes and options — each constant or quirk is a field; None takes the mode's default:

| field                | physical | paper (Li et al.) | meaning                                              |
| -------------------- | -------- | ----------------- | ---------------------------------------------------- |
| ``wavelength_nm``    | 905      | 903               | λ of the Mie table (Li's stored table is at 903 nm)  |
| ``r_max``            | 200      | 120               | m; P_min = 0.9/r_max² (also Li's zero-intensity ρ)   |
| ``range_accuracy``   | 0.09     | 0.04              | ΔR (m) in σ = ΔR/√(2·SNR)                            |
| ``refractive_index`` | 1.328    | 1.328             | water: Mie table and ρ_p = 0.019851                  |
| ``zero_intensity_rho``| False   | True              | Li: intensity-0 points get ρ = 1.2/r_max² (physical: |
|                      |          |                   | ρ = 0, so they are never kept — only a drop can hit) |
| ``keep_lost_rows``   | False    | True              | Li writes lost points as (0,0,0,0) rows and keeps N  |
|                      |          |                   | rows: here x = y = z = intensity = 0, tag ATTENUATED,|
|                      |          |                   | extra columns and labels kept. physical: dropped.    |

Both modes: r_min = 1.5 m, divergence 3 mrad (full angle), D_st = 0.05 mm, x = πD/λ (not upstream
pylisa's πD/(2λ)), return_mode "strongest" ("last" available). Li's other quirks need no option: the
label column is discarded by Li (here the tag column is always written) and Li never seeds (here all
randomness comes from the example's generator, so output is reproducible).

Edge cases: rate = 0 returns the frame unchanged (severity 0 is the clean scan; note that rate → 0⁺
does *not* tend to the identity — LISA's detector model still drops targets with P_0 < P_min, i.e.
R ≥ r_max·√(ρ/0.9) in clear air, and adds range noise); R = 0 rows (no direction) are passed through
untouched; R ≤ r_min has no drops; points beyond r_max follow the same rule (a ρ ≤ 1 target beyond
1.054·r_max is always lost); an empty frame is returned as is. Ring and other columns are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.physics import lisa
from bench_build.stages.registry import stage

DEFAULTS: dict[str, dict[str, object]] = {
    "physical": {
        "wavelength_nm": 905.0,
        "r_max": 200.0,
        "range_accuracy": 0.09,
        "refractive_index": lisa.WATER_INDEX,
        "zero_intensity_rho": False,
        "keep_lost_rows": False,
    },
    "paper": {
        "wavelength_nm": 903.0,
        "r_max": 120.0,
        "range_accuracy": 0.04,
        "refractive_index": lisa.WATER_INDEX,
        "zero_intensity_rho": True,
        "keep_lost_rows": True,
    },
}


@dataclass(frozen=True)
class RainLisaParams(lisa.LisaParams):
    """rate in mm/h (Li: 5, 15, 50, 150, 500); the other fields are `lisa.LisaParams`'."""

    NAME: ClassVar[str] = "rain_lisa"
    DEFAULTS: ClassVar[dict[str, dict[str, object]]] = DEFAULTS


def model_for(params: RainLisaParams) -> lisa.LisaModel:
    return lisa.model_from_params(params, "marshall_palmer")


@stage("rain_lisa", params=RainLisaParams, version=2)  # v2: closed-form Q(3/2) + numba core (bits may differ rarely)
def rain_lisa(frame: Frame, params: RainLisaParams, rng: np.random.Generator) -> Frame:
    return lisa.apply_stage(frame, params, rng, model_for, PointTag.SCATTER_RAIN)
