"""Exact k-nearest-neighbour searches on uniform grids, compiled with numba (cached on disk).

Two searches share the bucketing (counting sort by cell) and the rule of the sorted best-k list (`_offer`):
an x–y grid for the sequential deletions of LiDAR scans (`Grid`, `nearest_in_grid`, below) and a 3D grid for the
k nearest of every point of an object shape (`knn_all`: ModelNet40-E normals; at the end of the file).

The x–y search serves the one-after-another neighbourhood deletions of cutout / local_dec: the k nearest
*present* points of every centre are searched in one grid over the original scan with a deletion mask,
with no KD-tree rebuilds and no Python per operation.

It visits square rings of cells around the query's cell (all heights of a cell at once) and
stops once the k-th best squared distance is strictly below the squared distance from the query to the
unvisited cells, so the result is exact: the k nearest points in increasing distance, ties broken by the
lower index (what a sorted brute-force search gives).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from bench_build.stages.kernels.buckets import bounds, counting_sort

_MAX_CELLS = 4_000_000  # grid size cap: the cell size grows for very wide scans


class Grid:
    """Points bucketed by x–y cell of side ``cell`` metres (counting sort; O(N))."""

    def __init__(self, xyz: np.ndarray, cell: float):
        xyz = np.ascontiguousarray(xyz, dtype=np.float64)
        lo, hi = bounds(xyz)  # (numpy's axis-0 min/max of the (N, 2) columns took ≈ 5 ms of the ≈ 8 ms build)
        lo, hi = lo[:2], hi[:2]
        span = np.maximum(hi - lo, 1e-9)
        cell = max(cell, math.sqrt(float(span[0] * span[1]) / _MAX_CELLS))
        self.cell, self.x0, self.y0 = cell, float(lo[0]), float(lo[1])
        self.nx, self.ny = int(span[0] // cell) + 1, int(span[1] // cell) + 1
        self.start, self.order, self.pts = _bucket(xyz, self.x0, self.y0, cell, self.nx, self.ny)

    def args(self) -> tuple:
        return self.start, self.order, self.pts, self.x0, self.y0, self.cell, self.nx, self.ny


@numba.njit(cache=True)
def _cells(xyz, x0, y0, cell, nx, ny):
    """Cell id of every point (points outside the grid go to the nearest border cell)."""
    n = xyz.shape[0]
    cid = np.empty(n, np.int64)
    for i in range(n):
        cx = min(max(math.floor((xyz[i, 0] - x0) / cell), 0), nx - 1)
        cy = min(max(math.floor((xyz[i, 1] - y0) / cell), 0), ny - 1)
        cid[i] = cx * ny + cy
    return cid


@numba.njit(cache=True)
def _bucket(xyz, x0, y0, cell, nx, ny):
    """Points by x–y cell: (start, order, pts)."""
    return _bucket_ids(xyz, _cells(xyz, x0, y0, cell, nx, ny), nx * ny)


@numba.njit(cache=True)
def _bucket_ids(xyz, cid, n_cells):
    """Points cell by cell: (start, order, pts) with pts[j] = xyz[order[j]]."""
    start, order = counting_sort(cid, n_cells, np.arange(cid.shape[0]))
    n = xyz.shape[0]
    pts = np.empty((n, 3), np.float64)
    for j in range(n):
        i = order[j]
        pts[j, 0] = xyz[i, 0]
        pts[j, 1] = xyz[i, 1]
        pts[j, 2] = xyz[i, 2]
    return start, order, pts


@numba.njit(cache=True, inline="always")
def _offer(bi, bd, cnt, k, i, d):
    """Offer point i at squared distance d to the best list (bi, bd) of cnt ≤ k entries sorted by (d², index);
    returns the new count. For the 3D search, which offers only the candidates within its bound; `nearest_in_grid`
    writes it out (see there)."""
    if cnt == k:
        if d > bd[k - 1] or (d == bd[k - 1] and i > bi[k - 1]):
            return cnt
        p = k - 1
    else:
        p = cnt
        cnt += 1
    while p > 0 and (bd[p - 1] > d or (bd[p - 1] == d and bi[p - 1] > i)):
        bd[p] = bd[p - 1]
        bi[p] = bi[p - 1]
        p -= 1
    bd[p] = d
    bi[p] = i
    return cnt


@numba.njit(cache=True)
def nearest_in_grid(qx, qy, qz, k, alive, use_alive, start, order, pts, x0, y0, cell, nx, ny, bi, bd):
    """The k nearest (alive) points to q, into bi / bd (indices, squared distances) sorted by (d², index);
    returns how many were found (< k only when fewer points are alive)."""
    fx = (qx - x0) / cell
    fy = (qy - y0) / cell
    qcx = math.floor(fx)
    qcy = math.floor(fy)
    cnt = 0
    r = 0
    while True:
        for cx in range(max(qcx - r, 0), min(qcx + r, nx - 1) + 1):
            step = 1 if cx == qcx - r or cx == qcx + r or r == 0 else 2 * r  # the ring only
            cy = qcy - r
            while cy <= qcy + r:
                if 0 <= cy < ny:
                    c = cx * ny + cy
                    for j in range(start[c], start[c + 1]):
                        i = order[j]
                        if use_alive and not alive[i]:
                            continue
                        dx = pts[j, 0] - qx
                        dy = pts[j, 1] - qy
                        dz = pts[j, 2] - qz
                        d = dx * dx + dy * dy + dz * dz
                        # `_offer` written out: here most points are offered, and numba counts references
                        # to bi / bd at every call of it (cutout / local_dec measured 15–25 % slower)
                        if cnt == k:
                            if d > bd[k - 1] or (d == bd[k - 1] and i > bi[k - 1]):
                                continue
                            p = k - 1
                        else:
                            p = cnt
                            cnt += 1
                        while p > 0 and (bd[p - 1] > d or (bd[p - 1] == d and bi[p - 1] > i)):
                            bd[p] = bd[p - 1]
                            bi[p] = bi[p - 1]
                            p -= 1
                        bd[p] = d
                        bi[p] = i
                cy += step
        if qcx - r <= 0 and qcx + r >= nx - 1 and qcy - r <= 0 and qcy + r >= ny - 1:
            return cnt  # every cell visited
        if cnt == k:
            # unvisited points lie outside cells [qcx - r, qcx + r] × [qcy - r, qcy + r]
            g = min(fx - (qcx - r), (qcx + r + 1) - fx, fy - (qcy - r), (qcy + r + 1) - fy) * cell
            if g > 0 and bd[k - 1] < g * g:
                return cnt
        r += 1


@numba.njit(cache=True)
def sequential_ops(xyz, cand, keep, subsets, use_subsets, op, n_ops, k, n_drop, present, rebuild_at,
                    start, order, pts, x0, y0, cell, nx, ny):
    bi = np.empty(k, np.int64)
    bd = np.empty(k, np.float64)
    for t in range(cand.shape[0]):
        c = cand[t]
        if not keep[c]:
            continue
        want = min(k, present)
        got = nearest_in_grid(xyz[c, 0], xyz[c, 1], xyz[c, 2], want, keep, True, start, order, pts, x0, y0, cell,
                              nx, ny, bi, bd)
        if use_subsets and want == k:
            for s in range(n_drop):
                keep[bi[subsets[op, s]]] = False
            present -= n_drop
        else:
            m = min(n_drop, got)
            for s in range(m):
                keep[bi[s]] = False
            present -= m
        op += 1
        if op == n_ops or present == 0:
            break
        if present < rebuild_at:
            break
    return op, present



# ---- the k nearest neighbours of every point of a cloud, on a 3D grid (object shapes) ---------------------

_VOXEL_CELLS_PER_POINT = 2  # grid size cap (cells per point) for flat or elongated clouds


def knn_all(xyz: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest points of every point of ``xyz``, itself included (k is capped at N): N×k indices and
    N×k squared distances, each row sorted by (d², index) — exactly what a sorted brute-force search gives,
    with d² = dx² + dy² + dz² summed in that order (as scipy's KD-tree does).

    Points are bucketed in cubic cells holding about k/2 points each (cell side from the occupancy of a first
    guess, so surfaces and volumes both get it right; the side only changes the speed, never the result) and
    answered cell by cell: the candidates of a cell are the points of its 3×3×3 block, gathered once for all
    its points (see `_knn_blocks`)."""
    xyz = np.ascontiguousarray(xyz, dtype=np.float64)
    if xyz.ndim != 2 or xyz.shape[1] != 3:
        raise ValueError(f"knn_all: expected N×3 points, got shape {xyz.shape}")
    n = len(xyz)
    k = max(min(int(k), n), 0)
    idx, d2 = np.empty((n, k), np.int64), np.empty((n, k), np.float64)
    if k == 0:
        return idx, d2
    if not np.isfinite(xyz).all():
        raise ValueError("knn_all: coordinates must be finite")
    lo = xyz.min(axis=0)
    span = xyz.max(axis=0) - lo
    cell, dims, cid = _voxel_cell(xyz, lo, span, k)
    start, order, pts = _bucket_ids(xyz, cid, int(np.prod(dims)))
    _knn_blocks(xyz, k, start, order, pts, lo[0], lo[1], lo[2], cell, *(int(d) for d in dims), idx, d2)
    return idx, d2


def _voxel_cell(xyz: np.ndarray, lo: np.ndarray, span: np.ndarray, k: int):
    """(cell side, grid dims, cell id of every point) with about k/2 points per occupied cell (measured
    fastest on ModelNet-like shapes, spheres and volumes): start from a volume-filling guess (k points per cell
    of the bounding box; flat clouds count as 1/1000 of their largest extent thick), then shrink the side by
    √(k/2 / points per occupied cell) (points on a surface: occupancy ∝ side²) until it holds."""
    n = len(xyz)
    ext = np.maximum(span, max(float(span.max()) * 1e-3, 1e-300))
    cell = float(np.prod(ext / max(float(ext.max()), 1e-300)) * k / n) ** (1.0 / 3.0) * float(ext.max())
    for attempt in range(4):
        cell = max(cell, float(span.max()) / (_VOXEL_CELLS_PER_POINT * n + 1), 1e-300)
        dims = (span // cell).astype(np.int64) + 1
        while int(np.prod(dims)) > _VOXEL_CELLS_PER_POINT * n + 1:  # never more than 2 cells a point
            cell *= 1.25
            dims = (span // cell).astype(np.int64) + 1
        cid = _voxels(xyz, lo[0], lo[1], lo[2], cell, int(dims[0]), int(dims[1]), int(dims[2]))
        per_cell = n / np.count_nonzero(np.bincount(cid, minlength=int(np.prod(dims))))
        if per_cell <= 0.75 * k or attempt == 3:
            return cell, dims, cid
        cell *= math.sqrt(0.5 * k / per_cell)
    raise AssertionError("unreachable")


@numba.njit(cache=True)
def _voxel(v, v0, cell, nv):
    return min(max(math.floor((v - v0) / cell), 0), nv - 1)


@numba.njit(cache=True)
def _voxels(xyz, x0, y0, z0, cell, nx, ny, nz):
    """Cell id of every point, z fastest (points outside the grid go to the nearest border cell)."""
    cid = np.empty(xyz.shape[0], np.int64)
    for i in range(xyz.shape[0]):
        cid[i] = (_voxel(xyz[i, 0], x0, cell, nx) * ny + _voxel(xyz[i, 1], y0, cell, ny)) * nz \
            + _voxel(xyz[i, 2], z0, cell, nz)
    return cid


@numba.njit(cache=True, inline="always")
def _axis_gap(i, f):
    """Distance (in cells) from coordinate f to cell i along one axis (0 inside it)."""
    if f < i:
        return i - f
    if f > i + 1:
        return f - (i + 1)
    return 0.0


@numba.njit(cache=True, inline="always")
def _cell_range(f, r2, n):
    """The cells lo…hi (clipped to 0…n − 1) within √r2 (+ 1e-9) cells of coordinate f along one axis."""
    h = math.sqrt(r2) + 1e-9
    return max(math.floor(f - h), 0), min(math.floor(f + h), n - 1)


@numba.njit(cache=True)
def _ball(qx, qy, qz, t2, k, start, order, pts, x0, y0, z0, cell, nx, ny, nz, bi, bd):
    """The k nearest points to q among those with d² ≤ t2, into bi / bd sorted by (d², index); returns how
    many were found. Visits every cell that meets the ball of radius √t2 (with a relative 1e-9 slack for
    the rounding of the cell coordinates): exact whenever it returns k."""
    fx, fy, fz = (qx - x0) / cell, (qy - y0) / cell, (qz - z0) / cell
    r2 = t2 / (cell * cell) * (1.0 + 1e-9) + 1e-18  # squared radius in cells
    cnt = 0
    x_lo, x_hi = _cell_range(fx, r2, nx)
    for ix in range(x_lo, x_hi + 1):
        rx = r2 - _axis_gap(ix, fx) ** 2  # what is left of the radius for y and z
        if rx < 0:
            continue
        y_lo, y_hi = _cell_range(fy, rx, ny)
        for iy in range(y_lo, y_hi + 1):
            ry = rx - _axis_gap(iy, fy) ** 2
            if ry < 0:
                continue
            lo, hi = _cell_range(fz, ry, nz)
            if lo > hi:
                continue
            c0 = (ix * ny + iy) * nz  # the cells lo…hi of one column are one run of pts
            for m in range(start[c0 + lo], start[c0 + hi + 1]):
                dx = pts[m, 0] - qx
                dy = pts[m, 1] - qy
                dz = pts[m, 2] - qz
                d = dx * dx + dy * dy + dz * dz
                if d <= t2:
                    cnt = _offer(bi, bd, cnt, k, order[m], d)
                    if cnt == k:
                        t2 = bd[k - 1]
    return cnt


@numba.njit(cache=True)
def _knn_blocks(xyz, k, start, order, pts, x0, y0, z0, cell, nx, ny, nz, out_i, out_d):
    """k nearest points of every point, cell by cell, into out_i / out_d (rows by point index).

    For a cell, the points of its 3×3×3 block are gathered once. A query q of the cell keeps the candidates
    with d² ≤ t2, where t2 is the smaller of (a) gap², gap = distance from q to the block's faces less
    1e-9 cell (faces on the grid's border are open: no point lies beyond them), and (b) the largest d² from
    q to the k neighbours of an earlier query next to it (k points within that bound), then keeps the k best
    (d², index) of those (compacted first, without a branch per candidate). The result is exact when the
    k-th best d² < gap² (every point outside the block is at least gap away); otherwise, or if fewer than k
    candidates passed, q is answered by `_ball` with a growing radius."""
    n = pts.shape[0]
    bx, by, bz = np.empty(n), np.empty(n), np.empty(n)
    bidx = np.empty(n, np.int64)
    cd, ci = np.empty(n), np.empty(n, np.int64)
    bi, bd = np.empty(k, np.int64), np.empty(k, np.float64)
    inf = np.inf
    for c in range(nx * ny * nz):
        if start[c] == start[c + 1]:
            continue
        cx, cy, cz = c // (ny * nz), (c // nz) % ny, c % nz
        nb = 0
        for ix in range(max(cx - 1, 0), min(cx + 1, nx - 1) + 1):
            for iy in range(max(cy - 1, 0), min(cy + 1, ny - 1) + 1):
                c0 = (ix * ny + iy) * nz
                for m in range(start[c0 + max(cz - 1, 0)], start[c0 + min(cz + 1, nz - 1) + 1]):
                    bx[nb], by[nb], bz[nb], bidx[nb] = pts[m, 0], pts[m, 1], pts[m, 2], order[m]
                    nb += 1
        lx = x0 + (cx - 1) * cell if cx > 0 else -inf
        hx = x0 + (cx + 2) * cell if cx < nx - 1 else inf
        ly = y0 + (cy - 1) * cell if cy > 0 else -inf
        hy = y0 + (cy + 2) * cell if cy < ny - 1 else inf
        lz = z0 + (cz - 1) * cell if cz > 0 else -inf
        hz = z0 + (cz + 2) * cell if cz < nz - 1 else inf
        for j in range(start[c], start[c + 1]):
            qx, qy, qz = pts[j, 0], pts[j, 1], pts[j, 2]
            gap = min(qx - lx, hx - qx, qy - ly, hy - qy, qz - lz, hz - qz) - 1e-9 * cell
            t2 = gap * gap if gap > 0 else 0.0
            # an earlier query next to q: the nearest earlier point of this cell, else the last point of the
            # cell below / the first of the cell behind (their k neighbours bound q's k-th distance)
            src = -1
            if j > start[c]:  # the nearest earlier point of this cell
                best = np.inf
                for jj in range(start[c], j):
                    dx = pts[jj, 0] - qx
                    dy = pts[jj, 1] - qy
                    dz = pts[jj, 2] - qz
                    d = dx * dx + dy * dy + dz * dz
                    if d < best:
                        best, src = d, order[jj]
            elif cz > 0 and start[c - 1] < start[c]:
                src = order[start[c] - 1]
            elif cy > 0 and start[c - nz] < start[c - nz + 1]:
                src = order[start[c - nz]]
            elif cx > 0 and start[c - ny * nz] < start[c - ny * nz + 1]:
                src = order[start[c - ny * nz]]
            if src >= 0:
                s2 = 0.0
                for t in range(k):
                    i = out_i[src, t]
                    dx = xyz[i, 0] - qx
                    dy = xyz[i, 1] - qy
                    dz = xyz[i, 2] - qz
                    s2 = max(s2, dx * dx + dy * dy + dz * dz)
                t2 = min(t2, s2 * (1.0 + 1e-9) + 1e-300)
            m = 0
            for t in range(nb):  # compact the candidates within t2 (no branch per candidate)
                dx = bx[t] - qx
                dy = by[t] - qy
                dz = bz[t] - qz
                d = dx * dx + dy * dy + dz * dz
                cd[m] = d
                ci[m] = bidx[t]
                m += d <= t2
            cnt = 0
            for t in range(m):
                if cd[t] <= t2:
                    cnt = _offer(bi, bd, cnt, k, ci[t], cd[t])
                    if cnt == k:
                        t2 = bd[k - 1]
            if cnt < k or not bd[k - 1] < gap * gap:
                t2 = max(4.0 * gap * gap, cell * cell)
                while True:
                    cnt = _ball(qx, qy, qz, t2, k, start, order, pts, x0, y0, z0, cell, nx, ny, nz, bi, bd)
                    if cnt == k:
                        break
                    t2 *= 4.0
            q = order[j]
            for t in range(k):
                out_i[q, t] = bi[t]
                out_d[q, t] = bd[t]
