"""The one safe-name rule for every name that becomes part of a path or a partition key.

A benchmark's corruption names become hive directories (``data/corruption=<name>/severity=<s>/``), its
name and version become ``OUT/<name>/<version>``, and source frame ids become file names (KITTI reads
``velodyne/<id>.bin``; `export` writes them). A name that holds ``/``, ``=`` or ``..`` therefore writes
somewhere else, splits a partition key in two for plain pyarrow, or escapes the output; so every such
name is checked once, when the recipe or the source's frame list is loaded, before any work starts.

**A safe name** is 1 to `MAX_NAME_LENGTH` (128) characters of ASCII letters, digits and ``_ - . +``,
starts with a letter or digit, and never contains ``..``. That excludes ``/``, ``\\``, ``=``, spaces
and every other whitespace or control character, a leading ``.`` (hidden files, ``.`` and ``..``) and
the empty name. It is the character set `bench_build.manifests.manifest` already demanded of a published
dataset/version name (`SAFE_NAME`), so a build whose names pass can always be published.

**A frame id** is one safe name or several joined by ``/`` (ModelNet's ``test/00042``, ShapeNet's
``<synset>/<model>``, 3DOS's ``SN1/test/shapenet/<synset>/<model>``: these sources name frames by
their place in the dataset, and the ids are in every fingerprint), at most `MAX_FRAME_ID_LENGTH` (512)
characters. No segment may be empty, so ids never start or end with ``/`` and never hold ``//``. A
frame id that is a file stem (a KITTI split list line) must be a single safe name
(`check_safe_name`), since a ``/`` in it would reach into a sub-folder.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

MAX_NAME_LENGTH = 128
MAX_FRAME_ID_LENGTH = 512
_SEGMENT = rf"[A-Za-z0-9][A-Za-z0-9._+-]{{0,{MAX_NAME_LENGTH - 1}}}"
#: A safe name (see the module docstring): used by the manifest checks as well as at load.
SAFE_NAME = re.compile(rf"\A(?!.*\.\.){_SEGMENT}\Z")
_SAFE_FRAME_ID = re.compile(rf"\A(?!.*\.\.){_SEGMENT}(?:/{_SEGMENT})*\Z")  # a fast path; frame_id_problem decides
RULE = (f"1–{MAX_NAME_LENGTH} characters of A–Z a–z 0–9 _ - . +, starting with a letter or digit, "
        "without '..'")
_ALLOWED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.+")


def _char(c: str) -> str:
    """A character as a reader can see it in a one-line message (control characters by code point)."""
    if c.isprintable() and not c.isspace():
        return repr(c)
    name = unicodedata.name(c, "")
    return f"U+{ord(c):04X}" + (f" ({name.lower()})" if name else " (a control character)")


def name_problem(name: Any) -> str | None:
    """Why ``name`` is not a safe name, in a few words, or None if it is one."""
    if isinstance(name, str) and SAFE_NAME.match(name):  # the common case, in C: listings hold 10⁵ ids
        return None
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a string"
    if not name.strip():
        return "is empty" if not name else "is only whitespace"
    if len(name) > MAX_NAME_LENGTH:
        return f"is {len(name)} characters long (at most {MAX_NAME_LENGTH})"
    if ".." in name:
        return "contains '..'"
    bad = next((c for c in name if c not in _ALLOWED), None)
    if bad is not None:
        return f"contains {_char(bad)}"
    if not name[0].isalnum():
        return f"starts with {name[0]!r}"
    return None


def frame_id_problem(frame_id: Any) -> str | None:
    """Why ``frame_id`` is not a safe frame id (safe names joined by ``/``), or None if it is one."""
    if not isinstance(frame_id, str):
        return f"is a {type(frame_id).__name__}, not a string"
    if len(frame_id) > MAX_FRAME_ID_LENGTH:
        return f"is {len(frame_id)} characters long (at most {MAX_FRAME_ID_LENGTH})"
    if _SAFE_FRAME_ID.match(frame_id):
        return None
    if frame_id and "/" in frame_id.strip("/") and all(frame_id.split("/")):
        for part in frame_id.split("/"):
            if (why := name_problem(part)) is not None:
                return f"has a part {part!r} that {why}"
        return None
    return name_problem(frame_id)


def check_safe_name(name: Any, what: str, error: type[ValueError] = ValueError) -> str:
    """``name`` if it is a safe name, else ``error("<what> <name> <why>; a name is <RULE>")``; ``what`` says
    where it came from (``"recipe.toml: corruption"``), so the message names the file and the field."""
    why = name_problem(name)
    if why is not None:
        raise error(f"{what} {name!r} {why}; a name is {RULE}")
    return name


def frame_id_message(frame_id: Any, why: str) -> str:
    """The one-line reason a frame id is refused (the caller puts the file it came from first)."""
    return f"frame id {frame_id!r} {why}; a frame id is safe names ({RULE}) joined by '/'"
