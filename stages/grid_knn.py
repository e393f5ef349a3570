"""Exact k-nearest-neighbour search on a uniform x–y grid, compiled with numba (cached on disk).

Used by the one-after-another neighbourhood deletions of cutout / local_dec: the k nearest *present*
points of every centre are searched in one grid over the original scan with a deletion mask, with no
KD-tree rebuilds and no Python per operation.

The search visits square rings of cells around the query's cell (all heights of a cell at once) and
stops once the k-th best squared distance is strictly below the squared distance from the query to the
unvisited cells, so the result is exact: the k nearest points in increasing distance, ties broken by the
lower index (what a sorted brute-force search gives).
"""

from __future__ import annotations

import math

import numba
import numpy as np

_MAX_CELLS = 4_000_000  # grid size cap: the cell size grows for very wide scans


class Grid:
    """Points bucketed by x–y cell of side ``cell`` metres (counting sort; O(N))."""

    def __init__(self, xyz: np.ndarray, cell: float):
        xyz = np.ascontiguousarray(xyz, dtype=np.float64)
        lo = xyz[:, :2].min(axis=0) if len(xyz) else np.zeros(2)
        hi = xyz[:, :2].max(axis=0) if len(xyz) else np.zeros(2)
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
def _counting_sort(cid, n_cells):
    """(start, order): order lists point indices cell by cell, ascending within a cell."""
    start = np.zeros(n_cells + 1, np.int64)
    for i in range(cid.shape[0]):
        start[cid[i] + 1] += 1
    for c in range(n_cells):
        start[c + 1] += start[c]
    fill = start[:-1].copy()
    order = np.empty(cid.shape[0], np.int64)
    for i in range(cid.shape[0]):
        order[fill[cid[i]]] = i
        fill[cid[i]] += 1
    return start, order


@numba.njit(cache=True)
def _bucket(xyz, x0, y0, cell, nx, ny):
    """Points cell by cell: (start, order, pts) with pts[j] = xyz[order[j]]."""
    start, order = _counting_sort(_cells(xyz, x0, y0, cell, nx, ny), nx * ny)
    n = xyz.shape[0]
    pts = np.empty((n, 3), np.float64)
    for j in range(n):
        i = order[j]
        pts[j, 0] = xyz[i, 0]
        pts[j, 1] = xyz[i, 1]
        pts[j, 2] = xyz[i, 2]
    return start, order, pts


@numba.njit(cache=True)
def _knn(qx, qy, qz, k, alive, use_alive, start, order, pts, x0, y0, cell, nx, ny, bi, bd):
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
def _sequential_ops(xyz, cand, keep, subsets, use_subsets, op, n_ops, k, n_drop, present, rebuild_at,
                    start, order, pts, x0, y0, cell, nx, ny):
    bi = np.empty(k, np.int64)
    bd = np.empty(k, np.float64)
    for t in range(cand.shape[0]):
        c = cand[t]
        if not keep[c]:
            continue
        want = min(k, present)
        got = _knn(xyz[c, 0], xyz[c, 1], xyz[c, 2], want, keep, True, start, order, pts, x0, y0, cell, nx, ny,
                   bi, bd)
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
