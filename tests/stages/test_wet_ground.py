"""wet_ground: Hahner et al. wet-ground augmentation (CVPR 2022), physical and paper modes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import linregress

from bench_build.manifests.recipe import load_recipe
from bench_build.sources.demo.kitti import generate_frame
from bench_build.sources.kitti import camera_fov_mask
from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.geometry import IMAGE_SIZE
from bench_build.stages.physics.ground import (
    fit_ground_plane,
    fit_line,
    flat_ground_plane,
    ground_candidates,
    noise_level_line,
    ransac_plane,
)
from bench_build.stages.weather.wet_ground import (
    N_AIR,
    N_WATER,
    WetGroundParams,
    film_transmission,
    film_transmission_sp,
    fresnel_powers,
    wet_ground,
)
from tests.stages.conftest import indexed, make_scene, rng_for
from tests.stages.kitti_fov import demo_fov_scan

ROBO3D = load_recipe("robo3d-kitti-c").corruption("wet_ground").params



def test_robo3d_recipe_values():
    assert [p.water_height for p in ROBO3D] == [0.2, 1.0, 1.2]
    assert all(p.noise_floor == 0.2 and p.mode == "paper" and not p.option("byte_scale") for p in ROBO3D)
    assert all(p.option("floor_const") == 5.0 and p.option("divide_by_angle") for p in ROBO3D)


# ---- optics ----------------------------------------------------------------------------------------
def test_fresnel_reference_values():
    # water-film optics, ρ = 0.1: θ → (R_s, T_s, R_p, T_p); R air→water, T the total through the film
    table = {0: (0.0200, 0.0962, 0.0200, 0.0962), 60: (0.1137, 0.0794, 0.0044, 0.0992),
             85: (0.6722, 0.0115, 0.4930, 0.0270)}
    theta = np.radians(sorted(table))
    r_s, t_s_single, r_p, _ = fresnel_powers(theta, N_AIR, N_WATER)
    t_s, t_p = film_transmission_sp(np.cos(theta), np.full(3, 0.1))
    for k, deg in enumerate(sorted(table)):
        ref = table[deg]
        assert r_s[k] == pytest.approx(ref[0], abs=1e-4) and r_p[k] == pytest.approx(ref[2], abs=1e-4)
        assert t_s[k] == pytest.approx(ref[1], abs=1e-4) and t_p[k] == pytest.approx(ref[3], abs=1e-4)
    assert r_s + t_s_single == pytest.approx(np.ones(3))  # energy conservation at the surface
    np.testing.assert_allclose(film_transmission(np.cos(theta), np.full(3, 0.1)), np.maximum(t_s, t_p))


# ---- ground plane ----------------------------------------------------------------------------------
def test_ransac_recovers_a_tilted_plane_with_outliers():
    rng = np.random.default_rng(0)
    n = 3000
    x, y = rng.uniform(10, 60, n), rng.uniform(-3, 3, n)
    z = 0.004 * x - 0.01 * y - 1.8 + rng.normal(0, 0.01, n)
    out = rng.random(n) < 0.3
    z[out] += rng.uniform(0.3, 1.0, out.sum())  # objects standing on the road
    coef, inliers = ransac_plane(np.column_stack([x, y, z]), rng_for(0))
    np.testing.assert_allclose(coef, [0.004, -0.01, -1.8], atol=2e-3)
    assert inliers[~out].mean() > 0.4 and not inliers[out].any()
    again, _ = ransac_plane(np.column_stack([x, y, z]), rng_for(0))
    assert np.array_equal(coef, again)  # deterministic from the generator


def test_ground_plane_of_the_scene(scene):
    plane = fit_ground_plane(scene.xyz, rng_for(0))
    assert plane is not None
    np.testing.assert_allclose(plane.w, [0, 0, -1], atol=1e-6)
    assert plane.h == pytest.approx(-1.73, abs=1e-4)
    flat = flat_ground_plane(1.73)
    np.testing.assert_allclose(flat.offset(scene.xyz[:10]), plane.offset(scene.xyz[:10]), atol=1e-4)
    assert np.all(plane.cos_incidence(scene.xyz[:100]) > 0)


def test_noise_level_line_lowest_and_fallback():
    rng = np.random.default_rng(1)
    d = rng.uniform(10, 70, 20000)
    n = 0.5 + 0.1 * d + rng.exponential(2.0, len(d))
    slope, icept = noise_level_line(d, n, floor_const=0.1, method="lowest", fallback=(0.0, 0.0))
    assert slope == pytest.approx(0.1, abs=0.01) and icept == pytest.approx(0.5, abs=0.3)
    # nothing above the floor → the fallback line; an impossible floor for "rarest" likewise
    assert noise_level_line(d, n, floor_const=1e9, method="lowest", fallback=(1.0, 2.0)) == (1.0, 2.0)
    assert noise_level_line(d, n, floor_const=1e9, method="rarest", fallback=(1.0, 2.0)) == (1.0, 2.0)
    s, _ = noise_level_line(d, n, floor_const=0.1, method="rarest", fallback=(0.0, 0.0))
    assert np.isfinite(s)
    assert fit_line(np.array([1.0, 2.0, 3.0]), np.array([3.0, 5.0, 7.0])) == pytest.approx((2.0, 1.0))


# ---- the stage -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["physical", "paper"])
def test_only_ground_points_change_and_intensity_never_increases(scene_with_ring, mode):
    frame = indexed(scene_with_ring)
    before = frame.points.copy()
    out = wet_ground(frame, WetGroundParams(water_height=1.2, noise_floor=0.2, mode=mode), rng_for(0))
    assert np.array_equal(frame.points, before)  # input not mutated
    src = out.labels["src"]
    assert np.all(np.diff(src) > 0)  # order preserved, only drops
    assert out.fields == frame.fields and out.points.dtype == np.float32
    # the fitted plane may tilt by ~1e-4 (paper's wider squared-loss inlier band), so allow 1 cm at the band edge
    near_ground = np.abs(frame.xyz[:, 2].astype(np.float64) + 1.73) < 0.51
    # every point away from the ground survives unchanged
    kept = np.zeros(len(frame), dtype=bool)
    kept[src] = True
    assert kept[~near_ground].all()
    changed_rows = np.flatnonzero(np.any(out.points != frame.points[src], axis=1))
    assert near_ground[src[changed_rows]].all() and near_ground[~kept].all()
    assert len(changed_rows) + (len(frame) - len(out)) > 1000
    # positions and extra columns never change; intensity only goes down
    assert np.array_equal(out.points[:, [0, 1, 2, 4]], frame.points[src][:, [0, 1, 2, 4]])
    assert np.all(out.intensity <= frame.intensity[src])
    tag = out.point_tag
    assert set(np.unique(tag[changed_rows])) == {PointTag.ATTENUATED}
    assert np.all(tag[np.setdiff1d(np.arange(len(out)), changed_rows)] == PointTag.CLEAN)


@pytest.mark.parametrize("mode", ["physical", "paper"])
def test_more_water_drops_more_ground_points(mode):
    frame = make_scene(3)
    dropped = []
    for p in ROBO3D:
        params = WetGroundParams(water_height=p.water_height, noise_floor=p.noise_floor, mode=mode)
        dropped.append(len(frame) - len(wet_ground(frame, params, rng_for(0))))
    assert dropped[0] <= dropped[1] <= dropped[2] and dropped[0] < dropped[2]
    # and the intensity of the surviving ground falls with the water height
    means = []
    for wh in (0.2, 0.6, 1.0):
        out = wet_ground(indexed(frame), WetGroundParams(water_height=wh, noise_floor=0.0, mode=mode), rng_for(0))
        means.append(float(out.intensity[: 40_000].mean()))
    assert means[0] > means[1] > means[2]


def test_robo3d_recipe_runs_and_is_monotone(scene):
    outs = [wet_ground(scene, p, rng_for(s)) for s, p in enumerate(ROBO3D)]
    dropped = [len(scene) - len(o) for o in outs]
    assert 0 < dropped[0] < dropped[1] <= dropped[2]


def test_scan_without_ground_is_unchanged(scene):
    no_ground = scene.take(scene.xyz[:, 2] > -1.0)
    for mode in ("physical", "paper"):
        assert wet_ground(no_ground, WetGroundParams(water_height=1.2, mode=mode), rng_for(0)) is no_ground
    empty = scene.take(np.zeros(len(scene), dtype=bool))
    assert wet_ground(empty, WetGroundParams(water_height=1.2), rng_for(0)) is empty


def test_plane_fitted_from_few_candidates_and_gated_on_ground_points_after_the_fit():
    """The reference fits from more than 4 candidates and gates on ≥ 1,000 ground points after the fit
    (the released code); gating on candidates skipped every camera-FOV scan (issue 18)."""
    sparse = make_scene(0, n_ground=20_000)  # ≈ 720 candidates in the strip in front of the sensor
    n_cand = int(ground_candidates(sparse.xyz).sum())
    assert 4 < n_cand < 1000
    plane = fit_ground_plane(sparse.xyz, rng_for(0), squared_loss=True)
    assert plane is not None and int(plane.mask(sparse.xyz).sum()) >= 1000
    p = WetGroundParams(water_height=1.2, noise_floor=0.2, mode="paper")
    assert len(wet_ground(sparse, p, rng_for(0))) < len(sparse)
    # exactly 5 candidates (the rest of the ground behind the sensor): still fitted; 4: no plane
    base = make_scene(0)
    cand = np.flatnonzero(ground_candidates(base.xyz))
    for keep_n, fitted in ((5, True), (4, False)):
        mask = np.ones(len(base), dtype=bool)
        mask[cand[keep_n:]] = False
        f = base.take(mask)
        assert int(ground_candidates(f.xyz).sum()) == keep_n
        assert (fit_ground_plane(f.xyz, rng_for(0)) is not None) == fitted
        out = wet_ground(f, p, rng_for(0))
        assert (out is not f) == fitted  # ≥ 1,000 ground points behind the sensor once there is a plane
    # no plane: unchanged, or the opt-in flat fallback with the fitted sign convention (w·p + h = 0 at z = −H)
    mask = np.ones(len(base), dtype=bool)
    mask[cand] = False
    none = base.take(mask)
    assert wet_ground(none, p, rng_for(0)) is none
    flat = flat_ground_plane(1.73)
    assert flat.offset(np.array([[5.0, 1.0, -1.73]]))[0] == pytest.approx(0.0)
    assert flat.cos_incidence(np.array([[5.0, 0.0, -1.73]]))[0] > 0  # beams hit it from above
    out = wet_ground(none, WetGroundParams(water_height=1.2, noise_floor=0.2, mode="paper", fallback_height=1.73),
                     rng_for(0))
    assert len(out) < len(none)
    # a plane, but fewer than 1,000 points in its ground band → unchanged
    thin = WetGroundParams(water_height=1.2, noise_floor=0.2, mode="paper", ground_band=0.0)
    assert wet_ground(base, thin, rng_for(0)) is base


def test_squared_loss_inlier_rule_is_r2_below_mad():
    """sklearn ≤ 1.1 with loss='squared_loss': inlier when r² ≤ MAD (|r| ≤ √MAD); absolute loss: |r| ≤ MAD."""
    rng = np.random.default_rng(3)
    n = 2000
    x, y = rng.uniform(10, 60, n), rng.uniform(-3, 3, n)
    z = -1.73 + rng.uniform(-0.05, 0.05, n)
    z[:40] = -1.73 + 0.10  # between MAD (≈ 0.025) and √MAD (≈ 0.16)
    z[40:80] = -1.73 + 0.30  # beyond both
    xyz = np.column_stack([x, y, z])
    mad = float(np.median(np.abs(z - np.median(z))))
    assert mad < 0.1 < math.sqrt(mad) < 0.3
    _, sq = ransac_plane(xyz, rng_for(0), squared_loss=True)
    _, ab = ransac_plane(xyz, rng_for(0), squared_loss=False)
    assert sq[:40].all() and not ab[:40].any()
    assert not sq[40:80].any() and not ab[40:80].any()
    assert ab[80:].mean() > 0.3 and sq[80:].all()


def test_physical_dry_is_identity_paper_drops_dim_ground(scene):
    assert wet_ground(scene, WetGroundParams(water_height=0.0, noise_floor=0.7), rng_for(0)) is scene
    out = wet_ground(indexed(scene), WetGroundParams(water_height=0.0, noise_floor=0.7, mode="paper"), rng_for(0))
    assert len(out) < len(scene)  # the reference tests every ground point against the floor
    assert np.array_equal(out.intensity, scene.intensity[out.labels["src"]])


def test_physical_mode_is_scale_free_paper_floor_is_not(scene):
    byte = Frame(scene.frame_id, (scene.points * np.array([1, 1, 1, 255.0], dtype=np.float32)).astype(np.float32),
                 intensity_scale="byte", labels={"src": np.arange(len(scene))})
    unit = indexed(scene)
    p = WetGroundParams(water_height=1.2, noise_floor=0.2)
    a, b = wet_ground(unit, p, rng_for(0)), wet_ground(byte, p, rng_for(0))
    assert np.array_equal(a.labels["src"], b.labels["src"])
    np.testing.assert_allclose(b.intensity, a.intensity * 255.0, rtol=1e-5)
    # byte_scale on a unit source is the same as feeding the byte source
    c = wet_ground(unit, WetGroundParams(water_height=1.2, noise_floor=0.2, byte_scale=True), rng_for(0))
    np.testing.assert_allclose(c.intensity, a.intensity, rtol=1e-6)
    # paper's literal floor constant 5 depends on the intensity scale (0–255 in the released code)
    q = WetGroundParams(water_height=1.0, noise_floor=0.2, mode="paper")
    assert len(wet_ground(unit, q, rng_for(0))) != len(wet_ground(byte, q, rng_for(0)))


def test_divide_by_angle_quirk_darkens_more(scene):
    base = dict(water_height=1.2, noise_floor=0.0)
    quirk = wet_ground(scene, WetGroundParams(divide_by_angle=True, **base), rng_for(0))
    plain = wet_ground(scene, WetGroundParams(divide_by_angle=False, **base), rng_for(0))
    # ground beyond ≈3 m is seen at θ > 1 rad, so t/θ < t
    assert quirk.intensity[:40_000].sum() < plain.intensity[:40_000].sum()


@pytest.mark.parametrize("kw", [dict(mode="nope"), dict(water_height=-1.0), dict(noise_floor=-0.1),
                                dict(noise_level="median"), dict(pavement_depth=0.0)])
def test_rejects_bad_params(kw):
    with pytest.raises(ValueError):
        WetGroundParams(**{"water_height": 1.0, **kw})


# ---- parity with the released script on a camera-FOV scan (issue 18) --------------------------------
def _fresnel_interface(cos_i: np.ndarray, n1: float, n2: float):
    """(R_s, T_s, R_p, T_p) of one interface, written out from the textbook Fresnel formulas."""
    sin_t = n1 / n2 * np.sqrt(1 - cos_i**2)
    cos_t = np.sqrt(1 - sin_t**2)
    rs = (n1 * cos_i - n2 * cos_t) / (n1 * cos_i + n2 * cos_t)
    ts = 2 * n1 * cos_i / (n1 * cos_i + n2 * cos_t)
    rp = (n2 * cos_i - n1 * cos_t) / (n2 * cos_i + n1 * cos_t)
    tp = 2 * n1 * cos_i / (n2 * cos_i + n1 * cos_t)
    k = (n2 * cos_t) / (n1 * cos_i)
    return rs**2, ts**2 * k, rp**2, tp**2 * k, cos_t


def reference_rule(xyz, inten, plane, water_height, noise_floor):
    """The released script's steps after the plane (power, noise level, film, dropping; Robo3D KITTI-C: raw [0,1]
    intensities, floor constant 5, linear estimation), as a plain NumPy/SciPy transcription of the
    spec: returns (ground mask, kept mask over the ground points, new intensities of the kept)."""
    ground = np.abs(xyz @ plane.w + plane.h) < 0.5
    p, i = xyz[ground], inten[ground]
    d = np.linalg.norm(p, axis=1)
    theta = np.arccos(p @ plane.w / d)
    n = i / np.cos(theta)
    a1, b1 = linregress(d, n)[:2]
    p_out = 15 * (a1 * d + b1)
    rho = n / p_out
    rho_c = np.clip(rho, 0.05, 1)
    _, ts_aw, _, tp_aw, cos_t = _fresnel_interface(np.cos(theta), N_AIR, N_WATER)
    rs_wa, ts_wa, rp_wa, tp_wa, _ = _fresnel_interface(cos_t, N_WATER, N_AIR)
    t = np.maximum(ts_aw * rho_c * ts_wa / (1 - rho_c * rs_wa), tp_aw * rho_c * tp_wa / (1 - rho_c * rp_wa))
    f = min(max(water_height / 1.2, 0.0), 1.0)
    tw = (1 - f) * rho + f * t / theta
    new = np.clip(p_out * np.cos(theta) * tw, 0, i)
    hist, xe, ye = np.histogram2d(d, n, bins=(50, 2555), range=((10, 70), (5, abs(n.max()))))
    hist[hist == 0] = len(p)
    lv = ye[np.argpartition(hist, 2, axis=1)[:, 0]]
    ok = lv > 5
    centres = (xe[:-1] + xe[1:]) / 2
    s, c = linregress(centres[ok], lv[ok])[:2] if ok.sum() > 3 else (a1, b1)
    keep = new > noise_floor * (s * d + c) * np.cos(theta)
    return ground, keep, new[keep]


@pytest.mark.parametrize("severity", [0, 1, 2])
def test_camera_fov_scan_changes_at_every_severity_as_the_released_script(severity):
    """A demo scan cropped to the camera FOV (KITTI object layout) has fewer than 1,000 ground-plane
    candidates; the old candidate gate returned it unchanged at every severity. Now the plane is fitted,
    and given that plane the kept points and intensities follow the released script's rule exactly."""
    frame = indexed(demo_fov_scan(1))
    n_cand = int(ground_candidates(frame.xyz).sum())
    assert 4 < n_cand < 1000
    p = ROBO3D[severity]
    out = wet_ground(frame, p, rng_for(severity))
    plane = fit_ground_plane(frame.xyz, rng_for(severity), squared_loss=True)  # the stage's own draw
    xyz = frame.xyz.astype(np.float64)
    ground, keep, new_i = reference_rule(xyz, frame.intensity.astype(np.float64), plane, p.water_height,
                                          p.noise_floor)
    assert ground.sum() >= 1000
    g_idx = np.flatnonzero(ground)
    expected_kept = np.sort(np.concatenate([np.flatnonzero(~ground), g_idx[keep]]))
    assert np.array_equal(out.labels["src"], expected_kept)
    assert len(out) < len(frame)  # the scan changes at every severity
    pos = np.searchsorted(out.labels["src"], g_idx[keep])
    np.testing.assert_allclose(out.intensity[pos], new_i.astype(np.float32), rtol=1e-6, atol=1e-7)


def test_camera_fov_scan_more_water_removes_more():
    frame = demo_fov_scan(1)
    removed = [len(frame) - len(wet_ground(frame, p, rng_for(0))) for p in ROBO3D]
    assert 0 < removed[0] < removed[1] < removed[2]


def test_camera_fov_mask_keeps_only_points_in_the_image():
    frame = generate_frame(1)
    m = camera_fov_mask(frame)
    assert 0.05 < m.mean() < 0.3  # KITTI's image sees ≈ 90° of the 360° sweep
    rect = frame.calib.lidar_to_rect(frame.xyz[m])
    uv = frame.calib.project_rect(rect)
    assert np.all(rect[:, 2] >= 0) and np.all((uv >= 0) & (uv < np.array(IMAGE_SIZE)))
    assert not m[frame.xyz[:, 0] < 0].any()  # nothing behind the car
