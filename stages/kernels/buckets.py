"""Bounds and the counting sort that every grid index in `bench_build.stages.kernels` is built with."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def bounds(points):
    """Minimum and maximum of x, y, z (columns 0–2; zeros when empty), for any float dtype and strides (a
    Frame's float32 points are read in place); numpy's axis-0 reduction of an (N, 3) array is ≈ 10× slower."""
    lo = np.zeros(3)
    hi = np.zeros(3)
    if points.shape[0]:
        for c in range(3):
            lo[c] = points[0, c]
            hi[c] = points[0, c]
    for i in range(points.shape[0]):
        for c in range(3):
            lo[c] = min(lo[c], points[i, c])
            hi[c] = max(hi[c], points[i, c])
    return lo, hi


@numba.njit(cache=True)
def counting_sort(key, n_keys, src):
    """(start, order): ``order`` holds the entries of ``src`` stably ordered by ``key[src]`` (keys in
    0 … n_keys − 1); the entries with key c are ``order[start[c]:start[c + 1]]``. O(len(src) + n_keys)."""
    start = np.zeros(n_keys + 1, np.int64)
    for t in range(src.shape[0]):
        start[key[src[t]] + 1] += 1
    for c in range(n_keys):
        start[c + 1] += start[c]
    fill = start[:-1].copy()
    order = np.empty(src.shape[0], np.int64)
    for t in range(src.shape[0]):
        c = key[src[t]]
        order[fill[c]] = src[t]
        fill[c] += 1
    return start, order
