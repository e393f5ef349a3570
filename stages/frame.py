"""The in-memory model of one LiDAR frame: points, per-point labels, 3D boxes and calibration.

Everything here is plain NumPy and immutable by convention: a stage builds a new `Frame` with
`with_points`, `take` or `append` and never writes into the arrays of its input. Derived data that
several stages need (a KD-tree, the points inside each box) is computed lazily and cached on the
frame, so a worker that carries one frame through every corruption and severity builds it once.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from bench_build.stages.sensor import Sensor

if TYPE_CHECKING:
    from bench_build.stages.kernels.grid_knn import Grid

DELETION_GRID_CELL = 0.4  # metres: the x–y cell of the sequential deletions' search grid (`Frame.deletion_grid`)

#: Intensity scales a source can declare. The value is the top of the range (tanh-normalised Waymo
#: intensities are in [0, 1) as well, but are not linear in reflectance, hence their own name).
INTENSITY_SCALES: dict[str, float] = {"unit": 1.0, "byte": 255.0, "tanh": 1.0}


class PointTag(enum.IntEnum):
    """Per-point provenance written by stages into the ``point_tag`` column (0: an untouched return)."""

    CLEAN = 0  # unchanged source point (or moved by a stage that does not tag)
    ATTENUATED = 1  # same position, intensity changed by the medium
    SCATTER_FOG = 2
    SCATTER_SNOW = 3
    SCATTER_RAIN = 4
    CROSSTALK = 5
    JITTER = 6
    SYNTHETIC = 7  # a point that did not exist in the source scan (upsampling, background, ...)


@dataclass(frozen=True, eq=False)
class Calib:
    """KITTI calibration: camera projections, rectification and the velodyne→camera transform."""

    P: tuple[np.ndarray, ...]  # P0..P3, each 3×4
    R0_rect: np.ndarray  # 3×3
    Tr_velo_to_cam: np.ndarray  # 3×4
    Tr_imu_to_velo: np.ndarray | None = None  # 3×4

    @property
    def P2(self) -> np.ndarray:
        return self.P[2]

    @cached_property
    def velo_to_rect(self) -> np.ndarray:
        """4×4 homogeneous transform: X_rect = R0_rect · Tr_velo_to_cam · [x y z 1]ᵀ."""
        r0 = np.eye(4)
        r0[:3, :3] = self.R0_rect
        tr = np.eye(4)
        tr[:3, :4] = self.Tr_velo_to_cam
        return r0 @ tr

    @cached_property
    def rect_to_velo(self) -> np.ndarray:
        return np.linalg.inv(self.velo_to_rect)

    def lidar_to_rect(self, xyz: np.ndarray) -> np.ndarray:
        xyz = np.asarray(xyz, dtype=np.float64).reshape(-1, 3)
        return xyz @ self.velo_to_rect[:3, :3].T + self.velo_to_rect[:3, 3]

    def rect_to_lidar(self, xyz: np.ndarray) -> np.ndarray:
        xyz = np.asarray(xyz, dtype=np.float64).reshape(-1, 3)
        return xyz @ self.rect_to_velo[:3, :3].T + self.rect_to_velo[:3, 3]

    def project_rect(self, xyz_rect: np.ndarray) -> np.ndarray:
        """Pixel coordinates (M×2) of rectified-camera points through P2."""
        h = np.concatenate([xyz_rect, np.ones((len(xyz_rect), 1))], axis=1) @ self.P2.T
        return h[:, :2] / h[:, 2:3]

    def as_dict(self) -> dict[str, list[float]]:
        d = {f"P{i}": self.P[i].ravel().tolist() for i in range(4)}
        d["R0_rect"] = self.R0_rect.ravel().tolist()
        d["Tr_velo_to_cam"] = self.Tr_velo_to_cam.ravel().tolist()
        if self.Tr_imu_to_velo is not None:
            d["Tr_imu_to_velo"] = self.Tr_imu_to_velo.ravel().tolist()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, list[float]]) -> Calib:
        imu = d.get("Tr_imu_to_velo")
        return cls(
            P=tuple(np.asarray(d[f"P{i}"], dtype=np.float64).reshape(3, 4) for i in range(4)),
            R0_rect=np.asarray(d["R0_rect"], dtype=np.float64).reshape(3, 3),
            Tr_velo_to_cam=np.asarray(d["Tr_velo_to_cam"], dtype=np.float64).reshape(3, 4),
            Tr_imu_to_velo=None if imu is None else np.asarray(imu, dtype=np.float64).reshape(3, 4),
        )


#: Class name of KITTI's "ignore this region" rows; they have no valid 3D box and stages skip them.
DONT_CARE = "DontCare"


@dataclass(frozen=True, eq=False)
class Boxes:
    """M oriented 3D boxes in the LiDAR frame, plus the KITTI ``label_2`` fields needed to write them back.

    ``center`` is the geometric centre (x, y, z); ``dims`` is (dx, dy, dz) = (length, width, height);
    ``heading`` is the yaw about +z (0 = facing +x). ``truncated``, ``occluded``, ``alpha`` and
    ``bbox2d`` (left, top, right, bottom in pixels) are KITTI's image-side annotations.
    """

    center: np.ndarray  # (M, 3) float64
    dims: np.ndarray  # (M, 3) float64
    heading: np.ndarray  # (M,) float64
    cls: np.ndarray  # (M,) str (object array)
    truncated: np.ndarray  # (M,) float64
    occluded: np.ndarray  # (M,) int64
    alpha: np.ndarray  # (M,) float64
    bbox2d: np.ndarray  # (M, 4) float64

    def __post_init__(self) -> None:
        m = len(self.heading)
        for name in ("center", "dims", "cls", "truncated", "occluded", "alpha", "bbox2d"):
            if len(getattr(self, name)) != m:
                raise ValueError(f"Boxes.{name} has {len(getattr(self, name))} rows, expected {m}")

    def __len__(self) -> int:
        return len(self.heading)

    @classmethod
    def empty(cls) -> Boxes:
        return cls(
            center=np.zeros((0, 3)),
            dims=np.zeros((0, 3)),
            heading=np.zeros(0),
            cls=np.zeros(0, dtype=object),
            truncated=np.zeros(0),
            occluded=np.zeros(0, dtype=np.int64),
            alpha=np.zeros(0),
            bbox2d=np.zeros((0, 4)),
        )

    @property
    def valid(self) -> np.ndarray:
        """Boxes that describe a real object (everything except DontCare)."""
        return self.cls != DONT_CARE

    def replace(self, **changes: np.ndarray) -> Boxes:
        return replace(self, **changes)

    def corners(self) -> np.ndarray:
        """(M, 8, 3) box corners in the LiDAR frame."""
        sx = np.array([1, 1, -1, -1, 1, 1, -1, -1]) * 0.5
        sy = np.array([1, -1, -1, 1, 1, -1, -1, 1]) * 0.5
        sz = np.array([-1, -1, -1, -1, 1, 1, 1, 1]) * 0.5
        local = np.stack(
            [sx[None] * self.dims[:, :1], sy[None] * self.dims[:, 1:2], sz[None] * self.dims[:, 2:3]], axis=-1
        )
        c, s = np.cos(self.heading)[:, None], np.sin(self.heading)[:, None]
        x = local[..., 0] * c - local[..., 1] * s
        y = local[..., 0] * s + local[..., 1] * c
        return np.stack([x, y, local[..., 2]], axis=-1) + self.center[:, None, :]


@dataclass(frozen=True, eq=False)
class Frame:
    """One scan: ``points`` is N×C float32 with column names ``fields`` (x, y, z, intensity[, ring]).

    ``labels`` holds per-point columns of length N (e.g. ``point_tag`` written by stages, ``semantic``
    from a segmentation source). ``intensity_scale`` names the source's scale (see INTENSITY_SCALES).
    ``info`` holds per-example facts that stages record (JSON-able values).
    ``attrs`` holds per-example facts the *source* gives (object benchmarks: ``class_name``,
    ``class_id``, ``split``; 3DOS adds ``track``, ``scenario``, ``known``): typed columns of the row,
    never LiDAR-only, empty for scans. Stages carry them through unchanged.
    """

    frame_id: str
    points: np.ndarray
    fields: tuple[str, ...] = ("x", "y", "z", "intensity")
    intensity_scale: str = "unit"
    labels: Mapping[str, np.ndarray] = field(default_factory=dict)
    boxes: Boxes | None = None
    calib: Calib | None = None
    info: Mapping[str, Any] = field(default_factory=dict)  # per-example facts stages record (JSON-able)
    attrs: Mapping[str, Any] = field(default_factory=dict)  # per-example facts of the source (class, split, …)
    sensor: Sensor | None = None  # the LiDAR that recorded it (beam count, elevations, range); None: unknown

    def __post_init__(self) -> None:
        if self.points.ndim != 2 or self.points.shape[1] != len(self.fields):
            raise ValueError(
                f"frame {self.frame_id}: points have shape {self.points.shape}, "
                f"expected (N, {len(self.fields)}) for fields {self.fields}"
            )
        if self.points.dtype != np.float32:
            raise ValueError(f"frame {self.frame_id}: points must be float32, got {self.points.dtype}")
        if tuple(self.fields[:3]) != ("x", "y", "z"):
            raise ValueError(f"frame {self.frame_id}: the first fields must be x, y, z, got {self.fields}")
        if self.intensity_scale not in INTENSITY_SCALES:
            raise ValueError(f"frame {self.frame_id}: unknown intensity scale {self.intensity_scale!r}")
        for name, col in self.labels.items():
            if len(col) != len(self.points):
                raise ValueError(
                    f"frame {self.frame_id}: label column {name!r} has {len(col)} rows, "
                    f"points have {len(self.points)}"
                )

    # -- views ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.points)

    @property
    def xyz(self) -> np.ndarray:
        return self.points[:, :3]

    def column(self, name: str) -> np.ndarray:
        return self.points[:, self.fields.index(name)]

    @property
    def intensity(self) -> np.ndarray:
        return self.column("intensity")

    @property
    def intensity_max(self) -> float:
        return INTENSITY_SCALES[self.intensity_scale]

    @property
    def has_boxes(self) -> bool:
        return self.boxes is not None and len(self.boxes) > 0

    @cached_property
    def derived(self) -> dict[Any, Any]:
        """Per-frame cache of data derived from this frame's points (e.g. PCA normals), filled by stages that
        need it, so the severities of one frame share it; a new frame (with_points, take, …) starts empty."""
        return {}

    @cached_property
    def deletion_grid(self) -> tuple[np.ndarray, Grid]:
        """The search grid of the sequential neighbourhood deletions (`cutout`, `local_dec`: exact k nearest
        present points, `bench_build.stages.geometry.remove_neighbourhoods_sequentially`) over this frame's points, with
        their float64 xyz: built once (≈ 4 ms for 130k points), shared by both stages' severities."""
        from bench_build.stages.kernels.grid_knn import Grid  # numba: only a frame a stage deletes from needs it

        xyz = np.ascontiguousarray(self.xyz, dtype=np.float64)
        return xyz, Grid(xyz, DELETION_GRID_CELL)

    @cached_property
    def kdtree(self):  # -> scipy.spatial.cKDTree (imported lazily: scipy is slow to import)
        from scipy.spatial import cKDTree

        # sliding-midpoint splits without shrinking node boxes: builds 2× faster than the default and
        # answers queries far from the data (background points in empty space) 10× faster; same neighbours
        return cKDTree(self.xyz.astype(np.float64), balanced_tree=False, compact_nodes=False)

    @cached_property
    def box_index(self) -> np.ndarray:
        """For every point, the index of the first valid box that contains it, or -1."""
        if self.boxes is None:
            return np.full(len(self), -1, dtype=np.int64)
        from bench_build.stages.kernels.boxes import points_in_boxes  # numba: only stages that move boxes need it

        b = self.boxes
        return points_in_boxes(self.xyz, b.center, b.dims, b.heading, b.valid)

    @cached_property
    def box_points(self) -> tuple[np.ndarray, ...]:
        """Per box row, the ascending indices of its points (``box_index == j``); empty for DontCare."""
        m = 0 if self.boxes is None else len(self.boxes)
        owner = self.box_index
        order = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[order], np.arange(m + 1))
        return tuple(order[bounds[j]: bounds[j + 1]] for j in range(m))

    @property
    def point_tag(self) -> np.ndarray:
        tag = self.labels.get("point_tag")
        return np.zeros(len(self), dtype=np.uint8) if tag is None else tag

    # -- builders (never mutate self) ----------------------------------------------------------
    def with_points(self, points: np.ndarray, **labels: np.ndarray) -> Frame:
        """Same rows, new point values (and optionally new/overridden label columns)."""
        points = np.ascontiguousarray(points, dtype=np.float32)
        if len(points) != len(self):
            raise ValueError("with_points keeps the row count; use take/append to change it")
        return replace(self, points=points, labels={**self.labels, **labels})

    def take(self, index: np.ndarray) -> Frame:
        """Select rows by integer index or boolean mask; every per-point column follows."""
        index = np.asarray(index)
        return replace(
            self,
            points=np.ascontiguousarray(self.points[index]),
            labels={k: v[index] for k, v in self.labels.items()},
        )

    def append(self, points: np.ndarray, tag: PointTag = PointTag.SYNTHETIC, **labels: np.ndarray) -> Frame:
        """Add rows. New points get ``tag``; label columns not given for them are copied as zeros."""
        points = np.ascontiguousarray(points, dtype=np.float32).reshape(-1, len(self.fields))
        n_new = len(points)
        merged: dict[str, np.ndarray] = {}
        names = set(self.labels) | set(labels) | {"point_tag"}
        for name in sorted(names):
            old = self.labels.get(name)
            if name == "point_tag":
                old = self.point_tag
                new = labels.get(name, np.full(n_new, int(tag), dtype=np.uint8))
            else:
                new = labels.get(name)
                if old is None:
                    old = np.zeros(len(self), dtype=new.dtype)
                if new is None:
                    new = np.zeros(n_new, dtype=old.dtype)
            merged[name] = np.concatenate([old, np.asarray(new, dtype=old.dtype)])
        return replace(self, points=np.concatenate([self.points, points]), labels=merged)

    def with_boxes(self, boxes: Boxes) -> Frame:
        return replace(self, boxes=boxes)

    def with_info(self, **facts: Any) -> Frame:
        """Record per-example facts (e.g. the ring recovery method used, a per-frame random draw);
        they are written to the row's ``info`` column as JSON."""
        return replace(self, info={**self.info, **facts})
