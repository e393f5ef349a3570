"""The snowfall simulator's compiled loops (`stages/kernels/beams.py`) against plain array code: the same values
bit for bit, ties included, whatever the order of the beams."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.stages.kernels import beams
from bench_build.stages.physics.snowfall import _GRID_STEP, _KEY_STRIDE, C_TAU, build_index


def _mod_cases():
    two_pi = 2 * np.pi
    edge = [0.0, -0.0, two_pi, -two_pi, 2 * two_pi, np.nextafter(two_pi, 0), np.nextafter(-two_pi, 0), 1e-300,
            -1e-300, 7 * two_pi + 0.1, -5 * two_pi - 0.1, 1e6, -1e6, np.pi, -np.pi]
    rng = np.random.default_rng(0)
    return np.concatenate([edge, rng.uniform(-20, 20, 2000), rng.uniform(-1e-3, 1e-3, 200)])


@pytest.mark.parametrize("m", [2 * np.pi, 1.5, -2 * np.pi])
def test_float_remainder_is_numpys_bit_for_bit(m):
    x = _mod_cases()
    got = np.array([beams._mod(v, m) for v in x])
    want = np.mod(x, m)
    assert np.array_equal(got.view(np.int64), want.view(np.int64))  # the sign of a zero too


def _pool(rng, n_sets=5):
    sets = []
    for _ in range(n_sets):
        n = int(rng.integers(1500, 3000))
        d = np.concatenate([rng.uniform(0.3, 3.0, n // 5), rng.uniform(3.0, 60.0, n - n // 5)])
        d[1::7] = d[::7][: len(d[1::7])]  # equal distances: ties the sort must keep in azimuth order
        phi = rng.uniform(0, 2 * np.pi, n)
        phi[:3] = [0.0, 2 * np.pi - 1e-6, 1e-7]  # flakes at the wrap
        r = rng.uniform(0.0005, 0.01, n)
        sets.append((d, phi, r))
    return build_index(sets)


def _wedges_plainly(index, set_id, phi, r0, half):
    """Every flake of the beam's set, checked one by one; sorted by distance, equal distances by band, then
    azimuth key (the order the bands are laid out in; the kernel orders a tie across the 2π wrap by its place
    in the wedge, which no tie here is)."""
    key, band_of = index.key, np.searchsorted(index.band_off, np.arange(len(index.key)), side="right") - 1
    sid = np.floor(key / _KEY_STRIDE).astype(np.int64)
    rows = []
    for i in range(len(phi)):
        j = np.flatnonzero(sid == set_id[i])
        d = index.dist[j]
        delta = np.mod(key[j] - _KEY_STRIDE * set_id[i] - phi[i] + np.pi, 2 * np.pi) - np.pi
        lo = np.maximum(delta - index.half_width[j], -half)
        hi = np.minimum(delta + index.half_width[j], half)
        ok = (d < r0[i]) & (hi > lo)
        order = np.lexsort((key[j][ok], band_of[j][ok], d[ok]))
        rows += [(i, dd, a, b) for dd, a, b in zip(d[ok][order], lo[ok][order], hi[ok][order], strict=True)]
    return [np.array(c) for c in zip(*rows, strict=True)]


def test_wedge_candidates_equal_a_plain_search_in_any_beam_order():
    rng = np.random.default_rng(3)
    index = _pool(rng)
    n = 3000
    set_id = rng.integers(0, index.n_sets, n)
    phi = np.sort(rng.uniform(0, 2 * np.pi, n))  # a scan's order (the galloping searches' good case) …
    phi[:4] = [0.0, 2 * np.pi - 1e-9, 1e-9, np.pi]
    r0 = rng.uniform(0.5, 70.0, n)
    half = 0.01  # a wide wedge, so beams meet several flakes

    def run(order):
        b, d, lo, hi = beams.wedge_candidates(index.key, index.dist, index.half_width, index.band_lo,
                                              index.band_wmax, index.band_off, index.band_start, index.band_count,
                                              set_id[order], phi[order], r0[order], half, _KEY_STRIDE)
        return order[b], d, lo, hi

    want = _wedges_plainly(index, set_id, phi, r0, half)
    assert len(want[0]) > 2 * n
    got = run(np.arange(n))
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w)
    shuffled = rng.permutation(n)  # … and an arbitrary one: each beam's list is the same
    b, *rest = run(shuffled)
    by_beam = np.argsort(b, kind="stable")
    for g, w in zip((b[by_beam], *(x[by_beam] for x in rest)), want, strict=True):
        assert np.array_equal(g, w)


def _peaks_densely(owner, r, coef, n_owner, sampling):
    """Every candidate bin evaluated: a lone element's 5 bins around its centre, a cluster's whole span, each
    bin's pulses added in element order; the largest sum per owner, the smallest bin among equal ones. (The
    sines of one array, as the simulator takes them: NumPy's SIMD sine of an array and its scalar one may differ
    in the last bit.)"""
    klo = np.ceil(np.round(10.0 * r, 9)).astype(np.int64)
    khi = np.floor(np.round(10.0 * (r + C_TAU), 9)).astype(np.int64)
    head = np.r_[True, (owner[1:] != owner[:-1]) | (klo[1:] > khi[:-1])]
    starts = np.flatnonzero(head)
    pairs = []  # (owner, bin, element)
    for g0, g1 in zip(starts, np.r_[starts[1:], len(r)], strict=True):
        if g1 - g0 == 1:
            k0 = int(np.round(10.0 * (r[g0] + C_TAU / 2)))
            ks = range(max(k0 - 2, klo[g0]), min(k0 + 2, khi[g0]) + 1)
        else:
            ks = range(klo[g0], khi[g0:g1].max() + 1)
        pairs += [(owner[g0], k, e) for k in ks for e in range(g0, g1) if klo[e] <= k <= khi[e]]
    o, k, e = (np.array(c) for c in zip(*pairs, strict=True))
    grid = np.round(k * _GRID_STEP, 2) if sampling else k / 10.0
    val = coef[e] * np.sin(np.pi * (grid - r[e]) / C_TAU) ** 2
    m = np.full(n_owner, -np.inf)
    kb = np.full(n_owner, beams.BIG)
    sums = {}
    for oo, kk, v in zip(o, k, val, strict=True):
        sums[oo, kk] = sums.get((oo, kk), 0.0) + v
    for (oo, kk), v in sums.items():
        if v > m[oo] or (v == m[oo] and kk < kb[oo]):
            m[oo], kb[oo] = v, kk
    return m, kb


def _elements(rng, n_owner):
    owner, r, coef = [], [], []
    for o in range(n_owner):
        n = int(rng.integers(1, 7))
        base = rng.uniform(1.0, 110.0)
        rr = np.sort(base + rng.choice([0.05, 0.5, 4.0]) * rng.uniform(0, 1, n))
        rr[1::3] = rr[::3][: len(rr[1::3])]  # equal ranges: pulses that coincide
        owner += [o] * n
        r += list(rr)
        coef += list(rng.uniform(0, 1, n) * rng.choice([1e-4, 1.0, 300.0], n))
    return np.array(owner), np.array(r), np.array(coef)


def _peaks_pruned(owner, r, coef, n_owner, sampling):
    elem, k, phase = beams.peak_bins(owner, r, coef, C_TAU, sampling, _GRID_STEP)
    return beams.peak_of_beams(owner, elem, k, np.sin(phase), coef, n_owner), len(elem)


@pytest.mark.parametrize("sampling", [True, False])
def test_pruned_peak_search_equals_every_bin_evaluated(sampling):
    rng = np.random.default_rng(5 + sampling)
    owner, r, coef = _elements(rng, 400)
    coef[::37] = 0.0  # elements without power
    (m, k), pairs = _peaks_pruned(owner, r, coef, 401, sampling)  # owner 400 has no element
    want_m, want_k = _peaks_densely(owner, r, coef, 401, sampling)
    assert np.array_equal(m, want_m) and np.array_equal(k, want_k)
    assert m[400] == -np.inf and k[400] == beams.BIG
    windows = np.floor(np.round(10.0 * (r + C_TAU), 9)) - np.ceil(np.round(10.0 * r, 9)) + 1
    assert pairs < windows.sum() / 4  # the bounds left most bins out


def test_ties_and_unprunable_groups_keep_the_first_maximum():
    r = np.array([10.0, 10.0, 30.0, 30.05, 50.0, 50.3])
    owner = np.array([0, 0, 1, 1, 2, 2])
    zero = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # every bin 0: the first candidate bin of each owner
    neg = np.array([-1.0, 2.0, -0.5, -0.5, 1.0, -3.0])  # no pruning: the whole span is evaluated
    for coef in (zero, neg):
        for sampling in (True, False):
            (m, k), _ = _peaks_pruned(owner, r, coef, 3, sampling)
            want_m, want_k = _peaks_densely(owner, r, coef, 3, sampling)
            assert np.array_equal(m, want_m) and np.array_equal(k, want_k)
    (m, k), _ = _peaks_pruned(owner, r, zero, 3, True)
    assert np.array_equal(k, np.ceil(np.round(10.0 * r[::2], 9)).astype(np.int64))


def _shares_by_einsum(a, b, half):
    """The array code the loop replaced: B beams with K candidates each, one-hot owners of the pieces, einsum."""
    nb, k = a.shape
    if k == 1:
        return (b - a) / (2 * half)
    bounds = np.sort(np.concatenate([a, b, np.full((nb, 1), -half), np.full((nb, 1), half)], axis=1), axis=1)
    mids = 0.5 * (bounds[:, 1:] + bounds[:, :-1])
    cover = (a[:, None, :] <= mids[:, :, None]) & (mids[:, :, None] <= b[:, None, :])
    onehot = (np.argmax(cover, axis=2)[:, :, None] == np.arange(k)) & cover.any(axis=2)[:, :, None]
    return np.einsum("npk,np->nk", onehot, np.diff(bounds, axis=1)) / (2 * half)


def test_occlusion_shares_equal_the_einsum_of_one_hot_owners():
    rng = np.random.default_rng(8)
    half = 1.5e-3
    beam, a, b, want = [], [], [], []
    for k in range(1, 14):  # many overlapping intervals: a candidate often owns 3 or more pieces
        centre = rng.uniform(-3 * half, 3 * half, (60, k))
        width = rng.uniform(0, 2 * half, (60, k)) * rng.choice([0.01, 0.3, 1.0], (60, k))
        lo, hi = np.maximum(centre - width, -half), np.minimum(centre + width, half)
        empty = hi <= lo
        lo[empty], hi[empty] = -0.5 * half, 0.3 * half
        want.append(_shares_by_einsum(lo, hi, half).ravel())
        beam.append(np.repeat(np.arange(60) + 60 * k, k))
        a.append(lo.ravel())
        b.append(hi.ravel())
    got = beams.occlusion_shares(np.concatenate(beam), np.concatenate(a), np.concatenate(b), half)
    assert np.array_equal(got, np.concatenate(want))


def test_merge_targets_is_the_stable_lexsort():
    rng = np.random.default_rng(9)
    slot = np.sort(rng.integers(0, 300, 2000))
    d = rng.choice(np.linspace(1.0, 40.0, 60), 2000)
    d = d[np.lexsort((d, slot))]
    r0 = rng.choice(np.linspace(1.0, 45.0, 90), 300)  # targets nearer than some of their flakes, and equal ones
    order = beams.merge_targets(slot, d, r0)
    assert np.array_equal(order, np.lexsort((np.concatenate([d, r0]), np.concatenate([slot, np.arange(300)]))))


def test_dart_throwing_rejects_as_the_sequential_rule():
    """Each disk from ``first`` on, in order, is rejected when it overlaps or touches a disk before it that is
    still accepted; a rejected disk rejects nothing (brute force over every earlier disk)."""
    rng = np.random.default_rng(12)
    n, first = 3000, 700
    xy = rng.uniform(-6.0, 6.0, (n, 2))
    r = rng.uniform(0.01, 0.15, n)
    xy[1], r[:2] = xy[0] + [0.75, 0.0], [0.5, 0.25]  # disks 0 and 1 touch: |c0 − c1| = r0 + r1 exactly
    accepted = rng.uniform(size=n) > 0.1
    accepted[:2] = True
    want = accepted.copy()
    for j in range(first, n):
        if want[j]:
            dist = np.linalg.norm(xy[:j] - xy[j], axis=1)
            want[j] = not np.any(want[:j] & (dist <= r[:j] + r[j]))
    got = accepted.copy()
    beams.reject_overlaps(xy, r, got, first)
    assert np.array_equal(got, want) and not want[first:].all() and want[first:].sum() > 100
    got = np.ones(2, dtype=bool)
    beams.reject_overlaps(xy[:2], r[:2], got, 0)
    assert got.tolist() == [True, False]


def test_windows_are_numpys_rounded_bins_including_exact_decimal_edges():
    """Each element's bins [⌈10 r⌉, ⌊10(r + cτ_H)⌋], 10·r rounded to 9 decimals first (10·20.0 is bin 200, not
    201), equal the NumPy formula the waveform's peak and its neighbours' signal both use."""
    rng = np.random.default_rng(3)
    r = np.concatenate([rng.uniform(0.0, 120.0, 5000), [20.0, 0.1 * 3, 7.7, 20.0 - 1e-12, 20.0 + 1e-7, 0.0]])
    klo, khi = beams.windows(r, C_TAU)
    assert np.array_equal(klo, np.ceil(np.round(10.0 * r, 9)).astype(np.int64))
    assert np.array_equal(khi, np.floor(np.round(10.0 * (r + C_TAU), 9)).astype(np.int64))
    assert klo[5000] == 200
