"""ModelNet40 (h5 + OFF), ScanObjectNN and ShapeNetCore readers against files in the real formats,
including malformed ones, and the demo object source that writes those formats."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from bench_build.sources.base import SourceError
from bench_build.sources.demo.objects import MODELNET40_CLASSES, write_demo_objects
from bench_build.sources.modelnet import ModelNet40H5Source, ModelNet40MeshSource
from bench_build.sources.scanobjectnn import SONN_CLASSES, ScanObjectNNSource
from bench_build.sources.shapenet import SHAPENET_SYNSETS, ShapeNetCoreSource, hash_split


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    return write_demo_objects(tmp_path_factory.mktemp("objects"), modelnet={"train": 1, "test": 1},
                              scanobjectnn={"training": 1, "test": 1}, shapenet={"train": 1, "test": 1})


def _copy(demo: Path, tmp_path: Path, sub: str) -> Path:
    shutil.copytree(demo / sub, tmp_path / sub)
    return tmp_path / sub


def _h5(path: Path, **ds: np.ndarray) -> None:
    with h5py.File(path, "w") as f:
        for k, v in ds.items():
            f.create_dataset(k, data=v)


# -- ModelNet40 HDF5 ------------------------------------------------------------------------------

def test_modelnet_h5_reads_every_shape_with_its_label(demo):
    src = ModelNet40H5Source(demo, "test")  # the parent folder of modelnet40_ply_hdf5_2048 works too
    ids = src.list_frames()
    assert ids == [f"test/{i:05d}" for i in range(40)]
    assert src.class_names == MODELNET40_CLASSES
    # rows follow test_files.txt order: file 0 then file 1, row by row
    h5 = demo / "modelnet40_ply_hdf5_2048"
    listed = [Path(x).name for x in (h5 / "test_files.txt").read_text().split()]
    rows = []
    for name in listed:
        with h5py.File(h5 / name) as f:
            rows += [(f["data"][i], int(f["label"][i, 0])) for i in range(len(f["label"]))]
    seen = set()
    for fid, (pts, label) in zip(ids, rows, strict=True):
        fr = src.read(fid)
        assert fr.fields == ("x", "y", "z") and fr.points.dtype == np.float32 and fr.points.shape == (2048, 3)
        np.testing.assert_array_equal(fr.points, pts)
        assert fr.attrs == {"class_name": MODELNET40_CLASSES[label], "class_id": label, "split": "test"}
        seen.add(label)
        assert np.sqrt((fr.points.astype(np.float64) ** 2).sum(1)).max() == pytest.approx(1.0, abs=1e-6)
    assert seen == set(range(40))


def test_modelnet_h5_all_lists_train_then_test(demo):
    ids = ModelNet40H5Source(demo / "modelnet40_ply_hdf5_2048", "all").list_frames()
    assert ids[:1] == ["train/00000"] and ids[40:41] == ["test/00000"] and len(ids) == 80


def test_modelnet_h5_without_file_lists_sorts_by_number(demo, tmp_path):
    root = _copy(demo, tmp_path, "modelnet40_ply_hdf5_2048")
    (root / "test_files.txt").unlink()
    src = ModelNet40H5Source(root, "test")
    assert [p.name for p in src.files("test")] == ["ply_data_test0.h5", "ply_data_test1.h5"]


@pytest.mark.parametrize("problem, expect", [
    ("keys", "no 'data' dataset"),
    ("length", "'label' has 3 rows but 'data' has 4"),
    ("shape", "'data' has shape (4, 2048)"),
    ("label_range", "labels outside 0..39"),
])
def test_modelnet_h5_malformed_files_are_named(demo, tmp_path, problem, expect):
    root = _copy(demo, tmp_path, "modelnet40_ply_hdf5_2048")
    bad = root / "ply_data_test1.h5"
    pts = np.zeros((4, 2048, 3), np.float32)
    if problem == "keys":
        _h5(bad, points=pts, label=np.zeros((4, 1), np.uint8))
    elif problem == "length":
        _h5(bad, data=pts, label=np.zeros((3, 1), np.uint8))
    elif problem == "shape":
        _h5(bad, data=pts[..., 0], label=np.zeros((4, 1), np.uint8))
    else:
        _h5(bad, data=pts, label=np.full((4, 1), 40, np.uint8))
    with pytest.raises(SourceError) as e:
        ModelNet40H5Source(root, "test").list_frames()
    assert e.value.path == str(bad) and expect in str(e.value)


def test_modelnet_h5_nan_points_and_missing_names(demo, tmp_path):
    root = _copy(demo, tmp_path, "modelnet40_ply_hdf5_2048")
    path = root / "ply_data_test0.h5"
    with h5py.File(path, "r+") as f:
        f["data"][0, 5, 1] = np.nan
    with pytest.raises(SourceError, match="row 0: NaN/inf") as e:
        ModelNet40H5Source(root, "test").read("test/00000")
    assert e.value.path == str(path)
    path.write_bytes(b"not hdf5")
    with pytest.raises(SourceError, match="not a readable HDF5 file") as e:
        ModelNet40H5Source(root, "test").read("test/00000")
    assert e.value.path == str(path)
    (root / "shape_names.txt").unlink()
    with pytest.raises(SourceError, match=r"shape_names\.txt not found"):
        ModelNet40H5Source(root, "test").list_frames()


# -- ModelNet40 OFF -------------------------------------------------------------------------------

def test_modelnet_off_both_header_styles(tmp_path):
    tri = "0 0 0\n1 0 0\n0 1 0\n0 0 1\n3 0 1 2\n3 0 1 3\n3 0 2 3\n3 1 2 3\n"
    for i, header in enumerate(["OFF\n4 4 0\n", "OFF4 4 0\n"]):
        p = tmp_path / "ModelNet40" / "cone" / "test" / f"cone_{i + 1:04d}.off"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(header + tri)
    src = ModelNet40MeshSource(tmp_path, "test", num_points=512)
    assert src.list_frames() == ["test/cone_0001", "test/cone_0002"]
    a, b = (src.read(f) for f in src.list_frames())
    assert a.points.shape == (512, 3) and a.attrs == {"class_name": "cone", "class_id": 0, "split": "test"}
    # same geometry, different shape id → different samples, each reproducible
    assert not np.array_equal(a.points, b.points)
    np.testing.assert_array_equal(a.points, src.read("test/cone_0001").points)
    # every sample lies on the tetrahedron's surface after the unit-sphere normalisation
    assert np.sqrt((a.points.astype(np.float64) ** 2).sum(1)).max() == pytest.approx(1.0, abs=1e-6)


def test_modelnet_off_area_weighting(tmp_path):
    """Two triangles with areas 1:9 receive samples in proportion 1:9 (binomial 4σ band)."""
    p = tmp_path / "ModelNet40" / "plane" / "test" / "plane_0001.off"
    p.parent.mkdir(parents=True)
    p.write_text("OFF\n6 2 0\n0 0 0\n1 0 0\n0 1 0\n0 0 5\n3 0 5\n0 3 5\n3 0 1 2\n3 3 4 5\n")
    src = ModelNet40MeshSource(tmp_path, "test", num_points=4000)
    from bench_build.sources.mesh import load_mesh, mesh_rng, sample_surface

    pts = sample_surface(load_mesh(p, "off"), 4000, mesh_rng("x"))
    share = float((pts[:, 2] < 2.5).mean())
    assert abs(share - 0.1) < 4 * np.sqrt(0.1 * 0.9 / 4000)
    assert src.read("test/plane_0001").points.shape == (4000, 3)


@pytest.mark.parametrize("text, expect", [
    ("OFF\n3 0 0\n0 0 0\n1 0 0\n0 1 0\n", "empty mesh"),
    ("OFF\n3 1 0\n0 0 0\n0 0 0\n0 0 0\n3 0 1 2\n", "area is 0"),
    ("", "cannot parse|empty mesh"),
])
def test_modelnet_off_empty_or_degenerate_mesh(tmp_path, text, expect):
    p = tmp_path / "ModelNet40" / "cup" / "test" / "cup_0001.off"
    p.parent.mkdir(parents=True)
    p.write_text(text)
    with pytest.raises(SourceError, match=expect) as e:
        ModelNet40MeshSource(tmp_path, "test").read("test/cup_0001")
    assert e.value.path == str(p)


# -- ScanObjectNN ---------------------------------------------------------------------------------

def test_scanobjectnn_reads_points_labels_and_mask(demo):
    src = ScanObjectNNSource(demo / "ScanObjectNN", "all")
    ids = src.list_frames()
    assert len(ids) == 30 and ids[0] == "training/00000" and ids[15] == "test/00000"
    path = demo / "ScanObjectNN" / "h5_files" / "main_split" / "test_objectdataset.h5"
    with h5py.File(path) as f:
        data, label, mask = f["data"][3], int(f["label"][3]), f["mask"][3]
    fr = src.read("test/00003")
    np.testing.assert_array_equal(fr.points, data)
    np.testing.assert_array_equal(fr.labels["mask"], mask)
    assert fr.attrs == {"class_name": SONN_CLASSES[label], "class_id": label, "split": "test"}
    assert 0 < mask.mean() < 1  # background points are present (OBJ_BG)
    assert ScanObjectNNSource(demo, "train").list_frames()[0] == "training/00000"


@pytest.mark.parametrize("problem, expect", [
    ("keys", "no 'label' dataset"),
    ("length", "'label' has 2 rows but 'data' has 3"),
    ("mask", "'mask' has shape"),
])
def test_scanobjectnn_malformed(tmp_path, problem, expect):
    d = tmp_path / "h5_files" / "main_split"
    d.mkdir(parents=True)
    path = d / "test_objectdataset.h5"
    pts = np.zeros((3, 2048, 3), np.float32)
    if problem == "keys":
        _h5(path, data=pts, labels=np.zeros(3, np.int64))
    elif problem == "length":
        _h5(path, data=pts, label=np.zeros(2, np.int64))
    else:
        _h5(path, data=pts, label=np.zeros(3, np.int64), mask=np.zeros((3, 1024), np.uint8))
    with pytest.raises(SourceError, match=expect) as e:
        ScanObjectNNSource(tmp_path, "test").list_frames()
    assert e.value.path == str(path)
    with pytest.raises(SourceError, match="file not found"):
        ScanObjectNNSource(tmp_path, "training").list_frames()


# -- ShapeNetCore v2 ------------------------------------------------------------------------------

def test_shapenet_lists_every_synset_and_samples_fps_clouds(demo):
    src = ShapeNetCoreSource(demo)
    ids = src.list_frames()
    assert len(ids) == 2 * len(SHAPENET_SYNSETS)
    assert {i.split("/")[0] for i in ids} == set(SHAPENET_SYNSETS)
    test_ids = ShapeNetCoreSource(demo, "test").list_frames()
    assert len(test_ids) == len(SHAPENET_SYNSETS)
    fr = src.read(test_ids[0])
    syn, model = test_ids[0].split("/")
    assert fr.points.shape == (4096, 3) and fr.points.dtype == np.float32
    assert fr.attrs == {"class_name": SHAPENET_SYNSETS[syn], "synset": syn, "model_id": model, "split": "test"}
    np.testing.assert_array_equal(fr.points, src.read(test_ids[0]).points)  # reproducible from the id
    # FPS spreads points: the smallest pairwise gap is far above that of 4,096 random surface samples
    from scipy.spatial import cKDTree

    from bench_build.sources.mesh import load_mesh, mesh_rng, sample_surface

    d_fps = cKDTree(fr.points).query(fr.points, k=2)[0][:, 1]
    rnd = sample_surface(load_mesh(src.path(test_ids[0]), "obj"), 4096, mesh_rng("other"))
    d_rnd = cKDTree(rnd).query(rnd, k=2)[0][:, 1]
    assert d_fps.min() > 5 * d_rnd.min() and np.median(d_fps) > np.median(d_rnd)


def test_shapenet_split_from_csv_or_hash(demo, tmp_path):
    root = _copy(demo, tmp_path, "ShapeNetCore.v2")
    with_csv = {i: ShapeNetCoreSource(root).split_of(i.split("/")[1]) for i in ShapeNetCoreSource(root).list_frames()}
    assert sorted(set(with_csv.values())) == ["test", "train"]
    (root / "all.csv").unlink()
    src = ShapeNetCoreSource(root)
    assert all(src.split_of(i.split("/")[1]) == hash_split(i.split("/")[1]) for i in src.list_frames())
    shares = [hash_split(hashlib.sha256(str(i).encode()).hexdigest()) for i in range(20000)]
    for split, p in (("train", 0.7), ("val", 0.1), ("test", 0.2)):
        assert abs(shares.count(split) / 20000 - p) < 4 * np.sqrt(p * (1 - p) / 20000)


def test_shapenet_unknown_synset_empty_mesh_bad_taxonomy(demo, tmp_path):
    root = _copy(demo, tmp_path, "ShapeNetCore.v2")
    bogus = root / "09999999" / "abc" / "models"
    bogus.mkdir(parents=True)
    with pytest.raises(SourceError, match="unknown synset '09999999'") as e:
        ShapeNetCoreSource(root).list_frames()
    assert e.value.path == str(root / "09999999")
    shutil.rmtree(root / "09999999")
    one = ShapeNetCoreSource(root).list_frames()[0]
    obj = root / one / "models" / "model_normalized.obj"
    obj.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\n")  # vertices, no faces
    with pytest.raises(SourceError, match="empty mesh") as e:
        ShapeNetCoreSource(root).read(one)
    assert e.value.path == str(obj)
    tax = json.loads((root / "taxonomy.json").read_text())
    (root / "taxonomy.json").write_text(json.dumps([t for t in tax if t["synsetId"] != one.split("/")[0]]))
    with pytest.raises(SourceError, match=r"not a ShapeNetCore v2 synset listed in taxonomy\.json"):
        ShapeNetCoreSource(root).list_frames()
    (root / "taxonomy.json").write_text("{oops")
    with pytest.raises(SourceError, match=r"taxonomy\.json"):
        ShapeNetCoreSource(root).list_frames()


# -- the demo object source ----------------------------------------------------------------------

def test_demo_objects_are_byte_identical(demo, tmp_path):
    again = write_demo_objects(tmp_path, modelnet={"train": 1, "test": 1}, scanobjectnn={"training": 1, "test": 1},
                               shapenet={"train": 1, "test": 1})

    def digest(root: Path) -> dict[str, str]:
        return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(root.rglob("*")) if p.is_file()}

    assert digest(again) == digest(demo)


def test_demo_object_classes_are_distinguishable(demo):
    """Shapes of one class are closer to each other than to other classes (a learnable demo)."""
    src = ModelNet40H5Source(demo, "all")
    by = {}
    for fid in src.list_frames():
        fr = src.read(fid)
        c = fr.points.astype(np.float64)
        # a rotation-free descriptor: the sorted eigenvalues of the covariance and the radial histogram
        r = np.sqrt((c ** 2).sum(1))
        desc = np.r_[np.sort(np.linalg.eigvalsh(np.cov(c.T))), np.histogram(r, 8, (0, 1))[0] / len(r)]
        by.setdefault(fr.attrs["class_id"], []).append(desc)
    same = np.mean([np.linalg.norm(v[0] - v[1]) for v in by.values()])
    other = np.mean([np.linalg.norm(by[i][0] - by[(i + 1) % 40][1]) for i in range(40)])
    assert same < 0.5 * other


def test_demo_objects_cli(tmp_path):
    from typer.testing import CliRunner

    from bench_build.cli import app

    out = CliRunner().invoke(app, ["demo-objects", str(tmp_path), "--per-class", "1"])
    assert out.exit_code == 0, out.output
    assert len(ModelNet40H5Source(tmp_path, "all").list_frames()) == 80
    assert len(ScanObjectNNSource(tmp_path, "all").list_frames()) == 45
    assert len(ShapeNetCoreSource(tmp_path).list_frames()) == 110


def test_shapenet_obj_with_materials_groups_and_missing_mtl(tmp_path):
    """Real ShapeNet OBJs reference a .mtl and textures and have several groups: geometry is read, materials not."""
    root = tmp_path / "ShapeNetCore.v2"
    obj = root / "02691156" / "abc" / "models" / "model_normalized.obj"
    obj.parent.mkdir(parents=True)
    obj.write_text("mtllib model_normalized.mtl\nusemtl m0\nv 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nvt 0 0\n"
                   "f 1/1 2/1 3/1\nusemtl m1\nf 1/1 2/1 4/1\ng part2\nf 1 3 4\n")
    (root / "taxonomy.json").write_text(json.dumps([{"synsetId": "02691156", "name": "airplane", "children": [],
                                                     "numInstances": 1}]))
    src = ShapeNetCoreSource(root, points=64, dense=256)
    fr = src.read("02691156/abc")
    assert fr.points.shape == (64, 3)
    # all three triangles are sampled (none lost with the groups): points on the x=0, y=0 and z=0 faces
    p = fr.points
    assert (np.abs(p[:, 2]) < 1e-6).any() and (np.abs(p[:, 1]) < 1e-6).any() and (np.abs(p[:, 0]) < 1e-6).any()


def test_demo_objects_cache_generates_only_what_a_recipe_reads(tmp_path, monkeypatch):
    from bench_build.sources.demo.objects import ensure_demo_objects

    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path / "cache"))
    root = ensure_demo_objects(("scanobjectnn",))
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["ScanObjectNN"]
    first = (root / "ScanObjectNN" / "h5_files" / "main_split" / "test_objectdataset.h5").stat().st_mtime_ns
    assert ensure_demo_objects(("scanobjectnn", "modelnet40")) == root
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == [
        "ModelNet40", "ScanObjectNN", "modelnet40_ply_hdf5_2048"]
    assert (root / "ScanObjectNN" / "h5_files" / "main_split" / "test_objectdataset.h5").stat().st_mtime_ns == first
    assert len(ScanObjectNNSource(root, "all").list_frames()) == 15 * 5
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp-")]
