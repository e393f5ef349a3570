"""Naturalness validation of simulated corruptions (Li et al. §IV-A, Tables III–IV, Appendix B-A).

A PointNet classifier is trained on real adverse-weather vs real clean scans (STF for fog, Boreas or WADS for
snow), then tested on the build's clean and simulated partitions: accuracy on the simulated data is
the naturalness. Its global features are embedded with t-SNE and compared with MMD. With WADS's labelled
snow, `realism` also compares the simulated snow points with real ones, point by point. See `run` for
the steps and outputs; `bench-build validate` is the command.
"""

from bench_build.validate.config import ValidateConfig, ValidationError
from bench_build.validate.hook import validate_after_build
from bench_build.validate.preflight import preflight
from bench_build.validate.run import run_validation

__all__ = ["ValidateConfig", "ValidationError", "preflight", "run_validation", "validate_after_build"]
