"""The embedded demo source: deterministic, ray-cast HDL-64E-like scans written in KITTI layout.

Each frame is a street scene (ground plane, building façades, poles, 3–8 cars, pedestrians and
cyclists) ray-cast with open3d's `RaycastingScene` from a sensor 1.73 m above the ground with
64 lasers between +2.0° and −24.8° (upper block 1/3° apart, lower block 1/2°, like the HDL-64E)
and 0.09° azimuth steps. Returns beyond 120 m are dropped, and weak returns are lost with a
probability that grows with range and falls with reflectivity, which brings a frame to the
100–130 k points of a real KITTI scan. Intensity ∝ albedo · cos(incidence), falling with range, in
[0, 1]; a share of car returns has zero intensity, as on real KITTI cars (dark paint, glass).

Points are stored ring by ring (top laser first), each ring sweeping azimuth counter-clockwise
from 0 to 2π, so a reader can recover each point's laser ring from the file order alone: a new ring
starts wherever the azimuth wraps from near 2π back to near 0 (as on a raw HDL-64E ``.bin``).
Objects in front of the camera get ``label_2`` rows (KITTI only labels the camera's view), with the
2D box from the projected 3D box and truncation from how much of it leaves the image.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench_build.sources.demo.cache import DEMO_SEED, demo_cache_dir, demo_key, ensure_cached, mark_demo
from bench_build.sources.kitti import KittiSource, write_frame
from bench_build.stages.frame import Boxes, Calib, Frame
from bench_build.stages.geometry import IMAGE_SIZE, lidar_heading_to_rot_y
from bench_build.stages.kernels.spherical import wrap_angle
from bench_build.stages.sensor import HDL64E

#: raise when the demo scans change: the cache (`ensure_demo_source`, and the registry's entry) is keyed by it
DEMO_VERSION = 1

SENSOR_HEIGHT = 1.73
MAX_RANGE = 120.0
UPPER = np.linspace(2.0, 2.0 - 31 / 3, 32)  # +2.0° … −8.33°
LOWER = np.linspace(-8.83, -24.8, 32)  # −8.83° … −24.8°
ELEVATIONS_DEG = np.concatenate([UPPER, LOWER])
AZIMUTH_STEP_DEG = 0.09

# class: (length, width, height) of the object; the annotated box adds a few cm of slack
CLASS_DIMS = {"Car": (3.9, 1.6, 1.5), "Pedestrian": (0.6, 0.6, 1.75), "Cyclist": (1.76, 0.6, 1.73)}
BOX_SLACK = 0.06


def demo_calib() -> Calib:
    """A KITTI-like calibration (focal 721.5 px, velodyne → camera ≈ axis permutation)."""
    p2 = np.array([[721.5377, 0.0, 609.5593, 44.85728], [0.0, 721.5377, 172.854, 0.2163791], [0, 0, 1.0, 0.002745884]])
    p0 = p2.copy()
    p0[:, 3] = 0.0
    r0 = np.array([[0.9999239, 0.00983776, -0.007445048], [-0.009869795, 0.9999421, -0.004278459],
                   [0.007402527, 0.004351614, 0.9999631]])
    tr = np.array([[7.533745e-03, -9.999714e-01, -6.166020e-04, -4.069766e-03],
                   [1.480249e-02, 7.280733e-04, -9.998902e-01, -7.631618e-02],
                   [9.998621e-01, 7.523790e-03, 1.480755e-02, -2.717806e-01]])
    imu = np.array([[9.999976e-01, 7.553071e-04, -2.035826e-03, -8.086759e-01],
                    [-7.854027e-04, 9.998898e-01, -1.482298e-02, 3.195559e-01],
                    [2.024406e-03, 1.482454e-02, 9.998881e-01, -7.997231e-01]])
    return Calib(P=(p0, p0, p2, p2), R0_rect=r0, Tr_velo_to_cam=tr, Tr_imu_to_velo=imu)


@dataclass(frozen=True)
class _Obj:
    cls: str
    center: np.ndarray  # geometric centre of the annotated box
    dims: np.ndarray
    heading: float
    albedo: float


def place_objects(rng: np.random.Generator) -> list[_Obj]:
    n = int(rng.integers(3, 9))
    kinds = ["Car"] * 2 + list(rng.choice(["Car", "Car", "Pedestrian", "Cyclist"], size=n - 2))
    objs: list[_Obj] = []
    tries = 0
    while len(objs) < n and tries < 500:
        tries += 1
        cls = kinds[len(objs)]
        # mostly in front of the car (labelled), some behind / to the side (unlabelled, like KITTI)
        x = rng.uniform(5.0, 45.0) if rng.random() < 0.8 else rng.uniform(-30.0, -5.0)
        y = rng.uniform(-7.0, 7.0) if cls == "Car" else rng.uniform(-9.0, 9.0)
        heading = float(rng.choice([0.0, np.pi]) + rng.normal(0, 0.15)) if cls != "Pedestrian" else rng.uniform(-3, 3)
        dims = np.array(CLASS_DIMS[cls]) * rng.uniform(0.92, 1.08, 3) + BOX_SLACK
        center = np.array([x, y, -SENSOR_HEIGHT + dims[2] / 2])
        if any(np.linalg.norm(center[:2] - o.center[:2]) < (dims[0] + o.dims[0]) / 2 + 0.5 for o in objs):
            continue
        albedo = float(rng.uniform(0.05, 0.7)) if cls == "Car" else float(rng.uniform(0.2, 0.6))
        objs.append(_Obj(cls, center, dims, float(wrap_angle(heading)), albedo))
    return objs


def _box_mesh(o3d, center, dims, heading):
    mesh = o3d.geometry.TriangleMesh.create_box(*dims)
    mesh.translate(-np.asarray(dims) / 2)
    mesh.rotate(o3d.geometry.get_rotation_matrix_from_xyz((0, 0, heading)), center=(0, 0, 0))
    mesh.translate(center)
    return mesh


def scene_meshes(rng: np.random.Generator, objs: list[_Obj]):
    """(mesh, albedo, object index or −1) for everything in the scene."""
    import open3d as o3d

    parts = []
    ground = o3d.geometry.TriangleMesh.create_box(300.0, 300.0, 0.1)
    ground.translate((-150.0, -150.0, -SENSOR_HEIGHT - 0.1))
    parts.append((ground, 0.25, -1))
    for side in (-1, 1):  # façades along both sides of the street, with gaps
        x = -60.0
        while x < 80.0:
            length = rng.uniform(8.0, 25.0)
            if rng.random() < 0.8:
                depth, height = rng.uniform(6, 12), rng.uniform(4.0, 14.0)
                offset = side * rng.uniform(11.0, 16.0)
                c = np.array([x + length / 2, offset + side * depth / 2, -SENSOR_HEIGHT + height / 2])
                parts.append((_box_mesh(o3d, c, (length, depth, height), 0.0), float(rng.uniform(0.2, 0.6)), -1))
            x += length + rng.uniform(1.0, 6.0)
    for _ in range(int(rng.integers(4, 10))):  # poles along the kerbs
        pole = o3d.geometry.TriangleMesh.create_cylinder(radius=0.15, height=6.0, resolution=12)
        pole.translate((rng.uniform(-40, 60), rng.choice([-1, 1]) * rng.uniform(8.5, 10.0), -SENSOR_HEIGHT + 3.0))
        parts.append((pole, 0.5, -1))
    for i, o in enumerate(objs):
        inner = o.dims - BOX_SLACK
        if o.cls == "Car":  # body + cabin
            body = (inner[0], inner[1], inner[2] * 0.6)
            parts.append((_box_mesh(o3d, o.center - [0, 0, inner[2] * 0.2], body, o.heading), o.albedo, i))
            cabin = (inner[0] * 0.55, inner[1] * 0.9, inner[2] * 0.4)
            off = np.array([-0.1 * inner[0] * np.cos(o.heading), -0.1 * inner[0] * np.sin(o.heading), inner[2] * 0.3])
            parts.append((_box_mesh(o3d, o.center + off, cabin, o.heading), o.albedo * 0.5, i))
        else:
            parts.append((_box_mesh(o3d, o.center, inner, o.heading), o.albedo, i))
    return parts


def cast_grid(parts, el: np.ndarray, az: np.ndarray):
    """Ray-cast the scene's parts from the origin at every (elevation row, azimuth column).

    ``el`` (rows×1) and ``az`` (1×columns) in radians. Returns the unit directions (rows×columns×3) and,
    per ray in row-major order, the hit distance, the part index and the surface normal."""
    import open3d as o3d

    scene = o3d.t.geometry.RaycastingScene()
    for mesh, _, _ in parts:
        scene.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(mesh))
    dirs = np.stack(np.broadcast_arrays(np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)), -1)
    flat = dirs.reshape(-1, 3)
    rays = np.concatenate([np.zeros_like(flat), flat], axis=1).astype(np.float32)
    ans = scene.cast_rays(o3d.core.Tensor(rays))
    t = ans["t_hit"].numpy().astype(np.float64)
    geom = ans["geometry_ids"].numpy().astype(np.int64)
    normals = ans["primitive_normals"].numpy().astype(np.float64)
    return dirs, t, geom, normals


def _raycast(parts, rng: np.random.Generator, azimuth_step_deg: float):
    albedo = np.array([alb for _, alb, _ in parts], dtype=np.float64)
    n_az = round(360.0 / azimuth_step_deg)
    el = np.radians(ELEVATIONS_DEG + rng.normal(0, 0.01, 64))[:, None]
    az = (np.arange(n_az) * (2 * np.pi / n_az))[None, :] + rng.uniform(0, 2 * np.pi / n_az)
    dirs, t, geom, normals = cast_grid(parts, el, az)
    ring = np.repeat(np.arange(64), n_az)
    return dirs.reshape(-1, 3).astype(np.float64), t, geom, normals, ring, albedo


def generate_frame(index: int, seed: int = DEMO_SEED, *, azimuth_step_deg: float = AZIMUTH_STEP_DEG) -> Frame:
    """Demo frame ``index`` (deterministic in ``seed`` and ``index``), with a ring column."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, index]))
    objs = place_objects(rng)
    parts = scene_meshes(rng, objs)
    dirs, t, geom, normals, ring, albedo = _raycast(parts, rng, azimuth_step_deg)
    hit = np.isfinite(t) & (t < MAX_RANGE) & (t > 1.0)
    dirs, t, geom, normals, ring = dirs[hit], t[hit], geom[hit], normals[hit], ring[hit]
    cos_inc = np.abs(np.einsum("ij,ij->i", dirs, normals))
    rho = albedo[geom]
    obj_of_part = np.array([p[2] for p in parts])[geom]
    is_car = np.isin(obj_of_part, [i for i, o in enumerate(objs) if o.cls == "Car"])
    signal = rho * (0.3 + 0.7 * cos_inc) / (1.0 + (t / 60.0) ** 2)
    # weak returns are lost; probability of detection grows with signal (dark, far, grazing → lost)
    keep = rng.random(len(t)) < np.clip(signal / 0.25, 0.0, 1.0) * 0.97
    dirs, t, ring, signal, is_car = dirs[keep], t[keep], ring[keep], signal[keep], is_car[keep]
    r = t + rng.normal(0.0, 0.01, len(t))
    xyz = dirs * r[:, None]
    intensity = np.clip(signal * 1.6 + rng.normal(0, 0.02, len(t)), 0.0, 1.0)
    intensity[is_car & (rng.random(len(t)) < 0.5)] = 0.0
    points = np.concatenate([xyz, intensity[:, None], ring[:, None]], axis=1).astype(np.float32)
    calib = demo_calib()
    return Frame(
        frame_id=f"{index:06d}",
        points=points,
        fields=("x", "y", "z", "intensity", "ring"),
        intensity_scale="unit",
        boxes=_labels(objs, calib),
        calib=calib,
        sensor=HDL64E,
    )


def _labels(objs: list[_Obj], calib: Calib) -> Boxes:
    rows = []
    w_img, h_img = IMAGE_SIZE
    for o in objs:
        b = Boxes(center=o.center[None], dims=o.dims[None], heading=np.array([o.heading]),
                  cls=np.array([o.cls], dtype=object), truncated=np.zeros(1), occluded=np.zeros(1, np.int64),
                  alpha=np.zeros(1), bbox2d=np.zeros((1, 4)))
        corners = calib.lidar_to_rect(b.corners()[0])
        if np.any(corners[:, 2] < 0.5):
            continue  # behind or beside the camera: KITTI does not label it
        uv = calib.project_rect(corners)
        lo, hi = uv.min(axis=0), uv.max(axis=0)
        clo, chi = np.clip(lo, 0, [w_img - 1, h_img - 1]), np.clip(hi, 0, [w_img - 1, h_img - 1])
        full, vis = np.prod(hi - lo), np.prod(np.maximum(chi - clo, 0))
        if vis <= 0:
            continue
        truncated = float(np.clip(1.0 - vis / full, 0.0, 1.0))
        c_rect = calib.lidar_to_rect(o.center[None])[0]
        rot_y = lidar_heading_to_rot_y(np.array([o.heading]), calib)[0]
        alpha = float(wrap_angle(rot_y - np.arctan2(c_rect[0], c_rect[2])))
        occluded = 0 if np.linalg.norm(o.center[:2]) < 20 else 1
        rows.append((o, truncated, occluded, alpha, [clo[0], clo[1], chi[0], chi[1]]))
    if not rows:
        return Boxes.empty()
    return Boxes(
        center=np.array([r[0].center for r in rows]),
        dims=np.array([r[0].dims for r in rows]),
        heading=np.array([r[0].heading for r in rows]),
        cls=np.array([r[0].cls for r in rows], dtype=object),
        truncated=np.array([r[1] for r in rows]),
        occluded=np.array([r[2] for r in rows], dtype=np.int64),
        alpha=np.array([r[3] for r in rows]),
        bbox2d=np.array([r[4] for r in rows], dtype=np.float64),
    )


def write_demo_dataset(out: str | Path, frames: int, *, seed: int = DEMO_SEED,
                       azimuth_step_deg: float = AZIMUTH_STEP_DEG) -> Path:
    """Write ``frames`` demo frames in KITTI layout under ``out`` (plus ImageSets); return ``out``."""
    out = Path(out)
    ids = []
    for i in range(frames):
        frame = generate_frame(i, seed, azimuth_step_deg=azimuth_step_deg)
        write_frame(out, frame)
        ids.append(frame.frame_id)
    sets = out / "ImageSets"
    sets.mkdir(parents=True, exist_ok=True)
    half = max(1, len(ids) // 2)
    (sets / "train.txt").write_text("".join(f"{i}\n" for i in ids[:half]))
    (sets / "val.txt").write_text("".join(f"{i}\n" for i in ids[half:]))
    (sets / "trainval.txt").write_text("".join(f"{i}\n" for i in ids))
    mark_demo(out)
    return out


def ensure_demo_source(frames: int = 8, *, seed: int = DEMO_SEED) -> KittiSource:
    """The demo dataset in the cache directory, generated on first use (and kept for later runs)."""
    root = ensure_cached(demo_cache_dir() / demo_key(seed, frames, DEMO_VERSION),
                         lambda tmp: write_demo_dataset(tmp, frames, seed=seed))
    return KittiSource(root)
