"""Scoring a model on a built benchmark with its paper's metrics (``bench-build score``).

One module per paper: `modelnet_c` (Ren et al.), `kitti_c` + `kitti_eval` (boxes and overlaps:
`kitti_boxes`) + `bug_rates` (Li et al.), `robo3d` (Kong et al.), `modelnet40_e`, `open_set` (3DOS). The
papers' baseline tables are data files in ``baselines/`` with their citations. `run.score_version` ties them
to a version's ground truth and a prediction file (`predictions` documents the formats).
"""

from bench_build.score.predictions import PredictionError
from bench_build.score.run import METRICS, ScoreReport, score_version

__all__ = ["METRICS", "PredictionError", "ScoreReport", "score_version"]
