"""Orchestration: CLI, sources, planning, Ray execution, shard writing, ledger, reader, benchmarks."""

__version__ = "0.1.0"
