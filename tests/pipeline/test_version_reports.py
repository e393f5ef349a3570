"""What `status`, `versions`, `pull` and `diff` tell a user about the version in front of them (the audit's
findings): a folder holding another fingerprint's build, a publication root passed as a dataset URL, a partial
pull, an unknown partition, and diffs whose two sides are not "an earlier and a later version of one benchmark".
On the session's `mini_build` (mini-c 0.1.0); nothing here builds."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.publish import publish_version
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


def test_versions_of_a_root_pull_of_an_unknown_or_partial_selection_and_diff_of_a_partial_pull(
        mini_build, s3prefix, s3env, tmp_path):
    assert publish_version(mini_build, s3prefix, progress=False).ok
    # a publication root passed where a dataset URL goes: its datasets, not "incomplete" versions
    out = runner.invoke(app, ["versions", s3prefix])
    assert out.exit_code == 0, out.output
    assert f"{s3prefix}: this is a publication root; datasets: mini-c (bench-build versions {s3prefix}/<dataset>)" \
        in " ".join(out.output.split()), out.output
    assert not any(said in out.output for said in ("incomplete", "no published version", "no complete version",
                                                    "nothing published here")), out.output
    info = json.loads(runner.invoke(app, ["versions", s3prefix, "--json"]).output)
    assert info["datasets"] == ["mini-c"] and info["incomplete"] == []
    assert json.loads(runner.invoke(app, ["versions", f"{s3prefix}/mini-c", "--json"]).output)["datasets"] == []
    # an unknown corruption: what the version has
    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--out", str(tmp_path / "p"), "--corruption", "nosuch"])
    assert out.exit_code == 2, out.output
    text = " ".join(out.output.split())
    assert "no partition matches --corruption nosuch; it has" in text and "severity=None" not in text, text
    assert "clean; gaussian_rad 1–5; beam_del 1–5; background 1–5; translation 1–5" in text, text
    # a partial pull says it is one, with plurals right
    out = runner.invoke(app, ["pull", f"{s3prefix}/mini-c", "--out", str(tmp_path / "p"), "--corruption", "beam_del",
                              "--severity", "3", "--no-progress"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "pulled part of mini-c 0.1.0 (beam_del 3: 2 files of 42) to" in text, text
    assert "2 files downloaded" in text and "all 2 files verified" in text and "partial copy" in text, text
    # diff against it: the same version on both sides, B partial (its missing partitions show as removed)
    out = runner.invoke(app, ["diff", str(mini_build), str(tmp_path / "p" / "mini-c" / "0.1.0")])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert "A and B are both mini-c 0.1.0" in text, text
    assert "B is a partial pull (2 of 42 files: corruption=beam_del severity=3): partitions it does not hold show " \
           "as removed" in text, text


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
