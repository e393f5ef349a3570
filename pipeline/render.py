"""Pictures of a built version: bird's-eye views of scenes, three-view scatters of objects, and the
contact sheet every card embeds (one panel per corruption × severity of the same frame).

Points are painted straight into an RGB raster (one pass in numba with a per-pixel key buffer, so
that corruption-made points — scatter, crosstalk, synthetic — and higher points land on top), then
shown with matplotlib's Agg backend, boxes drawn as outlines. Every panel of a sheet uses the extent
of the clean frame, so a corruption's effect is not hidden by a changed zoom.

What makes a picture readable without this file: every scene panel has a metre scale bar (the
per-partition PNGs have metric axes), a legend lists the point tags and box classes that occur (an
object build never lists weather), colour by height comes with a colour bar, object views are
labelled (top x–y, front x–z, side y–z), and every scene panel carries an inset zoomed on one object
(`Focus`) that marks what differs from the clean scan — the only way object-level corruptions show.

Colours: by ``point_tag`` (grey unchanged, blue attenuated, orange fog/snow/rain scatter, purple
crosstalk, green jittered, red synthetic), or by height (viridis over z ∈ [−2.5, 1.5] m for scenes).
Boxes: red Car, blue Pedestrian, green Cyclist, dark grey any other class.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.schema import decode_boxes, file_metadata
from stages.frame import Boxes, PointTag

PANEL_PX = 240  # raster size of one view
SHEET_NAME = "renders/contact_sheet.png"
COLOR_BY = ("tag", "height")
TAG_COLORS = {
    PointTag.CLEAN: (0.55, 0.55, 0.55),
    PointTag.ATTENUATED: (0.12, 0.47, 0.71),
    PointTag.SCATTER_FOG: (1.0, 0.5, 0.05),
    PointTag.SCATTER_SNOW: (1.0, 0.5, 0.05),
    PointTag.SCATTER_RAIN: (1.0, 0.5, 0.05),
    PointTag.CROSSTALK: (0.58, 0.4, 0.74),
    PointTag.JITTER: (0.17, 0.63, 0.17),
    PointTag.SYNTHETIC: (0.84, 0.15, 0.16),
}
BOX_COLORS = {"Car": "#d62728", "Pedestrian": "#1f77b4", "Cyclist": "#2ca02c"}


class RenderError(ValueError):
    pass


@dataclass(frozen=True)
class View:
    """One example as rendered: xyz, tags, boxes (scenes) and whether it is an object."""

    corruption: str
    severity: int
    points: np.ndarray  # (N, 3)
    tags: np.ndarray  # (N,)
    boxes: Boxes | None
    is_object: bool


# ---- rasters ---------------------------------------------------------------------------------------

_TAG_LUT: np.ndarray | None = None


def _tag_lut() -> np.ndarray:
    global _TAG_LUT
    if _TAG_LUT is None:
        _TAG_LUT = np.array([TAG_COLORS.get(PointTag(i), (0, 0, 0)) if i in PointTag._value2member_map_
                             else (0, 0, 0) for i in range(256)])
    return _TAG_LUT


def _lut8() -> np.ndarray:
    return (_tag_lut() * 255 + 0.5).astype(np.uint8)


def _colors(tags: np.ndarray, z: np.ndarray, color_by: str, z_range: tuple[float, float]) -> np.ndarray:
    if color_by == "tag":
        return _tag_lut()[tags.astype(np.uint8)]
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
    return paint(p[:, 0], p[:, 1], _colors(view.tags, p[:, 2], color_by, (-2.5, 1.5)), p[:, 2], extent, px)


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
    rgb = _colors(view.tags, p[:, 2], color_by, (-radius, radius))
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
    return [(str(boxes.cls[j]), _outline(boxes, j)) for j in range(len(boxes)) if str(boxes.cls[j]) != "DontCare"]


def _f32(a) -> np.ndarray:
    """``a`` as the files store it (box geometry is float32 there): a sheet the build paints from memory then
    equals, byte for byte, the one `render` paints from the files, however much an inset magnifies."""
    return np.asarray(a, np.float32).astype(np.float64)


def _outline(boxes: Boxes, j: int) -> np.ndarray:
    length, width = _f32(boxes.dims[j, :2])
    heading = _f32(boxes.heading[j])
    c, s = np.cos(heading), np.sin(heading)
    local = np.array([[1, 1], [1, -1], [-1, -1], [-1, 1], [1, 1]]) * [length / 2, width / 2]
    return local @ np.array([[c, s], [-s, c]]) + _f32(boxes.center[j, :2])


# ---- zoom on an object -----------------------------------------------------------------------------
# Object-level corruptions (KITTI-C's *_obj, shear, scale, rotation, translation, ffd) move a few hundred
# points by centimetres: invisible at a scene's 3 px per metre. Every BEV panel of a scene with boxes therefore
# carries an inset zoomed on one object (the box holding most clean points), coloured by what differs from
# the clean scan: a point found at exactly the same xyz in the clean window is grey, any other (moved or
# added) is black, and a clean point no longer present is pink. Exact float equality is the right test:
# stages copy the points they leave alone bit for bit, so the smallest change shows at every severity.

INSET_FRAC = 0.45  # inset side / panel side
ZOOM_MARGIN_M = 1.25  # metres around the box in the zoom window (translation moves boxes by up to ≈ 1.3 m)
ZOOM_SAME = (0.6, 0.6, 0.6)
ZOOM_CHANGED = (0.0, 0.0, 0.0)
ZOOM_GONE = (1.0, 0.55, 0.72)
CLEAN_BOX = "clean"  # the class name under which the clean box's outline travels in a panel (drawn dashed)


@dataclass(frozen=True)
class Focus:
    """What a sheet's insets show: a square x/y window (m) around one object of the clean scan, the clean
    points inside it, the clean box's outline and the panel corner (0 top-left, 1 top-right, 2 bottom-left,
    3 bottom-right) holding the inset, the one that hides the fewest clean points."""

    extent: tuple[float, float, float, float]
    clean: np.ndarray  # (K, 3) float64
    outline: tuple[str, np.ndarray]
    corner: int


def _in_box_counts(points: np.ndarray, boxes: Boxes) -> list[tuple[int, int]]:
    """(box index, clean points inside its BEV rectangle) of every cared-for box."""
    out = []
    for j in range(len(boxes)):
        if str(boxes.cls[j]) == "DontCare":
            continue
        heading, (length, width) = _f32(boxes.heading[j]), _f32(boxes.dims[j, :2])
        c, s = np.cos(heading), np.sin(heading)
        d = points[:, :2] - _f32(boxes.center[j, :2])
        lu, lv = d[:, 0] * c + d[:, 1] * s, -d[:, 0] * s + d[:, 1] * c
        out.append((j, int(((np.abs(lu) <= length / 2) & (np.abs(lv) <= width / 2)).sum())))
    return out


def corner_extent(extent, corner: int, frac: float = INSET_FRAC) -> tuple[float, float, float, float]:
    """The part of ``extent`` an inset in ``corner`` covers (world coordinates)."""
    x0, x1, y0, y1 = extent
    w, h = (x1 - x0) * frac, (y1 - y0) * frac
    left, top = corner in (0, 2), corner in (0, 1)
    return (x0 if left else x1 - w, x0 + w if left else x1, y1 - h if top else y0, y1 if top else y0 + h)


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
    half = float(_f32(b.dims[j, :2]).max()) / 2 + ZOOM_MARGIN_M
    cx, cy = (float(v) for v in _f32(b.center[j, :2]))
    window = (cx - half, cx + half, cy - half, cy + half)
    p = np.asarray(clean.points, dtype=np.float64)
    inside = (p[:, 0] >= window[0]) & (p[:, 0] <= window[1]) & (p[:, 1] >= window[2]) & (p[:, 1] <= window[3])
    outline = (str(b.cls[j]), _outline(b, j))

    centres = _f32(b.center[[j for j in range(len(b)) if str(b.cls[j]) != "DontCare"], :2])

    def cost(corner: int) -> float:  # clean points hidden; boxes weigh more, the zoomed object most
        a0, a1, b0, b1 = corner_extent(extent, corner)
        hidden = ((p[:, 0] >= a0) & (p[:, 0] <= a1) & (p[:, 1] >= b0) & (p[:, 1] <= b1)).sum()
        boxes = ((centres[:, 0] >= a0) & (centres[:, 0] <= a1) & (centres[:, 1] >= b0) & (centres[:, 1] <= b1)).sum()
        overlap = window[0] < a1 and window[1] > a0 and window[2] < b1 and window[3] > b0
        return float(hidden) + 1e6 * float(boxes) + (1e12 if overlap else 0.0)

    return Focus(window, p[inside, :3].copy(), outline, min(range(4), key=cost))


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


# ---- legends and scales ----------------------------------------------------------------------------

TAG_LABELS = {
    PointTag.CLEAN: "unchanged",
    PointTag.ATTENUATED: "attenuated",
    PointTag.SCATTER_FOG: "weather scatter (fog/snow/rain)",
    PointTag.SCATTER_SNOW: "weather scatter (fog/snow/rain)",
    PointTag.SCATTER_RAIN: "weather scatter (fog/snow/rain)",
    PointTag.CROSSTALK: "crosstalk",
    PointTag.JITTER: "jittered",
    PointTag.SYNTHETIC: "synthetic (added)",
}
SCENE_Z_RANGE = (-2.5, 1.5)  # m: the height colour map of scenes


@dataclass(frozen=True)
class LegendEntry:
    """One legend item: ``kind`` "points" (a filled square), "box" (a line) or "clean box" (a dashed line)."""

    label: str
    color: tuple[float, float, float]
    kind: str = "points"


def _hex(color: str) -> tuple[float, float, float]:
    return tuple(int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))  # type: ignore[return-value]


def legend_entries(tags: Iterable[int], classes: Iterable[str], *, color_by: str = "tag",
                   zoom: bool = False) -> list[LegendEntry]:
    """What a picture's legend lists: the point tags that occur (colour by tag only; by height a colour bar
    says it), the box classes that occur, and the zoom's colours where there is a zoom. Nothing else: an
    object build, which has no weather, never lists weather scatter."""
    out: list[LegendEntry] = []
    if color_by == "tag":
        seen = set()
        for t in sorted(set(int(t) for t in tags)):
            if t not in PointTag._value2member_map_ or TAG_LABELS[PointTag(t)] in seen:
                continue
            seen.add(TAG_LABELS[PointTag(t)])
            out.append(LegendEntry(TAG_LABELS[PointTag(t)], TAG_COLORS[PointTag(t)]))
    classes = set(classes) - {CLEAN_BOX, "DontCare"}
    out += [LegendEntry(c, _hex(col), "box") for c, col in BOX_COLORS.items() if c in classes]
    if classes - set(BOX_COLORS):
        out.append(LegendEntry("other classes", _hex(OTHER_BOX), "box"))
    if zoom:
        out += [LegendEntry("zoom: as in clean", ZOOM_SAME), LegendEntry("zoom: moved or added", ZOOM_CHANGED),
                LegendEntry("zoom: clean point gone", ZOOM_GONE), LegendEntry("zoom: clean box", (0.3, 0.3, 0.3),
                                                                               "clean box")]
    return out


def scale_bar_m(width_m: float, frac: float = 0.3) -> float:
    """The longest of 1, 2, 5 × 10^k metres that is at most ``frac`` of ``width_m``."""
    target = width_m * frac
    k = np.floor(np.log10(target))
    best = 10.0 ** k
    for m in (2, 5):
        if m * 10.0 ** k <= target:
            best = m * 10.0 ** k
    return float(round(best, 6))


def _metres(v: float) -> str:
    return f"{v:g} m"


# ---- drawing ---------------------------------------------------------------------------------------

OTHER_BOX = "#444444"
OBJECT_VIEWS = (("top", "x", "y"), ("front", "x", "z"), ("side", "y", "z"))  # object_raster's order


def _box_color(cls: str) -> str:
    return BOX_COLORS.get(cls, OTHER_BOX)


def save_png(fig, path: str | Path | None = None) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = buf.getvalue()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
    return data


@dataclass(frozen=True)
class Panel:
    """One painted cell of a contact sheet: the raster, its box outlines in the raster's pixel coordinates
    (x right, y down) by class, and the partition it shows. Small (≈ 200 kB), so a build task that holds the
    sheet's frame in memory paints its panels and hands them to the driver instead of the driver reading
    every partition file back. ``extent``: the x/y window (m) of a scene panel (its scale bar); ``tags``: the
    point tags present (its legend); ``inset``: the zoom on the sheet's `Focus`, its outlines in the inset's
    pixels (the clean box as class `CLEAN_BOX`), the window (m) and the corner it sits in."""

    corruption: str
    severity: int
    image: np.ndarray  # (px, px·(3 if object else 1), 3) uint8
    outlines: tuple[tuple[str, np.ndarray], ...] = ()
    extent: tuple[float, float, float, float] | None = None
    tags: tuple[int, ...] = ()
    inset: np.ndarray | None = None
    inset_outlines: tuple[tuple[str, np.ndarray], ...] = ()
    zoom: tuple[float, float, float, float] | None = None
    corner: int = 0


def sheet_extent(clean: View) -> tuple[tuple[float, float, float, float] | None, float]:
    """(scene extent, object radius) every panel of a sheet shares: the clean view's."""
    if clean.is_object:
        return None, object_extent(clean.points)
    return scene_extent(clean.points), 1.0


def _to_px(outline: np.ndarray, extent, px: int) -> np.ndarray:
    x0, x1, y0, y1 = extent
    return (outline - [x0, y1]) * np.array([px / (x1 - x0), -px / (y1 - y0)])


def present_tags(tags: np.ndarray) -> tuple[int, ...]:
    return tuple(int(t) for t in np.flatnonzero(np.bincount(np.asarray(tags, np.uint8), minlength=256)))


def make_panel(view: View, *, extent=None, radius: float = 1.0, color_by: str = "tag",
               px: int = PANEL_PX, focus: Focus | None = None) -> Panel:
    """Paint ``view`` with the sheet's shared ``extent`` (scenes) or ``radius`` (objects), and its zoom on
    ``focus`` (scenes with boxes)."""
    tags = present_tags(view.tags)
    if view.is_object:
        return Panel(view.corruption, view.severity, object_raster(view, radius, color_by, px), tags=tags)
    outlines = tuple((cls, _to_px(o, extent, px)) for cls, o in box_outlines(view.boxes))
    inset = zoom_outlines = None
    if focus is not None:
        side = round(px * INSET_FRAC)
        inset = inset_raster(view, focus, side)
        zoom_outlines = tuple((cls, _to_px(o, focus.extent, side)) for cls, o in
                              [(CLEAN_BOX, focus.outline[1]), *box_outlines(view.boxes)])
    return Panel(view.corruption, view.severity, bev_raster(view, extent, color_by, px), outlines,
                 tuple(float(e) for e in extent), tags, inset, zoom_outlines or (),  # type: ignore[arg-type]
                 None if focus is None else focus.extent, 0 if focus is None else focus.corner)


def sheet_panels(views: Sequence[View], *, color_by: str = "tag") -> list[Panel]:
    """The panels of ``views``, all painted with the clean view's extent and zoom."""
    if not views:
        raise RenderError("nothing to render")
    clean = next((v for v in views if v.corruption == "clean"), views[0])
    extent, radius = sheet_extent(clean)
    focus = sheet_focus(clean, extent)
    return [make_panel(v, extent=extent, radius=radius, color_by=color_by, focus=focus) for v in views]


SHEET_GAP_PX, SHEET_TITLE_PX, SHEET_LEGEND_LINE_PX = 6, 16, 15
COLORBAR_PX = (160, 9)  # the sheet's colour bar: width, height
COLORBAR_X = SHEET_GAP_PX + 140  # its left edge: its label goes left of it
LEGEND_DPI = PANEL_PX / 2.0  # the sheet's figure dpi (its pixels are the canvas's)


def sheet_layout(panels: Sequence[Panel]) -> tuple[list[str], list[int], dict[tuple[str, int], tuple[int, int]]]:
    """(corruption rows, severity columns, (corruption, severity) → (row, column)); clean alone in row 0."""
    corruptions = list(dict.fromkeys(p.corruption for p in panels if p.corruption != "clean"))
    severities = sorted({p.severity for p in panels if p.corruption != "clean"}) or [0]
    cells = {(p.corruption, p.severity): (0, 0) if p.corruption == "clean" else
             (1 + corruptions.index(p.corruption), severities.index(p.severity)) for p in panels}
    return corruptions, severities, cells


def sheet_title(panel: Panel, frame_id: str, severity_names: Sequence[str] = ()) -> str:
    if panel.corruption == "clean":
        return f"clean · frame {frame_id}"
    s = panel.severity
    name = f" ({severity_names[s - 1]})" if 0 < s <= len(severity_names) else ""
    return f"{panel.corruption} {s}{name}"


@dataclass(frozen=True)
class SheetKey:
    """What a contact sheet explains around its panels: the legend, the colour bar (label, low, high; by
    height only) and the scale bars' lengths in metres (panel, zoom; None where there is none)."""

    legend: tuple[LegendEntry, ...]
    colorbar: tuple[str, float, float] | None
    scale_m: float | None
    zoom_scale_m: float | None


def sheet_key(panels: Sequence[Panel], *, color_by: str = "tag") -> SheetKey:
    is_object = bool(panels) and panels[0].image.shape[1] != panels[0].image.shape[0]
    tags = sorted({t for p in panels for t in p.tags})
    classes = {cls for p in panels for cls, _ in p.outlines}
    zoom = any(p.inset is not None for p in panels)
    legend = legend_entries(tags, classes, color_by=color_by, zoom=zoom)
    colorbar = None
    if color_by == "height":
        colorbar = ("height z (shape units)", -1.0, 1.0) if is_object else ("height z (m)", *SCENE_Z_RANGE)
    ext = next((p.extent for p in panels if p.extent is not None), None)
    win = next((p.zoom for p in panels if p.zoom is not None), None)
    return SheetKey(tuple(legend), colorbar,  # type: ignore[arg-type]
                    None if ext is None else scale_bar_m(ext[1] - ext[0]),
                    None if win is None else scale_bar_m(win[1] - win[0], 0.45))


def _flow(entries: Sequence[LegendEntry], width: int, start: float) -> list[list[tuple[float, LegendEntry]]]:
    """Legend entries laid out left to right in lines no wider than ``width`` px (x of each entry)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    font, measure = FontProperties(size=7), TextToPath()
    lines: list[list[tuple[float, LegendEntry]]] = [[]]
    x = start
    for e in entries:
        w = 14 + measure.get_text_width_height_descent(e.label, font, ismath=False)[0] * LEGEND_DPI / 72 + 14
        if lines[-1] and x + w > width - SHEET_GAP_PX:
            lines.append([])
            x = SHEET_GAP_PX
        lines[-1].append((x, e))
        x += w
    return lines


def _corner_xy(corner: int, x: int, y: int, pw: int, ph: int, side: int, pad: int = 2) -> tuple[int, int]:
    return (x + pad if corner in (0, 2) else x + pw - side - pad, y + pad if corner in (0, 1) else y + ph - side - pad)


def sheet_image(panels: Sequence[Panel], *, frame_id: str, color_by: str = "tag",
                severity_names: Sequence[str] = ()) -> np.ndarray:
    """The contact sheet as an (H, W, 3) uint8 image: clean first, then one row per corruption, one column
    per severity, a title above each panel, a metre scale bar in each scene panel, the zoom inset where
    there is one, and the legend (and colour bar) on top.

    The panels are tiled with NumPy; matplotlib (Agg) draws only the text, the box outlines (clipped to
    their panel, around the inset) and the bars on a transparent layer, blended over the tiles. A figure
    with one Axes per panel cost ≈ 10 s for KITTI-C's 126 panels — serial time at the end of every build."""
    if not panels:
        raise RenderError(f"frame {frame_id}: nothing to render")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from matplotlib.path import Path as MPath

    corruptions, severities, cells = sheet_layout(panels)
    rows, cols = 1 + len(corruptions), len(severities)
    ph, pw = panels[0].image.shape[:2]
    is_object = pw != ph
    key = sheet_key(panels, color_by=color_by)
    cell_w, cell_h = pw + SHEET_GAP_PX, ph + SHEET_TITLE_PX
    width = max(cols * cell_w + SHEET_GAP_PX, 420)
    head = "colour: point tag · " if color_by == "tag" else ""
    lines = _flow(key.legend, width, SHEET_GAP_PX + 7 * len(head))
    bar_h = 24 if key.colorbar else 0
    top = SHEET_LEGEND_LINE_PX * len(lines) + bar_h + 8
    height = top + rows * cell_h
    canvas = np.full((height, width, 3), 255, np.uint8)
    if key.colorbar:
        from matplotlib import colormaps

        bw, bh = COLORBAR_PX
        bx, by = COLORBAR_X, top - bar_h - 2
        ramp = (colormaps["viridis"](np.linspace(0, 1, bw))[:, :3] * 255 + 0.5).astype(np.uint8)
        canvas[by:by + bh, bx:bx + bw] = ramp[None]
    dpi = LEGEND_DPI
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    fig.patch.set_alpha(0.0)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_axis_off()
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    side = round(pw * INSET_FRAC)
    segments: list = []
    colors: list = []
    for p in panels:
        r, k = cells[(p.corruption, p.severity)]
        x, y = SHEET_GAP_PX + k * cell_w, top + r * cell_h + SHEET_TITLE_PX
        canvas[y:y + ph, x:x + pw] = p.image
        ix = iy = 0
        if p.inset is not None:
            ix, iy = _corner_xy(p.corner, x, y, pw, ph, side)
            canvas[iy:iy + side, ix:ix + side] = p.inset
        if p.outlines:  # clipped to their panel, outside the inset
            lines_ = LineCollection([o + np.array([x, y]) for _, o in p.outlines], linewidths=0.6,
                                    colors=[_box_color(cls) for cls, _ in p.outlines])
            ax.add_collection(lines_)
            clip = [(x, y), (x + pw, y), (x + pw, y + ph), (x, y + ph), (x, y)]
            codes = [MPath.MOVETO, MPath.LINETO, MPath.LINETO, MPath.LINETO, MPath.CLOSEPOLY]
            if p.inset is not None:  # the inset as a hole (opposite winding)
                clip += [(ix, iy), (ix, iy + side), (ix + side, iy + side), (ix + side, iy), (ix, iy)]
                codes += codes[:5]
            lines_.set_clip_path(MPath(clip, codes), ax.transData)
        if p.inset is not None:
            zl = LineCollection([o + np.array([ix, iy]) for _, o in p.inset_outlines], linewidths=0.8,
                                colors=[(0.3, 0.3, 0.3) if c == CLEAN_BOX else _box_color(c) for c, _ in
                                        p.inset_outlines],
                                linestyles=["--" if c == CLEAN_BOX else "-" for c, _ in p.inset_outlines])
            ax.add_collection(zl)
            zl.set_clip_path(Rectangle((ix, iy), side, side, transform=ax.transData))
            segments.append([(ix, iy), (ix + side, iy), (ix + side, iy + side), (ix, iy + side), (ix, iy)])
            colors.append("black")
            if p.zoom is not None and p.extent is not None:  # where the zoom is, in the panel
                o = _to_px(np.array([[p.zoom[0], p.zoom[2]], [p.zoom[1], p.zoom[3]]]), p.extent, pw)
                (a0, b1), (a1, b0) = o + np.array([x, y])
                segments.append([(a0, b0), (a1, b0), (a1, b1), (a0, b1), (a0, b0)])
                colors.append((0.2, 0.2, 0.2))
            if key.zoom_scale_m:
                zpx = key.zoom_scale_m * side / (p.zoom[1] - p.zoom[0])  # type: ignore[index]
                segments.append([(ix + 4, iy + side - 5), (ix + 4 + zpx, iy + side - 5)])
                colors.append("black")
                ax.text(ix + 4 + zpx / 2, iy + side - 7, _metres(key.zoom_scale_m), fontsize=5, ha="center",
                        va="bottom")
        if p.extent is not None and key.scale_m:  # the metre scale: bottom right (left if the inset is there)
            spx = key.scale_m * pw / (p.extent[1] - p.extent[0])
            right = p.inset is None or p.corner != 3
            x1 = x + pw - 5 if right else x + 5 + spx
            segments.append([(x1 - spx, y + ph - 5), (x1, y + ph - 5)])
            colors.append("black")
            ax.text(x1 - spx / 2, y + ph - 7, _metres(key.scale_m), fontsize=5, ha="center", va="bottom")
        if is_object:  # which view, which axes; a light frame tells the three apart
            for v, (name, a, b) in enumerate(OBJECT_VIEWS):
                ax.text(x + v * ph + 3, y + 2, f"{name} ({a}→, {b}↑)", fontsize=5.5, ha="left", va="top",
                        color=(0.3, 0.3, 0.3))
                x0, x1 = x + v * ph + 0.5, x + (v + 1) * ph - 0.5
                segments.append([(x0, y + 0.5), (x1, y + 0.5), (x1, y + ph - 0.5), (x0, y + ph - 0.5), (x0, y + 0.5)])
                colors.append((0.82, 0.82, 0.82))
        ax.text(x + pw / 2, y - 2, sheet_title(p, frame_id, severity_names), fontsize=7, ha="center", va="bottom")
    if segments:
        ax.add_collection(LineCollection(segments, colors=colors, linewidths=0.8))
    _draw_legend(ax, lines, head, key, top - bar_h - 2)
    agg = FigureCanvasAgg(fig)
    agg.draw()
    layer = np.asarray(agg.buffer_rgba())[:height, :width]
    drawn = layer[..., 3] > 0
    alpha = layer[..., 3][drawn].astype(np.uint16)[:, None]
    canvas[drawn] = ((canvas[drawn] * (255 - alpha) + layer[..., :3][drawn] * alpha + 127) // 255).astype(np.uint8)
    return canvas


def _draw_legend(ax, lines, head: str, key: SheetKey, bar_y: float) -> None:
    from matplotlib.patches import Rectangle

    if head:
        ax.text(SHEET_GAP_PX, 4 + 5, head, fontsize=7, ha="left", va="center")
    for i, line in enumerate(lines):
        yc = 4 + 5 + i * SHEET_LEGEND_LINE_PX
        for x, e in line:
            if e.kind == "points":
                ax.add_patch(Rectangle((x, yc - 4), 9, 9, facecolor=e.color, edgecolor="none"))
            else:
                ax.plot([x - 1, x + 11], [yc, yc], color=e.color, lw=1.2, ls="--" if e.kind == "clean box" else "-")
            ax.text(x + 14, yc, e.label, fontsize=7, ha="left", va="center")
    if key.colorbar:
        label, lo, hi = key.colorbar
        bw, bh = COLORBAR_PX
        bx = COLORBAR_X
        ax.text(bx - 6, bar_y + bh / 2, f"colour: {label}", fontsize=7, ha="right", va="center")
        ax.text(bx, bar_y + bh + 1, f"{lo:g}", fontsize=6, ha="center", va="top")
        ax.text(bx + bw, bar_y + bh + 1, f"{hi:g}", fontsize=6, ha="center", va="top")
        ax.add_patch(Rectangle((bx, bar_y), bw, bh, fill=False, edgecolor="0.3", lw=0.5))


def encode_png(image: np.ndarray) -> bytes:
    from PIL import Image  # matplotlib's own dependency

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="png", compress_level=3)
    return buf.getvalue()


def contact_sheet(views: Sequence[View], *, frame_id: str, color_by: str = "tag",
                  severity_names: Sequence[str] = ()) -> tuple[bytes, float]:
    """PNG bytes of the sheet and the seconds spent per panel (painting + drawing + encoding)."""
    t0 = time.perf_counter()
    if not views:
        raise RenderError(f"frame {frame_id}: nothing to render")
    data = encode_png(sheet_image(sheet_panels(views, color_by=color_by), frame_id=frame_id, color_by=color_by,
                                  severity_names=severity_names))
    return data, (time.perf_counter() - t0) / max(len(views), 1)


def panels_sheet(panels: Sequence[Panel], *, frame_id: str, color_by: str = "tag",
                 severity_names: Sequence[str] = ()) -> tuple[bytes, float]:
    """PNG bytes of the sheet of already painted panels and the seconds spent per panel."""
    t0 = time.perf_counter()
    data = encode_png(sheet_image(panels, frame_id=frame_id, color_by=color_by, severity_names=severity_names))
    return data, (time.perf_counter() - t0) / max(len(panels), 1)

# ---- reading ---------------------------------------------------------------------------------------

def _points_xyz(column: pa.ChunkedArray | pa.Array, width: int) -> list[np.ndarray]:
    """Per-row (N, 3) xyz from a ``points`` column: flat ``list<float32>`` (row-major N×C, layout v1) or
    ``list<fixed_size_list<float32, C>>`` (layout v2)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    out = []
    for i in range(len(arr)):
        item = arr[i].values
        if pa.types.is_fixed_size_list(item.type):
            w = item.type.list_size
            flat = item.values.to_numpy(zero_copy_only=False)
        else:
            w = width
            flat = item.to_numpy(zero_copy_only=False)
        out.append(flat.reshape(-1, w)[:, :3].astype(np.float64))
    return out


def _tags(column) -> list[np.ndarray]:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    out = []
    for i in range(len(arr)):
        v = arr[i].values
        if pa.types.is_fixed_size_list(v.type):
            v = v.values
        out.append(v.to_numpy(zero_copy_only=False).astype(np.uint8))
    return out


def _rg_may_hold(pf: pq.ParquetFile, rg: int, frame_id: str) -> bool:
    idx = pf.schema_arrow.get_field_index("frame_id")
    if idx < 0:
        return True
    col = pf.metadata.row_group(rg).column(idx)
    st = col.statistics
    if st is None or not st.has_min_max:
        return True
    return st.min <= frame_id <= st.max


def _clean_xyz(store, manifest: dict[str, Any], entry: dict[str, Any], frame_id: str, width: int) -> np.ndarray:
    """xyz of ``frame_id`` in the clean file of ``entry``'s shard (what a compact-encoded row refers to)."""
    clean = next((s for s in manifest["shards"] if s["corruption"] == "clean" and s.get("shard") == entry.get("shard")),
                 None)
    if clean is None:
        raise RenderError(f"{entry['path']} is compact-encoded but its shard's clean file is not in the manifest")
    with store.open_input(clean["path"]) as f:
        t = pq.ParquetFile(f).read(columns=["frame_id", "points"])
    t = t.filter(pc.equal(t["frame_id"], frame_id))
    return _points_xyz(t["points"], width)[0]


def read_views(store, manifest: dict[str, Any], frame_id: str | None = None, *,
               partitions: Iterable[tuple[str, int]] | None = None) -> tuple[str, list[View]]:
    """The views of one frame (default: the first frame of the first shard) in every (or the given)
    partition, reading only the row groups whose statistics can hold it."""
    wanted = None if partitions is None else set(partitions)
    shards = manifest["shards"]
    if not shards:
        raise RenderError("the version has no shards")
    first_shard = shards[0].get("shard") or Path(shards[0]["path"]).stem
    views: list[View] = []
    width = len(manifest.get("fields") or ["x", "y", "z", "intensity"])
    for s in shards:
        part = (s["corruption"], int(s["severity"]))
        if wanted is not None and part not in wanted and not (part[0] == "clean" and ("clean", 0) in wanted):
            continue
        if frame_id is None and (s.get("shard") or Path(s["path"]).stem) != first_shard:
            continue
        with store.open_input(s["path"]) as f:
            pf = pq.ParquetFile(f)
            meta = file_metadata(pf.schema_arrow)
            w = len(meta.get("fields") or []) or width
            cols = [c for c in ("frame_id", "points", "point_ref", "point_tag", "boxes") if c in pf.schema_arrow.names]
            for rg in range(pf.num_row_groups):
                if frame_id is not None and not _rg_may_hold(pf, rg, frame_id):
                    continue
                t = pf.read_row_group(rg, columns=cols)
                if frame_id is None:
                    frame_id = t["frame_id"][0].as_py()
                t = t.filter(pc.equal(t["frame_id"], frame_id))
                if t.num_rows == 0:
                    continue
                pts = _points_xyz(t["points"], w)[0]
                if "point_ref" in t.column_names and t["point_ref"][0].is_valid:  # compact: refs into clean
                    from pipeline.compact import materialize

                    clean = _clean_xyz(store, manifest, s, frame_id, width)
                    ref = np.asarray(t["point_ref"][0].as_py(), dtype=np.int32)
                    pts = materialize(ref, pts.astype(np.float32), clean.astype(np.float32)).astype(np.float64)
                tags = _tags(t["point_tag"])[0] if "point_tag" in t.column_names else np.zeros(len(pts), np.uint8)
                boxes = decode_boxes(t["boxes"][0].as_py()) if "boxes" in t.column_names else None
                is_object = boxes is None and (len(pts) == 0 or float(np.abs(pts).max()) <= 5.0)
                views.append(View(part[0], part[1], pts, tags, boxes, is_object))
                break
    if not views:
        raise RenderError(f"frame {frame_id!r} is not in the requested partitions of this version")
    return frame_id, sort_views(views, manifest)  # type: ignore[return-value]


def sort_views(views, manifest: dict[str, Any]):
    """Clean first, then the recipe's corruption order, then severity (views or panels)."""
    order = {c["name"]: i for i, c in enumerate(manifest.get("recipe", {}).get("corruptions", []))}
    return sorted(views, key=lambda v: (v.corruption != "clean", order.get(v.corruption, 1 << 20), v.corruption,
                                        v.severity))


def sheet_frame(manifest: dict[str, Any]) -> str | None:
    """The frame a version's contact sheet shows by default: the first frame of its first shard."""
    shards = manifest.get("shards") or []
    if not shards:
        return None
    first = shards[0].get("shard") or Path(shards[0]["path"]).stem
    ids = (manifest.get("shard_frames") or {}).get(first)
    return ids[0] if ids else None


def write_contact_sheet(store, manifest: dict[str, Any], *, frame_id: str | None = None, color_by: str = "tag",
                        key: str = SHEET_NAME, panels: dict[tuple[str, int], Panel] | None = None,
                        ) -> dict[str, Any]:
    """Render the contact sheet of a version into ``store`` at ``key``; returns what the card says of it.

    ``panels``: the default frame's panels, painted by the build tasks that held it in memory
    (`pipeline.shard`); used when they cover every partition of the version, else the views are read
    back from the files."""
    from pipeline.export import severity_names

    names = severity_names(manifest)
    default = sheet_frame(manifest)
    parts = {(s["corruption"], int(s["severity"])) for s in manifest.get("shards", [])}
    if panels and frame_id in (None, default) and default is not None and set(panels) == parts:
        frame_id = default
        data, per_panel = panels_sheet(sort_views(panels.values(), manifest), frame_id=frame_id,
                                       color_by=color_by, severity_names=names)
        n = len(panels)
    else:
        frame_id, views = read_views(store, manifest, frame_id)
        data, per_panel = contact_sheet(views, frame_id=frame_id, color_by=color_by, severity_names=names)
        n = len(views)
    store.put_bytes(key, data)
    return {"path": key, "frame_id": frame_id, "panels": n, "seconds_per_panel": round(per_panel, 3),
            "color_by": color_by}


def _file_part(frame_id: str) -> str:
    """A frame id as part of a file name: object ids are ``<split>/<index>``, not a folder."""
    return frame_id.replace("/", "_").replace("\\", "_")


def default_render_dir(manifest: dict[str, Any]) -> Path:
    """Where `bench-build render` writes without ``--out``: ``./renders-<benchmark>-<version>`` in the current
    directory. Never the version's own ``renders/``: `publish` uploads that folder, and its manifest lists
    only the build's contact sheet."""
    name = manifest.get("dataset") or manifest.get("recipe", {}).get("name") or "version"
    return Path(f"renders-{name}-{manifest.get('version', 'unknown')}")


def view_figure(view: View, *, frame_id: str, extent=None, radius: float = 1.0, focus: Focus | None = None,
                color_by: str = "tag", px: int = 720):
    """A matplotlib Figure of one partition: a scene as a bird's-eye view with metric axes, boxes, the zoom
    inset (``focus``) and the legend; an object as its three labelled views. By height: a colour bar."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    tags = present_tags(view.tags)
    classes = [cls for cls, _ in box_outlines(view.boxes)]
    entries = legend_entries(tags, classes, color_by=color_by, zoom=focus is not None)
    handles = [Patch(facecolor=e.color, label=e.label) if e.kind == "points" else
               Line2D([], [], color=e.color, ls="--" if e.kind == "clean box" else "-", label=e.label)
               for e in entries]
    title = f"frame {frame_id} · {view.corruption} {view.severity}"
    if view.is_object:
        fig = Figure(figsize=(13.0, 4.8), dpi=100, layout="constrained")
        axes = fig.subplots(1, 3)
        opx = min(px, 320)  # ≈ 1,000 points: at 720 px the 2×2 dots would be specks
        raster = object_raster(view, radius, color_by, opx)
        for k, (ax, (name, a, b)) in enumerate(zip(axes, OBJECT_VIEWS, strict=True)):
            ax.imshow(raster[:, k * opx:(k + 1) * opx], extent=(-radius, radius, -radius, radius),
                      interpolation="nearest")
            ax.set_title(f"{name} view ({a}–{b})", fontsize=10)
            ax.set_xlabel(f"{a} (shape units)")
            ax.set_ylabel(f"{b} (shape units)")
        fig.suptitle(title, fontsize=11)
        main = axes
    else:
        fig = Figure(figsize=(10.0, 7.6), dpi=100)
        ax = fig.add_axes((0.08, 0.08, 0.62, 0.84))
        x0, x1, y0, y1 = extent
        ax.imshow(bev_raster(view, extent, color_by, px), extent=(x0, x1, y0, y1), interpolation="nearest")
        for cls, outline in box_outlines(view.boxes):
            ax.plot(outline[:, 0], outline[:, 1], color=_box_color(cls), lw=0.8)
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        ax.set_xlabel("x (m)")
        ax.set_ylabel("y (m)")
        ax.set_title(title, fontsize=11)
        if focus is not None:
            w = INSET_FRAC
            left, top = focus.corner in (0, 2), focus.corner in (0, 1)
            ins = ax.inset_axes((0.01 if left else 0.99 - w, 0.99 - w if top else 0.01, w, w))
            zx0, zx1, zy0, zy1 = focus.extent
            ins.imshow(inset_raster(view, focus, 300), extent=focus.extent, interpolation="nearest")
            ins.plot(focus.outline[1][:, 0], focus.outline[1][:, 1], color=(0.3, 0.3, 0.3), ls="--", lw=1.0)
            for cls, outline in box_outlines(view.boxes):
                ins.plot(outline[:, 0], outline[:, 1], color=_box_color(cls), lw=1.0)
            ins.set_xlim(zx0, zx1)
            ins.set_ylim(zy0, zy1)
            ins.set_xticks([])
            ins.set_yticks([])
            bar = scale_bar_m(zx1 - zx0, 0.45)
            ins.plot([zx0 + 0.04 * (zx1 - zx0), zx0 + 0.04 * (zx1 - zx0) + bar], [zy0 + 0.05 * (zy1 - zy0)] * 2,
                     color="black", lw=1.5)
            ins.text(zx0 + 0.04 * (zx1 - zx0) + bar / 2, zy0 + 0.07 * (zy1 - zy0), _metres(bar), fontsize=8,
                     ha="center", va="bottom")
            ins.set_title(f"zoom: {zx1 - zx0:.1f} m × {zy1 - zy0:.1f} m", fontsize=8, pad=2)
            ax.indicate_inset((zx0, zy0, zx1 - zx0, zy1 - zy0), ins, edgecolor="0.2", alpha=0.9)
        main = [ax]
    if color_by == "height":
        from matplotlib import colormaps
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize

        lo, hi = (-radius, radius) if view.is_object else SCENE_Z_RANGE
        fig.colorbar(ScalarMappable(Normalize(lo, hi), colormaps["viridis"]), ax=main, shrink=0.6,
                     label="height z (shape units)" if view.is_object else "height z (m)")
    if handles:
        if view.is_object:
            fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), fontsize=9,
                       frameon=False)
        else:
            fig.legend(handles=handles, loc="center left", bbox_to_anchor=(0.72, 0.5), fontsize=9,
                       title="points" + (" and boxes" if classes else ""), frameon=False)
    return fig, entries


def render_version(version_dir: str | Path, out: str | Path | None = None, *, frame_id: str | None = None,
                   corruption: str | None = None, severity: int | None = None, color_by: str = "tag") -> list[Path]:
    """`bench-build render`: the contact sheet (no corruption given), or one PNG per selected partition,
    into ``out`` (default: `default_render_dir`)."""
    from manifests.manifest import read_manifest
    from pipeline.export import severity_names
    from pipeline.storage import LocalStore

    root = Path(version_dir)
    manifest = read_manifest(root)
    out_dir = Path(out) if out is not None else default_render_dir(manifest)
    store = LocalStore(root)
    if color_by not in COLOR_BY:
        raise RenderError(f"--color-by must be one of {', '.join(COLOR_BY)}, not {color_by!r}")
    names = [c["name"] for c in manifest["recipe"].get("corruptions", [])]
    severities = int(manifest["recipe"].get("severities") or 0)
    if corruption is not None and corruption != "clean" and corruption not in names:
        raise RenderError(f"{root}: no corruption {corruption!r}; it has clean, {', '.join(names)}")
    if severity is not None and not 0 <= severity <= max(severities, 0):
        raise RenderError(f"{root}: severity {severity} is outside 0…{severities}")
    if corruption is None and severity is None:
        frame_id, views = read_views(store, manifest, frame_id)
        data, _ = contact_sheet(views, frame_id=frame_id, color_by=color_by,
                                severity_names=severity_names(manifest))
        path = out_dir / f"contact_sheet_{_file_part(frame_id)}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return [path]
    if corruption == "clean" or severity == 0:
        parts = [("clean", 0)]
    elif corruption is not None:
        parts = [(corruption, s) for s in ([severity] if severity is not None else range(1, severities + 1))]
    else:
        parts = [(c, int(severity)) for c in names]  # type: ignore[arg-type]
    frame_id, views = read_views(store, manifest, frame_id, partitions=[*parts, ("clean", 0)])
    clean = next((v for v in views if v.corruption == "clean"), views[0])
    extent, radius = sheet_extent(clean)
    focus = sheet_focus(clean, extent)
    written = []
    for v in views:
        if (v.corruption, v.severity) not in parts:
            continue
        fig, _ = view_figure(v, frame_id=frame_id, extent=extent, radius=radius, focus=focus, color_by=color_by)
        path = out_dir / f"{_file_part(frame_id)}_{v.corruption}_{v.severity}.png"
        save_png(fig, path)
        written.append(path)
    return written
