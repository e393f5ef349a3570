"""Vectorised geometry shared by the stages: spherical coordinates and points-in-box tests."""

from __future__ import annotations

import numba
import numpy as np

from stages.frame import Boxes, Calib


def to_spherical(xyz: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(range, azimuth, elevation) of sensor-frame points; azimuth = atan2(y, x), elevation = asin(z/r)."""
    xyz = np.asarray(xyz, dtype=np.float64)
    r = np.linalg.norm(xyz, axis=1)
    az = np.arctan2(xyz[:, 1], xyz[:, 0])
    with np.errstate(invalid="ignore", divide="ignore"):
        el = np.where(r > 0, np.arcsin(np.clip(xyz[:, 2] / np.where(r > 0, r, 1.0), -1.0, 1.0)), 0.0)
    return r, az, el


def from_spherical(r: np.ndarray, az: np.ndarray, el: np.ndarray) -> np.ndarray:
    cos_el = np.cos(el)
    return np.stack([r * cos_el * np.cos(az), r * cos_el * np.sin(az), r * np.sin(el)], axis=1)


def scale_range(xyz: np.ndarray, new_range: np.ndarray) -> np.ndarray:
    """Move each point along its own ray to ``new_range`` (points at the origin stay there).

    Equivalent to converting to spherical coordinates, changing r and converting back, without
    the trigonometry round trip. A negative new range flips the point through the sensor, as the
    spherical formula would.
    """
    xyz = np.asarray(xyz, dtype=np.float64)
    r = np.linalg.norm(xyz, axis=1)
    factor = np.divide(new_range, r, out=np.ones_like(r), where=r > 0)
    return xyz * factor[:, None]


RULES = ("code", "text")


def check_rule(rule: str, stage: str) -> None:
    if rule not in RULES:
        raise ValueError(f"{stage}: rule must be one of {RULES}, got {rule!r}")


def range_factor(rule: str, stage: str) -> float:
    """Li et al.'s released range-noise code multiplies every drawn range change by √3 (Appendix C-A
    states the values without it): √3 for ``rule = "code"``, 1 for ``"text"``."""
    check_rule(rule, stage)
    return float(np.sqrt(3.0)) if rule == "code" else 1.0


def points_in_box_frame(xyz: np.ndarray, center: np.ndarray, heading: float) -> np.ndarray:
    """Coordinates of points in a box's local frame (origin at its centre, x along its heading)."""
    d = np.asarray(xyz, dtype=np.float64) - center
    c, s = np.cos(heading), np.sin(heading)
    return np.stack([d[:, 0] * c + d[:, 1] * s, -d[:, 0] * s + d[:, 1] * c, d[:, 2]], axis=1)


def assign_points_to_boxes(xyz: np.ndarray, boxes: Boxes, margin: float = 0.0) -> np.ndarray:
    """Index of the first valid (non-DontCare) box containing each point, or -1.

    A point is inside when |local coordinate| ≤ half the box size + ``margin`` on every axis, in
    the box's own oriented frame (the exact oriented box for margin 0). Points in overlapping boxes
    belong to the first box, so no point is moved twice by an object-level stage.

    One pass over the points in numba (the per-box numpy passes cost ≈ 30 ms on a 130k-point KITTI scan,
    and the per-frame box index is rebuilt by every task of a split block); the arithmetic is
    `points_in_box_frame`'s, with each box's cos/sin taken by numpy as before, so the result is the same.
    """
    xyz = np.asarray(xyz)
    if xyz.ndim != 2 or xyz.shape[1] != 3:
        raise ValueError(f"assign_points_to_boxes: xyz must be (N, 3), got {xyz.shape}")
    if xyz.dtype not in (np.float32, np.float64):
        xyz = xyz.astype(np.float64)
    keep = np.flatnonzero(boxes.valid)
    half = np.asarray(boxes.dims, dtype=np.float64)[keep] / 2 + margin
    radius = np.array([float(np.linalg.norm(h)) for h in half])
    heading = np.asarray(boxes.heading, dtype=np.float64)
    cos_sin = np.array([[np.cos(heading[j]), np.sin(heading[j])] for j in keep]).reshape(-1, 2)
    center = np.ascontiguousarray(np.asarray(boxes.center, dtype=np.float64)[keep])
    return _assign(xyz, center, np.ascontiguousarray(half), radius, cos_sin, keep.astype(np.int64))


@numba.njit(cache=True)
def _assign(xyz, center, half, radius, cos_sin, ids):
    out = np.full(xyz.shape[0], -1, np.int64)
    for i in range(xyz.shape[0]):
        x = np.float64(xyz[i, 0])
        y = np.float64(xyz[i, 1])
        z = np.float64(xyz[i, 2])
        for k in range(ids.shape[0]):
            dx = x - center[k, 0]
            dy = y - center[k, 1]
            dz = z - center[k, 2]
            r = radius[k]
            # written as "not within" so that NaN coordinates are never inside, as in the numpy form
            if not (abs(dx) <= r and abs(dy) <= r and abs(dz) <= r):
                continue
            c = cos_sin[k, 0]
            s = cos_sin[k, 1]
            lx = dx * c + dy * s
            ly = -dx * s + dy * c
            if abs(lx) <= half[k, 0] and abs(ly) <= half[k, 1] and abs(dz) <= half[k, 2]:
                out[i] = ids[k]
                break
    return out


def wrap_angle(a: np.ndarray) -> np.ndarray:
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi


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


def random_neighbourhoods(frame, count_divisor: float, k: int, rng: np.random.Generator) -> np.ndarray | None:
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


def mean_intensity_of_nearest(frame, xyz: np.ndarray, k: int = 5, near: float | None = None) -> np.ndarray:
    """Mean intensity of each query point's k nearest points of ``frame`` (Li et al.'s released code fills
    the intensity of every point it adds this way: background, upsample); ``near`` as in
    `query_in_spatial_order`."""
    k = min(k, len(frame))
    _, nn = query_in_spatial_order(frame.kdtree, xyz, k, near)
    return frame.intensity.astype(np.float64)[nn].mean(axis=1)


# the schedule of the centre draws (kept from the KD-tree implementation, whose trees were rebuilt on the
# survivors whenever fewer than _REBUILD of their points remained): it fixes the rng stream and so the output
_REBUILD = 0.6


DELETION_GRID_CELL = 0.4  # metres: the x–y cell of the sequential deletions' search grid (`Frame.deletion_grid`)


def remove_neighbourhoods_sequentially(frame, n_ops: int, k: int, n_drop: int,
                                       rng: np.random.Generator) -> np.ndarray:
    """Boolean keep-mask after ``n_ops`` operations, one after another on the shrinking cloud, each of
    which picks a centre uniformly among the points still present, takes its ``k`` nearest present
    points (itself included, in increasing distance) and deletes a random ``n_drop`` of them (all k when
    n_drop ≥ k).

    This is the rule of Li et al.'s released `cutout` / `density_dec` (scene level), computed without
    their O(N) scan per operation: one static grid over the original scan, searched with the deletion
    mask (`stages.grid_knn`, exact k nearest present points), and a uniform centre among the present
    points is a uniform draw over all points, redrawn while it hits a deleted one. Centres are drawn in
    chunks whose sizes depend only on the counts of deleted points (the schedule of the earlier KD-tree
    implementation, kept so the same rng gives the same bytes).
    """
    n = len(frame)
    keep = np.ones(n, dtype=bool)
    if n_ops <= 0 or k <= 0 or n_drop <= 0 or n == 0:
        return keep
    from stages.grid_knn import _sequential_ops

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
        op, present = _sequential_ops(xyz, cand, keep, sub, subsets is not None, op, n_ops, k, n_drop, present,
                                      _REBUILD * n_ids, *grid.args())
    return keep
