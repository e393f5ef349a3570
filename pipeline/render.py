"""Pictures of a built version: bird's-eye views of scenes, three-view scatters of objects, and the
contact sheet every card embeds (one panel per corruption × severity of the same frame).

Points are painted straight into an RGB raster (one pass in numba with a per-pixel key buffer, so
that corruption-made points — scatter, crosstalk, synthetic — and higher points land on top), then
shown with matplotlib's Agg backend, boxes drawn as outlines. Every panel of a sheet uses the extent
of the clean frame, so a corruption's effect is not hidden by a changed zoom.

Colours: by ``point_tag`` (grey unchanged, blue attenuated, orange fog/snow/rain scatter, purple
crosstalk, green jittered, red synthetic), or by height (viridis over z ∈ [−2.5, 1.5] m for scenes).
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
TAG_LEGEND = ("grey unchanged · blue attenuated · orange weather scatter · purple crosstalk · green jittered · "
              "red synthetic")
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
    out = []
    for j in range(len(boxes)):
        if str(boxes.cls[j]) == "DontCare":
            continue
        length, width = boxes.dims[j, 0], boxes.dims[j, 1]
        c, s = np.cos(boxes.heading[j]), np.sin(boxes.heading[j])
        local = np.array([[1, 1], [1, -1], [-1, -1], [-1, 1], [1, 1]]) * [length / 2, width / 2]
        rot = local @ np.array([[c, s], [-s, c]])
        out.append((str(boxes.cls[j]), rot + boxes.center[j, :2]))
    return out


# ---- drawing ---------------------------------------------------------------------------------------

def _figure(rows: int, cols: int, aspect: float, inches: float = 2.0, px: int = PANEL_PX, extra: float = 0.0):
    from matplotlib.figure import Figure  # the Agg canvas: no display, no pyplot state

    return Figure(figsize=(cols * inches * aspect, rows * inches + 0.5 + extra), dpi=px / inches)


def draw_panel(ax, view: View, *, extent=None, radius: float = 1.0, color_by: str = "tag",
               title: str | None = None, px: int = PANEL_PX) -> None:
    if view.is_object:
        ax.imshow(object_raster(view, radius, color_by, px), interpolation="nearest", aspect="equal")
    else:
        x0, x1, y0, y1 = extent
        ax.imshow(bev_raster(view, extent, color_by, px), extent=(x0, x1, y0, y1), interpolation="nearest")
        for cls, outline in box_outlines(view.boxes):
            ax.plot(outline[:, 0], outline[:, 1], color=BOX_COLORS.get(cls, "#444444"), lw=0.6)
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title or f"{view.corruption} {view.severity}", fontsize=7, pad=2)


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
    (x right, y down) by class, and the partition it shows. Small (≈ 170 kB), so a build task that holds the
    sheet's frame in memory paints its panels and hands them to the driver instead of the driver reading
    every partition file back."""

    corruption: str
    severity: int
    image: np.ndarray  # (px, px·(3 if object else 1), 3) uint8
    outlines: tuple[tuple[str, np.ndarray], ...] = ()


def sheet_extent(clean: View) -> tuple[tuple[float, float, float, float] | None, float]:
    """(scene extent, object radius) every panel of a sheet shares: the clean view's."""
    if clean.is_object:
        return None, object_extent(clean.points)
    return scene_extent(clean.points), 1.0


def make_panel(view: View, *, extent=None, radius: float = 1.0, color_by: str = "tag",
               px: int = PANEL_PX) -> Panel:
    """Paint ``view`` with the sheet's shared ``extent`` (scenes) or ``radius`` (objects)."""
    if view.is_object:
        return Panel(view.corruption, view.severity, object_raster(view, radius, color_by, px))
    x0, x1, y0, y1 = extent
    scale = np.array([px / (x1 - x0), -px / (y1 - y0)])
    outlines = tuple((cls, (o - [x0, y1]) * scale) for cls, o in box_outlines(view.boxes))
    return Panel(view.corruption, view.severity, bev_raster(view, extent, color_by, px), outlines)


def sheet_panels(views: Sequence[View], *, color_by: str = "tag") -> list[Panel]:
    """The panels of ``views``, all painted with the clean view's extent."""
    if not views:
        raise RenderError("nothing to render")
    clean = next((v for v in views if v.corruption == "clean"), views[0])
    extent, radius = sheet_extent(clean)
    return [make_panel(v, extent=extent, radius=radius, color_by=color_by) for v in views]


SHEET_GAP_PX, SHEET_TITLE_PX, SHEET_LEGEND_LINE_PX = 6, 16, 13


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


def sheet_image(panels: Sequence[Panel], *, frame_id: str, color_by: str = "tag",
                severity_names: Sequence[str] = ()) -> np.ndarray:
    """The contact sheet as an (H, W, 3) uint8 image: clean first, then one row per corruption, one column
    per severity, a title above each panel and the legend on top.

    The panels are tiled with NumPy; matplotlib (Agg) draws only the text and the box outlines (clipped to
    their panel) on a transparent layer, blended over the tiles. A figure with one Axes per panel cost
    ≈ 10 s for KITTI-C's 126 panels — serial time at the end of every build; this costs ≈ 0.5 s."""
    if not panels:
        raise RenderError(f"frame {frame_id}: nothing to render")
    import textwrap

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    corruptions, severities, cells = sheet_layout(panels)
    rows, cols = 1 + len(corruptions), len(severities)
    ph, pw = panels[0].image.shape[:2]
    is_object = pw != ph
    legend = (TAG_LEGEND if color_by == "tag" else "colour = height") + (
        "" if is_object else "; boxes: red Car, blue Pedestrian, green Cyclist")
    cell_w, cell_h = pw + SHEET_GAP_PX, ph + SHEET_TITLE_PX
    width = cols * cell_w + SHEET_GAP_PX
    legend_lines = textwrap.wrap(legend, width=max(40, int(width / 7)))
    top = SHEET_LEGEND_LINE_PX * len(legend_lines) + 8
    height = top + rows * cell_h
    canvas = np.full((height, width, 3), 255, np.uint8)
    dpi = PANEL_PX / 2.0
    fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
    fig.patch.set_alpha(0.0)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_axis_off()
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    for p in panels:
        r, k = cells[(p.corruption, p.severity)]
        x, y = SHEET_GAP_PX + k * cell_w, top + r * cell_h + SHEET_TITLE_PX
        canvas[y:y + ph, x:x + pw] = p.image
        if p.outlines:  # clipped to their panel, as one Axes per panel clipped them
            lines = LineCollection([o + np.array([x, y]) for _, o in p.outlines], linewidths=0.6,
                                   colors=[BOX_COLORS.get(cls, "#444444") for cls, _ in p.outlines])
            ax.add_collection(lines)
            lines.set_clip_path(Rectangle((x, y), pw, ph, transform=ax.transData))
        ax.text(x + pw / 2, y - 2, sheet_title(p, frame_id, severity_names), fontsize=7, ha="center", va="bottom")
    ax.text(width / 2, 4, "\n".join(legend_lines), fontsize=7, ha="center", va="top")
    agg = FigureCanvasAgg(fig)
    agg.draw()
    layer = np.asarray(agg.buffer_rgba())[:height, :width]
    drawn = layer[..., 3] > 0
    alpha = layer[..., 3][drawn].astype(np.uint16)[:, None]
    canvas[drawn] = ((canvas[drawn] * (255 - alpha) + layer[..., :3][drawn] * alpha + 127) // 255).astype(np.uint8)
    return canvas


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


def render_version(version_dir: str | Path, out: str | Path | None = None, *, frame_id: str | None = None,
                   corruption: str | None = None, severity: int | None = None, color_by: str = "tag") -> list[Path]:
    """`bench-build render`: the contact sheet (no corruption given), or one PNG per selected partition."""
    from manifests.manifest import read_manifest
    from pipeline.export import severity_names
    from pipeline.storage import LocalStore

    root = Path(version_dir)
    manifest = read_manifest(root)
    out_dir = Path(out) if out is not None else root / "renders"
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
        path = out_dir / f"contact_sheet_{frame_id}.png"
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
    extent = None if clean.is_object else scene_extent(clean.points)
    radius = object_extent(clean.points) if clean.is_object else 1.0
    written = []
    for v in views:
        if (v.corruption, v.severity) not in parts:
            continue
        fig = _figure(1, 1, 3.0 if v.is_object else 1.0, inches=6.0, px=720)
        draw_panel(fig.subplots(), v, extent=extent, radius=radius, color_by=color_by,
                   title=f"{frame_id} · {v.corruption} {v.severity}", px=720)
        fig.tight_layout(pad=0.3)
        path = out_dir / f"{frame_id}_{v.corruption}_{v.severity}.png"
        save_png(fig, path)
        written.append(path)
    return written
