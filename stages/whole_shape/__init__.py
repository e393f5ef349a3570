"""Whole-shape corruptions and preprocessing of single-object clouds (ModelNet-C, ModelNet40-E, 3DOS).

Shapes are small clouds (1,024–2,048 points) centred in the unit sphere, fields ``x, y, z``; a
stage keeps the frame's ``attrs`` (class, split, …) untouched. ModelNet-C stages reproduce the
authors' released generator by default; where the paper's text differs the
difference is a parameter (e.g. ``max_clusters`` 7 vs 8) so that the text is a named variant.
"""

from __future__ import annotations

import numpy as np


def cluster_sizes(rng: np.random.Generator, total: int, max_clusters: int) -> np.ndarray:
    """ModelNet-C's cluster split: C ~ U{1..max_clusters}, each of ``total`` points assigned to one of the
    C clusters uniformly (multinomial; a cluster may get 0 points). Returns the C sizes."""
    if max_clusters < 1 or total < 0:
        raise ValueError(f"need max_clusters ≥ 1 and total ≥ 0, got {max_clusters}, {total}")
    c = int(rng.integers(1, max_clusters + 1))
    return np.bincount(rng.integers(0, c, size=total), minlength=c)


def unit_ball(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` points uniform in the unit ball: r = U^(1/3), cos θ ~ U(−1, 1), φ ~ U(0, 2π)."""
    r = rng.random(n) ** (1.0 / 3.0)
    cos_t = rng.uniform(-1.0, 1.0, n)
    phi = rng.uniform(0.0, 2.0 * np.pi, n)
    sin_t = np.sqrt(1.0 - cos_t**2)
    return np.stack([r * sin_t * np.cos(phi), r * sin_t * np.sin(phi), r * cos_t], axis=1)


def normalize_unit_sphere(xyz: np.ndarray) -> np.ndarray:
    """Subtract the centroid and divide by the largest point norm (max ‖p‖ = 1 afterwards)."""
    p = xyz.astype(np.float64)
    p = p - p.mean(axis=0)
    r = np.sqrt((p * p).sum(axis=1)).max() if len(p) else 0.0
    return p / r if r > 0 else p
