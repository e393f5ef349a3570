"""Robo3D snow and wet ground on the real nuScenes LIDAR_TOP sweep in ../shared/real (HDL-32E: 32 rings,
0–255 intensities, ego-roof returns within 1 m). Skipped when the folder is absent (a fresh clone)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe
from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.physics.ground import fit_ground_plane, ground_candidates
from bench_build.stages.physics.snowfall import C_TAU
from bench_build.stages.sensor import HDL32E
from bench_build.stages.weather.snow import snow
from bench_build.stages.weather.wet_ground import wet_ground
from tests.stages.conftest import rng_for
from tests.stages.test_wet_ground import reference_rule

REAL = Path(__file__).resolve().parents[3] / "shared" / "real" / "nuscenes-lidar-top"
SWEEPS = sorted(REAL.glob("*.pcd.bin")) if REAL.is_dir() else []
pytestmark = pytest.mark.skipif(not SWEEPS, reason="../shared/real/nuscenes-lidar-top is absent (a fresh clone)")

SNOW = load_recipe("robo3d-kitti-c").corruption("snow").params
WET = load_recipe("robo3d-kitti-c").corruption("wet_ground").params


@pytest.fixture(scope="module")
def sweep() -> Frame:
    pts = np.fromfile(SWEEPS[0], dtype=np.float32).reshape(-1, 5)
    return Frame("nuscenes", pts, fields=("x", "y", "z", "intensity", "ring"), intensity_scale="byte",
                 labels={"src": np.arange(len(pts))}, sensor=HDL32E)


@pytest.mark.parametrize("severity", [0, 1, 2])
def test_snow_paper_on_the_hdl32e_sweep(sweep, severity):
    """Its own 32 rings from the ring column (not an HDL-64 recovery), no HDL-64 focal table (neutral
    calibration), 0–255 intensities in and out. With slope 0 and the amplitude quirk, a flake-hit beam's
    peak is at most 229.5/(d_max − cτ_H/2)² (elements covering the peak bin lie at r ≥ d_max − cτ_H/2,
    their shares sum to ≤ 1), so every snow and attenuated intensity obeys that bound."""
    p = replace(SNOW[severity], ring_method="auto")
    raw = snow(sweep, replace(p, noise_floor=0.0), rng_for(severity))
    out = snow(sweep, p, rng_for(severity))
    assert raw.info["ring_method"] == "column" and raw.info["snow_focal"] == "none"
    assert np.array_equal(raw.column("ring"), sweep.column("ring"))
    assert len(np.unique(out.column("ring"))) == 32
    i = raw.intensity.astype(np.float64)
    assert i.min() >= 0 and i.max() <= 255 and np.all(i == np.floor(i))  # integer 0–255 like the source
    tag = raw.point_tag
    sc, att = tag == PointTag.SCATTER_SNOW, tag == PointTag.ATTENUATED
    assert sc.sum() > 50 and att.sum() > 500
    d_new = np.linalg.norm(raw.xyz.astype(np.float64), axis=1)
    r0 = np.linalg.norm(sweep.xyz.astype(np.float64), axis=1)
    bound_sc = np.floor(229.5 / np.maximum(d_new - C_TAU / 2, 0.9) ** 2)
    bound_att = np.floor(229.5 / np.maximum(r0 - 0.2 - C_TAU / 2, 0.9) ** 2)
    assert np.all(i[sc] <= np.minimum(bound_sc[sc], 255) + 1e-6)
    assert np.all(i[att] <= np.minimum(bound_att[att], 255) + 1e-6)
    # the noise floor only removes non-snow points; survivors are unchanged rows of the no-floor output
    assert out.info["snow_noise_floor"] is True and len(out) < len(sweep)
    kept = np.isin(raw.labels["src"], out.labels["src"])
    assert kept[sc].all()
    assert np.array_equal(out.points, raw.points[kept])


def test_snow_physical_on_the_hdl32e_sweep_and_an_explicit_hdl64_table(sweep):
    out = snow(sweep, replace(SNOW[1], mode="physical", ring_method="auto", noise_floor=0.0), rng_for(0))
    assert out.info["snow_focal"] == "none" and len(out) == len(sweep)
    att = out.point_tag == PointTag.ATTENUATED
    assert att.sum() > 500 and np.all(out.intensity >= 0) and np.all(out.intensity <= 255)
    assert np.mean(out.intensity[att] <= sweep.intensity[att] + 1e-3) > 0.99  # flakes take light away
    # Robo3D's nuScenes-C script used the 64-laser S3 table on rings 0–31: only when asked explicitly
    forced = snow(sweep, replace(SNOW[1], ring_method="auto", focal_calibration="hdl64e_s3"), rng_for(0))
    assert forced.info["snow_focal"] == "hdl64e_s3/row"


@pytest.mark.parametrize("severity", [0, 1, 2])
def test_wet_ground_on_the_hdl32e_sweep(sweep, severity):
    """Fewer than 1,000 candidates (≈ 90), thousands of ground points: fitted, changed at every severity,
    and given the plane, kept points and intensities follow the released script's rule on 0–255 values."""
    assert 4 < int(ground_candidates(sweep.xyz).sum()) < 1000
    p = WET[severity]
    out = wet_ground(sweep, p, rng_for(severity))
    plane = fit_ground_plane(sweep.xyz, rng_for(severity), squared_loss=True)
    xyz = sweep.xyz.astype(np.float64)
    ground, keep, new_i = reference_rule(xyz, sweep.intensity.astype(np.float64), plane, p.water_height,
                                          p.noise_floor)
    assert ground.sum() >= 1000
    g_idx = np.flatnonzero(ground)
    assert np.array_equal(out.labels["src"], np.sort(np.concatenate([np.flatnonzero(~ground), g_idx[keep]])))
    pos = np.searchsorted(out.labels["src"], g_idx[keep])
    np.testing.assert_allclose(out.intensity[pos], new_i.astype(np.float32), rtol=1e-6, atol=1e-4)
    src = out.labels["src"]
    assert np.all(out.intensity <= sweep.intensity[src]) and out.intensity.min() >= 0
    assert not np.array_equal(out.points, sweep.points[src]) or len(out) < len(sweep)  # the scan changes
    assert np.array_equal(out.column("ring"), sweep.column("ring")[src])
