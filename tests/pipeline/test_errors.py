"""One error root: every domain error is a `BenchBuildError`, the CLI catches it once, anything else is a bug."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

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
                                                          exc, code, traceback):
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
