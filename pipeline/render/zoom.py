"""Zoom insets: the corrupted object's box, its points coloured unchanged / moved / removed.

A scan with boxes zooms on the cared-for box with the most clean points. A scan without boxes whose points carry
semantic classes (SemanticKITTI) zooms on the car (`FOCUS_CLASSES`) with the most clean points by its instance id,
or without ids on the largest cluster of car points, its bounding rectangle drawn as the clean box: the objects
`incomplete_echo` thins are found by label there."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.render.raster import box_outline, f32
from bench_build.render.views import ZOOM_CHANGED, ZOOM_GONE, ZOOM_SAME, View
from bench_build.stages.frame import Boxes

INSET_FRAC = 0.45  # inset side / panel side


ZOOM_MARGIN_M = 1.25  # metres around the box in the zoom window (translation moves boxes by up to ≈ 1.3 m)


CLEAN_BOX = "clean"  # the class name under which the clean box's outline travels in a panel (drawn dashed)


FOCUS_CLASSES = ("car",)  # without boxes: the first of these semantic classes the build scores is zoomed on
CLUSTER_CELL_M = 0.5  # bird's-eye cells (m) whose 8-connected runs of such points make one object


@dataclass(frozen=True)
class Focus:
    """What a sheet's insets show: a square x/y window (m) around one object of the clean scan, the clean
    points inside it and the clean box's outline."""

    extent: tuple[float, float, float, float]
    clean: np.ndarray  # (K, 3) float64
    outline: tuple[str, np.ndarray]
    of: str = "box"  # what the window is around: "box", "instance:<class>" or "cluster:<class>" (`_label_object`)


def _in_box_counts(points: np.ndarray, boxes: Boxes) -> list[tuple[int, int]]:
    """(box index, clean points inside its BEV rectangle) of every cared-for box."""
    out = []
    for j in range(len(boxes)):
        if str(boxes.cls[j]) == "DontCare":
            continue
        heading, (length, width) = f32(boxes.heading[j]), f32(boxes.dims[j, :2])
        c, s = np.cos(heading), np.sin(heading)
        d = points[:, :2] - f32(boxes.center[j, :2])
        lu, lv = d[:, 0] * c + d[:, 1] * s, -d[:, 0] * s + d[:, 1] * c
        out.append((j, int(((np.abs(lu) <= length / 2) & (np.abs(lv) <= width / 2)).sum())))
    return out


def _label_object(clean: View, extent) -> tuple[str, np.ndarray] | None:
    """(how it was found, 5×2 closed outline of the bounding rectangle) of the object a scan without boxes zooms
    on: among its clean points of the first `FOCUS_CLASSES` class within ``extent``, the instance with the most
    points ("instance:<class>"; the smallest id of equals), or without instance ids the largest cluster
    ("cluster:<class>": 8-connected runs of `CLUSTER_CELL_M` cells that hold one; the first of equals wins). None
    with fewer than 5 such points."""
    names = list(clean.class_names)
    name = next((c for c in FOCUS_CLASSES if c in names), None)
    if clean.semantic is None or name is None:
        return None
    p = np.asarray(clean.points[:, :2], dtype=np.float64)
    x0, x1, y0, y1 = (float(e) for e in extent)
    m = ((np.asarray(clean.semantic) == names.index(name)) & (p[:, 0] >= x0) & (p[:, 0] <= x1)
         & (p[:, 1] >= y0) & (p[:, 1] <= y1))
    ids = None if clean.instance is None else np.asarray(clean.instance, dtype=np.int64)[m]
    xy = p[m]
    if ids is not None and (ids > 0).any():
        found, counts = np.unique(ids[ids > 0], return_counts=True)
        how, member = f"instance:{name}", ids == found[int(np.argmax(counts))]
    else:
        if len(xy) == 0:
            return None
        cell = np.floor((xy - xy.min(axis=0)) / CLUSTER_CELL_M).astype(np.int64)
        grid = np.zeros(tuple(cell.max(axis=0) + 1), bool)
        grid[cell[:, 0], cell[:, 1]] = True
        from scipy import ndimage  # here, not at import: ≈ 0.16 s of every worker's first task, for scans without ids

        runs, _ = ndimage.label(grid, structure=np.ones((3, 3), bool))
        label = runs[cell[:, 0], cell[:, 1]]
        how, member = f"cluster:{name}", label == int(np.argmax(np.bincount(label)))
    if member.sum() < 5:
        return None
    lo, hi = xy[member].min(axis=0), xy[member].max(axis=0)
    return how, np.array([[hi[0], hi[1]], [hi[0], lo[1]], [lo[0], lo[1]], [lo[0], hi[1]], [hi[0], hi[1]]])


def sheet_focus(clean: View, extent) -> Focus | None:
    """The zoom of a scene sheet: the cared-for box with the most clean points, or, for a scan without boxes, the
    car found by its labels (`_label_object`). None: objects, no boxes and no such labels, or every box empty."""
    if clean.is_object or extent is None:
        return None
    if clean.boxes is None or len(clean.boxes) == 0:
        found = _label_object(clean, extent)
        if found is None:
            return None
        how, outline = found
        lo, hi = outline.min(axis=0), outline.max(axis=0)
        name = how.split(":", 1)[1]
        return _window(clean, (lo + hi) / 2, float((hi - lo).max()) / 2 + ZOOM_MARGIN_M, (name, outline), how)
    counts = _in_box_counts(clean.points, clean.boxes)
    if not counts or max(n for _, n in counts) < 5:
        return None
    j = max(counts, key=lambda t: t[1])[0]  # the first of equals
    b = clean.boxes
    half = float(f32(b.dims[j, :2]).max()) / 2 + ZOOM_MARGIN_M
    return _window(clean, f32(b.center[j, :2]), half, (str(b.cls[j]), box_outline(b, j)), "box")


def _window(clean: View, centre, half: float, outline: tuple[str, np.ndarray], of: str) -> Focus:
    cx, cy = (float(v) for v in centre)
    window = (cx - half, cx + half, cy - half, cy + half)
    p = np.asarray(clean.points, dtype=np.float64)
    inside = (p[:, 0] >= window[0]) & (p[:, 0] <= window[1]) & (p[:, 1] >= window[2]) & (p[:, 1] <= window[3])
    return Focus(window, p[inside, :3].copy(), outline, of)


def _rows_in(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row of ``a`` (float64 xyz): is exactly that row in ``b``?"""
    if len(a) == 0 or len(b) == 0:
        return np.zeros(len(a), bool)
    row = np.dtype((np.void, 24))
    return np.isin(np.ascontiguousarray(a, np.float64).view(row).ravel(),
                   np.ascontiguousarray(b, np.float64).view(row).ravel())


def _occupied(xy: np.ndarray, extent, n: int) -> np.ndarray:
    """(n, n) bool: the pixels `paint` would colour for points ``xy`` (row 0 at the top)."""
    u0, u1, v0, v1 = (float(e) for e in extent)
    mask = np.zeros((n, n), bool)
    iu = np.floor((xy[:, 0] - u0) * (n / (u1 - u0))).astype(np.int64)
    iv = np.floor((v1 - xy[:, 1]) * (n / (v1 - v0))).astype(np.int64)
    ok = (iu >= 0) & (iu < n) & (iv >= 0) & (iv < n)
    mask[iv[ok], iu[ok]] = True
    return mask


def _grow(mask: np.ndarray) -> np.ndarray:
    """``mask`` and its 8 neighbours."""
    g = np.pad(mask, 1)
    out = np.zeros_like(mask)
    for dv in range(3):
        for du in range(3):
            out |= g[dv:dv + mask.shape[0], du:du + mask.shape[1]]
    return out


def inset_raster(view: View, focus: Focus, px: int) -> np.ndarray:
    """The (px, px, 3) zoom of ``view`` on ``focus``, coloured by its difference from the clean window. Painted
    at half resolution, so that every point is a 2×2 dot; a changed point or a clean point that is gone is a
    6×6 dot on top, so that the 20 points a mild `cutout_obj` deletes from a car show at a glance."""
    x0, x1, y0, y1 = focus.extent
    p = view.points
    m = (p[:, 0] >= x0) & (p[:, 0] <= x1) & (p[:, 1] >= y0) & (p[:, 1] <= y1)
    pts = np.asarray(p[m, :3], dtype=np.float64)
    same = _rows_in(pts, focus.clean)
    gone = focus.clean[~_rows_in(focus.clean, pts)]
    n = (px + 1) // 2
    small = np.full((n, n, 3), 255, np.uint8)
    for mask, color in ((_occupied(pts[same], focus.extent, n), ZOOM_SAME),
                        (_grow(_occupied(gone, focus.extent, n)), ZOOM_GONE),
                        (_grow(_occupied(pts[~same], focus.extent, n)), ZOOM_CHANGED)):
        small[mask] = np.round(np.array(color) * 255).astype(np.uint8)
    return np.repeat(np.repeat(small, 2, axis=0), 2, axis=1)[:px, :px]
