"""Object-shape fixtures for the object stage tests: small clouds in the unit sphere, built in memory."""

from __future__ import annotations

import numpy as np

from bench_build.stages.frame import Frame

# ModelNet-C, Ren et al. Appendix A (paper text), levels 1..5
JITTER_SIGMA = [0.01, 0.02, 0.03, 0.04, 0.05]
SCALE_S = [1.6, 1.7, 1.8, 1.9, 2.0]
ROTATE_DEG = [6.0, 12.0, 18.0, 24.0, 30.0]  # π/30, π/15, π/10, π/7.5, π/6
DROP_GLOBAL_RELEASED = [0.25, 0.375, 0.5, 0.625, 0.75]
DROP_GLOBAL_TEXT = [0.25, 0.375, 0.5, 0.675, 0.75]
LOCAL_K = [100, 200, 300, 400, 500]
ADD_GLOBAL_K = [10, 20, 30, 40, 50]


def rng_for(seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([99, seed]))


def make_object(seed: int = 0, n: int = 1024, **attrs) -> Frame:
    """A chair-like cloud (box seat, four legs, a back) sampled uniformly, centred, max norm 1."""
    rng = np.random.default_rng(seed)
    parts = [((0.0, 0.0, 0.0), (1.0, 1.0, 0.1)), ((0.0, 0.45, 0.5), (1.0, 0.1, 1.0))]
    parts += [((x, y, -0.45), (0.08, 0.08, 0.8)) for x in (-0.45, 0.45) for y in (-0.45, 0.45)]
    which = rng.integers(0, len(parts), n)
    centre = np.array([p[0] for p in parts])[which]
    size = np.array([p[1] for p in parts])[which]
    xyz = centre + rng.uniform(-0.5, 0.5, (n, 3)) * size
    xyz -= xyz.mean(axis=0)
    xyz /= np.linalg.norm(xyz, axis=1).max()
    return Frame(frame_id=f"shape{seed}", points=xyz.astype(np.float32), fields=("x", "y", "z"),
                 attrs={"class_name": "chair", "class_id": 8, "split": "test", **attrs})


def make_sphere(seed: int = 0, n: int = 2048, radius: float = 0.9) -> Frame:
    """Points uniform on a sphere (analytic normals p/‖p‖) for the ModelNet40-E noise tests."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, 3))
    v = radius * v / np.linalg.norm(v, axis=1, keepdims=True)
    return Frame(frame_id=f"sphere{seed}", points=v.astype(np.float32), fields=("x", "y", "z"),
                 attrs={"class_name": "bowl", "class_id": 6, "split": "train"})


def snapshot(frame: Frame):
    return frame.points.copy(), {k: v.copy() for k, v in frame.labels.items()}, dict(frame.attrs)


def unchanged(frame: Frame, snap) -> bool:
    pts, labels, attrs = snap
    return (np.array_equal(frame.points, pts) and frame.labels.keys() == labels.keys()
            and all(np.array_equal(frame.labels[k], labels[k]) for k in labels) and dict(frame.attrs) == attrs)
