"""Exact k-nearest-neighbour search for many query points next to the data, compiled with numba.

Used by `upsample` (released rule: every new point, which lies within 0.17 m of its parent, takes the
mean intensity of its 5 nearest original points), where a KD-tree query costs ≈ 1 µs a point.

The points are bucketed into cells of ``cell`` × ``cell`` × ``hz`` metres and stored column by column
(x–y), cell by cell up each column, so the cells of one column between two heights are one contiguous
slice; columns are found through a dense table of the occupied B × B blocks of columns, so the index
costs O(N) to build whatever the scan's extent. Queries are answered in the storage order of their
columns (neighbouring queries reuse the same memory). Each query scans every cell within a radius that
is a guess of its k-th nearest distance (twice a running mean of the previous queries' squared ones), with
branch-free compaction of the points within it; when fewer than k points lie within the guess it grows it, up to a
radius known to hold k points (just beyond the farthest of the last settled query's neighbours). Scanning
all points within a radius that holds at least k of them gives exactly the k nearest, and shows whether
any other point is level with the k-th; the k nearest are then picked without data-dependent branches (a
min/max chain, then ranks by counting), as mispredicted branches, not arithmetic, dominate the cost.

Same neighbours as ``scipy.spatial.cKDTree.query``: the queries this search cannot settle the way the
KD-tree does are answered by the KD-tree itself: two (near-)equal consecutive squared distances among the
k nearest or between the k-th and the next (which of the tied points the KD-tree returns depends on its
traversal), fewer than k points within ``_REACH`` cells, or at most k + 1 points in all.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np

from bench_build.stages.kernels.buckets import bounds, counting_sort
from bench_build.stages.kernels.neighbours import query_in_spatial_order

B = 8  # columns per block side
_MAX_BLOCKS = 4_000_000  # block-table cap: the cell grows for very wide scans
_MAX_Z_CELLS = 4096  # height-cell cap: the cell height grows for very tall scans
_REACH = 4  # cells: the search radius never exceeds this many cells (then the KD-tree answers)
_SLACK = 1e-9  # metres added to every search radius, far above the rounding error of the cell arithmetic
_NEAR_TIE = 1e-10  # relative gap between consecutive squared distances below which the KD-tree decides
_GUESS = 2.0  # a query's first squared search radius: this × the running mean of the k-th squared distances
_MEAN = 0.3  # weight of the last query in that running mean
_GROW = 3.0  # fewer than k points within the radius: grow the squared radius by this (up to a known bound)
CELL, HZ = 0.15, 0.1  # metres: the fastest on the demo scans (0.1–0.3 m cells cost within 10 % of it)


class CellGrid:
    """``points[:, :3]`` in cells of ``cell`` × ``cell`` × ``hz`` metres, stored column by column, cell by cell up
    a column (counting sorts; O(N)); with ``value_col``, each stored point carries ``points[:, value_col]``."""

    def __init__(self, points: np.ndarray, cell: float = CELL, hz: float = HZ, value_col: int | None = None):
        lo, hi = bounds(points)  # any float dtype and strides: a Frame's float32 points are read in place
        span = np.maximum(hi - lo, 1e-9)
        cell = max(cell, math.sqrt(float(span[0] * span[1]) / _MAX_BLOCKS) / B)
        hz = max(hz, float(span[2]) / (_MAX_Z_CELLS - 1))
        self.cell, self.hz = cell, hz
        self.x0, self.y0, self.z0 = (float(v) for v in lo)
        self.nx, self.ny = int(span[0] // cell) + 1, int(span[1] // cell) + 1
        self.nz = int(span[2] // hz) + 1
        self.block, self.cols, self.zs, self.order, self.pts = _build(
            points, -1 if value_col is None else value_col, self.x0, self.y0, self.z0, cell, hz, self.nx, self.ny,
            self.nz)

    def args(self) -> tuple:
        return (self.block, self.cols, self.zs, self.order, self.pts, self.x0, self.y0, self.z0, self.cell, self.hz,
                self.nx, self.ny)


@numba.njit(cache=True)
def _build(points, value_col, x0, y0, z0, cell, hz, nx, ny, nz):
    """(block, cols, zs, order, pts): block[bx · nby + by] numbers the occupied B × B blocks of columns (-1:
    empty); column (cx, cy) of block b is slot s = b·B² + (cx mod B)·B + cy mod B; cols[s] = (zlo, zhi, base)
    (zhi < zlo: empty column); the points of its height cells za … zb (zlo ≤ za ≤ zb ≤ zhi) are the storage
    positions zs[base + za] … zs[base + zb + 1] - 1; storage position j holds point order[j], whose x, y, z and
    value are pts[0, j], pts[1, j], pts[2, j], pts[3, j] (one row per coordinate: the search reads three
    contiguous rows, with no stride arithmetic). Storage order: (slot, height cell, index)."""
    n = points.shape[0]
    nby = (ny + B - 1) // B
    nbx = (nx + B - 1) // B
    icell = 1.0 / cell
    ihz = 1.0 / hz
    slot = np.empty(n, np.int64)
    cz = np.empty(n, np.int64)
    block = np.full(nbx * nby, -1, np.int32)
    for i in range(n):
        cx = min(max(math.floor((points[i, 0] - x0) * icell), 0), nx - 1)
        cy = min(max(math.floor((points[i, 1] - y0) * icell), 0), ny - 1)
        cz[i] = min(max(math.floor((points[i, 2] - z0) * ihz), 0), nz - 1)
        b = (cx // B) * nby + cy // B
        slot[i] = b * (B * B) + (cx % B) * B + cy % B  # block-table entry, column within the block
        block[b] = 0
    n_blocks = 0
    for c in range(nbx * nby):
        if block[c] == 0:
            block[c] = n_blocks
            n_blocks += 1
    n_slots = n_blocks * B * B
    for i in range(n):
        b = slot[i] // (B * B)
        slot[i] = block[b] * (B * B) + slot[i] - b * (B * B)
    # storage order (slot, height cell, index), built with passes over the points in memory order (sequential
    # reads; only the small per-column tables are accessed at random)
    cols = np.empty((n_slots, 3), np.int32)  # zlo, zhi, base; empty column: zlo > zhi
    cols[:, 0] = nz
    cols[:, 1] = -1
    for i in range(n):
        s = slot[i]
        cols[s, 0] = min(cols[s, 0], cz[i])
        cols[s, 1] = max(cols[s, 1], cz[i])
    m = 0
    for s in range(n_slots):  # each column's cells lo … hi + 1 get entries of zs (the last: its end)
        if cols[s, 1] >= cols[s, 0]:
            cols[s, 2] = m - cols[s, 0]
            m += cols[s, 1] - cols[s, 0] + 2
        else:
            cols[s, 0] = 1
            cols[s, 1] = 0
            cols[s, 2] = 0
    zs = np.zeros(m, np.int32)
    for i in range(n):
        zs[cols[slot[i], 2] + cz[i] + 1] += 1
    j = 0
    for s in range(n_slots):  # counts → starts
        if cols[s, 1] >= cols[s, 0]:
            base = cols[s, 2]
            zs[base + cols[s, 0]] = j
            for c in range(cols[s, 0], cols[s, 1] + 1):
                j += zs[base + c + 1]
                zs[base + c + 1] = j
    order = np.empty(n, np.int64)
    pts = np.zeros((4, n), np.float64)
    fill = zs.copy()
    for i in range(n):
        p = fill[cols[slot[i], 2] + cz[i]]
        fill[cols[slot[i], 2] + cz[i]] = p + 1
        order[p] = i
        pts[0, p] = points[i, 0]
        pts[1, p] = points[i, 1]
        pts[2, p] = points[i, 2]
        if value_col >= 0:
            pts[3, p] = points[i, value_col]
    return block, cols, zs, order, pts


@numba.njit(cache=True, inline="always")
def _scan(qx, qy, qz, lim, block, cols, zs, px, py, pz, x0, y0, z0, icell, ihz, nx, ny, buf_d, buf_j):
    """Every point within squared distance ``lim`` of q into buf_d / buf_j (squared distances, storage positions;
    unordered): every cell the ball can reach is read, and each point is written and kept by advancing the
    count only when it is within ``lim`` (no unpredictable branch). Returns the number kept. The point loop
    indexes with unsigned integers: numba then omits its negative-index wrap-around (≈ 10 % of the search)."""
    nby = (ny + B - 1) // B
    r = math.sqrt(lim) + _SLACK
    ax = max(math.floor((qx - r - x0) * icell), 0)
    bx = min(math.floor((qx + r - x0) * icell), nx - 1)
    ay = max(math.floor((qy - r - y0) * icell), 0)
    by = min(math.floor((qy + r - y0) * icell), ny - 1)
    za0 = math.floor((qz - r - z0) * ihz)
    zb0 = math.floor((qz + r - z0) * ihz)
    w = np.uint64(0)
    for cx in range(ax, bx + 1):
        for cy in range(ay, by + 1):
            b = block[(cx // B) * nby + cy // B]
            if b < 0:
                continue
            c = b * (B * B) + (cx % B) * B + cy % B
            za = max(za0, cols[c, 0])
            zb = min(zb0, cols[c, 1])
            if za > zb:
                continue
            base = cols[c, 2]
            for j in range(np.uint64(zs[base + za]), np.uint64(zs[base + zb + 1])):
                dx = px[j] - qx
                dy = py[j] - qy
                dz = pz[j] - qz
                d = dx * dx + dy * dy + dz * dz
                buf_d[w] = d
                buf_j[w] = j
                w += np.uint64(d <= lim)
    return np.int64(w)


@numba.njit(cache=True, inline="always")
def select_smallest(w, kk, buf_d, buf_j, bj, bd):
    """The kk smallest of buf_d[:w] (w ≥ kk) into bd, sorted; bj[r] = the storage position of the entry whose
    distance has rank r among them (bj has kk + 1 slots: entries beyond the kk-th land in the spare one). No
    data-dependent branch: the distances pass down a min/max chain, then each entry's rank is a count of
    comparisons. Equal distances share a rank (one of their positions is kept): the caller leaves such queries
    to the KD-tree (its tie test sees them in bd). `_knn_batch` has this for kk = 5 written out in registers."""
    for p in range(kk):
        bd[p] = np.inf
    for t in range(w):
        d = buf_d[t]
        for p in range(kk):
            e = max(bd[p], d)
            bd[p] = min(bd[p], d)
            d = e
    for t in range(w):
        d = buf_d[t]
        r = np.uint64(0)
        for p in range(kk):
            r += np.uint64(d > bd[p])
        bj[r] = buf_j[t]


@numba.njit(cache=True)
def _knn_batch(q, k, want_idx, block, cols, zs, order, pts, x0, y0, z0, cell, hz, nx, ny):
    """(idx (m, k), means (m,), exact (m,)): the k nearest points of every query, sorted by distance (only with
    ``want_idx``; else idx is empty); the mean of their values (summed left to right, then divided: numpy's
    ``mean(axis=1)`` of the row); whether the query is settled. exact is False where the KD-tree must answer:
    fewer than k points within reach, or two (near-)equal consecutive squared distances among the k nearest
    and the next."""
    m = q.shape[0]
    kk = k
    nby = (ny + B - 1) // B
    n_slots = cols.shape[0]
    icell = 1.0 / cell
    ihz = 1.0 / hz
    idx = np.zeros((m if want_idx else 0, k), np.int64)
    means = np.zeros(m, np.float64)
    exact = np.zeros(m, np.bool_)
    # the queries in the storage order of their columns (those outside every block last)
    key = np.empty(m, np.int64)
    for t in range(m):
        cx = math.floor((q[t, 0] - x0) * icell)
        cy = math.floor((q[t, 1] - y0) * icell)
        key[t] = n_slots
        if 0 <= cx < nx and 0 <= cy < ny:
            b = block[(cx // B) * nby + cy // B]
            if b >= 0:
                key[t] = b * (B * B) + (cx % B) * B + cy % B
    seq = counting_sort(key, n_slots + 1, np.arange(m))[1]
    sq = np.empty((m, 3), np.float64)  # the queries in that order (one pass of scattered reads)
    for u in range(m):
        sq[u, 0] = q[seq[u], 0]
        sq[u, 1] = q[seq[u], 1]
        sq[u, 2] = q[seq[u], 2]
    far = (_REACH * cell) ** 2
    px = pts[0]
    py = pts[1]
    pz = pts[2]
    pv = pts[3]
    buf_d = np.empty(pts.shape[1] + 1, np.float64)
    buf_j = np.empty(pts.shape[1] + 1, np.uint64)
    bj = np.empty(kk + 1, np.uint64)
    bd = np.empty(kk, np.float64)
    prev = np.empty(kk, np.uint64)
    prev_d = far
    have_prev = False
    first = True
    for u in range(m):
        t = seq[u]
        qx = sq[u, 0]
        qy = sq[u, 1]
        qz = sq[u, 2]
        # a radius known to hold kk points: the farthest of the last settled query's kk neighbours (a little
        # beyond, so that the tie test below can see past the k-th distance)
        bound = far
        if have_prev:
            w = 0.0
            for s in range(kk):
                j = prev[s]
                dx = px[j] - qx
                dy = py[j] - qy
                dz = pz[j] - qz
                w = max(w, dx * dx + dy * dy + dz * dz)
            bound = min(bound, w * (1 + 4 * _NEAR_TIE))
        lim = min(bound, _GUESS * prev_d)
        while True:
            cnt = _scan(qx, qy, qz, lim, block, cols, zs, px, py, pz, x0, y0, z0, icell, ihz, nx, ny, buf_d, buf_j)
            if cnt >= kk or lim >= bound:
                break
            lim = min(bound, _GROW * lim) if lim > 0 else bound  # (lim 0: k coincident points before)
        if cnt < kk:
            continue  # fewer than kk points within reach
        if kk == 5:  # upsample's k: select_smallest with the five in registers, written out here (≈ 2× faster than the
            # array chain; and numba's inlining of a function with array arguments adds eight atomic reference-count
            # operations per call, ≈ 6 % of the search)
            d0 = d1 = d2 = d3 = d4 = np.inf
            for s in range(cnt):
                d = buf_d[s]
                e = max(d0, d)
                d0 = min(d0, d)
                d = e
                e = max(d1, d)
                d1 = min(d1, d)
                d = e
                e = max(d2, d)
                d2 = min(d2, d)
                d = e
                e = max(d3, d)
                d3 = min(d3, d)
                d4 = min(d4, e)
            for s in range(cnt):
                d = buf_d[s]
                bj[np.uint64(d > d0) + np.uint64(d > d1) + np.uint64(d > d2) + np.uint64(d > d3)
                   + np.uint64(d > d4)] = buf_j[s]
            bd[0] = d0
            bd[1] = d1
            bd[2] = d2
            bd[3] = d3
            bd[4] = d4
        else:
            select_smallest(cnt, kk, buf_d, buf_j, bj, bd)
        # the next query's guess: a running mean of the k-th squared distances (half as many regrown guesses as
        # the last query's alone, at the same mean radius)
        prev_d = bd[kk - 1] if first else prev_d + _MEAN * (bd[kk - 1] - prev_d)
        first = False
        # ties: two (near-)equal consecutive distances among the k nearest, or another point (near-)level with
        # the k-th: every point within lim was kept, so count those within the k-th distance (+ tolerance)
        tie = lim < bd[kk - 1] * (1 + _NEAR_TIE)
        for s in range(1, kk):
            if bd[s] - bd[s - 1] <= _NEAR_TIE * bd[s]:
                tie = True
        edge = bd[kk - 1] * (1 + _NEAR_TIE)
        level = 0
        for w in range(cnt):
            level += buf_d[w] <= edge
        if tie or level > kk:
            continue
        # settled: bj holds the kk nearest, each once (with equal distances it would not: see select_smallest)
        for s in range(kk):
            prev[s] = bj[s]
        have_prev = True
        exact[t] = True
        total = pv[bj[0]]
        for s in range(1, k):
            total += pv[bj[s]]
        means[t] = total / k
        if want_idx:
            for s in range(k):
                idx[t, s] = order[bj[s]]
    return idx, means, exact


def search(points: np.ndarray, queries: np.ndarray, k: int, value_col: int | None, cache: dict | None = None):
    queries = np.asarray(queries, dtype=np.float64).reshape(-1, 3)  # any strides: read in place
    if k <= 0 or len(queries) == 0 or len(points) <= k + 1:
        return queries, None, None, np.zeros(len(queries), dtype=bool)
    key = ("column_knn.CellGrid", CELL, HZ, value_col)
    grid = None if cache is None else cache.get(key)
    if grid is None:
        grid = CellGrid(points, value_col=value_col)
        if cache is not None:
            cache[key] = grid
    if grid.cell > 2 * CELL:  # a scan kilometres wide (outliers): coarse cells would be slow, the KD-tree is not
        return queries, None, None, np.zeros(len(queries), dtype=bool)
    idx, means, exact = _knn_batch(queries, k, value_col is None, *grid.args())
    return queries, idx, means, exact


def knn_near(xyz: np.ndarray, queries: np.ndarray, k: int, tree: Callable[[], object],
             cache: dict | None = None) -> np.ndarray:
    """Indices (m, k) of the k nearest points of ``xyz`` (n, ≥ 3) to every query, sorted by distance: exactly
    ``tree().query(queries, k)[1]`` for ``tree()`` a KD-tree over ``xyz`` (called only when the KD-tree must
    answer some queries: (near-)tied distances, neighbours beyond reach, at most k + 1 points). ``k`` ≤ n.
    Fast for queries near the data (each costs about the points of the cells within its k-th distance).
    ``cache``: a per-frame dict (`Frame.derived`) that keeps the grid for the next call on the same points."""
    queries, idx, _, exact = search(xyz, queries, k, None, cache)
    if idx is None:
        return query_in_spatial_order(tree(), queries, k)[1]
    if not exact.all():
        idx[~exact] = query_in_spatial_order(tree(), queries[~exact], k)[1]
    return idx


def mean_of_nearest(points: np.ndarray, value_col: int, queries: np.ndarray, k: int,
                    tree: Callable[[], object], cache: dict | None = None) -> np.ndarray:
    """``points[:, value_col].astype(np.float64)[nn].mean(axis=1)`` (the same bytes) with ``nn`` =
    ``knn_near(points, queries, k, tree, cache)``: the mean value of every query's k nearest points."""
    queries, idx, means, exact = search(points, queries, k, value_col, cache)
    if idx is None:
        return row_means(points[:, value_col], query_in_spatial_order(tree(), queries, k)[1])
    if not exact.all():
        means[~exact] = row_means(points[:, value_col], query_in_spatial_order(tree(), queries[~exact], k)[1])
    return means


@numba.njit(cache=True)
def row_means(values: np.ndarray, nn: np.ndarray) -> np.ndarray:
    """``values.astype(np.float64)[nn].mean(axis=1)`` (the same bytes: numpy sums a row left to right, then
    divides), without the (m, k) temporary."""
    m, k = nn.shape
    out = np.empty(m, np.float64)
    for t in range(m):
        s = np.float64(values[nn[t, 0]])
        for j in range(1, k):
            s += np.float64(values[nn[t, j]])
        out[t] = s / k
    return out
