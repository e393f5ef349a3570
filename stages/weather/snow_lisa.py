"""LISA snow (Kilic et al. 2021; KITTI-C `snow`, Li et al.): Mie extinction of Marshall–Gunn snow and
a Monte Carlo of the flakes in every beam (Kilic et al. 2021; the core is `bench_build.stages.physics.lisa`).

For a water-equivalent rate R (mm/h): N₀ = 7600·R^{−0.87} m⁻³mm⁻¹, Λ = 2.55·R^{−0.48} mm⁻¹, flakes as
spheres (diameter D = D_st + Exp(1/Λ)). Outcomes as in `rain_lisa`: kept (``ATTENUATED``, range noise
σ = ΔR/√(2·SNR), intensity ρ·e^{−2αR}), scattered (``SCATTER_SNOW``, moved along the ray to the
flake, intensity ρ_p·e^{−2αr}·min((D/D_b)², 1)), or lost.

ρ = intensity / frame.intensity_max, written back in the source scale.

Modes and options — each constant or quirk is a field; None takes the mode's default:

| field                       | physical | paper (Li et al.) | meaning                                   |
| --------------------------- | -------- | ----------------- | ----------------------------------------- |
| ``wavelength_nm``           | 905      | 903               | λ of the Mie table                        |
| ``r_max``                   | 200      | 120               | m; P_min = 0.9/r_max²                     |
| ``range_accuracy``          | 0.09     | 0.04              | ΔR (m)                                    |
| ``refractive_index``        | 1.3031   | 130.31            | ice; Li multiplies by 100 on purpose to   |
|                             |          |                   | make snow more severe: ρ_p = 0.9698       |
|                             |          |                   | instead of 0.01732, so flakes are visible |
|                             |          |                   | out to ≈ 6–15 m instead of ≈ 3–6 m        |
| ``mie_water_table_for_snow``| False    | True              | Li computes α from the stored *water*     |
|                             |          |                   | table (m = 1.328) for snow too; physical: |
|                             |          |                   | Mie with ``refractive_index`` (ice). When |
|                             |          |                   | True, α uses m = 1.328 whatever the index |
|                             |          |                   | (which then only sets ρ_p)                |
| ``zero_intensity_rho``      | False    | True              | Li: intensity-0 points get ρ = 1.2/r_max² |
| ``keep_lost_rows``          | False    | True              | Li keeps N rows, lost points as (0,0,0,0):|
|                             |          |                   | here xyz = intensity = 0, tag ATTENUATED, |
|                             |          |                   | extra columns/labels kept. physical: drop |

Both modes: r_min = 1.5 m, divergence 3 mrad, D_st = 0.05 mm, x = πD/λ, return_mode "strongest".
Setting ``mie_water_table_for_snow = False`` with m = 130.31 runs Mie at m = 130.31 (valid, but not
what either reference does).

Edge cases as `rain_lisa`: rate = 0 is the identity (rate → 0⁺ is not: the P_min cut and range noise
remain), R = 0 rows untouched, no flakes within r_min, empty frames returned as is.
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
        "refractive_index": lisa.ICE_INDEX,
        "mie_water_table_for_snow": False,
        "zero_intensity_rho": False,
        "keep_lost_rows": False,
    },
    "paper": {
        "wavelength_nm": 903.0,
        "r_max": 120.0,
        "range_accuracy": 0.04,
        "refractive_index": lisa.LI_SNOW_INDEX,
        "mie_water_table_for_snow": True,
        "zero_intensity_rho": True,
        "keep_lost_rows": True,
    },
}


@dataclass(frozen=True)
class SnowLisaParams(lisa.LisaParams):
    """rate in mm/h water equivalent (Li: 0.5, 1.5, 5, 15, 50); the other fields are `lisa.LisaParams`'."""

    mie_water_table_for_snow: bool | None = None

    NAME: ClassVar[str] = "snow_lisa"
    DEFAULTS: ClassVar[dict[str, dict[str, object]]] = DEFAULTS


def model_for(params: SnowLisaParams) -> lisa.LisaModel:
    water = params.resolved()["mie_water_table_for_snow"]
    return lisa.model_from_params(params, "marshall_gunn", mie_index=lisa.WATER_INDEX if water else None)


@stage("snow_lisa", params=SnowLisaParams, version=2)  # v2: closed-form Q(3/2) + numba core (bits may differ rarely)
def snow_lisa(frame: Frame, params: SnowLisaParams, rng: np.random.Generator) -> Frame:
    return lisa.apply_stage(frame, params, rng, model_for, PointTag.SCATTER_SNOW)
