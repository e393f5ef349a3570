"""Cost tables for every benchmark: `bench stages --recipe NAME --costs-out` measures the named recipe on its own
demo data (object benchmarks in blocks of 16 shapes, a file per block, as a demo build writes them), and `plan`
takes the table for that recipe only. Before, `bench stages` measured only kitti-c and every other recipe was
planned with placeholder costs."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.manifests.recipe import load_recipe
from bench_build.plan.costs import DEFAULTS_MEASURED, default_costs, load_costs, parse_costs
from bench_build.plan.tasks import group_cost_ms
from bench_build.stages.frame import Frame


class FakeShapes:
    """Stands in for the demo ModelNet40 reader: ``n`` shapes of 2,048 points (no files, no demo cache)."""

    kind, columns, fields, intensity_scale = "modelnet40", (), ("x", "y", "z"), "unit"

    def __init__(self, n: int) -> None:
        self.ids = [f"test/{i:05d}" for i in range(n)]

    def list_frames(self) -> list[str]:
        return list(self.ids)

    def read(self, frame_id: str) -> Frame:
        rng = np.random.default_rng(int(frame_id[-5:]))
        xyz = rng.normal(size=(2048, 3)).astype(np.float32)
        return Frame(frame_id=frame_id, points=xyz / np.linalg.norm(xyz, axis=1, keepdims=True), fields=self.fields)


@pytest.fixture
def fast_bench(monkeypatch):
    """`bench stages` on fake shapes with each timing run once (a fixed 1 ms): the measurement's plumbing, not the
    machine's speed. Returns the row counts of every Parquet file the write costs commit."""
    import bench_build.bench.costs as costs
    import bench_build.bench.stages as stages
    import bench_build.bench.timing as timing

    def once(fn, repeat, clock=None):
        fn()
        return 1e-3

    monkeypatch.setattr(costs, "open_source", lambda recipe, path, **kw: FakeShapes(40))
    for module in (costs, stages, timing):
        monkeypatch.setattr(module, "timeit", once, raising=False)
    monkeypatch.setattr(costs, "median_time", once)
    monkeypatch.setattr(stages, "speed_probe", lambda: 80.0)
    rows = []
    real = costs.write_parquet_atomic

    def counted(rel, schema, batches, store, *a):
        batches = list(batches)
        rows.append(sum(b.num_rows for b in batches))
        return real(rel, schema, iter(batches), store, *a)

    monkeypatch.setattr(costs, "write_parquet_atomic", counted)
    return rows


def test_stages_measures_the_named_recipe_and_plan_takes_its_table_for_it_only(tmp_path, fast_bench):
    out = tmp_path / "modelnet-c.json"
    out.write_text(json.dumps({"recipe": "modelnet-c", "runtime": {"driver_start_s": 2.5, "measured": "scale"}}))
    res = CliRunner().invoke(app, ["bench", "stages", "--recipe", "modelnet-c", "--frames", "2", "--no-builds",
                                   "--no-objects", "--costs-out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    recipe = load_recipe("modelnet-c")
    assert data["recipe"] == "modelnet-c" and set(data["stage_ms"]) == {c.name for c in recipe.corruptions}
    assert all(len(r) == recipe.severities for r in (*data["stage_ms"].values(), *data["write_ms_by"].values()))
    assert data["measured"].startswith("bench-build bench stages --recipe modelnet-c --frames 2 --no-builds "
                                       "--costs-out on ")
    assert "32 demo shapes (2 blocks of 16, written a block a file)" in data["measured"]
    assert data["runtime"] == {"driver_start_s": 2.5, "measured": "scale"}  # `bench scale`'s, kept
    # every partition committed as a demo build does: files of one block of 16 shapes, not one file of 32
    assert fast_bench and set(fast_bench) == {16} and len(fast_bench) % (2 * recipe.examples_stored(1)) == 0
    table = load_costs(recipe, out)
    assert table.recipe == "modelnet-c" and table.measured == data["measured"]
    planned = CliRunner().invoke(app, ["plan", "modelnet-c", "--frames", "2468", "--costs", str(out)])
    assert planned.exit_code == 0 and "placeholders" not in planned.output
    other = CliRunner().invoke(app, ["plan", "modelnet40-e", "--frames", "100", "--costs", str(out)])
    assert other.exit_code == 2 and "has no cost for modelnet40-e's noise" in " ".join(other.output.split())


def test_stages_refuses_an_unknown_recipe_or_another_recipes_table_before_measuring(tmp_path):
    runner = CliRunner()
    out = tmp_path / "c.json"
    res = runner.invoke(app, ["bench", "stages", "--recipe", "modelnet-cc", "--costs-out", str(out)])
    assert res.exit_code == 2 and not out.exists() and "Traceback" not in res.output
    line = " ".join(res.output.split())
    assert "--recipe: unknown benchmark 'modelnet-cc'" in line and "modelnet-c, modelnet40-e" in line
    res = runner.invoke(app, ["bench", "--recipe", "kitti-c:txt", "--costs-out", str(out)])  # no subcommand: stages
    assert res.exit_code == 2 and "no variant 'txt'" in res.output and not out.exists()
    out.write_text(json.dumps({"recipe": "kitti-c", "read_ms": 1.0}))
    res = runner.invoke(app, ["bench", "stages", "--recipe", "modelnet-c", "--costs-out", str(out)])
    assert res.exit_code == 2 and "holds the cost table of kitti-c, not modelnet-c" in " ".join(res.output.split())
    assert json.loads(out.read_text()) == {"recipe": "kitti-c", "read_ms": 1.0}
    res = runner.invoke(app, ["bench", "stages", "--only-objects", "--costs-out", str(tmp_path / "d.json")])
    assert res.exit_code == 2 and "--only-objects" in res.output and not (tmp_path / "d.json").exists()


def test_a_table_of_another_recipe_with_the_same_corruptions_is_refused(tmp_path):
    """Robo3D's four recipes share corruption names: a robo3d-kitti-c table priced robo3d-wod-c's 150k-point
    Waymo scans with KITTI's costs without a word."""
    path = tmp_path / "robo3d-kitti-c.json"
    path.write_text(default_costs(load_recipe("robo3d-kitti-c")).to_json())
    assert load_costs(load_recipe("robo3d-kitti-c"), path).recipe == "robo3d-kitti-c"
    with pytest.raises(ValueError, match="measured for robo3d-kitti-c, not robo3d-wod-c"):
        load_costs(load_recipe("robo3d-wod-c"), path)
    res = CliRunner().invoke(app, ["plan", "robo3d-wod-c", "--frames", "10", "--costs", str(path)])
    assert res.exit_code == 2 and "bench-build bench stages --recipe" in " ".join(res.output.split())


def test_a_folder_given_as_the_cost_table_is_said_to_be_one(tmp_path):
    """`plan --costs DIR` said `cost table DIR does not exist`, of a folder that does."""
    res = CliRunner().invoke(app, ["plan", "kitti-c", "--frames", "2", "--costs", str(tmp_path)])
    assert res.exit_code == 2
    assert res.output.strip() == f"error: cost table {tmp_path} is a folder, not a JSON file", res.output


def test_per_frame_data_a_stage_keeps_is_priced_once_per_frame_and_task(tmp_path):
    """Ring ids (Robo3D's beam_missing, cross_sensor, snow) and what a stage keeps in Frame.derived for its other
    severities (ModelNet40-E's normals, upsample's grid, background's z range) were in no table: the stage rows
    are timed on frames that already hold them."""
    from bench_build.bench.costs import cache_needs, derived_costs

    recipe_file = tmp_path / "r.toml"
    recipe_file.write_text('[benchmark]\nname = "r"\nversion = "0.1.0"\nseed = 1\nsource = "kitti"\nseverities = 2\n'
                           '[corruptions.beam_missing]\nstage = "beam_missing"\nbeams = [16, 32]\nring_low = 4\n'
                           'ring_high = 58\n'
                           '[corruptions.background]\nstage = "background"\ncount_divisor = [45, 40]\nrule = "code"\n'
                           '[corruptions.gaussian_rad]\nstage = "gaussian_rad"\nsigma = [0.04, 0.06]\n')
    recipe = load_recipe(str(recipe_file))
    rng = np.random.default_rng(0)
    pts = np.c_[rng.uniform(-40, 40, (4000, 2)), rng.uniform(-2, 1, 4000), rng.uniform(0, 1, 4000)]
    frame = Frame(frame_id="000000", points=pts.astype(np.float32), fields=("x", "y", "z", "intensity"))
    needs = cache_needs(recipe, frame)
    assert needs["beam_missing"] == ("rings",) and needs["gaussian_rad"] == ()
    assert needs["background"][-1] == "derived:background" and "rings" not in needs["background"]
    derived = derived_costs(recipe, [frame], needs, {"background": [0.0, 0.0]}, repeat=1)
    assert set(derived) == {"derived:background"} and derived["derived:background"] > 0

    table = parse_costs({"recipe": "r", "read_ms": 1, "write_ms": 1, "stage_ms": {"background": [1, 1]},
                         "prep_ms": {"kdtree": 10, "derived:background": 100}, "needs": needs}, "t")
    one = group_cost_ms([("background", 1), ("background", 2)], table)
    apart = group_cost_ms([("background", 1)], table) + group_cost_ms([("background", 2)], table)
    assert apart - one == pytest.approx(table.read() + 10 + 100)  # a second task reads and rebuilds both again
    for bad in ({"gaussian_rad": ["derived:background"]}, {"background": ["grid"]}):
        with pytest.raises(ValueError, match="unknown cache"):
            parse_costs({"recipe": "r", "read_ms": 1, "write_ms": 1, "stage_ms": {}, "prep_ms": {}, "needs": bad}, "t")
    assert DEFAULTS_MEASURED not in table.measured


#: variants that plan with their base recipe's shipped table, and why they need none of their own
BASE_TABLE = {"3dos:cellphone": "which ShapeNet shapes are in a set", "3dos:r2r-train-all": "a split's membership",
              "3dos:text": "the scale the shapes are normalised to"}


def test_every_built_in_recipe_and_variant_plans_with_a_measured_table():
    """Only kitti-c shipped a table, so `plan` and `run`'s task split used placeholders for every other benchmark.
    A variant takes its base's table (the same corruption names) unless its own is shipped; those in BASE_TABLE
    change nothing a stage computes, so one table prices both."""
    from bench_build.manifests.recipe import builtin_recipes
    from bench_build.plan.costs import TABLES

    specs = [s for name in sorted(builtin_recipes())
             for s in (name, *(f"{name}:{v}" for v in load_recipe(name).variants))]
    base = {}
    for spec in specs:
        recipe = load_recipe(spec)
        table = load_costs(recipe)
        assert table.measured != DEFAULTS_MEASURED, f"{spec}: no shipped cost table"
        if table.recipe != recipe.name:
            base[spec] = table.recipe
    assert base == {s: "3dos" for s in BASE_TABLE}
    for path in sorted(TABLES.glob("*.json")):
        data = json.loads(path.read_text())
        assert data["recipe"] == path.stem, path
        if path.stem != "kitti-c":  # measured before tables said their date (its runtime does)
            spec = next(s for s in specs if load_recipe(s).name == path.stem)
            assert data["measured"].startswith(f"bench-build bench stages --recipe {spec} --frames "), path
            assert re.search(r", 20\d\d-\d\d-\d\d: ", data["measured"]), path
    cellphone = load_costs(load_recipe("3dos:cellphone"))
    assert "(the table of 3dos: 3dos-cellphone has none of its own)" in cellphone.measured
    said = " ".join(CliRunner().invoke(app, ["plan", "3dos:cellphone", "--frames", "100"]).output.split())
    assert "the table of 3dos" in said and "placeholders" not in said


def test_run_refuses_a_table_that_does_not_price_the_recipe_before_writing(tmp_path, monkeypatch):
    """A built-in recipe whose shipped table lacks a corruption (a stage just added) is refused, exit 2; the refusal
    came after the version's writer lock, so ``OUT/kitti-c/1.0.0/.bench-build.lock`` and its folders stayed."""
    import bench_build.plan.costs as costs

    tables = tmp_path / "tables"
    tables.mkdir()
    data = json.loads((costs.TABLES / "kitti-c.json").read_text())
    del data["stage_ms"]["snow"]
    (tables / "kitti-c.json").write_text(json.dumps(data))
    monkeypatch.setattr(costs, "TABLES", tables)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", "kitti-c", "--max-frames", "1", "--workers", "1", "--out", str(out)])
    assert res.exit_code == 2 and "has no cost for kitti-c's snow" in " ".join(res.output.split()), res.output
    assert not out.exists()
