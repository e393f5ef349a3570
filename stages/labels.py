"""Per-point semantic labels through corruptions (as Robo3D's generation scripts carry them).

Stages keep the ``semantic`` column aligned with the points for free: `Frame.take` selects it with the
points, `Frame.append` gives added points 0 — the "unlabelled" id of SemanticKITTI (0 unlabeled), nuScenes
lidarseg (0 noise) and Waymo (0 undefined). Robo3D additionally gives the points a weather or crosstalk
stage *creates or displaces* a dataset-specific id (fog 21 / 41 / 23, snow 22 / 42 / 24, crosstalk 23 / 43 /
25 on SemanticKITTI / nuScenes / WOD); those stages take it as their ``label_id`` parameter and call
`set_semantic`.
"""

from __future__ import annotations

import numpy as np

from bench_build.stages.frame import Frame

UNLABELLED = 0


def set_semantic(frame: Frame, index: np.ndarray, label_id: int | None) -> Frame:
    """``frame`` with ``semantic[index] = label_id``; unchanged when the frame has no semantic labels or
    ``label_id`` is None (the source's own label is kept)."""
    sem = frame.labels.get("semantic")
    if label_id is None or sem is None:
        return frame
    new = np.array(sem, copy=True)
    new[index] = label_id
    return frame.with_points(frame.points, semantic=new)
