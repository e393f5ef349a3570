"""The 3DOS composite source: every scenario's known/unknown membership and mapped ids equal the spec's sets."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from manifests.threedos import SCENARIOS, SN_SETS, SR_MODELNET, SR_SCANOBJECTNN, sn_set_of
from pipeline.sources.base import SourceError
from pipeline.sources.demo_objects import MODELNET40_CLASSES, write_demo_objects
from pipeline.sources.scanobjectnn import SONN_CLASSES
from pipeline.sources.shapenet import SHAPENET_SYNSETS
from pipeline.sources.threedos import ThreeDOSSource

SYNSET_OF = {name: syn for syn, name in SHAPENET_SYNSETS.items()}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return write_demo_objects(tmp_path_factory.mktemp("objects3dos"), modelnet={"train": 1, "test": 1},
                              scanobjectnn={"training": 2, "test": 1}, shapenet={"train": 1, "val": 1, "test": 1})


@pytest.fixture(scope="module")
def src(root) -> ThreeDOSSource:
    return ThreeDOSSource(root)


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
            known_syn = {SYNSET_OF[e["class_name"]] for _, e in rows if e["known"]}
            unknown_syn = {SYNSET_OF[e["class_name"]] for _, e in rows if not e["known"]}

            def fold(syns):  # cellphone is telephone (SN1), known or unknown with it
                return {"04401088" if s == "02992529" else s for s in syns}

            assert fold(known_syn) == set(SN_SETS[sc.known[0]])
            assert fold(unknown_syn) == set(SN_SETS[sc.unknown[0]]) | set(SN_SETS[sc.unknown[1]])
            n = 18 + ("04401088" in SN_SETS[sc.known[0]])  # + the cellphone shape folded into telephone
            assert Counter(e["split"] for _, e in rows if e["known"]) == {"train": n, "val": n, "test": n}
            ids = sorted(SN_SETS[sc.known[0]])
            for _, e in rows:
                if e["known"]:
                    syn = SYNSET_OF[e["class_name"]]
                    assert e["class_id"] == ids.index("04401088" if syn == "02992529" else syn)
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
            assert Counter(e["split"] for e in known) == {"train": 2 * 10, "test": 10}
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


def test_missing_dataset_is_named(root, tmp_path):
    with pytest.raises(SourceError, match="file not found"):
        ThreeDOSSource(shapenet=root, modelnet40=root, scanobjectnn=tmp_path).list_frames()
    with pytest.raises(SourceError, match="needs the"):
        ThreeDOSSource(shapenet=root)
