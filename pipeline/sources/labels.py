"""The classes a segmentation build is scored in, from the source description its manifest records.

A build stores raw per-point labels (SemanticKITTI's ids, nuScenes' category indices, Waymo's
``Segmentation.Type``); `score`'s mIoU and `render --color-by semantic` both use the classes the benchmark
scores, through one map: the learning map the reader recorded (SemanticKITTI's 19 classes, nuScenes-lidarseg's
16; 0 = ignored), for a nuScenes build made before the map was recorded the devkit's map of the category table it
recorded, else the recorded class list as it is (Waymo). A raw label outside the map is class 0: the ids Robo3D
gives the points fog, snow and crosstalk add (WOD-C 23–25) are ignored, as the paper maps them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bench_build.sources.nuscenes import lidarseg_learning_map


@dataclass(frozen=True)
class ScoredClasses:
    """``lut[raw label]`` → class, the class names (index = class), and whether the classes come from a learning
    map (train ids) rather than the source's own class list."""

    lut: np.ndarray
    names: tuple[str, ...]
    mapped: bool

    def of(self, raw: Any) -> np.ndarray:
        return map_labels(raw, self.lut)


def map_labels(raw: Any, lut: np.ndarray) -> np.ndarray:
    """The class ``lut`` gives each raw label (int64); one outside it is 0."""
    raw = np.asarray(raw, dtype=np.int64)
    inside = (raw >= 0) & (raw < len(lut))
    return np.where(inside, lut[np.clip(raw, 0, len(lut) - 1)], 0)


def scored_classes(source: dict[str, Any] | None) -> ScoredClasses | None:
    """The scored classes of a build whose manifest records ``source``; None when it records no map nor classes."""
    source = source or {}
    names: list[str] | None = None
    mapped = True
    if source.get("learning_map"):
        raw = {int(k): int(v) for k, v in source["learning_map"].items()}
        names = source.get("train_classes")
    elif source.get("kind") == "nuscenes" and source.get("categories"):
        raw, names = lidarseg_learning_map({name: int(i) for i, name in source["categories"].items()})
    elif source.get("classes"):
        names = source["classes"]
        raw, mapped = {i: i for i in range(len(names))}, False
    else:
        return None
    names = tuple(str(n) for n in names) if names else tuple(f"class {i}" for i in range(max(raw.values()) + 1))
    lut = np.zeros(max(raw) + 1, dtype=np.int64)
    for k, v in raw.items():
        lut[k] = v if 0 <= v < len(names) else 0
    return ScoredClasses(lut, names, mapped)
