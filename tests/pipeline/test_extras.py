"""Readers whose package is an extra: without it, using the reader (or scoring with its map) says which extra to
install and exits 2 before any work, while everything else keeps working."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.sources.base import SourceError, require_extra


def _hide(monkeypatch: pytest.MonkeyPatch, *packages: str) -> None:
    """Make ``import package`` (and its submodules) fail, as in an environment without the extra."""
    for name in list(sys.modules):
        if name.split(".")[0] in packages:
            monkeypatch.delitem(sys.modules, name)
    for name in packages:
        monkeypatch.setitem(sys.modules, name, None)


def test_require_extra_names_the_source_the_package_and_the_install_command(monkeypatch, tmp_path):
    _hide(monkeypatch, "nuscenes", "pykitti")
    with pytest.raises(SourceError, match=r"the nuScenes reader needs nuscenes, which is not installed .*"
                                          r"pip install 'bench-build\[nuscenes\]' \(it pins numpy<2"):
        require_extra("nuscenes.nuscenes", "nuscenes", "nuScenes", tmp_path)
    with pytest.raises(SourceError, match=r"^.*: the SemanticKITTI reader needs pykitti.*"
                                          r"bench-build\[semantickitti\]'$"):
        require_extra("pykitti", "semantickitti", "SemanticKITTI", tmp_path)


def test_a_nuscenes_build_without_the_devkit_exits_2_naming_the_extra_and_writes_nothing(monkeypatch, tmp_path):
    """The demo (no --source): with the devkit's own dependencies present the demo tables are written and the
    reader refuses; without them (the NumPy 2 line) the demo writer refuses. Either way: exit 2, nothing built."""
    _hide(monkeypatch, "nuscenes")
    monkeypatch.setenv("BENCH_BUILD_CACHE", str(tmp_path / "cache"))
    res = CliRunner().invoke(app, ["run", "robo3d-nuscenes-c", "--out", str(tmp_path / "o"), "--workers", "1"])
    assert res.exit_code == 2, res.output
    assert "pip install 'bench-build[nuscenes]'" in res.output and "Traceback" not in res.output
    assert not list((tmp_path / "o").rglob("*.parquet"))


def test_a_semantickitti_build_without_pykitti_exits_2_naming_the_extra(monkeypatch, tmp_path):
    from bench_build.sources.demo.semantickitti import write_semantickitti

    root = write_semantickitti(tmp_path / "sk", 2, azimuth_step_deg=0.72)
    _hide(monkeypatch, "pykitti")
    res = CliRunner().invoke(app, ["run", "robo3d-semantickitti-c", "--source", str(root), "--out",
                                   str(tmp_path / "o"), "--workers", "1"])
    assert res.exit_code == 2, res.output
    assert "pip install 'bench-build[semantickitti]'" in res.output
    assert not list((tmp_path / "o").rglob("*.parquet"))
