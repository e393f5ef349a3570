"""Naturalness validation end to end, on generated data in the real on-disk formats.

"Real fog" is the `fog` simulator with one seed applied to demo scans of another scene seed, written
as SeeingThroughFog ``.bin`` files (byte intensities, ring column); "real clear" is the same scans
without fog. The build is the demo KITTI source with two corruptions: `fog` (the same simulator,
other seeds → natural) and `nofog` (fog with α = 0, i.e. the clean scans → must be "not natural").
`fog` is validated by `run`'s [validate] hook, `nofog` by the CLI. Tiny configuration: 512 points,
PointNet width 1/8, 30 epochs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from tests.conftest import FIXTURE_AZIMUTH_STEP

TINY = {"points": 512, "width": 0.125, "epochs": 30, "batch_size": 16, "max_embed": 200, "permutations": 200}
TINY_ARGS = [a for k, v in TINY.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def _rotate(points: np.ndarray, angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    q = points.copy()
    q[:, 0], q[:, 1] = c * points[:, 0] - s * points[:, 1], s * points[:, 0] + c * points[:, 1]
    return q


def write_real_stf(root: Path, scenes: int = 12, turns: int = 3, alpha: float = 0.1) -> tuple[Path, Path]:
    """Real fog / real clear in STF layout: demo scenes of another seed, each at ``turns`` headings."""
    from bench_build.sources.demo.kitti import generate_frame
    from bench_build.sources.stf import write_stf_bin
    from bench_build.stages.frame import Frame
    from bench_build.stages.registry import get_stage

    fog = get_stage("fog")
    params = fog.params(alpha=alpha, mode="physical")
    for i in range(scenes):
        f = generate_frame(i, 4242, azimuth_step_deg=FIXTURE_AZIMUTH_STEP)
        for t in range(turns):
            pts = _rotate(f.points, 2 * np.pi * t / turns)
            foggy = fog.apply(Frame(f"{i}_{t}", pts, f.fields, "unit"), params, np.random.default_rng([99, i, t]))
            for sub, arr in (("fog", foggy.points), ("clear", pts)):
                out = arr.copy()
                out[:, 3] *= 255.0  # STF intensities are bytes
                write_stf_bin(root / sub / f"2018-02-{i:02d}_{t}.bin", out)
    return root / "fog", root / "clear"


RECIPE = """
[benchmark]
name = "fog-mini"
version = "0.1.0"
seed = 11
source = "kitti"
severities = 2

[corruptions.fog]
stage = "fog"
mode = "physical"
alpha = [0.08, 0.12]

[corruptions.nofog]
stage = "fog"
mode = "physical"
alpha = [0.0, 0.0]
"""


@pytest.fixture(scope="module")
def validated(tmp_path_factory, shared_ray):
    from bench_build.build.run import run_build
    from bench_build.sources.demo.kitti import write_demo_dataset
    from bench_build.validate.hook import validate_after_build

    tmp = tmp_path_factory.mktemp("validate")
    fog_dir, clear_dir = write_real_stf(tmp / "stf")
    kitti = write_demo_dataset(tmp / "kitti", 10, azimuth_step_deg=FIXTURE_AZIMUTH_STEP)
    table = "\n".join(f"{k} = {v}" for k, v in TINY.items())
    recipe = tmp / "fog-mini.toml"
    recipe.write_text(RECIPE + f'\n[validate]\ncorruptions = ["fog"]\nreal = {{ fog = "{fog_dir}" }}\n'
                               f'real_clean = "{clear_dir}"\nthreads = 1\n{table}\n')
    t0 = time.time()
    build = run_build(str(recipe), source=str(kitti), out=tmp / "bench", frames_per_shard=5, progress=False,
                      after=validate_after_build)
    assert build.ok, build.failures
    version = Path(build.version_dir)
    cli = CliRunner().invoke(app, ["validate", str(version), "--corruption", "nofog", "--real",
                                   f"nofog={fog_dir}", "--real-clean", str(clear_dir), "--workers", "1",
                                   *TINY_ARGS])
    seconds = time.time() - t0
    return {"tmp": tmp, "build": build, "version": version, "cli": cli, "seconds": seconds,
            "fog_dir": fog_dir, "clear_dir": clear_dir, "kitti": kitti, "recipe": recipe}


def _report(version: Path, corruption: str) -> dict:
    return json.loads((version / "validation" / corruption / "report.json").read_text())


def test_simulated_fog_is_natural(validated):
    assert validated["build"].validation == {"fog": {
        "status": "done", "verdict": "natural", "naturalness": pytest.approx(_report(validated["version"], "fog")[
            "naturalness"]), "summary": str(validated["version"] / "validation/fog/summary.md")}}
    r = _report(validated["version"], "fog")
    acc = r["accuracy"]
    assert acc["val"] >= 0.75 and acc["train"] >= 0.9
    assert acc["test"]["simulated"] >= 0.9 and acc["test"]["clean"] >= 0.8  # ≫ 50 %
    for space in ("raw", "tsne"):
        pairs = r["mmd"][space]["pairs"]
        assert pairs["real|simulated"]["mmd2"] < pairs["simulated|clean"]["mmd2"]
        assert pairs["simulated|clean"]["p_value"] < 0.05
        assert r["mmd"][space]["bandwidth"]["sigma"] > 0 and "rbf" in r["mmd"][space]["kernel"]
    assert r["verdict"]["verdict"] == "natural"
    assert r["build"] == {"frames_total": 10, "frames_sampled": 10, "severities": [1, 2], "clean_examples": 10,
                          "simulated_examples": 20, "intensity_scale": "unit"}
    assert r["real"]["weather"]["format"] == "stf" and r["real"]["weather"]["scans_used"] == 36
    assert r["training"]["train_scans"] + r["training"]["val_scans"] == 72 and r["training"]["val_scans"] == 8
    assert r["preprocessing"]["points"] == 512 and r["model"]["shared_mlp"] == [8, 8, 8, 16, 128]
    assert r["seeds"]["validation"] == 0 and r["config"]["epochs"] == 30
    # real fog has no per-point labels: no snow realism, and a fog report does not talk about it
    assert r["realism"] == {"skipped": r["realism"]["skipped"], "snow_like": False}
    assert "labelled real snow" in r["realism"]["skipped"]
    assert "Snow realism" not in (validated["version"] / "validation/fog/summary.md").read_text()


def test_clean_scans_posing_as_simulated_are_not_natural(validated):
    cli = validated["cli"]
    assert cli.exit_code == 0, cli.output
    assert "nofog: not natural" in cli.output
    r = _report(validated["version"], "nofog")
    acc = r["accuracy"]["test"]
    assert acc["clean"] >= 0.8
    assert acc["simulated"] <= 0.2 and abs(acc["simulated"] - (1 - acc["clean"])) <= 0.2  # ≈ the clean rate
    pairs = r["mmd"]["raw"]["pairs"]
    assert pairs["real|simulated"]["mmd2"] > pairs["simulated|clean"]["mmd2"]
    assert pairs["real|simulated"]["mmd2"] > 0.5 * pairs["real|clean"]["mmd2"]  # as far from real as clean is
    assert r["verdict"]["verdict"] == "not natural"
    failed = {c["name"] for c in r["verdict"]["checks"] if not c["ok"]}
    assert "accuracy on simulated" in failed


def test_outputs_plots_card_and_checkpoint(validated):
    import torch
    from PIL import Image

    version = validated["version"]
    out = version / "validation" / "fog"
    r = _report(version, "fog")
    assert sorted(p.name for p in out.iterdir()) == ["features.npz", "pointnet.pt", "report.json", "summary.md",
                                                   "training.png", "tsne.png"]
    img = np.asarray(Image.open(out / "tsne.png").convert("RGB"))
    assert img.shape[0] > 300 and img.shape[1] > 300
    groups = r["plots"]["tsne"]["groups"]
    assert [g["label"] for g in groups] == ["real fog (n=36)", "simulated fog (n=20)", "clean (build) (n=10)"]
    colors = [tuple(int(g["color"][i:i + 2], 16) for i in (1, 3, 5)) for g in groups]
    assert len(set(colors)) == 3
    for rgb in colors:  # every group is drawn (markers + legend) in its own colour
        assert (img == rgb).all(axis=2).sum() > 50, rgb
    assert Image.open(out / "training.png").size[0] > 300
    ckpt = torch.load(out / "pointnet.pt", weights_only=False)
    assert ckpt["best_epoch"] == r["training"]["best_epoch"] and "point_mlp.0.weight" in ckpt["state_dict"]
    feats = np.load(out / "features.npz")
    assert feats["features_real"].shape == (36, 128) and feats["tsne_clean"].shape == (10, 2)
    summary = (out / "summary.md").read_text()
    assert "**Verdict: natural**" in summary and "![t-SNE of the global features](tsne.png)" in summary
    # what the t-SNE map is made of, for a reader comparing it with the paper's plot
    emb = json.loads((out / "report.json").read_text())["embedding"]
    n = emb["samples"]
    assert (f"{sum(n.values())} examples embedded (real {n['real']}, simulated {n['simulated']}, "
            f"clean {n['clean']}). t-SNE: perplexity {emb['tsne']['perplexity']:.3g}, pca initialisation") in summary
    index = (version / "validation" / "summary.md").read_text()
    assert "[fog/summary.md](fog/summary.md)" in index and "[nofog/summary.md](nofog/summary.md)" in index
    card = (version / "README.md").read_text()
    assert card.count("## Naturalness validation") == 1 and "(validation/summary.md)" in card


def test_a_verdict_from_few_scans_says_how_far_it_can_be_trusted(validated):
    from bench_build.validate.report import render_index, render_summary
    from bench_build.validate.run import FEW_REAL_SCANS, cautions

    mmd = {"raw": {"pairs": {"real|simulated": {"p_value": 1 / 21}, "simulated|clean": {"p_value": 0.5}}},
           "tsne": {"pairs": {"real|simulated": {"p_value": 0.2}, "simulated|clean": {"p_value": 0.3}}}}
    said = cautions({"weather": 3, "clean": 2}, 2, mmd, 20)
    assert said[0].startswith("few real scans (3 weather, 2 clean; fewer than 20 a side)")
    assert said[1] == "the validation set has 2 scan(s): its accuracy moves in steps of 50 %"
    assert said[2].startswith("some MMD p-values (raw) are 0.0476, the smallest 20 permutations can give")
    assert cautions({"weather": FEW_REAL_SCANS, "clean": 40}, 10, mmd, 1000) == []
    r = _report(validated["version"], "fog")
    r["verdict"] = {**r["verdict"], "verdict": "inconclusive", "cautions": said}
    summary = render_summary(r)
    assert "> **Caution:** few real scans (3 weather" in summary
    assert summary.count("| – (a gate failed) |") == len(r["verdict"]["checks"])  # no tick from a failed classifier
    report = validated["version"] / "validation" / "fog" / "report.json"
    before = report.read_text()
    try:
        report.write_text(json.dumps(r))
        index = render_index(validated["version"])
    finally:
        report.write_text(before)
    assert "| fog | inconclusive (indicative only) |" in index and "(classifier failed its gates)" in index


@pytest.fixture
def no_training(monkeypatch):
    """Fail loudly if Ray or training were started: input errors must come first."""
    import bench_build.validate.run
    import bench_build.validate.train

    def boom(*a, **k):
        raise AssertionError("training / Ray started before the input check")

    monkeypatch.setattr(bench_build.validate.run, "init_ray", boom)  # where validation looks it up
    monkeypatch.setattr(bench_build.validate.train, "train_classifier", boom)


def test_a_later_corruption_that_fails_keeps_exit_2_for_nothing_written(validated, monkeypatch):
    """`validate --corruption fog --corruption nofog` whose nofog fails after fog's report was written exited 2,
    which says nothing was written, and did not print fog's verdict. It now prints it and exits 1; a first one that
    fails still exits 2."""
    import bench_build.validate.run as validate_run
    from bench_build.validate.config import ValidationError

    version = validated["version"]
    fog = _report(version, "fog")

    def run_validation(version_dir, cfg, **kwargs):
        if cfg.corruption == "fog":
            return fog
        raise ValidationError(f"{cfg.corruption}: training failed")

    monkeypatch.setattr(validate_run, "preflight", lambda version_dir, cfg: None)
    monkeypatch.setattr(validate_run, "run_validation", run_validation)
    args = ["--real", str(validated["fog_dir"]), "--real-clean", str(validated["clear_dir"])]
    res = CliRunner().invoke(app, ["validate", str(version), "--corruption", "fog", "--corruption", "nofog", *args])
    lines = [" ".join(line.split()) for line in res.output.strip().splitlines()]
    assert res.exit_code == 1, res.output
    assert lines[0].startswith(f"fog: {fog['verdict']['verdict']} — accuracy on simulated"), res.output
    assert lines[-1] == "error: nofog: training failed", res.output
    res = CliRunner().invoke(app, ["validate", str(version), "--corruption", "nofog", "--corruption", "fog", *args])
    assert res.exit_code == 2 and res.output.strip() == "error: nofog: training failed", res.output


def test_missing_or_empty_real_data_fails_before_training(validated, tmp_path, no_training):
    version = validated["version"]
    runner = CliRunner()
    res = runner.invoke(app, ["validate", str(version), "--corruption", "fog", "--real", f"fog={tmp_path / 'nope'}",
                              "--real-clean", str(validated["clear_dir"])])
    assert res.exit_code == 2 and "real weather data for fog" in res.output and "directory not found" in res.output
    (tmp_path / "empty").mkdir()
    res = runner.invoke(app, ["validate", str(version), "--corruption", "fog", "--real", str(validated["fog_dir"]),
                              "--real-clean", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "no *.bin scans" in res.output
    res = runner.invoke(app, ["validate", str(version), "--corruption", "snow", "--real", str(validated["fog_dir"]),
                              "--real-clean", str(validated["clear_dir"])])
    assert res.exit_code == 2 and "no corruption 'snow'" in res.output
    # severity 0 is the clean scan, never a simulated one: refused before any work, naming the range
    res = runner.invoke(app, ["validate", str(version), "--corruption", "fog", "--real", str(validated["fog_dir"]),
                              "--real-clean", str(validated["clear_dir"]), "--severity", "0"])
    assert res.exit_code == 2 and "severities [0] out of range 1..2" in res.output, res.output
    res = runner.invoke(app, ["validate", str(version), "--corruption", "fog", "--real", str(validated["fog_dir"])])
    assert res.exit_code != 0
    # WADS is snowfall: never taken for real fog (its snow realism section would land in the fog report)
    from bench_build.sources.demo.wads import write_wads

    wads = write_wads(tmp_path / "wads", 2)
    res = runner.invoke(app, ["validate", str(version), "--corruption", "fog", "--real", f"fog={wads}",
                              "--real-format", "wads", "--real-clean", str(validated["clear_dir"])])
    assert res.exit_code == 2 and "WADS was recorded in snowfall, it is real snow, not real fog" in res.output
    # a clean folder of unknown format names the clean data's option, not the weather data's
    odd = tmp_path / "odd"
    odd.mkdir()
    for name in ("a", "b"):
        np.zeros((12, 5), np.float32).tofile(odd / f"{name}.bin")  # 240 bytes: fits 16, 20 and 24-byte records
    res = runner.invoke(app, ["validate", str(version), "--corruption", "fog", "--real", str(validated["fog_dir"]),
                              "--real-clean", str(odd)])
    assert res.exit_code == 2 and "pass --real-clean-format stf|boreas|kitti" in " ".join(res.output.split())
    # one build frame cannot form the groups MMD and t-SNE compare: said before training, not as a crash after it
    res = runner.invoke(app, ["validate", str(version), "--corruption", "fog", "--real", str(validated["fog_dir"]),
                              "--real-clean", str(validated["clear_dir"]), "--sample", "1"])
    assert res.exit_code == 2 and "1 build frame(s) to test" in res.output and "Traceback" not in res.output
    # one real scan a side cannot be split into train and validation: said before Ray starts, naming the option
    res = runner.invoke(app, ["validate", str(version), "--corruption", "fog", "--real", str(validated["fog_dir"]),
                              "--real-clean", str(validated["clear_dir"]), "--max-real", "1"])
    assert res.exit_code == 2 and "--max-real 1: the classifier's train/validation split" in res.output, res.output



def _validate_args(version: Path, validated: dict, *extra: str) -> list[str]:
    return ["validate", str(version), "--corruption", "fog", "--real", str(validated["fog_dir"]), "--real-clean",
            str(validated["clear_dir"]), *extra]


def _copy_version(validated: dict, dest: Path) -> Path:
    """A copy of the fixture's version without its validation outputs, to damage without touching the original."""
    import shutil

    shutil.copytree(validated["version"], dest, ignore=shutil.ignore_patterns("validation"))
    return dest


def test_an_object_benchmark_is_refused_before_training(validated, tmp_path, shared_ray, no_training):
    """ModelNet-C's shapes have no intensity and fit a unit sphere: no scan of them survives the 1–70 m crop, which
    the classifier found only after training on the real data."""
    from bench_build.build.run import run_build

    build = run_build("modelnet-c", out=tmp_path / "bench", max_frames=2, progress=False)
    assert build.ok, build.failures
    res = CliRunner().invoke(app, ["validate", str(build.version_dir), "--corruption", "jitter", "--real",
                                   str(validated["fog_dir"]), "--real-clean", str(validated["clear_dir"])])
    line = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert "a modelnet-c version holds object shapes (modelnet40), not LiDAR scans" in line
    assert not (Path(build.version_dir) / "validation").exists()


def test_a_missing_or_damaged_build_file_is_refused_before_training(validated, tmp_path, no_training):
    """The partitions validation reads are checked against the manifest first: a deleted or truncated file was a
    pyarrow traceback after training."""
    version = _copy_version(validated, tmp_path / "v")
    gone = next((version / "data" / "corruption=fog" / "severity=2").glob("*.parquet"))
    kept = gone.read_bytes()
    gone.unlink()
    res = CliRunner().invoke(app, _validate_args(version, validated))
    assert res.exit_code == 2, res.output
    assert f"{gone.name}: listed in the manifest but missing" in " ".join(res.output.split())
    gone.write_bytes(kept)
    clean = next((version / "data" / "corruption=clean" / "severity=0").glob("*.parquet"))
    size = clean.stat().st_size
    clean.write_bytes(clean.read_bytes()[:5000])
    res = CliRunner().invoke(app, _validate_args(version, validated))
    assert res.exit_code == 2, res.output
    assert f"{clean.name}: 5000 bytes, manifest says {size}" in " ".join(res.output.split())
    assert not (version / "validation").exists()


def test_a_file_where_the_report_folder_goes_is_refused_before_training(validated, tmp_path, no_training):
    """validation/<corruption>/ is made when the report is written: a file in its way failed only after training."""
    version = _copy_version(validated, tmp_path / "v")
    (version / "validation").mkdir()
    (version / "validation" / "fog").write_text("notes")
    res = CliRunner().invoke(app, _validate_args(version, validated))
    assert res.exit_code == 2, res.output
    line = " ".join(res.output.split())
    assert f"{version / 'validation' / 'fog'} is a file, not a directory; validate writes its report there" in line
    assert (version / "validation" / "fog").read_text() == "notes"


def test_a_severity_given_twice_is_tested_once(validated):
    """`--severity 2 --severity 1 --severity 2` tested severity 2's files twice: the simulated examples doubled
    (and the MMD compared copies of the same scans)."""
    from bench_build.format.reader import open_version
    from bench_build.validate.config import ValidateConfig
    from bench_build.validate.preflight import preflight

    version = validated["version"]
    pre = preflight(version, ValidateConfig(corruption="fog", real_weather=validated["fog_dir"],
                                            real_clean=validated["clear_dir"], severities=(2, 1, 2)))
    assert pre["severities"] == (1, 2)
    files = open_version(version).files
    assert sorted(map(str, pre["sim_files"])) == sorted(str(p) for s in (1, 2) for p in files("fog", s))

def test_relative_paths_reach_the_workers_absolute(validated, monkeypatch):
    """What preflight hands to Ray tasks (the real data's folders and files, the partition files) is absolute: on a
    cluster `validate --address` joined, the workers run in another directory than the command."""
    from bench_build.validate.config import ValidateConfig
    from bench_build.validate.preflight import preflight

    monkeypatch.chdir(validated["tmp"])
    rel = {k: validated[k].relative_to(validated["tmp"]) for k in ("version", "fog_dir", "clear_dir")}
    pre = preflight(rel["version"], ValidateConfig(corruption="fog", real_weather=rel["fog_dir"],
                                                   real_clean=rel["clear_dir"]))
    assert pre["real"]["weather"]["dir"] == validated["fog_dir"] and pre["real"]["clean"]["dir"] == \
        validated["clear_dir"]
    paths = [*pre["real"]["weather"]["files"], *pre["real"]["clean"]["files"], *pre["clean_files"],
             *pre["sim_files"]]
    assert paths and all(Path(p).is_absolute() and Path(p).is_file() for p in paths)


def test_run_skips_validation_when_the_real_data_is_missing(validated, tmp_path, shared_ray):
    from bench_build.build.run import run_build
    from bench_build.validate.hook import validate_after_build

    recipe = tmp_path / "skip.toml"
    recipe.write_text(RECIPE.replace("fog-mini", "fog-skip") + '\n[validate]\ncorruptions = ["fog"]\n'
                      f'real = {{ fog = "{tmp_path / "absent"}" }}\nreal_clean = "{tmp_path / "absent2"}"\n')
    res = run_build(str(recipe), source=str(validated["kitti"]), out=tmp_path / "bench", max_frames=2,
                    frames_per_shard=2, progress=False, after=validate_after_build)
    assert res.ok
    assert res.validation["fog"]["status"] == "skipped" and "not found" in res.validation["fog"]["reason"]
    assert not (Path(res.version_dir) / "validation").exists()


def test_a_damaged_page_fails_its_extraction_naming_the_file(validated, tmp_path):
    """Preflight checks each file's size, rows, columns and footer; a flipped byte inside a data page passes
    those, and the extraction tasks read with plain pyarrow, so the damaged scans went into the verdict. The tasks
    verify page checksums: the damage is an error naming the file."""
    import shutil

    from bench_build.validate.config import ValidateConfig
    from bench_build.validate.extract import extract_partition_file, list_partition_frames
    from tests.pipeline.tamper import POINTS, flip_file

    prep = ValidateConfig(corruption="fog", real_weather=validated["fog_dir"],
                          real_clean=validated["clear_dir"]).preprocess
    version = validated["version"]
    clean = next((version / "data" / "corruption=clean" / "severity=0").glob("*.parquet"))
    fog = next((version / "data" / "corruption=fog" / "severity=2").glob("*.parquet"))
    assert len(list_partition_frames(str(clean))["frames"]) == 5
    for src, column in ((clean, "frame_id"), (fog, POINTS)):
        bad = tmp_path / src.name
        shutil.copyfile(src, bad)
        flip_file(bad, column)
        got = list_partition_frames(str(bad)) if column == "frame_id" else \
            extract_partition_file(str(bad), None, prep, 0, {}, None, 2)
        assert set(got) == {"error"} and got["error"].startswith(f"{bad}: "), got


def _real_copy(validated: dict, dest: Path) -> tuple[Path, Path]:
    """A copy of the fixture's real fog folder and one of its scans, to damage without touching the original."""
    import shutil

    shutil.copytree(validated["fog_dir"], dest)
    return dest, sorted(dest.glob("*.bin"))[0]


def test_a_real_scan_refused_in_its_task_names_the_corruption_and_the_file(validated, tmp_path):
    """The tasks that read the real scans said `real weather data: FILE: …`: with several corruptions validated in
    one command, which one's data was bad was left to guess. The line names the corruption too."""
    fog, bad = _real_copy(validated, tmp_path / "fog")
    np.full((40, 5), np.nan, np.float32).tofile(bad)  # passes preflight (size, count); the task reads the values
    res = CliRunner().invoke(app, ["validate", str(validated["version"]), "--corruption", "fog", "--real",
                                   f"fog={fog}", "--real-clean", str(validated["clear_dir"]), "--workers", "1",
                                   *TINY_ARGS])
    line = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"real weather data for fog: {bad}: 40 point(s) with NaN/inf values" in line, line
    assert "Traceback" not in res.output


def test_a_real_scan_of_float64_records_is_refused_before_a_verdict(validated, tmp_path):
    """A real fog scan saved as float64 (N × 5 float64 = 2N × 5 float32) passed the size check, and the halves of
    its values, decoded as float32 points, went into a verdict. One line naming the corruption and the file."""
    fog, bad = _real_copy(validated, tmp_path / "fog")
    np.fromfile(bad, "<f4").astype("<f8").tofile(bad)
    report = validated["version"] / "validation" / "fog" / "report.json"
    before = report.read_bytes()
    res = CliRunner().invoke(app, ["validate", str(validated["version"]), "--corruption", "fog", "--real",
                                   f"fog={fog}", "--real-clean", str(validated["clear_dir"]), "--workers", "1",
                                   *TINY_ARGS])
    line = " ".join(res.output.split())
    assert res.exit_code == 2, res.output
    assert f"real weather data for fog: {bad}: not a LiDAR scan of stf float32 records: " in line, line
    assert "its bytes read as plausible float64 records: stf scans are 5 float32 per point" in line, line
    assert report.read_bytes() == before and "Traceback" not in res.output


def _rewrite_inputs(version: Path) -> tuple[dict, object, dict, dict]:
    """What `write_outputs` takes, rebuilt from a written fog report (another checkpoint and loss curve, one example
    fewer), so every file a new report writes differs from the old one's."""
    from types import SimpleNamespace

    report = json.loads((version / "validation" / "fog" / "report.json").read_text())
    report["created"] = "2000-01-01T00:00:00+00:00"
    report["training"]["history"][0]["train_loss"] += 1.0
    arrays = np.load(version / "validation" / "fog" / "features.npz")
    groups = {g: arrays[f"features_{g}"][1:] for g in ("real", "simulated", "clean")}
    emb = {g: arrays[f"tsne_{g}"][1:] for g in ("real", "simulated", "clean")}
    res = SimpleNamespace(state_dict={"w": np.zeros(3)}, best_epoch=report["training"]["best_epoch"],
                          best_val_accuracy=report["accuracy"]["val"])
    return report, res, groups, emb


def test_a_report_replaced_by_a_run_that_fails_midway_stays_the_old_one(validated, tmp_path, monkeypatch):
    """The report's files were written one by one into validation/<corruption>/: a run killed between two of them
    left the new checkpoint and features beside the old report.json. The report is written into a temp folder
    and swapped in whole: a failure between files leaves the old report as it was, and no temp folder; a killed
    run's temp folder is removed by the next run, whose report replaces the old one whole."""
    import os
    import shutil
    import subprocess
    import sys

    from bench_build.storage import host_name
    from bench_build.validate import report as report_module

    version = tmp_path / "v"
    shutil.copytree(validated["version"], version)
    out_dir = version / "validation" / "fog"
    before = {p.name: p.read_bytes() for p in out_dir.iterdir()}

    def broken(*a, **k):
        raise RuntimeError("killed between two files")

    monkeypatch.setattr(report_module, "plot_training", broken)  # after pointnet.pt, features.npz and tsne.png
    with pytest.raises(RuntimeError, match="killed between two files"):
        report_module.write_outputs(version, out_dir, *_rewrite_inputs(version))
    assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == before
    assert sorted(p.name for p in out_dir.parent.iterdir()) == ["fog", "nofog", "summary.md"]
    monkeypatch.undo()

    dead_pid = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout.strip()
    dead = out_dir.parent / f".fog.{host_name()}~{dead_pid}.abcd1234.tmp"  # a run killed while writing
    dead.mkdir()
    (dead / "report.json").write_text(json.dumps({"corruption": "half"}))
    live = out_dir.parent / f".snow.{host_name()}~{os.getpid()}.live0000.tmp"  # another validate, still writing
    live.mkdir()
    (live / "report.json").write_text(json.dumps({"corruption": "half"}))
    report_module.write_outputs(version, out_dir, *_rewrite_inputs(version))
    assert "half" not in (out_dir.parent / "summary.md").read_text()  # the index lists finished reports only
    shutil.rmtree(live)
    after = {p.name: p.read_bytes() for p in out_dir.iterdir()}
    assert set(after) == set(before) and all(after[n] != before[n] for n in after), \
        [n for n in after if after[n] == before[n]]
    assert json.loads(after["report.json"])["created"] == "2000-01-01T00:00:00+00:00"
    assert sorted(p.name for p in out_dir.parent.iterdir()) == ["fog", "nofog", "summary.md"]
