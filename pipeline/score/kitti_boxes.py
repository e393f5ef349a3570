"""KITTI ``label_2`` boxes: parsing label and result files, and their overlaps (IoU in 3D and bird's-eye view).

Overlaps are computed in the rectified camera frame as the official devkit does: BEV polygons in the x–z
plane (shapely), and for 3D the BEV intersection times the overlap along camera y (boxes extend from y − h
to y). `frame_overlaps` computes the overlaps of all frames in one batch; `box_overlaps` is one frame's, the
reference it is tested against. The evaluation that matches these boxes is `kitti_eval`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import shapely

from bench_build.errors import BenchBuildError


class KittiFormatError(BenchBuildError, ValueError):
    pass


#: the fields of a ``label_2`` / result line, in order (a result line adds the score)
FIELDS = ("type", "truncated", "occluded", "alpha", "bbox left", "bbox top", "bbox right", "bbox bottom", "height",
          "width", "length", "x", "y", "z", "rotation_y", "score")


@dataclass(frozen=True)
class KittiObjects:
    """The objects of one frame in KITTI ``label_2`` convention (rectified camera frame)."""

    name: np.ndarray  # (M,) str
    truncated: np.ndarray  # (M,)
    occluded: np.ndarray  # (M,)
    alpha: np.ndarray  # (M,)
    bbox: np.ndarray  # (M, 4) left, top, right, bottom
    hwl: np.ndarray  # (M, 3) height, width, length
    location: np.ndarray  # (M, 3) bottom centre x, y, z
    rotation_y: np.ndarray  # (M,)
    score: np.ndarray  # (M,) (ground truth: 0)

    def __len__(self) -> int:
        return len(self.name)


def parse_kitti_objects(text: str, where: str, *, need_score: bool) -> KittiObjects:
    """Parse ``label_2`` / result text (15 fields, 16 with a score). Errors name ``where`` and the line."""
    rows: list[list[str]] = []
    linenos: list[int] = []  # each row's line in the file (blank lines are skipped)
    for lineno, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) not in (15, 16) or (need_score and len(parts) != 16):
            want = "16 (15 label fields + score)" if need_score else "15 or 16"
            raise KittiFormatError(f"{where}: line {lineno}: {len(parts)} fields, expected {want}")
        rows.append(parts)
        linenos.append(lineno)
    if not rows:
        z = np.zeros(0)
        return KittiObjects(np.zeros(0, dtype=object), z, z, z, np.zeros((0, 4)), np.zeros((0, 3)),
                            np.zeros((0, 3)), z, z)
    try:
        num = np.array([[float(v) for v in r[1:]] + ([0.0] if len(r) == 15 else []) for r in rows])
    except ValueError:
        i, k = next((i, k) for i, r in enumerate(rows) for k in range(1, len(r)) if not _is_float(r[k]))
        raise KittiFormatError(f"{where}: line {linenos[i]}: field {k + 1} ({FIELDS[k]}) is {rows[i][k]!r}, "
                               "not a number") from None
    bad = ~np.isfinite(num).all(axis=1)
    if bad.any():
        raise KittiFormatError(f"{where}: line {linenos[int(np.nonzero(bad)[0][0])]}: NaN/inf value")
    return KittiObjects(
        name=np.array([r[0] for r in rows], dtype=object), truncated=num[:, 0], occluded=num[:, 1],
        alpha=num[:, 2], bbox=num[:, 3:7], hwl=num[:, 7:10], location=num[:, 10:13], rotation_y=num[:, 13],
        score=num[:, 14],
    )


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_kitti_objects(path: Path, *, need_score: bool) -> KittiObjects:
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise KittiFormatError(f"{path}: not UTF-8 text (byte {e.start}); KITTI result files are text") from None
    return parse_kitti_objects(text, str(path), need_score=need_score)


# ---- overlaps -----------------------------------------------------------------------------------

def bev_polygons(obj: KittiObjects) -> np.ndarray:
    """Footprints in the camera x–z plane (length along x at rotation_y = 0, width along z)."""
    w, length = obj.hwl[:, 1], obj.hwl[:, 2]
    xc = np.stack([length, length, -length, -length], 1) / 2
    zc = np.stack([w, -w, -w, w], 1) / 2
    c, s = np.cos(obj.rotation_y)[:, None], np.sin(obj.rotation_y)[:, None]
    x = obj.location[:, 0:1] + c * xc + s * zc
    z = obj.location[:, 2:3] - s * xc + c * zc
    return shapely.polygons(np.stack([x, z], axis=-1))


def box_overlaps(dt: KittiObjects, gt: KittiObjects, metric: str) -> np.ndarray:
    """IoU matrix (detections × ground truth), ``metric`` ``bev`` or ``3d``."""
    if len(dt) == 0 or len(gt) == 0:
        return np.zeros((len(dt), len(gt)))
    pd, pg = bev_polygons(dt), bev_polygons(gt)
    inter = shapely.area(shapely.intersection(pd[:, None], pg[None, :]))
    area_d = dt.hwl[:, 1] * dt.hwl[:, 2]
    area_g = gt.hwl[:, 1] * gt.hwl[:, 2]
    if metric == "bev":
        union = area_d[:, None] + area_g[None, :] - inter
    elif metric == "3d":
        yd, yg = dt.location[:, 1], gt.location[:, 1]
        hd, hg = dt.hwl[:, 0], gt.hwl[:, 0]
        iw = np.minimum(yd[:, None], yg[None, :]) - np.maximum((yd - hd)[:, None], (yg - hg)[None, :])
        inter = inter * np.clip(iw, 0, None)
        union = (area_d * hd)[:, None] + (area_g * hg)[None, :] - inter
    else:
        raise ValueError(f"metric must be 'bev' or '3d', not {metric!r}")
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, inter / union, 0.0)
    return iou


def concat_objects(frames: Sequence[KittiObjects]) -> KittiObjects:
    """All frames' objects as one `KittiObjects` (frame boundaries are the cumulative lengths)."""
    if not frames:
        return parse_kitti_objects("", "", need_score=False)
    return KittiObjects(*(np.concatenate([getattr(f, k) for f in frames])
                          for k in KittiObjects.__dataclass_fields__))


@dataclass(frozen=True)
class FrameOverlaps:
    """The IoU matrices (detections × ground truth) of every frame, flattened frame after frame, each matrix
    row-major; frame ``f``'s is ``flat[off[f]:off[f + 1]].reshape(n_dt[f], n_gt[f])``."""

    flat: np.ndarray
    off: np.ndarray


def frame_overlaps(dt: Sequence[KittiObjects], gt: Sequence[KittiObjects],
                   metrics: Sequence[str] = ("3d", "bev")) -> dict[str, FrameOverlaps]:
    """`box_overlaps` of every frame pair at once, for each of ``metrics``.

    Elementwise the same arithmetic as `box_overlaps` (the same shapely intersection per pair, the same union
    expressions; a test checks the results are bit-identical), batched over all frames so a 7,481-frame
    partition is a few array operations instead of 7,481 small ones, and the BEV intersection is computed once
    for both metrics. Pairs whose footprints' axis-aligned bounding boxes are apart cannot intersect: they get
    the exact 0 the intersection would give and skip GEOS.
    """
    return batched_overlaps(concat_objects(dt), concat_objects(gt), np.array([len(d) for d in dt], np.int64),
                     np.array([len(g) for g in gt], np.int64), metrics)


def pair_index(n_dt: np.ndarray, n_gt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every entry of a `FrameOverlaps`' ``flat``: its detection and ground-truth box, as indices into all
    frames' objects concatenated (frame ``f`` has ``n_dt[f]`` detections and ``n_gt[f]`` boxes)."""
    sizes = n_dt * n_gt
    off = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    d_off = np.r_[0, np.cumsum(n_dt)].astype(np.int64)
    g_off = np.r_[0, np.cumsum(n_gt)].astype(np.int64)
    frame = np.repeat(np.arange(len(sizes)), sizes)
    local = np.arange(int(off[-1]), dtype=np.int64) - off[frame]
    return d_off[frame] + local // n_gt[frame], g_off[frame] + local % n_gt[frame]


def _half_extents(obj: KittiObjects) -> tuple[np.ndarray, np.ndarray]:
    c, s = np.abs(np.cos(obj.rotation_y)), np.abs(np.sin(obj.rotation_y))
    w, length = np.abs(obj.hwl[:, 1]), np.abs(obj.hwl[:, 2])
    return (c * length + s * w) / 2, (s * length + c * w) / 2


def batched_overlaps(d: KittiObjects, g: KittiObjects, n_dt: np.ndarray, n_gt: np.ndarray,
                     metrics: Sequence[str]) -> dict[str, FrameOverlaps]:
    """`frame_overlaps` of frames already concatenated (`concat_objects`): frame ``f`` holds ``n_dt[f]`` of the
    detections ``d`` and ``n_gt[f]`` of the boxes ``g``, in order."""
    for m in metrics:
        if m not in ("bev", "3d"):
            raise ValueError(f"metric must be 'bev' or '3d', not {m!r}")
    sizes = n_dt * n_gt
    off = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    total = int(off[-1])
    if total == 0:
        return {m: FrameOverlaps(np.zeros(0), off) for m in metrics}
    di, gi = pair_index(n_dt, n_gt)
    # a relative and an absolute margin keep the rounding of the extents on the safe (GEOS) side
    exd, ezd = _half_extents(d)
    exg, ezg = _half_extents(g)
    near = ((np.abs(d.location[di, 0] - g.location[gi, 0]) <= (exd[di] + exg[gi]) * (1 + 1e-9) + 1e-9)
            & (np.abs(d.location[di, 2] - g.location[gi, 2]) <= (ezd[di] + ezg[gi]) * (1 + 1e-9) + 1e-9))
    inter_bev = np.zeros(total)
    if near.any():
        ud, id_ = np.unique(di[near], return_inverse=True)
        ug, ig = np.unique(gi[near], return_inverse=True)
        pd, pg = bev_polygons(_take(d, ud)), bev_polygons(_take(g, ug))
        inter_bev[near] = shapely.area(shapely.intersection(pd[id_], pg[ig]))
    area_d = d.hwl[:, 1] * d.hwl[:, 2]
    area_g = g.hwl[:, 1] * g.hwl[:, 2]
    out = {}
    for m in metrics:
        if m == "bev":
            inter = inter_bev
            union = area_d[di] + area_g[gi] - inter
        else:
            yd, yg = d.location[di, 1], g.location[gi, 1]
            hd, hg = d.hwl[di, 0], g.hwl[gi, 0]
            iw = np.minimum(yd, yg) - np.maximum(yd - hd, yg - hg)
            inter = inter_bev * np.clip(iw, 0, None)
            union = (area_d * d.hwl[:, 0])[di] + (area_g * g.hwl[:, 0])[gi] - inter
        with np.errstate(invalid="ignore", divide="ignore"):
            out[m] = FrameOverlaps(np.where(union > 0, inter / union, 0.0), off)
    return out


def _take(obj: KittiObjects, idx: np.ndarray) -> KittiObjects:
    return KittiObjects(*(getattr(obj, k)[idx] for k in KittiObjects.__dataclass_fields__))
