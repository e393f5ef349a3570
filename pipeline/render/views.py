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


class RenderError(BenchBuildError, ValueError):
    pass


#: colour of class 0 (unlabelled / ignored) when colouring by semantic class
UNLABELLED_COLOR = (0.8, 0.8, 0.8)
_PALETTE: np.ndarray | None = None


def semantic_colors(n: int) -> np.ndarray:
    """(n, 3) colours in [0, 1] of classes 0..n−1: class 0 light grey, the others matplotlib's tab20 without its
    two greys, its dark shades first (so neighbouring classes differ in hue), then tab20b (38 distinct colours,
    repeating beyond)."""
    global _PALETTE
    if _PALETTE is None:
        from matplotlib import colormaps

        order = [*range(0, 20, 2), *range(1, 20, 2)]
        tab20 = [colormaps["tab20"].colors[i] for i in order if i not in (14, 15)]
        _PALETTE = np.array([*tab20, *colormaps["tab20b"].colors], dtype=np.float64)[:, :3]
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
