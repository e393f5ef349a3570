"""No tracked Python file points readers at files a clone does not have (design notes kept outside the
repository: ``PHYSICS.md``, ``ARCHITECTURE.md``, ``../shared/…``). The Markdown side is in tests/test_docs.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = ("PHYSICS.md", "ARCHITECTURE.md", "generators.md", "../shared")
#: the real recordings beside a development checkout (a nuScenes sweep, a WADS scan, the authors' category table)
#: are test data, not documentation: tests read them when present and skip in a clone, so naming them is allowed
DATA = ("../shared/real", '"shared" / "real"', '"shared" / "spec"', "../shared/spec not present")


def test_no_python_file_refers_to_files_outside_the_repository():
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    # this test and the doc test name what they look for
    skip = {Path(__file__).resolve().relative_to(ROOT).as_posix(), "tests/test_docs.py"}
    bad = [f"{f}:{n}: {o}" for f in files if f not in skip
           for n, line in enumerate((ROOT / f).read_text().splitlines(), 1) for o in OUTSIDE
           if o in line and not any(d in line for d in DATA)]
    assert not bad, f"{len(bad)} references to files a clone does not have:\n" + "\n".join(bad[:50])
