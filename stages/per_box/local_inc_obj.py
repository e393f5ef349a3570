"""Local density increase on objects (KITTI-C `local_inc_obj`, Li et al. Appendix C-B).

For every annotated object (every box except DontCare), c of its points are chosen uniformly without
replacement as centres. A plane is fitted to the k nearest object points of each centre (the centre
included) and k new points are sampled on it, with (c, k) = (1, 30), (2, 30), (3, 30), (4, 30),
(5, 30) at severities 1–5, so an object gains exactly c·k points.

Decisions the paper leaves open:

* "Linear fitting" is a total-least-squares (PCA) plane: through the neighbourhood's centroid,
  spanned by its two principal directions. An ordinary regression z = f(x, y) is degenerate on the
  vertical faces that make up most of a car's visible surface; the PCA plane is not.
* "Within the neighbourhood": new points are drawn uniformly in the rectangle spanned, in the plane's
  (u, v) coordinates, by the projected neighbours (min to max on each principal direction).
* A new point copies the intensity, extra columns (e.g. ring) and label columns of the neighbour
  nearest to it in (u, v); its ``point_tag`` is SYNTHETIC. New points are appended after all source
  points (object by object, centre by centre); source points keep their order.
* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0), and the
  neighbourhoods are searched among the object's own points only (a per-object KD-tree).
* An object with N < c points uses c' = N centres and one with N < k points uses k' = N (adding k'
  points per centre); with k' ≤ 2 the "plane" degenerates to the points' segment. Empty objects are
  skipped.
* The boxes are kept and new points are not clipped: near an edge of the object the fitted plane is
  tilted, so a few new points may fall slightly outside the box.
* c = 0 or k = 0 is identity.

The above is ``rule = "text"``. ``rule = "code"`` (default) follows Li et al.'s released generator,
which produced the published numbers, in the box-normalised frame (`bench_build.stages.kernels.box_unit`): only objects
with more than k points; min(c, (N − 1) // k) operations, each with a centre drawn among the object's
original points and its k nearest; a least-squares plane h = w0 + w1 u + w2 v on the axis of the
neighbourhood's smallest extent (box frame) over the other two; **2k** new points with u, v ~
N(mean, std) of the neighbours and intensity = the neighbours' mean intensity (extra columns and
labels from the centre); then one common shrink of originals and new points into the ±1 cube (the
released `normalize`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.stages.density.local_inc import AXES
from bench_build.stages.frame import Frame, PointTag
from bench_build.stages.geometry import check_rule
from bench_build.stages.kernels.box_unit import clamp_unit, from_unit, to_unit
from bench_build.stages.registry import stage


@dataclass(frozen=True)
class LocalIncObjParams:
    centers: int  # centres per object
    k: int = 30  # neighbourhood size, and points added per centre (code: 2k)
    rule: str = "code"  # "code": Li et al.'s released generator (see the module docstring); "text": Appendix C



@stage("local_inc_obj", params=LocalIncObjParams, version=2)  # v2: rule (code: released generator)
def local_inc_obj(frame: Frame, params: LocalIncObjParams, rng: np.random.Generator) -> Frame:
    if params.centers < 0 or params.k < 0:
        raise ValueError(f"local_inc_obj: centers and k must be ≥ 0, got {params}")
    check_rule(params.rule, "local_inc_obj")
    if params.centers == 0 or params.k == 0:
        return frame
    if params.rule == "code":
        return _local_inc_obj_code(frame, params, rng)
    from scipy.spatial import cKDTree  # lazy: scipy costs ≈ 0.3 s to import and only this path needs it

    new_xyz, parents = [], []
    for idx in frame.box_points:
        n = len(idx)
        if n == 0:
            continue
        c, k = min(params.centers, n), min(params.k, n)
        xyz = frame.xyz[idx].astype(np.float64)
        centres = rng.choice(n, size=c, replace=False)
        _, nn = cKDTree(xyz).query(xyz[centres], k=k)
        nn = np.asarray(nn).reshape(c, k)
        nb = xyz[nn]  # (c, k, 3)
        mean = nb.mean(axis=1, keepdims=True)
        _, _, vt = np.linalg.svd(nb - mean, full_matrices=False)  # rows of vt: principal directions
        basis = vt[:, :2, :]  # (c, 2, 3) the fitted plane's in-plane directions
        uv = np.einsum("ckd,cpd->ckp", nb - mean, basis)  # neighbours in plane coordinates
        lo, hi = uv.min(axis=1, keepdims=True), uv.max(axis=1, keepdims=True)
        new_uv = lo + (hi - lo) * rng.random((c, k, 2))
        new_xyz.append((mean + np.einsum("ckp,cpd->ckd", new_uv, basis)).reshape(-1, 3))
        d2 = ((new_uv[:, :, None, :] - uv[:, None, :, :]) ** 2).sum(axis=-1)  # (c, new, neighbour)
        nearest = np.take_along_axis(nn, d2.argmin(axis=2), axis=1)
        parents.append(idx[nearest.reshape(-1)])
    if not parents:
        return frame
    parent = np.concatenate(parents)
    new = frame.points[parent].copy()
    new[:, :3] = np.concatenate(new_xyz).astype(np.float32)
    labels = {name: col[parent] for name, col in frame.labels.items() if name != "point_tag"}
    return frame.append(new, tag=PointTag.SYNTHETIC, **labels)


INCREASE_RATE = 2  # the released code samples 2 new points per neighbour ("inp_rate")


def _local_inc_obj_code(frame: Frame, params: LocalIncObjParams, rng: np.random.Generator) -> Frame:
    boxes = frame.boxes
    if boxes is None:
        return frame
    k = params.k
    icol = frame.fields.index("intensity") if "intensity" in frame.fields else None
    points = frame.points.copy()
    new_rows, sources = [], []
    for j, idx in enumerate(frame.box_points):
        n = len(idx)
        if n <= k:
            continue
        ops = min(params.centers, (n - 1) // k)
        local = to_unit(frame.xyz[idx], boxes.center[j], boxes.dims[j], boxes.heading[j])
        added, parents, inten = [], [], []
        for _ in range(ops):
            c = int(rng.integers(n))
            d = ((local - local[c]) ** 2).sum(axis=1)
            nb = np.argpartition(d, k)[:k]  # its k nearest (the centre included)
            q = local[nb]
            h = int(np.argmin(q.max(axis=0) - q.min(axis=0)))
            u, v, _ = AXES[h]
            a = np.stack([np.ones(k), q[:, u], q[:, v]], axis=1)
            w, *_ = np.linalg.lstsq(a, q[:, h], rcond=None)
            m = INCREASE_RATE * k
            nu = rng.standard_normal(m) * q[:, u].std() + q[:, u].mean()
            nv = rng.standard_normal(m) * q[:, v].std() + q[:, v].mean()
            p = np.empty((m, 3))
            p[:, u], p[:, v], p[:, h] = nu, nv, w[0] + w[1] * nu + w[2] * nv
            added.append(p)
            parents.append(np.full(m, idx[c]))
            inten.append(np.full(m, frame.intensity[idx[nb]].astype(np.float64).mean()) if icol is not None
                         else np.zeros(m))
        both = clamp_unit(np.concatenate([local, *added]))  # one shrink for originals and new points
        xyz = from_unit(both, boxes.center[j], boxes.dims[j], boxes.heading[j])
        points[idx, :3] = xyz[:n].astype(np.float32)
        src = np.concatenate(parents)
        rows = frame.points[src].copy()
        rows[:, :3] = xyz[n:].astype(np.float32)
        if icol is not None:
            rows[:, icol] = np.concatenate(inten).astype(np.float32)
        new_rows.append(rows)
        sources.append(src)
    if not sources:
        return frame
    src = np.concatenate(sources)
    labels = {name: col[src] for name, col in frame.labels.items() if name != "point_tag"}
    return frame.with_points(points).append(np.concatenate(new_rows), tag=PointTag.SYNTHETIC, **labels)
