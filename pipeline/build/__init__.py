"""`bench-build run` and `status`: the build of a benchmark version on Ray.

`run` (orchestration), `execute` (the scheduling loop), `task` (the Ray task), `finish` (card, contact sheet,
manifest), `status` (progress from the ledger). Ray itself is started and stopped by `bench_build.runtime.ray`.
"""
