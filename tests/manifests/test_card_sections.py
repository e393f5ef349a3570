"""Card sections: a compact parameter table, the counts matrix, citations, and what a demo build says."""

from __future__ import annotations

import pytest

from bench_build.manifests.card_sections import (
    MAX_CELL,
    benchmark_citations,
    citation_section,
    counts_matrix,
    demo_licence_section,
    intended_use_section,
    parameter_table,
    title,
)
from bench_build.manifests.recipe import builtin_recipes, load_recipe


@pytest.mark.parametrize("name", sorted(builtin_recipes()))
def test_parameter_table_is_one_compact_row_per_corruption(name):
    recipe = load_recipe(name)
    lines = parameter_table(recipe)
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| corruption")
            and not line.startswith("| ---")]
    assert [r.split(" | ")[0][2:] for r in rows] == [c.name for c in recipe.corruptions]
    for r in rows:
        cells = r.strip("|").split(" | ")
        assert len(cells) == 2 + recipe.severities + 1
        assert all(len(c.strip()) <= MAX_CELL for c in cells), max(cells, key=len)
        assert "None" not in r
    if recipe.severity_names:
        assert f"| 1 ({recipe.severity_names[0]}) |" in lines[0]


def test_parameter_table_splits_varying_and_fixed_parameters():
    recipe = load_recipe("kitti-c")
    row = next(line for line in parameter_table(recipe) if line.startswith("| gaussian_rad |"))
    cells = row.strip("|").split(" | ")
    c = recipe.corruption("gaussian_rad")
    varying = [k for k, v in vars(c.params[0]).items() if v != vars(c.params[-1])[k]]
    assert varying and all(f"{varying[0]}=" in cell for cell in cells[2:7])
    assert f"{varying[0]}=" not in cells[7]


def test_parameter_table_leaves_out_what_the_mode_never_reads():
    """Robo3D fog draws α from alpha_choices (its alpha=0 is never read); incomplete_echo in label mode reads no
    box classes. Showing them told a reader the build used α = 0 and KITTI's vehicle classes."""
    text = "\n".join(parameter_table(load_recipe("robo3d-semantickitti-c")))
    fog = next(line for line in text.splitlines() if line.startswith("| fog |"))
    assert "alpha_choices=(0, 0.005" in fog and "alpha=" not in fog.replace("alpha_choices=", "")
    echo = next(line for line in text.splitlines() if line.startswith("| incomplete_echo |"))
    assert "label_ids=" in echo and "classes=(Car" not in echo and "min_points=10" in echo
    # box mode (KITTI boxes): the classes are what it reads, and no label fields
    echo = next(line for line in parameter_table(load_recipe("robo3d-kitti-c")) if line.startswith("| incomplete_e"))
    assert "classes=(Car, Van, Truck, Tram)" in echo and "label_" not in echo
    # Li et al.'s fog sets α per severity: it stays
    fog = next(line for line in parameter_table(load_recipe("kitti-c")) if line.startswith("| fog |"))
    assert "alpha=0.005" in fog


def test_a_field_unused_at_one_severity_only_is_left_out_of_that_cell(tmp_path):
    from bench_build.stages.registry import get_stage
    from bench_build.stages.weather.fog import FogParams

    fog = get_stage("fog")
    assert fog.unused_params(FogParams(alpha_choices=(0.01,), beta=0.1)) >= {"alpha", "frozen_beta"}
    assert "noise" in fog.unused_params(FogParams(alpha=0.01, noise_variant="none"))
    assert fog.unused_params(FogParams(alpha=0.01, mode="paper")) == frozenset()  # v1 noise, paper tables
    assert "table_alphas" in fog.unused_params(FogParams(alpha=0.01))  # physical: exact α, no tables
    p = tmp_path / "r.toml"
    p.write_text('[benchmark]\nname = "x"\nversion = "0.1.0"\nseed = 1\nsource = "kitti"\nseverities = 2\n'
                 '[corruptions.fog]\nstage = "fog"\nalpha = [0.01, 0.02]\nnoise_variant = ["v1", "none"]\n')
    row = next(line for line in parameter_table(load_recipe(p)) if line.startswith("| fog |"))
    cells = row.strip("|").split(" | ")
    assert "noise=10" in cells[2] and "noise=" not in cells[3].replace("noise_variant=", "")


def _manifest(demo: bool = False, dataset: str = "mini-c") -> dict:
    by = {"clean/0": {"examples": 4, "bytes": 2e6}}
    for c in ("gaussian_rad", "beam_del"):
        for s in range(1, 6):
            by[f"{c}/{s}"] = {"examples": 4, "bytes": 1e6}
    source = {"kind": "kitti", "split": "training", **({"demo": True} if demo else {})}
    return {"dataset": dataset, "version": "0.1.0", "source": source, "shards": [{}] * 11,
            "counts": {"by_partition": by, "bytes": 12e6}}


def test_counts_matrix(tmp_path):
    from tests.conftest import SMALL_RECIPE

    p = tmp_path / "mini-c.toml"
    p.write_text(SMALL_RECIPE)
    recipe = load_recipe(p)
    lines = counts_matrix(_manifest(), recipe)
    assert lines[0] == "| corruption | 0 (clean) | 1 | 2 | 3 | 4 | 5 | MB |"
    assert "| clean | 4 |  |  |  |  |  | 2.0 |" in lines
    assert "| gaussian_rad |  | 4 | 4 | 4 | 4 | 4 | 5.0 |" in lines
    assert "| translation |  | — | — | — | — | — | 0.0 |" in lines  # not built
    assert any("sha256" in line and "bench-build verify" in line for line in lines)


def test_citations_follow_the_benchmark_and_source():
    assert [c["bibtex"].split("{")[1].split(",")[0] for c in benchmark_citations("robo3d-semantickitti-c")] == [
        "kong2023robo3d"]
    assert "li2023common" in benchmark_citations("kitti-c")[0]["bibtex"]
    assert "ren2022benchmarking" in benchmark_citations("modelnet-c")[0]["bibtex"]
    assert "alliegro2022towards" in benchmark_citations("3dos")[0]["bibtex"]
    # a built-in variant cites its recipe's paper; a recipe of one's own named like a built-in one cites none
    assert "li2023common" in benchmark_citations("kitti-c-text")[0]["bibtex"]
    assert "alliegro2022towards" in benchmark_citations("3dos-cellphone")[0]["bibtex"]
    assert benchmark_citations("kitti-c-plus") == [] and benchmark_citations("robo3d-mine-c") == []
    text = "\n".join(citation_section(_manifest(dataset="kitti-c")))
    assert "```bibtex" in text and "geiger2012kitti" in text and "li2023common" in text


def test_demo_build_says_so_and_claims_no_kitti_licence():
    demo, real = _manifest(demo=True, dataset="kitti-c"), _manifest(dataset="kitti-c")
    assert "demo build" in title(demo) and "demo" not in title(real)
    text = "\n".join(demo_licence_section(demo))
    assert "Apache-2.0" in text and "no real dataset's scans" in text
    assert "A build from the real source data inherits its licence — KITTI: CC BY-NC-SA 3.0" in text
    assert "geiger2012kitti" not in "\n".join(citation_section(demo))  # no KITTI data in a demo build
    assert "This is a demo build" in "\n".join(intended_use_section(demo, load_recipe("kitti-c")))
    assert "Intended use" in "\n".join(intended_use_section(real, load_recipe("kitti-c")))


def test_the_row_schema_knows_every_optional_column_and_source_kind():
    """Every optional column a build can have gets its type and meaning in the card (the card ships without
    bench-build's docs), and the box / calibration sources are registered reader kinds."""
    from bench_build.format.schema import EXAMPLE_COLUMNS, OPTIONAL_COLUMNS, POINT_COLUMNS
    from bench_build.manifests.card import BOX_SOURCES, CALIB_SOURCES, COLUMN_MEANINGS, points_units
    from bench_build.sources.registry import READERS

    assert set(COLUMN_MEANINGS) == set(OPTIONAL_COLUMNS)
    assert all(COLUMN_MEANINGS[c][0].startswith("list<") for c in POINT_COLUMNS)
    assert not any(COLUMN_MEANINGS[c][0].startswith("list<") for c in EXAMPLE_COLUMNS)
    assert BOX_SOURCES | CALIB_SOURCES <= set(READERS) and CALIB_SOURCES <= BOX_SOURCES
    assert points_units({"fields": ["x", "y", "z"], "intensity_scale": "unit"}).startswith("shape coordinates")
    assert points_units({"fields": ["x", "y", "z", "intensity"], "intensity_scale": "byte"}) == \
        "metres in the LiDAR frame; intensity scale `byte` (0…255)"


@pytest.mark.parametrize("name", sorted(builtin_recipes()))
def test_no_parameter_is_cut_off_or_hidden_as_a_count(name):
    """Every parameter of every corruption is in the table or its notes whole: a long "all severities" cell goes
    below the table instead of being cut, and short lists (fog's α choices, label ids) are written out."""
    from dataclasses import asdict

    from bench_build.stages.registry import get_stage

    recipe = load_recipe(name)
    text = "\n".join(parameter_table(recipe))
    for c in recipe.corruptions:
        unused = get_stage(c.stage).unused_params(c.params[0])
        for key, value in asdict(c.params[0]).items():
            if value in (None, (), [], "", {}) or any(asdict(p)[key] != value for p in c.params) or key in unused:
                continue  # the fixed parameters the mode reads: those in the "all severities" cell
            assert f"{key}=" in text, (c.name, key)
            if isinstance(value, list | tuple) and len(value) <= 10 and not any(
                    isinstance(x, list | tuple | dict) for x in value):
                assert "values)" not in text.split(f"{key}=", 1)[1].split(";")[0].split("|")[0], (c.name, key)
    cells = [c.strip() for line in text.splitlines() if line.startswith("| ") for c in line.strip("|").split(" | ")]
    assert not [c for c in cells if c.endswith("…")]  # no cell cut (a long list is abbreviated inside its ( ))


def test_the_sheet_section_says_what_the_inset_shows():
    """The card describes the zoom the sheet has: a box, a labelled car cluster (scans without boxes), none, or
    (a sheet recorded before it was told) a box; object sheets have views, no scale and no zoom."""
    from bench_build.manifests.card import renders_section

    base = {"path": "renders/contact_sheet.png", "frame_id": "f", "panels": 25, "color_by": "tag"}
    zooms = ("box", "instance:car", "cluster:car", None)
    text = {z: " ".join(renders_section({**base, "zoom": z}).split()) for z in zooms}
    assert "an inset zoomed on one object (grey unchanged" in text["box"] and "dashed: the clean box)" in text["box"]
    assert "an inset zoomed on the `car` with the most points, found by its semantic and instance labels" \
        in text["instance:car"]
    assert "an inset zoomed on the largest cluster of `car` points, found by their semantic labels" \
        in text["cluster:car"]
    assert all("dashed: its clean bounding box" in text[z] for z in ("instance:car", "cluster:car"))
    assert "inset zoomed" not in text[None] and "no inset: no object in this frame has the points" in text[None]
    assert " ".join(renders_section(base).split()) == text["box"]
    objects = renders_section({**base, "objects": True, "zoom": None})
    assert "three sides" in objects and "metre scale" not in objects and "inset" not in objects


def test_the_parameter_table_says_which_stages_measure_from_the_lidar():
    """WOD-C's fog, wet ground and snow run from the TOP laser (``origin = "lidar"``): their stage cell says so,
    no other corruption's (nor any other benchmark's) does."""
    rows = {r.split(" | ")[0][2:]: r for r in parameter_table(load_recipe("robo3d-wod-c")) if r.startswith("| ")}
    assert {c for c, r in rows.items() if "from the LiDAR" in r} == {"fog", "wet_ground", "snow"}
    assert "| fog | `fog` v1 from the LiDAR |" in rows["fog"]
    assert not any("from the LiDAR" in line for line in parameter_table(load_recipe("robo3d-semantickitti-c")))
