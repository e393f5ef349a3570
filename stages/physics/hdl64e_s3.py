"""Per-laser calibration of one Velodyne HDL-64E S3 (the sensor of Seeing Through Fog / DENSE), as data.

What it is for: the snow model's HDL-64 focal intensity compensation (Hahner et al. CVPR 2022;
stages/weather/README.md). Each laser has a focal distance F (m) and a focal slope s; the received
intensity is corrected by
``s·|f − (1 − R/120)²|`` with ``f = (1 − 100·F/13100)²`` (Velodyne's HDL-64E S3 manual). ``max_intensity``
is the intensity cap of the snow model's channel (230 for lasers 53, 55, 56 and 58, 255 otherwise).

Source (facts only; no file text or layout is reproduced): the values of ``focal_distance``,
``focal_slope`` and ``vert_correction`` (rad, given here in degrees rounded to 1e-4) of lasers 0–63 in the
calibration file ``20171102_64E_S3.yaml`` that Hahner et al.'s LiDAR_snow_sim (SysCV/LiDAR_snow_sim,
CC BY-NC 4.0) uses and that Robo3D ships unchanged with its snow scripts (ldkong1205/Robo3D,
``create/{kitti_c,semantickitti_c,nuscenes_c}/snow/calib/``; repository licence CC BY-NC-SA 4.0, snow
code files CC BY-NC 4.0). The 230 caps are the laser list hard-coded in those scripts. The numbers are
measured constants of one physical sensor (Velodyne's factory calibration of the STF unit, dated
2017-11-02), i.e. facts, recorded here with attribution; the project's licence does not cover them more
than facts can be covered.

Row k of ``LASERS`` is laser_id k (the file lists lasers in laser_id order, which is NOT elevation order:
laser 0 points at −7.25°, laser 38 is the lowest at −24.82°, laser 29 the highest at +1.87°). Robo3D looks
the table up by its elevation-row index (row 0 = +3°, row 63 = −25°), i.e. effectively at random per row;
the snow stage's paper mode reproduces that, its physical mode uses the laser's own id.
"""

from __future__ import annotations

import numpy as np

from bench_build.stages.sensor import Sensor

CALIBRATION = "hdl64e_s3"  # name of this table in SnowParams.focal_calibration

#: (laser_id, vertical angle in degrees, focal_distance in m, focal_slope, max_intensity)
LASERS: tuple[tuple[int, float, float, float, int], ...] = (
    ( 0,   -7.2527,  8.00, 0.95, 255),
    ( 1,   -6.9760, 12.50, 1.00, 255),
    ( 2,    0.2040, 24.00, 0.70, 255),
    ( 3,    0.4734, 24.00, 0.75, 255),
    ( 4,   -6.6526, 18.00, 0.50, 255),
    ( 5,   -6.2826, 24.00, 0.75, 255),
    ( 6,   -8.5282, 13.00, 2.00, 255),
    ( 7,   -8.3105, 24.00, 0.75, 255),
    ( 8,   -5.9120, 23.50, 0.40, 255),
    ( 9,   -5.5990, 19.50, 0.60, 255),
    (10,   -7.9776,  6.50, 1.20, 255),
    (11,   -7.5982, 21.00, 1.10, 255),
    (12,   -3.1658, 24.00, 0.70, 255),
    (13,   -2.8505, 24.00, 0.85, 255),
    (14,   -5.2159, 14.00, 1.20, 255),
    (15,   -4.8673, 24.00, 0.75, 255),
    (16,   -2.4882, 24.00, 0.65, 255),
    (17,   -2.1842, 24.00, 0.80, 255),
    (18,   -4.5416, 24.00, 0.70, 255),
    (19,   -4.2621, 24.00, 0.75, 255),
    (20,   -1.8449, 24.00, 0.65, 255),
    (21,   -1.5524, 24.00, 0.75, 255),
    (22,   -3.9009, 24.00, 0.70, 255),
    (23,   -3.5627, 24.00, 0.70, 255),
    (24,    0.8716, 11.00, 1.35, 255),
    (25,    1.2111, 21.00, 0.65, 255),
    (26,   -1.1544, 24.00, 1.20, 255),
    (27,   -0.7797, 24.00, 1.00, 255),
    (28,    1.5506, 24.00, 0.60, 255),
    (29,    1.8665, 24.00, 0.65, 255),
    (30,   -0.4987, 24.00, 0.80, 255),
    (31,   -0.1122, 24.00, 0.75, 255),
    (32,  -22.6474, 12.00, 2.00, 255),
    (33,  -22.2171,  0.25, 0.95, 255),
    (34,  -11.4191, 12.00, 0.40, 255),
    (35,  -10.7988,  9.50, 1.45, 255),
    (36,  -21.7943, 10.00, 1.55, 255),
    (37,  -21.1961,  9.50, 1.50, 255),
    (38,  -24.8161,  9.00, 1.35, 255),
    (39,  -24.2734,  0.25, 1.00, 255),
    (40,  -20.6853,  0.25, 0.80, 255),
    (41,  -20.0367, 12.00, 1.95, 255),
    (42,  -23.8144,  0.25, 1.05, 255),
    (43,  -23.1345,  8.00, 1.45, 255),
    (44,  -16.4463,  9.50, 1.50, 255),
    (45,  -15.9712,  9.50, 0.40, 255),
    (46,  -19.6221, 11.50, 2.00, 255),
    (47,  -18.9858,  0.25, 0.80, 255),
    (48,  -15.5590, 14.50, 0.50, 255),
    (49,  -15.0141, 11.50, 1.70, 255),
    (50,  -18.7341, 10.00, 1.50, 255),
    (51,  -18.1544, 14.50, 0.40, 255),
    (52,  -14.5322,  9.00, 0.40, 255),
    (53,  -13.8056, 12.50, 1.70, 230),
    (54,  -17.6240,  6.50, 0.40, 255),
    (55,  -16.8978, 12.00, 1.65, 230),
    (56,  -10.2894,  9.50, 1.60, 230),
    (57,   -9.8352,  0.25, 0.60, 255),
    (58,  -13.4294, 10.00, 1.90, 230),
    (59,  -12.9187,  0.25, 0.55, 255),
    (60,   -9.4368,  5.00, 0.80, 255),
    (61,   -8.8546,  0.25, 0.45, 255),
    (62,  -12.5175, 10.00, 1.10, 255),
    (63,  -11.9357, 15.00, 0.40, 255),
)

LASER_ID = np.array([r[0] for r in LASERS], dtype=np.int64)
ELEVATION_DEG = np.array([r[1] for r in LASERS])
FOCAL_DISTANCE = np.array([r[2] for r in LASERS])
FOCAL_SLOPE = np.array([r[3] for r in LASERS])
MAX_INTENSITY = np.array([r[4] for r in LASERS], dtype=np.float64)
for _a in (LASER_ID, ELEVATION_DEG, FOCAL_DISTANCE, FOCAL_SLOPE, MAX_INTENSITY):
    _a.setflags(write=False)

#: The STF sensor as a `bench_build.stages.sensor.Sensor`: ring id r is laser_id r (STF stores the laser id), so its
#: elevations are the table's, in laser_id order (not sorted).
HDL64E_S3 = Sensor("velodyne-hdl64e-s3", tuple(float(v) for v in ELEVATION_DEG), max_range=120.0)


def focal_offset(focal_distance: np.ndarray) -> np.ndarray:
    """f = (1 − 100·F/13100)² (F in m; 13100 cm from Velodyne's manual)."""
    return (1.0 - 100.0 * np.asarray(focal_distance, dtype=np.float64) / 13100.0) ** 2


def nearest_laser(elevation_deg: np.ndarray) -> np.ndarray:
    """The laser_id whose vertical angle is nearest each elevation (for HDL-64 sources without laser ids)."""
    order = np.argsort(ELEVATION_DEG)
    el = ELEVATION_DEG[order]
    e = np.asarray(elevation_deg, dtype=np.float64)
    j = np.clip(np.searchsorted(el, e), 1, len(el) - 1)
    left_nearer = np.abs(e - el[j - 1]) <= np.abs(el[j] - e)
    return LASER_ID[order[np.where(left_nearer, j - 1, j)]]
