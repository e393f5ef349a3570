"""Benchmarks (scripts, not tests), run as `bench-build bench <name>` (`bench_build.bench.cli`): stage costs and
demo builds (`stages`; the cost table's measurements in `costs`, object benchmarks in `objects`), scaling over
workers (`scale`, its hardware control in `control`), readers (`sources`), loaders, layouts, object storage
(`publish`), scoring (`score`). Light on import: each benchmark module is imported by its command."""
