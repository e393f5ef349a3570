"""Panels: one view's raster, outlines, extent and legend entries, ready to tile."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench_build.render.raster import bev_raster, box_outlines, object_extent, object_raster, scene_extent
from bench_build.render.views import BOX_COLORS, OTHER_BOX, PANEL_PX, RenderError, View, box_group
from bench_build.render.zoom import CLEAN_BOX, INSET_FRAC, Focus, inset_raster, sheet_focus

OBJECT_VIEWS = (("top", "x", "y"), ("front", "x", "z"), ("side", "y", "z"))  # object_raster's order


def box_color(cls: str) -> str:
    return BOX_COLORS[group] if (group := box_group(cls)) is not None else OTHER_BOX


def save_png(fig) -> bytes:
    """``fig`` as PNG bytes (the caller writes them: `bench_build.render.figure.write_png`)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


@dataclass(frozen=True)
class Panel:
    """One painted cell of a contact sheet: the raster, its box outlines in the raster's pixel coordinates
    (x right, y down) by class, and the partition it shows. Small (≈ 200 kB), so a build task that holds the
    sheet's frame in memory paints its panels and hands them to the driver instead of the driver reading
    every partition file back. ``extent``: the x/y window (m) of a scene panel (its scale bar); ``tags``: the
    point tags present (its legend); ``inset``: the zoom on the sheet's `Focus`, its outlines in the inset's
    pixels (the clean box as class `CLEAN_BOX`) and the window (m); ``classes``: the
    semantic classes present, when coloured by them (its legend)."""

    corruption: str
    severity: int
    image: np.ndarray  # (px, px·(3 if object else 1), 3) uint8
    outlines: tuple[tuple[str, np.ndarray], ...] = ()
    extent: tuple[float, float, float, float] | None = None
    tags: tuple[int, ...] = ()
    inset: np.ndarray | None = None
    inset_outlines: tuple[tuple[str, np.ndarray], ...] = ()
    zoom: tuple[float, float, float, float] | None = None
    classes: tuple[tuple[int, str], ...] = ()  # (class, name) of the points' semantic classes (colour by semantic)
    zoom_of: str | None = None  # `Focus.of` of the inset: "box", "instance:<class>" or "cluster:<class>"


def sheet_extent(clean: View) -> tuple[tuple[float, float, float, float] | None, float]:
    """(scene extent, object radius) every panel of a sheet shares: the clean view's (or, without one, the first
    view's)."""
    if clean.is_object:
        return None, object_extent(clean.points)
    return scene_extent(clean.points), 1.0


def to_px(outline: np.ndarray, extent, px: int) -> np.ndarray:
    x0, x1, y0, y1 = extent
    return (outline - [x0, y1]) * np.array([px / (x1 - x0), -px / (y1 - y0)])


def present_tags(tags: np.ndarray) -> tuple[int, ...]:
    return tuple(int(t) for t in np.flatnonzero(np.bincount(np.asarray(tags, np.uint8), minlength=256)))


def present_classes(view: View, color_by: str, extent=None) -> tuple[tuple[int, str], ...]:
    """(class, name) of the semantic classes among ``view``'s points, in class order; () unless coloured by them.
    With a scene's ``extent``: only those of the points within it, those drawn, so a legend names no class
    whose points all lie outside the picture."""
    if color_by != "semantic" or view.semantic is None:
        return ()
    sem = np.asarray(view.semantic)
    if extent is not None and len(sem):
        x0, x1, y0, y1 = (float(e) for e in extent)
        x, y = (np.asarray(view.points[:, k], np.float64) for k in (0, 1))
        sem = sem[(x >= x0) & (x < x1) & (y > y0) & (y <= y1)]
    return tuple((int(c), view.class_names[int(c)]) for c in np.unique(sem))


def make_panel(view: View, *, extent=None, radius: float = 1.0, color_by: str = "tag",
               px: int = PANEL_PX, focus: Focus | None = None) -> Panel:
    """Paint ``view`` with the sheet's shared ``extent`` (scenes) or ``radius`` (objects), and its zoom on
    ``focus`` (scenes with boxes or labelled cars)."""
    tags = present_tags(view.tags)
    classes = present_classes(view, color_by, None if view.is_object else extent)
    if view.is_object:
        return Panel(view.corruption, view.severity, object_raster(view, radius, color_by, px), tags=tags,
                     classes=classes)
    outlines = tuple((cls, to_px(o, extent, px)) for cls, o in box_outlines(view.boxes))
    inset = zoom_outlines = None
    if focus is not None:
        side = round(px * INSET_FRAC)
        inset = inset_raster(view, focus, side)
        zoom_outlines = tuple((cls, to_px(o, focus.extent, side)) for cls, o in
                              [(CLEAN_BOX, focus.outline[1]), *box_outlines(view.boxes)])
    return Panel(view.corruption, view.severity, bev_raster(view, extent, color_by, px), outlines,
                 tuple(float(e) for e in extent), tags, inset, zoom_outlines or (),  # type: ignore[arg-type]
                 None if focus is None else focus.extent, classes, None if focus is None else focus.of)


def sheet_panels(views: Sequence[View], *, color_by: str = "tag") -> list[Panel]:
    """The panels of ``views``, all painted with the clean view's extent and zoom. Without a clean view (a
    partial pull) they share the first view's extent and have no zoom: the zoom marks what differs from clean,
    and another partition in its place would mark its own points "as in clean"."""
    if not views:
        raise RenderError("nothing to render")
    clean = next((v for v in views if v.corruption == "clean"), None)
    extent, radius = sheet_extent(clean or views[0])
    focus = None if clean is None else sheet_focus(clean, extent)
    return [make_panel(v, extent=extent, radius=radius, color_by=color_by, focus=focus) for v in views]
