"""The 3DOS composite source: every scenario's known/unknown membership and mapped ids equal the released
benchmark's, counted from the released class lists (typed below as facts) applied to the fixture's shapes."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest

from bench_build.manifests.threedos import SCENARIOS, SN_SETS, SR_MODELNET, SR_SCANOBJECTNN, sn_set_of
from bench_build.sources.base import SourceError
from bench_build.sources.demo.objects import MODELNET40_CLASSES, write_demo_objects
from bench_build.sources.scanobjectnn import SONN_CLASSES
from bench_build.sources.shapenet import SHAPENET_SYNSETS
from bench_build.sources.threedos import ThreeDOSSource, authors_r2r_split

SYNSET_OF = {name: syn for syn, name in SHAPENET_SYNSETS.items()}
CELLPHONE = "02992529"

# The released class lists (antoalli/3D_OS datasets/sncore_splits.py, modelnet.py, scanobject.py), typed here
# as facts, independently of bench_build.manifests.threedos: ShapeNet synsets per SN set, ModelNet40 classes and SONN
# labels per SR set. Cellphone (02992529) is in none of them.
RELEASED_SN = {
    "SN1": "03797390 03636649 02818832 04554684 03691459 04401088 03207941 02942699 02843684 03593526 02880940 "
           "02871439 04330267 02828884 03211117 03085013 03046257 03928116",
    "SN2": "03261776 03624134 03001627 03938244 04379243 03642806 03710193 02801938 03337140 02933112 04256520 "
           "04004475 03991062 03759954 04460130 02808440 02773838 02747177",
    "SN3": "02946921 03761084 04225987 03325088 04468005 03467517 03948459 03513137 04530566 02691156 02876657 "
           "02954340 04099429 04090263 04074963 02958343 02924116 03790512",
}
RELEASED_MODELNET = {"SR1": {"chair", "bookshelf", "door", "sink", "sofa"},
                     "SR2": {"bed", "toilet", "desk", "monitor", "table"}}
RELEASED_SONN = {"SR1": {4, 8, 7, 12, 13}, "SR2": {10, 14, 5, 6, 9}, "SR3": {0, 1, 2, 3, 11}}
#: scenario → (known sets, unknown sets), as the released scripts pair them
RELEASED_SCENARIOS = {"SN1": (["SN1"], ["SN2", "SN3"]), "SN2": (["SN2"], ["SN1", "SN3"]),
                      "SN3": (["SN3"], ["SN1", "SN2"]), "SR1": (["SR1"], ["SR2", "SR3"]),
                      "SR2": (["SR2"], ["SR1", "SR3"]), "SR12": (["SR1", "SR2"], ["SR3"]),
                      "SR13": (["SR1", "SR3"], ["SR2"]), "SR23": (["SR2", "SR3"], ["SR1"])}


def _sonn_labels(root: Path) -> dict[str, list[int]]:
    main = next(root.rglob("main_split"))
    out = {}
    for split in ("training", "test"):
        with h5py.File(main / f"{split}_objectdataset.h5") as f:
            out[split] = np.asarray(f["label"]).reshape(-1).tolist()
    return out


def released_counts(shapenet: Path, modelnet40: Path, scanobjectnn: Path, *, cellphone: str = "exclude",
                    r2r_val: str = "authors") -> dict[str, dict[str, dict[str, int]]]:
    """Known / unknown examples per scenario and split that the released loaders give on these files, read
    straight from the files (all.csv, the h5 labels) with the lists above; ``cellphone="telephone"`` counts
    cellphones as telephones (the variant), ``r2r_val="none"`` keeps R2R's training file whole."""
    sn_root = next(p for p in (shapenet / "ShapeNetCore.v2", shapenet) if (p / "all.csv").is_file())
    with (sn_root / "all.csv").open(newline="") as f:
        shapes = [(r["synsetId"], r["split"]) for r in csv.DictReader(f) if (sn_root / r["synsetId"]).is_dir()]
    if cellphone == "telephone":
        shapes = [("04401088" if syn == CELLPHONE else syn, split) for syn, split in shapes]
    h5 = modelnet40 / "modelnet40_ply_hdf5_2048"
    names = (h5 / "shape_names.txt").read_text().split()
    mn: dict[str, list[str]] = {}
    for split in ("train", "test"):
        for line in (h5 / f"{split}_files.txt").read_text().split():
            with h5py.File(h5 / Path(line).name) as f:
                mn.setdefault(split, []).extend(names[i] for i in np.asarray(f["label"]).reshape(-1))
    sonn = _sonn_labels(scanobjectnn)
    out: dict[str, dict[str, dict[str, int]]] = {}

    def put(sc: str, split: str, known: int, unknown: int = 0) -> None:
        if known or unknown:
            out.setdefault(sc, {})[split] = {"known": known, "unknown": unknown}

    for sc, (known, unknown) in RELEASED_SCENARIOS.items():
        if sc.startswith("SN"):
            k = set(RELEASED_SN[known[0]].split())
            u = {s for name in unknown for s in RELEASED_SN[name].split()}
            for split in ("train", "val", "test"):
                put(sc, split, sum(syn in k and s == split for syn, s in shapes),
                    sum(syn in u and s == split for syn, s in shapes) if split == "test" else 0)
        elif len(known) == 1:  # Synthetic-to-Real: ModelNet40 train / test(as val), every SR scan as test
            put(sc, "train", sum(c in RELEASED_MODELNET[known[0]] for c in mn["train"]))
            put(sc, "val", sum(c in RELEASED_MODELNET[known[0]] for c in mn["test"]))
            every = sonn["training"] + sonn["test"]
            others = set().union(*(RELEASED_SONN[u] for u in unknown))
            put(sc, "test", sum(lab in RELEASED_SONN[known[0]] for lab in every), sum(lab in others for lab in every))
        else:  # Real-to-Real: the trainer's int(n·10/100) hold-out of the known training scans
            k = RELEASED_SONN[known[0]] | RELEASED_SONN[known[1]]
            n = sum(lab in k for lab in sonn["training"])
            n_val = int(n * 10 / 100) if r2r_val == "authors" else 0
            put(sc, "train", n - n_val)
            put(sc, "val", n_val)
            put(sc, "test", sum(lab in k for lab in sonn["test"]),
                sum(lab in RELEASED_SONN[unknown[0]] for lab in sonn["training"] + sonn["test"]))
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return write_demo_objects(tmp_path_factory.mktemp("objects3dos"), modelnet={"train": 1, "test": 1},
                              scanobjectnn={"training": 2, "test": 1}, shapenet={"train": 1, "val": 1, "test": 1})


@pytest.fixture(scope="module")
def src(root) -> ThreeDOSSource:
    return ThreeDOSSource(root)


@pytest.fixture(scope="module")
def real_layout(tmp_path_factory, root) -> Path:
    """A ShapeNetCore v2 tree and ScanObjectNN OBJ_BG files as downloaded, written by hand (not the demo
    writer): uneven shapes per synset, several cellphones in every split, subSynsetIds that differ from
    the synset, and a ScanObjectNN training file of uneven class sizes whose known count per R2R scenario is
    not a multiple of 10 (floor and ceil of 10 % differ). Meshes are a tetrahedron: listing reads none."""
    out = tmp_path_factory.mktemp("real3dos")
    sn = out / "ShapeNetCore.v2"
    rng = np.random.default_rng(7)
    chosen = [CELLPHONE, "04401088", "03001627", "02691156", "03636649", "04379243", "02958343"]
    rows, tax = [], []
    for k, syn in enumerate(chosen):
        n = 9 if syn == CELLPHONE else 3 + k
        for i in range(n):
            mid = f"{syn[-4:]}{i:04d}real"
            obj = sn / syn / mid / "models" / "model_normalized.obj"
            obj.parent.mkdir(parents=True)
            obj.write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 2 3\nf 1 2 4\nf 1 3 4\nf 2 3 4\n")
            split = ("train", "val", "test")[i % 3] if syn == CELLPHONE else str(rng.choice(
                ["train", "val", "test"], p=[0.7, 0.1, 0.2]))
            rows.append({"id": len(rows), "synsetId": syn, "subSynsetId": str(int(syn) + 1 + i),
                         "modelId": mid, "split": split})
        tax.append({"synsetId": syn, "name": SHAPENET_SYNSETS[syn], "children": [], "numInstances": n})
    (sn / "taxonomy.json").write_text(json.dumps(tax))
    with (sn / "all.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["id", "synsetId", "subSynsetId", "modelId", "split"])
        w.writeheader()
        w.writerows(rows)
    main = out / "ScanObjectNN" / "h5_files" / "main_split"
    main.mkdir(parents=True)
    for split, n in (("training", 173), ("test", 41)):
        labels = rng.integers(0, 15, n)
        with h5py.File(main / f"{split}_objectdataset.h5", "w") as f:
            f.create_dataset("data", data=rng.normal(size=(n, 2048, 3)).astype(np.float32))
            f.create_dataset("label", data=labels.astype(np.int64))
            f.create_dataset("mask", data=np.ones((n, 2048), np.uint8))
    return out


def test_every_scenario_has_the_spec_membership(src):
    entries = src._entries
    by = {}
    for fid, e in entries.items():
        by.setdefault(e["scenario"], []).append((fid, e))
    assert list(by) == [s.name for s in SCENARIOS]
    for sc in SCENARIOS:
        rows = by[sc.name]
        assert {e["track"] for _, e in rows} == {sc.track}
        for fid, e in rows:
            assert fid.startswith(f"{sc.name}/{e['split']}/{e['info']['dataset']}/")
            assert e["known"] == (e["class_id"] >= 0)
            if e["split"] != "test":
                assert e["known"]  # only test splits hold unknown shapes
        if sc.track == "synthetic":
            known_syn = {e["synset"] for _, e in rows if e["known"]}
            unknown_syn = {e["synset"] for _, e in rows if not e["known"]}
            assert known_syn == set(SN_SETS[sc.known[0]])  # cellphone in neither (released loader)
            assert unknown_syn == set(SN_SETS[sc.unknown[0]]) | set(SN_SETS[sc.unknown[1]])
            assert Counter(e["split"] for _, e in rows if e["known"]) == {"train": 18, "val": 18, "test": 18}
            ids = sorted(SN_SETS[sc.known[0]])
            for _, e in rows:
                if e["known"]:
                    assert e["class_id"] == ids.index(e["synset"])
        elif sc.track == "synth_to_real":
            cmap = SR_MODELNET[sc.known[0]]
            mn = [e for _, e in rows if e["info"]["dataset"] == "modelnet40"]
            assert {e["class_name"] for e in mn} == set(cmap) and all(e["class_id"] == cmap[e["class_name"]]
                                                                    for e in mn)
            assert Counter(e["split"] for e in mn) == {"train": len(cmap), "val": len(cmap)}
            so = [e for _, e in rows if e["info"]["dataset"] == "scanobjectnn"]
            assert {e["split"] for e in so} == {"test"}
            smap = SR_SCANOBJECTNN[sc.known[0]]
            for e in so:
                label = SONN_CLASSES.index(e["class_name"])
                assert e["class_id"] == smap.get(label, -1)
            # every SONN scan of SR1 ∪ SR2 ∪ SR3 (training + test files: 3 per class), nothing else
            assert len(so) == 3 * 15
            assert not any(e["known"] for e in so if SONN_CLASSES.index(e["class_name"]) in SR_SCANOBJECTNN["SR3"])
        else:
            known = [e for _, e in rows if e["known"]]
            # 2 training scans per class: 20 known, of which int(20·10/100) = 2 held out as val
            assert Counter(e["split"] for e in known) == {"train": 18, "val": 2, "test": 10}
            unknown = [e for _, e in rows if not e["known"]]
            assert {SONN_CLASSES.index(e["class_name"]) for e in unknown} == set(SR_SCANOBJECTNN[sc.unknown[0]])
            assert {e["unknown_set"] for e in unknown} == {sc.unknown[0]}
            assert len(unknown) == 3 * 5
            assert len({e["class_id"] for e in known}) == (10 if sc.name == "SR13" else 9)


def test_read_returns_the_scenarios_example(src, root):
    ids = src.list_frames()
    sn = next(i for i in ids if i.startswith("SN2/test/shapenet/"))
    fr = src.read(sn)
    assert fr.frame_id == sn and fr.points.shape == (4096, 3)
    assert fr.attrs["scenario"] == "SN2" and fr.attrs["domain"] == "synthetic"
    assert fr.attrs.get("unknown_set") == (None if fr.attrs["known"] else sn_set_of(sn.split("/")[3]))
    assert fr.attrs["synset"] != CELLPHONE
    assert fr.attrs["known"] == (sn_set_of(sn.split("/")[3]) == "SN2")
    so = next(i for i in ids if i.startswith("SR12/test/scanobjectnn/test/"))
    fr = src.read(so)
    assert fr.points.shape == (2048, 3) and fr.attrs["domain"] == "real" and fr.info["source_split"] == "test"
    assert set(fr.attrs) == {"track", "scenario", "split", "class_name", "class_id", "known", "domain"}
    assert set(fr.attrs) <= set(src.columns)
    mn = next(i for i in ids if i.startswith("SR2/val/modelnet40/"))
    fr = src.read(mn)
    assert fr.attrs["class_name"] in SR_MODELNET["SR2"] and fr.attrs["class_name"] in MODELNET40_CLASSES
    np.testing.assert_array_equal(fr.points, src.modelnet40.read(mn.split("/", 3)[3]).points)


def test_a_missing_dataset_root_is_named(root):
    with pytest.raises(SourceError, match="needs the"):
        ThreeDOSSource(shapenet=root)


@pytest.mark.parametrize("layout", ["demo", "real"])
@pytest.mark.parametrize(("cellphone", "r2r_val"), [("exclude", "authors"), ("telephone", "none")])
def test_counts_per_scenario_are_the_released_lists_on_the_fixture(layout, cellphone, r2r_val, root, real_layout):
    roots = {"shapenet": root, "modelnet40": root, "scanobjectnn": root} if layout == "demo" else \
        {"shapenet": real_layout, "modelnet40": root, "scanobjectnn": real_layout}
    # the parity case runs with the source's defaults: they must be the released loaders'
    opts = {} if (cellphone, r2r_val) == ("exclude", "authors") else {"cellphone": cellphone, "r2r_val": r2r_val}
    src = ThreeDOSSource(**roots, **opts)
    listed = {(sid.split("/")[0], sid.split("/")[1]) for sid in src.shapenet.list_frames()}
    assert any(syn == CELLPHONE for syn, _ in listed)  # the fixture has cellphones: a merge would show
    assert src.counts() == released_counts(**roots, cellphone=cellphone, r2r_val=r2r_val)
    sn = [e for e in src._entries.values() if e["track"] == "synthetic"]
    assert any(e["synset"] == CELLPHONE for e in sn) == (cellphone == "telephone")


def test_cellphones_are_in_no_set_by_default_and_telephone_in_the_variant(real_layout, root):
    roots = {"shapenet": real_layout, "modelnet40": root, "scanobjectnn": real_layout}
    default = ThreeDOSSource(**roots)._entries
    assert not [k for k in default if f"/{CELLPHONE}/" in k]
    merged = ThreeDOSSource(**roots, cellphone="telephone")._entries
    cell = [e for k, e in merged.items() if f"/{CELLPHONE}/" in k]
    # 9 cellphones, 3 per split: known telephones of SN1 in every split, SN1 unknowns in SN2/SN3's test
    assert Counter((e["scenario"], e["split"], e["known"]) for e in cell) == {
        ("SN1", "train", True): 3, ("SN1", "val", True): 3, ("SN1", "test", True): 3,
        ("SN2", "test", False): 3, ("SN3", "test", False): 3}
    tel = sorted(SN_SETS["SN1"]).index("04401088")
    assert {e["class_id"] for e in cell if e["known"]} == {tel}
    assert {e["unknown_set"] for e in cell if not e["known"]} == {"SN1"}
    with pytest.raises(ValueError, match="cellphone must be one of"):
        ThreeDOSSource(**roots, cellphone="merge")


def test_authors_r2r_split_partitions_with_the_trainers_size():
    for n in (0, 5, 9, 10, 11, 19, 37, 173, 2309):
        train, val = authors_r2r_split(n)
        assert len(val) == (n // 10 if n >= 10 else 0)  # int(n·10/100): floor, never ceil
        assert sorted(np.r_[train, val].tolist()) == list(range(n))
    # the draw is RandomState(42)'s permutation, whatever the global NumPy state
    np.random.seed(0)
    a = authors_r2r_split(173)
    np.random.seed(1)
    assert all(np.array_equal(x, y) for x, y in zip(a, authors_r2r_split(173), strict=True))


@pytest.mark.parametrize("n", [10, 11, 19, 20, 37, 99, 173, 1000, 2309])
def test_authors_r2r_split_is_sklearns(n):
    sk = pytest.importorskip("sklearn.model_selection")
    train, val = sk.train_test_split(list(range(n)), test_size=int(n * 10 / 100), shuffle=True, random_state=42)
    ours = authors_r2r_split(n)
    assert ours[0].tolist() == train and ours[1].tolist() == val  # same scans, same order


@pytest.mark.parametrize("layout", ["demo", "real"])
def test_r2r_val_holds_out_the_authors_scans(layout, root, real_layout):
    """The trainer filters the training file to the known classes (file order) and splits that list."""
    sk = pytest.importorskip("sklearn.model_selection")
    base = root if layout == "demo" else real_layout
    src = ThreeDOSSource(shapenet=root, modelnet40=root, scanobjectnn=base)
    labels = _sonn_labels(base)["training"]
    for sc, (known, _) in RELEASED_SCENARIOS.items():
        if len(known) != 2:
            continue
        rows = [i for i, lab in enumerate(labels) if lab in RELEASED_SONN[known[0]] | RELEASED_SONN[known[1]]]
        train, val = sk.train_test_split(list(range(len(rows))), test_size=int(len(rows) * 10 / 100), shuffle=True,
                                         random_state=42)
        got = {s: sorted(int(k.rsplit("/", 1)[1]) for k, e in src._entries.items()
                         if e["scenario"] == sc and e["split"] == s and "/training/" in k) for s in ("train", "val")}
        assert got == {"train": sorted(rows[i] for i in train), "val": sorted(rows[i] for i in val)}
    whole = ThreeDOSSource(shapenet=root, modelnet40=root, scanobjectnn=base, r2r_val="none")
    assert not [k for k in whole.list_frames() if "/val/scanobjectnn/" in k]
