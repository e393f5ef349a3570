"""The dataset card's "Differences from the paper" table: one row per corruption where kitti-c's default
(the released generator) and its `text` variant (Appendix C) differ, with both values."""

from __future__ import annotations

import pytest

from manifests.card import differences_section
from manifests.recipe import load_recipe
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
