"""What a picture shows: a `View` (points, tags, boxes of one example), colours and sizes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bench_build.errors import BenchBuildError
from bench_build.stages.frame import Boxes, PointTag

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


#: box outlines in colours no point tag uses (cyan, olive, brown): a red car box is lost among red synthetic points
BOX_COLORS = {"Car": "#17becf", "Pedestrian": "#bcbd22", "Cyclist": "#8c564b"}


class RenderError(BenchBuildError, ValueError):
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
