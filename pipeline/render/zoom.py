"""Zoom insets: the corrupted object's box, its points coloured unchanged / moved / removed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.render.raster import box_outline, f32
from bench_build.render.views import ZOOM_CHANGED, ZOOM_GONE, ZOOM_SAME, View
from bench_build.stages.frame import Boxes

INSET_FRAC = 0.45  # inset side / panel side


ZOOM_MARGIN_M = 1.25  # metres around the box in the zoom window (translation moves boxes by up to ≈ 1.3 m)


CLEAN_BOX = "clean"  # the class name under which the clean box's outline travels in a panel (drawn dashed)


@dataclass(frozen=True)
class Focus:
    """What a sheet's insets show: a square x/y window (m) around one object of the clean scan, the clean
    points inside it and the clean box's outline."""

    extent: tuple[float, float, float, float]
    clean: np.ndarray  # (K, 3) float64
    outline: tuple[str, np.ndarray]


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


def sheet_focus(clean: View, extent) -> Focus | None:
    """The zoom of a scene sheet: the cared-for box with the most clean points (None: objects, no boxes, or
    every box empty)."""
    if clean.is_object or clean.boxes is None or extent is None:
        return None
    counts = _in_box_counts(clean.points, clean.boxes)
    if not counts or max(n for _, n in counts) < 5:
        return None
    j = max(counts, key=lambda t: t[1])[0]  # the first of equals
    b = clean.boxes
    half = float(f32(b.dims[j, :2]).max()) / 2 + ZOOM_MARGIN_M
    cx, cy = (float(v) for v in f32(b.center[j, :2]))
    window = (cx - half, cx + half, cy - half, cy + half)
    p = np.asarray(clean.points, dtype=np.float64)
    inside = (p[:, 0] >= window[0]) & (p[:, 0] <= window[1]) & (p[:, 1] >= window[2]) & (p[:, 1] <= window[3])
    return Focus(window, p[inside, :3].copy(), (str(b.cls[j]), box_outline(b, j)))


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
