"""LISA core (Kilic et al. 2021), from the paper and its released pylisa code: Mie extinction, size distributions,
the per-return Monte Carlo and the constants of the two modes. The stages are ``rain_lisa.py`` and
``snow_lisa.py``; this module has no stage of its own.

Extinction
-----------------
    α = (π/4)·1e-6 ∫ D²·Q_ext(D)·N(D) dD   [m⁻¹]   (D in mm, N in m⁻³mm⁻¹)

integrated with the trapezoid rule over D = logspace(−5, 1, 2000) mm, size parameter x = πD/λ (the
paper-era convention, not upstream pylisa's πD/(2λ)). Q_ext depends only on (m, x), so one table of
Q_ext per (m, λ) serves every rate and distribution; the table and α are cached (functools.cache,
i.e. an unbounded lru_cache), so only the first call per (m, λ) in a process pays for the table.

Q_ext on the grid — exact, fast: the 2000-point grid reaches x ≈ 35,000 (35,000 multipole orders);
``miepython.efficiencies`` sums those in a Python loop per diameter (≈45 s per table). Here:
- x < 2 (587 diameters, negligible cost): ``miepython.efficiencies`` itself;
- x ≥ 2: the same Mie series (Bohren–Huffman), vectorised over all diameters at once and looped over
  the order n, for a real (non-absorbing) index m:
      ψ_n, χ_n upward (ψ_n = (2n−1)/x·ψ_{n−1} − ψ_{n−2}, likewise χ), D_n(mx) upward
      (D_n = 1/(n/z − D_{n−1}) − n/z; stable for real m > 1 because Wiscombe's truncation
      n ≤ x + 4.05·x^{1/3} + 2 — miepython's — stays below |mx| for the x where it is used), and
      Re a_n = u_a²/(u_a² + v_a²) with u = A·ψ_n − ψ_{n−1}, v = A·χ_n − χ_{n−1}, A = D_n/m + n/x
      (b_n: A = m·D_n + n/x): a lossless sphere's coefficients need real arithmetic only.
  The diameters are sorted by x so the still-active ones are a prefix. It agrees with miepython to
  ≤ 1e-10 relative for water and ice (checked in tests/stages/test_lisa.py on sampled diameters up to
  D = 10 mm) and takes ≈0.7 s per (m, λ) instead of ≈45 s.

Size distributions: rain Marshall–Palmer N = 8000·e^{−ΛD}, Λ = 4.1·R^{−0.21}; snow Marshall–Gunn
(water-equivalent rate) N₀ = 7600·R^{−0.87}, Λ = 2.55·R^{−0.48}. Particles above D_st:
N_tot = N₀·e^{−Λ·D_st}/Λ.

Monte Carlo per return, for every point with R = |p| > 0:
- beam diameter D_b(r) = r·tan θ (θ full divergence angle), cone volume V = (π/3)·R·(D_b(R)/2)²,
  particle count floor(N_tot·V) + Bernoulli(frac) (R ≤ r_min: none); ranges r = R·u^{1/3} kept if
  r > r_min; diameters D = D_st + Exp(mean 1/Λ);
- P_j = ρ_p·e^{−2αr}·min((D/D_b(r))², 1)/r² (D_b in mm), ρ_p = ((m−1)/(m+1))²;
  P_0 = ρ·e^{−2αR}/R²; P_min = 0.9/r_max²;
- "strongest": scattered iff max P_j > P_0 and max P_j ≥ P_min (range r*, intensity
  ρ_p·e^{−2αr*}·min((D*/D_b)², 1)); else kept iff P_0 ≥ P_min (range R + N(0, σ²),
  σ = ΔR/√(2·P_0/P_min), intensity ρ·e^{−2αR}); else lost. (The paper's "lost iff P_0 < P_min and
  max P_j < P_min, else scattered iff max P_j > P_0" is exactly this.)
- "last": kept iff P_0 ≥ P_min; else the farthest particle with P_j ≥ P_min; else lost. (The paper writes
  "P_0 > P_min" here and "P_0 < P_min ⇒ lost" in strongest mode; the two differ only on the null
  set P = P_min — both modes here use detectable ⇔ P ≥ P_min.)
The direction is preserved.

Exact pruning (the Monte Carlo never materialises the ~10⁷ particles of a KITTI scan)
---------------------------------------------------------------------------------------
Only particles with P_j ≥ t can change the outcome, t = max(P_0, P_min) (strongest; in last mode
t = P_min for beams whose target is not detectable, and no particle matters otherwise). Since
min(x, 1) ≤ x and e^{−2αr} ≤ 1, P_j ≥ t implies D ≥ k·r² with k = 1000·tan θ·√(t/ρ_p) (mm/m²).
Candidates are the particles of S = {r > r_min, D ≥ max(D_st, k·r²)}; a particle lies in S with
probability p = (3/R³)·∫_{r_min}^{R} r²·q(r) dr, q(r) = exp(−Λ·max(k·r² − D_st, 0)), in closed form
(regularised incomplete gamma Γ(3/2)), so each beam draws

    n ~ floor(N_tot·V) + Bernoulli(frac),  m ~ Binomial(n, p)

candidates, each with range from the density ∝ r²·q(r) on (r_min, R] (a cone part on (r_min, r₀],
r₀ = √(D_st/k), and a truncated Γ(3/2) in y = Λk·r² beyond, by inverse CDF) and, by the memoryless
exponential, D = max(D_st, k·r²) + Exp(mean 1/Λ). This is the particle process restricted to S
— the same joint law, not an approximation — and the other n − m particles provably have P_j < t.
`simulate(..., unpruned_rng=g)` also draws those n − m particles (from g, conditioned outside S) and
evaluates every particle; tests check its output is identical to the pruned one, and that both match a
direct simulation in distribution. Candidates are processed in chunks of ≤ 2M (memory bound).

RNG use, in this order: the Bernoulli uniforms (one per beam with R > r_min), the binomial thinning,
per chunk one uniform and one exponential per candidate, then one normal per kept point.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, replace
from functools import cache
from typing import ClassVar

import numba
import numpy as np

from bench_build.stages.frame import PointTag

# ---- constants (Kilic et al. 2021, pylisa) -------------------------------------------------------------
WATER_INDEX = 1.328
ICE_INDEX = 1.3031
LI_SNOW_INDEX = 130.31  # Li et al.'s deliberate ×100 (ρ_p = 0.9698)
D_GRID_MM = np.logspace(-5.0, 1.0, 2000)  # Mie integration grid, mm
P_MIN_FACTOR = 0.9  # P_min = 0.9 / r_max²
LI_ZERO_INTENSITY_FACTOR = 1.2  # Li: intensity-0 points get ρ = 1.2 / r_max²

#: outcome codes returned by `simulate`
LOST, SCATTERED, KEPT, UNTOUCHED = 0, 1, 2, 3

_MIE_SMALL_X = 2.0  # below: miepython.efficiencies directly (cheap), above: the vectorised series
_CHUNK_CANDIDATES = 2_000_000

DISTRIBUTIONS = ("marshall_palmer", "marshall_gunn")


# ---- size distributions ----------------------------------------------------------------------------
def psd_parameters(rate: float, distribution: str) -> tuple[float, float]:
    """(N₀ [m⁻³mm⁻¹], Λ [mm⁻¹]) of the exponential size distribution for a rate in mm/h (> 0)."""
    if not rate > 0:
        raise ValueError(f"LISA: the rate must be > 0 for a size distribution, got {rate}")
    if distribution == "marshall_palmer":
        return 8000.0, 4.1 * rate**-0.21
    if distribution == "marshall_gunn":
        return 7600.0 * rate**-0.87, 2.55 * rate**-0.48
    raise ValueError(f"LISA: unknown size distribution {distribution!r} (choose from {DISTRIBUTIONS})")


def number_density(rate: float, distribution: str, d_start_mm: float = 0.05) -> float:
    """N_tot = N₀·e^{−Λ·D_st}/Λ: particles per m³ with diameter above D_st."""
    n0, lam = psd_parameters(rate, distribution)
    return n0 * math.exp(-lam * d_start_mm) / lam


def backscatter_reflectance(m: float) -> float:
    """ρ_p = ((m − 1)/(m + 1))², the normal-incidence Fresnel reflectance of a particle."""
    return ((m - 1.0) / (m + 1.0)) ** 2


# ---- Mie efficiencies --------------------------------------------------------------------------------
def _n_terms(x: np.ndarray) -> np.ndarray:
    """Wiscombe's truncation, as miepython: int(x + 4.05·x^{1/3} + 2)."""
    return (x + 4.05 * np.cbrt(x) + 2.0).astype(np.int64)


@numba.njit(cache=True)
def _ext_series_compiled(m: float, inv_m: float, n_terms: np.ndarray, psi_m1: np.ndarray, chi_m1: np.ndarray,
                         psi: np.ndarray, chi: np.ndarray, d: np.ndarray, inv_x: np.ndarray,
                         inv_z: np.ndarray) -> np.ndarray:
    """`_series_sorted`'s extinction sum, one diameter at a time: the same operations in the same order
    (no fast-math, so no reassociation or fused multiply-add), hence the same bits as the NumPy loop — whose
    ≈ 35,000 orders of Python-level array ops for the largest drops cost ≈ 1 s per table, paid by every
    worker process that runs a LISA stage."""
    ext = np.zeros(len(n_terms))
    for i in range(len(n_terms)):
        pm, cm, p, c, dd, ix, iz = psi_m1[i], chi_m1[i], psi[i], chi[i], d[i], inv_x[i], inv_z[i]
        acc = 0.0
        for n in range(1, n_terms[i] + 1):
            f = (2 * n - 1) * ix
            pn = f * p - pm
            cn = f * c - cm
            pm, cm, p, c = p, c, pn, cn
            nz = n * iz
            dd = 1.0 / (nz - dd) - nz
            nx = n * ix
            ta = inv_m * dd + nx
            tb = m * dd + nx
            ga = (ta * c - cm) / (ta * p - pm)
            ga = ga * ga + 1.0
            gb = (tb * c - cm) / (tb * p - pm)
            gb = gb * gb + 1.0
            acc += (2 * n + 1) * (1.0 / ga + 1.0 / gb)
        ext[i] = acc
    return ext


def _series_sorted(m: float, xs: np.ndarray, back: bool, compiled: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Σ(2n+1)·Re(a_n + b_n) and Σ(2n+1)(−1)ⁿ(a_n − b_n) (complex; zeros unless ``back``) for
    descending size parameters ``xs`` and a real index m > 1 (see the module docstring). Without ``back``
    the compiled kernel does the sum (``compiled=False``: the NumPy loop, what tests compare it to)."""
    n_terms = _n_terms(xs)
    if compiled and not back and len(xs):
        z = m * xs
        ext = _ext_series_compiled(m, 1.0 / m, n_terms, np.cos(xs), -np.sin(xs), np.sin(xs), np.cos(xs),
                                   np.cos(z) / np.sin(z), 1.0 / xs, 1.0 / (m * xs))
        return ext, np.zeros(len(xs), dtype=np.complex128)
    nmax = int(n_terms[0])
    # active[n] = number of diameters whose series still runs at order n (a prefix: xs descends)
    active = np.searchsorted(-n_terms, -np.arange(nmax + 1), side="right")
    inv_x = 1.0 / xs
    inv_z = 1.0 / (m * xs)
    pc_m1 = np.stack([np.cos(xs), -np.sin(xs)])  # ψ_{n−1}, χ_{n−1}
    pc = np.stack([np.sin(xs), np.cos(xs)])  # ψ_n, χ_n (n = 0)
    z = m * xs
    d = np.cos(z) / np.sin(z)  # D_0(mx)
    mvec = np.array([[1.0 / m], [m]])  # rows: a_n, b_n
    ext = np.zeros_like(xs)
    bsum = np.zeros(len(xs), dtype=np.complex128)
    k = len(xs)
    sign = -1.0
    for n in range(1, nmax + 1):
        kn = int(active[n])
        if kn < k:
            k = kn
            pc_m1, pc, inv_x, inv_z, d = pc_m1[:, :k], pc[:, :k], inv_x[:k], inv_z[:k], d[:k]
        pc_new = (2 * n - 1) * inv_x * pc - pc_m1
        pc_m1, pc = pc, pc_new
        nz = n * inv_z
        d = 1.0 / (nz - d) - nz
        t = mvec * d + n * inv_x  # (2, k)
        uv = t[:, None, :] * pc - pc_m1  # (a|b, u|v, k)
        if back:
            u, v = uv[:, 0], uv[:, 1]
            inv = 1.0 / (u * u + v * v)
            re, im = u * u * inv, u * v * inv  # a_n = u(u + iv)/(u² + v²)
            ext[:k] += (2 * n + 1) * (re[0] + re[1])
            bsum[:k] += (sign * (2 * n + 1)) * ((re[0] - re[1]) + 1j * (im[0] - im[1]))
            sign = -sign
        else:
            g = uv[:, 1] / uv[:, 0]
            g *= g
            g += 1.0
            ext[:k] += (2 * n + 1) * (1.0 / g).sum(axis=0)
    return ext, bsum


def mie_series(m: float, x: np.ndarray, back: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(Q_ext, Q_back) of lossless spheres of real index m > 1 for size parameters x > 0 (Q_back is
    zeros unless ``back``). Vectorised Mie series; see the module docstring for validity."""
    x = np.asarray(x, dtype=np.float64)
    if not (np.isreal(m) and m > 1.0):
        raise ValueError(f"LISA Mie series: needs a real index m > 1, got {m}")
    order = np.argsort(-x, kind="stable")
    xs = x[order]
    ext, bsum = _series_sorted(float(m), xs, back)
    qext = np.empty_like(x)
    qback = np.zeros_like(x)
    qext[order] = 2.0 * ext / xs**2
    if back:
        qback[order] = np.abs(bsum) ** 2 / xs**2
    return qext, qback


@cache  # = lru_cache(maxsize=None)
def q_ext_table(m: float, wavelength_nm: float) -> np.ndarray:
    """Q_ext on D_GRID_MM for index m and wavelength λ (nm); read-only, cached per (m, λ)."""
    import miepython  # lazy: slow to import, and needed only once per (index, wavelength): the tables are cached

    m, lam_mm = float(m), float(wavelength_nm) * 1e-6
    x = np.pi * D_GRID_MM / lam_mm
    small = x < _MIE_SMALL_X
    qext = np.empty_like(x)
    qext[small] = miepython.efficiencies(m, D_GRID_MM[small], lam_mm, n_env=1.0)[0]
    qext[~small] = mie_series(m, x[~small])[0]
    qext.setflags(write=False)
    return qext


def _trapezoid(y: np.ndarray, x: np.ndarray) -> float:
    return float(0.5 * np.sum((y[1:] + y[:-1]) * np.diff(x)))


@cache  # = lru_cache(maxsize=None)
def extinction(rate: float, distribution: str, m: float, wavelength_nm: float) -> float:
    """α [m⁻¹] = (π/4)·1e-6 ∫ D²·Q_ext·N(D) dD over D_GRID_MM (trapezoid), cached."""
    n0, lam = psd_parameters(rate, distribution)
    integrand = D_GRID_MM**2 * q_ext_table(m, wavelength_nm) * n0 * np.exp(-lam * D_GRID_MM)
    return math.pi / 4.0 * 1e-6 * _trapezoid(integrand, D_GRID_MM)


# ---- Monte Carlo ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LisaModel:
    """Everything the Monte Carlo needs, resolved from a stage's parameters."""

    alpha: float  # extinction, m⁻¹
    n_tot: float  # particles per m³ above d_start_mm
    lam: float  # Λ of the size distribution, mm⁻¹
    rho_p: float  # particle reflectance ((m − 1)/(m + 1))²
    r_max: float  # m, sets P_min = 0.9/r_max²
    r_min: float  # m, no particles closer
    divergence_rad: float  # full beam divergence angle
    d_start_mm: float  # smallest simulated diameter
    range_accuracy: float  # ΔR, m
    return_mode: str = "strongest"  # "strongest" | "last"

    @property
    def p_min(self) -> float:
        return P_MIN_FACTOR / self.r_max**2

    @property
    def tan_div(self) -> float:
        return math.tan(self.divergence_rad)


@dataclass(frozen=True)
class LisaResult:
    """Per input point: outcome (LOST/SCATTERED/KEPT/UNTOUCHED), new range (m) and new reflectance."""

    outcome: np.ndarray
    new_range: np.ndarray
    reflectance: np.ndarray


def expected_counts(ranges: np.ndarray, model: LisaModel) -> np.ndarray:
    """N_tot·V per beam, V = (π/3)·R·(R·tanθ/2)²; 0 for R ≤ r_min."""
    r = np.asarray(ranges, dtype=np.float64)
    v = math.pi / 3.0 * r * (r * model.tan_div / 2.0) ** 2
    return np.where(r > model.r_min, model.n_tot * v, 0.0)


def draw_counts(expected: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """floor(N) + Bernoulli(frac N) per beam (as pylisa: not Poisson)."""
    base = np.floor(expected)
    return (base + (rng.random(len(expected)) < expected - base)).astype(np.int64)


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_GAMMA_3_2 = math.sqrt(math.pi) / 2.0  # Γ(3/2)
_GAMMA_5_2 = 1.5 * _GAMMA_3_2  # Γ(5/2)
_LOG_TWO_OVER_SQRT_PI = math.log(_TWO_OVER_SQRT_PI)


@numba.njit(cache=True)
def _q32(x):
    """Q(3/2, x) = erfc(√x) + 2·√(x/π)·e^{−x}: the regularised upper incomplete gamma function of shape 3/2 in
    closed form (two positive terms: no cancellation; ≈ 2 ulp of absolute error). +inf → 0."""
    if x == math.inf:
        return 0.0
    s = math.sqrt(x)
    return math.erfc(s) + _TWO_OVER_SQRT_PI * s * math.exp(-x)


@numba.njit(cache=True, error_model="numpy")
def _q32_inverse(q, upper):
    """y ≥ 0 with Q(3/2, y) = q, given ``upper`` ≥ y (Q(upper) ≤ q); q ≤ 0 → +inf, q ≥ 1 → 0.

    Halley's method on h(y) = log Q(y) − log q (h′ = −2√(y/π)·e^{−y}/Q) from a lower bound of the root:
    (Γ(5/2)·(1 − q))^{2/3} (as P(3/2, y) ≤ y^{3/2}/Γ(5/2)) for q > 1/2, else the solution of 2√(y/π)·e^{−y} = q
    (as Q(y) ≥ that term); 3 steps on average, ≤ 7 seen. Stops when a step moves y by at most 1e-14 of it (the
    cubic convergence then leaves only rounding error) or no longer shrinks (rounding noise). Where Q
    underflows (y ≳ 700, reached only for q < 1e-300) the answer is capped at 700."""
    if q <= 0.0:
        return math.inf
    if q >= 1.0:
        return 0.0
    log_q = math.log(q)
    if q > 0.5:
        y = (_GAMMA_5_2 * (1.0 - q)) ** (2.0 / 3.0)
    else:
        y = max(-log_q, 1.0)
        for _ in range(3):  # y = log(2/√π) + ½·log y − log q: a contraction for y ≥ 1
            y = max(_LOG_TWO_OVER_SQRT_PI + 0.5 * math.log(y) - log_q, 0.5)
    y = min(y, upper, 700.0)
    if not y > 0.0:
        return 0.0
    step = math.inf
    for _ in range(100):  # a bound, never reached (≤ 7 steps seen)
        s = math.sqrt(y)
        tail = _TWO_OVER_SQRT_PI * s * math.exp(-y)  # −Q′(y)
        qy = math.erfc(s) + tail  # Q(y), as `_q32`
        if qy <= 0.0:
            return y
        h = math.log(qy) - log_q
        h1 = -tail / qy
        h2 = h1 * (0.5 / y - 1.0 - h1)  # (Q² would underflow where Q < 1e-162)
        d = -2.0 * h * h1 / (2.0 * h1 * h1 - h * h2)  # Halley's step
        new = y + d
        if not new > 0.0:  # rounding past 0 from a root next to it
            new = 0.25 * y
        new = min(new, 700.0)
        if abs(new - y) <= 1e-14 * y or abs(d) >= step:  # converged, or steps no longer shrink (rounding)
            return new
        step = abs(d)
        y = new
    return y


@numba.njit(cache=True, error_model="numpy")
def _candidate_region(ranges, t, lam, r_min, d_st, tan_div, rho_p):
    """Per beam: k (mm/m²), the cone-part weight w1, the gamma-part weight w2, r₀, lower bound of the
    gamma part, and Q(3/2, ·) at both ends of it. p = 3(w1 + w2)/R³ is the candidate probability."""
    n = ranges.shape[0]
    k = np.empty(n)
    w1 = np.empty(n)
    w2 = np.empty(n)
    r0 = np.empty(n)
    lo2 = np.empty(n)
    q_lo = np.empty(n)
    q_hi = np.empty(n)
    c2 = math.exp(lam * d_st) * _GAMMA_3_2 / 2.0
    rm3 = r_min**3
    for i in range(n):
        r = ranges[i]
        ki = 1000.0 * tan_div * math.sqrt(t[i] / rho_p)
        r0i = math.sqrt(d_st / ki) if ki > 0 else math.inf
        b1 = min(r0i, r)
        v1 = (b1 * b1 * b1 - rm3) / 3.0 if b1 > r_min else 0.0
        a = lam * ki
        lo = max(r0i, r_min)
        ql = _q32(a * lo * lo)
        qh = _q32(a * r * r)
        v2 = c2 / (a * math.sqrt(a)) * (ql - qh) if r > lo else 0.0
        k[i] = ki
        w1[i] = v1 if math.isfinite(v1) else 0.0
        w2[i] = v2 if (math.isfinite(v2) and v2 > 0) else 0.0
        r0[i] = r0i
        lo2[i] = lo
        q_lo[i] = ql
        q_hi[i] = qh
    return k, w1, w2, r0, lo2, q_lo, q_hi


@numba.njit(cache=True, error_model="numpy")
def _gamma_part_ranges(sg, frac, q_lo, q_hi, k, lam, lo2, ranges):
    """Ranges of the gamma-part candidates (beams ``sg``, uniform ``frac`` in [0, 1]) by inverse CDF: y = Λk·r²
    with Q(3/2, y) = q_lo − frac·(q_lo − q_hi), r clipped to [lo2, R]."""
    r = np.empty(sg.shape[0])
    for i in range(sg.shape[0]):
        b = sg[i]
        a = lam * k[b]
        y = _q32_inverse(q_lo[b] - frac[i] * (q_lo[b] - q_hi[b]), a * ranges[b] * ranges[b])
        r[i] = min(max(math.sqrt(y / a), lo2[b]), ranges[b])
    return r


def _power(r, d, model):
    """P_j and the scattered reflectance ρ_p·e^{−2αr}·min((D/D_b)², 1) of particles (r m, D mm)."""
    db_mm = 1000.0 * model.tan_div * r
    refl = model.rho_p * np.exp(-2.0 * model.alpha * r) * np.minimum((d / db_mm) ** 2, 1.0)
    return refl / r**2, refl


def _sample_candidates(seg, ranges, k, w1, w2, r0, lo2, q_lo, q_hi, model, rng):
    """Ranges and diameters of candidates (segment ids ``seg``) from the law restricted to S."""
    u = rng.random(len(seg))
    e = rng.exponential(1.0 / model.lam, len(seg))
    w1s, w2s = w1[seg], w2[seg]
    uw = u * (w1s + w2s)
    cone = uw < w1s
    r = np.empty(len(seg))
    # cone part: density ∝ r² on (r_min, min(r0, R)]
    c = np.flatnonzero(cone)
    if len(c):
        b1 = np.minimum(r0[seg[c]], ranges[seg[c]])
        r[c] = np.cbrt(model.r_min**3 + uw[c] / w1s[c] * (b1**3 - model.r_min**3))
    # gamma part: y = Λk·r² ~ Γ(3/2) truncated to [Λk·lo², Λk·R²]
    g = np.flatnonzero(~cone)
    if len(g):
        sg = seg[g]
        frac = np.clip((uw[g] - w1s[g]) / w2s[g], 0.0, 1.0)
        r[g] = _gamma_part_ranges(sg, frac, q_lo, q_hi, k, model.lam, lo2, ranges)
    d = np.maximum(model.d_start_mm, k[seg] * r * r) + e
    return r, d


def _sample_complement(seg, ranges, k, model, rng):
    """Particles of the full law conditioned outside S (test path), by rejection."""
    r = np.empty(len(seg))
    d = np.empty(len(seg))
    todo = np.arange(len(seg))
    while len(todo):
        s = seg[todo]
        rr = ranges[s] * np.cbrt(rng.random(len(todo)))
        dd = model.d_start_mm + rng.exponential(1.0 / model.lam, len(todo))
        inside = (rr > model.r_min) & (dd >= np.maximum(model.d_start_mm, k[s] * rr * rr))
        r[todo[~inside]], d[todo[~inside]] = rr[~inside], dd[~inside]
        todo = todo[inside]
    return r, d


@numba.njit(cache=True)
def _best_per_sorted_segment(seg, key):
    """`_best_per_segment` for ``seg`` in non-decreasing order (the default path's candidates): one pass."""
    ids = np.empty(seg.shape[0], seg.dtype)
    idx = np.empty(seg.shape[0], np.int64)
    m = -1
    for i in range(seg.shape[0]):
        if m < 0 or seg[i] != ids[m]:
            m += 1
            ids[m] = seg[i]
            idx[m] = i
        elif key[i] > key[idx[m]]:
            idx[m] = i
    return ids[:m + 1], idx[:m + 1]


def _best_per_segment(seg, key):
    """For segments in ``seg`` (any order): the unique segment ids and the index of each one's
    largest ``key`` (ties: first)."""
    if len(seg) and (len(seg) == 1 or bool(np.all(seg[1:] >= seg[:-1]))):
        return _best_per_sorted_segment(seg, key)
    order = np.lexsort((-key, seg))
    s_sorted = seg[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = s_sorted[1:] != s_sorted[:-1]
    return s_sorted[first], order[first]


@numba.njit(cache=True, error_model="numpy")
def _returns(xyz, rho, two_alpha):
    """Per point (any float dtype, any strides): range R, attenuation e^{−2αR} and P_0 = ρ·e^{−2αR}/R² (0 at R = 0)."""
    n = xyz.shape[0]
    ranges = np.empty(n)
    att = np.empty(n)
    p0 = np.empty(n)
    for i in range(n):
        x = np.float64(xyz[i, 0])
        y = np.float64(xyz[i, 1])
        z = np.float64(xyz[i, 2])
        r = math.sqrt(x * x + y * y + z * z)
        e = math.exp(-two_alpha * r)
        ranges[i] = r
        att[i] = e
        p0[i] = rho[i] * e / (r * r) if r > 0 else 0.0
    return ranges, att, p0


@numba.njit(cache=True)
def _outcomes(ranges, p0, p_min, has_scatter, strongest):
    """Outcome per point (see `simulate`) and the number of KEPT points."""
    n = ranges.shape[0]
    outcome = np.empty(n, np.int8)
    n_kept = 0
    for i in range(n):
        if not ranges[i] > 0:
            outcome[i] = UNTOUCHED
            continue
        detectable = p0[i] >= p_min
        if strongest:
            scattered = has_scatter[i]
            kept = detectable and not scattered
        else:
            kept = detectable
            scattered = has_scatter[i] and not kept
        if kept:
            outcome[i] = KEPT
            n_kept += 1
        elif scattered:
            outcome[i] = SCATTERED
        else:
            outcome[i] = LOST
    return outcome, n_kept


@numba.njit(cache=True, error_model="numpy")
def _new_returns(outcome, ranges, att, p0, rho, best_r, best_refl, p_min, range_accuracy, noise):
    """New range and reflectance per point: KEPT R + σ·noise (the KEPT points' normal draws in order),
    σ = ΔR/√(2·P_0/P_min), ρ·e^{−2αR}; SCATTERED the best particle's; LOST 0; UNTOUCHED as given."""
    n = ranges.shape[0]
    new_range = np.empty(n)
    refl = np.empty(n)
    j = 0
    for i in range(n):
        o = outcome[i]
        if o == KEPT:
            sigma = range_accuracy / math.sqrt(2.0 * p0[i] / p_min)
            new_range[i] = ranges[i] + sigma * noise[j]
            refl[i] = rho[i] * att[i]
            j += 1
        elif o == SCATTERED:
            new_range[i] = best_r[i]
            refl[i] = best_refl[i]
        elif o == LOST:
            new_range[i] = 0.0
            refl[i] = 0.0
        else:
            new_range[i] = ranges[i]
            refl[i] = rho[i]
    return new_range, refl


def simulate(
    xyz: np.ndarray,
    reflectance: np.ndarray,
    model: LisaModel,
    rng: np.random.Generator,
    *,
    unpruned_rng: np.random.Generator | None = None,
) -> LisaResult:
    """Run the LISA Monte Carlo on N points (xyz in m, reflectance ρ ≥ 0 already in [0, 1] units).

    Points with R = 0 have no direction and are UNTOUCHED. With ``unpruned_rng`` every particle of
    every beam is drawn (the non-candidates from that generator) and evaluated — a slow reference
    path whose output is identical to the default one.
    """
    return _simulate(xyz, reflectance, model, rng, unpruned_rng)[0]


def _simulate(xyz, reflectance, model, rng, unpruned_rng):
    """`simulate` and the ranges it computed (xyz: any float dtype and strides)."""
    xyz = np.asarray(xyz)
    if xyz.dtype.kind != "f":
        xyz = xyz.astype(np.float64)
    rho = np.ascontiguousarray(reflectance, dtype=np.float64)
    n = len(xyz)
    p_min = model.p_min
    ranges, att, p0 = _returns(xyz, rho, 2.0 * model.alpha)
    valid = ranges > 0

    # ---- particles --------------------------------------------------------------------------------
    best_r = np.zeros(n)
    best_refl = np.zeros(n)
    has_scatter = np.zeros(n, dtype=bool)
    beams = np.flatnonzero(valid & (ranges > model.r_min))
    if len(beams) and model.n_tot > 0 and model.rho_p > 0:
        counts = draw_counts(expected_counts(ranges[beams], model), rng)
        if model.return_mode == "strongest":
            t = np.maximum(p0[beams], p_min)
            relevant = np.ones(len(beams), dtype=bool)
        else:  # last: particles matter only where the target is not detectable
            t = np.full(len(beams), p_min)
            relevant = p0[beams] < p_min
        rb = ranges[beams]
        p0b = p0[beams]
        k, w1, w2, r0, lo2, q_lo, q_hi = _candidate_region(rb, t, model.lam, model.r_min, model.d_start_mm,
                                                            model.tan_div, model.rho_p)
        p = np.clip(3.0 * (w1 + w2) / rb**3, 0.0, 1.0)
        p = np.where(relevant, p, 0.0)
        n_cand = rng.binomial(counts, p)
        # chunks of consecutive beams with at most _CHUNK_CANDIDATES candidates (≥ 1 beam each)
        csum = np.cumsum(n_cand)
        start = 0
        while start < len(beams):
            base = csum[start - 1] if start else 0
            stop = max(int(np.searchsorted(csum, base + _CHUNK_CANDIDATES, side="right")), start + 1)
            local = np.arange(start, stop)
            seg = np.repeat(local, n_cand[start:stop])
            r, d = _sample_candidates(seg, rb, k, w1, w2, r0, lo2, q_lo, q_hi, model, rng)
            if unpruned_rng is not None:
                rest = np.repeat(local, counts[start:stop] - n_cand[start:stop])
                rr, dd = _sample_complement(rest, rb, k, model, unpruned_rng)
                seg, r, d = np.concatenate([seg, rest]), np.concatenate([r, rr]), np.concatenate([d, dd])
                keep = r > model.r_min
                seg, r, d = seg[keep], r[keep], d[keep]
            pj, refl = _power(r, d, model)
            if model.return_mode == "strongest":
                ok = (pj > p0b[seg]) & (pj >= p_min)
                key = pj
            else:
                ok = (pj >= p_min) & relevant[seg]
                key = r
            ok &= np.isfinite(pj)
            if ok.any():
                segs, idx = _best_per_segment(seg[ok], key[ok])
                pts = beams[segs]
                has_scatter[pts] = True
                best_r[pts] = r[ok][idx]
                best_refl[pts] = refl[ok][idx]
            start = stop

    # ---- outcomes ---------------------------------------------------------------------------------
    outcome, n_kept = _outcomes(ranges, p0, p_min, has_scatter, model.return_mode == "strongest")
    noise = rng.standard_normal(n_kept)
    new_range, refl_out = _new_returns(outcome, ranges, att, p0, rho, best_r, best_refl, p_min,
                                       model.range_accuracy, noise)
    return LisaResult(outcome=outcome, new_range=new_range, reflectance=refl_out), ranges


@numba.njit(cache=True, error_model="numpy")
def _frame_rows(points, i_col, outcome, new_range, ranges, refl, scale, tags, tag_scatter, tag_attenuated,
                keep_lost):
    """The output rows: moved points (all but UNTOUCHED) scaled along their ray to the new range (computed in
    float64, stored float32), intensity = reflectance × scale; tags KEPT/LOST → ``tag_attenuated``, SCATTERED →
    ``tag_scatter``; LOST rows dropped unless ``keep_lost`` (then x = y = z = intensity = 0). Returns
    (points, tags, kept-row mask)."""
    n, c = points.shape
    keep = np.empty(n, np.bool_)
    m = 0
    for i in range(n):
        keep[i] = keep_lost or outcome[i] != LOST
        m += keep[i]
    out = np.empty((m, c), np.float32)
    out_tags = np.empty(m, np.uint8)
    j = 0
    for i in range(n):
        if not keep[i]:
            continue
        o = outcome[i]
        for f in range(c):
            out[j, f] = points[i, f]
        if o != UNTOUCHED:
            factor = new_range[i] / ranges[i]
            for f in range(3):
                out[j, f] = np.float32(np.float64(points[i, f]) * factor)
            out[j, i_col] = np.float32(refl[i] * scale)
        out_tags[j] = tag_scatter if o == SCATTERED else (tag_attenuated if o != UNTOUCHED else tags[i])
        j += 1
    return out, out_tags, keep


# ---- frame wrapper shared by rain_lisa and snow_lisa -------------------------------------------------
def apply_to_frame(
    frame,
    model: LisaModel,
    rng: np.random.Generator,
    *,
    scatter_tag: int,
    zero_intensity_rho: bool,
    keep_lost_rows: bool,
    unpruned_rng: np.random.Generator | None = None,
):
    """Run `simulate` on a `Frame` and build the output frame (see the stage modules for the rules).

    ρ = intensity / frame.intensity_max (negative values count as 0); outputs are written back in the
    source scale. Kept points → ATTENUATED, scattered → ``scatter_tag``, R = 0 rows untouched; lost
    points are dropped, or with ``keep_lost_rows`` become x = y = z = intensity = 0 rows tagged
    ATTENUATED (their extra columns, e.g. ring, and other labels are kept).
    """
    if len(frame) == 0:
        return frame
    scale = frame.intensity_max
    i_col = frame.fields.index("intensity")
    intensity = frame.points[:, i_col]
    rho = np.maximum(intensity.astype(np.float64) / scale, 0.0)
    if zero_intensity_rho:
        rho = np.where(intensity == 0, LI_ZERO_INTENSITY_FACTOR / model.r_max**2, rho)
    res, ranges = _simulate(frame.points[:, :3], rho, model, rng, unpruned_rng)
    points, tags, keep = _frame_rows(frame.points, i_col, res.outcome, res.new_range, ranges, res.reflectance,
                                     float(scale), frame.point_tag, int(scatter_tag), int(PointTag.ATTENUATED),
                                     keep_lost_rows)
    labels = {k: v if keep_lost_rows else v[keep] for k, v in frame.labels.items()}
    labels["point_tag"] = tags
    return replace(frame, points=points, labels=labels)


# ---- parameter resolution shared by the stages ---------------------------------------------------------
MODES = ("physical", "paper")
RETURN_MODES = ("strongest", "last")


def validate_common(name: str, p) -> None:
    """Checks shared by RainLisaParams and SnowLisaParams (raise ValueError naming the stage)."""
    if not (isinstance(p.rate, int | float) and math.isfinite(p.rate) and p.rate >= 0):
        raise ValueError(f"{name}: rate must be a finite number ≥ 0 mm/h, got {p.rate!r}")
    if p.mode not in MODES:
        raise ValueError(f"{name}: mode must be one of {MODES}, got {p.mode!r}")
    if p.return_mode not in RETURN_MODES:
        raise ValueError(f"{name}: return_mode must be one of {RETURN_MODES}, got {p.return_mode!r}")
    checks = {
        "wavelength_nm": lambda v: v > 0,
        "r_max": lambda v: v > 0,
        "r_min": lambda v: v >= 0,
        "divergence_mrad": lambda v: 0 < v < 1000 * math.pi / 2,
        "d_start_mm": lambda v: v >= 0,
        "range_accuracy": lambda v: v >= 0,
        "refractive_index": lambda v: v > 1,
    }
    for field_name, ok in checks.items():
        v = getattr(p, field_name)
        if v is not None and not (isinstance(v, int | float) and not isinstance(v, bool) and ok(v)):
            raise ValueError(f"{name}: invalid {field_name} = {v!r}")


def resolve(p, defaults: dict[str, dict[str, object]]) -> dict[str, object]:
    """Every field of params ``p`` with None replaced by the default of ``p.mode``."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(p):
        v = getattr(p, f.name)
        if v is None:
            v = defaults[p.mode][f.name]
        out[f.name] = v
    return out


def build_model(
    *,
    rate: float,
    distribution: str,
    mie_index: float,
    rho_index: float,
    wavelength_nm: float,
    r_max: float,
    r_min: float,
    divergence_mrad: float,
    d_start_mm: float,
    range_accuracy: float,
    return_mode: str,
) -> LisaModel:
    """The Monte Carlo model for a rate > 0: α from the (cached) Mie table of ``mie_index``, ρ_p from
    ``rho_index`` (they differ only in Li's snow)."""
    _, lam = psd_parameters(rate, distribution)
    return LisaModel(
        alpha=extinction(float(rate), distribution, float(mie_index), float(wavelength_nm)),
        n_tot=number_density(rate, distribution, d_start_mm),
        lam=lam,
        rho_p=backscatter_reflectance(rho_index),
        r_max=float(r_max),
        r_min=float(r_min),
        divergence_rad=float(divergence_mrad) * 1e-3,
        d_start_mm=float(d_start_mm),
        range_accuracy=float(range_accuracy),
        return_mode=return_mode,
    )


def model_from_params(p, distribution: str, *, mie_index: float | None = None) -> LisaModel:
    """`build_model` from a rain/snow params dataclass (its None fields resolved by its mode).

    ``mie_index`` overrides the refractive index of the Mie table (Li computes snow's α from the
    water table); ρ_p always comes from the params' own ``refractive_index``."""
    c = p.resolved()
    index = float(c["refractive_index"])
    return build_model(
        rate=float(p.rate),
        distribution=distribution,
        mie_index=index if mie_index is None else float(mie_index),
        rho_index=index,
        wavelength_nm=float(c["wavelength_nm"]),
        r_max=float(c["r_max"]),
        r_min=float(c["r_min"]),
        divergence_mrad=float(c["divergence_mrad"]),
        d_start_mm=float(c["d_start_mm"]),
        range_accuracy=float(c["range_accuracy"]),
        return_mode=p.return_mode,
    )


def apply_stage(frame, p, rng: np.random.Generator, model_for, scatter_tag) -> object:
    """The body of the rain/snow stages: identity at rate 0 or on an empty scan, else the Monte Carlo
    with the mode's row handling (``zero_intensity_rho``, ``keep_lost_rows``)."""
    if p.rate == 0 or len(frame) == 0:
        return frame
    c = p.resolved()
    return apply_to_frame(frame, model_for(p), rng, scatter_tag=scatter_tag,
                          zero_intensity_rho=bool(c["zero_intensity_rho"]), keep_lost_rows=bool(c["keep_lost_rows"]))


@dataclass(frozen=True)
class LisaParams:
    """Fields shared by `rain_lisa` and `snow_lisa`; None fields take the defaults of ``mode`` (each stage's
    DEFAULTS table). Subclasses set NAME and DEFAULTS and may add fields."""

    rate: float  # mm/h (water equivalent for snow); 0 = identity
    mode: str = "physical"  # "physical" | "paper"
    return_mode: str = "strongest"  # "strongest" | "last"
    wavelength_nm: float | None = None
    r_max: float | None = None
    r_min: float = 1.5  # m
    divergence_mrad: float = 3.0  # full angle
    d_start_mm: float = 0.05
    range_accuracy: float | None = None
    refractive_index: float | None = None
    zero_intensity_rho: bool | None = None
    keep_lost_rows: bool | None = None

    NAME: ClassVar[str] = "lisa"
    DEFAULTS: ClassVar[dict[str, dict[str, object]]] = {}

    def __post_init__(self) -> None:
        validate_common(self.NAME, self)

    def resolved(self) -> dict[str, object]:
        """Every field, with None replaced by the default of mode."""
        return resolve(self, self.DEFAULTS)
