"""LISA core (stages/physics/lisa.py): Mie extinction against miepython and pylisa's constants, size
distributions, particle counts, the worked example, and the exact pruning of the Monte Carlo."""

from __future__ import annotations

import math

import miepython
import numpy as np
import pytest
from scipy import stats
from scipy.special import gammaincc, gammainccinv

from bench_build.stages.physics import lisa

RAIN_RATES = [5, 15, 50, 150, 500]
RAIN_ALPHA = [1.0105e-3, 2.0174e-3, 4.3043e-3, 8.5945e-3, 1.8322e-2]
RAIN_NTOT = [2364, 3068, 4055, 5202, 6807]
SNOW_RATES = [0.5, 1.5, 5, 15, 50]
SNOW_ALPHA_ICE = [9.757e-4, 1.8218e-3, 3.6117e-3, 6.5468e-3, 1.0015e-2]
SNOW_NTOT = [3269, 2291, 1500, 1001, 636]


def _model(
    rate=50.0,
    distribution="marshall_palmer",
    m=lisa.WATER_INDEX,
    rho_index=None,
    r_max=200.0,
    delta_r=0.09,
    wavelength=905.0,
    return_mode="strongest",
) -> lisa.LisaModel:
    return lisa.build_model(
        rate=rate,
        distribution=distribution,
        mie_index=m,
        rho_index=m if rho_index is None else rho_index,
        wavelength_nm=wavelength,
        r_max=r_max,
        r_min=1.5,
        divergence_mrad=3.0,
        d_start_mm=0.05,
        range_accuracy=delta_r,
        return_mode=return_mode,
    )


# ---- Mie --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("m", [lisa.WATER_INDEX, lisa.ICE_INDEX])
def test_vectorised_series_matches_miepython_on_sampled_grid_diameters(m):
    """The fast series on the full grid equals miepython.efficiencies at sampled grid diameters,
    from the small-x switch up to D = 10 mm (x ≈ 34,700)."""
    lam_mm = 905e-6
    table = lisa.q_ext_table(m, 905.0)
    idx = np.array([600, 700, 900, 1100, 1300, 1500, 1700, 1850, 1999])
    ref = miepython.efficiencies(m, lisa.D_GRID_MM[idx], lam_mm)[0]
    np.testing.assert_allclose(table[idx], ref, rtol=1e-9)
    small = np.array([0, 100, 300, 586])  # x < 2: taken from miepython itself
    np.testing.assert_allclose(table[small], miepython.efficiencies(m, lisa.D_GRID_MM[small], lam_mm)[0], rtol=1e-12)


def test_compiled_extinction_series_has_the_numpy_loops_bits():
    """The numba kernel does the NumPy loop's operations in its order: identical bits on the whole grid (what
    keeps LISA's shards byte-identical to builds made before it), for water and Li et al.'s ×100 snow index."""
    x = np.pi * lisa.D_GRID_MM / 905e-6
    xs = np.sort(x[x >= lisa._MIE_SMALL_X])[::-1]
    for m in (lisa.WATER_INDEX, lisa.LI_SNOW_INDEX):
        ref, _ = lisa._series_sorted(m, xs, False, compiled=False)
        out, _ = lisa._series_sorted(m, xs, False)
        np.testing.assert_array_equal(out, ref)


def test_backscatter_series_matches_miepython():
    x = np.array([2.5, 17.0, 140.0, 900.0])
    _, qb = lisa.mie_series(lisa.WATER_INDEX, x, back=True)
    ref = miepython.efficiencies_mx(lisa.WATER_INDEX, x)[2]
    np.testing.assert_allclose(qb, ref, rtol=1e-5)


def test_table_is_cached_and_read_only():
    a = lisa.q_ext_table(lisa.WATER_INDEX, 905.0)
    b = lisa.q_ext_table(lisa.WATER_INDEX, 905.0)
    assert a is b and not a.flags.writeable
    assert np.all(np.isfinite(a)) and np.all(a >= 0)


# ---- extinction and size distributions (Kilic et al. 2021) -------------------------------------
@pytest.mark.parametrize("rate, alpha, n_tot", list(zip(RAIN_RATES, RAIN_ALPHA, RAIN_NTOT, strict=True)))
def test_rain_reference_values(rate, alpha, n_tot):
    assert lisa.extinction(rate, "marshall_palmer", lisa.WATER_INDEX, 905.0) == pytest.approx(alpha, rel=5e-4)
    assert abs(lisa.number_density(rate, "marshall_palmer") - n_tot) <= 0.5


@pytest.mark.parametrize("rate, alpha, n_tot", list(zip(SNOW_RATES, SNOW_ALPHA_ICE, SNOW_NTOT, strict=True)))
def test_snow_reference_values(rate, alpha, n_tot):
    assert lisa.extinction(rate, "marshall_gunn", lisa.ICE_INDEX, 905.0) == pytest.approx(alpha, rel=5e-4)
    assert abs(lisa.number_density(rate, "marshall_gunn") - n_tot) <= 0.5


@pytest.mark.parametrize("rate", RAIN_RATES)
def test_large_drop_limit(rate):
    """Q_ext → 2 for large drops, so α ≈ π·1e-6·N₀/Λ³. Q_ext approaches 2 from above (edge term
    ∝ x^{-2/3}), so α is above the limit: by 0.17 % at 500 mm/h and 0.53 % at 5 mm/h (smaller drops)."""
    n0, lam = lisa.psd_parameters(rate, "marshall_palmer")
    ratio = lisa.extinction(rate, "marshall_palmer", lisa.WATER_INDEX, 905.0) / (math.pi * 1e-6 * n0 / lam**3)
    assert 1.0 < ratio < 1.006


def test_particle_reflectances():
    assert lisa.backscatter_reflectance(lisa.WATER_INDEX) == pytest.approx(0.019851, abs=1e-6)
    assert lisa.backscatter_reflectance(lisa.ICE_INDEX) == pytest.approx(0.01732, abs=1e-5)
    assert lisa.backscatter_reflectance(lisa.LI_SNOW_INDEX) == pytest.approx(0.9698, abs=1e-4)


def test_psd_rejects_bad_input():
    with pytest.raises(ValueError):
        lisa.psd_parameters(0.0, "marshall_palmer")
    with pytest.raises(ValueError):
        lisa.psd_parameters(1.0, "gamma")


# ---- worked example and counts ---------------------------------------------------------------------
def test_worked_example():
    """Rain 50 mm/h, R = 20 m, ρ = 0.5, r_max = 200 m (pylisa's defaults)."""
    m = _model(50.0)
    p0 = 0.5 * math.exp(-2 * m.alpha * 20.0) / 20.0**2
    snr = p0 / m.p_min
    assert p0 == pytest.approx(1.0523e-3, rel=1e-4)
    assert snr == pytest.approx(46.77, rel=1e-4)
    assert m.range_accuracy / math.sqrt(2 * snr) == pytest.approx(9.31e-3, rel=1e-3)
    assert 0.5 * math.exp(-2 * m.alpha * 20.0) == pytest.approx(0.42092, rel=1e-4)
    assert lisa.expected_counts(np.array([20.0]), m)[0] == pytest.approx(76.43, rel=1e-4)

    # the Monte Carlo on 20,000 copies of that return: kept ones carry exactly that intensity and σ
    n = 20_000
    xyz = np.tile([[12.0, 16.0, 0.0]], (n, 1))
    res = lisa.simulate(xyz, np.full(n, 0.5), m, np.random.default_rng(1))
    kept = res.outcome == lisa.KEPT
    assert kept.mean() > 0.99  # a water drop beats a 0.5 target at 20 m only if very close and big
    np.testing.assert_allclose(res.reflectance[kept], 0.42092, rtol=1e-4)
    dr = res.new_range[kept] - 20.0
    assert abs(dr.mean()) < 4 * 9.31e-3 / math.sqrt(kept.sum())
    assert dr.std() == pytest.approx(9.31e-3, rel=0.03)


def test_counts_are_floor_plus_bernoulli():
    expected = np.full(40_000, 76.43)
    c = lisa.draw_counts(expected, np.random.default_rng(0))
    assert set(np.unique(c)) == {76, 77}
    assert c.mean() == pytest.approx(76.43, abs=4 * math.sqrt(0.43 * 0.57 / len(c)))
    assert np.array_equal(lisa.expected_counts(np.array([0.0, 1.0, 1.5]), _model()), np.zeros(3))


def test_unpruned_path_draws_n_tot_v_particles_per_beam(monkeypatch):
    """Every particle of the process is drawn on the reference path: per beam the number
    (counted before the r > r_min cut) averages N_tot·V."""
    m = _model(150.0)
    drawn = []
    real = lisa._sample_complement

    def spy(seg, ranges, k, model, rng):
        drawn.append(len(seg))
        return real(seg, ranges, k, model, rng)

    real_cand = lisa._sample_candidates

    def spy_cand(seg, *args):
        drawn.append(len(seg))
        return real_cand(seg, *args)

    monkeypatch.setattr(lisa, "_sample_complement", spy)
    monkeypatch.setattr(lisa, "_sample_candidates", spy_cand)
    n = 3000
    xyz = np.tile([[8.0, 0.0, 0.0]], (n, 1))
    lisa.simulate(xyz, np.full(n, 0.3), m, np.random.default_rng(5), unpruned_rng=np.random.default_rng(9))
    assert len(drawn) == 2  # candidates, then the rest (one chunk)
    total = sum(drawn)
    expected = lisa.expected_counts(np.array([8.0]), m)[0] * n
    frac = expected / n - math.floor(expected / n)
    assert abs(total - expected) < 5 * math.sqrt(n * frac * (1 - frac)) + 1


# ---- Monte Carlo: pruning is exact ----------------------------------------------------------------
def _beams(n=600, seed=0, r_hi=40.0):
    g = np.random.default_rng(seed)
    r = g.uniform(0.5, r_hi, n)
    v = g.normal(size=(n, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    rho = g.uniform(0.0, 0.6, n)
    rho[:20] = 0.0
    return v * r[:, None], rho


@pytest.mark.parametrize(
    "model",
    [
        _model(500.0),
        _model(500.0, return_mode="last"),
        _model(
            50.0,
            "marshall_gunn",
            lisa.WATER_INDEX,
            rho_index=lisa.LI_SNOW_INDEX,
            r_max=120.0,
            delta_r=0.04,
            wavelength=903.0,
        ),
        _model(50.0, "marshall_gunn", lisa.WATER_INDEX, rho_index=lisa.LI_SNOW_INDEX, r_max=120.0, return_mode="last"),
    ],
    ids=["rain-strongest", "rain-last", "li-snow-strongest", "li-snow-last"],
)
def test_pruned_equals_unpruned(model):
    """The default path draws only the candidate particles; the reference path also draws every other
    particle of every beam and evaluates all of them. Outputs are identical."""
    xyz, rho = _beams()
    a = lisa.simulate(xyz, rho, model, np.random.default_rng(3))
    b = lisa.simulate(xyz, rho, model, np.random.default_rng(3), unpruned_rng=np.random.default_rng(4))
    assert np.array_equal(a.outcome, b.outcome)
    assert np.array_equal(a.new_range, b.new_range)
    assert np.array_equal(a.reflectance, b.reflectance)
    assert (a.outcome == lisa.SCATTERED).sum() > 10  # the comparison is not vacuous


def _naive(r_target, rho, model, n_beams, rng):
    """The paper's Monte Carlo verbatim for n_beams identical beams (strongest mode): every particle drawn."""
    expected = lisa.expected_counts(np.array([r_target]), model)[0]
    counts = lisa.draw_counts(np.full(n_beams, expected), rng)
    seg = np.repeat(np.arange(n_beams), counts)
    r = r_target * np.cbrt(rng.random(len(seg)))
    d = model.d_start_mm + rng.exponential(1 / model.lam, len(seg))
    keep = r > model.r_min
    seg, r, d = seg[keep], r[keep], d[keep]
    pj = model.rho_p * np.exp(-2 * model.alpha * r) * np.minimum((d / (1000 * model.tan_div * r)) ** 2, 1) / r**2
    best = np.zeros(n_beams)
    best_r = np.zeros(n_beams)
    starts = np.flatnonzero(np.r_[True, seg[1:] != seg[:-1]]) if len(seg) else np.zeros(0, int)
    seg_max = np.maximum.reduceat(pj, starts)
    best[seg[starts]] = seg_max
    at_max = pj == np.repeat(seg_max, np.diff(np.r_[starts, len(seg)]))
    best_r[seg[at_max]] = r[at_max]  # ties have probability 0
    p0 = rho * math.exp(-2 * model.alpha * r_target) / r_target**2
    scattered = (best > p0) & (best >= model.p_min)
    return scattered, best_r[scattered]


@pytest.mark.parametrize(
    "model, r_target, rho",
    [
        (_model(500.0), 30.0, 0.02),  # dark target lost in clear air; drops within a few m rescue it
        (_model(150.0), 12.0, 0.05),  # detectable target, drops sometimes win
        (_model(15.0, "marshall_gunn", lisa.WATER_INDEX, rho_index=lisa.LI_SNOW_INDEX, r_max=120.0), 25.0, 0.3),
    ],
    ids=["rain500-dark", "rain150", "li-snow15"],
)
def test_pruned_matches_direct_simulation_in_distribution(model, r_target, rho):
    n = 4000
    scat_naive, r_naive = _naive(r_target, rho, model, n, np.random.default_rng(11))
    xyz = np.tile([[0.0, r_target, 0.0]], (n, 1))
    res = lisa.simulate(xyz, np.full(n, rho), model, np.random.default_rng(12))
    scat = res.outcome == lisa.SCATTERED
    p = (scat.mean() + scat_naive.mean()) / 2
    assert 0.02 < p < 0.98
    assert abs(scat.mean() - scat_naive.mean()) < 4.5 * math.sqrt(2 * p * (1 - p) / n)
    assert stats.ks_2samp(res.new_range[scat], r_naive).pvalue > 1e-3


def test_clear_air_survival_rule():
    """With (almost) no rain a target survives iff R < r_max·√(ρ/0.9) (the P_min cut)."""
    m = _model(1e-12, r_max=120.0)  # Marshall–Palmer keeps N₀ = 8000: Λ must be huge to empty the air
    assert m.alpha < 1e-9 and m.n_tot < 1e-20
    g = np.random.default_rng(0)
    rho = g.uniform(0.005, 1.0, 5000)
    limit = 120.0 * np.sqrt(rho / 0.9)
    r = limit * np.where(g.random(5000) < 0.5, g.uniform(0.2, 0.99, 5000), g.uniform(1.01, 1.5, 5000))
    xyz = np.stack([r, np.zeros_like(r), np.zeros_like(r)], axis=1)
    res = lisa.simulate(xyz, rho, m, g)
    assert np.array_equal(res.outcome == lisa.KEPT, r < limit)
    assert np.all(res.outcome[r >= limit] == lisa.LOST)


def test_edge_ranges():
    m = _model(500.0)
    xyz = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.5, 0.0], [250.0, 0.0, 0.0], [0.0, 0.0, 5.0]])
    rho = np.array([0.5, 0.5, 0.5, 1.0, 0.0])
    res = lisa.simulate(xyz, rho, m, np.random.default_rng(0))
    assert res.outcome[0] == lisa.UNTOUCHED and res.new_range[0] == 0.0 and res.reflectance[0] == 0.5
    assert list(res.outcome[1:3]) == [lisa.KEPT, lisa.KEPT]  # inside r_min: no drops, bright target
    assert res.outcome[3] == lisa.LOST  # beyond 1.054·r_max even ρ = 1 is below P_min
    assert res.outcome[4] in (lisa.LOST, lisa.SCATTERED)  # ρ = 0 is never kept
    empty = lisa.simulate(np.zeros((0, 3)), np.zeros(0), m, np.random.default_rng(0))
    assert len(empty.outcome) == 0


# ---- the closed-form incomplete gamma of shape 3/2 and its inverse (the candidates' range law) ----------
def q32(x: np.ndarray) -> np.ndarray:
    """The compiled scalar `lisa._q32` (what the Monte Carlo calls) over an array."""
    return np.array([lisa._q32(float(v)) for v in x])


def test_q32_matches_scipy_gammaincc():
    """Q(3/2, x) = erfc(√x) + 2√(x/π)·e^{−x} is the regularised upper incomplete gamma function: it agrees with
    scipy's general implementation wherever that is not underflowing, and has its limits at 0 and ∞."""
    x = np.concatenate([[0.0, 1e-300, 1e-12, 0.5, 1.5, 700.0], 10 ** np.random.default_rng(0).uniform(-8, 3, 20000)])
    got, ref = q32(x), gammaincc(1.5, x)
    big = ref > 1e-290
    assert np.allclose(got[big], ref[big], rtol=1e-12, atol=0)
    assert np.all(np.abs(got - ref) <= 4e-15)  # a few ulp of 1
    assert q32(np.array([0.0]))[0] == 1.0
    assert q32(np.array([np.inf]))[0] == 0.0
    assert np.all(np.diff(q32(np.sort(x))) <= 1e-15)  # a survival function: non-increasing (up to rounding)


@pytest.mark.parametrize("lo, hi", [(-2, 0), (0, 1), (1, 2.84)])
def test_q32_inverse_matches_scipy_and_round_trips(lo, hi):
    """The inverse returns y with Q(3/2, y) = q to ~1e-13 relative (as scipy's gammainccinv), from any upper
    bound of the root (the far end of the beam in the stage), on small, moderate and huge y (up to 692: Q ≈ 1e-300)."""
    rng = np.random.default_rng(int(10 * hi))
    y = 10 ** rng.uniform(lo, hi, 5000)
    q = gammaincc(1.5, y)
    upper = y * rng.uniform(1.0, 100.0, len(y))
    got = np.array([lisa._q32_inverse(a, b) for a, b in zip(q, upper, strict=True)])
    assert np.allclose(got, gammainccinv(1.5, q), rtol=1e-12, atol=0)
    assert np.allclose(q32(got), q, rtol=1e-12, atol=0)


def test_q32_inverse_limits():
    """q = 0 → +∞ and q = 1 → 0 (scipy's convention, so the caller's clip to [lo, R] is unchanged); a root past the
    upper bound given by rounding is still found; q below Q's underflow is capped."""
    assert lisa._q32_inverse(0.0, 5.0) == math.inf
    assert lisa._q32_inverse(1.0, 5.0) == 0.0
    assert lisa._q32_inverse(1.0 - 1e-15, 5.0) == pytest.approx((lisa._GAMMA_5_2 * 1e-15) ** (2 / 3), rel=1e-3)
    q = gammaincc(1.5, 3.0)
    assert lisa._q32_inverse(q, 3.0 * (1 - 1e-12)) == pytest.approx(3.0, rel=1e-12)
    assert lisa._q32_inverse(1e-320, 1e4) == 700.0


def test_best_per_sorted_segment_equals_general():
    """The one-pass best-per-beam for sorted beam ids (the pruned path) equals the general lexsort (ties → first)."""
    rng = np.random.default_rng(3)
    seg = np.sort(rng.integers(0, 300, 4000))
    key = rng.integers(0, 5, 4000).astype(np.float64)  # many ties
    ids, idx = lisa._best_per_segment(seg, key)
    shuffled = rng.permutation(len(seg))  # the general path
    ids2, idx2 = lisa._best_per_segment(seg[shuffled], key[shuffled])
    assert np.array_equal(ids, ids2)
    assert np.array_equal(key[idx], key[shuffled][idx2])
    for s, i in zip(ids[:50], idx[:50], strict=True):
        members = np.flatnonzero(seg == s)
        assert i == members[np.argmax(key[members])]  # the first of the largest
