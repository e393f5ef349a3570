"""Rasters: z-buffered top-down (BEV) and object views of a `View`, box outlines."""

from __future__ import annotations

import numba
import numpy as np

from bench_build.render.views import COLOR_BY, PANEL_PX, TAG_COLORS, RenderError, View, semantic_colors
from bench_build.stages.frame import Boxes, PointTag

_TAG_LUT: np.ndarray | None = None


def _tag_lut() -> np.ndarray:
    global _TAG_LUT
    if _TAG_LUT is None:
        _TAG_LUT = np.array([TAG_COLORS.get(PointTag(i), (0, 0, 0)) if i in PointTag._value2member_map_
                             else (0, 0, 0) for i in range(256)])
    return _TAG_LUT


def _lut8() -> np.ndarray:
    return (_tag_lut() * 255 + 0.5).astype(np.uint8)


def _colors(view: View, z: np.ndarray, color_by: str, z_range: tuple[float, float]) -> np.ndarray:
    if color_by == "tag":
        return _tag_lut()[view.tags.astype(np.uint8)]
    if color_by == "semantic":
        if view.semantic is None:
            raise RenderError(f"{view.corruption} {view.severity}: no per-point semantic labels to colour by")
        return semantic_colors(len(view.class_names))[view.semantic]
    if color_by == "height":
        from matplotlib import colormaps

        lo, hi = z_range
        return colormaps["viridis"](np.clip((z - lo) / (hi - lo), 0, 1))[:, :3]
    raise RenderError(f"color_by must be one of {', '.join(COLOR_BY)}, not {color_by!r}")


def paint(u: np.ndarray, v: np.ndarray, rgb: np.ndarray, order_key: np.ndarray,
          extent: tuple[float, float, float, float], px: int) -> np.ndarray:
    """An (px, px, 3) uint8 raster, white background, row 0 at the top (v = extent[3]). ``rgb``: colours
    in [0, 1], or already as uint8. Where points share a pixel, the one with the highest ``order_key`` is
    drawn (on equal keys the later one). u, v and the key may be any float dtype: positions are computed in
    float64, so float32 and float64 copies of the same points paint the same raster."""
    rgb = np.asarray(rgb)
    rgb8 = rgb if rgb.dtype == np.uint8 else (rgb * 255 + 0.5).astype(np.uint8)
    u0, u1, v0, v1 = (float(e) for e in extent)
    return _zbuffer(u, v, rgb8, order_key, u0, u1, v0, v1, int(px))


@numba.njit(cache=True)
def _zbuffer(u, v, rgb8, key, u0, u1, v0, v1, px):
    """`paint` in one pass over the points with a per-pixel key buffer (was: argsort of every key, ≈ 6 ms of the
    ≈ 8 ms a 130k-point panel cost)."""
    img = np.full((px * px, 3), 255, np.uint8)
    best = np.full(px * px, -np.inf)
    su = px / (u1 - u0)
    sv = px / (v1 - v0)
    for i in range(u.shape[0]):
        uu = np.float64(u[i])
        vv = np.float64(v[i])
        if not (uu >= u0 and vv <= v1):  # (also drops NaN)
            continue
        iu = int((uu - u0) * su)  # ≥ 0 here: truncation is the floor
        iv = int((v1 - vv) * sv)
        if iu >= px or iv >= px:
            continue
        p = iv * px + iu
        k = np.float64(key[i])
        if k >= best[p]:
            best[p] = k
            img[p, 0] = rgb8[i, 0]
            img[p, 1] = rgb8[i, 1]
            img[p, 2] = rgb8[i, 2]
    return img.reshape(px, px, 3)


def scene_extent(points: np.ndarray) -> tuple[float, float, float, float]:
    """x/y extent of a scene (2nd–98th percentile, padded, rounded out to 5 m; square)."""
    if len(points) == 0:
        return (-40.0, 40.0, -40.0, 40.0)
    lo = np.percentile(points[:, :2], 2, axis=0) - 2
    hi = np.percentile(points[:, :2], 98, axis=0) + 2
    lo, hi = np.floor(lo / 5) * 5, np.ceil(hi / 5) * 5
    half = max(hi - lo) / 2
    c = (lo + hi) / 2
    return (float(c[0] - half), float(c[0] + half), float(c[1] - half), float(c[1] + half))


def object_extent(points: np.ndarray) -> float:
    r = float(np.abs(points[:, :3]).max()) if len(points) else 1.0
    return max(1.0, np.ceil(r * 10) / 10)


def bev_raster(view: View, extent, color_by: str, px: int = PANEL_PX) -> np.ndarray:
    p = view.points
    if color_by == "tag":  # `paint` with colour = the tag's (LUT in uint8) and key = tag·100 + z, in one pass
        u0, u1, v0, v1 = (float(e) for e in extent)
        return _zbuffer_tags(p, np.asarray(view.tags, dtype=np.uint8), _lut8(), u0, u1, v0, v1, int(px))
    return paint(p[:, 0], p[:, 1], _colors(view, p[:, 2], color_by, (-2.5, 1.5)), p[:, 2], extent, px)


@numba.njit(cache=True)
def _zbuffer_tags(p, tags, lut8, u0, u1, v0, v1, px):
    """`_zbuffer` of x, y with colours ``lut8[tag]`` and keys tag·100 + z (later corruption tags on top)."""
    n = p.shape[0]
    rgb8 = np.empty((n, 3), np.uint8)
    key = np.empty(n)
    for i in range(n):
        t = tags[i]
        rgb8[i, 0] = lut8[t, 0]
        rgb8[i, 1] = lut8[t, 1]
        rgb8[i, 2] = lut8[t, 2]
        key[i] = np.float64(t) * 100 + np.float64(p[i, 2])
    return _zbuffer(p[:, 0], p[:, 1], rgb8, key, u0, u1, v0, v1, px)


def object_raster(view: View, radius: float, color_by: str, px: int = PANEL_PX) -> np.ndarray:
    """Three views side by side: top (x–y), front (x–z), side (y–z); (px, 3·px, 3)."""
    p = view.points
    ext = (-radius, radius, -radius, radius)
    rgb = _colors(view, p[:, 2], color_by, (-radius, radius))
    panels = []
    half = max(px // 2, 1)  # a shape has ~1,000 points: paint at half resolution, so each is a 2×2 dot
    for a, b, depth in ((0, 1, 2), (0, 2, 1), (1, 2, 0)):
        key = view.tags.astype(np.float64) * 100 + p[:, depth] if color_by == "tag" else p[:, depth]
        small = paint(p[:, a], p[:, b], rgb, key, ext, half)
        panels.append(np.repeat(np.repeat(small, 2, axis=0), 2, axis=1)[:px, :px])
    return np.concatenate(panels, axis=1)


def box_outlines(boxes: Boxes | None) -> list[tuple[str, np.ndarray]]:
    """(class, 5×2 closed BEV outline) of every cared-for box."""
    if boxes is None or len(boxes) == 0:
        return []
    return [(str(boxes.cls[j]), box_outline(boxes, j)) for j in range(len(boxes)) if str(boxes.cls[j]) != "DontCare"]


def f32(a) -> np.ndarray:
    """``a`` as the files store it (box geometry is float32 there): a sheet the build paints from memory then
    equals, byte for byte, the one `render` paints from the files, however much an inset magnifies."""
    return np.asarray(a, np.float32).astype(np.float64)


def box_outline(boxes: Boxes, j: int) -> np.ndarray:
    length, width = f32(boxes.dims[j, :2])
    heading = f32(boxes.heading[j])
    c, s = np.cos(heading), np.sin(heading)
    local = np.array([[1, 1], [1, -1], [-1, -1], [-1, 1], [1, 1]]) * [length / 2, width / 2]
    return local @ np.array([[c, s], [-s, c]]) + f32(boxes.center[j, :2])
