"""The contact sheet: panels tiled by corruption × severity with titles, legend, scale and colour bar."""

from __future__ import annotations

import importlib
import io
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench_build.render.legend import SCENE_Z_RANGE, LegendEntry, legend_entries, metres, scale_bar_m
from bench_build.render.panels import OBJECT_VIEWS, Panel, box_color, sheet_panels, to_px
from bench_build.render.views import PANEL_PX, RenderError, View
from bench_build.render.zoom import CLEAN_BOX, INSET_FRAC

SHEET_GAP_PX, SHEET_TITLE_PX, SHEET_LEGEND_LINE_PX = 6, 16, 15
#: white above each row's titles, so a title sits nearer its own panel than the scale bar of the row above it
SHEET_ROW_GAP_PX = 10


ZOOM_SCALE_PT = 5  # the zoom inset's scale label
INSET_GAP_PX = 4  # between a scene panel and its zoom inset, which has a column of its own right of the panel
COLORBAR_PX = (160, 9)  # the sheet's colour bar: width, height


COLORBAR_X = SHEET_GAP_PX + 140  # its left edge: its label goes left of it


LEGEND_DPI = PANEL_PX / 2.0  # the sheet's figure dpi (its pixels are the canvas's)


def sheet_layout(panels: Sequence[Panel]) -> tuple[list[str], list[int], dict[tuple[str, int], tuple[int, int]]]:
    """(corruption rows, severity columns, (corruption, severity) → (row, column)); clean alone in row 0. The
    rows and columns are those of the panels there are: without a clean panel (a partial pull) the first
    corruption is row 0, and only the severities present are columns."""
    corruptions = list(dict.fromkeys(p.corruption for p in panels if p.corruption != "clean"))
    severities = sorted({p.severity for p in panels if p.corruption != "clean"}) or [0]
    first = 1 if any(p.corruption == "clean" for p in panels) else 0
    cells = {(p.corruption, p.severity): (0, 0) if p.corruption == "clean" else
             (first + corruptions.index(p.corruption), severities.index(p.severity)) for p in panels}
    return corruptions, severities, cells


def sheet_title(panel: Panel, frame_id: str, severity_names: Sequence[str] = ()) -> str:
    if panel.corruption == "clean":  # a long id (a nuScenes token) is cut: the title must fit its panel
        return f"clean · frame {frame_id if len(frame_id) <= 14 else frame_id[:12] + '…'}"
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
    legend = legend_entries(tags, classes, color_by=color_by, zoom=zoom,
                            semantic={c for p in panels for c in p.classes})
    colorbar = None
    if color_by == "height":
        colorbar = ("height z (shape units)", -1.0, 1.0) if is_object else ("height z (m)", *SCENE_Z_RANGE)
    ext = next((p.extent for p in panels if p.extent is not None), None)
    win = next((p.zoom for p in panels if p.zoom is not None), None)
    return SheetKey(tuple(legend), colorbar,  # type: ignore[arg-type]
                    None if ext is None else scale_bar_m(ext[1] - ext[0]),
                    None if win is None else scale_bar_m(win[1] - win[0], 0.45))


def _text_px(text: str, size: float, style: str = "normal") -> float:
    """The width in the sheet's pixels of ``text`` at ``size`` pt (the sheet's dpi)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    return TextToPath().get_text_width_height_descent(text, FontProperties(size=size, style=style),
                                                      ismath=False)[0] * LEGEND_DPI / 72


def _flow(entries: Sequence[LegendEntry], width: int, start: float) -> list[list[tuple[float, LegendEntry]]]:
    """Legend entries laid out left to right in lines no wider than ``width`` px (x of each entry)."""
    lines: list[list[tuple[float, LegendEntry]]] = [[]]
    x = start
    for e in entries:
        w = 14 + _text_px(e.label, 7) + 14
        if lines[-1] and x + w > width - SHEET_GAP_PX:
            lines.append([])
            x = SHEET_GAP_PX
        lines[-1].append((x, e))
        x += w
    return lines


def _wrap(text: str, width: int, size: float = 7) -> list[str]:
    """``text`` in lines no wider than ``width`` px at ``size`` pt (the sheet's dpi), broken between words."""
    lines: list[str] = []
    for word in text.split():
        line = f"{lines[-1]} {word}" if lines else word
        if lines and _text_px(line, size, "italic") <= width - 2 * SHEET_GAP_PX:
            lines[-1] = line
        else:
            lines.append(word)
    return lines


def sheet_image(panels: Sequence[Panel], *, frame_id: str, color_by: str = "tag",
                severity_names: Sequence[str] = (), note: str | None = None) -> np.ndarray:
    """The contact sheet as an (H, W, 3) uint8 image: clean first, then one row per corruption, one column
    per severity, a title above each panel, a metre scale bar in each scene panel, the zoom inset where
    there is one (in a column of its own right of its panel, its scale bar under it: it hides none of the
    scene), and the legend (and colour bar) on top, then ``note`` (e.g. why there is no zoom). Only the rows
    and columns of the panels given (`sheet_layout`); a grid narrower than the legend's minimum width is
    centred.

    The panels are tiled with NumPy; matplotlib (Agg) draws only the text, the box outlines (clipped to
    their panel and inset) and the bars on a transparent layer, blended over the tiles. A figure
    with one Axes per panel cost ≈ 10 s for KITTI-C's 126 panels — serial time at the end of every build."""
    if not panels:
        raise RenderError(f"frame {frame_id}: nothing to render")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from matplotlib.path import Path as MPath

    _, severities, cells = sheet_layout(panels)
    rows, cols = 1 + max(r for r, _ in cells.values()), len(severities)
    ph, pw = panels[0].image.shape[:2]
    is_object = pw != ph
    key = sheet_key(panels, color_by=color_by)
    side = round(pw * INSET_FRAC)
    zoom_col = side + INSET_GAP_PX if any(p.inset is not None for p in panels) else 0
    cell_w, cell_h = pw + zoom_col + SHEET_GAP_PX, ph + SHEET_ROW_GAP_PX + SHEET_TITLE_PX
    grid = cols * cell_w + SHEET_GAP_PX
    width = max(grid, 420)
    left = (width - grid) // 2  # a grid narrower than the legend's minimum width is centred
    head = {"tag": "colour: point tag · ", "semantic": "colour: semantic class · "}.get(color_by, "")
    lines = _flow(key.legend, width, SHEET_GAP_PX + (_text_px(head, 7) + 8 if head else 0))
    said = _wrap(note, width) if note else []
    bar_h = 24 if key.colorbar else 0
    top = SHEET_LEGEND_LINE_PX * (len(lines) + len(said)) + bar_h + 8
    height = top + rows * cell_h + SHEET_GAP_PX  # a margin below the last row too
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
    segments: list = []
    colors: list = []
    frames: list = []  # the panels' light frames
    for p in panels:
        r, k = cells[(p.corruption, p.severity)]
        x, y = left + SHEET_GAP_PX + k * cell_w, top + r * cell_h + SHEET_ROW_GAP_PX + SHEET_TITLE_PX
        canvas[y:y + ph, x:x + pw] = p.image
        ix, iy = x + pw + INSET_GAP_PX, y
        if p.inset is not None:
            canvas[iy:iy + side, ix:ix + side] = p.inset
        if p.outlines:  # clipped to their panel
            lines_ = LineCollection([o + np.array([x, y]) for _, o in p.outlines], linewidths=0.6,
                                    colors=[box_color(cls) for cls, _ in p.outlines])
            ax.add_collection(lines_)
            clip = [(x, y), (x + pw, y), (x + pw, y + ph), (x, y + ph), (x, y)]
            codes = [MPath.MOVETO, MPath.LINETO, MPath.LINETO, MPath.LINETO, MPath.CLOSEPOLY]
            lines_.set_clip_path(MPath(clip, codes), ax.transData)
        if p.inset is not None:
            zl = LineCollection([o + np.array([ix, iy]) for _, o in p.inset_outlines], linewidths=0.8,
                                colors=[(0.3, 0.3, 0.3) if c == CLEAN_BOX else box_color(c) for c, _ in
                                        p.inset_outlines],
                                linestyles=["--" if c == CLEAN_BOX else "-" for c, _ in p.inset_outlines])
            ax.add_collection(zl)
            zl.set_clip_path(Rectangle((ix, iy), side, side, transform=ax.transData))
            segments.append([(ix, iy), (ix + side, iy), (ix + side, iy + side), (ix, iy + side), (ix, iy)])
            colors.append("black")
            if p.zoom is not None and p.extent is not None:  # where the zoom is, in the panel
                o = to_px(np.array([[p.zoom[0], p.zoom[2]], [p.zoom[1], p.zoom[3]]]), p.extent, pw)
                (a0, b1), (a1, b0) = o + np.array([x, y])
                segments.append([(a0, b0), (a1, b0), (a1, b1), (a0, b1), (a0, b0)])
                colors.append((0.2, 0.2, 0.2))
            if key.zoom_scale_m:  # under the inset, on the sheet's white
                zpx = key.zoom_scale_m * side / (p.zoom[1] - p.zoom[0])  # type: ignore[index]
                segments.append([(ix + 1, iy + side + 5), (ix + 1 + zpx, iy + side + 5)])
                colors.append("black")
                ax.text(ix + 1 + zpx / 2, iy + side + 7, metres(key.zoom_scale_m), fontsize=ZOOM_SCALE_PT,
                        ha="center", va="top")
        if p.extent is not None and key.scale_m:  # the metre scale: bottom right
            spx = key.scale_m * pw / (p.extent[1] - p.extent[0])
            x1 = x + pw - 5
            segments.append([(x1 - spx, y + ph - 5), (x1, y + ph - 5)])
            colors.append("black")
            ax.text(x1 - spx / 2, y + ph - 7, metres(key.scale_m), fontsize=5, ha="center", va="bottom")
        if is_object:  # which view, which axes; a light frame tells the three apart
            for v, (name, a, b) in enumerate(OBJECT_VIEWS):
                ax.text(x + v * ph + 3, y + 2, f"{name} ({a}→, {b}↑)", fontsize=5.5, ha="left", va="top",
                        color=(0.3, 0.3, 0.3))
                x0, x1 = x + v * ph + 0.5, x + (v + 1) * ph - 0.5
                frames.append([(x0, y + 0.5), (x1, y + 0.5), (x1, y + ph - 0.5), (x0, y + ph - 0.5), (x0, y + 0.5)])
        else:  # a light frame: a scene's empty top is still its panel, under its own title
            frames.append([(x + 0.5, y + 0.5), (x + pw - 0.5, y + 0.5), (x + pw - 0.5, y + ph - 0.5),
                           (x + 0.5, y + ph - 0.5), (x + 0.5, y + 0.5)])
        ax.text(x + pw / 2, y - 2, sheet_title(p, frame_id, severity_names), fontsize=7, ha="center", va="bottom")
    if frames:  # first: an inset's black border or a box outline on a panel's edge stays on top
        ax.add_collection(LineCollection(frames, colors=[(0.82, 0.82, 0.82)], linewidths=0.8))
    if segments:
        ax.add_collection(LineCollection(segments, colors=colors, linewidths=0.8))
    _draw_legend(ax, lines, head, key, top - bar_h - 2)
    for i, text in enumerate(said):
        ax.text(SHEET_GAP_PX, 4 + 5 + (len(lines) + i) * SHEET_LEGEND_LINE_PX, text, fontsize=7, style="italic",
                ha="left", va="center", color=(0.55, 0.1, 0.1))
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
                ax.plot([x - 1, x + 11], [yc, yc], color=e.color, lw=1.2, ls=(0, (2.5, 1.5)) if e.kind == "clean box"
                        else "-")  # dashes short enough for three in the sample
            ax.text(x + 14, yc, e.label, fontsize=7, ha="left", va="center")
    if key.colorbar:
        label, lo, hi = key.colorbar
        bw, bh = COLORBAR_PX
        bx = COLORBAR_X
        ax.text(bx - 6, bar_y + bh / 2, f"colour: {label}", fontsize=7, ha="right", va="center")
        ax.text(bx, bar_y + bh + 1, f"{lo:g}", fontsize=6, ha="center", va="top")
        ax.text(bx + bw, bar_y + bh + 1, f"{hi:g}", fontsize=6, ha="center", va="top")
        ax.add_patch(Rectangle((bx, bar_y), bw, bh, fill=False, edgecolor="0.3", lw=0.5))


#: what `sheet_image` and `encode_png` draw with
DRAWING_MODULES = ("matplotlib.backends.backend_agg", "matplotlib.collections", "matplotlib.figure",
                   "matplotlib.patches", "matplotlib.path", "PIL.PngImagePlugin")


def import_drawing() -> None:
    """Import `DRAWING_MODULES` (≈ 0.4 s) ahead of the first sheet: a build does it while Ray starts, not after
    its last task (`build.finish.EarlySheet`)."""
    for name in DRAWING_MODULES:
        importlib.import_module(name)


def encode_png(image: np.ndarray) -> bytes:
    from PIL import Image  # matplotlib's own dependency

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="png", compress_level=3)
    return buf.getvalue()


def contact_sheet(views: Sequence[View], *, frame_id: str, color_by: str = "tag",
                  severity_names: Sequence[str] = (), note: str | None = None) -> tuple[bytes, float]:
    """PNG bytes of the sheet and the seconds spent per panel (painting + drawing + encoding)."""
    t0 = time.perf_counter()
    if not views:
        raise RenderError(f"frame {frame_id}: nothing to render")
    data = encode_png(sheet_image(sheet_panels(views, color_by=color_by), frame_id=frame_id, color_by=color_by,
                                  severity_names=severity_names, note=note))
    return data, (time.perf_counter() - t0) / max(len(views), 1)


def panels_sheet(panels: Sequence[Panel], *, frame_id: str, color_by: str = "tag",
                 severity_names: Sequence[str] = ()) -> tuple[bytes, float]:
    """PNG bytes of the sheet of already painted panels and the seconds spent per panel."""
    t0 = time.perf_counter()
    data = encode_png(sheet_image(panels, frame_id=frame_id, color_by=color_by, severity_names=severity_names))
    return data, (time.perf_counter() - t0) / max(len(panels), 1)
