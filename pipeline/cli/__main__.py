"""``python -m bench_build.cli``: the same command line as ``bench-build``."""

from bench_build.cli import app

if __name__ == "__main__":
    app(prog_name="bench-build")
