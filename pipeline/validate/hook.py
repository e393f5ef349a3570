"""The `run` hook: validate a sample of the build when its recipe has a ``[validate]`` table."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bench_build.sources.base import SourceError
from bench_build.validate.config import ValidationError, configs_from_recipe
from bench_build.validate.run import run_validation


def _say(msg: str) -> None:
    print(f"[validate] {msg}", file=sys.stderr, flush=True)


def validate_after_build(version_dir: str | Path, recipe: Any, *, workers: int | None = None,
                         address: str | None = None) -> dict[str, dict[str, Any]]:
    """Run every validation of ``recipe.validate`` whose real data exists; skip the others with a message.

    Never fails the build (it is complete when this runs): problems are reported per corruption as
    ``{"status": "skipped" | "failed", "reason": ...}``; done ones as ``{"status": "done", ...}``.
    """

    results: dict[str, dict[str, Any]] = {}
    if not isinstance(version_dir, Path) and "://" in str(version_dir):
        for c in recipe.validate["corruptions"]:
            results[c] = {"status": "skipped", "reason": "validation needs a local version directory"}
            _say(f"skipped {c}: {results[c]['reason']}")
        return results
    try:
        configs = configs_from_recipe(recipe.validate)
    except ValidationError as e:
        _say(f"failed: {e}")
        return {c: {"status": "failed", "reason": str(e)} for c in recipe.validate["corruptions"]}
    for cfg, problem in configs:
        if cfg is None:
            name = problem.split(":", 1)[0]
            results[name] = {"status": "skipped", "reason": problem}
            _say(f"skipped {problem}")
            continue
        missing = [str(d) for d in (cfg.real_weather, cfg.real_clean) if not Path(d).is_dir()]
        if missing:
            results[cfg.corruption] = {"status": "skipped", "reason": f"real data not found: {', '.join(missing)}"}
            _say(f"skipped {cfg.corruption}: real data not found: {', '.join(missing)}")
            continue
        try:
            report = run_validation(version_dir, cfg, workers=workers, address=address, log=_say)
        except (ValidationError, SourceError) as e:
            results[cfg.corruption] = {"status": "failed", "reason": str(e)}
            _say(f"failed {cfg.corruption}: {e}")
            continue
        results[cfg.corruption] = {"status": "done", "verdict": report["verdict"]["verdict"],
                                   "naturalness": report["naturalness"],
                                   "summary": str(Path(version_dir) / "validation" / cfg.corruption / "summary.md")}
    return results
