"""The stage protocol and registry.

A stage is a pure function ``apply(frame, params, rng) -> Frame`` plus a frozen dataclass of
parameters. It never mutates its input, never reads files and draws all randomness from ``rng``.
Stages register themselves with `stage(...)`; the registry discovers every module under the
``stages`` package on first use, so adding a corruption means adding one file.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bench_build.stages.frame import Frame


class StageFn(Protocol):
    def __call__(self, frame: Frame, params: Any, rng: np.random.Generator) -> Frame: ...


@dataclass(frozen=True)
class Stage:
    """A registered corruption: its name, family, version, parameter type and function."""

    name: str
    family: str
    version: int
    params: type
    fn: StageFn
    summary: str
    # optional per-point columns the stage writes as labels (e.g. ("sigma", "mu")); a build's files carry
    # source ∪ stage columns
    columns: tuple[str, ...] = ()

    def apply(self, frame: Frame, params: Any, rng: np.random.Generator) -> Frame:
        if not isinstance(params, self.params):
            raise TypeError(f"stage {self.name}: expected {self.params.__name__}, got {type(params).__name__}")
        return self.fn(frame, params, rng)

    def param_fields(self) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(self.params)}

    def unused_params(self, params: Any) -> frozenset[str]:
        """The fields ``params`` sets that its mode never reads (fog's ``alpha`` when ``alpha_choices`` draws α;
        incomplete_echo's box ``classes`` in label mode): what the params class's optional ``unused()`` says.
        The dataset card leaves them out of its parameter table; the fingerprint still has every field."""
        unused = getattr(params, "unused", None)
        names = frozenset(unused()) if unused is not None else frozenset()
        unknown = names - set(self.param_fields())
        if unknown:
            raise TypeError(f"stage {self.name}: unused() names no field: {', '.join(sorted(unknown))}")
        return names


_REGISTRY: dict[str, Stage] = {}
_discovered = False


def stage(name: str, *, params: type, version: int = 1, columns: tuple[str, ...] = ()) -> Callable[[StageFn], StageFn]:
    """Register ``fn`` as stage ``name``. Bump ``version`` whenever its output for the same inputs changes:
    the version is part of every recipe fingerprint, so a resumed build never mixes old and new output.
    ``columns`` names the optional per-point columns (pipeline/format/schema.py) the stage adds to a frame's
    ``labels``, e.g. ``sigma``/``mu``: every file of a build using the stage then has them. A stage's per-example
    facts are not columns: it records them in ``info`` (``Frame.with_info``)."""
    if not (dataclasses.is_dataclass(params) and params.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise TypeError(f"stage {name}: params must be a frozen dataclass")

    def register(fn: StageFn) -> StageFn:
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"stage {name!r} is registered twice ({_REGISTRY[name].fn.__module__}, {fn.__module__})")
        # the folder below this package: stages/noise/uniform_rad.py is family "noise"
        below = fn.__module__.removeprefix(f"{__package__}.").split(".")
        family = below[0] if fn.__module__.startswith(f"{__package__}.") and len(below) >= 2 else "misc"
        summary = (sys.modules[fn.__module__].__doc__ or "").strip().split("\n")[0]
        _REGISTRY[name] = Stage(name, family, version, params, fn, summary, tuple(columns))
        return fn

    return register


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    # every module below this package's folder, under the package's own name (wherever it is installed)
    for mod in pkgutil.walk_packages([str(Path(__file__).parent)], prefix=f"{__package__}."):
        importlib.import_module(mod.name)
    _discovered = True


def get_stage(name: str) -> Stage:
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown stage {name!r}; known stages: {', '.join(sorted(_REGISTRY))}") from None


def all_stages() -> dict[str, Stage]:
    _discover()
    return dict(sorted(_REGISTRY.items()))
