"""Pictures of a built version: bird's-eye views of scenes, three-view scatters of objects, and the
contact sheet every card embeds (one panel per corruption × severity of the same frame).

Points are painted straight into an RGB raster (one pass in numba with a per-pixel key buffer, so
that corruption-made points — scatter, crosstalk, synthetic — and higher points land on top), then
shown with matplotlib's Agg backend, boxes drawn as outlines. Every panel of a sheet uses the extent
of the clean frame, so a corruption's effect is not hidden by a changed zoom. A folder without the clean
partition (a partial pull) compares nothing with clean: its panels share the first one's extent, have no zoom,
and the picture says why; a partition it lacks is refused naming what it holds (`read.missing_partitions`).

What makes a picture readable without this file: every scene panel has a metre scale bar (the
per-partition PNGs have metric axes), a legend lists the point tags and box classes that occur (an
object build never lists weather), colour by height comes with a colour bar, object views are
labelled (top x–y, front x–z, side y–z), and every scene panel has, right of it, an inset zoomed on one
object (`Focus`: a box, or in a scan without boxes a car found by its labels) that marks what differs from
the clean scan — the only way object-level corruptions show.

Colours: by ``point_tag`` (grey unchanged, blue attenuated, orange fog/snow/rain scatter, purple
crosstalk, green jittered, red synthetic), by height (viridis over z ∈ [−2.5, 1.5] m for scenes), or by the
semantic class a segmentation benchmark scores (`views.semantic_classes`; grey unlabelled).
Boxes: cyan Car, olive Pedestrian, brown Cyclist, dark grey any other class (colours no point tag uses).
"""

from bench_build.render.figure import RenderWriteError, render_version, view_figure
from bench_build.render.legend import SCENE_Z_RANGE, TAG_LABELS, LegendEntry, legend_entries, scale_bar_m
from bench_build.render.panels import (
    OBJECT_VIEWS,
    OTHER_BOX,
    Panel,
    make_panel,
    present_tags,
    save_png,
    sheet_extent,
    sheet_panels,
)
from bench_build.render.raster import bev_raster, box_outlines, object_extent, object_raster, paint, scene_extent
from bench_build.render.read import default_render_dir, read_views, sheet_frame, sort_views, write_contact_sheet
from bench_build.render.sheet import (
    COLORBAR_PX,
    COLORBAR_X,
    INSET_GAP_PX,
    LEGEND_DPI,
    SHEET_GAP_PX,
    SHEET_LEGEND_LINE_PX,
    SHEET_ROW_GAP_PX,
    SHEET_TITLE_PX,
    SheetKey,
    contact_sheet,
    encode_png,
    import_drawing,
    panels_sheet,
    sheet_image,
    sheet_key,
    sheet_layout,
    sheet_title,
)
from bench_build.render.views import BOX_COLORS, COLOR_BY, PANEL_PX, SHEET_NAME, TAG_COLORS, RenderError, View
from bench_build.render.zoom import (
    CLEAN_BOX,
    INSET_FRAC,
    ZOOM_CHANGED,
    ZOOM_GONE,
    ZOOM_MARGIN_M,
    ZOOM_SAME,
    Focus,
    inset_raster,
    sheet_focus,
)

__all__ = [
    "BOX_COLORS", "CLEAN_BOX", "COLORBAR_PX", "COLORBAR_X", "COLOR_BY", "INSET_FRAC", "INSET_GAP_PX", "LEGEND_DPI",
    "OBJECT_VIEWS", "OTHER_BOX", "PANEL_PX", "SCENE_Z_RANGE", "SHEET_GAP_PX", "SHEET_LEGEND_LINE_PX", "SHEET_NAME",
    "SHEET_ROW_GAP_PX", "SHEET_TITLE_PX", "TAG_COLORS", "TAG_LABELS", "ZOOM_CHANGED", "ZOOM_GONE", "ZOOM_MARGIN_M",
    "ZOOM_SAME",
    "Focus", "LegendEntry", "Panel", "RenderError", "RenderWriteError", "SheetKey", "View", "bev_raster",
    "box_outlines",
    "contact_sheet", "default_render_dir", "encode_png", "import_drawing", "inset_raster",
    "legend_entries", "make_panel", "object_extent", "object_raster", "paint", "panels_sheet", "present_tags",
    "read_views", "render_version", "save_png", "scale_bar_m", "scene_extent", "sheet_extent", "sheet_focus",
    "sheet_frame", "sheet_image", "sheet_key", "sheet_layout", "sheet_panels", "sheet_title", "sort_views",
    "view_figure", "write_contact_sheet",
]
