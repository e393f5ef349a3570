"""The loops of the snowfall simulator (`bench_build.stages.physics.snowfall`), compiled with numba.

`reject_overlaps` applies dart throwing's rule to a batch of flakes; `wedge_candidates` finds, for every beam, the
snowflakes in its wedge nearer than its target, already sorted by distance; `occlusion_shares` splits each wedge
among them; `peak_bins` and `peak_of_beams` find the peak of each beam's summed waveform. They compute the same
bytes as the array code they replaced (a KD-tree's pairs, a `searchsorted` per distance band, `lexsort`, `einsum`,
`bincount`): the same IEEE operations in the same order, `np.mod`'s rule for the float remainder, ties resolved
the same way. They call no transcendental function: the waveform's sines are evaluated by NumPy between
`peak_bins` and `peak_of_beams`, so they are NumPy's on every machine (numba's `sin` is glibc's, NumPy's may be a
SIMD one).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from bench_build.stages.kernels.buckets import counting_sort

BIG = np.iinfo(np.int64).max  # bin of a beam without a peak
_MIN_CELL = 0.25  # m: grid cell of `reject_overlaps` at least this (≈ 400 k cells over the 80 m disk)


@numba.njit(cache=True)
def reject_overlaps(xy, r, accepted, first):
    """Dart throwing's rule for disks ``first`` … n − 1 (centres ``xy``, radii ``r``), decided one after another
    in that order: a disk still ``accepted`` is rejected if it overlaps or touches an accepted disk before it,
    |c_i − c_j| = √(dx² + dy²) ≤ r_i + r_j (earlier disks are final when a later one is decided, so a disk
    rejected itself rejects nothing). ``accepted`` is updated in place; disks before ``first`` are not revisited.
    Neighbours from a uniform grid with cells at least 2·max r wide."""
    n = xy.shape[0]
    if n == 0:
        return
    cell = _MIN_CELL
    x0, y0, x1, y1 = xy[0, 0], xy[0, 1], xy[0, 0], xy[0, 1]
    for i in range(n):
        cell = max(cell, 2.0 * r[i])
        x0, x1 = min(x0, xy[i, 0]), max(x1, xy[i, 0])
        y0, y1 = min(y0, xy[i, 1]), max(y1, xy[i, 1])
    nx = int((x1 - x0) / cell) + 1
    ny = int((y1 - y0) / cell) + 1
    key = np.empty(n, np.int64)
    src = np.empty(n, np.int64)
    for i in range(n):
        key[i] = int((xy[i, 0] - x0) / cell) * ny + int((xy[i, 1] - y0) / cell)
        src[i] = i
    start, order = counting_sort(key, nx * ny, src)  # stable: each cell's disks in index order
    for j in range(first, n):
        if accepted[j] and _meets_accepted(xy, r, accepted, start, order, key[j] // ny, key[j] % ny, nx, ny, j):
            accepted[j] = False


@numba.njit(cache=True)
def _meets_accepted(xy, r, accepted, start, order, cx, cy, nx, ny, j):
    """Whether disk j overlaps or touches an accepted disk i < j of the 3 × 3 cells around its cell (cx, cy)."""
    for gx in range(max(cx - 1, 0), min(cx + 1, nx - 1) + 1):
        for gy in range(max(cy - 1, 0), min(cy + 1, ny - 1) + 1):
            c = gx * ny + gy
            for t in range(start[c], start[c + 1]):
                i = order[t]
                if i >= j:
                    break
                dx, dy = xy[i, 0] - xy[j, 0], xy[i, 1] - xy[j, 1]
                if accepted[i] and math.sqrt(dx * dx + dy * dy) <= r[i] + r[j]:
                    return True
    return False


@numba.njit(cache=True)
def _mod(x, m):
    """``np.mod(x, m)`` for floats, bit for bit: fmod, then the divisor's sign. For m > 0 and x within one period
    of [0, m) the result needs no fmod (a libm call): fmod(x, m) is x, or x − m exactly (Sterbenz)."""
    if m > 0.0:
        if 0.0 < x < m:
            return x
        if -m < x < 0.0:
            return x + m
        if m <= x < 2.0 * m:
            return x - m
    r = np.fmod(x, m)
    if r != 0.0:
        if (m < 0.0) != (r < 0.0):
            r += m
    else:
        r = math.copysign(0.0, m)
    return r


@numba.njit(cache=True)
def _first_at_least(keys, lo, hi, v, strict):
    """First index i in [lo, hi) with keys[i] ≥ v (> v when ``strict``), else hi (keys sorted)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < v or (strict and keys[mid] == v):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def _first_at_least_near(keys, lo, hi, v, strict, hint):
    """`_first_at_least`, galloping from ``hint`` (the last answer for the same set and band: a scan's next beam
    usually looks a few flakes further along), so a query costs O(log distance) instead of O(log n)."""
    if hint < hi and (keys[hint] < v or (strict and keys[hint] == v)):  # the answer is after hint
        step = 1
        while hint + step < hi and (keys[hint + step] < v or (strict and keys[hint + step] == v)):
            hint += step
            step *= 2
        return _first_at_least(keys, hint + 1, min(hint + step, hi), v, strict)
    top = min(hint, hi)  # the answer is at most top
    step = 1
    while top - step >= lo and not (keys[top - step] < v or (strict and keys[top - step] == v)):
        top -= step
        step *= 2
    return _first_at_least(keys, max(top - step + 1, lo), top, v, strict)


@numba.njit(cache=True)
def _resized(a, n, size):
    """A new array of ``size`` holding a[:n] (loops: numba compiles slice assignment slowly, ≈ 3 s)."""
    out = np.empty(size, a.dtype)
    for t in range(n):
        out[t] = a[t]
    return out


@numba.njit(cache=True)
def wedge_candidates(keys, dist, half_width, band_lo, band_wmax, band_off, band_start, band_count,
                     set_id, phi, r0, half, stride):
    """(beam, d, a, b) of every flake nearer than its beam's R₀ whose interval clipped to the wedge, [a, b] ⊂
    [−half, half] (angles relative to the beam's azimuth), is not empty; sorted by beam, then distance (ties
    in band order, then in azimuth order from the start of the beam's window, which may wrap at 2π).

    Flakes come in bands (row ``i`` of ``band_start``/``band_count``, elements from ``band_off[i]``), each sorted
    by ``key = stride·set + φ``; the last row is the band of wide flakes, which every beam of the set checks.
    A beam searches band i only when R₀ > ``band_lo[i]``, over the azimuths within half + ``band_wmax[i]``."""
    two_pi = 2 * np.pi
    n_search = band_lo.shape[0]
    wide = n_search
    cap = max(1024, 2 * phi.shape[0])
    beam = np.empty(cap, np.int64)
    ds = np.empty(cap)
    las = np.empty(cap)
    lbs = np.empty(cap)
    n = 0
    hint = np.empty(band_start.shape, np.int64)  # per band and set: where the last search of that set ended
    for band in range(band_start.shape[0]):
        for s in range(band_start.shape[1]):
            hint[band, s] = band_off[band] + band_start[band, s]
    for i in range(phi.shape[0]):
        s = set_id[i]
        p = phi[i]
        r = r0[i]
        base = stride * s
        first = n
        for band in range(n_search + 1):
            cnt = band_count[band, s]
            if cnt == 0 or (band < wide and not r > band_lo[band]):
                continue
            st = band_off[band] + band_start[band, s]
            if band == wide:
                i0 = 0
                c = cnt
            else:  # the flakes whose azimuth is within half + wmax of the beam's (inline: a helper call cost 10–25 %)
                win = half + band_wmax[band]
                lo_a = p - win
                hi_a = p + win
                h = _first_at_least_near(keys, st, st + cnt, base + _mod(lo_a, two_pi), False, hint[band, s])
                hint[band, s] = h
                i0 = min(h - st, cnt)
                v_hi = base + _mod(hi_a, two_pi)
                if lo_a < 0 or hi_a >= two_pi:  # the wedge wraps: the flakes from i0 to the end, then from 0
                    i1 = min(_first_at_least_near(keys, st, st + cnt, v_hi, True, h) - st, cnt)
                    c = min(max(cnt - i0 + i1, 0), cnt)
                else:  # the few flakes from h up to v_hi (keys before h are below v_lo ≤ v_hi)
                    e = h
                    while e < st + cnt and not keys[e] > v_hi:
                        e += 1
                    c = e - h
            for t in range(c):
                j = st + (i0 + t) % cnt
                d = dist[j]
                if not d < r:
                    continue
                delta = _mod(keys[j] - base - p + np.pi, two_pi) - np.pi
                w = half_width[j]
                a = max(delta - w, -half)
                b = min(delta + w, half)
                if not b > a:
                    continue
                if n == beam.shape[0]:
                    beam, ds = _resized(beam, n, 2 * n), _resized(ds, n, 2 * n)
                    las, lbs = _resized(las, n, 2 * n), _resized(lbs, n, 2 * n)
                beam[n] = i
                ds[n] = d
                las[n] = a
                lbs[n] = b
                n += 1
        for u in range(first + 1, n):  # stable insertion sort of this beam's few candidates by distance
            d, a, b = ds[u], las[u], lbs[u]
            v = u
            while v > first and ds[v - 1] > d:
                ds[v], las[v], lbs[v] = ds[v - 1], las[v - 1], lbs[v - 1]
                v -= 1
            ds[v], las[v], lbs[v] = d, a, b
    return _resized(beam, n, n), _resized(ds, n, n), _resized(las, n, n), _resized(lbs, n, n)


@numba.njit(cache=True)
def occlusion_shares(beam, a, b, half):
    """q per candidate (sorted by beam, then distance): the share of the wedge [−half, half] whose elementary
    pieces (between consecutive ends of the beam's intervals [a, b] and the wedge's) go to it, the nearest
    candidate whose interval covers the piece's midpoint. A candidate's piece lengths are added in piece order
    from 0.0, then divided by the wedge's width (as the array code did: one-hot `einsum` over the pieces)."""
    n = beam.shape[0]
    width = 2 * half
    q = np.zeros(n)
    ends = np.empty(64)
    i = 0
    while i < n:
        j = i + 1
        while j < n and beam[j] == beam[i]:
            j += 1
        k = j - i
        if k == 1:
            q[i] = (b[i] - a[i]) / width
            i = j
            continue
        m = 2 * k + 2
        if m > ends.shape[0]:
            ends = np.empty(2 * m)
        for t in range(k):
            ends[t] = a[i + t]
            ends[k + t] = b[i + t]
        ends[2 * k] = -half
        ends[2 * k + 1] = half
        for u in range(1, m):  # insertion sort: a few values
            v, w = u, ends[u]
            while v > 0 and ends[v - 1] > w:
                ends[v] = ends[v - 1]
                v -= 1
            ends[v] = w
        for p in range(m - 1):
            mid = 0.5 * (ends[p + 1] + ends[p])
            for t in range(i, j):
                if a[t] <= mid <= b[t]:
                    q[t] += ends[p + 1] - ends[p]
                    break
        for t in range(i, j):
            q[t] /= width
        i = j
    return q


@numba.njit(cache=True)
def merge_targets(slot, d, r0):
    """The order that sorts flakes and hard targets by (beam, range), ties flakes first: ``slot`` (each flake's
    beam, ascending) with ``d`` ascending within a beam, followed by one hard target per beam at ``r0``; indices
    into that concatenation (a stable `np.lexsort((range, beam))` of it)."""
    nf = slot.shape[0]
    order = np.empty(nf + r0.shape[0], np.int64)
    pos = 0
    j = 0
    for h in range(r0.shape[0]):
        while j < nf and slot[j] == h and d[j] <= r0[h]:
            order[pos] = j
            pos += 1
            j += 1
        order[pos] = nf + h
        pos += 1
        while j < nf and slot[j] == h:
            order[pos] = j
            pos += 1
            j += 1
    return order


@numba.njit(cache=True)
def _window(r, c_tau):
    """Bins k ∈ [⌈10 r⌉, ⌊10(r + cτ_H)⌋] (each rounded to 9 decimals first, as ``np.round(…, 9)``: 10·20.0 stays
    bin 200)."""
    lo = math.ceil(np.rint(10.0 * r * 1e9) / 1e9)
    hi = math.floor(np.rint(10.0 * (r + c_tau) * 1e9) / 1e9)
    return lo, hi


@numba.njit(cache=True)
def windows(r, c_tau):
    """`_window` of every element: its first and last bin (klo, khi)."""
    n = r.shape[0]
    klo = np.empty(n, np.int64)
    khi = np.empty(n, np.int64)
    for e in range(n):
        klo[e], khi[e] = _window(r[e], c_tau)
    return klo, khi


@numba.njit(cache=True)
def _clusters(owner, r, c_tau):
    """Per element: its window (klo, khi) and the first element of its cluster (chained overlapping windows
    of one owner; elements sorted by (owner, r))."""
    n = r.shape[0]
    klo, khi = windows(r, c_tau)
    head = np.empty(n, np.int64)
    for e in range(n):
        if e == 0 or owner[e] != owner[e - 1] or klo[e] > khi[e - 1]:
            head[e] = e
        else:
            head[e] = head[e - 1]
    return klo, khi, head


@numba.njit(cache=True)
def _phase(k, r, c_tau, sampling, step):
    """π·(R(k) − r)/cτ_H, the range R(k) of bin k being ``np.round(k·step, 2)`` with ``sampling``, else k/10."""
    grid = np.rint(k * step * 100.0) / 100.0 if sampling else k / 10.0
    return np.pi * (grid - r) / c_tau


@numba.njit(cache=True)
def _sin2_bounds(phase, eps):
    """Lower and upper bounds of sin²(θ) over every θ within ``eps`` of ``phase``. With δ = θ − π/2, sin²θ = cos²δ
    = (1 + cos 2δ)/2 and 1 − x²/2 + x⁴/24 − x⁶/720 ≤ cos x ≤ 1 − x²/2 + x⁴/24 for every real x, so, with
    u = δ²: 1 − u + u²/3 − 2u³/45 ≤ cos²δ ≤ 1 − u + u²/3; also cos²δ ≤ (π/2 − |δ|)² (sin²θ ≤ θ², (π − θ)²) and
    ≤ 1. The lower polynomial falls with u, the upper ones are convex: each bound over the interval
    a ≤ |δ| ≤ b is at one of its ends."""
    d = abs(phase - np.pi / 2)
    a = max(d - eps, 0.0)
    b = d + eps
    ua, ub = a * a, b * b
    ea, eb = np.pi / 2 - a, np.pi / 2 - b
    pb = 1.0 - ub + ub * ub * (1.0 / 3.0)  # products, not divisions: the slack covers their rounding
    upper = min(1.0, max(1.0 - ua + ua * ua * (1.0 / 3.0), pb), max(ea * ea, eb * eb))
    lower = max(pb - ub * ub * ub * (2.0 / 45.0), 0.0)
    return lower, upper


_SLACK = 1e-9  # relative margin of the bounds over the float sums (their rounding is ≈ 1e-15)


@numba.njit(cache=True)
def peak_bins(owner, r, coef, c_tau, sampling, step):
    """The (element, bin) pairs at which pulses must be evaluated to find each owner's peak, with their phases
    (`_phase`); pairs bin by bin, each bin's elements in order. Elements sorted by (owner, r).

    Elements are grouped into clusters of chained overlapping windows (a cluster's waveform depends on no other
    element). The candidate bins of a lone element are the 5 around r + cτ_H/2 within its window (its pulse
    peaks at one of them); of a cluster, every bin of its span. Bounds of sin² (`_sin2_bounds`, around a phase
    computed without the bin's rounding: R(k) is within 0.005 m of k·step, k/10 exactly) give each bin's
    waveform a lower and an upper bound: a bin whose upper bound is below the best lower bound of its group
    cannot hold the maximum, nor tie it, and is left out. With a negative or non-finite coefficient in a
    group, every candidate bin of it is kept."""
    n = r.shape[0]
    klo, khi, head = _clusters(owner, r, c_tau)
    grid_step = step if sampling else 0.1
    to_phase = np.pi / c_tau
    eps = ((0.005 if sampling else 0.0) + 1e-9) * to_phase + 1e-9
    cap = max(1024, 4 * n)
    elem = np.empty(cap, np.int64)
    kk = np.empty(cap, np.int64)
    phase = np.empty(cap)
    lower = np.empty(64)
    upper = np.empty(64)
    m = 0
    e0 = 0
    while e0 < n:
        e1 = e0 + 1
        while e1 < n and head[e1] == e0:
            e1 += 1
        lone = e1 - e0 == 1
        if lone:
            k0 = np.int64(np.rint(10.0 * (r[e0] + c_tau / 2)))
            lo, hi = max(k0 - 2, klo[e0]), min(k0 + 2, khi[e0])
        else:
            lo, hi = klo[e0], khi[e0]
            for e in range(e0, e1):
                hi = max(hi, khi[e])
        span = hi - lo + 1
        if span > upper.shape[0]:
            lower, upper = np.empty(2 * span), np.empty(2 * span)
        for t in range(span):
            lower[t] = 0.0
            upper[t] = 0.0
        prune = True
        for e in range(e0, e1):
            c = coef[e]
            prune = prune and 0.0 <= c < np.inf
            for k in range(max(lo, klo[e]), min(hi, khi[e]) + 1):
                a, b = _sin2_bounds((k * grid_step - r[e]) * to_phase, eps)
                lower[k - lo] += c * a
                upper[k - lo] += c * b
        best_lower = -np.inf
        if prune:
            for t in range(span):
                best_lower = max(best_lower, lower[t] * (1.0 - _SLACK))
        for k in range(lo, hi + 1):
            if upper[k - lo] * (1.0 + _SLACK) < best_lower:
                continue
            for e in range(e0, e1):
                if klo[e] <= k <= khi[e]:
                    if m == elem.shape[0]:
                        elem, kk, phase = _resized(elem, m, 2 * m), _resized(kk, m, 2 * m), _resized(phase, m, 2 * m)
                    elem[m] = e
                    kk[m] = k
                    phase[m] = _phase(k, r[e], c_tau, sampling, step)
                    m += 1
        e0 = e1
    return _resized(elem, m, m), _resized(kk, m, m), _resized(phase, m, m)


@numba.njit(cache=True)
def peak_of_beams(owner, elem, kk, sine, coef, n_owner):
    """(max value, bin of the first maximum) of each owner's summed waveform, from the sines at `peak_bins`'
    pairs: a bin's value is the sum of its elements' coef·sin², added in element order from 0.0 (−inf and
    `BIG` for an owner without elements). The largest value wins, the smallest bin among equal ones."""
    best_m = np.full(n_owner, -np.inf)
    best_k = np.full(n_owner, BIG, np.int64)
    n_pairs = elem.shape[0]
    p = 0
    while p < n_pairs:
        o = owner[elem[p]]
        k = kk[p]
        v = 0.0
        while p < n_pairs and kk[p] == k and owner[elem[p]] == o:
            v += coef[elem[p]] * (sine[p] * sine[p])
            p += 1
        if v > best_m[o] or (v == best_m[o] and k < best_k[o]):
            best_m[o], best_k[o] = v, k
    return best_m, best_k
