"""A path argument of the wrong kind (a file where a folder goes, a file that is not what the option reads) is
refused before any work: one line naming the path, exit 2, nothing written, no traceback. Demo data is never
written over a folder that holds something else."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench_build.cli import app
from bench_build.errors import UsageError
from bench_build.sources.demo.cache import DEMO_MARKER

runner = CliRunner()


def _refused(args: list[str], *names: str) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception  # no traceback
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    for name in names:
        assert name in lines[0], lines[0]
    return lines[0]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def a_file(tmp_path) -> Path:
    f = tmp_path / "notes.txt"
    f.write_text("not a folder\n")
    return f


@pytest.mark.parametrize("args", [
    ["status", "kitti-c", "--out", "{f}"],
    ["demo-data", "{f}"],
    ["demo-objects", "{f}/sub"],
    ["render", "{v}", "--out", "{f}"],
    ["render", "{v}", "--out", "{f}/pngs"],
    ["publish", "{v}", "--to", "{f}"],
    ["score", "{v}", "{f}", "--out", "{f}/scores"],
    ["score", "{v}", "{f}", "--out", "{d}"],
    ["repro-check", "--out", "{f}/battery.json"],
    ["repro-check", "--compare", "{f}"],
    ["repro-check", "--compare", "{f}.missing"],
    ["repro-check", "--out", "{d}", "--recipes", "modelnet-c"],  # refused before the battery, not after it
    ["plan", "kitti-c", "--costs", "{f}"],
    ["run", "kitti-c", "--source", "{f}", "--out", "{f}.out"],
])
def test_a_file_where_a_folder_or_another_file_goes_is_refused_naming_it(args, a_file, mini_build, tmp_path):
    folder = tmp_path / "results"  # an existing folder given where a file prefix goes
    folder.mkdir()
    before = _tree(tmp_path)
    argv = [a.format(f=a_file, v=mini_build, d=folder) for a in args]
    _refused(argv, str(folder) if "{d}" in args else str(a_file))
    assert _tree(tmp_path) == before  # nothing written
    assert a_file.read_text() == "not a folder\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: a folder where no file can be made")
@pytest.mark.parametrize(("args", "said"), [
    (["run", "kitti-c", "--max-frames", "1", "--out", "/proc/bench-build-x"], "--out /proc/bench-build-x"),
    (["render", "{v}", "--out", "/proc/bench-build-x"], "--out /proc/bench-build-x"),
    (["publish", "{v}", "--to", "/proc/bench-build-x"], "--to, /proc/bench-build-x/"),
    (["score", "{v}", "{f}", "--out", "/proc/bench-build-x/s"], "the folder of --out /proc/bench-build-x"),
    (["repro-check", "--recipes", "modelnet-c", "--out", "/proc/bench-build-x/b.json"],
     "the folder of --out /proc/bench-build-x"),
    (["s3-local", "--dir", "/proc/bench-build-x"], "--dir /proc/bench-build-x"),  # was a traceback too
])
def test_an_out_where_nothing_can_be_made_is_refused_before_the_work(args, said, a_file, mini_build):
    """/proc is a folder, but mkdir in it fails (as root too: permission bits say nothing there), as on a read-only
    disk: `run --out /proc/x` said "No such file or directory: /proc/x" with exit 1 once the source was read, and
    `publish --to` and `repro-check --out` (after its minutes of battery) ended in a traceback. Each is refused
    first, in one line naming the option and the folder, exit 2."""
    argv = [a.format(f=a_file, v=mini_build) for a in args]
    line = _refused(argv, said, "cannot create a folder in /proc (")
    assert line.endswith("give a directory on a writable disk"), line


def test_a_misspelt_encoding_is_a_usage_error_before_anything_is_written(tmp_path):
    res = runner.invoke(app, ["run", "kitti-c", "--encoding", "compakt", "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "compakt" in res.output
    assert not (tmp_path / "out").exists()  # no ledger that would refuse the corrected command


def test_run_build_refuses_an_unknown_encoding_before_the_ledger(tmp_path):
    from bench_build.build.run import run_build

    with pytest.raises(ValueError, match="encoding must be one of full, compact, got 'zip'"):
        run_build("kitti-c", out=tmp_path / "out", encoding="zip", progress=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["out", "source", "reuse"])
def test_run_build_refuses_an_empty_string_as_a_path(name, tmp_path, monkeypatch):
    """The command line refuses '' for a path; the Python API took ``out=""`` as ``bench-out`` (a build into the
    working directory's bench-out), ``source=""`` and ``reuse=""`` as the working directory."""
    from bench_build.build.run import run_build

    monkeypatch.chdir(tmp_path)
    kwargs = {"out": tmp_path / "out", name: ""}
    with pytest.raises(UsageError, match=rf"^{name} is an empty string, which would mean the working directory "
                                         rf"\({re.escape(str(tmp_path))}\); give a path"):
        run_build("kitti-c", progress=False, max_frames=1, **kwargs)
    assert _tree(tmp_path) == []  # nothing written


def test_a_recipe_that_is_a_folder_or_names_an_unknown_source_names_the_file(tmp_path, small_recipe):
    (tmp_path / "recipes.toml").mkdir()
    _refused(["plan", str(tmp_path / "recipes.toml")], "recipes.toml", "is a directory")
    bad = tmp_path / "mine.toml"
    bad.write_text(small_recipe.read_text().replace('source = "kitti"', 'source = "kitty"'))
    assert bad.read_text() != small_recipe.read_text()
    _refused(["plan", str(bad)], str(bad), "'kitty'")


def test_demo_data_is_not_written_over_a_folder_that_holds_something_else(tmp_path):
    real = tmp_path / "kitti"
    (real / "training" / "velodyne").mkdir(parents=True)
    scan = real / "training" / "velodyne" / "000000.bin"
    scan.write_bytes(b"\x00" * 16)
    for command in ("demo-data", "demo-objects"):
        _refused([command, str(real)], str(real), DEMO_MARKER)
    assert _tree(real) == ["training", "training/velodyne", "training/velodyne/000000.bin"]
    assert scan.read_bytes() == b"\x00" * 16
    # a new folder, an empty one, and demo data written before are fine
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (tmp_path / "new", empty, tmp_path / "new"):
        res = runner.invoke(app, ["demo-data", str(target), "--frames", "1"])
        assert res.exit_code == 0, res.output
        assert "wrote 1 frame to" in res.output and (target / DEMO_MARKER).is_file()


def test_a_path_error_deep_in_a_command_is_one_line_naming_the_path(tmp_path):
    """What the commands' own checks do not catch first: one line, exit 1 (work may have begun), not a
    traceback."""
    import typer

    from bench_build.cli import Commands

    sub = typer.Typer(cls=Commands)
    target = tmp_path / "f"
    target.write_text("x")

    @sub.command()
    def boom() -> None:
        os.mkdir(target)

    @sub.command()
    def fine() -> None:
        pass

    res = runner.invoke(sub, ["boom"])
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [f"error: {target}: File exists"]


def test_a_nuscenes_table_version_for_another_source_is_refused_saying_so(tmp_path):
    line = _refused(["run", "kitti-c", "--version", "v1.0-mini", "--out", str(tmp_path / "o")], "--version v1.0-mini")
    assert "only nuScenes sources have table versions; kitti-c reads kitti" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", [["score", "{v}", "preds"], ["render", "{v}"], ["export", "{v}", "OUT", "--all"],
                                     ["validate", "{v}", "--corruption", "snow", "--real", "r", "--real-clean", "c"]])
def test_a_url_where_a_local_version_goes_says_to_pull_it(command):
    """score, render, export and validate read a local folder: `s3://b/root/kitti-c/1.0.0` became the folder
    `s3:/b/root/kitti-c/1.0.0`, "no such directory"."""
    url = "s3://b/root/kitti-c/1.0.0"
    res = CliRunner().invoke(app, [a.format(v=url) for a in command])
    assert res.exit_code == 2, res.output
    line = " ".join(res.output.split())
    assert f"reads a version from a local folder, not {url}" in line
    assert "bench-build pull s3://b/root/kitti-c --version 1.0.0 --out DIR" in line and "DIR/kitti-c/1.0.0" in line


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_demo_data_written_again_holds_only_the_new_frames(tmp_path):
    """A second `demo-data` into the same folder with fewer frames or another seed rewrote frame 0 and left
    frames 1… of the first run beside it: "wrote 1 frame", and a build from it read 3 frames of two seeds. Files
    the demo writer does not make are kept."""
    from bench_build.sources.demo.kitti import write_demo_dataset
    from bench_build.sources.kitti import KittiSource

    out = tmp_path / "demo"
    assert runner.invoke(app, ["demo-data", str(out), "--frames", "2"]).exit_code == 0
    (out / "notes.txt").write_text("mine\n")
    res = runner.invoke(app, ["demo-data", str(out), "--frames", "1", "--seed", "5"])
    assert res.exit_code == 0 and "wrote 1 frame to" in res.output, res.output
    assert KittiSource(out).list_frames() == ["000000"]
    expected = _files(write_demo_dataset(tmp_path / "ref", 1, seed=5))
    assert _files(out) == {**expected, "notes.txt": b"mine\n"}  # no staging folder left either


@pytest.mark.parametrize("command", ["demo-data", "demo-objects"])
def test_an_interrupted_demo_write_leaves_the_folder_as_it_was(command, tmp_path, monkeypatch):
    """Ctrl-C halfway left half a dataset: in a new folder, frames without the marker (a build from it read
    them, and the next `demo-data` refused the folder as foreign); over demo data, some frames of the new seed
    among the old ones, marker and all."""
    import bench_build.sources.demo.kitti as kitti
    import bench_build.sources.demo.objects as objects

    def interrupted(real, after: int):
        calls = []

        def write(*args, **kwargs):
            calls.append(1)
            if len(calls) > after:
                raise KeyboardInterrupt
            return real(*args, **kwargs)
        return write

    args = {"demo-data": ["--frames", "2", "--seed", "5"], "demo-objects": ["--per-class", "1"]}[command]
    new = tmp_path / "new" / "demo"
    old = tmp_path / "old"
    assert runner.invoke(app, [command, str(old), *args[:1], "1"]).exit_code == 0
    before = _files(old)
    if command == "demo-data":
        monkeypatch.setattr(kitti, "write_frame", interrupted(kitti.write_frame, 1))
    else:
        monkeypatch.setattr(objects, "write_scanobjectnn", interrupted(objects.write_scanobjectnn, 0))
    for target in (new, old):
        res = runner.invoke(app, [command, str(target), *args])
        assert res.exit_code == 130 and isinstance(res.exception, SystemExit), res.output  # "Aborted!"
    assert not (tmp_path / "new").exists()  # a folder the run made is gone, its parent too
    assert _files(old) == before
    monkeypatch.undo()
    assert runner.invoke(app, [command, str(old), *args]).exit_code == 0  # and the next run takes it


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_demo_data_swaps_its_folders_back_to_back_and_deletes_the_old_ones_after(tmp_path, monkeypatch, exchange):
    """Written again, the folders were swapped one by one, each old one deleted before the next swap (hundreds of
    MB): a kill in that window left a folder of two seeds' frames with no marker. Every swap now comes before any
    deletion, and the marker is back before the old folders go."""
    from bench_build.sources.demo import cache
    from bench_build.storage import files

    out = tmp_path / "demo"
    assert runner.invoke(app, ["demo-data", str(out), "--frames", "1"]).exit_code == 0
    if not exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    events, swap, rmtree = [], files.replace_dir, cache.shutil.rmtree

    def replace_dir(staged, path, **kw):
        events.append(("swap", path.name))
        return swap(staged, path, **kw)

    def removed(path, *a, **kw):
        events.append(("delete", (out / cache.DEMO_MARKER).is_file()))
        return rmtree(path, *a, **kw)

    monkeypatch.setattr(cache, "replace_dir", replace_dir)
    monkeypatch.setattr(cache.shutil, "rmtree", removed)
    assert runner.invoke(app, ["demo-data", str(out), "--frames", "1", "--seed", "5"]).exit_code == 0
    monkeypatch.undo()
    assert [e for e in events if e[0] == "swap"] == [("swap", "ImageSets"), ("swap", "training")]
    first_delete = next(i for i, e in enumerate(events) if e[0] == "delete")
    assert first_delete == 2 and all(marker for kind, marker in events[2:] if kind == "delete"), events
    assert sorted(p.name for p in out.iterdir()) == ["BENCH_BUILD_DEMO", "ImageSets", "training"]
    from bench_build.sources.demo.kitti import write_demo_dataset
    assert _files(out) == _files(write_demo_dataset(tmp_path / "ref", 1, seed=5))

@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
@pytest.mark.parametrize("swaps", [0, 1])
def test_demo_data_stopped_among_its_swaps_puts_the_old_folders_back(tmp_path, monkeypatch, exchange, swaps):
    """Ctrl-C after the marker went and some folders were swapped in left one seed's training/ beside the other's
    ImageSets/, with no marker. The swaps made are undone, the marker put back: the folder is as it was."""
    from bench_build.sources.demo import cache
    from bench_build.storage import files

    out = tmp_path / "demo"
    assert runner.invoke(app, ["demo-data", str(out), "--frames", "2"]).exit_code == 0
    before = _files(out)
    if not exchange:
        monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    swap, calls = files.replace_dir, []

    def stopped(staged, path, **kw):
        calls.append(path.name)
        if len(calls) == swaps + 1:  # once: the undo swaps through it too
            raise KeyboardInterrupt
        return swap(staged, path, **kw)

    monkeypatch.setattr(cache, "replace_dir", stopped)
    res = runner.invoke(app, ["demo-data", str(out), "--frames", "1", "--seed", "5"])
    assert res.exit_code == 130, res.output
    monkeypatch.setattr(cache, "replace_dir", swap)
    assert _files(out) == before and sorted(p.name for p in out.iterdir()) == ["BENCH_BUILD_DEMO", "ImageSets",
                                                                               "training"]

def test_demo_data_takes_a_folder_holding_only_a_killed_runs_staging_and_removes_it(tmp_path):
    """A run killed outright (no Ctrl-C handling) leaves its staging folder in OUT; that is no foreign data."""
    from bench_build.storage import host_name

    out = tmp_path / "demo"
    left = out / f".demo.{host_name()}~{2**22 + 12345}.x1y2.tmp"  # above Linux's pid limit: a dead process
    (left / "training").mkdir(parents=True)
    res = runner.invoke(app, ["demo-data", str(out), "--frames", "1"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["BENCH_BUILD_DEMO", "ImageSets", "training"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc, where nobody can make a file")
@pytest.mark.parametrize("args", [["demo-data", "/proc/self/demo", "--frames", "1"], ["demo-objects", "/proc/demo"],
                                  ["bench", "stages", "--no-objects", "--costs-out", "/proc/c.json"],
                                  ["bench", "scale", "--json-out", "/proc/r.json"]])
def test_an_output_nobody_can_write_is_refused_before_any_work(args, monkeypatch):
    """`demo-data /proc/x` ended in a FileNotFoundError traceback; `bench … --costs-out /proc/c.json` passed its
    `os.access` check as root (mode bits) and failed only after the minutes of measuring."""
    import bench_build.bench.scale as scale
    import bench_build.bench.stages as stages

    def measured(*a, **k):
        raise AssertionError("measured before refusing the output")

    monkeypatch.setattr(stages, "run_bench", measured)
    monkeypatch.setattr(scale, "run_scale", measured)
    line = _refused(args, args[-1] if args[0] == "bench" else args[1])
    assert "cannot " in line


def test_run_whose_version_directory_cannot_be_made_is_refused_before_the_ledger(small_recipe, demo_kitti, tmp_path,
                                                                                 monkeypatch):
    """The pre-flight's probe passes where the output root can be written, but making the version directory and its
    lock can still fail (a disk that went read-only, a quota): that was `error: <OS words>` with exit 1, which says
    work had begun; nothing had. One line naming --out and the version directory, exit 2."""
    import errno

    from bench_build.storage import LocalStore

    def read_only(self, purpose, *, force=False):
        raise OSError(errno.EROFS, "Read-only file system", str(self.root / ".bench-build.lock"))

    monkeypatch.setattr(LocalStore, "writer_lock", read_only)
    out = tmp_path / "out"
    line = _refused(["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out), "--max-frames", "1",
                     "--workers", "1", "--no-progress"], f"--out {out}", "cannot write", "nothing was written",
                    "Read-only file system")
    assert "mini-c/" in line  # the version directory it could not make
    assert not (out / "mini-c" / "0.1.0" / "_ledger").exists()


@pytest.mark.parametrize("out", ["{v}", "{v}/data", "{v}/..", "{v}/renders/new"])
def test_run_into_a_version_or_a_benchmarks_folder_is_refused(out, mini_build, small_recipe, demo_kitti):
    """`run --out OUT/<benchmark>/<version>` (the version's path where its output root goes) built a second version
    inside the first: `verify` of that one then failed on 100+ files its manifest does not list, and glob readers
    read both versions' rows. Refused naming --out and the output root meant, before anything is written."""
    before = _tree(Path(mini_build).parent)
    given = out.format(v=mini_build)
    line = _refused(["run", str(small_recipe), "--source", str(demo_kitti), "--out", given, "--max-frames", "1",
                     "--workers", "1", "--no-progress"], f"--out {given}", "OUT/<benchmark>/<version>")
    assert line.endswith(f"--out {Path(mini_build).parent.parent}"), line
    assert _tree(Path(mini_build).parent) == before  # nothing written


#: arguments and options of type str that name no path: names, choices, addresses and URLs of services
NOT_PATHS = {"run benchmark", "status benchmark", "plan benchmark", "warm benchmarks",  # "": "an empty benchmark name"
             "bench recipe", "bench stages recipe", "run address", "validate address", "run split", "plan split",
             "export split", "run version", "pull version", "export corruption", "render corruption",
             "pull corruption", "validate corruption", "export layout", "render frame", "render color_by",
             "score metric", "s3-local bucket", "repro-check recipes"}


def _path_parameters() -> list[tuple[list[str], str, str, list[str]]]:
    """(command words, parameter name, option or argument, the command's other required arguments) of every str
    or Path parameter of every command, `bench`'s included, but those in `NOT_PATHS` and the AWS options."""
    import typer

    found = []

    def walk(cmd, words):
        for p in cmd.params:
            annotation = getattr(getattr(p, "type_descriptor", None), "annotation", None)
            names = {str, Path, str | None, Path | None, list[str], list[str] | None}
            if annotation not in names or p.name in ("endpoint_url", "profile") or \
                    " ".join([*words, p.name]) in NOT_PATHS:
                continue
            required = [q.name for q in cmd.params if q.param_type_name == "argument" and q.required]
            found.append((words, p.name, p.param_type_name, required))
        if hasattr(cmd, "list_commands"):
            ctx = typer.Context(cmd)
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), [*words, name])

    walk(typer.main.get_command(app), [])
    return found


def _empty_args(words, name, kind, required) -> tuple[list[str], str]:
    import typer

    cmd = typer.main.get_command(app)
    for w in words:
        cmd = cmd.get_command(typer.Context(cmd), w)
    param = next(p for p in cmd.params if p.name == name)
    if kind == "argument":
        return [*words, *("" if a == name else "x" for a in required)], name.upper()
    flag = next(o for o in param.opts if o.startswith("--"))
    return [*words, flag, "", *("x" for _ in required)], flag


PATH_PARAMETERS = _path_parameters()


@pytest.mark.parametrize(("words", "name", "kind", "required"), PATH_PARAMETERS,
                         ids=[" ".join([*w, n]) for w, n, _, _ in PATH_PARAMETERS])
def test_an_empty_string_where_a_path_goes_is_refused_naming_the_option(words, name, kind, required, tmp_path,
                                                                        monkeypatch):
    """An empty string (an unset shell variable: `--out "$OUT"`) was read as the working directory: `render
    --out ''` wrote its PNGs there, `demo-data ''` its dataset, `publish --to ''` a copy of the version, `run
    --source ''` built from it and `status --out ''` looked for builds there. Every argument and option naming a
    path or URL refuses it, in one line naming the command and the option, exit 2, before the command runs."""
    monkeypatch.chdir(tmp_path)
    args, flag = _empty_args(words, name, kind, required)
    line = _refused(args, f"{' '.join(words)}: {flag} is an empty string, which would mean the working directory "
                          f"({tmp_path}); give a path (. for the working directory)")
    assert line.startswith("error: ")
    assert _tree(tmp_path) == []  # nothing written


def test_every_command_that_takes_a_path_is_checked_for_an_empty_one():
    """The table above is found from the commands themselves: a new path option is checked without a new case."""
    commands = {" ".join(w) for w, _, _, _ in PATH_PARAMETERS}
    assert {"run", "status", "plan", "verify", "export", "score", "render", "validate", "diff", "publish",
            "versions", "pull", "s3-local", "demo-data", "demo-objects", "repro-check", "bench", "bench stages",
            "bench scale", "bench loaders"} == commands


def test_a_dot_still_means_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["demo-data", ".", "--frames", "1"])
    assert res.exit_code == 0 and "wrote 1 frame to ." in res.output, res.output
    assert (tmp_path / DEMO_MARKER).is_file()


@pytest.mark.parametrize("command", ["run", "validate"])
def test_an_address_nobody_answers_on_is_refused_before_anything_is_written(command, tmp_path, mini_build):
    """`run --address 127.0.0.1:1` (a mistyped port, a head not started) wrote its ledger, then Ray retried the
    address every ≈ 36 s without end (`validate` the same, after its pre-flight). The address is tried once
    first: one line with the OS's words, exit 2, nothing written."""
    import socket

    with socket.socket() as s:  # a port nobody listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    (tmp_path / "real").mkdir()
    (tmp_path / "clean").mkdir()
    args = (["run", "kitti-c", "--max-frames", "1", "--out", str(out)] if command == "run" else
            ["validate", str(mini_build), "--corruption", "background", "--real", str(tmp_path / "real"),
             "--real-clean", str(tmp_path / "clean")])
    before = _tree(Path(mini_build))
    line = _refused([*args, "--address", f"127.0.0.1:{port}"],
                    f"--address 127.0.0.1:{port}: no Ray cluster answers there (", "ray start --head")
    assert "refused" in line.lower(), line
    assert not out.exists() and _tree(Path(mini_build)) == before
