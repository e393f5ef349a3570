"""Every command's numeric options are validated the same way: each has a lower bound, an option name means the
same bound in every command, and a value below it is refused with exit 2 before any work (no Ray start)."""

from __future__ import annotations

import typing

import pytest
import typer
from typer.testing import CliRunner

from bench_build.cli import app

#: the lower bound of every numeric option, by name (one meaning per name across commands)
BOUNDS = {"workers": 1, "jobs": 1, "frames": 1, "max_frames": 1, "frames_per_shard": 1, "groups": 1, "repeat": 1,
          "build_rounds": 1, "rounds": 1, "score_partitions": 1, "per_class": 1, "num_classes": 1, "epochs": 1,
          "points": 1,
          "permutations": 1, "max_embed": 1, "sample": 1, "max_real": 1, "patience": 1, "batch_size": 2,
          "severity": 0, "seed": 0, "wait": 0, "worker_start": 0, "width": 0.01}


def _numeric_options() -> list[tuple[str, str, typer.models.OptionInfo]]:
    out = []
    for command in app.registered_commands:
        name = command.name or command.callback.__name__.replace("_", "-")
        for param, hint in typing.get_type_hints(command.callback, include_extras=True).items():
            if typing.get_origin(hint) is not typing.Annotated:
                continue
            base, *meta = typing.get_args(hint)
            info = next((m for m in meta if isinstance(m, typer.models.OptionInfo)), None)
            flat = {a for t in (typing.get_args(base) or (base,)) for a in (typing.get_args(t) or (t,))}
            if info is not None and flat & {int, float}:
                out.append((name, param, info))
    return out


def test_every_numeric_option_has_the_bound_its_name_means():
    options = _numeric_options()
    assert len(options) > 30  # the walk finds the options (a typer change must not make this test vacuous)
    wrong = [f"{cmd} --{p.replace('_', '-')}: min {info.min}, expected {BOUNDS.get(p, 'a bound in BOUNDS')}"
             for cmd, p, info in options if p not in BOUNDS or info.min != BOUNDS[p]]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("args", [["validate", "v", "--corruption", "snow", "--real", "snow=/x", "--real-clean", "/y",
                                   "--workers", "0"],
                                  ["validate", "v", "--corruption", "snow", "--real", "snow=/x", "--real-clean", "/y",
                                   "--batch-size", "1"],
                                  ["run", "kitti-c", "--workers", "0"], ["render", "v", "--severity", "-1"],
                                  ["plan", "kitti-c", "--frames", "0"], ["score", "v", "p", "--num-classes", "0"]])
def test_a_value_below_the_bound_is_refused_with_exit_2_at_once(args):
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: Invalid value") and res.output.count("\n") == 1, res.output


@pytest.mark.parametrize("args, says", [
    (["run", "kitti-c", "--workers", "0"],
     "error: Invalid value for '--workers': Input should be greater than or equal to 1, got '0'. "
     "See `bench-build run --help`."),
    (["bench", "scale", "--workers", "x"], "Invalid value for '--workers': Input should be a valid integer, unable to "
     "parse string as an integer, got 'x'. See `bench-build bench scale --help`."),
    (["run", "kitti-c", "--recheck", "bogus"],
     "error: Invalid value for '--recheck': 'bogus' is not one of 'sha256', 'size'. See `bench-build run --help`."),
    (["score"], "error: Missing argument 'version'. See `bench-build score --help`."),
    (["runn"], "error: No such command 'runn'. Did you mean 'run'? See `bench-build --help`."),
    (["--bogus"], "error: No such option: --bogus. See `bench-build --help`."),
    (["plan", "kitti-c", "--nosuch"], "error: No such option: --nosuch"),
    (["run", "kitti-c", "extra"], "error: Got unexpected extra argument(s) (extra). See `bench-build run --help`."),
    (["run", "kitti-c", "--workers"], "error: Option '--workers' requires an argument. See `bench-build run --help`."),
])
def test_a_usage_error_is_one_line_naming_what_is_wrong_and_where_the_options_are(args, says, tmp_path,
                                                                                 monkeypatch):
    """Like every other refusal: one line (not typer's usage line, hint and framed box), the option and the value
    refused, where the options are listed; exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, args, prog_name="bench-build", terminal_width=80)
    assert res.exit_code == 2, res.output
    assert says in res.output and res.output.count("\n") == 1, res.output
    assert not list(tmp_path.iterdir())


def test_a_command_called_bare_still_shows_its_help():
    res = CliRunner().invoke(app, [], prog_name="bench-build")
    assert res.exit_code == 2 and "Usage: bench-build" in res.output and "error:" not in res.output


@pytest.mark.parametrize("option, value", [("--real-format", "xyz"), ("--real-clean-format", "kitty"),
                                           ("--real-duplicates", "maybe")])
def test_a_misspelt_validate_choice_is_refused_naming_its_option(option, value, tmp_path):
    """A value the option does not take is refused at once (exit 2, nothing written) naming the option as typed,
    not the config field it fills; the CLI's choices are the config's."""
    from bench_build.cli.data_commands import Duplicates, RealFormat
    from bench_build.validate.config import DUPLICATE_CHOICES, REAL_FORMATS

    assert tuple(RealFormat) == REAL_FORMATS and tuple(Duplicates) == DUPLICATE_CHOICES
    for d in ("v", "fog", "clear"):
        (tmp_path / d).mkdir()
    res = CliRunner().invoke(app, ["validate", str(tmp_path / "v"), "--corruption", "fog", "--real",
                                   f"fog={tmp_path / 'fog'}", "--real-clean", str(tmp_path / "clear"), option, value])
    assert res.exit_code == 2, res.output
    assert f"'{option}'" in res.output and repr(value) in res.output and "Traceback" not in res.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["clear", "fog", "v"]


def test_the_command_list_gives_each_command_its_first_paragraph_as_flowing_text():
    """`bench-build --help` lists every command with its help's first paragraph, wrapped to the terminal, not cut
    where the docstring's source lines end."""
    import inspect

    out = CliRunner().invoke(app, ["--help"], terminal_width=400, env={"COLUMNS": "400"}).output
    lines = {ln.strip("│ ").split(" ", 1)[0]: " ".join(ln.strip("│ ").split()[1:]) for ln in out.splitlines()
             if ln.startswith("│ ") and not ln.startswith("│ --")}
    for command in app.registered_commands:
        name = command.name or command.callback.__name__.replace("_", "-")
        first = " ".join(inspect.cleandoc(command.callback.__doc__).partition("\n\n")[0].split())
        assert lines.get(name) == first, (name, lines.get(name))


def test_the_command_list_is_grouped_in_the_order_a_newcomer_meets_the_commands():
    """`bench-build --help`: four panels, building first, each command in one of them, `COMMAND_ORDER` within."""
    from bench_build.cli.app import COMMAND_ORDER

    out = CliRunner().invoke(app, ["--help"], terminal_width=400, env={"COLUMNS": "400"}).output
    panels: list[tuple[str, list[str]]] = []
    for ln in out.splitlines():
        if ln.startswith("╭─ ") and "Options" not in ln:
            panels.append((ln.strip("╭─ ").split(" ─")[0].strip(), []))
        elif ln.startswith("│ ") and not ln.startswith("│ --") and panels and ln.strip("│ "):
            panels[-1][1].append(ln.strip("│ ").split(" ", 1)[0])
    assert [p for p, _ in panels] == ["Build", "Use a built version", "Publish and fetch", "Demo data and this machine"]
    assert panels[0][1] == ["run", "status", "list", "plan"]
    listed = [c for _, cs in panels for c in cs]
    assert listed == list(COMMAND_ORDER)  # every command once, none outside a panel


def test_the_run_summary_has_a_row_per_corruption_and_says_clean_only_when_there_is_no_corruption(capsys):
    from bench_build.cli.build_commands import _summary_table

    def manifest(parts):
        return {"dataset": "d", "version": "1", "counts": {"by_partition": {
            k: {"examples": 2, "bytes": 1e6, "seconds": 0.5} for k in parts}}}

    def rows() -> list[list[str]]:
        return [[c.strip() for c in ln.split("│")[1:-1]] for ln in capsys.readouterr().err.splitlines()
                if ln.startswith("│")]

    _summary_table(manifest(["fog/1", "fog/2", "fog/3", "clean/0", "beam_del/2", "beam_del/4"]))
    assert rows() == [["clean", "0", "2", "1.0", "0.5"], ["beam_del", "2, 4", "4", "2.0", "1.0"],
                      ["fog", "1–3", "6", "3.0", "1.5"], ["2 corruptions + clean", "6 partitions", "12", "6.0", "3.0"]]
    recipe_order = {**manifest(["beam_del/2", "fog/1", "clean/0"]),
                    "recipe": {"corruptions": [{"name": "fog"}, {"name": "beam_del"}]}}
    _summary_table(recipe_order)  # the recipe's order (the card's), not the alphabet's
    assert [r[0] for r in rows()][:3] == ["clean", "fog", "beam_del"]
    _summary_table(manifest(["clean/0"]))  # 3dos: every example is a clean one
    assert rows()[-1] == ["clean only", "1 partition", "2", "1.0", "0.5"]


def test_more_workers_than_cpus_is_said_once_before_the_build(small_recipe, tmp_path):
    """`--workers 64` on a smaller machine still runs (same bytes), with a note of what it costs."""
    import os

    cpus = os.cpu_count() or 1
    res = CliRunner().invoke(app, ["run", str(small_recipe), "--source", str(tmp_path / "missing"),
                                   "--workers", str(4 * cpus), "--out", str(tmp_path / "o"), "--no-progress"],
                             terminal_width=400)
    assert res.exit_code == 2  # the missing source, refused before Ray starts
    assert res.output.count("note:") == 1
    assert (f"--workers {4 * cpus} on this machine's {cpus} CPUs: the worker processes share them, so the build is "
            f"no faster than with --workers {cpus}") in " ".join(res.output.split())
    res = CliRunner().invoke(app, ["run", str(small_recipe), "--source", str(tmp_path / "missing"),
                                   "--workers", str(cpus), "--out", str(tmp_path / "o"), "--no-progress"])
    assert res.exit_code == 2 and "note:" not in res.output
