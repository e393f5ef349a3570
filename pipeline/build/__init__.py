"""`bench-build run` and `status`: the build of a benchmark version on Ray.

`run` (orchestration), `execute` (the scheduling loop), `task` (the Ray task), `finish` (card, contact sheet,
manifest), `status` (progress from the ledger). Ray itself is started and stopped by `pipeline.runtime.ray`.
"""

from pipeline.build.finish import reuse_card_section, write_manifest
from pipeline.build.run import DEMO_FRAMES, DEMO_FRAMES_PER_SHARD, DEMO_OBJECTS_PER_SHARD, BuildResult, run_build
from pipeline.build.status import build_status
from pipeline.build.task import describe_task_error, run_shard
from pipeline.runtime.faults import TEST_KILL_ENV
from pipeline.runtime.ray import init_ray

__all__ = ["DEMO_FRAMES", "DEMO_FRAMES_PER_SHARD", "DEMO_OBJECTS_PER_SHARD", "TEST_KILL_ENV", "BuildResult",
           "build_status", "describe_task_error", "init_ray", "reuse_card_section", "run_build", "run_shard",
           "write_manifest"]
