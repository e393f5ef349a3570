"""Frame-level geometry shared by the stages: boxes of a `Frame`, KITTI camera fields, neighbourhoods of a
frame's points and the ``rule`` switch (released code vs paper text). The array arithmetic underneath is in
`bench_build.stages.kernels`."""

from __future__ import annotations

import numpy as np

from bench_build.stages.frame import Boxes, Calib, Frame
from bench_build.stages.kernels.boxes import points_in_boxes
from bench_build.stages.kernels.grid_knn import sequential_ops
from bench_build.stages.kernels.neighbours import query_in_spatial_order
from bench_build.stages.kernels.spherical import wrap_angle

RULES = ("code", "text")


def assign_points_to_boxes(xyz: np.ndarray, boxes: Boxes, margin: float = 0.0) -> np.ndarray:
    """Index of the first valid (non-DontCare) box of ``boxes`` containing each point, or -1
    (`bench_build.stages.kernels.boxes.points_in_boxes`)."""
    return points_in_boxes(xyz, boxes.center, boxes.dims, boxes.heading, boxes.valid, margin)


def check_rule(rule: str, stage: str) -> None:
    if rule not in RULES:
        raise ValueError(f"{stage}: rule must be one of {RULES}, got {rule!r}")


def range_factor(rule: str, stage: str) -> float:
    """Li et al.'s released range-noise code multiplies every drawn range change by √3 (Appendix C-A
    states the values without it): √3 for ``rule = "code"``, 1 for ``"text"``."""
    check_rule(rule, stage)
    return float(np.sqrt(3.0)) if rule == "code" else 1.0


IMAGE_SIZE = (1242.0, 375.0)  # KITTI image width, height (px), used to clip re-projected 2D boxes


def refresh_camera_fields(boxes: Boxes, calib: Calib | None, changed: np.ndarray) -> Boxes:
    """Recompute KITTI's image-side fields of boxes whose 3D geometry a stage changed.

    ``alpha`` follows from the new location and heading exactly; ``bbox2d`` becomes the image
    rectangle of the projected 3D box corners, clipped to the image (the original hand-drawn 2D box
    no longer describes the moved object). Without a calibration the fields are left as they were.
    """
    changed = np.asarray(changed, dtype=bool)
    if calib is None or not changed.any():
        return boxes
    idx = np.flatnonzero(changed)
    sub = boxes.replace(
        center=boxes.center[idx],
        dims=boxes.dims[idx],
        heading=boxes.heading[idx],
        cls=boxes.cls[idx],
        truncated=boxes.truncated[idx],
        occluded=boxes.occluded[idx],
        alpha=boxes.alpha[idx],
        bbox2d=boxes.bbox2d[idx],
    )
    rect_center = calib.lidar_to_rect(sub.center)
    rot_y = lidar_heading_to_rot_y(sub.heading, calib)
    alpha = boxes.alpha.copy()
    alpha[idx] = wrap_angle(rot_y - np.arctan2(rect_center[:, 0], rect_center[:, 2]))
    bbox2d = boxes.bbox2d.copy()
    corners = calib.lidar_to_rect(sub.corners().reshape(-1, 3)).reshape(-1, 8, 3)
    for k, j in enumerate(idx):
        if np.all(corners[k, :, 2] > 0.1):
            uv = calib.project_rect(corners[k])
            lo = np.clip(uv.min(axis=0), 0, np.array(IMAGE_SIZE) - 1)
            hi = np.clip(uv.max(axis=0), 0, np.array(IMAGE_SIZE) - 1)
            bbox2d[j] = [lo[0], lo[1], hi[0], hi[1]]
    return boxes.replace(alpha=alpha, bbox2d=bbox2d)


def lidar_heading_to_rot_y(heading: np.ndarray, calib: Calib) -> np.ndarray:
    """KITTI rotation_y (about the camera's y axis) of a LiDAR-frame yaw, through the calibration."""
    d = np.stack([np.cos(heading), np.sin(heading), np.zeros_like(heading)], axis=1)
    d_rect = d @ calib.velo_to_rect[:3, :3].T
    return wrap_angle(-np.arctan2(d_rect[:, 2], d_rect[:, 0]))


def rot_y_to_lidar_heading(rot_y: np.ndarray, calib: Calib) -> np.ndarray:
    """Inverse of `lidar_heading_to_rot_y`."""
    d_rect = np.stack([np.cos(rot_y), np.zeros_like(rot_y), -np.sin(rot_y)], axis=1)
    d = d_rect @ calib.rect_to_velo[:3, :3].T
    return np.arctan2(d[:, 1], d[:, 0])


def random_neighbourhoods(frame: Frame, count_divisor: float, k: int, rng: np.random.Generator) -> np.ndarray | None:
    """⌊N / count_divisor⌋ random centres (without replacement) and each centre's k nearest points.

    Returns the (centres, k) neighbour indices (each centre first), or None when there is nothing
    to do (zero centres or k = 0). k is clipped to N. Neighbours come from the frame's cached KD-tree
    over the original scan, so cutout, local_dec and local_inc share one tree per frame.
    """
    if not count_divisor > 0:
        raise ValueError(f"count_divisor must be > 0, got {count_divisor}")
    if k < 0:
        raise ValueError(f"k must be ≥ 0, got {k}")
    n = len(frame)
    n_centres = 0 if np.isinf(count_divisor) else min(n, int(n // count_divisor))
    k = min(k, n)
    if n_centres == 0 or k == 0:
        return None
    centres = rng.choice(n, size=n_centres, replace=False)
    return query_in_spatial_order(frame.kdtree, frame.xyz[centres], k)[1]


def mean_intensity_of_nearest(frame: Frame, xyz: np.ndarray, k: int = 5, near: float | None = None) -> np.ndarray:
    """Mean intensity of each query point's k nearest points of ``frame`` (Li et al.'s released code fills
    the intensity of every point it adds this way: background, upsample); ``near`` as in
    `query_in_spatial_order`."""
    k = min(k, len(frame))
    _, nn = query_in_spatial_order(frame.kdtree, xyz, k, near)
    return frame.intensity.astype(np.float64)[nn].mean(axis=1)


# the schedule of the centre draws (kept from the KD-tree implementation, whose trees were rebuilt on the
# survivors whenever fewer than _REBUILD of their points remained): it fixes the rng stream and so the output
_REBUILD = 0.6


def remove_neighbourhoods_sequentially(frame: Frame, n_ops: int, k: int, n_drop: int,
                                       rng: np.random.Generator) -> np.ndarray:
    """Boolean keep-mask after ``n_ops`` operations, one after another on the shrinking cloud, each of
    which picks a centre uniformly among the points still present, takes its ``k`` nearest present
    points (itself included, in increasing distance) and deletes a random ``n_drop`` of them (all k when
    n_drop ≥ k).

    This is the rule of Li et al.'s released `cutout` / `density_dec` (scene level), computed without
    their O(N) scan per operation: one static grid over the original scan, searched with the deletion
    mask (`bench_build.stages.kernels.grid_knn`, exact k nearest present points), and a uniform centre among the present
    points is a uniform draw over all points, redrawn while it hits a deleted one. Centres are drawn in
    chunks whose sizes depend only on the counts of deleted points (the schedule of the earlier KD-tree
    implementation, kept so the same rng gives the same bytes).
    """
    n = len(frame)
    keep = np.ones(n, dtype=bool)
    if n_ops <= 0 or k <= 0 or n_drop <= 0 or n == 0:
        return keep
    xyz, grid = frame.deletion_grid  # built once per frame: cutout and local_dec at every severity share it
    n_drop = min(n_drop, k)
    # an independent random n_drop-subset of the k slots of every operation, drawn at once: the slots of
    # the n_drop smallest of k uniforms (a partition finds the same set as a full argsort, faster)
    subsets = np.argpartition(rng.random((n_ops, k)), n_drop - 1, axis=1)[:, :n_drop] if n_drop < k else None
    sub = np.zeros((0, 0), dtype=np.int64) if subsets is None else np.ascontiguousarray(subsets, dtype=np.int64)
    n_ids = n  # survivors when the schedule last "rebuilt"
    present = n
    op = 0
    while op < n_ops and present > 0:
        if present < _REBUILD * n_ids:
            n_ids = present
        # candidate centres for the next operations, uniform over all points; deleted ones are skipped
        ops_ahead = min(n_ops - op, int((present - _REBUILD * n_ids) / n_drop) + 1)
        chunk = min(4096, int(ops_ahead * n / present * 1.1) + 4)
        cand = rng.integers(0, n, size=chunk)
        cand = np.ascontiguousarray(cand[keep[cand]], dtype=np.int64)
        op, present = sequential_ops(xyz, cand, keep, sub, subsets is not None, op, n_ops, k, n_drop, present,
                                      _REBUILD * n_ids, *grid.args())
    return keep
