"""Spherical coordinates of sensor-frame points and moves along a point's own ray."""

from __future__ import annotations

import numpy as np


def to_spherical(xyz: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(range, azimuth, elevation) of sensor-frame points; azimuth = atan2(y, x), elevation = asin(z/r)."""
    xyz = np.asarray(xyz, dtype=np.float64)
    r = np.linalg.norm(xyz, axis=1)
    az = np.arctan2(xyz[:, 1], xyz[:, 0])
    with np.errstate(invalid="ignore", divide="ignore"):
        el = np.where(r > 0, np.arcsin(np.clip(xyz[:, 2] / np.where(r > 0, r, 1.0), -1.0, 1.0)), 0.0)
    return r, az, el


def scale_range(xyz: np.ndarray, new_range: np.ndarray) -> np.ndarray:
    """Move each point along its own ray to ``new_range`` (points at the origin stay there).

    Equivalent to converting to spherical coordinates, changing r and converting back, without
    the trigonometry round trip. A negative new range flips the point through the sensor, as the
    spherical formula would.
    """
    xyz = np.asarray(xyz, dtype=np.float64)
    r = np.linalg.norm(xyz, axis=1)
    factor = np.divide(new_range, r, out=np.ones_like(r), where=r > 0)
    return xyz * factor[:, None]


def wrap_angle(a: np.ndarray) -> np.ndarray:
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi
