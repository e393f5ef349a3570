"""Boreas (Burnett et al., IJRR 2023): Velodyne Alpha-Prime (128 beams) scans, all seasons.

Layout: ``boreas-YYYY-MM-DD-HH-MM/lidar/<timestamp µs>.bin``; the reader takes any directory and
searches ``*.bin`` recursively (a sequence, a folder of sequences, or a folder of selected scans).
Each point is 6 little-endian float32: ``x, y, z, intensity, ring, time`` — the Boreas guide's
``[x, y, z, i, r, t]``: position in the LiDAR frame (m), intensity, the laser ID that measured the
point, and the point's time offset (s) relative to the scan timestamp in the file name.

Intensity scale: the Boreas guide does not state the range of ``i``. Velodyne sensors report an 8-bit
calibrated reflectivity, so we **assume 0..255** (scale ``"byte"``, like STF); the validation report
records the observed intensity percentiles of every real source so a different scale is visible.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench_build.sources.records import read_records, write_records

BOREAS_FIELDS = ("x", "y", "z", "intensity", "ring", "time")
BOREAS_INTENSITY_SCALE = "byte"  # assumed 0..255, see the module docstring


def read_boreas_bin(path: str | Path) -> np.ndarray:
    """N×6 float32 points of a Boreas ``.bin``; SourceError naming the file on malformed input."""
    return read_records(Path(path), len(BOREAS_FIELDS), "x, y, z, intensity, ring, time", "boreas")


def write_boreas_bin(path: str | Path, points: np.ndarray) -> None:
    write_records(Path(path), points, len(BOREAS_FIELDS))

