"""The contract every registered stage keeps, checked for every built-in recipe (and variant) that uses it,
with that recipe's params at each of its severities, on a small frame of the recipe's own (demo) source:

* pure: the input frame's arrays, boxes, info and attrs are byte-identical after the call;
* deterministic from the key: the same example key (hence the same RNG) gives byte-identical output, a
  different key gives the same output when the stage drew nothing from its RNG and different output when it
  did (checked over the severities of one corruption: a draw may not matter at one severity);
* independent of order: each severity's output is the same on a fresh copy of the frame with the severities run
  in reverse order (a frame cache filled from an example's RNG would make bytes depend on task grouping);
* labels aligned: every per-point label column has one entry per point, ``point_tag`` is uint8, the point
  array has one column per field, every box array has one row per box;
* declared columns: the stage's declared row columns (`stage(columns=...)`) come out, and no per-point
  column appears that the input did not have or the stage does not declare (``point_tag`` aside).

A new stage is picked up as soon as a built-in recipe uses it; per-stage test files keep only what is
specific to their stage (the paper's numbers, the released code's rules, edge cases).
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench_build.manifests.recipe import Recipe, builtin_recipes, load_recipe
from bench_build.sources import open_source
from bench_build.stages.frame import Frame
from bench_build.stages.registry import all_stages, get_stage

SCENE_POINTS = 8_000  # a demo scan thinned to about this many points (every k-th, so the scan order is kept)


@dataclass(frozen=True)
class Case:
    spec: str  # recipe[:variant]
    corruption: str  # the corruption's name, or "preprocess"
    stage: str
    params: tuple[Any, ...]  # one per severity

    @property
    def id(self) -> str:
        return f"{self.spec}/{self.corruption}"


def _recipe_specs() -> list[str]:
    specs = []
    for name in sorted(builtin_recipes()):
        specs.append(name)
        specs += [f"{name}:{v}" for v in sorted(load_recipe(name).variants)]
    return specs


def _cases() -> list[Case]:
    """Every (recipe or variant, corruption) with its per-severity params; a variant's corruption that is the
    same stage with the same params on the same source as an earlier one is not repeated."""
    seen: set[tuple[str, str, str]] = set()
    out = []
    for spec in _recipe_specs():
        recipe = load_recipe(spec)
        entries = ([recipe.preprocess] if recipe.preprocess is not None else []) + list(recipe.corruptions)
        for entry in entries:
            name = "preprocess" if entry is recipe.preprocess else entry.name
            sig = (recipe.source + repr(sorted(recipe.source_options.items())), entry.stage, repr(entry.params))
            if sig in seen:
                continue
            seen.add(sig)
            out.append(Case(spec, name, entry.stage, tuple(entry.params)))
    return out


CASES = _cases()


@cache
def _recipe(spec: str) -> Recipe:
    return load_recipe(spec)


@cache
def _source_frame(spec: str) -> Frame:
    """The first demo frame of the recipe's source; a scan is thinned to about `SCENE_POINTS` points."""
    recipe = _recipe(spec)
    src = open_source(recipe, None, demo_frames=8)
    frame = src.read(src.list_frames()[0])
    if frame.boxes is None and frame.calib is None and len(frame) <= 20_000:
        return frame  # an object shape: already small
    step = max(1, len(frame) // SCENE_POINTS)
    return frame.take(np.arange(0, len(frame), step))


@cache
def _input_frame(spec: str) -> Frame:
    """What the recipe's corruptions see: the source frame after the recipe's preprocess stage, if any."""
    recipe = _recipe(spec)
    frame = _source_frame(spec)
    if recipe.preprocess is None:
        return frame
    return get_stage(recipe.preprocess.stage).apply(frame, recipe.preprocess.params[0], _rng(recipe, "clean"))


def _rng(recipe: Recipe, key: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([recipe.seed, zlib.crc32(key.encode())]))


def _snapshot(frame: Frame) -> dict[str, Any]:
    """Every array and mapping of a frame, copied: bytes with dtype and shape, so any change shows."""
    def arr(a: Any) -> tuple[str, tuple[int, ...], bytes]:
        a = np.asarray(a)
        return (str(a.dtype), a.shape, repr(a.tolist()).encode() if a.dtype == object else a.tobytes())

    snap: dict[str, Any] = {"points": arr(frame.points), "fields": tuple(frame.fields),
                            "labels": {k: arr(v) for k, v in sorted(frame.labels.items())},
                            "info": repr(sorted(frame.info.items())), "attrs": repr(sorted(frame.attrs.items()))}
    if frame.boxes is not None:
        snap["boxes"] = {k: arr(v) for k, v in sorted(vars(frame.boxes).items()) if isinstance(v, np.ndarray)}
    return snap


def _stage_input(case: Case) -> Frame:
    return _source_frame(case.spec) if case.corruption == "preprocess" else _input_frame(case.spec)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_stage_contract(case: Case) -> None:
    recipe, stage = _recipe(case.spec), get_stage(case.stage)
    frame = _stage_input(case)
    before = _snapshot(frame)
    outputs = {}
    for severity, params in enumerate(case.params, start=1):
        where = f"{case.id} severity {severity} ({case.stage})"
        key = f"{case.spec}/{frame.frame_id}/{case.corruption}/{severity}"
        rng = _rng(recipe, key)
        state = rng.bit_generator.state
        out = stage.apply(frame, params, rng)
        outputs[severity] = _snapshot(out)
        used_rng = rng.bit_generator.state != state
        assert _snapshot(frame) == before, f"{where}: mutated its input frame"

        again = stage.apply(frame, params, _rng(recipe, key))
        assert _snapshot(again) == _snapshot(out), f"{where}: the same key gave different output"
        if not used_rng:
            other = stage.apply(frame, params, _rng(recipe, key + "/other"))
            assert _snapshot(other) == _snapshot(out), f"{where}: drew nothing from its RNG yet depends on the key"

        n = len(out.points)
        assert out.points.ndim == 2 and out.points.shape[1] == len(out.fields), f"{where}: points do not match fields"
        for name, col in out.labels.items():
            assert len(col) == n, f"{where}: label {name!r} has {len(col)} entries for {n} points"
        assert out.point_tag.dtype == np.uint8, f"{where}: point_tag is {out.point_tag.dtype}"
        if out.boxes is not None:
            lengths = {k: len(v) for k, v in vars(out.boxes).items() if isinstance(v, np.ndarray)}
            assert len(set(lengths.values())) == 1, f"{where}: box arrays of different lengths {lengths}"
        missing = set(stage.columns) - set(out.labels)
        assert not missing, f"{where}: declared columns {sorted(missing)} are not in the output"
        undeclared = set(out.labels) - set(frame.labels) - set(stage.columns) - {"point_tag"}
        assert not undeclared, f"{where}: adds per-point columns {sorted(undeclared)} it does not declare"

    # independent of what ran before on the frame: a build's task groups split one frame's severities (and
    # corruptions) over tasks, each reading its own copy, so what a stage keeps in the frame's caches (`derived`,
    # `kdtree`, …) must follow from the frame alone, never from an example's RNG or parameters not in its key.
    # The severities again in reverse order on a copy with empty caches give the same bytes.
    differs = _differs_on_a_fresh_frame(stage, frame, case, outputs)
    assert differs is None, (f"{case.id} severity {differs} ({case.stage}): other output after the frame's other "
                             "severities and corruptions ran than on a fresh copy, in reverse order: a frame cache "
                             "holds something that depends on the example (its RNG or parameters)")


def _differs_on_a_fresh_frame(stage: Any, frame: Frame, case: Case, outputs: dict[int, Any]) -> int | None:
    """The first severity (from the last) whose output on a copy of ``frame`` with empty caches, severities run
    in reverse order, differs from ``outputs``; None when none does."""
    fresh = dataclasses.replace(frame)
    for severity in reversed(range(1, len(case.params) + 1)):
        key = f"{case.spec}/{frame.frame_id}/{case.corruption}/{severity}"
        if _snapshot(stage.apply(fresh, case.params[severity - 1], _rng(_recipe(case.spec), key))) != outputs[severity]:
            return severity
    return None


#: stages that draw from their RNG although their output never depends on it, and why
KEY_INDEPENDENT = {
    "wet_ground": "draws only the RANSAC samples of its ground-plane fit, which settles on the same plane",
}


@pytest.mark.parametrize("name", sorted({c.stage for c in CASES}))
def test_a_random_stage_depends_on_the_key(name: str) -> None:
    """Over every recipe and severity that uses the stage: if it draws from its RNG, some output changes with
    the example key (a draw may not matter at one severity or on one frame); a stage in `KEY_INDEPENDENT`
    draws but gives the same output for every key."""
    stage, drew, differs = get_stage(name), False, []
    for case in (c for c in CASES if c.stage == name):
        recipe, frame = _recipe(case.spec), _stage_input(case)
        for severity, params in enumerate(case.params, start=1):
            key = f"{case.spec}/{frame.frame_id}/{case.corruption}/{severity}"
            rng = _rng(recipe, key)
            state = rng.bit_generator.state
            out = _snapshot(stage.apply(frame, params, rng))
            if rng.bit_generator.state == state:
                continue
            drew = True
            if _snapshot(stage.apply(frame, params, _rng(recipe, key + "/other"))) != out:
                differs.append(f"{case.id} severity {severity}")
                if name not in KEY_INDEPENDENT:
                    return
    if name in KEY_INDEPENDENT:
        assert drew and not differs, f"{name} is listed as key-independent but {differs or 'draws nothing'}"
    else:
        assert not drew or differs, f"{name} draws from its RNG, but no recipe's output depends on the key"


def test_every_registered_stage_is_covered_by_a_builtin_recipe() -> None:
    """The contract reaches a stage through the recipes that use it: a stage no built-in recipe uses is
    checked by nothing here, so it must be added to a recipe (or a variant) first."""
    used = {c.stage for c in CASES}
    assert set(all_stages()) <= used, f"stages no built-in recipe uses: {sorted(set(all_stages()) - used)}"


def test_every_registered_stage_has_its_own_test_file() -> None:
    """The contract checks what every stage keeps; what is specific to a stage (the paper's numbers and rule, its
    identity and refusal cases) is in ``tests/stages/test_<name>.py``, which stages/README.md's first step
    creates: a stage without that file has only the contract's checks."""
    here = Path(__file__).parent
    missing = sorted(name for name in all_stages() if not (here / f"test_{name}.py").is_file())
    assert not missing, f"stages without tests/stages/test_<name>.py: {missing}"


def test_unused_params_names_fields_only() -> None:
    """A params class's optional ``unused()`` (what the dataset card leaves out) may only name its own fields;
    `Stage.unused_params` refuses any other name, so a renamed field cannot hide a stale entry."""
    for case in CASES:
        stage = get_stage(case.stage)
        for params in case.params:
            assert stage.unused_params(params) <= set(stage.param_fields()), case.id

    @dataclasses.dataclass(frozen=True)
    class Stale:
        sigma: float = 0.0

        def unused(self) -> frozenset[str]:
            return frozenset({"sigmaa"})

    stage = dataclasses.replace(get_stage(CASES[0].stage), params=Stale)
    with pytest.raises(TypeError, match="names no field: sigmaa"):
        stage.unused_params(Stale())


def test_the_order_check_catches_a_frame_cache_filled_from_the_rng() -> None:
    """A stage that keeps an RNG draw in ``frame.derived`` passes every other check (its output is the same for the
    same key on the same frame) but gives other bytes when a build groups the frame's severities differently."""

    @dataclasses.dataclass(frozen=True)
    class DropParams:
        drop_fraction: float

    def bad(frame: Frame, params: DropParams, rng: np.random.Generator) -> Frame:
        if "order" not in frame.derived:
            frame.derived["order"] = rng.permutation(len(frame))  # the example's draw, kept for the next ones
        keep = frame.derived["order"][: len(frame) - int(len(frame) * params.drop_fraction)]
        return frame.take(np.sort(keep))

    base = next(c for c in CASES if c.stage == "gaussian_rad")
    case = Case(base.spec, "drop", "drop", (DropParams(0.1), DropParams(0.3), DropParams(0.5)))
    stage = dataclasses.replace(get_stage("gaussian_rad"), name="drop", params=DropParams, fn=bad)
    frame = dataclasses.replace(_stage_input(base))
    outputs = {s: _snapshot(stage.apply(frame, p, _rng(_recipe(case.spec), f"{case.spec}/{frame.frame_id}/drop/{s}")))
               for s, p in enumerate(case.params, start=1)}
    assert _differs_on_a_fresh_frame(stage, frame, case, outputs) == 3
