"""`LocalStore`: a version in a local directory (flock writer lock, fsync + rename + directory fsync, `os.link`
create-if-absent)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench_build.storage.base import ObjectInfo, Progress, StagedFile, Store, StoreSpec, check_key, overlap_uploads
from bench_build.storage.errors import NotFound, PreconditionFailed, StorageError, VersionLocked
from bench_build.storage.files import (
    HASH_CHUNK,
    atomic_write_text,
    fsync_dir,
    fsync_replace,
    fsync_replace_named,
    make_dirs,
    mkstemp_in,
    refuse_non_directory,
    refuse_unwritable,
    replace_durably,
    sha256_file,
)
from bench_build.storage.owners import (
    LOCK_NAME,
    TEMP_IDLE,
    describe_holder,
    elsewhere_hint,
    glob_escape,
    owner_info,
    remove_dead_temps,
)
from bench_build.storage.uploads import BackgroundUploads


# -- local -----------------------------------------------------------------------------------------
class LocalStore(Store):
    is_local = True

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        # the spec re-opens the store in other processes: Ray workers, whose working directory is not the driver's
        # on a cluster it joined, so a relative root is resolved here (messages keep the root as it was given)
        self.spec = StoreSpec(os.path.abspath(self.root))
        self._uploads: BackgroundUploads | None = None

    @property
    def url(self) -> str:
        return str(self.root)

    def background_uploads(self, depth: int = 2) -> BackgroundUploads:
        """A finished file's fsync and rename run on a background thread while the caller computes the next
        file (its size and sha256 are taken first, by the caller): the worker's core is not idle while the disk
        flushes. Until ``finish()`` a staged file may still be under its temp name; it never has its final name
        before its bytes are on disk. ``BENCH_BUILD_OVERLAP_UPLOADS=0`` commits in place instead."""
        self._uploads = BackgroundUploads(depth if overlap_uploads() else None)
        return self._uploads

    def end_background_uploads(self) -> None:
        if self._uploads is not None:
            self._uploads.abandon()

    def path(self, key: str) -> Path:
        return self.root / check_key(key) if key else self.root

    def key_url(self, key: str) -> str:
        return str(self.path(key))

    def child(self, rel: str) -> LocalStore:
        return LocalStore(self.path(rel))

    def refuse_non_directory(self, what: str) -> None:
        """`refuse_non_directory` of the root."""
        refuse_non_directory(self.root, what)

    def refuse_unwritable(self, what: str) -> None:
        """`refuse_unwritable` of the root: for a command about to write under it."""
        refuse_unwritable(self.root, what)

    @staticmethod
    def _etag(st: os.stat_result) -> str:
        # a rename gives a new inode, so any atomic replacement changes the etag
        return f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"

    def head(self, key: str) -> ObjectInfo | None:
        try:
            st = self.path(key).stat()
        except (FileNotFoundError, NotADirectoryError):  # a path under a file does not exist either
            return None
        if not os.path.isfile(self.path(key)):
            return None
        return ObjectInfo(key, st.st_size, self._etag(st))

    def get(self, key: str) -> tuple[bytes, str | None] | None:
        p = self.path(key)
        try:
            with open(p, "rb") as f:
                etag = self._etag(os.fstat(f.fileno()))
                return f.read(), etag
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def iter_chunks(self, key: str, chunk: int = HASH_CHUNK) -> Iterator[bytes]:
        try:
            f = open(self.path(key), "rb")
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"{self.path(key)}: not found") from None
        with f:
            while data := f.read(chunk):
                yield data

    def sha256(self, key: str) -> str:
        return sha256_file(self.path(key))

    def open_input(self, key: str):
        return open(self.path(key), "rb")

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        base = self.path(prefix)
        if base.is_file():
            yield ObjectInfo(prefix, base.stat().st_size)
            return
        if not base.is_dir():
            return
        for p in sorted(base.rglob("*")):
            if p.is_file() and not p.name.startswith("."):  # temp and lock files are not objects
                yield ObjectInfo(p.relative_to(self.root).as_posix(), p.stat().st_size)

    def list_dirs(self, prefix: str = "") -> list[str]:
        base = self.path(prefix)
        return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")) \
            if base.is_dir() else []

    def _temp(self, path: Path) -> str:
        make_dirs(path.parent)
        fd, tmp = mkstemp_in(path.parent, path.name)
        os.close(fd)
        return tmp

    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False, if_match: str | None = None,
                  sha256: str | None = None) -> str | None:
        path = self.path(key)
        tmp = self._temp(path)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if if_absent:
                try:
                    os.link(tmp, path)  # atomic create-if-absent of a complete file
                except FileExistsError:
                    raise PreconditionFailed(f"{path}: already exists") from None
                fsync_dir(path.parent)
            elif if_match is not None:
                with self._lock(path):
                    cur = self.head(key)
                    if cur is None or cur.etag != if_match:
                        raise PreconditionFailed(f"{path}: changed since it was read")
                    replace_durably(tmp, path)
            else:
                replace_durably(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)
        return self._etag(path.stat())

    @contextlib.contextmanager
    def _lock(self, path: Path) -> Iterator[None]:
        lock = path.parent / f".{path.name}.lock"
        with open(lock, "a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def write_text(self, key: str, text: str) -> None:
        atomic_write_text(self.path(key), text)

    def _copy(self, src: Path, dst: Path, progress: Progress | None) -> None:
        tmp = self._temp(dst)
        try:
            with open(src, "rb") as fi, open(tmp, "wb") as fo:
                while data := fi.read(HASH_CHUNK):
                    fo.write(data)
                    if progress:
                        progress(len(data))
            fsync_replace(tmp, dst)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def upload_file(self, local: str | Path, key: str, *, sha256: str | None = None,
                    progress: Progress | None = None) -> None:
        self._copy(Path(local), self.path(key), progress)

    def copy_from(self, src: Store, src_key: str, key: str, *, sha256: str, local: Path | None = None) -> str:
        """A hard link when both are local (same filesystem): no bytes written. Published and built files are
        never modified in place (every writer replaces a file by rename), so a link shares bytes, not fate:
        deleting the other version's directory leaves this one whole. Else (another filesystem, S3) a copy."""
        if not isinstance(src, LocalStore):
            return super().copy_from(src, src_key, key, sha256=sha256)
        source, dst = src.path(src_key), self.path(key)
        if not source.is_file():
            raise NotFound(f"{source}: not found")
        if sha256_file(source) != sha256:  # `run --reuse` then computes the file instead (`reuse.place_files`)
            raise StorageError(f"{source}: sha256 is not the {sha256} its manifest lists (the file is damaged or "
                               "was altered)")
        tmp = Path(self._temp(dst))  # a dead-temp-style name (owner tagged), freed for the link to take it
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:  # another filesystem, or links not allowed: copy
            tmp.unlink(missing_ok=True)
            return super().copy_from(src, src_key, key, sha256=sha256)
        try:
            replace_durably(tmp, dst)  # the source was fsynced when it was written: only the new name needs it
        finally:
            tmp.unlink(missing_ok=True)
        return "linked"

    def download_file(self, key: str, local: str | Path, *, progress: Progress | None = None) -> None:
        src = self.path(key)
        if not src.is_file():
            raise NotFound(f"{src}: not found")
        self._copy(src, Path(local), progress)

    def delete(self, key: str) -> None:
        """Delete ``key`` durably: the directory is fsynced after the unlink, so a power loss cannot bring back a
        manifest or ledger entry the caller deleted before writing what contradicts it."""
        path = self.path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(path.parent)

    def delete_prefix(self, prefix: str) -> None:
        p = self.path(prefix)
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        elif p.exists() or p.is_symlink():
            p.unlink(missing_ok=True)
        else:
            return
        fsync_dir(p.parent)

    @contextlib.contextmanager
    def staged_file(self, key: str) -> Iterator[StagedFile]:
        path = self.path(key)
        make_dirs(path.parent)
        # left by a killed earlier attempt; a live writer's temp (another run) is never touched
        remove_dead_temps(path.parent, f".{glob_escape(path.name)}.*.tmp")
        tmp = Path(self._temp(path))
        staged = StagedFile(key, tmp)
        handed_over = False
        try:
            yield staged
            staged.size, staged.sha256 = tmp.stat().st_size, sha256_file(tmp)
            if self._uploads is not None and self._uploads.active:  # fsync + rename while the next file is computed
                self._uploads.submit(lambda: fsync_replace_named(tmp, path), tmp)
                handed_over = True
            else:
                fsync_replace(tmp, path)
        finally:
            if not handed_over:
                tmp.unlink(missing_ok=True)
        staged.path = path


    @contextlib.contextmanager
    def writer_lock(self, purpose: str, *, force: bool = False) -> Iterator[dict[str, Any]]:
        """``flock`` on ``<root>/.bench-build.lock``: released by the kernel when the holder dies (never stale).

        The lock file is never deleted (deleting it would let a second writer lock a new inode while
        the first still holds the old one); it holds the holder's pid/host/command while locked. ``force`` has
        no meaning here: the kernel already frees the lock of a dead holder, and on a shared file system the file
        server frees that of a dead host (no other host can break it; `elsewhere_hint` says when)."""
        make_dirs(self.root)
        path = self.root / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by child processes (PEP 446)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other: dict[str, Any] = {}
                for _ in range(20):  # the holder writes its name just after locking: give it a moment
                    with contextlib.suppress(OSError, ValueError):
                        other = json.loads(path.read_text() or "{}")
                    if other:
                        break
                    time.sleep(0.05)
                raise VersionLocked(describe_holder(str(self.root), other) + elsewhere_hint(other)) from None
            me = owner_info(purpose)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode(), 0)
            try:
                yield me
            finally:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def writer_holder(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.root / LOCK_NAME).read_text() or "null")
        except (OSError, ValueError):
            return None

    def remove_dead_temps(self, owner: dict[str, Any] | None = None) -> int:
        """Delete every temp file under the root whose owner is dead; how many. With ``owner``, the record
        `writer_lock` yielded to a caller still holding the lock, also every temp file unchanged for `TEMP_IDLE`
        seconds, whatever host wrote it (`remove_dead_temps` says why that is sound): call it then before this
        run writes anything, so none of the run's own temp files exists yet."""
        if owner is not None and not self.still_writer(owner):
            raise StorageError(f"{self.root}: not holding its writer lock; refusing to remove others' temp files")
        return remove_dead_temps(self.root, ".*.tmp", recursive=True, idle=TEMP_IDLE if owner is not None else None)
