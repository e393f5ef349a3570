"""What a picture shows: a `View` (points, tags, boxes of one example), colours and sizes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bench_build.errors import BenchBuildError
from bench_build.sources.labels import scored_classes
from bench_build.stages.frame import Boxes, PointTag

PANEL_PX = 240  # raster size of one view


SHEET_NAME = "renders/contact_sheet.png"


COLOR_BY = ("tag", "height", "semantic")


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


#: box outlines in colours no point tag uses (cyan, olive, brown): a red car box is lost among red synthetic points
BOX_COLORS = {"Car": "#17becf", "Pedestrian": "#bcbd22", "Cyclist": "#8c564b"}
#: other datasets' box classes drawn in the colour of the KITTI class they are: Waymo's types, nuScenes' categories
#: (and any ``human.pedestrian.*``); every other class is `OTHER_BOX`
BOX_GROUPS = {"Vehicle": "Car", "vehicle.car": "Car", "vehicle.bicycle": "Cyclist"}


def box_group(cls: str) -> str | None:
    """The `BOX_COLORS` class whose colour outlines a box of class ``cls``, or None (another class)."""
    if cls in BOX_COLORS:
        return cls
    return "Pedestrian" if cls.startswith("human.pedestrian.") else BOX_GROUPS.get(cls)


class RenderError(BenchBuildError, ValueError):
    pass


#: colour of class 0 (unlabelled / ignored) when colouring by semantic class
UNLABELLED_COLOR = (0.8, 0.8, 0.8)
OTHER_BOX = "#444444"  # the outline of a box of any other class


ZOOM_SAME, ZOOM_CHANGED, ZOOM_GONE = (0.6, 0.6, 0.6), (0.0, 0.0, 0.0), (1.0, 0.55, 0.72)  # the zoom's points
SEMANTIC_CANDIDATES = ("tab20", "tab20b", "tab20c", "Set1", "Set2", "Dark2", "Paired", "Accent", "Set3")
SEMANTIC_MAX_L = 80.0  # CIELAB lightness: a paler class colour is lost on the white background as one-pixel points
_PALETTE: np.ndarray | None = None


def cielab(rgb) -> np.ndarray:
    """(N, 3) sRGB colours in [0, 1] as CIELAB (D65): distances there are distances the eye sees (ΔE)."""
    rgb = np.asarray(rgb, np.float64).reshape(-1, 3)
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = lin @ np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]).T
    xyz /= (0.95047, 1.0, 1.08883)
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.c_[116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])]


def reserved_colors() -> np.ndarray:
    """(N, 3) the colours a semantic picture already uses for something else: the box outlines, the zoom's
    points, unlabelled points and the white background."""
    from matplotlib.colors import to_rgb

    return np.array([*(to_rgb(c) for c in (*BOX_COLORS.values(), OTHER_BOX)), ZOOM_SAME, ZOOM_CHANGED, ZOOM_GONE,
                     UNLABELLED_COLOR, (1.0, 1.0, 1.0)])


def semantic_colors(n: int) -> np.ndarray:
    """(n, 3) colours in [0, 1] of classes 0..n−1: class 0 light grey, the others picked one by one from
    matplotlib's qualitative maps (`SEMANTIC_CANDIDATES`; those dark enough to see on white, `SEMANTIC_MAX_L`),
    each the one farthest (CIELAB) from those picked before and from `reserved_colors`: the first classes
    differ most (Waymo's 22: ΔE ≥ 21), none looks like a box's outline or the zoom's colours (tab20's cyan,
    olive and brown were the Car, Pedestrian and Cyclist boxes'). 81 colours, repeating beyond."""
    global _PALETTE
    if _PALETTE is None:
        from matplotlib import colormaps

        cands = np.array([c[:3] for m in SEMANTIC_CANDIDATES for c in colormaps[m].colors])
        lab = cielab(cands)
        far = np.linalg.norm(lab[:, None] - cielab(reserved_colors())[None], axis=2).min(axis=1)
        far[lab[:, 0] > SEMANTIC_MAX_L] = -1.0
        order = []
        while far.max() > 0:  # a candidate already picked (or too pale) is −1, a duplicate of one 0
            order.append(k := int(np.argmax(far)))  # on a tie the first: deterministic
            far = np.minimum(far, np.linalg.norm(lab - lab[k], axis=1))
            far[order] = -1.0
        _PALETTE = cands[order]
    idx = (np.arange(max(n, 1)) - 1) % len(_PALETTE)
    out = _PALETTE[idx]
    out[0] = UNLABELLED_COLOR
    return out[:n]


def semantic_classes(source: dict[str, Any] | None) -> tuple[np.ndarray, tuple[str, ...]] | None:
    """(raw label → class LUT, class names) of a build whose frames carry per-point ``semantic`` labels: the
    classes the benchmark scores (`bench_build.sources.labels`, as `score` maps them); None when they carry none."""
    source = source or {}
    classes = scored_classes(source) if source.get("semantic") else None
    return None if classes is None else (classes.lut, classes.names)


@dataclass(frozen=True)
class View:
    """One example as rendered: xyz, tags, boxes (scenes) and whether it is an object; to colour by semantic
    class, each point's class (`semantic_classes`) and the class names."""

    corruption: str
    severity: int
    points: np.ndarray  # (N, 3)
    tags: np.ndarray  # (N,)
    boxes: Boxes | None
    is_object: bool
    semantic: np.ndarray | None = None  # (N,) class index into class_names (0: unlabelled / ignored)
    class_names: tuple[str, ...] = ()
    instance: np.ndarray | None = None  # (N,) instance id (0: none), where the build has them: the zoom's object
