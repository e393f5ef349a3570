"""SeeingThroughFog / DENSE (Bijelic et al., CVPR 2020): raw Velodyne HDL-64E S3D scans.

Layout: a directory of ``*.bin`` scans, searched recursively (e.g. ``lidar_hdl64_strongest/`` of the
STF release, or a folder holding only the foggy — or only the clear — scans of it). Each point is
5 little-endian float32: ``x, y, z, intensity, ring``, LiDAR frame in metres (x forward, y left,
z up). Intensity is the sensor's 8-bit value, **0..255** (intensity scale ``"byte"``); ``ring`` is
the laser index 0..63 stored as a float.

There are no labels or calibration here: the scans are used for the naturalness validation
(`bench_build.validate`), where the weather classifier is trained on real foggy vs clear STF scans.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench_build.sources.records import read_records, write_records

STF_FIELDS = ("x", "y", "z", "intensity", "ring")
STF_INTENSITY_SCALE = "byte"  # 0..255


def read_stf_bin(path: str | Path) -> np.ndarray:
    """N×5 float32 points of an STF ``.bin``; SourceError naming the file on malformed input."""
    return read_records(Path(path), len(STF_FIELDS), "x, y, z, intensity, ring", "stf")


def write_stf_bin(path: str | Path, points: np.ndarray) -> None:
    write_records(Path(path), points, len(STF_FIELDS))

