"""Free-form deformation of objects (KITTI-C `ffd`, Li et al. Appendix C-B).

Every annotated object (every box except DontCare) is distorted by a free-form deformation
(Sederberg & Parry 1986, as in PyGeM's ``FFD``): an L×L×L control lattice (L = 5, trivariate
Bernstein polynomials of degree L − 1 = 4) spans the box in its own frame (origin at the box
centre, x along the heading). Each control point is displaced by U(−r, r) × the box size on each
axis, with r = 0.1, 0.2, 0.3, 0.4, 0.5 at severities 1–5, and every object point p with lattice
coordinates (s, t, u) ∈ [0, 1]³ moves by Σ B_i(s) B_j(t) B_k(u) · Δ_ijk. Because the Bernstein
weights are non-negative and sum to 1, no point moves by more than r × box size on any axis.

Decisions the paper leaves open:

* Object points are the points inside the exact oriented box (`Frame.box_index`, margin 0); the
  lattice is the annotated box itself (PyGeM's box origin and lengths set to the box).
* The label describes the corrupted object: the box keeps its heading and becomes the tightest
  box, in that heading frame, around the deformed object, i.e. around the image of the original
  box's surface (each face sampled on a 9×9 grid and mapped through the same deformation) and
  the deformed object points. It therefore encloses every deformed point (up to float32 rounding
  of the stored coordinates) and stays amodal (it describes the whole deformed box, not only the
  observed surface). Centre and dimensions change; KITTI alpha and the 2D box are recomputed
  (`refresh_camera_fields`). The paper's labels would keep the old box.
* Points of the surroundings (e.g. ground under a box whose bottom moved down) that the refitted
  box now covers are not moved.
* Displacements are drawn for every valid box in box order (L³·3 values each), also one without
  points, whose box is refitted alike.
* Intensity and extra columns are kept. max_displacement = 0 is identity.

The above is ``rule = "text"``. ``rule = "code"`` (default) follows Li et al.'s released generator,
which produced the published numbers: PyGeM's lattice is the ±1 cube of the box-normalised frame, i.e.
a cube of side max(l, w, h) around the box centre, and control displacements are U(−r, r) in lattice
units (× max(l, w, h) metres on every axis); afterwards every axis on which the object leaves its box
is squeezed back into it (the released `normalize_gt`), and the box and its label are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np

from bench_build.stages.frame import Frame
from bench_build.stages.geometry import check_rule, refresh_camera_fields
from bench_build.stages.per_box.shear import squeeze_into_boxes
from bench_build.stages.registry import stage

FACE_SAMPLES = 9  # grid size per box face used to find the extent of the deformed box


@dataclass(frozen=True)
class FFDParams:
    max_displacement: float  # control points move by U(-r, r) × box size on each axis
    lattice: int = 5  # control points per axis (Bernstein degree lattice - 1)
    rule: str = "code"  # "code": cube lattice, squeezed into the kept box (released code); "text": box lattice


def bernstein(s: np.ndarray, n_points: int) -> np.ndarray:
    """(len(s), n_points) Bernstein basis of degree n_points − 1 at s ∈ [0, 1]."""
    deg = n_points - 1
    i = np.arange(n_points)
    coef = np.array([comb(deg, int(k)) for k in i], dtype=np.float64)
    s = np.clip(np.asarray(s, dtype=np.float64), 0.0, 1.0)[:, None]
    return coef * s**i * (1.0 - s) ** (deg - i)


def ffd_displacement(unit: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Displacement, in units of the box size, of points with lattice coordinates ``unit`` (n, 3)."""
    n_ctrl = mu.shape[0]
    bx, by, bz = (bernstein(unit[:, a], n_ctrl) for a in range(3))
    w = (bx[:, :, None, None] * by[:, None, :, None] * bz[:, None, None, :]).reshape(len(unit), n_ctrl**3)
    return w @ mu.reshape(-1, 3)


def _box_surface_unit(g: int) -> np.ndarray:
    """Lattice coordinates of a g×g grid on each of the 6 faces of the unit cube."""
    a, b = np.meshgrid(np.linspace(0, 1, g), np.linspace(0, 1, g), indexing="ij")
    a, b = a.ravel(), b.ravel()
    faces = []
    for axis in range(3):
        others = [x for x in range(3) if x != axis]
        for v in (0.0, 1.0):
            f = np.empty((g * g, 3))
            f[:, axis] = v
            f[:, others[0]], f[:, others[1]] = a, b
            faces.append(f)
    return np.concatenate(faces)


@stage("ffd", params=FFDParams, version=2)  # v2: rule (code: cube lattice, squeezed into the kept box)
def ffd(frame: Frame, params: FFDParams, rng: np.random.Generator) -> Frame:
    r, n_ctrl = params.max_displacement, params.lattice
    if not r >= 0:
        raise ValueError(f"ffd: max_displacement must be ≥ 0, got {r}")
    if n_ctrl < 2:
        raise ValueError(f"ffd: lattice must have ≥ 2 control points per axis, got {n_ctrl}")
    check_rule(params.rule, "ffd")
    boxes = frame.boxes
    if boxes is None or not boxes.valid.any() or r == 0:
        return frame
    if params.rule == "code":
        return _ffd_code(frame, r, n_ctrl, rng)
    surface = _box_surface_unit(FACE_SAMPLES)

    points = frame.points.copy()
    center, dims = boxes.center.copy(), boxes.dims.copy()
    for j in np.flatnonzero(boxes.valid):
        mu = rng.uniform(-r, r, size=(n_ctrl, n_ctrl, n_ctrl, 3))
        size, heading = boxes.dims[j], boxes.heading[j]
        unit_size = np.where(size > 0, size, 1.0)  # a flat box has no lattice extent on that axis
        c, s = np.cos(heading), np.sin(heading)
        rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])  # box frame -> LiDAR frame
        idx = frame.box_points[j]
        local = (frame.xyz[idx].astype(np.float64) - boxes.center[j]) @ rot
        moved = local + ffd_displacement(local / unit_size + 0.5, mu) * size
        points[idx, :3] = (moved @ rot.T + boxes.center[j]).astype(np.float32)
        shell = (surface - 0.5 + ffd_displacement(surface, mu)) * size
        extent = np.concatenate([shell, moved])
        lo, hi = extent.min(axis=0), extent.max(axis=0)
        center[j] = boxes.center[j] + rot @ ((lo + hi) / 2)
        dims[j] = hi - lo
    new_boxes = refresh_camera_fields(boxes.replace(center=center, dims=dims), frame.calib, boxes.valid)
    return frame.with_points(points).with_boxes(new_boxes)


def _ffd_code(frame: Frame, r: float, n_ctrl: int, rng: np.random.Generator) -> Frame:
    boxes = frame.boxes
    points = frame.points.copy()
    for j in np.flatnonzero(boxes.valid):
        mu = rng.uniform(-r, r, size=(n_ctrl, n_ctrl, n_ctrl, 3))
        idx = frame.box_points[j]
        if len(idx) == 0:
            continue
        side = float(np.max(boxes.dims[j])) or 1.0  # the lattice: a cube of side max(l, w, h)
        c, s = np.cos(boxes.heading[j]), np.sin(boxes.heading[j])
        rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])  # box frame -> LiDAR frame
        local = (frame.xyz[idx].astype(np.float64) - boxes.center[j]) @ rot
        moved = local + ffd_displacement(local / side + 0.5, mu) * side
        moved = squeeze_into_boxes(moved, np.zeros(len(idx), dtype=np.int64), boxes.dims[j][None])
        points[idx, :3] = (moved @ rot.T + boxes.center[j]).astype(np.float32)
    return frame.with_points(points)
