"""The kitti-c recipe is the released generator, its `text` variant is the paper.

`kitti-c` (default) must equal the constants of Li et al.'s released generator
(Castiel-Lee/robustness_pc_detector, read from its
code); `kitti-c:text` must equal Appendix C (severities 1–5; severity 0 is the clean scan). Both
tables are typed here independently of the recipe, from the code and from the paper."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from bench_build.manifests.recipe import load_recipe

TEXT = "text"

# corruption: (stage, {param: values at severities 1..5 or a scalar for all})
PAPER = {
    # C-A scene level
    "rain": ("rain_lisa", {"rate": [5.0, 15.0, 50.0, 150.0, 500.0]}),
    "snow": ("snow_lisa", {"rate": [0.5, 1.5, 5.0, 15.0, 50.0]}),
    "fog": ("fog", {"alpha": [0.005, 0.01, 0.02, 0.05, 0.1]}),
    "uniform_rad": ("uniform_rad", {"half_width": [0.04, 0.08, 0.12, 0.16, 0.2]}),
    "gaussian_rad": ("gaussian_rad", {"sigma": [0.04, 0.06, 0.08, 0.10, 0.12]}),
    "impulse_rad": ("impulse_rad", {"count_divisor": [30, 25, 20, 15, 10], "magnitude": 0.2}),
    "background": ("background", {"count_divisor": [45, 40, 35, 30, 20]}),
    "upsample": ("upsample", {"count_divisor": [10, 8, 6, 4, 2], "offset": 0.1}),
    "cutout": ("cutout", {"count_divisor": [2000, 1500, 1000, 800, 600], "k": 100}),
    "local_dec": ("local_dec", {"count_divisor": [300, 250, 200, 150, 100], "k": 100, "drop_fraction": 0.75}),
    "local_inc": ("local_inc", {"count_divisor": [2000, 1500, 1000, 800, 600], "k": 100}),
    "beam_del": ("beam_del", {"count_divisor": [100, 30, 10, 5, 3]}),
    "layer_del": ("layer_del", {"layers": [3, 7, 11, 15, 19], "num_bins": 64}),
    # C-B object level
    "uniform_obj": ("uniform_obj", {"half_width": [0.02, 0.04, 0.06, 0.08, 0.10]}),
    "gaussian_obj": ("gaussian_obj", {"sigma": [0.02, 0.03, 0.04, 0.05, 0.06]}),
    "impulse_obj": ("impulse_obj", {"count_divisor": [30, 25, 20, 15, 10], "magnitude": 0.1}),
    "upsample_obj": ("upsample_obj", {"count_divisor": [5, 4, 3, 2, 1], "offset": 0.05}),
    "cutout_obj": ("cutout_obj", {"centers": [1, 2, 3, 4, 5], "k": 20}),
    "local_dec_obj": ("local_dec_obj", {"centers": [1, 2, 3, 4, 5], "k": 30, "drop_fraction": 0.75}),
    "local_inc_obj": ("local_inc_obj", {"centers": [1, 2, 3, 4, 5], "k": 30}),
    "shear": ("shear", {"min_coeff": [0.0, 0.05, 0.10, 0.15, 0.20], "max_coeff": [0.10, 0.15, 0.20, 0.25, 0.30]}),
    "ffd": ("ffd", {"max_displacement": [0.1, 0.2, 0.3, 0.4, 0.5], "lattice": 5}),
    "scale": ("scale", {"change": [0.04, 0.08, 0.12, 0.16, 0.20]}),
    "rotation": ("rotation", {"min_degrees": [0, 3, 5, 7, 9], "max_degrees": [2, 4, 6, 8, 10]}),
    # the paper prints the last range as "(0.9, 0.1)"; read as (0.9, 1.0) m (its text says "< 1 m")
    "translation": ("translation", {"min_distance": [0.0, 0.3, 0.5, 0.7, 0.9],
                                    "max_distance": [0.2, 0.4, 0.6, 0.8, 1.0]}),
}


# Where the released code differs from the text (the rest of the code table is PAPER).
CODE_CHANGES = {
    "gaussian_rad": {"rule": "code"},  # × √3
    "uniform_rad": {"rule": "code"},  # × √3
    "impulse_rad": {"magnitude": 0.4, "rule": "code"},  # ± 0.4·√3
    "background": {"rule": "code"},  # trimmed z range, 5-NN mean intensity
    "upsample": {"rule": "code"},  # 5-NN mean intensity
    "cutout": {"count_divisor": [200, 150, 100, 80, 60], "k": 20, "rule": "code"},  # sequential
    "local_dec": {"drop_fraction": 0.8, "rule": "code"},  # int(4/5 · 100) = 80, sequential
    "local_inc": {"rule": "code"},
    "layer_del": {"rule": "code"},  # c ± 1 layers, trimmed polar bins
    "translation": {"min_distance": [0.0, 0.2, 0.4, 0.6, 0.8], "rule": "code"},  # U(c − 0.1, c + 0.1) per axis
    "rotation": {"min_degrees": [0, 2, 4, 6, 8]},  # U(c − 1, c + 1)
    "fog": {"table_alphas": (0.005, 0.01, 0.02, 0.03, 0.06, 0.1, 0.12, 0.15, 0.2)},  # no 0.05 table shipped
    # object level: same constants, in the box-normalised frame, with the released clamps / deletion rules
    **{name: {"rule": "code"} for name in ("uniform_obj", "gaussian_obj", "impulse_obj", "upsample_obj", "cutout_obj",
                                           "local_dec_obj", "local_inc_obj", "shear", "ffd")},
}
TEXT_RULE = {name for name, ch in CODE_CHANGES.items() if "rule" in ch}
CODE = {name: (stage, {**table, **CODE_CHANGES.get(name, {})}) for name, (stage, table) in PAPER.items()}
TEXT_TABLE = {name: (stage, {**table, **({"rule": "text"} if name in TEXT_RULE else {}),
                             **({"table_alphas": ()} if name == "fog" else {})})
              for name, (stage, table) in PAPER.items()}


@pytest.mark.parametrize("spec", ["kitti-c", "kitti-c:text"])
def test_kitti_c_has_the_papers_25_corruptions_and_counts(spec):
    recipe = load_recipe(spec)
    assert sorted(c.name for c in recipe.corruptions) == sorted(PAPER)
    assert recipe.severities == 5
    assert recipe.examples_defined(7481) == 1_122_150
    assert recipe.name == ("kitti-c-text" if spec.endswith(TEXT) else "kitti-c")


def test_default_and_text_fingerprints_differ():
    assert load_recipe("kitti-c").fingerprint(["0"]) != load_recipe("kitti-c:text").fingerprint(["0"])


def test_the_variant_lists_exactly_the_code_text_differences():
    changes = load_recipe("kitti-c").variants[TEXT].changes
    assert set(changes) == set(CODE_CHANGES)
    for name, ch in CODE_CHANGES.items():
        assert set(changes[name]) == set(ch), name


@pytest.mark.parametrize("name", sorted(PAPER))
@pytest.mark.parametrize(("spec", "tables"), [("kitti-c", CODE), ("kitti-c:text", TEXT_TABLE)], ids=["code", "text"])
def test_corruption_table_equals_the_code_and_the_paper(name, spec, tables):
    stage, table = tables[name]
    c = load_recipe(spec).corruption(name)
    assert c.stage == stage
    for param, expected in table.items():
        values = [asdict(p)[param] for p in c.params]
        want = expected if isinstance(expected, list) else [expected] * 5
        if isinstance(values[0], str | tuple):
            assert values == want, f"{spec} {name}.{param}"
        else:
            assert values == pytest.approx(want, rel=0, abs=1e-12), f"{spec} {name}.{param}"
