"""``python -m pipeline.cli``: the same command line as ``bench-build``."""

from pipeline.cli import app

if __name__ == "__main__":
    app(prog_name="bench-build")
