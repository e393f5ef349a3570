"""The run ledger: which shards of a build are done (with what bytes) or failed (with what error).

Layout under ``OUT/<benchmark>/<version>/_ledger/``::

    run.json                       fingerprint, recipe, frame list and shard count of this build
    shards/part-00003-of-00117.json         done: files (path, rows, bytes, sha256, seconds), run id
    shards/part-00004-of-00117.failed.json  failed: the error message (naming the bad file)

Every ledger file is written to a temporary name and renamed, so a kill at any moment leaves either
the old entry or the new one. A shard counts as done only if its entry has the build's fingerprint
and every file it lists is still on disk with the recorded size and sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HASH_CHUNK = 8 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temp file in the same dir, fsync, rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class LedgerMismatch(RuntimeError):
    """The output directory holds a build of a different recipe/frame list."""


@dataclass
class Ledger:
    root: Path  # the version directory (OUT/<benchmark>/<version>)

    @property
    def dir(self) -> Path:
        return self.root / "_ledger"

    def _entry(self, shard: str, failed: bool = False) -> Path:
        return self.dir / "shards" / (f"{shard}.failed.json" if failed else f"{shard}.json")

    # -- run ---------------------------------------------------------------------------------
    def run_info(self) -> dict[str, Any] | None:
        p = self.dir / "run.json"
        return json.loads(p.read_text()) if p.is_file() else None

    def begin(self, info: dict[str, Any], *, overwrite: bool = False) -> None:
        """Record the build's identity; refuse to mix with a different build unless ``overwrite``."""
        old = self.run_info()
        if old is not None and old["fingerprint"] != info["fingerprint"]:
            if not overwrite:
                raise LedgerMismatch(
                    f"{self.root} holds a build with fingerprint {old['fingerprint'][:12]} "
                    f"(recipe, frames or shard size differ from this run's {info['fingerprint'][:12]}); "
                    "pass --overwrite to replace it, or choose another --out"
                )
            self.clear()
        elif old is None and overwrite:
            self.clear()
        atomic_write_text(self.dir / "run.json", json.dumps(info, indent=1, sort_keys=True))

    def clear(self) -> None:
        """Delete a previous build's data, manifest and ledger (for --overwrite)."""
        import shutil

        for sub in ("clean", "data", "_ledger", "validation"):
            shutil.rmtree(self.root / sub, ignore_errors=True)
        for name in ("manifest.json", "README.md"):
            (self.root / name).unlink(missing_ok=True)

    # -- shards -------------------------------------------------------------------------------
    def record_done(self, shard: str, entry: dict[str, Any]) -> None:
        atomic_write_text(self._entry(shard), json.dumps({"status": "done", **entry}, indent=1, sort_keys=True))
        self._entry(shard, failed=True).unlink(missing_ok=True)

    def record_failed(self, shard: str, entry: dict[str, Any]) -> None:
        atomic_write_text(self._entry(shard, failed=True),
                          json.dumps({"status": "failed", **entry}, indent=1, sort_keys=True))

    def done_entry(self, shard: str) -> dict[str, Any] | None:
        p = self._entry(shard)
        return json.loads(p.read_text()) if p.is_file() else None

    def failed_entry(self, shard: str) -> dict[str, Any] | None:
        p = self._entry(shard, failed=True)
        return json.loads(p.read_text()) if p.is_file() else None

    def check_done(self, shard: str, fingerprint: str, recheck: str = "sha256") -> tuple[bool, str]:
        """Is ``shard`` done for this fingerprint with its files intact? (ok, reason if not)."""
        entry = self.done_entry(shard)
        if entry is None:
            return False, "not built"
        if entry.get("fingerprint") != fingerprint:
            return False, "built with another fingerprint"
        for f in entry["files"]:
            path = self.root / f["path"]
            if not path.is_file():
                return False, f"{f['path']} is missing"
            if path.stat().st_size != f["bytes"]:
                return False, f"{f['path']} has {path.stat().st_size} bytes, the ledger recorded {f['bytes']}"
            if recheck == "sha256" and sha256_file(path) != f["sha256"]:
                return False, f"{f['path']} does not match its recorded sha256"
        return True, ""
