"""The numeric pin's NumPy part on every supported NumPy line: the AVX-512 targets it disables come from the
installed NumPy's own dispatch list, and the test is the effect (what a pinned process dispatches), not names.

Needs only NumPy and pytest, so it also runs in a bare NumPy 2 environment
(``python -m pytest tests/pipeline/test_numeric_pin.py`` from a checkout, with ``PYTHONPATH=.``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench_build.runtime.numeric import (
    NumericPinError,
    avx512_targets,
    cpu_has_avx512,
    is_avx512_target,
    numpy_dispatch_targets,
    pin,
)

ROOT = Path(__file__).resolve().parents[2]

# NumPy's x86-64 dispatch lists, as each line's wheels report them (``_multiarray_umath.__cpu_dispatch__``)
NUMPY_1_26 = ["SSSE3", "SSE41", "POPCNT", "SSE42", "AVX", "F16C", "FMA3", "AVX2", "AVX512F", "AVX512CD",
              "AVX512_KNL", "AVX512_KNM", "AVX512_SKX", "AVX512_CLX", "AVX512_CNL", "AVX512_ICL"]
NUMPY_2_0 = [*NUMPY_1_26, "AVX512_SPR"]
NUMPY_2_5 = ["X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"]


def test_each_numpy_lines_avx512_targets_are_derived_from_its_dispatch_list():
    assert avx512_targets(NUMPY_1_26, "x86_64") == NUMPY_1_26[8:]
    assert avx512_targets(NUMPY_2_0, "x86_64") == NUMPY_2_0[8:]
    assert avx512_targets(NUMPY_2_5, "x86_64") == ["X86_V4", "AVX512_ICL", "AVX512_SPR"]
    assert avx512_targets(["ASIMD", "ASIMDHP", "SVE"], "aarch64") == []  # no AVX-512 outside x86-64


def test_a_dispatch_target_the_pin_cannot_judge_fails_loudly():
    with pytest.raises(NumericPinError, match=r"NumPy dispatches X86_V5 AVX10_2.*BENCH_BUILD_NUMERIC_PIN=off"):
        avx512_targets([*NUMPY_2_5, "X86_V5", "AVX10_2"], "x86_64")


def test_the_pin_disables_exactly_the_installed_numpys_avx512_targets():
    dispatch = numpy_dispatch_targets()
    assert dispatch and all(isinstance(t, str) for t in dispatch)
    assert pin()["NPY_DISABLE_CPU_FEATURES"].split() == [t for t in dispatch if is_avx512_target(t)]


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items()
            if k not in ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES", "BENCH_BUILD_NUMERIC_PIN")}
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code], env=full | env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(not cpu_has_avx512(), reason="the effect is visible only on a CPU with AVX-512")
def test_a_pinned_process_dispatches_no_avx512_target_and_numpy_warns_of_no_unknown_name(tmp_path):
    """The effect, on this machine's NumPy: a process that pins before importing NumPy (as the CLI does) has no
    AVX-512 target active, while an unpinned one has; NumPy raises no warning about a name it does not dispatch
    (``-W error``: NumPy 2 warns when asked to disable a target it does not know)."""
    code = ("import json; from bench_build.runtime.numeric import pin_environment; pin_environment(); "
            "from bench_build.runtime.numeric import active_simd; print(json.dumps(active_simd()))")
    pinned = _run(code, {"BENCH_BUILD_CACHE": str(tmp_path)})
    assert pinned.returncode == 0, pinned.stderr
    active = json.loads(pinned.stdout)
    assert active and not [t for t in active if is_avx512_target(t)], active
    unpinned = _run(code, {"BENCH_BUILD_CACHE": str(tmp_path), "BENCH_BUILD_NUMERIC_PIN": "off"})
    assert unpinned.returncode == 0, unpinned.stderr
    assert [t for t in json.loads(unpinned.stdout) if is_avx512_target(t)]


def test_the_dispatch_list_is_read_without_importing_numpy_and_cached_per_numpy_install(tmp_path):
    code = ("import json, sys; from bench_build.runtime.numeric import numpy_dispatch_targets; "
            "d = numpy_dispatch_targets(); "
            "print(json.dumps({'dispatch': d, 'numpy_imported': 'numpy' in sys.modules}))")
    first = _run(code, {"BENCH_BUILD_CACHE": str(tmp_path)})
    assert first.returncode == 0, first.stderr
    got = json.loads(first.stdout)
    assert got == {"dispatch": numpy_dispatch_targets(), "numpy_imported": False}
    cache = json.loads((tmp_path / "numpy-dispatch.json").read_text())
    assert cache["dispatch"] == got["dispatch"] and "_multiarray_umath" in cache["key"]
    # a second process reads the cache (a planted list shows it was not probed again)
    (tmp_path / "numpy-dispatch.json").write_text(json.dumps({**cache, "dispatch": ["AVX2", "AVX512F"]}))
    second = _run(code, {"BENCH_BUILD_CACHE": str(tmp_path)})
    assert json.loads(second.stdout)["dispatch"] == ["AVX2", "AVX512F"]
