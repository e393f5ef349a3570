"""What `status`, `versions`, `pull` and `diff` tell a user about the version in front of them (the audit's
findings): a folder holding another fingerprint's build, a publication root passed as a dataset URL, a partial
pull, an unknown partition, and diffs whose two sides are not "an earlier and a later version of one benchmark".
On the session's `mini_build` (mini-c 0.1.0); nothing here builds."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from bench_build.cli import app
from tests.conftest import SMALL_RECIPE

runner = CliRunner()


def test_status_says_the_folder_holds_a_build_of_another_fingerprint(mini_build, tmp_path):
    """A recipe copy whose parameters changed but whose version did not: `run` refuses the folder, and `status` says
    so instead of "done … manifest: yes"."""
    out_root = str(Path(mini_build).parent.parent)
    same, changed = tmp_path / "same.toml", tmp_path / "changed.toml"
    same.write_text(SMALL_RECIPE)
    changed.write_text(SMALL_RECIPE.replace("0.04, 0.06", "0.05, 0.06"))  # version 0.1.0 still
    ok = runner.invoke(app, ["status", str(same), "--out", out_root])
    assert ok.exit_code == 0 and "another fingerprint" not in ok.output and "manifest: yes" in ok.output, ok.output
    assert json.loads(runner.invoke(app, ["status", str(same), "--out", out_root, "--json"]).output)[
        "matches_recipe"] is True
    got = runner.invoke(app, ["status", str(changed), "--out", out_root])
    assert got.exit_code == 0, got.output
    first = got.output.splitlines()[0]
    built = json.loads((Path(mini_build) / "manifest.json").read_text())["fingerprint"]
    assert "holds a build of another fingerprint" in first and built[:12] in first and "refuses" in first, first
    st = json.loads(runner.invoke(app, ["status", str(changed), "--out", out_root, "--json"]).output)
    assert st["matches_recipe"] is False and st["fingerprint"] == built and st["recipe_fingerprint"] != built
    assert st["recipe_fingerprint"][:12] in first


def test_diff_notes_name_what_makes_a_diff_read_otherwise():
    from bench_build.build.reuse import diff_notes

    def m(dataset: str, version: str, **extra) -> dict:
        return {"dataset": dataset, "version": version, "shards": [], **extra}

    assert diff_notes(m("kitti-c", "1.0.0"), m("kitti-c", "1.0.1")) == []
    other = diff_notes(m("kitti-c", "1.0.0"), m("kitti-c-text", "1.0.0"))
    assert len(other) == 1 and "different benchmarks" in other[0] and "--reuse" in other[0]
    assert "same place" in diff_notes(m("a", "1"), m("a", "1"), same_place=True)[0]
    later = diff_notes(m("a", "1.0.1"), m("a", "1.0.0"), a_later=True)
    assert len(later) == 1 and "A (1.0.1) is later than B (1.0.0)" in later[0]
    part = {"selections": [{"corruption": "fog", "severity": None}], "files_in_version": 126}
    assert diff_notes(m("a", "1"), m("a", "2", partial=part)) == [
        "B is a partial pull (0 of 126 files: corruption=fog): partitions it does not hold show as removed"]
