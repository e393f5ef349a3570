"""`render`: one PNG per view of a frame, with legend, scale bar and colour bar."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import signal
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench_build.format.reader import check_read_keys
from bench_build.manifests.manifest import MANIFEST_NAME, check_manifest, read_manifest
from bench_build.manifests.partial import held_partitions
from bench_build.manifests.recipe import severity_names
from bench_build.render.legend import SCENE_Z_RANGE, legend_entries, metres, scale_bar_m
from bench_build.render.panels import OBJECT_VIEWS, box_color, present_classes, present_tags, save_png, sheet_extent
from bench_build.render.raster import bev_raster, box_outlines, object_raster
from bench_build.render.read import (
    default_render_dir,
    file_part,
    missing_partitions,
    no_clean_note,
    read_views,
)
from bench_build.render.sheet import contact_sheet
from bench_build.render.views import COLOR_BY, RenderError, View, semantic_classes
from bench_build.render.zoom import Focus, inset_raster, sheet_focus
from bench_build.runtime.numeric import usable_cores
from bench_build.storage import LocalStore, atomic_write_with

SCENE_FIG_IN = (10.0, 7.6)  # a scene's figure (inches): the scene, then the legend in the right 2.8 in
ZOOM_COLUMN_IN = 3.0  # added between the two when there is a zoom: the inset and its title
ZOOM_LEFT_IN, ZOOM_SIDE_IN, ZOOM_BOTTOM_IN = 7.35, 2.7, 3.95  # the inset (inches from the figure's left, bottom)
ZOOM_COLORBAR_IN = 2.9  # a colour bar (by height) under the inset: its bottom (inches)
LEGEND_PT, LEGEND_ROW_IN, LEGEND_TITLE_IN = 9, 0.21, 0.5  # the legend's font; one row of it, its title and padding
LEGEND_BAND_IN = (0.3, 7.3)  # the legend column's heights (inches from the bottom) its rows may fill
NOTE_BOTTOM, NOTE_LINE_IN = 0.1, 0.16  # a scene's note: its bottom (fraction of the height), a line (inches)


def legend_layout(labels: list[str], note: str | None, zoom: bool) -> tuple[int, float, float]:
    """(columns, inches the figure grows by, centre as a fraction of the figure's height) of a scene's legend:
    as many rows as the column right of the scene holds (above the note, which without a zoom lies under the
    legend), then further columns, the figure wider where they need it (their widest labels), so a long legend
    (a segmentation set's classes, the boxes and the zoom's colours: ≈ 30 entries) stays in the figure."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    lo, hi = LEGEND_BAND_IN
    if note is not None and not zoom:
        lo = NOTE_BOTTOM * SCENE_FIG_IN[1] + NOTE_LINE_IN * len(textwrap.wrap(note, 40)) + 0.2
    rows = max(int((hi - lo - LEGEND_TITLE_IN) / LEGEND_ROW_IN), 1)
    cols = max(-(-len(labels) // rows), 1)
    if cols == 1:
        return 1, 0.0, (lo + hi) / 2 / SCENE_FIG_IN[1]
    font, per = FontProperties(size=LEGEND_PT), -(-len(labels) // cols)  # matplotlib fills columns evenly
    wide = [TextToPath().get_text_width_height_descent(t, font, ismath=False)[0] for t in labels]
    # the columns: each its widest label and the handle with its gap, then the spacing between them (in em)
    pt = sum(max(wide[k:k + per]) + (2.0 + 0.8) * LEGEND_PT for k in range(0, len(labels), per))
    extra = max((pt + (cols - 1) * 2.0 * LEGEND_PT) / 72 + 0.4 - (SCENE_FIG_IN[0] - 7.2), 0.0)
    return cols, extra, (lo + hi) / 2 / SCENE_FIG_IN[1]


def view_figure(view: View, *, frame_id: str, extent=None, radius: float = 1.0, focus: Focus | None = None,
                color_by: str = "tag", px: int = 720, note: str | None = None):
    """A matplotlib Figure of one partition: a scene as a bird's-eye view with metric axes, boxes, the zoom
    inset (``focus``) and the legend; an object as its three labelled views. By height: a colour bar.
    ``note``: a line the figure says (below the legend of a scene; under the title of an object), e.g. why it
    has no zoom."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import ConnectionPatch, Patch, Rectangle

    tags = present_tags(view.tags)
    classes = [cls for cls, _ in box_outlines(view.boxes)]
    entries = legend_entries(tags, classes, color_by=color_by, zoom=focus is not None,
                             semantic=present_classes(view, color_by, None if view.is_object else extent))
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
        fig.suptitle(title if note is None else f"{title}\n{note}", fontsize=11)
        main = axes
    else:
        ncols, wider, legend_y = legend_layout([e.label for e in entries], note, focus is not None)
        width = SCENE_FIG_IN[0] + (ZOOM_COLUMN_IN if focus is not None else 0.0) + wider
        fig = Figure(figsize=(width, SCENE_FIG_IN[1]), dpi=100)
        ax = fig.add_axes((0.8 / width, 0.08, 6.2 / width, 0.84))
        x0, x1, y0, y1 = extent
        ax.imshow(bev_raster(view, extent, color_by, px), extent=(x0, x1, y0, y1), interpolation="nearest")
        for cls, outline in box_outlines(view.boxes):
            ax.plot(outline[:, 0], outline[:, 1], color=box_color(cls), lw=0.8)
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        ax.set_xlabel("x (m)")
        ax.set_ylabel("y (m)")
        ax.set_title(title, fontsize=11)
        if focus is not None:
            # in a column of its own right of the scene (it hides none of it), its title on white above it;
            # the connectors join its left corners, below its title, left of the legend
            ins = ax.inset_axes((ZOOM_LEFT_IN / width, ZOOM_BOTTOM_IN / SCENE_FIG_IN[1], ZOOM_SIDE_IN / width,
                                 ZOOM_SIDE_IN / SCENE_FIG_IN[1]), transform=fig.transFigure)
            zx0, zx1, zy0, zy1 = focus.extent
            ins.imshow(inset_raster(view, focus, 300), extent=focus.extent, interpolation="nearest")
            ins.plot(focus.outline[1][:, 0], focus.outline[1][:, 1], color=(0.3, 0.3, 0.3), ls="--", lw=1.0)
            for cls, outline in box_outlines(view.boxes):
                ins.plot(outline[:, 0], outline[:, 1], color=box_color(cls), lw=1.0)
            ins.set_xlim(zx0, zx1)
            ins.set_ylim(zy0, zy1)
            ins.set_xticks([])
            ins.set_yticks([])
            bar = scale_bar_m(zx1 - zx0, 0.45)
            # on a white backing: black moved points may lie under the bar and its label (above the raster and
            # the boxes, below the bar and the label)
            ins.add_patch(Rectangle((0.015, 0.015), 0.05 + bar / (zx1 - zx0), 0.12, transform=ins.transAxes,
                                    facecolor="white", edgecolor="none", zorder=2.5))
            ins.plot([zx0 + 0.04 * (zx1 - zx0), zx0 + 0.04 * (zx1 - zx0) + bar], [zy0 + 0.05 * (zy1 - zy0)] * 2,
                     color="black", lw=1.5, zorder=2.6)
            ins.text(zx0 + 0.04 * (zx1 - zx0) + bar / 2, zy0 + 0.07 * (zy1 - zy0), metres(bar), fontsize=8,
                     ha="center", va="bottom")
            ins.set_title(f"zoom: {zx1 - zx0:.1f} m × {zy1 - zy0:.1f} m", fontsize=9, pad=4)
            ax.add_patch(Rectangle((zx0, zy0), zx1 - zx0, zy1 - zy0, fill=False, edgecolor="0.2", alpha=0.9))
            # the window's right side (within the scene) to the inset's left: both lines stay left of the zoom's
            # column, so they cross neither its title, the colour bar under it nor the legend
            for wy, iy in ((min(max(zy1, y0), y1), 1.0), (min(max(zy0, y0), y1), 0.0)):
                ax.add_artist(ConnectionPatch((min(max(zx1, x0), x1), wy), (0.0, iy), coordsA=ax.transData,
                                              coordsB=ins.transAxes, color="0.2", alpha=0.9, clip_on=False))
        if note is not None:
            fig.text(7.2 / width, NOTE_BOTTOM, textwrap.fill(note, 40), fontsize=9, style="italic",
                     color=(0.55, 0.1, 0.1), ha="left", va="bottom")
        main = [ax]
    if color_by == "height":
        from matplotlib import colormaps
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize

        lo, hi = (-radius, radius) if view.is_object else SCENE_Z_RANGE
        mappable = ScalarMappable(Normalize(lo, hi), colormaps["viridis"])
        label = "height z (shape units)" if view.is_object else "height z (m)"
        if focus is None or view.is_object:
            fig.colorbar(mappable, ax=main, shrink=0.6, label=label)
        else:  # under the zoom, in its column: beside the scene it would stand between the two
            width = fig.get_figwidth()
            cax = fig.add_axes((ZOOM_LEFT_IN / width, ZOOM_COLORBAR_IN / SCENE_FIG_IN[1], ZOOM_SIDE_IN / width,
                                0.18 / SCENE_FIG_IN[1]))
            fig.colorbar(mappable, cax=cax, orientation="horizontal", label=label)
    if handles:
        if view.is_object:
            fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), fontsize=9,
                       frameon=False)
        else:
            right = 7.2 + (ZOOM_COLUMN_IN if focus is not None else 0.0)  # inches: right of the zoom's column
            fig.legend(handles=handles, loc="center left", bbox_to_anchor=(right / fig.get_figwidth(), legend_y),
                       fontsize=LEGEND_PT, ncols=ncols, title="points" + (" and boxes" if classes else ""),
                       frameon=False)
    return fig, entries


class RenderWriteError(RenderError):
    """A PNG could not be written (the folder cannot be made, the disk is full): ``written``, those written before
    it, which stay."""

    def __init__(self, message: str, written: list[Path]) -> None:
        super().__init__(message)
        self.written = written


def write_png(path: Path, data: bytes, written: list[Path]) -> None:
    """Write one PNG whole (a temp file beside it, renamed into place: a killed render leaves no cut-short
    picture) and add it to ``written``; an OS error is `RenderWriteError`, one line naming the file."""
    def put(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    try:
        atomic_write_with(path, put)
    except OSError as e:
        where = getattr(e, "in_the_way", None) or e.filename or path
        raise RenderWriteError(f"{where}: cannot write {path.name} there ({e.strerror or e})", written) from None
    written.append(path)


def render_version(version_dir: str | Path, out: str | Path | None = None, *, frame_id: str | None = None,
                   corruption: str | None = None, severity: int | None = None, color_by: str = "tag",
                   on_note: Callable[[str], None] | None = None) -> list[Path]:
    """`bench-build render`: the contact sheet (no corruption given), or one PNG per selected partition,
    into ``out`` (default: `default_render_dir`).

    A partial pull holds some partitions: one it lacks is refused naming what it holds and the pull that adds
    it (or, when it holds others of those asked for, left out with a note); without the clean partition no
    zoom compares with clean, and the pictures and a note (``on_note``) say so. A manifest the reader refuses
    (`check_manifest`, `check_read_keys`: edited by hand or cut short) is refused here too, `ManifestError`."""

    root = Path(version_dir)
    manifest = read_manifest(root)
    check_manifest(manifest, str(root / MANIFEST_NAME))  # what the reader refuses: its names and paths are data,
    check_read_keys(manifest, str(root / MANIFEST_NAME))  # and the keys the pictures take from it
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
    if corruption == "clean" and severity not in (None, 0):  # else "clean, 3" quietly draws clean 0
        raise RenderError(f"{root}: clean has only severity 0, not {severity}")
    semantic = None
    if color_by == "semantic" and (semantic := semantic_classes(manifest.get("source"))) is None:
        raise RenderError(f"{root}: --color-by semantic needs per-point semantic labels, and this "
                          f"{manifest['recipe'].get('name', 'build')} build's frames have none (the segmentation "
                          "benchmarks have them: robo3d-semantickitti-c, robo3d-nuscenes-c, robo3d-wod-c)")

    def say(note: str) -> None:
        if on_note is not None:
            on_note(note)

    has_clean = ("clean", 0) in held_partitions(manifest)
    short, long = no_clean_note(root, manifest)
    if corruption is None and severity is None:
        frame_id, views = read_views(store, manifest, frame_id, semantic=semantic)
        if not has_clean:
            say(long)
        data, _ = contact_sheet(views, frame_id=frame_id, color_by=color_by,
                                severity_names=severity_names(manifest), note=None if has_clean else short)
        written: list[Path] = []
        write_png(out_dir / f"contact_sheet_{file_part(frame_id)}.png", data, written)
        return written
    if corruption == "clean" or severity == 0:
        parts = [("clean", 0)]
    elif corruption is not None:
        parts = [(corruption, s) for s in ([severity] if severity is not None else range(1, severities + 1))]
    else:
        parts = [(c, int(severity)) for c in names]  # type: ignore[arg-type]
    parts, missing = missing_partitions(root, manifest, parts, corruption, severity)
    if not parts:
        raise RenderError(missing)
    if missing:
        say(f"left out: {missing}")
    frame_id, views = read_views(store, manifest, frame_id, partitions=[*parts, ("clean", 0)], semantic=semantic)
    clean = next((v for v in views if v.corruption == "clean"), None)
    extent, radius = sheet_extent(clean or next(v for v in views if (v.corruption, v.severity) in parts))
    focus = None if clean is None else sheet_focus(clean, extent)
    if clean is None and not has_clean:
        say(long)
    written: list[Path] = []
    jobs = [(v, {"frame_id": frame_id, "extent": extent, "radius": radius, "focus": focus, "color_by": color_by,
                 "note": None if clean is not None or v.is_object else short})
            for v in views if (v.corruption, v.severity) in parts]
    for (v, _), data in zip(jobs, figure_pngs(jobs), strict=True):
        write_png(out_dir / f"{file_part(frame_id)}_{v.corruption}_{v.severity}.png", data, written)
    return written


#: `figure_pngs` starts a process per this many PNGs, up to the cores this process may use
PNGS_PER_PROCESS = 3


def figure_png(job: tuple[View, dict[str, Any]]) -> bytes:
    """PNG bytes of `view_figure` of one view (``job``: the view and the figure's keyword arguments)."""
    view, kwargs = job
    return save_png(view_figure(view, **kwargs)[0])


def figure_pngs(jobs: list[tuple[View, dict[str, Any]]]) -> Iterator[bytes]:
    """`figure_png` of each job, in order. A figure costs ≈ 0.35 s of matplotlib (drawing ≈ 0.28 s, PNG encoding
    ≈ 0.05 s) and they do not depend on each other: with enough of them (`PNGS_PER_PROCESS`) they are drawn by a
    pool of processes, one per usable core, forked from a server that imported the drawing code once. The bytes
    are the same as drawn here. Ctrl-C reaches this process only (the pool's processes ignore it); a PNG not yet
    started when the caller stops (a write failed) is not drawn."""
    processes = min(len(jobs) // PNGS_PER_PROCESS, usable_cores())
    if processes < 2:
        yield from map(figure_png, jobs)
        return
    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        context.set_forkserver_preload([__name__])
    pool = concurrent.futures.ProcessPoolExecutor(processes, mp_context=context, initializer=signal.signal,
                                                  initargs=(signal.SIGINT, signal.SIG_IGN))
    try:
        yield from pool.map(figure_png, jobs)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
