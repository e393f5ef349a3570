"""JSON text from a file, parsed so that what ``json.loads`` raises on *valid* JSON names the file and the line.

Python's parser refuses two kinds of valid JSON with exceptions that name nothing: an integer of more digits than
``int()`` converts (a plain ``ValueError``) and arrays or objects nested deeper than it recurses (a
``RecursionError``, a traceback). Every reader of a JSON file a user hands over or a store holds — predictions,
results files, a manifest — parses through `loads`, which turns both into its caller's one-line error.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from bench_build.errors import BenchBuildError


def loads(path: str | Path, text: str | bytes, lineno: int | None = None, *, error: type[Exception],
          **options: Any) -> Any:
    """``json.loads(text, **options)``: line ``lineno`` of ``path``, or (None) the whole file. Text that is not JSON
    raises its ``JSONDecodeError`` (each reader says what it expected), bytes that are not text their
    ``UnicodeDecodeError``, and an error an option's hook raises goes through; what ``json.loads`` raises on valid
    JSON is an ``error`` naming the file and the line."""
    try:
        return json.loads(text, **options)
    except (json.JSONDecodeError, UnicodeDecodeError, BenchBuildError):
        raise
    except ValueError:  # an integer past Python's digit limit for int(), which json.loads calls
        text = _as_text(text)
        limit = sys.get_int_max_str_digits()
        # the integer's line: the first run of more digits outside a string that is no fraction or exponent
        long = re.compile(rf'"(?:[^"\\]|\\.)*"|(?<![\d.eE+])(?<![eE]-)(\d{{{limit + 1},}})(?![\d.eE])')
        at = lineno or next((_line_at(text, m.start()) for m in long.finditer(text) if m.group(1)), 1)
        raise error(f"{path}: line {at}: an integer of more than {limit} digits, not a finite number") from None
    except RecursionError:
        text = _as_text(text)
        depth, pos = _deepest(text)
        raise error(f"{path}: line {lineno or _line_at(text, pos)}: JSON nested {depth} levels deep, deeper than "
                    "Python's JSON parser reads") from None


def _as_text(text: str | bytes) -> str:
    """The text json.loads parsed (it read bytes as UTF-8, -16 or -32; UTF-8 is what bench-build writes)."""
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else text


#: the tokens that nest JSON, strings skipped whole (a bracket inside one nests nothing)
_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[{]|[\]}]')


def _deepest(text: str) -> tuple[int, int]:
    """(the deepest nesting of arrays and objects in ``text``, the offset where it is first reached)."""
    depth = deepest = at = 0
    for m in _NESTING.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > deepest:
                deepest, at = depth, m.start()
        elif c in "]}":
            depth -= 1
    return deepest, at


def _line_at(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1
