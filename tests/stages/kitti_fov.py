"""Camera-FOV crops as KITTI's object-detection tools store scans: only the points that project into
the left colour image (through P2, in front of the camera) are kept. Such a scan has a few hundred
ground-plane candidates but thousands of ground points, the case the Robo3D weather stages got wrong."""

from __future__ import annotations

from functools import lru_cache

from bench_build.sources.demo.kitti import generate_frame
from bench_build.sources.kitti import camera_fov_mask
from bench_build.stages.frame import Frame


def camera_fov_crop(frame: Frame) -> Frame:
    """The points of ``frame`` inside the image (`bench_build.sources.kitti.camera_fov_mask`)."""
    return frame.take(camera_fov_mask(frame))


@lru_cache(maxsize=4)
def demo_fov_scan(index: int = 1) -> Frame:
    """Camera-FOV crop of demo scan ``index`` (the default 0.09° azimuth step, as `bench-build demo-data`
    writes it)."""
    return camera_fov_crop(generate_frame(index))
