"""The three Robo3D dataset recipes are the released generators / the paper: every per-level value equals
the released generators' constants (ldkong1205/Robo3D: SemanticKITTI-C, nuScenes-C, WOD-C), typed here by hand."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest

from bench_build.manifests.recipe import load_recipe

L3 = 3
FOG_ALPHAS = (0.0, 0.005, 0.01, 0.02, 0.03, 0.06)
SNOW = {"rate": [0.5, 1.0, 2.5], "terminal_velocity": [2.0, 1.6, 1.6], "divergence_mrad": 3.0, "noise_floor": 0.7}

TABLES = {
    "robo3d-semantickitti-c": {
        "fog": {"beta": [0.008, 0.05, 0.2], "alpha_choices": FOG_ALPHAS, "noise": 10.0, "label_id": 21,
                "round_hard": False},
        "wet_ground": {"water_height": [0.2, 1.0, 1.2], "noise_floor": 0.3,
                       "ground_labels": (40, 60, 44, 48, 49)},  # road 9 (40, 60), parking, sidewalk, other-ground
        "snow": {**SNOW, "label_id": 22, "ring_method": "elevation_bins"},
        "motion_blur": {"sigma": [0.20, 0.25, 0.30]},
        "beam_missing": {"beams": [16, 32, 48], "ring_low": 4, "ring_high": 58, "replace": True},
        "crosstalk": {"fraction": [0.006, 0.008, 0.01], "sigma": 3.0, "perturb_intensity": True, "label_id": 23},
        "incomplete_echo": {"ratio": [0.75, 0.85, 0.95], "min_points": 10,
                            # learning map: car 1 (10, 252), bicycle 2 (11), motorcycle 3 (15), truck 4 (18, 258),
                            # other-vehicle 5 (13, 16, 20, 256, 257, 259)
                            "groups": {1: {10, 252}, 2: {11}, 3: {15}, 4: {18, 258},
                                       5: {13, 16, 20, 256, 257, 259}}},
        "cross_sensor": {"deleted": [list(range(1, 64, 4)), list(range(1, 64, 2)),
                                     [int(v) for v in np.arange(1, 64, 1.33)]],
                         "subsample": 2},
    },
    "robo3d-nuscenes-c": {
        "fog": {"beta": [0.008, 0.05, 0.2], "alpha_choices": FOG_ALPHAS, "noise": 10.0, "label_id": 41,
                "round_hard": True},
        "wet_ground": {"water_height": [0.2, 1.0, 1.2], "noise_floor": 0.2, "floor_const": 0.0,
                       "ground_labels": (24, 25, 26)},
        "snow": {**SNOW, "label_id": 42, "ring_method": "column"},
        "motion_blur": {"sigma": [0.20, 0.30, 0.40]},
        "beam_missing": {"beams": [8, 16, 24], "ring_low": 2, "ring_high": 28, "replace": True},
        "crosstalk": {"fraction": [0.03, 0.07, 0.12], "sigma": 3.0, "perturb_intensity": True, "label_id": 43},
        "incomplete_echo": {"ratio": [0.75, 0.85, 0.95], "min_points": 10,
                            # 16-class ids bicycle 2 (14), bus 3 (15, 16), car 4 (17), construction 5 (18),
                            # motorcycle 6 (21), trailer 9 (22), truck 10 (23)
                            "groups": {2: {14}, 3: {15, 16}, 4: {17}, 5: {18}, 6: {21}, 9: {22}, 10: {23}}},
        "cross_sensor": {"deleted": [list(range(1, 32, 4)), list(range(1, 32, 2)),
                                     [int(v) for v in np.arange(1, 32, 1.33)]],
                         "subsample": 2},
    },
    "robo3d-wod-c": {
        "fog": {"beta": [0.008, 0.05, 0.2], "alpha_choices": FOG_ALPHAS, "label_id": 23},
        "wet_ground": {"water_height": [0.2, 1.0, 1.2], "ground_labels": (17, 18, 20, 21, 22)},
        "snow": {"rate": [0.5, 1.0, 2.5], "label_id": 24},
        "motion_blur": {"sigma": [0.06, 0.10, 0.13]},
        "beam_missing": {"beams": [16, 32, 48]},
        "crosstalk": {"fraction": [0.006, 0.008, 0.01], "label_id": 25},
        "incomplete_echo": {"ratio": [0.75, 0.85, 0.95],
                            # car, truck, bus, other-vehicle, bicycle, motorcycle (Segmentation.Type)
                            "groups": {1: {1}, 2: {2}, 3: {3}, 4: {4}, 12: {12}, 13: {13}}},
        "cross_sensor": {"deleted": [list(range(1, 64, 4)), list(range(1, 64, 2)),
                                     [int(v) for v in np.arange(1, 64, 1.33)]],
                         "subsample": 2},
    },
}
FULL_SIZE = {"robo3d-semantickitti-c": (4071, 97_704), "robo3d-nuscenes-c": (6019, 144_456),
             "robo3d-wod-c": (5976, 143_424), "robo3d-kitti-c": (3769, 90_456)}
SOURCES = {"robo3d-semantickitti-c": ("semantickitti", "val"), "robo3d-nuscenes-c": ("nuscenes", "val"),
           "robo3d-wod-c": ("waymo", "validation")}


@pytest.mark.parametrize("name", sorted(FULL_SIZE))
def test_full_size_counts(name):
    r = load_recipe(name)
    frames, corrupted = FULL_SIZE[name]
    assert r.paper_frames == frames
    assert [c.name for c in r.corruptions] == ["fog", "wet_ground", "snow", "motion_blur", "beam_missing",
                                               "crosstalk", "incomplete_echo", "cross_sensor"]
    assert r.severities == 3 and r.severity_names == ("light", "moderate", "heavy")
    assert frames * len(r.corruptions) * r.severities == corrupted
    if name in SOURCES:
        assert (r.source, r.split) == SOURCES[name]


def _cases():
    return [(name, corr) for name, table in TABLES.items() for corr in table]


@pytest.mark.parametrize(("name", "corruption"), _cases())
def test_table_equals_generators_spec(name, corruption):
    from bench_build.stages.density.cross_sensor import deleted_rings
    from bench_build.stages.density.incomplete_echo import vehicle_classes

    c = load_recipe(name).corruption(name=corruption)
    assert c.stage == corruption
    for param, expected in TABLES[name][corruption].items():
        if param == "deleted":
            assert [deleted_rings(p).tolist() for p in c.params] == expected
            continue
        if param == "groups":
            ids = sorted(set().union(*expected.values()))
            sem = np.array(ids * 2)
            for p in c.params:
                got = [set(sem[g].tolist()) for g in vehicle_classes(p, sem)]
                assert got == [expected[k] for k in sorted(expected)]
            continue
        values = [asdict(p)[param] for p in c.params]
        want = expected if isinstance(expected, list) else [expected] * L3
        if isinstance(want[0], str | bool | tuple):
            assert values == want, param
        else:
            assert values == pytest.approx(want), param


def test_cli_list_shows_full_size_counts():
    from typer.testing import CliRunner

    from bench_build.cli import app

    out = CliRunner().invoke(app, ["list"])
    assert out.exit_code == 0
    text = " ".join(out.output.split())
    for name, (frames, corrupted) in FULL_SIZE.items():
        assert name in text
        assert f"full size: {frames:,} frames × 8 × 3 = {corrupted:,} corrupted examples" in text
