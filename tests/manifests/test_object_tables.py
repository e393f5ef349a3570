"""The object recipes are the papers: ModelNet-C = Ren et al. Appendix A (default = released generator,
variant `text` = the paper's text), ModelNet40-E = its Table 1, 3DOS = the category sets of the benchmark.
Values typed from the papers / spec here, independently of the recipes."""

from __future__ import annotations

import math
import re
from dataclasses import asdict
from pathlib import Path

import pytest

from bench_build.manifests.recipe import RecipeError, load_recipe
from bench_build.manifests.threedos import (
    SCENARIOS,
    SN_SETS,
    SR_MODELNET,
    SR_SCANOBJECTNN,
    sn_set_of,
    sonn_label_map,
    synset_label_map,
)
from bench_build.sources.scanobjectnn import SONN_CLASSES
from bench_build.sources.shapenet import SHAPENET_SYNSETS

# Ren et al., Appendix A, as printed (levels 1..5)
PAPER_TEXT = {
    "jitter": ("object_jitter", {"sigma": [0.01, 0.02, 0.03, 0.04, 0.05]}),
    "scale": ("object_scale", {"scale": [1.6, 1.7, 1.8, 1.9, 2.0], "renormalize": True}),
    "rotate": ("object_rotate", {"max_angle_deg": [math.degrees(t) for t in
                                                   (math.pi / 30, math.pi / 15, math.pi / 10, math.pi / 7.5,
                                                    math.pi / 6)]}),
    "dropout_global": ("object_drop_global", {"ratio": [0.25, 0.375, 0.5, 0.675, 0.75]}),
    "dropout_local": ("object_drop_local", {"points": [100, 200, 300, 400, 500], "max_clusters": 8}),
    "add_global": ("object_add_global", {"points": [10, 20, 30, 40, 50]}),
    "add_local": ("object_add_local", {"points": [100, 200, 300, 400, 500], "max_clusters": 8,
                                       "sigma_min": 0.075, "sigma_max": 0.125, "outside": "keep"}),
}
# where the released generator (jiawei-ren/ModelNet-C corrupt.py) differs from the text
RELEASED_DIFFERS = {
    ("dropout_global", "ratio"): [0.25, 0.375, 0.5, 0.625, 0.75],
    ("dropout_local", "max_clusters"): 7,  # randint(1, 8) → 1..7
    ("add_local", "max_clusters"): 7,
    ("add_local", "outside"): "invert",  # p/‖p‖² for ‖p‖ > 1
}


def _values(recipe, name, param):
    return [asdict(p)[param] for p in recipe.corruption(name).params]


@pytest.mark.parametrize("variant", [None, "text"])
def test_modelnet_c_equals_appendix_a(variant):
    recipe = load_recipe("modelnet-c" + (f":{variant}" if variant else ""))
    assert sorted(c.name for c in recipe.corruptions) == sorted(PAPER_TEXT)
    assert recipe.severities == 5 and recipe.split == "test" and recipe.paper_frames == 2468
    assert recipe.paper_frames * len(recipe.corruptions) * recipe.severities == 86_380
    for name, (stage, table) in PAPER_TEXT.items():
        assert recipe.corruption(name).stage == stage
        for param, want in table.items():
            if variant is None and (name, param) in RELEASED_DIFFERS:
                want = RELEASED_DIFFERS[(name, param)]
            want = want if isinstance(want, list) else [want] * 5
            assert _values(recipe, name, param) == pytest.approx(want) if isinstance(want[0], float) \
                else _values(recipe, name, param) == want, (name, param)
    pre = recipe.preprocess
    assert pre is not None and asdict(pre.params[0]) == {"num_points": 1024, "method": "first", "normalize": "none",
                                                         "real_num_points": 0}


def test_variant_builds_elsewhere_and_lists_its_differences():
    base, text = load_recipe("modelnet-c"), load_recipe("modelnet-c:text")
    assert (base.name, text.name) == ("modelnet-c", "modelnet-c-text") and text.variant == "text"
    assert base.fingerprint(["a"]) != text.fingerprint(["a"])
    changes = base.variants["text"].changes
    assert changes["dropout_global"]["ratio"] == ([0.25, 0.375, 0.5, 0.625, 0.75], [0.25, 0.375, 0.5, 0.675, 0.75])
    assert changes["add_local"] == {"max_clusters": (7, 8), "outside": ("invert", "keep")}
    with pytest.raises(RecipeError, match="no variant 'nope'"):
        load_recipe("modelnet-c:nope")


def test_3dos_source_options_default_to_the_released_code_and_variants_restore_1_0_0():
    base = load_recipe("3dos")
    assert base.source_options == {"cellphone": "exclude", "r2r_val": "authors"}
    assert base.version != "1.0.0"  # membership changed: a new version directory, 1.0.0 builds untouched
    assert base.variants["cellphone"].changes == {"source_options.cellphone": {"cellphone": ("exclude", "telephone")}}
    assert base.variants["r2r-train-all"].changes == {"source_options.r2r_val": {"r2r_val": ("authors", "none")}}
    phone, whole = load_recipe("3dos:cellphone"), load_recipe("3dos:r2r-train-all")
    assert phone.source_options == {"cellphone": "telephone", "r2r_val": "authors"} and phone.name == "3dos-cellphone"
    assert whole.source_options == {"cellphone": "exclude", "r2r_val": "none"}
    # the options are fingerprinted even for the same frame list; each variant keeps the other option's notes
    fps = {r.fingerprint(["a"]) for r in (base, phone, whole)}
    assert len(fps) == 3
    assert phone.source_notes["r2r_val"] == base.source_notes["r2r_val"]
    assert phone.source_notes["cellphone"] != base.source_notes["cellphone"]
    # recipes without [source_options] keep their canonical JSON (and fingerprint) unchanged
    assert "source_options" not in load_recipe("modelnet-c").canonical()


@pytest.mark.parametrize(("table", "message"), [
    ('[source_options]\ncellphone = "merge"\n', r"cellphone must be one of \['exclude', 'telephone'\]"),
    ('[source_options]\nphones = "exclude"\n', r"takes no option\(s\) \['phones'\]"),
    ('[source_options]\ncellphone = "exclude"\n[source_options.notes]\nr2r_val = "x"\n', r"notes for \['r2r_val'\]"),
    ('[source_options]\ncellphone = "exclude"\n[variants.v.source_options]\nr2r_val = "none"\n',
     r"\[variants.v\]: source_options \['r2r_val'\] are not in"),
])
def test_3dos_bad_source_options_are_refused_at_load(table, message):
    from bench_build.manifests.recipe import parse_recipe

    head = '[benchmark]\nname = "x"\nversion = "1"\nseed = 1\nsource = "3dos"\nseverities = 0\n'
    with pytest.raises(RecipeError, match=message):
        parse_recipe(head + table, origin="x.toml")
    with pytest.raises(RecipeError, match=r"source kind 'modelnet40' takes no option"):
        parse_recipe(head.replace('"3dos"', '"modelnet40"') + '[source_options]\ncellphone = "exclude"\n')


def test_3dos_text_variant_is_the_unit_cube():
    base, text = load_recipe("3dos"), load_recipe("3dos:text")
    assert base.preprocess.params[0].normalize == "sphere" and text.preprocess.params[0].normalize == "cube"
    assert base.variants["text"].changes == {"preprocess": {"normalize": ("sphere", "cube")}}
    assert base.fingerprint(["a"]) != text.fingerprint(["a"])
    assert base.severities == 0 and not base.corruptions and base.examples_defined(10) == 10


# ModelNet40-E Table 1: (a, b) ×10³, c, k ×10³, outlier probability (%)
TABLE_1 = {
    "light": {"a": (2.0, 4.0), "b": (0.5, 1.5), "c": (1.0, 2.0), "k": (2.5, 7.5), "q": (0.5, 1.5)},
    "moderate": {"a": (3.0, 7.0), "b": (1.0, 3.0), "c": (1.5, 2.5), "k": (5.0, 15.0), "q": (1.0, 3.0)},
    "heavy": {"a": (5.0, 15.0), "b": (2.0, 4.0), "c": (2.0, 4.0), "k": (10.0, 25.0), "q": (4.0, 8.0)},
}
UNIT = {"a": 1e-3, "b": 1e-3, "c": 1.0, "k": 1e-3, "q": 1e-2}


def test_modelnet40_e_equals_table_1():
    recipe = load_recipe("modelnet40-e")
    assert recipe.severity_names == ("light", "moderate", "heavy") and recipe.split == "all"
    assert recipe.paper_frames == 9840 + 2468 and recipe.paper_frames * 3 == 36_924
    (noise,) = recipe.corruptions
    for level, params in zip(TABLE_1, noise.params, strict=True):
        for name, (lo, hi) in TABLE_1[level].items():
            assert getattr(params, name) == pytest.approx((lo * UNIT[name], hi * UNIT[name])), (level, name)
        assert (params.sensor_radius, params.max_elevation_deg, params.neighbors) == (2.0, 45.0, 10)
        assert params.outlier_half_width == 0.5
    assert recipe.preprocess is None  # all 2,048 points


# 3DOS sets, typed from the spec (names), checked against bench_build.manifests.threedos (ids)
SN_NAMES = {
    "SN1": "mug lamp bed washer loudspeaker telephone dishwasher camera birdhouse jar bowl bookshelf stove bench "
           "display keyboard clock piano",
    "SN2": "earphone knife chair pillow table laptop mailbox basket file_cabinet cabinet sofa printer flowerpot "
           "microphone tower bathtub bag trash_bin",
    "SN3": "can microwave skateboard faucet train guitar pistol helmet watercraft airplane bottle cap rocket rifle "
           "remote car bus motorbike",
}


def test_3dos_sn_sets():
    for name, words in SN_NAMES.items():
        assert [SHAPENET_SYNSETS[s] for s in SN_SETS[name]] == [w.replace("_", " ") for w in words.split()]
    members = [s for v in SN_SETS.values() for s in v]
    assert len(members) == len(set(members)) == 54 and set(SHAPENET_SYNSETS) - set(members) == {"02992529"}
    labels = synset_label_map("SN1")
    assert sorted(set(labels.values())) == list(range(18)) and "02992529" not in labels  # released loader
    assert sn_set_of("02992529") is None and sn_set_of("04401088") == "SN1"
    merged = synset_label_map("SN1", cellphone="telephone")  # variant 3dos:cellphone
    assert merged["02992529"] == merged["04401088"] and sn_set_of("02992529", "telephone") == "SN1"
    assert "02992529" not in synset_label_map("SN2", cellphone="telephone")


def test_3dos_sr_sets():
    sonn = {n: i for i, n in enumerate(SONN_CLASSES)}
    assert SR_SCANOBJECTNN["SR1"] == {sonn["chair"]: 0, sonn["shelf"]: 1, sonn["door"]: 2, sonn["sink"]: 3,
                                      sonn["sofa"]: 4}
    assert SR_SCANOBJECTNN["SR2"] == {sonn["bed"]: 0, sonn["toilet"]: 1, sonn["desk"]: 2, sonn["display"]: 3,
                                      sonn["table"]: 2}
    assert set(SR_SCANOBJECTNN["SR3"]) == {sonn[n] for n in ("bag", "bin", "box", "cabinet", "pillow")}
    assert SR_MODELNET["SR2"]["desk"] == SR_MODELNET["SR2"]["table"] == 2
    assert [(s.name, s.known, s.unknown) for s in SCENARIOS if s.track == "real_to_real"] == [
        ("SR12", ("SR1", "SR2"), ("SR3",)), ("SR13", ("SR1", "SR3"), ("SR2",)), ("SR23", ("SR2", "SR3"), ("SR1",))]
    assert sorted(set(sonn_label_map(("SR1", "SR2")).values())) == list(range(9))
    assert sorted(set(sonn_label_map(("SR1", "SR3")).values())) == list(range(10))


SPEC = Path(__file__).resolve().parents[2] / ".." / "shared" / "spec" / "3dos-category-sets.md"


@pytest.mark.skipif(not SPEC.is_file(), reason="no 3DOS category-set spec (shared/spec beside the checkout)")
def test_3dos_sets_equal_the_spec_table():
    text = SPEC.read_text()
    for name, ids in SN_SETS.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
        assert tuple(re.findall(r"\b(\d{8})\b", row)) == ids
    for name in ("SR1", "SR2"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} "))
        mn, so = row.split("|")[2], row.split("|")[3]
        assert dict((n, int(i)) for n, i in re.findall(r"(\w+) (\d)", mn)) == SR_MODELNET[name]
        assert {int(o): int(i) for o, i in re.findall(r"\((\d+)\) (\d)", so)} == SR_SCANOBJECTNN[name]
    row = next(line for line in text.splitlines() if line.startswith("| SR3"))
    assert {int(o) for o in re.findall(r"\((\d+)\)", row)} == set(SR_SCANOBJECTNN["SR3"])
