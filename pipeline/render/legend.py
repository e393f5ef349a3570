"""Legends and scales: which tags and classes a picture shows, metre scale bars."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from bench_build.render.panels import OTHER_BOX
from bench_build.render.views import BOX_COLORS, TAG_COLORS, box_group, semantic_colors
from bench_build.render.zoom import CLEAN_BOX, ZOOM_CHANGED, ZOOM_GONE, ZOOM_SAME
from bench_build.stages.frame import PointTag

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


def _box_label(names: list[str]) -> str:
    """The legend's name of the box classes one colour outlines: the class, or what they share
    (``human.pedestrian.*``), else the names."""
    if len(names) == 1:
        return names[0]
    common = []
    for parts in zip(*(n.split(".") for n in names), strict=False):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return ".".join([*common, "*"]) if common else ", ".join(names)


def legend_entries(tags: Iterable[int], classes: Iterable[str], *, color_by: str = "tag",
                   zoom: bool = False, semantic: Iterable[tuple[int, str]] = ()) -> list[LegendEntry]:
    """What a picture's legend lists: the point tags that occur (colour by tag only; by height a colour bar
    says it), the semantic classes that occur (``semantic``: (class, name); colour by semantic only), the box
    classes that occur, and the zoom's colours where there is a zoom. Nothing else: an object build, which has
    no weather, never lists weather scatter."""
    out: list[LegendEntry] = []
    if color_by == "semantic":
        present = sorted(set(semantic))
        colors = semantic_colors(max((c for c, _ in present), default=0) + 1)
        out += [LegendEntry(name, tuple(float(v) for v in colors[c])) for c, name in present]  # type: ignore[misc]
    if color_by == "tag":
        seen = set()
        for t in sorted(set(int(t) for t in tags)):
            if t not in PointTag._value2member_map_ or TAG_LABELS[PointTag(t)] in seen:
                continue
            seen.add(TAG_LABELS[PointTag(t)])
            out.append(LegendEntry(TAG_LABELS[PointTag(t)], TAG_COLORS[PointTag(t)]))
    classes = set(classes) - {CLEAN_BOX, "DontCare"}
    for group, col in BOX_COLORS.items():  # named as the data names them: "Vehicle", "human.pedestrian.*"
        if names := sorted(c for c in classes if box_group(c) == group):
            out.append(LegendEntry(_box_label(names), _hex(col), "box"))
    if any(box_group(c) is None for c in classes):
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


def metres(v: float) -> str:
    return f"{v:g} m"
