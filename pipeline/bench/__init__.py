"""Benchmarks (scripts, not tests), run as `bench-build bench <name>` (`bench_build.bench.cli`): stage costs
(`stages`), scaling over workers (`scale`), readers (`sources`), loaders, layouts, object storage (`publish`),
scoring (`score`). Light on import: each benchmark module is imported by its command."""
