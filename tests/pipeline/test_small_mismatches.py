"""Small contract mismatches a newcomer met on the first day, each pinned."""

from __future__ import annotations

from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.manifests.recipe import builtin_recipes, load_recipe


def test_list_counts_with_the_right_plural_and_gives_every_paper_benchmark_its_full_size():
    res = CliRunner().invoke(app, ["list"])
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert " 1 corruptions " not in out
    assert "kitti-c 1.0.0: source kitti (training split), 25 corruptions" in out
    assert "full size: 7,481 frames × 25 × 5 = 935,125 corrupted examples" in out
    assert "robo3d-kitti-c 1.1.0: source kitti (val split)" in out
    # an object benchmark counts shapes, as `plan` and `bench stages` do
    assert "modelnet-c 1.0.0: source modelnet40 (test split), 7 corruptions × severities 0–5; per shape 42" in out
    assert "full size: 2,468 shapes × 7 × 5 = 86,380 corrupted examples (88,848 stored with the clean shapes)" in out
    assert "(942,606 stored with the clean scans)" in out
    for name in builtin_recipes():
        r = load_recipe(name)
        if r.corruptions:
            assert r.paper_frames, f"{name} has no paper_frames, so `list` gives no full size"


def test_verify_on_a_missing_directory_says_so(tmp_path):
    res = CliRunner().invoke(app, ["verify", str(tmp_path / "nope")])
    assert res.exit_code == 2
    assert "no such directory" in res.output and "is the build finished" not in res.output


def test_progress_log_lines_never_say_eta_nan(capsys):
    from bench_build.build.progress import BuildProgress

    bar = BuildProgress(total=10, enabled=True)
    bar.advance(0)  # the first call: what an earlier run had done (here nothing)
    bar._last_log = 0
    bar.advance(0)
    err = capsys.readouterr().err
    assert "nan" not in err and "ETA after the first task" in err
    resumed = BuildProgress(total=10, enabled=True)
    resumed.advance(10)  # an earlier run built everything: no rate, no ETA to speak of
    assert capsys.readouterr().err == "[bench-build] 10/10 examples, all built by an earlier run\n"
    # a one-task build: this run's examples arrive in one update (no rate yet); they are not an earlier run's
    fresh = BuildProgress(total=10, enabled=True)
    fresh.advance(0)
    fresh.update_to(10)
    assert capsys.readouterr().err.splitlines()[-1] == "[bench-build] 10/10 examples, all built"
    partly = BuildProgress(total=10, enabled=True)
    partly.advance(4)  # an earlier run built 4
    partly.update_to(10)
    assert capsys.readouterr().err.splitlines()[-1] == "[bench-build] 10/10 examples, all built (4 by an earlier run)"


def test_the_eta_leaves_the_start_up_out(capsys, monkeypatch):
    """The demo build's first progress line read "2/1008 examples, 0.2 ex/s, ETA 4587 s" for a build that took 23 s:
    the rate counted Ray's start and the workers' warm-up. It now counts from this run's first examples."""
    import bench_build.build.progress as progress

    now = [100.0]
    monkeypatch.setattr(progress, "time", type("Clock", (), {"time": staticmethod(lambda: now[0])}))
    bar = progress.BuildProgress(total=1008, enabled=True)
    bar.advance(0)  # nothing from an earlier run
    now[0] += 10.0  # Ray's start, the workers' start, the first frame's caches
    bar._last_log = 0
    bar.update_to(2)
    now[0] += 5.0
    bar._last_log = 0
    bar.update_to(398)
    lines = capsys.readouterr().err.splitlines()
    # no "0.0 ex/s" before a rate can be told (the modelnet-c demo build said "592/2880 examples, 0.0 ex/s")
    assert lines == ["[bench-build] 0/1008 examples, ETA after the first task",
                     "[bench-build] 2/1008 examples, rate and ETA at the next update (start-up left out)",
                     "[bench-build] 398/1008 examples, 79.2 ex/s, ETA 8 s"]
    now[0] += 8.0
    bar.update_to(1008)
    assert capsys.readouterr().err == "[bench-build] 1008/1008 examples, all built, 77.4 ex/s\n"


def test_a_local_run_prints_no_ray_token_notice_and_keeps_token_auth(demo_kitti, small_recipe, tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"} | {"HOME": str(tmp_path / "home"),
                                                                          "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    res = subprocess.run([sys.executable, "-m", "bench_build.cli", "run", str(small_recipe),
                          "--source", str(demo_kitti),
                          "--out", str(tmp_path / "o"), "--workers", "1", "--max-frames", "1", "--no-progress"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "Token authentication" not in res.stderr
    card = next((tmp_path / "o").glob("*/*/README.md")).read_text()  # one frame, not "1 frames"
    assert "(1 frame × 4 corruptions × 6 severities, severity 0 = clean)" in card and "1 frames" not in card
    assert (tmp_path / "home" / ".ray" / "auth_token").is_file()  # the local cluster still required a token


def _output_root(tmp_path):
    """OUT/kitti-c/1.0.0 (a finished version: its manifest), OUT/kitti-c/1.1.0 (an unfinished one: its ledger)."""
    out = tmp_path / "bench-out"
    (out / "kitti-c" / "1.0.0").mkdir(parents=True)
    (out / "kitti-c" / "1.0.0" / "manifest.json").write_text("{}")
    (out / "kitti-c" / "1.1.0" / "_ledger").mkdir(parents=True)
    return out


def test_status_given_an_output_folder_says_the_name_and_out_to_pass(tmp_path, monkeypatch):
    out = _output_root(tmp_path)
    monkeypatch.chdir(tmp_path)
    for given in ("bench-out/kitti-c/1.0.0", "bench-out/kitti-c/1.1.0", "bench-out/kitti-c"):
        res = CliRunner().invoke(app, ["status", given])
        assert res.exit_code == 2, res.output
        line = " ".join(res.output.split())
        assert "is a directory, not a recipe" not in line
        assert "`status` takes the benchmark name (or its recipe file) and --out: bench-build status kitti-c " \
               "--out bench-out" in line
    monkeypatch.chdir(out / "kitti-c" / "1.0.0")  # "." read resolved: the parents are named in full
    res = CliRunner().invoke(app, ["status", "."])
    assert f"bench-build status kitti-c --out {out}" in " ".join(res.output.split())
    monkeypatch.chdir(out)  # a built-in's name is never a folder of that name
    res = CliRunner().invoke(app, ["status", "kitti-c", "--out", "."])
    assert "no build here" in res.output and "takes the benchmark name" not in res.output
    (tmp_path / "other").mkdir()  # some other folder: still not a recipe file
    res = CliRunner().invoke(app, ["status", str(tmp_path / "other")])
    assert res.exit_code == 2 and "is a directory, not a recipe .toml file" in res.output


def test_an_output_root_given_as_the_benchmark_names_the_benchmark_and_out(tmp_path, monkeypatch):
    """`status bench-out` (the --out root itself) said the recipe file "is a directory"; `plan` of any output
    folder did too, and it has no --out to name."""
    _output_root(tmp_path)
    (tmp_path / "bench-out" / "modelnet-c" / "1.0.0").mkdir(parents=True)
    (tmp_path / "bench-out" / "modelnet-c" / "1.0.0" / "manifest.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    for command in ("status", "run"):
        res = CliRunner().invoke(app, [command, "bench-out"])
        assert res.exit_code == 2, res.output
        assert " ".join(res.output.split()) == (
            f"error: bench-out is an output root (builds of kitti-c, modelnet-c): `{command}` takes the benchmark "
            f"name (or its recipe file) and --out: bench-build {command} kitti-c --out bench-out"), res.output
    for given in ("bench-out", "bench-out/kitti-c", "bench-out/kitti-c/1.0.0"):
        res = CliRunner().invoke(app, ["plan", given])
        line = " ".join(res.output.split())
        assert res.exit_code == 2 and line.endswith(
            "`plan` takes the benchmark name (or its recipe file): bench-build plan kitti-c"), res.output


def test_run_given_an_output_folder_says_the_name_and_out_to_pass(tmp_path, monkeypatch):
    # `run bench-out/kitti-c/1.0.0` (to resume it) said the recipe file "is a directory"; refused before anything
    # is written, naming the command meant
    out = _output_root(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for given in ("bench-out/kitti-c/1.0.0", "bench-out/kitti-c/1.1.0", "bench-out/kitti-c"):
        res = CliRunner().invoke(app, ["run", given, "--out", str(tmp_path / "o"), "--no-progress"])
        assert res.exit_code == 2, res.output
        assert "`run` takes the benchmark name (or its recipe file) and --out: bench-build run kitti-c --out " \
               "bench-out" in " ".join(res.output.split())
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written
    assert out.is_dir()


def test_a_folder_that_is_no_version_is_said_as_what_it_is(tmp_path):
    out = _output_root(tmp_path)
    bench, done, unfinished = out / "kitti-c", out / "kitti-c" / "1.0.0", out / "kitti-c" / "1.1.0"
    (tmp_path / "empty").mkdir()
    cases = [(bench, f"{bench}: this is kitti-c's folder, not a version; versions: 1.0.0, 1.1.0 — pass one of "
                     f"them, e.g. {unfinished}"),
             (unfinished, f"{unfinished / 'manifest.json'}: no manifest (is the build finished?"),
             (tmp_path / "empty", f"{tmp_path / 'empty'}: not a version folder (no manifest.json;"),
             (done / "manifest.json", f"{done / 'manifest.json'}: is a file, not a version folder, so no manifest "
                                      f"(a version is the folder OUT/<benchmark>/<version>: pass {done})")]
    for where, says in cases:
        for args in (["export", str(where), str(tmp_path / "x"), "--corruption", "clean", "--severity", "0"],
                     ["render", str(where), "--out", str(tmp_path / "r")], ["verify", str(where)],
                     ["diff", str(where), str(done)]):
            res = CliRunner().invoke(app, args)
            line = " ".join(res.output.split())
            assert res.exit_code == 2 and says in line, (args, line)
            assert "manifest.json/manifest.json" not in line
            if where != unfinished:
                assert "is the build finished" not in line, (args, line)
    assert not (tmp_path / "x").exists() and not (tmp_path / "r").exists()
    (unfinished / "_ledger").rmdir()  # one version: its path is the one to pass
    res = CliRunner().invoke(app, ["verify", str(bench)])
    assert f"versions: 1.0.0 — pass {done}" in " ".join(res.output.split())
