"""KITTI's file formats as export writes them: velodyne bytes, calib and label_2 text."""

from __future__ import annotations

import numpy as np

from bench_build.export.errors import ExportError
from bench_build.format.reader import Example
from bench_build.sources.kitti import format_calib, format_labels
from bench_build.stages.frame import Boxes, Calib


def _dontcare_last(boxes: Boxes) -> Boxes:
    """KITTI files list DontCare regions after the objects; OpenPCDet's info builder relies on it."""
    order = np.argsort(np.array([str(c) == "DontCare" for c in boxes.cls]), kind="stable")
    return Boxes(boxes.center[order], boxes.dims[order], boxes.heading[order], boxes.cls[order],
                 boxes.truncated[order], boxes.occluded[order], boxes.alpha[order], boxes.bbox2d[order])


KITTI_CALIB_KEYS = ["P0", "P1", "P2", "P3", "R0_rect", "Tr_velo_to_cam", "Tr_imu_to_velo"]


VELODYNE_FIELDS = ("x", "y", "z", "intensity")


def velodyne_bytes(ex: Example) -> bytes:
    try:
        cols = [ex.fields.index(f) for f in VELODYNE_FIELDS]
    except ValueError:
        raise ExportError(f"{ex.key}: KITTI velodyne files need x, y, z, intensity; the build has "
                          f"{', '.join(ex.fields)}") from None
    return np.ascontiguousarray(ex.points[:, cols], dtype="<f4").tobytes()


def calib_text(key: str, calib: Calib | None) -> str:

    if calib is None:
        raise ExportError(f"{key}: no calibration to export")
    text = format_calib(calib)
    keys = [line.split(":", 1)[0] for line in text.splitlines()]
    if keys != KITTI_CALIB_KEYS:
        raise ExportError(f"{key}: calibration has {', '.join(keys)}; OpenPCDet and mmdetection3d read the "
                          "matrices by line number from a full KITTI calib file (P0–P3, R0_rect, Tr_velo_to_cam, "
                          "Tr_imu_to_velo)")
    return text


def label_text(key: str, boxes: Boxes | None, calib: Calib | None) -> str:

    if calib is None:
        raise ExportError(f"{key}: no calibration: KITTI labels are in the camera frame")
    return format_labels(_dontcare_last(boxes if boxes is not None else Boxes.empty()), calib)


def boxes_equal(a: Boxes | None, b: Boxes | None) -> bool:
    if a is None or b is None:
        return a is b
    return len(a) == len(b) and np.allclose(a.center, b.center, atol=1e-6) and np.allclose(a.dims, b.dims) \
        and np.allclose(a.heading, b.heading)
