"""Triangle meshes for the object readers: loading (trimesh), area-weighted sampling, farthest points.

Why trimesh: it is a maintained, NumPy-only library that reads both OBJ (ShapeNetCore) and OFF
(ModelNet40, including ModelNet's glued ``OFF490 518 0`` header) into vertex/face arrays, and its
``sample.sample_surface`` draws points with probability proportional to triangle area from a NumPy
``Generator`` we pass in — so every sampled cloud is reproducible from a key. open3d (already a
dependency) cannot take a per-call RNG for sampling, but its C++ farthest-point sampling is used for
the FPS step (≈ 60 ms for 16,384 → 4,096 points, deterministic: it starts from point 0).
pymeshlab would add a large binary for nothing we need.

Sampling a mesh is a property of the source shape, not of an example: its RNG is derived from the
shape's id alone (`mesh_rng`), like the pre-sampled clouds the reference loaders read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench_build.plan.tasks import stable_hash
from bench_build.sources.base import SourceError

#: Seed of the per-shape surface sampling (part of every mesh source's fingerprinted description).
MESH_SAMPLING_SEED = 20240501
#: Dense surface samples drawn before farthest-point sampling to 4,096 (4 per FPS point).
DENSE_POINTS = 16384


def load_mesh(path: Path, file_type: str):
    """A ``trimesh.Trimesh`` of ``path`` (multi-part files are concatenated); SourceError when the file is
    missing, unreadable, or has no triangle of positive area."""
    import trimesh

    if not path.is_file():
        raise SourceError(path, "mesh file not found")
    try:
        # geometry only: materials/textures (ShapeNet's .mtl and jpgs) are never read
        extra = {"skip_materials": True} if file_type == "obj" else {}
        mesh = trimesh.load(str(path), file_type=file_type, force="mesh", process=False, **extra)
    except Exception as e:  # trimesh raises many types for malformed text
        raise SourceError(path, f"cannot parse as {file_type.upper()}: {type(e).__name__}: {e}") from None
    if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
        raise SourceError(path, "empty mesh (no triangles)")
    if not np.isfinite(mesh.vertices).all():
        raise SourceError(path, "vertices with NaN/inf coordinates")
    if not mesh.area > 0:
        raise SourceError(path, "empty mesh (total triangle area is 0)")
    return mesh


def mesh_rng(identity: str) -> np.random.Generator:
    """The RNG of one source shape's surface sampling (independent of recipe, worker and order)."""
    return np.random.default_rng(np.random.SeedSequence([MESH_SAMPLING_SEED, stable_hash(identity)]))


def sample_surface(mesh, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` points on the surface, triangles chosen with probability ∝ area (float32, N×3)."""
    import trimesh

    pts, _ = trimesh.sample.sample_surface(mesh, count, seed=rng)
    return np.asarray(pts, dtype=np.float32)


def farthest_points(points: np.ndarray, count: int) -> np.ndarray:
    """Farthest-point sampling of ``count`` of ``points`` starting from point 0 (all of them if fewer)."""
    if len(points) <= count:
        return np.asarray(points, dtype=np.float32)
    import open3d as o3d

    pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points.astype(np.float64)))
    return np.asarray(pc.farthest_point_down_sample(count, 0).points, dtype=np.float32)


def unit_sphere(points: np.ndarray) -> np.ndarray:
    """Centre at the centroid and divide by the largest point norm (PointNet's / 3DOS's ``pc_normalize``)."""
    p = points.astype(np.float64)
    p = p - p.mean(axis=0)
    r = np.sqrt((p * p).sum(axis=1)).max()
    return (p / r if r > 0 else p).astype(np.float32)
