"""Recipe features the object benchmarks need: [preprocess], clean-only recipes, variant overrides of [preprocess]."""

from __future__ import annotations

import pytest

from bench_build.manifests.recipe import RecipeError, parse_recipe

BASE = """
[benchmark]
name = "obj"
version = "0.1.0"
seed = 1
source = "modelnet40"
severities = {sev}

[preprocess]
stage = "object_sample"
num_points = 512
{extra}
"""
CORRUPTION = """
[corruptions.jitter]
stage = "object_jitter"
sigma = [0.01]
"""


def test_preprocess_is_parsed_and_fingerprinted():
    a = parse_recipe(BASE.format(sev=1, extra="") + CORRUPTION)
    b = parse_recipe(BASE.format(sev=1, extra='method = "first"') + CORRUPTION)
    assert a.preprocess.stage == "object_sample" and a.preprocess.params[0].num_points == 512
    assert a.canonical()["preprocess"]["params"]["method"] == "random"
    assert a.fingerprint(["x"]) != b.fingerprint(["x"])


@pytest.mark.parametrize("extra, match", [
    ('nope = 1', r"\[preprocess\]: unknown parameter"),
    ('method = 3', "must be str"),
])
def test_bad_preprocess_is_named(extra, match):
    with pytest.raises(RecipeError, match=match):
        parse_recipe(BASE.format(sev=1, extra=extra) + CORRUPTION)


def test_clean_only_recipe():
    r = parse_recipe(BASE.format(sev=0, extra=""))
    assert not r.corruptions and r.examples_defined(7) == 7 and r.examples_stored(7) == 7
    with pytest.raises(RecipeError, match="clean only"):
        parse_recipe(BASE.format(sev=0, extra="") + CORRUPTION)
    with pytest.raises(RecipeError, match=r"no \[corruptions"):
        parse_recipe(BASE.format(sev=1, extra=""))


def test_variant_overrides_preprocess_and_lists_it():
    text = BASE.format(sev=0, extra="") + '[variants.text]\n[variants.text.preprocess]\nnormalize = "cube"\n'
    base, var = parse_recipe(text), parse_recipe(text, variant="text")
    assert var.preprocess.params[0].normalize == "cube" and var.name == "obj-text"
    assert base.variants["text"].changes == {"preprocess": {"normalize": ("sphere", "cube")}}
