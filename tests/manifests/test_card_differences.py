"""The dataset card's "Differences from the paper" table: one row per corruption where kitti-c's default
(the released generator) and its `text` variant (Appendix C) differ, with both values; 3DOS's rows for its
source options (cellphones, the Real→Real validation hold-out)."""

from __future__ import annotations

import pytest

from bench_build.manifests.card import differences_section
from bench_build.manifests.recipe import load_recipe
from tests.manifests.test_kitti_c_tables import CODE_CHANGES


@pytest.mark.parametrize("spec", ["kitti-c", "kitti-c:text"])
def test_every_difference_is_listed_with_both_values(spec):
    lines = differences_section(load_recipe(spec))
    text = "\n".join(lines)
    assert "## Differences from the paper" in text
    assert "bench-build run kitti-c:text" in text
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if line.startswith("| ") and "---" not in line}
    rows.pop("corruption")
    assert set(rows) == set(CODE_CHANGES)
    assert "k = 20" in rows["cutout"] and "k = 100" in rows["cutout"]
    assert "magnitude = 0.4" in rows["impulse_rad"] and "magnitude = 0.2" in rows["impulse_rad"]
    assert "[0, 2, 4, 6, 8]" in rows["rotation"] and "[0, 3, 5, 7, 9]" in rows["rotation"]
    assert "0.06" in rows["fog"]
    assert ("**text** variant" in text) == spec.endswith(":text")


def test_a_recipe_without_variants_has_no_section():
    assert differences_section(load_recipe("robo3d-kitti-c")) == []


@pytest.mark.parametrize("spec", ["3dos", "3dos:cellphone"])
def test_3dos_lists_both_membership_choices_with_both_values(spec):
    from bench_build.manifests.card import object_sections

    recipe = load_recipe(spec)
    text = "\n".join(differences_section(recipe))
    for variant, key, default, other in (("cellphone", "cellphone", "exclude", "telephone"),
                                         ("r2r-train-all", "r2r_val", "authors", "none")):
        assert f"bench-build run 3dos:{variant}" in text and f"source option `{key}`" in text
        row = next(line for line in text.splitlines() if line.startswith(f"| source_options.{key} |"))
        assert f"{key} = {default}." in row and f"{key} = {other}." in row
    assert "sncore_4k.py" in text and "random_state=42" in text
    membership = "\n".join(object_sections(recipe, {"kind": "3dos"}))
    chosen = "telephone" if spec.endswith("cellphone") else "exclude"
    assert f"- `cellphone` = {chosen}:" in membership and "- `r2r_val` = authors:" in membership


def test_a_user_recipe_names_its_variants_without_claiming_a_paper():
    """A recipe of one's own with a variant: its default is no released generator and its variant no paper's text,
    so the section and column say "variants" and "default"; a corruption without notes gets no dangling ". "."""
    from bench_build.manifests.recipe import parse_recipe

    text = ('[benchmark]\nname = "mine"\nversion = "1"\nseed = 1\nsource = "kitti"\nseverities = 2\n'
            '[corruptions.g]\nstage = "gaussian_rad"\nsigma = [0.1, 0.2]\n'
            '[variants.far]\ndescription = "twice the noise"\n[variants.far.corruptions.g]\nsigma = [0.2, 0.4]\n')
    lines = differences_section(parse_recipe(text))
    joined = "\n".join(lines)
    assert "## Variants of this recipe" in lines and "paper" not in joined and "released generator" not in joined
    assert "| corruption | default | `far` |" in lines and "bench-build run <recipe.toml>:far" in joined
    assert "| g | sigma = [0.1, 0.2]. | sigma = [0.2, 0.4]. |" in lines, joined
