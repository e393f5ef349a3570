"""WADS (real labelled snowfall): the reader's source contract, the per-point snow realism report, and
`validate` end to end with WADS as real snow.

The contract tests use `write_wads` (synthetic scans in WADS's on-disk layout) and always run. The tests on
a real WADS scan (optional: a ``shared/real/wads`` folder beside the checkout) derive WADS's figures from its
labels here and compare them with what the reader and the realism report compute; they skip when the folder
is absent (a fresh clone).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bench_build.manifests.recipe import RecipeError, parse_recipe
from bench_build.sources import SOURCE_KINDS, open_source
from bench_build.sources.base import SourceError
from bench_build.sources.demo.wads import write_wads
from bench_build.sources.wads import (
    ACCUMULATED_SNOW,
    DUPLICATE_CHOICES,
    FALLING_SNOW,
    LABEL_NAMES,
    WadsSource,
    snow_masks,
)
from bench_build.validate import realism

SHARED = Path(__file__).resolve().parents[3] / "shared" / "real"
WADS = SHARED / "wads"
NUSCENES = SHARED / "nuscenes-lidar-top"
needs_wads = pytest.mark.skipif(not WADS.is_dir(), reason="no real WADS scan (shared/real/wads beside the checkout)")


# ---- reader contract (synthetic scans in WADS layout) ---------------------------------------------------

def test_reader_lists_a_stable_order_and_reads_valid_labelled_frames(tmp_path):
    root = write_wads(tmp_path / "wads", 3, sequence="36")
    write_wads(root, 2, sequence="11", seed=5)
    src = WadsSource(root)
    ids = src.list_frames()
    assert ids == ["11_000000", "11_000001", "36_000000", "36_000001", "36_000002"]
    assert WadsSource(root, "36").list_frames() == ids[2:]
    frame = src.read("36_000001")
    raw = np.fromfile(root / "sequences/36/velodyne/000001.bin", "<f4").reshape(-1, 4)
    labels = np.fromfile(root / "sequences/36/labels/000001.label", "<u4")
    np.testing.assert_array_equal(frame.points, raw)
    np.testing.assert_array_equal(frame.labels["semantic"], labels & 0xFFFF)
    assert frame.fields == ("x", "y", "z", "intensity") and frame.intensity_scale == "byte"
    assert frame.sensor is not None and frame.sensor.beams == 128 and frame.attrs == {"sequence": "36"}
    n_unique = len(np.unique(np.concatenate([raw.view("<u4"), labels[:, None]], axis=1), axis=0))
    assert frame.info == {"duplicate_rows": len(raw) - n_unique, "duplicates": "kept"} and n_unique < len(raw)
    dropped = WadsSource(root, duplicates="drop").read("36_000001")
    assert len(dropped) == n_unique and dropped.info["duplicates"] == "dropped"
    assert len(np.unique(dropped.points, axis=0)) == n_unique
    masks = snow_masks(frame.labels["semantic"])
    assert masks["falling"].sum() > 0 and masks["accumulated"].sum() > 0
    assert (masks["falling"] ^ masks["accumulated"] ^ masks["rest"]).all()
    assert LABEL_NAMES[FALLING_SNOW] == "active-falling-snow" and LABEL_NAMES[ACCUMULATED_SNOW] == "accumulated-snow"
    assert src.describe()["duplicates"] == "keep" and src.describe()["label_names"]["110"] == "active-falling-snow"


def test_reader_errors_beyond_the_contract(tmp_path):
    """What the source contract (test_source_contract.py) does not cover: a missing root or sequence, a bad option."""
    root = write_wads(tmp_path / "wads", 2)
    with pytest.raises(SourceError, match="sequences directory not found"):
        WadsSource(tmp_path / "nowhere")
    with pytest.raises(SourceError, match="velodyne directory of sequence 12 not found"):
        WadsSource(root, "12").list_frames()
    with pytest.raises(SourceError, match="duplicates must be one of"):
        WadsSource(root, duplicates="maybe")


def test_wads_is_a_build_source_with_a_duplicates_option(tmp_path):
    root = write_wads(tmp_path / "wads", 1)
    head = '[benchmark]\nname = "w"\nversion = "0.1.0"\nseed = 1\nsource = "wads"\nseverities = 1\n'
    body = '[corruptions.snow]\nstage = "snow_lisa"\nrate = [1.0]\n'
    assert SOURCE_KINDS["wads"] is WadsSource
    src = open_source(parse_recipe(head + body), root)
    assert isinstance(src, WadsSource) and src.duplicates == "keep"
    dropped = open_source(parse_recipe(head + '[source_options]\nduplicates = "drop"\n' + body), root)
    assert dropped.duplicates == "drop" and len(dropped.read("36_000000")) < len(src.read("36_000000"))
    with pytest.raises(RecipeError, match="duplicates must be one of"):
        parse_recipe(head + '[source_options]\nduplicates = "some"\n' + body)
    from bench_build.manifests.recipe import _source_option_choices

    assert _source_option_choices("wads") == {"duplicates": DUPLICATE_CHOICES}  # manifests cannot import pipeline


def test_allow_empty_frames_reads_an_empty_wads_scan(tmp_path):
    """The empty-scan error offers --allow-empty-frames; `open_source` passes it to the WADS reader as to KITTI's: a
    0-byte scan with its 0-byte label file is a frame with no points (either duplicates choice)."""
    root = write_wads(tmp_path / "wads", 2)
    scan = root / "sequences/36/velodyne/000001.bin"
    scan.write_bytes(b"")
    (root / "sequences/36/labels/000001.label").write_bytes(b"")
    head = '[benchmark]\nname = "w"\nversion = "0.1.0"\nseed = 1\nsource = "wads"\nseverities = 1\n'
    body = '[corruptions.snow]\nstage = "snow_lisa"\nrate = [1.0]\n'
    with pytest.raises(SourceError, match=r"empty scan .*pass --allow-empty-frames") as e:
        open_source(parse_recipe(head + body), root).read("36_000001")
    assert e.value.path == str(scan)
    for options in ("", '[source_options]\nduplicates = "drop"\n'):
        frame = open_source(parse_recipe(head + options + body), root, allow_empty=True).read("36_000001")
        assert frame.points.shape == (0, 4) and frame.labels["semantic"].shape == (0,)
        assert frame.info["duplicate_rows"] == 0


# ---- the real scan ---------------------------------------------------------------------------------------

@needs_wads
def test_real_wads_scan_figures_derived_from_its_labels():
    """shared/real/README.md "wads/": class counts, 87,598 duplicate rows, falling snow 4.98 % of the raw rows
    and 7.3 % of the unique ones, its range percentiles 4.02 / 6.48 / 10.76 m, intensity ≈ 0 (scene median 9)."""
    bin_path = WADS / "sequences/36/velodyne/042223.bin"
    pts = np.fromfile(bin_path, "<f4").reshape(-1, 4)
    cls = np.fromfile(WADS / "sequences/36/labels/042223.label", "<u4") & 0xFFFF
    ids, counts = np.unique(cls, return_counts=True)
    assert dict(zip(ids.tolist(), counts.tolist(), strict=True)) == {
        0: 7152, 10: 8411, 30: 1234, 40: 12129, 50: 54639, 70: 24424, 80: 1452, 81: 723, 99: 3778,
        110: 10422, 111: 84933}
    falling = cls == 110
    rng_snow = np.linalg.norm(pts[falling, :3].astype(np.float64), axis=1)
    expect = np.percentile(rng_snow, [5, 50, 95])
    np.testing.assert_allclose(expect, [4.02, 6.48, 10.76], atol=0.01)

    src = WadsSource(WADS)
    assert src.list_frames() == ["36_042223"]
    frame = src.read("36_042223")
    assert frame.info["duplicate_rows"] == 87598 and len(frame) == 209297
    assert len(WadsSource(WADS, duplicates="drop").read("36_042223")) == 121699

    files = [bin_path]
    for dup, share in (("keep", falling.mean()), ("drop", 0.0730)):
        s = realism.summarise(realism.real_wads_scans(WADS, files, dup, 0))
        assert s["share"]["min"] == pytest.approx(share, abs=5e-4)
        if dup == "keep":
            assert s["share"]["min"] == pytest.approx(0.0498, abs=5e-4)
            np.testing.assert_allclose(s["range_p5_p50_p95"], expect, atol=1e-3)
            assert s["range_min"] == pytest.approx(2.14, abs=0.01)
            assert s["intensity_zero_share"] == pytest.approx(0.994, abs=1e-3)
            assert s["intensity_rel_mean"] == pytest.approx(pts[falling, 3].mean() / np.median(pts[~falling, 3]))
        assert s["sensor_extent"]["elevation_p0_5"] < -24 and s["sensor_extent"]["elevation_p99_5"] > 14


# ---- the realism report's statistics ------------------------------------------------------------------

def _scan(rng, n_scene: int, n_snow: int, snow_range: tuple[float, float], snow_intensity: float,
          scene_range: tuple[float, float] = (3.0, 60.0)) -> np.ndarray:
    r = np.concatenate([rng.uniform(*scene_range, n_scene), rng.uniform(*snow_range, n_snow)])
    az = rng.uniform(-np.pi, np.pi, len(r))
    z = rng.uniform(-1.5, 1.5, len(r))
    inten = np.concatenate([rng.uniform(0.1, 0.5, n_scene), np.full(n_snow, snow_intensity)])
    return np.stack([r * np.cos(az), r * np.sin(az), z, inten], axis=1).astype(np.float32)


def test_realism_statistics_and_distances_on_known_distributions():
    rng = np.random.default_rng(0)
    snow = np.r_[np.zeros(3000, bool), np.ones(300, bool)]

    def side(lo: float, hi: float, inten: float, scene: tuple[float, float] = (3.0, 60.0)):
        return [realism.scan_quantities(_scan(rng, 3000, 300, (lo, hi), inten, scene), 3, "unit", snow)
                for _ in range(3)]

    real = side(4.0, 10.0, 0.0)
    same = side(4.0, 10.0, 0.0)
    shifted = side(6.0, 12.0, 0.15)
    s = realism.summarise(real)
    assert s["share"]["min"] == pytest.approx(300 / 3300) and s["snow_points"] == 900
    assert s["range_p5_p50_p95"][1] == pytest.approx(7.0, abs=0.3)
    assert s["intensity_zero_share"] == 1.0 and s["intensity_rel_mean"] == 0.0
    assert s["density_median"] > 0
    near = realism.distances(real, same, 0)["quantities"]
    far = realism.distances(real, shifted, 0)["quantities"]
    assert near["range"]["wasserstein"] < 0.3 and far["range"]["wasserstein"] == pytest.approx(2.0, abs=0.3)
    assert far["range"]["ks_statistic"] > 0.25 > near["range"]["ks_statistic"]
    assert far["intensity_rel"]["wasserstein"] == pytest.approx(0.15 / 0.3, rel=0.1)  # scene median ≈ 0.3
    # a sensor that sees nothing nearer than 8 m: the common band starts at 8 m, the 4–8 m real snow is left out
    blind = side(8.0, 12.0, 0.0, scene=(8.0, 60.0))
    d = realism.distances(real, blind, 0)
    assert d["common_band"]["range_bins_m"][0][0] == 8.0
    assert d["quantities"]["range"]["n_real"] < 900 * 0.5
    # LISA's lost returns are rows at (0, 0, 0): not returns, so no nearest return at 0 m and no diluted share
    scan = _scan(rng, 3000, 300, (4.0, 10.0), 0.0, (3.0, 60.0))
    lost = np.vstack([scan, np.zeros((700, scan.shape[1]), scan.dtype)])
    q = realism.scan_quantities(lost, 3, "unit", np.r_[snow, np.zeros(700, bool)])
    assert q["n_lost"] == 700 and q["n_points"] == 3300 and q["nearest"] > 2.9
    assert realism.summarise([q])["share"]["min"] == pytest.approx(300 / 3300)


# ---- validate end to end with WADS as real snow -----------------------------------------------------------

RECIPE = """
[benchmark]
name = "snow-mini"
version = "0.1.0"
seed = 3
source = "kitti"
severities = 2

[corruptions.snow]
stage = "snow_lisa"
rate = [5.0, 50.0]
mode = "physical"
"""
TINY = {"points": 512, "width": 0.125, "epochs": 2, "batch_size": 4, "max_embed": 50, "permutations": 50}


def _rotated_copies(points: np.ndarray, n: int) -> list[np.ndarray]:
    out = []
    for k in range(n):
        a = 2 * np.pi * k / n
        q = points.copy()
        q[:, 0] = np.cos(a) * points[:, 0] - np.sin(a) * points[:, 1]
        q[:, 1] = np.sin(a) * points[:, 0] + np.cos(a) * points[:, 1]
        out.append(q)
    return out


@pytest.fixture(scope="module")
def snow_build(tmp_path_factory, shared_ray):
    """A 3-frame demo KITTI build with LISA snow at 2 severities; Ray stays up for the validations."""
    from bench_build.build.run import run_build
    from bench_build.sources.demo.kitti import write_demo_dataset
    from tests.conftest import FIXTURE_AZIMUTH_STEP

    tmp = tmp_path_factory.mktemp("wads-validate")
    kitti = write_demo_dataset(tmp / "kitti", 3, azimuth_step_deg=FIXTURE_AZIMUTH_STEP)
    recipe = tmp / "snow-mini.toml"
    recipe.write_text(RECIPE)
    build = run_build(str(recipe), source=str(kitti), out=tmp / "bench", frames_per_shard=3, progress=False)
    assert build.ok, build.failures
    return Path(build.version_dir)


def test_a_build_from_wads_keeps_labels_and_reports_duplicates(tmp_path, shared_ray):
    """source = "wads" builds (LISA snow on WADS's own snowy scans): labels per point, the duplicate count in
    every row's info, the licence on the card."""
    import pyarrow.parquet as pq

    from bench_build.build.run import run_build

    root = write_wads(tmp_path / "wads", 2)
    recipe = tmp_path / "w.toml"
    recipe.write_text(RECIPE.replace('source = "kitti"', 'source = "wads"').replace("severities = 2", "severities = 1")
                      .replace("rate = [5.0, 50.0]", "rate = [5.0]"))
    build = run_build(str(recipe), source=str(root), out=tmp_path / "bench", frames_per_shard=2, progress=False)
    assert build.ok, build.failures
    version = Path(build.version_dir)
    t = pq.read_table(next((version / "data").rglob("corruption=clean/**/*.parquet")))
    raw = np.fromfile(root / "sequences/36/labels/000000.label", "<u4")
    assert t["frame_id"].to_pylist() == ["36_000000", "36_000001"]
    np.testing.assert_array_equal(np.asarray(t["semantic"][0].as_py()), raw & 0xFFFF)
    info = json.loads(t["info"][0].as_py())
    assert info["duplicates"] == "kept" and info["duplicate_rows"] > 0
    assert "WADS" in (version / "README.md").read_text()


def test_preflight_refuses_wads_without_labels_or_as_clean_data(snow_build, tmp_path):
    from bench_build.validate.config import ValidateConfig, ValidationError
    from bench_build.validate.preflight import detect_format, preflight

    wads = write_wads(tmp_path / "wads", 2)
    clear = tmp_path / "clear"
    clear.mkdir()
    for name in ("a", "b"):
        np.zeros((7, 4), "<f4").tofile(clear / f"{name}.bin")  # 112 bytes: only KITTI's 16-byte record fits
    files = sorted(wads.rglob("*.bin"))
    assert detect_format(wads, files, "auto") == "wads"  # by name: WADS has KITTI's record size
    assert detect_format(clear, [clear / "a.bin"], "auto") == "kitti"
    cfg = ValidateConfig(corruption="snow", real_weather=wads, real_clean=clear, real_format="wads")
    assert cfg.clean_format == "auto"
    pre = preflight(snow_build, cfg)
    assert pre["real"]["weather"]["format"] == "wads" and pre["real"]["clean"]["format"] == "kitti"
    with pytest.raises(ValidationError, match="WADS was recorded in snowfall, it has no clear scans"):
        preflight(snow_build, ValidateConfig(corruption="snow", real_weather=clear, real_clean=wads,
                                             real_format="kitti", real_clean_format="wads"))
    one = tmp_path / "one-clear"  # a single real scan: refused before Ray starts, naming the folder
    one.mkdir()
    np.zeros((7, 4), "<f4").tofile(one / "a.bin")
    with pytest.raises(ValidationError, match=f"real clean data {one}: 1 scan"):
        preflight(snow_build, ValidateConfig(corruption="snow", real_weather=wads, real_clean=one, real_format="wads"))
    (wads / "sequences/36/labels/000001.label").unlink()
    with pytest.raises(ValidationError, match=r"000001\.label: label file missing for WADS scan"):
        preflight(snow_build, cfg)
    with pytest.raises(ValidationError, match="real_duplicates must be one of"):
        ValidateConfig(corruption="snow", real_weather=wads, real_clean=clear, real_duplicates="some")


def test_a_damaged_page_fails_the_snow_realism_naming_the_file(snow_build, tmp_path):
    """The realism section read the snow partitions with plain pyarrow, so a flipped byte inside a data page (which
    the preflight's size, row and footer checks pass) went into its snow statistics. It reads with page checksums:
    the damage is an error naming the file."""
    import shutil

    from bench_build.format.checked import IntegrityError
    from tests.pipeline.tamper import POINTS, flip_file

    snow = next((snow_build / "data" / "corruption=snow" / "severity=1").glob("*.parquet"))
    assert realism.simulated_scans([snow], None, 0)[1]  # the intact file reads
    bad = tmp_path / snow.name
    shutil.copyfile(snow, bad)
    flip_file(bad, POINTS)
    with pytest.raises(IntegrityError, match=rf"{bad}: a data page does not match its checksum"):
        realism.simulated_scans([bad], None, 0)


def test_snow_like_corruptions_are_both_snow_simulators():
    manifest = {"recipe": {"corruptions": [{"name": "snow", "stage": "snow_lisa"}, {"name": "fog", "stage": "fog"},
                                           {"name": "robo3d_snow", "stage": "snow"}]}}
    assert realism.snow_like_corruptions(manifest) == ["snow", "robo3d_snow"]


@needs_wads
@pytest.mark.skipif(not NUSCENES.is_dir(), reason="no real nuScenes sweep (optional shared/real data)")
def test_validate_snow_against_real_wads_writes_the_realism_report(snow_build, tmp_path):
    """Real snow = the WADS scan at 4 headings (WADS layout, labels kept); real clean = the real nuScenes
    sweep at 4 headings (x, y, z, intensity 0–255, ring: STF's record); build = demo KITTI with LISA snow."""
    from bench_build.cli import app

    pts = np.fromfile(WADS / "sequences/36/velodyne/042223.bin", "<f4").reshape(-1, 4)
    label = (WADS / "sequences/36/labels/042223.label").read_bytes()
    wads = tmp_path / "wads"
    for k, q in enumerate(_rotated_copies(pts, 4)):
        for sub, data in (("velodyne", q.astype("<f4").tobytes()), ("labels", label)):
            p = wads / "sequences" / "36" / sub / f"{k:06d}.{'bin' if sub == 'velodyne' else 'label'}"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
    sweep = next(NUSCENES.glob("*.pcd.bin"))
    nus = np.fromfile(sweep, "<f4").reshape(-1, 5)
    clear = tmp_path / "clear"
    clear.mkdir()
    for k, q in enumerate(_rotated_copies(nus, 4)):
        q.astype("<f4").tofile(clear / f"{k:02d}.bin")
    version = snow_build
    cli = CliRunner().invoke(app, ["validate", str(version), "--corruption", "snow", "--real", f"snow={wads}",
                                   "--real-format", "wads", "--real-clean", str(clear), "--real-clean-format",
                                   "stf", "--workers", "1",
                                   *[a for k, v in TINY.items() for a in (f"--{k.replace('_', '-')}", str(v))]])
    assert cli.exit_code == 0, cli.output
    assert "falling snow — real WADS: 5.0 % of the scan, range p50 6.5 m" in cli.output
    out = version / "validation" / "snow"
    r = json.loads((out / "report.json").read_text())
    assert r["verdict"]["verdict"] in ("natural", "not natural", "inconclusive")
    assert r["real"]["weather"]["format"] == "wads" and r["real"]["clean"]["format"] == "stf"
    assert r["real"]["weather"]["scans_used"] == 4
    real_snow = r["realism"]["real"]
    assert real_snow["share"]["min"] == pytest.approx(10422 / 209297, abs=1e-4)  # duplicates kept (default)
    assert real_snow["duplicate_rows"] == 4 * 87598 and real_snow["raw_rows"] == 4 * 209297  # ... and reported
    np.testing.assert_allclose(real_snow["range_p5_p50_p95"], [4.02, 6.48, 10.76], atol=0.01)
    sens = r["realism"]["sensors"]
    assert sens["real"]["beams"] == 128 and "vls128" in sens["real"]["name"]
    assert "hdl64e" in sens["simulated"]["name"] and "demo" in sens["simulated"]["name"]
    # every sensor-dependent quantity is flagged with how it is handled
    assert [f.split(":")[0] for f in r["realism"]["flags"]] == ["beam count", "blind zone", "elevation",
                                                                  "intensity scale"]
    assert "nearest return real 0.30 m" in r["realism"]["flags"][1]
    sevs = r["realism"]["corruptions"]["snow"]
    assert set(sevs) == {"1", "2"}
    for s in sevs.values():
        assert s["scans"] == 3 and s["snow_points"] > 0 and s["share"]["min"] > 0
        assert len(s["range_p5_p50_p95"]) == 3 and s["intensity_rel_mean"] is not None
        band = s["distances"]["common_band"]["range_bins_m"]
        assert band and band[0][0] >= 1.0  # the WADS scan's nearest returns (0.3 m) are not seen by both
        for q in ("range", "elevation", "intensity_rel"):
            d = s["distances"]["quantities"][q]
            assert d["wasserstein"] >= 0 and 0 <= d["ks_statistic"] <= 1 and d["n_real"] > 0
    # heavier snowfall scatters more beams
    assert sevs["2"]["share"]["mean"] > sevs["1"]["share"]["mean"]
    summary = (out / "summary.md").read_text()
    assert "## Snow realism against labelled real snow (WADS)" in summary and "| real WADS | 4 |" in summary
    assert "exact duplicate rows kept (350,392 of 837,188 raw rows)" in summary
    assert "| snow severity 2 |" in summary and "Wasserstein-1" in summary and "](realism_snow.png)" in summary
    png = out / "realism_snow.png"
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG" and r["files"]["realism_plot_snow"] == png.name


def test_a_demo_build_passes_the_recipes_source_options_to_the_reader(tmp_path, monkeypatch):
    """The options are in the recipe's fingerprint, so a build from demo data must read with them too; the demo
    path dropped them (a reader with options and demo data got its defaults)."""
    import dataclasses

    from bench_build.sources import READERS

    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path / "cache"))
    demo = dataclasses.replace(READERS["wads"], write_demo=lambda root, frames, seed: write_wads(root, frames))
    monkeypatch.setitem(READERS, "wads", demo)
    head = '[benchmark]\nname = "w"\nversion = "0.1.0"\nseed = 1\nsource = "wads"\nseverities = 1\n'
    body = '[corruptions.snow]\nstage = "snow_lisa"\nrate = [1.0]\n'
    assert open_source(parse_recipe(head + body), None, demo_frames=1).duplicates == "keep"
    recipe = parse_recipe(head + '[source_options]\nduplicates = "drop"\n' + body)
    assert open_source(recipe, None, demo_frames=1).duplicates == "drop"
