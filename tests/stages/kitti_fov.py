"""Camera-FOV crops as KITTI's object-detection tools store scans: only the points that project into
the left colour image (through P2, in front of the camera) are kept. Such a scan has a few hundred
ground-plane candidates but thousands of ground points, the case the Robo3D weather stages got wrong."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from stages.frame import Frame
from stages.geometry import IMAGE_SIZE


def camera_fov_crop(frame: Frame) -> Frame:
    """The points of ``frame`` inside the image (0 ≤ u < width, 0 ≤ v < height, depth ≥ 0)."""
    return frame.take(fov_mask(frame))


@lru_cache(maxsize=4)
def demo_fov_scan(index: int = 1) -> Frame:
    """Camera-FOV crop of demo scan ``index`` (the default 0.09° azimuth step, as `bench-build demo` writes it)."""
    from pipeline.sources.demo import generate_frame

    return camera_fov_crop(generate_frame(index))


def fov_mask(frame: Frame) -> np.ndarray:
    """Points that project into the image through P2 with depth ≥ 0."""
    rect = frame.calib.lidar_to_rect(frame.xyz)
    uv = frame.calib.project_rect(rect)
    w, h = IMAGE_SIZE
    return (rect[:, 2] >= 0) & (uv[:, 0] >= 0) & (uv[:, 0] < w) & (uv[:, 1] >= 0) & (uv[:, 1] < h)
