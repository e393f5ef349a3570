"""Naturalness validation, the parts without Ray: MMD against closed forms, preprocessing, deterministic
training, the verdict, real-data format detection and the recipe's [validate] table."""

from __future__ import annotations

import numpy as np
import pytest

from bench_build.manifests.recipe import RecipeError, parse_recipe
from bench_build.validate.config import ValidateConfig, ValidationError, configs_from_recipe, parse_real_options
from bench_build.validate.mmd import gaussian_mmd2, median_bandwidth, mmd2_unbiased, mmd_table, mmd_test
from bench_build.validate.preflight import detect_format
from bench_build.validate.preprocess import EmptyScanError, Preprocess
from bench_build.validate.run import verdict


def _gauss(rng, n, d, shift=0.0):
    x = rng.normal(size=(n, d))
    x[:, 0] += shift
    return x


# ---- MMD -------------------------------------------------------------------------------------------------


def test_mmd_same_distribution_is_about_zero_and_not_significant():
    rng = np.random.default_rng(1)
    vals = [mmd2_unbiased(_gauss(rng, 200, 3), _gauss(rng, 200, 3), sigma=1.5) for _ in range(10)]
    assert abs(np.mean(vals)) < 0.005  # unbiased: E[MMD²_u] = 0 under H0
    r = mmd_test(_gauss(rng, 100, 3), _gauss(rng, 100, 3), permutations=200, seed=0)
    assert r["p_value"] > 0.05


@pytest.mark.parametrize("dim", [1, 2, 8])
def test_mmd_matches_the_gaussian_closed_form_and_grows_with_the_shift(dim):
    rng = np.random.default_rng(dim)
    sigma, n, reps = 1.0 * np.sqrt(dim), 250, 8
    estimates = []
    for shift in (0.0, 0.5, 1.0, 2.0):
        est = np.array([mmd2_unbiased(_gauss(rng, n, dim), _gauss(rng, n, dim, shift), sigma=sigma)
                        for _ in range(reps)])
        truth = gaussian_mmd2(np.eye(dim)[0] * shift, dim, 1.0, sigma)
        se = est.std(ddof=1) / np.sqrt(reps)
        assert abs(est.mean() - truth) < 4 * se + 2e-3, (shift, est.mean(), truth)
        estimates.append(est.mean())
    assert estimates[0] < 0.005 < estimates[1] < estimates[2] < estimates[3]


def test_permutation_p_value_small_for_shifted_means():
    rng = np.random.default_rng(5)
    r = mmd_test(_gauss(rng, 80, 4), _gauss(rng, 80, 4, 1.0), permutations=200, seed=0)
    assert r["mmd2"] > 0 and r["p_value"] <= 1 / 201 + 1e-12
    assert r["mmd"] == pytest.approx(np.sqrt(r["mmd2"]))


def test_median_bandwidth_and_shared_table_bandwidth():
    pts = np.array([[0.0], [1.0], [3.0]])  # distances 1, 2, 3
    assert median_bandwidth(pts) == pytest.approx(2.0)
    rng = np.random.default_rng(0)
    groups = {"real": _gauss(rng, 30, 2, 3.0), "simulated": _gauss(rng, 30, 2, 3.2), "clean": _gauss(rng, 30, 2)}
    t = mmd_table(groups, permutations=50)
    assert set(t["pairs"]) == {"real|simulated", "real|clean", "simulated|clean"}
    assert len({p["sigma"] for p in t["pairs"].values()}) == 1  # one σ for the whole table
    assert t["pairs"]["real|simulated"]["mmd2"] < t["pairs"]["simulated|clean"]["mmd2"]


# ---- preprocessing ---------------------------------------------------------------------------------------


def test_preprocess_crops_samples_rescales_and_is_deterministic():
    rng = np.random.default_rng(0)
    n = 5000
    az = rng.uniform(-np.pi, np.pi, n)
    r = rng.uniform(0.2, 120, n)
    elev = np.radians(rng.uniform(-30, 10, n))
    xyz = np.stack([r * np.cos(elev) * np.cos(az), r * np.cos(elev) * np.sin(az), r * np.sin(elev)], 1)
    pts = np.concatenate([xyz, rng.uniform(0, 255, (n, 1))], 1).astype(np.float32)
    prep = Preprocess(points=256, min_range=1.0, max_range=50.0)
    a = prep.apply(pts, ("x", "y", "z", "intensity"), "byte", "scan/1", seed=3)
    assert a.shape == (256, 4) and a.dtype == np.float32
    rr = np.linalg.norm(a[:, :3], axis=1) * 50.0
    assert rr.min() >= 1.0 - 1e-4 and rr.max() <= 50.0 + 1e-4
    elev_deg = np.degrees(np.arcsin(a[:, 2] * 50.0 / rr))
    assert elev_deg.min() >= -24.8 - 1e-3 and elev_deg.max() <= 2.0 + 1e-3
    assert 0.0 <= a[:, 3].min() and a[:, 3].max() <= 1.0 and a[:, 3].max() > 0.5  # byte → [0, 1]
    np.testing.assert_array_equal(a, prep.apply(pts, ("x", "y", "z", "intensity"), "byte", "scan/1", seed=3))
    assert not np.array_equal(a, prep.apply(pts, ("x", "y", "z", "intensity"), "byte", "scan/2", seed=3))
    unit = pts.copy()
    unit[:, 3] /= 255.0
    np.testing.assert_allclose(prep.apply(unit, ("x", "y", "z", "intensity"), "unit", "scan/1", seed=3), a,
                               atol=1e-6)  # same scan on another intensity scale → same input
    few = prep.apply(pts[:10], ("x", "y", "z", "intensity"), "byte", "few", seed=0)  # fewer: with replacement
    assert few.shape == (256, 4)
    with pytest.raises(EmptyScanError, match="far"):
        prep.apply(np.array([[500.0, 0, 0, 1]], np.float32), ("x", "y", "z", "intensity"), "unit", "far", seed=0)


# ---- training --------------------------------------------------------------------------------------------


def test_training_is_deterministic_and_keeps_the_best_checkpoint():
    import torch

    from bench_build.validate.pointnet import PointNet, PointNetConfig
    from bench_build.validate.train import TrainConfig, split_train_val, train_classifier

    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 20).astype(np.int64)
    x = rng.normal(0, 0.3, (40, 64, 4)).astype(np.float32)
    x[y == 1, :, 3] += 1.0  # "weather" scans: brighter — separable
    tr, va = split_train_val(y, 0.1, seed=0)
    assert len(va) == 4 and set(y[va]) == {0, 1} and not set(tr) & set(va)
    cfg, mcfg = TrainConfig(epochs=6, batch_size=8, seed=1, threads=1), PointNetConfig(width=0.125)
    a = train_classifier(x[tr], y[tr], x[va], y[va], mcfg, cfg)
    b = train_classifier(x[tr], y[tr], x[va], y[va], mcfg, cfg)
    assert [h["val_loss"] for h in a.history] == [h["val_loss"] for h in b.history]
    assert all(torch.equal(a.state_dict[k], b.state_dict[k]) for k in a.state_dict)
    best = max(a.history, key=lambda h: (h["val_accuracy"], -h["val_loss"]))
    assert a.best_epoch == best["epoch"] and a.best_val_accuracy == best["val_accuracy"]
    early = train_classifier(x[tr], y[tr], x[va], y[va], mcfg, TrainConfig(epochs=50, batch_size=8, seed=1,
                                                                           threads=1, patience=2))
    assert early.stopped_early and len(early.history) < 50
    net = PointNet(PointNetConfig())
    assert PointNetConfig().mlp == (64, 64, 64, 128, 1024) and PointNetConfig().fc == (512, 256)
    net.eval()
    logits, feats = net(torch.zeros(2, 32, 4))
    assert logits.shape == (2, 2) and feats.shape == (2, 1024)


# ---- verdict ---------------------------------------------------------------------------------------------


def _mmd(rs: float, sc: float) -> dict:
    pairs = {"real|simulated": {"mmd2": rs}, "simulated|clean": {"mmd2": sc}, "real|clean": {"mmd2": 1.0}}
    return {"raw": {"pairs": pairs}, "tsne": {"pairs": pairs}}


def test_verdict_can_say_natural_not_natural_and_inconclusive(tmp_path):
    cfg = ValidateConfig(corruption="fog", real_weather=tmp_path, real_clean=tmp_path)
    assert verdict(0.95, 0.9, 0.99, _mmd(0.05, 0.5), cfg)["verdict"] == "natural"
    assert verdict(0.40, 0.9, 0.99, _mmd(0.05, 0.5), cfg)["verdict"] == "not natural"  # accuracy too low
    assert verdict(0.95, 0.9, 0.99, _mmd(0.60, 0.5), cfg)["verdict"] == "not natural"  # closer to clean
    assert verdict(0.95, 0.9, 0.55, _mmd(0.05, 0.5), cfg)["verdict"] == "inconclusive"  # weak classifier
    assert verdict(0.95, 0.1, 0.99, _mmd(0.05, 0.5), cfg)["verdict"] == "inconclusive"  # build clean = weather


# ---- inputs ----------------------------------------------------------------------------------------------


def test_detect_format_from_name_then_record_size(tmp_path):
    d = tmp_path / "scans"
    d.mkdir()
    files = []
    for i, n in enumerate((7, 11, 13)):
        p = d / f"{i}.bin"
        np.zeros((n, 6), np.float32).tofile(p)  # 168, 264, 312 bytes: only a multiple of 24
        files.append(p)
    assert detect_format(d, files, "auto") == "boreas"
    assert detect_format(d, files, "stf") == "stf"
    assert detect_format(tmp_path / "SeeingThroughFog" / "fog", files, "auto") == "stf"
    np.zeros((12, 5), np.float32).tofile(files[0])  # 240 bytes: a multiple of 16, 20 and 24
    for p in files[1:]:
        p.unlink()
    with pytest.raises(ValidationError, match="--real-format"):
        detect_format(d, files[:1], "auto")


def _scan(n: int = 400, width: int = 5, seed: int = 0) -> np.ndarray:
    """Points as a LiDAR records them: x, y within 60 m, z near the ground, intensity 0..255, then ring / time."""
    rng = np.random.default_rng(seed)
    pts = np.column_stack([rng.uniform(-60, 60, (n, 2)), rng.uniform(-2, 1, n), rng.uniform(0, 255, n),
                           rng.integers(0, 64, (n, width - 4))])
    return pts.astype(np.float32)


@pytest.mark.parametrize(("fmt", "width"), [("stf", 5), ("boreas", 6), ("kitti", 4)])
@pytest.mark.parametrize("values", ["float32 values", "full float64 values"])
def test_a_real_scan_of_float64_records_is_refused_naming_the_file(tmp_path, fmt, width, values):
    """N float64 records are 2N float32 ones, so the size check passed them and the halves of every value went
    into the verdict as points (a coordinate's low half up to 1e19). Refused, naming the file, saying float64.
    Values computed in float64 also decode to NaN somewhere: that error says float64 too."""
    from bench_build.sources.base import SourceError
    from bench_build.validate.extract import read_real

    pts = _scan(width=width).astype(np.float64)
    if values == "full float64 values":
        pts[:, :3] += np.random.default_rng(1).uniform(0, 1e-3, (len(pts), 3))  # every mantissa bit used
    good, bad = tmp_path / "good.bin", tmp_path / "bad.bin"
    pts.astype(np.float32).tofile(good)
    pts.tofile(bad)
    assert read_real(fmt, good).shape == (len(pts), width)
    with pytest.raises(SourceError) as e:
        read_real(fmt, bad)
    msg = str(e.value)
    assert msg.startswith(f"{bad}: ") and "\n" not in msg, msg
    assert f"its bytes read as plausible float64 records: {fmt} scans are {width} float32 per point" in msg, msg


def test_a_real_scan_no_lidar_records_is_refused_naming_what_is_wrong(tmp_path):
    """Values no LiDAR returns — a coordinate beyond 10 km, a negative intensity — are refused with the point; no
    float64 hint when the bytes are not float64 records either."""
    from bench_build.sources.base import SourceError
    from bench_build.validate.extract import read_real

    far, dark = _scan(), _scan()
    far[7, 1] = 2e4
    dark[3, 3] = -1.0
    for name, pts, why in (("far", far, "1 point(s) beyond 10000 m (first at point 7: "),
                           ("dark", dark, "1 point(s) with a negative intensity (first at point 3: -1)")):
        path = tmp_path / f"{name}.bin"
        pts.tofile(path)
        with pytest.raises(SourceError) as e:
            read_real("stf", path)
        assert str(e.value).startswith(f"{path}: not a LiDAR scan of stf float32 records: {why}"), str(e.value)
        assert "float64" not in str(e.value)


def test_an_unreadable_real_scan_is_an_error_naming_the_file(tmp_path, monkeypatch):
    """An OSError while a task read a real scan (permissions, an I/O error) escaped the task: a Ray traceback
    instead of the one line the driver turns into the corruption's error."""
    from bench_build.validate import extract

    scan = tmp_path / "a.bin"
    np.ones((40, 5), np.float32).tofile(scan)

    def unreadable(fmt, path, duplicates="keep"):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(extract, "read_real", unreadable)
    got = extract.load_real_chunk("stf", str(tmp_path), ["a.bin"], "weather", Preprocess(points=8), 0)
    assert got == {"error": f"{scan}: cannot read it: Permission denied"}


def test_parse_real_options():
    out = parse_real_options(["snow", "fog"], ["snow=/d/boreas", "fog=/d/stf/fog"], ["/d/clear"])
    assert {k: tuple(map(str, v)) for k, v in out.items()} == {"snow": ("/d/boreas", "/d/clear"),
                                                               "fog": ("/d/stf/fog", "/d/clear")}
    with pytest.raises(ValidationError, match="no real data for fog"):
        parse_real_options(["snow", "fog"], ["snow=/d/boreas"], ["/d/clear"])
    with pytest.raises(ValidationError, match="rain"):
        parse_real_options(["snow"], ["rain=/d/x"], ["/d/clear"])
    with pytest.raises(ValidationError, match="real clean"):
        parse_real_options(["snow"], ["/d/boreas"], [])
    # a corruption's own directory wins over the bare one, in either order
    for real in (["/d/any", "fog=/d/stf/fog"], ["fog=/d/stf/fog", "/d/any"]):
        out = parse_real_options(["snow", "fog"], real, ["/d/clear"])
        assert (str(out["fog"][0]), str(out["snow"][0])) == ("/d/stf/fog", "/d/any")
    # the same corruption twice, or two bare directories: the last one won without a word
    with pytest.raises(ValidationError, match=r"--real 'fog=/d/b': fog is already given \(--real fog=/d/a\)"):
        parse_real_options(["fog"], ["fog=/d/a", "fog=/d/b"], ["/d/clear"])
    with pytest.raises(ValidationError, match=r"--real-clean '/d/c2': a directory for every corruption is already"):
        parse_real_options(["fog"], ["fog=/d/a"], ["/d/c1", "/d/c2"])


RECIPE = """
[benchmark]
name = "v"
version = "1"
seed = 1
source = "kitti"
severities = 2

[corruptions.fog]
stage = "fog"
alpha = [0.05, 0.1]

[corruptions.gaussian_rad]
stage = "gaussian_rad"
sigma = [0.04, 0.06]
"""


def test_recipe_validate_table_is_checked_and_leaves_the_fingerprint_alone(tmp_path):
    plain = parse_recipe(RECIPE)
    table = ('\n[validate]\ncorruptions = ["fog"]\nreal = { fog = "stf/fog" }\nreal_clean = "stf/clear"\n'
             "sample = 4\nepochs = 3\nwidth = 1\nseverities = [2]\n")
    with_v = parse_recipe(RECIPE + table)
    assert plain.validate is None
    assert with_v.validate["corruptions"] == ["fog"] and with_v.validate["width"] == 1.0
    assert with_v.fingerprint(["a", "b"]) == plain.fingerprint(["a", "b"])
    assert with_v.canonical() == plain.canonical()
    [(cfg, problem)] = configs_from_recipe(with_v.validate, base=tmp_path)
    assert problem == "" and cfg.real_weather == tmp_path / "stf/fog" and cfg.real_clean == tmp_path / "stf/clear"
    assert cfg.sample == 4 and cfg.epochs == 3 and cfg.severities == (2,)
    missing = parse_recipe(RECIPE + '\n[validate]\ncorruptions = ["fog"]\n')
    [(none, why)] = configs_from_recipe(missing.validate)
    assert none is None and "no real data" in why
    for bad, match in [('corruptions = ["snow"]', "not in the recipe"), ('corruptions = ["fog"]\nepoch = 3', "unknown"),
                       ('corruptions = ["fog"]\nepochs = "3"', "wrong type"),
                       ('corruptions = ["fog"]\nseverities = [3]', "severities"),
                       ('corruptions = ["fog"]\nreal_format = "pcd"', "real_format"),
                       ('corruptions = ["fog"]\nreal = { gaussian_rad = "/x" }', "real entries")]:
        with pytest.raises(RecipeError, match=match):
            parse_recipe(RECIPE + "\n[validate]\n" + bad + "\n")


def test_the_cpu_training_estimate_scales_from_the_measured_paper_batch():
    from bench_build.validate.train import CPU_BATCH_SECONDS, cpu_training_estimate

    # one paper-sized batch on the 2 cores it was measured on
    assert cpu_training_estimate(32, 16384, 1.0, 32, 1, 2) == pytest.approx(CPU_BATCH_SECONDS)
    # the paper's run: 21,863 training scans (Boreas 9:1), 80 epochs → about 11 days on 2 cores
    paper = cpu_training_estimate(21863, 16384, 1.0, 32, 80, 2)
    assert paper == pytest.approx(684 * 80 * CPU_BATCH_SECONDS)
    assert cpu_training_estimate(21863, 16384, 1.0, 32, 80, 16) == pytest.approx(paper / 8)
    assert cpu_training_estimate(64, 512, 0.125, 16, 3, 2) < 1  # the test configuration: under a second


def test_validate_says_its_device_and_on_cpu_how_long_training_will_take(tmp_path, monkeypatch):
    import torch

    from bench_build.validate.run import training_device_line

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = ValidateConfig(corruption="snow", real_weather=tmp_path, real_clean=tmp_path)  # the paper's defaults
    line = training_device_line(cfg, 21863, 2)
    assert line.startswith("device: cpu (2 threads); estimated training time at most 258.4 h") and "80 epochs" in line
    assert "CUDA GPU" in line
    small = training_device_line(ValidateConfig(corruption="snow", real_weather=tmp_path, real_clean=tmp_path,
                                                points=512, width=0.125, epochs=3, batch_size=16), 64, 2)
    assert small == "device: cpu (2 threads); estimated training time at most 0 s for 3 epochs of 64 scans × 512 points"
